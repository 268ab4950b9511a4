// `tpserve quantize`'s library (rank/quantize.h, rank/ct_writer.h) on a synthetic model of the fixtures'
// shape: the output's layout (tensor names, dtypes, shapes, the whole quantization_config) equals what
// llm-compressor wrote for the same scheme (tests/peers/fixtures/compressed_tensors), our loader loads it
// and its logits stay near the unquantized model's (bounds per scheme below), and bad arguments are refused
// with a clear message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "rank/ct_writer.h"
#include "rank/llama_model.h"
#include "rank/model_file.h"
#include "rank/quant_rtn.h"
#include "rank/quantize.h"
#include "rank/safetensors_file.h"
#include "rank/sequence_runner.h"
#include "rank/synth.h"
#include "tests/rank/loader_test_util.h"

namespace tp {
namespace {

// Scratch directory of this process (ctest runs each test in its own process, maybe in parallel), removed at
// exit.
struct Scratch {
  Scratch() : dir(testing::TempDir() + "/tpserve_quantize_" + std::to_string(getpid())) {
    std::filesystem::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string dir;
};
const std::string& scratch() {
  static const Scratch s;
  return s.dir;
}

using json = nlohmann::json;

const std::string kFixtures = std::string(TPSERVE_SOURCE_DIR) + "/tests/peers/fixtures/compressed_tensors/";

// The fixtures' model shape (tests/peers/make_ct_fixtures.py): 2 layers, hidden 256, 8 heads, 4 KV heads,
// intermediate 512, vocab 512, lm_head untied.
const std::string& base_model() {
  static const std::string dir = [] {
    SynthSpec s;
    s.n_layers = 2;
    s.hidden = 256;
    s.n_heads = 8;
    s.n_kv_heads = 4;
    s.intermediate = 512;
    s.vocab = 512;
    s.seed = 21;
    s.dtype = DType::F32;
    const std::string d = scratch() + "/quantize_base";
    write_synthetic_model(d, s);
    return d;
  }();
  return dir;
}

std::vector<int32_t> calib_tokens(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint64_t x = 12345;
  for (auto& v : t) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = int32_t((x >> 33) % 500);
  }
  return t;
}

struct TensorInfo {
  std::string dtype;
  std::vector<int64_t> shape;
  bool operator==(const TensorInfo&) const = default;
};

std::map<std::string, TensorInfo> layout(const std::string& dir) {
  std::ifstream in(dir + "/model.safetensors", std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string h(n, '\0');
  in.read(h.data(), std::streamsize(n));
  std::map<std::string, TensorInfo> out;
  const json j = json::parse(h);
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "__metadata__")
      out[it.key()] = {(*it)["dtype"].get<std::string>(), (*it)["shape"].get<std::vector<int64_t>>()};
  return out;
}

json quant_config(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  return json::parse(in)["quantization_config"];
}

struct Case {
  const char* fixture;
  QuantScheme scheme;
  QuantMethod method;
  int64_t group;
  ActOrder act_order;
  double logit_bound;  // relative L2 distance of the logits from the unquantized model's
  bool lm_head = false;  // the lm_head quantized too (--ignore '')
};

// Bounds on the relative L2 distance of the logits of an 8-token prompt unlike the calibration tokens, on these
// random (Gaussian) weights; measured on the dev machine: w4a16 g128 sym 0.214, asym 0.209, g64 GPTQ act-order
// 0.263 (calibrated on other tokens: see GptqBeatsRtnInDistribution), w4a16 g128 with the lm_head 0.252, w8a8 0.022,
// fp8 dynamic 0.075 (its activations quantized per token), fp8 weight 0.058, nvfp4 0.192, mxfp4 0.228.
const Case kCases[] = {
    {"w4a16_g128_sym", QuantScheme::W4A16, QuantMethod::Rtn, 128, ActOrder::None, 0.25},
    {"w4a16_g128_asym", QuantScheme::W4A16Asym, QuantMethod::Rtn, 128, ActOrder::None, 0.25},
    {"w4a16_g128_lm_head", QuantScheme::W4A16, QuantMethod::Rtn, 128, ActOrder::None, 0.3, true},
    {"w4a16_g64_gidx", QuantScheme::W4A16, QuantMethod::Gptq, 64, ActOrder::Group, 0.3},
    {"w4a16_g64_gptq_actorder_weight", QuantScheme::W4A16, QuantMethod::Gptq, 64, ActOrder::Weight, 0.3},
    {"w8a8_int8_dynamic", QuantScheme::W8A8Int8, QuantMethod::Rtn, -1, ActOrder::None, 0.03},
    {"fp8_dynamic", QuantScheme::Fp8Dynamic, QuantMethod::Rtn, -1, ActOrder::None, 0.08},
    {"fp8_weight_only", QuantScheme::Fp8Weight, QuantMethod::Rtn, -1, ActOrder::None, 0.08},
    {"fp8_block", QuantScheme::Fp8Block, QuantMethod::Rtn, -1, ActOrder::None, 0.08},
    {"nvfp4a16", QuantScheme::Nvfp4, QuantMethod::Rtn, -1, ActOrder::None, 0.3},
    {"mxfp4a16", QuantScheme::Mxfp4, QuantMethod::Rtn, -1, ActOrder::None, 0.35},
};

std::vector<float> logits_of(const std::string& dir, const std::vector<int32_t>& prompt) {
  auto f = open_model(dir);
  LlamaModel m(*f, DType::F32);
  LocalRunner run(m, 64);
  return run.seq.feed(prompt);
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

TEST(Quantize, LayoutEqualsLlmCompressorAndLoads) {
  const std::vector<int32_t> prompt = {5, 17, 300, 42, 7, 99, 256, 3};
  const std::vector<float> base = logits_of(base_model(), prompt);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.fixture);
    QuantizeOptions o;
    o.scheme = c.scheme;
    o.method = c.method;
    o.group_size = c.group;
    o.act_order = c.act_order;
    if (c.lm_head) o.ignore = {};
    if (c.method != QuantMethod::Rtn) o.calib_tokens = calib_tokens(256), o.seq_len = 128;
    const std::string out = scratch() + "/quantized_" + c.fixture;
    quantize_model(*open_model(base_model()), out, o);
    EXPECT_EQ(layout(out), layout(kFixtures + c.fixture));
    EXPECT_EQ(quant_config(out), quant_config(kFixtures + c.fixture));
    const std::vector<float> q = logits_of(out, prompt);
    const double d = rel_l2(q, base);
    std::printf("%-20s logits rel. L2 vs base %.4f\n", c.fixture, d);
    EXPECT_LT(d, c.logit_bound);
  }
}

// w8a16 has no fixture of its own: llm-compressor's mixed_w8a16_w4a16 quantizes the attention projections
// with it (config group_0), so those tensors and that group's scheme must match ours.
TEST(Quantize, W8A16EqualsTheMixedFixturesAttention) {
  QuantizeOptions o;
  o.scheme = QuantScheme::W8A16;
  const std::string out = scratch() + "/quantized_w8a16";
  quantize_model(*open_model(base_model()), out, o);
  const std::string fx = kFixtures + "mixed_w8a16_w4a16";
  auto attention = [](const std::map<std::string, TensorInfo>& all) {
    std::map<std::string, TensorInfo> a;
    for (const auto& [k, v] : all)
      if (k.find("self_attn") != std::string::npos) a[k] = v;
    return a;
  };
  const auto ours = attention(layout(out));
  EXPECT_EQ(ours.size(), 2u * 4u * 3u);  // 2 layers × q/k/v/o × weight_packed/scale/shape
  EXPECT_EQ(ours, attention(layout(fx)));
  const json a = quant_config(out)["config_groups"]["group_0"], b = quant_config(fx)["config_groups"]["group_0"];
  EXPECT_EQ(a["weights"], b["weights"]);
  EXPECT_EQ(a["format"], b["format"]);
  EXPECT_EQ(a["input_activations"], b["input_activations"]);
}

// Calibrated methods, 2048 calibration tokens, on 48 held-out tokens of the same distribution (the same
// token generator). Random-token inputs to a random model are nearly full rank, so GPTQ wins less here than on
// real activations (tests/rank/quant_test.cpp has the outlier-channel layer, quantize_real_test the real
// model): GPTQ's logit error must be under 0.95 of RTN's (measured with the default damping 0.1: RTN 0.211, GPTQ
// 0.164 = 0.78×, act-order 0.198 = 0.94×; damping 0.01 measured GPTQ 0.189 = 0.89×). AWQ: measured 0.221 = 1.05× RTN — its scales never increase each layer's error on its search
// rows (quant_test), but that is not the logits' error on other tokens; bound 1.1×.
TEST(Quantize, GptqBeatsRtnInDistribution) {
  const std::vector<int32_t> all = calib_tokens(2096);
  const std::vector<int32_t> cal(all.begin(), all.begin() + 2048), held(all.begin() + 2048, all.end());
  const std::vector<float> base = logits_of(base_model(), held);
  std::map<std::string, double> err;
  for (auto [name, method, act_order] :
       {std::tuple{"rtn", QuantMethod::Rtn, ActOrder::None}, {"gptq", QuantMethod::Gptq, ActOrder::None},
        {"gptq-act-order", QuantMethod::Gptq, ActOrder::Group}, {"awq", QuantMethod::Awq, ActOrder::None}}) {
    QuantizeOptions o;
    o.scheme = QuantScheme::W4A16;
    o.group_size = 64;
    o.method = method;
    o.act_order = act_order;
    if (method != QuantMethod::Rtn) o.calib_tokens = cal, o.seq_len = 128;
    const std::string out = scratch() + "/quantized_" + name;
    quantize_model(*open_model(base_model()), out, o);
    err[name] = rel_l2(logits_of(out, held), base);
    std::printf("w4a16 g64 %-15s logits rel. L2 %.4f\n", name, err[name]);
  }
  EXPECT_LT(err["gptq"], 0.95 * err["rtn"]);
  EXPECT_LT(err["gptq-act-order"], 0.97 * err["rtn"]);
  EXPECT_LE(err["awq"], 1.1 * err["rtn"]);
}

// Only the lm_head quantized (every decoder linear in `ignore` by a regex): GPTQ on the final norm's output of the
// calibration tokens must beat RTN on held-out tokens, as for the decoder's linears (so its Hessian is the lm_head's
// own input, not some other layer's: a random one made GPTQ 1.03x RTN). Measured: RTN 0.1034, GPTQ 0.0950 (0.92x).
TEST(Quantize, GptqQuantizesTheLmHeadOnItsInput) {
  const std::vector<int32_t> all = calib_tokens(2096);
  const std::vector<int32_t> cal(all.begin(), all.begin() + 2048), held(all.begin() + 2048, all.end());
  const std::vector<float> base = logits_of(base_model(), held);
  std::map<std::string, double> err;
  for (auto [name, method] : {std::pair{"rtn", QuantMethod::Rtn}, {"gptq", QuantMethod::Gptq}}) {
    QuantizeOptions o;
    o.scheme = QuantScheme::W4A16;
    o.group_size = 64;
    o.method = method;
    o.ignore = {"re:model\\.layers\\..*"};
    if (method != QuantMethod::Rtn) o.calib_tokens = cal, o.seq_len = 128;
    const std::string out = scratch() + "/quantized_lm_head_" + name;
    quantize_model(*open_model(base_model()), out, o);
    const auto l = layout(out);
    EXPECT_EQ(l.count("lm_head.weight_packed"), 1u);
    EXPECT_EQ(l.count("model.layers.0.self_attn.q_proj.weight"), 1u);  // dense
    err[name] = rel_l2(logits_of(out, held), base);
    std::printf("w4a16 g64 lm_head only %-5s logits rel. L2 %.4f\n", name, err[name]);
  }
  EXPECT_LT(err["gptq"], 0.95 * err["rtn"]);
}

// The smoothing folds (AWQ: into both norms, into up_proj's row scales for down, into v_proj's row scales for o
// when n_heads = n_kv_heads; SmoothQuant: into both norms) keep the model's function: at 8 bits, where the
// grid itself costs ~2%, the smoothed models' logits stay as near the base as RTN's (bound 0.05; a fold
// written wrongly moves them by O(1)). Measured: RTN 0.0096, AWQ 0.0119, SmoothQuant+GPTQ (w8a8) 0.0141.
TEST(Quantize, SmoothingFoldsKeepTheFunction) {
  SynthSpec sp;
  sp.n_layers = 2, sp.hidden = 128, sp.n_heads = 4, sp.n_kv_heads = 4, sp.intermediate = 256, sp.vocab = 300;
  sp.seed = 4, sp.dtype = DType::F32;
  const std::string base = scratch() + "/quantize_mha";
  write_synthetic_model(base, sp);
  std::vector<int32_t> prompt = calib_tokens(40);
  for (auto& t : prompt) t %= 290;
  std::vector<int32_t> cal = calib_tokens(300);
  for (auto& t : cal) t = (t * 7 + 3) % 290;
  const std::vector<float> ref = logits_of(base, prompt);
  for (auto [name, scheme, method] : {std::tuple{"rtn", QuantScheme::W8A16, QuantMethod::Rtn},
                                      {"awq", QuantScheme::W8A16, QuantMethod::Awq},
                                      {"sq", QuantScheme::W8A8Int8, QuantMethod::SmoothQuantGptq}}) {
    QuantizeOptions o;
    o.scheme = scheme;
    o.method = method;
    if (method != QuantMethod::Rtn) o.calib_tokens = cal, o.seq_len = 100;
    const std::string out = scratch() + "/quantize_mha_" + name;
    quantize_model(*open_model(base), out, o);
    const double d = rel_l2(logits_of(out, prompt), ref);
    std::printf("%s w8: logits rel. L2 %.4f\n", name, d);
    EXPECT_LT(d, 0.05) << name;
  }
}

TEST(Quantize, BadArgumentsRefused) {
  auto msg = [](const QuantizeOptions& o) -> std::string {
    try {
      quantize_model(*open_model(base_model()), scratch() + "/quantized_bad", o);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  QuantizeOptions o;
  o.scheme = QuantScheme::W4A16;
  o.group_size = 96;  // does not divide 256
  EXPECT_NE(msg(o).find("group size 96 does not divide its 256 input columns"), std::string::npos) << msg(o);
  o.group_size = 64;
  o.method = QuantMethod::Gptq;  // no calibration
  EXPECT_NE(msg(o).find("calibration"), std::string::npos) << msg(o);
  o.method = QuantMethod::Rtn;
  QuantizeOptions fb;
  fb.scheme = QuantScheme::Fp8Block;
  fb.method = QuantMethod::Gptq;
  fb.calib_tokens = calib_tokens(64);
  EXPECT_NE(msg(fb).find("fp8-block is quantized by round to nearest only"), std::string::npos) << msg(fb);
  try {
    parse_quant_scheme("w5a16");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown quantization scheme 'w5a16' (valid: w8a16"), std::string::npos);
  }
  EXPECT_THROW(parse_quant_method("hqq"), UsageError);
}

// w3a16 (no llm-compressor fixture: its presets have no 3-bit scheme): compressed-tensors' pack_to_int32 (0.19,
// the peer venv's) packs densely: u = q + 4 of value c of a row at bits 3c..3c+2 of the row's little-endian I32
// words, straddling two words where it falls across one, ceil(3 n_in / 32) words a row — q_proj [256, 256]
// packs into 24 words a row and down_proj [256, 512] into 48. Every packed value must equal RTN's q of the base
// weight (unpacked the way compressed-tensors unpacks), the tail bits must be 0, and our loader must load it:
// logits within 0.6 relative L2 of the base (measured 0.42 on these Gaussian weights; the loader copying 3-bit
// words as if they were nibble pairs measured 1.49; w4a16 g128 RTN measures 0.21). Older compressed-tensors put
// ten values a word (top 2 bits unused, ceil(n_in / 10) words): the same checkpoint rewritten that way must load
// to the same logits, bit for bit.

// Value c (3 bits) of a dense row of `words` little-endian I32 words.
uint32_t dense3(const uint8_t* row, int64_t words, int64_t c) {
  uint64_t two = 0;
  std::memcpy(&two, row + (c * 3 / 32) * 4, (c * 3 / 32 + 1 < words) ? 8 : 4);
  return uint32_t(two >> (c * 3 % 32)) & 7;
}

// Copies `dir` to `out` with every weight_packed tensor (3-bit, dense) rewritten ten values a word.
void write_ten_a_word_copy(const std::string& dir, const std::string& out) {
  namespace fs = std::filesystem;
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != "model.safetensors")
      fs::copy_file(e.path(), out + "/" + e.path().filename().string(), fs::copy_options::overwrite_existing);
  const std::vector<uint8_t> in = test::read_bytes(dir + "/model.safetensors");
  uint64_t hlen;
  std::memcpy(&hlen, in.data(), 8);
  const json header = json::parse(std::string(in.begin() + 8, in.begin() + 8 + int64_t(hlen)));
  json outh = json::object();
  std::vector<uint8_t> data;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") {
      outh[name] = t;
      continue;
    }
    const size_t b = t["data_offsets"][0].get<size_t>(), e = t["data_offsets"][1].get<size_t>();
    std::vector<uint8_t> bytes(in.begin() + int64_t(8 + hlen + b), in.begin() + int64_t(8 + hlen + e));
    json tt = t;
    if (name.size() > 14 && name.substr(name.size() - 14) == ".weight_packed") {
      const int64_t rows = t["shape"][0], words = t["shape"][1];
      const int64_t n_in = words * 32 / 3, lwords = (n_in + 9) / 10;  // this model: 3 n_in a multiple of 32
      std::vector<uint8_t> re(size_t(rows * lwords * 4), 0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < n_in; ++c) {
          uint32_t w;
          std::memcpy(&w, re.data() + (r * lwords + c / 10) * 4, 4);
          w |= dense3(bytes.data() + r * words * 4, words, c) << (3 * (c % 10));
          std::memcpy(re.data() + (r * lwords + c / 10) * 4, &w, 4);
        }
      bytes = re;
      tt["shape"] = {rows, lwords};
    }
    tt["data_offsets"] = {data.size(), data.size() + bytes.size()};
    data.insert(data.end(), bytes.begin(), bytes.end());
    outh[name] = tt;
  }
  const std::string hs = outh.dump();
  const uint64_t hl = hs.size();
  std::vector<uint8_t> file(8 + hl + data.size());
  std::memcpy(file.data(), &hl, 8);
  std::memcpy(file.data() + 8, hs.data(), hl);
  std::memcpy(file.data() + 8 + hl, data.data(), data.size());
  test::write_bytes(out + "/model.safetensors", file);
}

TEST(Quantize, W3A16PacksDenselyAndLoadsBothLayouts) {
  QuantizeOptions o;
  o.scheme = QuantScheme::W3A16;
  o.group_size = 64;
  const std::string out = scratch() + "/quantized_w3a16";
  quantize_model(*open_model(base_model()), out, o);
  const json cfg = quant_config(out);
  EXPECT_EQ(cfg["format"], "pack-quantized");
  EXPECT_EQ(cfg["config_groups"]["group_0"]["weights"]["num_bits"], 3);
  EXPECT_EQ(cfg["config_groups"]["group_0"]["weights"]["group_size"], 64);
  const SafetensorsFile base(base_model() + "/model.safetensors"), q(out + "/model.safetensors");
  const QuantSpec spec = scheme_weight_spec(QuantScheme::W3A16, 64);
  for (auto [mod, n_out, n_in] : {std::tuple{"model.layers.0.self_attn.q_proj", 256, 256},
                                  {"model.layers.1.mlp.down_proj", 256, 512}}) {
    SCOPED_TRACE(mod);
    const SafetensorsTensor* w = base.find(std::string(mod) + ".weight");
    const SafetensorsTensor* p = q.find(std::string(mod) + ".weight_packed");
    ASSERT_TRUE(w && p);
    const int64_t words = (n_in * 3 + 31) / 32;
    ASSERT_EQ(p->shape, (std::vector<int64_t>{n_out, words}));
    ASSERT_EQ(p->raw, RawType::I32);
    const QuantizedLinear rtn = quantize_rtn(spec, reinterpret_cast<const float*>(w->data), n_out, n_in);
    int64_t mismatches = 0, dirty_tail = 0;
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t c = 0; c < words * 32 / 3; ++c) {  // as unpack_from_int32: value c at bit 3c of the stream
        const int v = int(dense3(p->data + r * words * 4, words, c)) - 4;
        if (c >= n_in)
          dirty_tail += v + 4;
        else
          mismatches += v != rtn.q[size_t(r * n_in + c)];
      }
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(dirty_tail, 0);
  }
  const std::vector<int32_t> prompt = {5, 17, 300, 42, 7, 99, 256, 3};
  const std::vector<float> dense = logits_of(out, prompt);
  const double d = rel_l2(dense, logits_of(base_model(), prompt));
  std::printf("w3a16 g64 rtn logits rel. L2 vs base %.4f\n", d);
  EXPECT_LT(d, 0.6);
  const std::string legacy = scratch() + "/quantized_w3a16_ten_a_word";
  write_ten_a_word_copy(out, legacy);
  const SafetensorsFile lq(legacy + "/model.safetensors");
  ASSERT_EQ(lq.find("model.layers.0.self_attn.q_proj.weight_packed")->shape, (std::vector<int64_t>{256, 26}));
  EXPECT_EQ(logits_of(legacy, prompt), dense);
}

// NVFP4: compressed-tensors gives the fused q|k|v and gate|up one global scale, G = 448 · 6 / max|W| over the
// group (llm-compressor's fuse_weight_observers; its nvfp4a16 fixture has them equal), because vLLM keeps one
// per fused linear (the largest of the parts'): with a G per tensor, vLLM would dequantize the parts of smaller
// max|W| at the wrong scale. o_proj and down_proj keep their own. G is rounded as compressed-tensors rounds it
// (torch's 2688 / tensor is a reciprocal then a product). Both RTN and GPTQ.
TEST(Quantize, Nvfp4FusedGroupsShareOneGlobalScale) {
  const std::vector<std::vector<const char*>> groups = {
      {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, {"mlp.gate_proj", "mlp.up_proj"},
      {"self_attn.o_proj"}, {"mlp.down_proj"}};
  auto scalar = [](const SafetensorsFile& f, const std::string& name) {
    const SafetensorsTensor* t = f.find(name);
    EXPECT_TRUE(t && t->raw == RawType::None && t->n_bytes == 4) << name;
    float v = 0;
    if (t) std::memcpy(&v, t->data, 4);
    return v;
  };
  {
    const SafetensorsFile fx(kFixtures + "nvfp4a16/model.safetensors");
    for (int layer = 0; layer < 2; ++layer)
      for (const auto& g : groups)
        for (const char* part : g) {
          const std::string b = "model.layers." + std::to_string(layer) + ".";
          EXPECT_EQ(scalar(fx, b + part + ".weight_global_scale"), scalar(fx, b + g[0] + ".weight_global_scale"))
              << "llm-compressor's fixture, layer " << layer << " " << part;
        }
  }
  const SafetensorsFile base(base_model() + "/model.safetensors");
  for (QuantMethod method : {QuantMethod::Rtn, QuantMethod::Gptq}) {
    SCOPED_TRACE(method == QuantMethod::Rtn ? "rtn" : "gptq");
    QuantizeOptions o;
    o.scheme = QuantScheme::Nvfp4;
    o.method = method;
    if (method != QuantMethod::Rtn) o.calib_tokens = calib_tokens(256), o.seq_len = 128;
    const std::string out = scratch() + "/quantized_nvfp4_fused_" + std::to_string(int(method));
    quantize_model(*open_model(base_model()), out, o);
    const SafetensorsFile q(out + "/model.safetensors");
    for (int layer = 0; layer < 2; ++layer)
      for (const auto& g : groups) {
        const std::string b = "model.layers." + std::to_string(layer) + ".";
        float amax = 0;
        for (const char* part : g) {
          const SafetensorsTensor* w = base.find(b + part + ".weight");
          ASSERT_TRUE(w && w->raw == RawType::None && w->dtype == DType::F32);
          const float* v = reinterpret_cast<const float*>(w->data);
          for (int64_t i = 0; i < w->n_bytes / 4; ++i) amax = std::max(amax, std::fabs(v[i]));
        }
        for (const char* part : g)
          EXPECT_EQ(scalar(q, b + part + ".weight_global_scale"), (1.0f / amax) * (448.0f * 6.0f))
              << "layer " << layer << " " << part;
      }
  }
}

}  // namespace
}  // namespace tp
