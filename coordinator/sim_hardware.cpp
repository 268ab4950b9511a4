#include "coordinator/sim_hardware.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <optional>

#include "common/error.h"
#include "kvstore/capacity.h"

namespace tp {

void HardwareCard::validate(const std::string& where) const {
  auto need = [&](bool ok, const char* field, const std::string& why) {
    if (!ok) throw ConfigError(where, field, why);
  };
  auto frac = [&](double v, const char* field) {
    need(std::isfinite(v) && v > 0 && v <= 1, field, "must be in (0, 1], got " + std::to_string(v));
  };
  need(!name.empty(), "name", "missing");
  need(memory_bytes > 0, "memory", "must be > 0");
  need(reserve_bytes >= 0 && reserve_bytes < memory_bytes, "reserve", "must be in [0, memory)");
  need(std::isfinite(peak_bf16_flops) && peak_bf16_flops > 0, "peak_bf16_tflops", "must be > 0");
  need(std::isfinite(peak_fp8_flops) && peak_fp8_flops >= 0, "peak_fp8_tflops", "must be >= 0");
  need(std::isfinite(mem_Bps) && mem_Bps > 0, "hbm_tbps", "must be > 0");
  frac(mem_efficiency, "mem_efficiency");
  frac(compute_efficiency, "compute_efficiency");
  frac(attention_efficiency, "attention_efficiency");
  need(std::isfinite(m_half) && m_half >= 0, "m_half", "must be >= 0");
  need(devices_per_node >= 1, "devices_per_node", "must be >= 1");
  need(intra.bandwidth_Bps > 0, "intra_node_gbps", "must be > 0");
  need(inter.bandwidth_Bps > 0, "inter_node_gbps", "must be > 0");
  need(intra.latency_s >= 0, "intra_node_latency_us", "must be >= 0");
  need(inter.latency_s >= 0, "inter_node_latency_us", "must be >= 0");
  need(std::isfinite(step_overhead_s) && step_overhead_s >= 0, "step_overhead_us", "must be >= 0");
  need(std::isfinite(token_overhead_s) && token_overhead_s >= 0, "token_overhead_us", "must be >= 0");
  need(std::isfinite(logit_overhead_s) && logit_overhead_s >= 0, "logit_overhead_us", "must be >= 0");
  need(act_bytes == 2 || act_bytes == 4, "act_bytes", "must be 2 or 4");
}

HardwareCard load_hardware_card(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw InputError("hardware card " + path + ": cannot read the file");
  } catch (const YAML::Exception& e) {
    throw ConfigError(path, "<yaml>", "not valid YAML: " + e.msg + " (line " + std::to_string(e.mark.line + 1) + ")");
  }
  if (!root.IsMap()) throw ConfigError(path, "<yaml>", "expected a mapping of fields");
  auto num = [&](const char* key, std::optional<double> dflt = std::nullopt) -> double {
    const YAML::Node n = root[key];
    if (!n) {
      if (dflt) return *dflt;
      throw ConfigError(path, key, "missing");
    }
    try {
      return n.as<double>();
    } catch (const YAML::Exception&) {
      throw ConfigError(path, key, "not a number: '" + n.as<std::string>("?") + "'");
    }
  };
  auto size = [&](const char* key, const char* dflt) -> int64_t {
    const YAML::Node n = root[key];
    if (!n && !dflt) throw ConfigError(path, key, "missing");
    const std::string text = n ? n.as<std::string>("") : std::string(dflt);
    try {
      return parse_byte_size(text, key);
    } catch (const InputError& e) {
      throw ConfigError(path, key, e.what());
    }
  };
  HardwareCard c;
  c.name = root["name"] ? root["name"].as<std::string>("") : "";
  c.memory_bytes = size("memory", nullptr);
  c.reserve_bytes = size("reserve", "3GiB");
  c.peak_bf16_flops = num("peak_bf16_tflops") * 1e12;
  c.peak_fp8_flops = num("peak_fp8_tflops", 0.0) * 1e12;
  c.mem_Bps = num("hbm_tbps") * 1e12;
  c.mem_efficiency = num("mem_efficiency");
  c.compute_efficiency = num("compute_efficiency");
  c.m_half = num("m_half");
  c.attention_efficiency = num("attention_efficiency");
  const double dpn = num("devices_per_node");
  if (dpn != std::floor(dpn)) throw ConfigError(path, "devices_per_node", "must be a whole number");
  c.devices_per_node = int64_t(dpn);
  c.intra = {num("intra_node_gbps") * 1e9, num("intra_node_latency_us") * 1e-6};
  c.inter = {num("inter_node_gbps") * 1e9, num("inter_node_latency_us") * 1e-6};
  c.step_overhead_s = num("step_overhead_us") * 1e-6;
  c.token_overhead_s = num("token_overhead_us", 0.0) * 1e-6;
  c.logit_overhead_s = num("logit_overhead_us", 0.0) * 1e-6;
  c.act_bytes = int64_t(num("act_bytes", 2.0));
  c.validate(path);
  return c;
}

}  // namespace tp
