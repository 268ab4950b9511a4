// Config parsing: defaults, every section, and one clear error per kind of bad input (a section or key given
// twice, a directory for a file, a max_context beyond the model's); format_config prints every setting as
// YAML that reads back to the same values.
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"

namespace tp {
namespace {

std::string error_of(const std::string& yaml) {
  try {
    parse_config(yaml, "test.yaml", "/base");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Config, EmptyGivesDefaults) {
  const Config c = parse_config("", "test.yaml", "/base");
  EXPECT_EQ(c.parallel.tp, 1);
  EXPECT_EQ(c.cache.block_size, 16);
  EXPECT_EQ(c.cache.dtype, "bf16");
  EXPECT_EQ(c.server.host, "127.0.0.1");
  EXPECT_EQ(c.model.path, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
}

TEST(Config, ReadsEverySection) {
  const Config c = parse_config(R"(
model: {path: /m.gguf, dtype: f32, name: smol}
parallel: {tp: 3, dp: 2, threads: 1}
cache: {block_size: 32, memory_mb: 100, dtype: int8, max_context: 4096, prefix_caching: false}
scheduler: {max_num_seqs: 8, max_num_batched_tokens: 512, max_queued_requests: 9, kv_reservation: static}
server: {host: 0.0.0.0, port: 9000, api_key: k, max_body_bytes: 1000, shutdown_deadline_s: 2.5, step_timeout_s: 7, request_timeout_s: 9, max_connections: 12}
)",
                                "test.yaml", "/base");
  EXPECT_EQ(c.model.path, "/m.gguf");
  EXPECT_EQ(c.model.dtype, "f32");
  EXPECT_EQ(c.model.name, "smol");
  EXPECT_EQ(c.parallel.tp, 3);
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(c.parallel.threads, 1);
  EXPECT_EQ(c.cache.block_size, 32);
  EXPECT_EQ(c.cache.memory_mb, 100);
  EXPECT_EQ(c.cache.dtype, "int8");
  EXPECT_EQ(c.cache.max_context, 4096);
  EXPECT_FALSE(c.cache.prefix_caching);
  EXPECT_EQ(c.scheduler.max_num_seqs, 8);
  EXPECT_EQ(c.scheduler.max_num_batched_tokens, 512);
  EXPECT_EQ(c.scheduler.max_queued_requests, 9);
  EXPECT_EQ(c.scheduler.kv_reservation, "static");
  EXPECT_EQ(c.server.host, "0.0.0.0");
  EXPECT_EQ(c.server.port, 9000);
  EXPECT_EQ(c.server.api_key, "k");
  EXPECT_EQ(c.server.max_body_bytes, 1000);
  EXPECT_DOUBLE_EQ(c.server.shutdown_deadline_s, 2.5);
  EXPECT_DOUBLE_EQ(c.server.step_timeout_s, 7.0);
  EXPECT_DOUBLE_EQ(c.server.request_timeout_s, 9.0);
  EXPECT_EQ(c.server.max_connections, 12);
}

TEST(Config, RelativeModelPathResolvesAgainstBaseDir) {
  EXPECT_EQ(parse_config("model: {path: ../models/x.gguf}", "t", "/repo/configs").model.path, "/repo/models/x.gguf");
}

struct BadCase {
  const char* yaml;
  const char* expected;  // substring of the error
};

class ConfigErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(ConfigErrors, NameFileKeyAndReason) {
  const std::string err = error_of(GetParam().yaml);
  EXPECT_NE(err.find("test.yaml: "), std::string::npos) << err;
  EXPECT_NE(err.find(GetParam().expected), std::string::npos) << err;
}

INSTANTIATE_TEST_SUITE_P(
    All, ConfigErrors,
    ::testing::Values(BadCase{"modle: {}", "modle: unknown section"},
                      BadCase{"model: {pth: x}", "model.pth: unknown key (valid: chat_template, device, dtype, name, path, quantized)"},
                      BadCase{"parallel: {tp: two}", "parallel.tp: expected an integer, got 'two'"},
                      BadCase{"parallel: {tp: 0}", "parallel.tp: 0 is out of range [1, 4096]"},
                      BadCase{"parallel: {tp: [1, 2]}", "parallel.tp: expected an integer"},
                      BadCase{"cache: {block_size: 12}", "cache.block_size: 12 is not a power of two"},
                      BadCase{"cache: {prefix_caching: maybe}", "cache.prefix_caching: expected true or false"},
                      BadCase{"model: {dtype: f8}", "model.dtype: 'f8' is not one of: bf16, f32"},
                      BadCase{"cache: {dtype: fp8}", "cache.dtype: 'fp8' is not one of: bf16, f32, fp8_e4m3, int8"},
                      BadCase{"cache: {dtype: 8}", "cache.dtype: '8' is not one of: bf16, f32, fp8_e4m3, int8"},
                      BadCase{"model: {device: gpu}", "model.device: 'gpu' is not one of: cpu, cuda"},
                      BadCase{"cache: {gpu_memory_utilization: 0}", "cache.gpu_memory_utilization: 0 is out of range (0, 1]"},
                      BadCase{"cache: {gpu_memory_utilization: 1.5}", "cache.gpu_memory_utilization: 1.5 is out of range"},
                      BadCase{"cache: {gpu_memory_utilization: most}", "cache.gpu_memory_utilization: expected a number"},
                      BadCase{"scheduler: {kv_reservation: lazy}", "scheduler.kv_reservation: 'lazy' is not one of: paged, static"},
                      BadCase{"server: {port: 70000}", "server.port: 70000 is out of range [0, 65535]"},
                      BadCase{"server: {shutdown_deadline_s: -1}", "server.shutdown_deadline_s: -1 is out of range"},
                      BadCase{"server: {step_timeout_s: -2}", "server.step_timeout_s: -2 is out of range"},
                      BadCase{"server:\n  metrics_prefix: prom",
                              "server.metrics_prefix: 'prom' is not one of: vllm, tpserve (line 2)"},
                      // found by tests/fuzz/config_fuzz: non-scalar keys escaped as yaml-cpp exceptions
                      BadCase{"{[a]: 1}", "a section name must be a plain name"},
                      BadCase{"model: {[a]: 1}", "model: a key must be a plain name"},
                      BadCase{"model: 3", "model: expected a mapping"},
                      BadCase{"- a\n- b", "<root>: expected a mapping"},
                      BadCase{"model: {path: [unclosed", "<yaml>: not valid YAML"},
                      BadCase{"model: {path: ''}", "model.path: must not be empty"},
                      // a section or key given twice was silently dropped (yaml-cpp keeps both, lookups see one)
                      BadCase{"cache:\n  block_size: 16\nmodel: {dtype: f32}\ncache:\n  memory_mb: 64\n",
                              "test.yaml: cache: section given twice: at line 1 and again at line 4"},
                      BadCase{"cache:\n  block_size: 16\n  memory_mb: 64\n  block_size: 32\n",
                              "test.yaml: cache.block_size: key given twice: at line 2 and again at line 4"},
                      BadCase{"server: {port: 1, port: 2}",
                              "server.port: key given twice: at line 1, column 10 and again at column 19"}));

TEST(Config, RecordsTheLineOfEachKey) {
  const Config c = parse_config("# comment\ncache:\n  block_size: 16\n\n  max_context: 4096\n", "t.yaml", "/");
  EXPECT_EQ(c.line_of("cache.max_context"), " (line 5)");
  EXPECT_EQ(c.line_of("cache.block_size"), " (line 3)");
  EXPECT_EQ(c.line_of("cache.memory_mb"), "");  // a default
}

TEST(Config, DirectoryIsNotAConfig) {
  const std::string dir = testing::TempDir() + "/tp_config_dir";
  std::filesystem::create_directories(dir);
  try {
    load_config(dir);
    ADD_FAILURE() << "a directory was accepted as a config";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), dir + ": is a directory, expected a YAML file");
  }
}

TEST(Config, MaxContextBeyondTheModelIsRefused) {
  const std::string file = testing::TempDir() + "/tp_ctx.yaml";
  std::ofstream(file) << "model: {dtype: bf16}\ncache:\n  max_context: 100000\n";
  const Config c = load_config(file);
  try {
    check_config_for_model(c, 8192, "models/m.gguf");
    ADD_FAILURE() << "max_context 100000 accepted for an 8192-token model";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), file + ": cache.max_context: 100000 exceeds the trained context of the model "
                                            "(8192 tokens in models/m.gguf) (line 3); use at most 8192, or 0 for the model's");
  }
  EXPECT_NO_THROW(check_config_for_model(c, 100000, "m"));
  EXPECT_NO_THROW(check_config_for_model(c, 0, "m"));  // the model's context is unknown
  Config dflt;                                          // max_context 0: the model's own
  EXPECT_NO_THROW(check_config_for_model(dflt, 8192, "m"));
}

// A config with every setting away from its default (strings that YAML would otherwise read as other types).
Config unusual_config() {
  Config c;
  c.model = {"/models/x y.gguf", "f32", "dequantize", "yes", "{% for m in messages %}{{ m.content }}\n{% endfor %}"};
  c.parallel = {2, 3, 4, "2GiB"};
  c.cache = {32, 777, "fp8_e4m3", 4096, false};
  c.model.device = "cuda";
  c.cache.gpu_memory_utilization = 0.85;
  c.scheduler = {5, 333, 17, "static"};
  c.server.host = "0.0.0.0";
  c.server.port = 9001;
  c.server.api_key = "123";
  c.server.max_body_bytes = 4097;
  c.server.max_connections = 11;
  c.server.shutdown_deadline_s = 0.1;
  c.server.request_timeout_s = 12.5;
  c.server.step_timeout_s = 0;
  return c;
}

void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.model.path, b.model.path);
  EXPECT_EQ(a.model.dtype, b.model.dtype);
  EXPECT_EQ(a.model.quantized, b.model.quantized);
  EXPECT_EQ(a.model.name, b.model.name);
  EXPECT_EQ(a.model.chat_template, b.model.chat_template);
  EXPECT_EQ(a.model.device, b.model.device);
  EXPECT_EQ(a.parallel.tp, b.parallel.tp);
  EXPECT_EQ(a.parallel.dp, b.parallel.dp);
  EXPECT_EQ(a.parallel.threads, b.parallel.threads);
  EXPECT_EQ(a.parallel.rank_memory, b.parallel.rank_memory);
  EXPECT_EQ(a.cache.block_size, b.cache.block_size);
  EXPECT_EQ(a.cache.memory_mb, b.cache.memory_mb);
  EXPECT_EQ(a.cache.dtype, b.cache.dtype);
  EXPECT_EQ(a.cache.max_context, b.cache.max_context);
  EXPECT_EQ(a.cache.prefix_caching, b.cache.prefix_caching);
  EXPECT_EQ(a.cache.gpu_memory_utilization, b.cache.gpu_memory_utilization);  // exact: shortest round-trip text
  EXPECT_EQ(a.scheduler.max_num_seqs, b.scheduler.max_num_seqs);
  EXPECT_EQ(a.scheduler.max_num_batched_tokens, b.scheduler.max_num_batched_tokens);
  EXPECT_EQ(a.scheduler.max_queued_requests, b.scheduler.max_queued_requests);
  EXPECT_EQ(a.scheduler.kv_reservation, b.scheduler.kv_reservation);
  EXPECT_EQ(a.server.host, b.server.host);
  EXPECT_EQ(a.server.port, b.server.port);
  EXPECT_EQ(a.server.api_key, b.server.api_key);
  EXPECT_EQ(a.server.max_body_bytes, b.server.max_body_bytes);
  EXPECT_EQ(a.server.max_connections, b.server.max_connections);
  EXPECT_EQ(a.server.shutdown_deadline_s, b.server.shutdown_deadline_s);  // exact: shortest round-trip text
  EXPECT_EQ(a.server.request_timeout_s, b.server.request_timeout_s);
  EXPECT_EQ(a.server.step_timeout_s, b.server.step_timeout_s);
}

TEST(Config, FormatReadsBackToTheSameValues) {
  const Config c = unusual_config();
  const std::string yaml = format_config(c);
  expect_same(parse_config(yaml, "printed.yaml", "/elsewhere"), c);
  Config d;  // its relative model path is printed absolute: relative to the working directory, where it opens
  const Config back = parse_config(format_config(d), "printed.yaml", "/elsewhere");
  d.model.path = (std::filesystem::current_path() / d.model.path).string();
  expect_same(back, d);
}

TEST(Config, FormatPrintsEverySettingOfEachSection) {
  // Every key of every section, whatever its value: the printed YAML has exactly the keys parse_config
  // accepts (an unknown key would be refused on the way back in; a key missing here would not print).
  const YAML::Node n = YAML::Load(format_config(Config{}));
  const std::map<std::string, std::vector<std::string>> expected = {
      {"model", {"path", "dtype", "quantized", "name", "chat_template", "device"}},
      {"parallel", {"tp", "dp", "threads", "rank_memory"}},
      {"cache", {"block_size", "memory_mb", "dtype", "max_context", "prefix_caching", "gpu_memory_utilization"}},
      {"scheduler", {"max_num_seqs", "max_num_batched_tokens", "max_queued_requests", "kv_reservation"}},
      {"server", {"host", "port", "api_key", "max_body_bytes", "max_connections", "shutdown_deadline_s",
                  "request_timeout_s", "step_timeout_s", "metrics_prefix", "keepalive_timeout_s", "send_timeout_s",
                  "log_format", "stats_interval_s"}},
      {"kv_events", {"enable", "endpoint", "topic"}},
      {"router", {"replicas", "policy", "health_interval_s", "health_timeout_s", "unhealthy_after", "kv_usage_tokens",
                  "kv_fetch", "max_replays"}}};
  ASSERT_TRUE(n.IsMap());
  EXPECT_EQ(n.size(), expected.size());
  for (const auto& [section, keys] : expected) {
    ASSERT_TRUE(n[section].IsMap()) << section;
    EXPECT_EQ(n[section].size(), keys.size()) << section;
    for (const auto& k : keys) EXPECT_TRUE(n[section][k].IsDefined()) << section << "." << k;
  }
  EXPECT_EQ(n["server"]["request_timeout_s"].Scalar(), "60");
  EXPECT_EQ(n["model"]["name"].Scalar(), "");
}

TEST(Config, RouterAndKvEventsSections) {
  const Config d = parse_config("", "test.yaml", "/base");
  EXPECT_FALSE(d.kv_events.enable);
  EXPECT_EQ(d.kv_events.endpoint, "tcp://127.0.0.1:*");
  EXPECT_EQ(d.router.policy, "prefix_aware");
  EXPECT_TRUE(d.router.replicas.empty());
  const Config c = parse_config(
      "kv_events: {enable: true, endpoint: 'tcp://*:5557'}\n"
      "router: {replicas: ['http://127.0.0.1:8001', 'http://127.0.0.1:8002'], policy: round_robin, kv_fetch: true}",
      "test.yaml", "/base");
  EXPECT_TRUE(c.kv_events.enable);
  EXPECT_EQ(c.kv_events.endpoint, "tcp://*:5557");
  EXPECT_EQ(c.router.replicas, (std::vector<std::string>{"http://127.0.0.1:8001", "http://127.0.0.1:8002"}));
  EXPECT_EQ(c.router.policy, "round_robin");
  EXPECT_TRUE(c.router.kv_fetch);
  // Printed and read back: the same values.
  const Config back = parse_config(format_config(c), "back.yaml", "/base");
  EXPECT_EQ(back.router.replicas, c.router.replicas);
  EXPECT_EQ(back.kv_events.endpoint, c.kv_events.endpoint);
  struct Bad {
    std::string yaml, message;
  };
  for (const Bad& b : std::vector<Bad>{
           {"router: {replicas: http://a:1}", "router.replicas: expected a list of URLs"},
           {"router: {replicas: ['a:1']}", "router.replicas[0]: 'a:1' is not an http:// URL"},
           {"router: {policy: random}", "router.policy: 'random' is not one of"},
           {"kv_events: {endpoint: '5557'}", "kv_events.endpoint: '5557' is not a ZeroMQ endpoint"},
       }) {
    try {
      parse_config(b.yaml, "test.yaml", "/base");
      ADD_FAILURE() << b.yaml << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos) << e.what();
    }
  }
}

TEST(Config, DeviceAndGpuMemoryUtilization) {
  const Config d = parse_config("", "test.yaml", "/base");
  EXPECT_EQ(d.model.device, "cpu");
  EXPECT_DOUBLE_EQ(d.cache.gpu_memory_utilization, 0.9);
  const Config c = parse_config("model: {device: cuda}\ncache: {gpu_memory_utilization: 0.5}", "test.yaml", "/base");
  EXPECT_EQ(c.model.device, "cuda");
  EXPECT_DOUBLE_EQ(c.cache.gpu_memory_utilization, 0.5);
}

TEST(Config, MetricsPrefixDefaultsToVllm) {
  EXPECT_EQ(parse_config("", "test.yaml", "/base").server.metrics_prefix, "vllm");
  EXPECT_EQ(parse_config("server: {metrics_prefix: tpserve}", "test.yaml", "/base").server.metrics_prefix, "tpserve");
}

TEST(Config, MissingFileIsAnInputError) {
  try {
    load_config("/nonexistent/tpserve.yaml");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "cannot read config '/nonexistent/tpserve.yaml': No such file or directory");
  }
}

TEST(Config, DefaultConfigFileLoads) {
  const Config c = load_config(std::string(TPSERVE_SOURCE_DIR) + "/configs/default.yaml");
  EXPECT_EQ(c.model.dtype, "bf16");
  EXPECT_NE(c.model.path.find("/models/SmolLM2-135M-Instruct.Q4_1.gguf"), std::string::npos);
  EXPECT_EQ(c.model.path.find(".."), std::string::npos) << c.model.path;
}

TEST(Config, ServerLoggingAndConnectionTimeouts) {
  const Config d = parse_config("", "test.yaml", "/base");
  EXPECT_DOUBLE_EQ(d.server.keepalive_timeout_s, 5.0);
  EXPECT_DOUBLE_EQ(d.server.send_timeout_s, 30.0);
  EXPECT_EQ(d.server.log_format, "text");
  EXPECT_DOUBLE_EQ(d.server.stats_interval_s, 10.0);
  const Config c = parse_config(
      "server: {keepalive_timeout_s: 2, send_timeout_s: 0.5, log_format: json, stats_interval_s: 0}", "test.yaml", "/base");
  EXPECT_DOUBLE_EQ(c.server.keepalive_timeout_s, 2.0);
  EXPECT_DOUBLE_EQ(c.server.send_timeout_s, 0.5);
  EXPECT_EQ(c.server.log_format, "json");
  EXPECT_DOUBLE_EQ(c.server.stats_interval_s, 0.0);
  EXPECT_NE(error_of("server: {log_format: xml}").find("server.log_format: 'xml' is not one of: text, json"),
            std::string::npos);
  EXPECT_NE(error_of("server: {send_timeout_s: -1}").find("server.send_timeout_s: -1 is out of range"), std::string::npos);
}

}  // namespace
}  // namespace tp
