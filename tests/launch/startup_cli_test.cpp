// `tpserve config` and the start-up refusals of a config, as a user meets them (the real binary; a small
// synthetic model whose trained context is 8192 tokens): every setting printed as YAML that reads back to the
// same settings; a section given twice, a directory as --config, a max_context beyond the model's and a KV
// budget beyond the node's memory each refused with one line naming the file, the key and the line; an HF
// directory without tokenizer.json refused as such; weight loading shown in a few lines, by rank 0 only.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "tests/util/run_tpserve.h"

namespace {

using tp::test::Result;

class ConfigCli : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One directory per process: ctest runs each test of this suite as its own process, in parallel, and each
    // makes the synthetic model in SetUpTestSuite (a shared directory let one read another's half-written file).
    dir_ = std::filesystem::path(testing::TempDir() + "/tp_startup_cli." + std::to_string(getpid()))
               .lexically_normal()
               .string();
    std::filesystem::create_directories(dir_);
    const Result r = tp::test::run_tpserve("synth --out " + model() +
                                           " --layers 2 --hidden 64 --heads 4 --kv-heads 2 --intermediate 128 --vocab 300");
    ASSERT_EQ(r.code, 0) << r.out;
  }
  static std::string model() { return dir_ + "/synth"; }
  static std::string write(const std::string& name, const std::string& yaml) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << yaml;
    return path;
  }
  static void expect_refused(const std::string& args, const std::string& message) {
    const Result r = tp::test::run_tpserve(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << args << "\nexpected: " << message << "\n" << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  }
  static inline std::string dir_;
};

std::string without_first_line(const std::string& s) { return s.substr(s.find('\n') + 1); }

TEST_F(ConfigCli, PrintsEverySettingAsYamlThatReadsBack) {
  const std::string cfg = write("all.yaml",
                                "model: {path: m.gguf, dtype: f32, name: smol, chat_template: chatml}\n"
                                "parallel: {tp: 2, dp: 1, threads: 3}\n"
                                "cache: {block_size: 32, memory_mb: 100, dtype: fp8_e4m3, max_context: 4096, prefix_caching: false}\n"
                                "scheduler: {max_num_seqs: 8, max_num_batched_tokens: 512, max_queued_requests: 9,"
                                " kv_reservation: static}\n"
                                "server: {host: 0.0.0.0, port: 9000, api_key: k, max_body_bytes: 1000, max_connections: 12,"
                                " shutdown_deadline_s: 2.5, request_timeout_s: 9, step_timeout_s: 0.25}\n");
  const Result a = tp::test::run_tpserve("config --config " + cfg);
  ASSERT_EQ(a.code, 0) << a.out;
  for (const char* line : {"model:\n  path: \"" /* absolute, resolved */, "\n  dtype: \"f32\"\n", "\n  name: \"smol\"\n",
                           "\n  chat_template: \"chatml\"\n", "parallel:\n  tp: 2\n  dp: 1\n  threads: 3\n",
                           "cache:\n  block_size: 32\n  memory_mb: 100\n  dtype: \"fp8_e4m3\"\n  max_context: 4096\n  prefix_caching: false\n",
                           "scheduler:\n  max_num_seqs: 8\n  max_num_batched_tokens: 512\n  max_queued_requests: 9\n"
                           "  kv_reservation: \"static\"\n",
                           "server:\n  host: \"0.0.0.0\"\n  port: 9000\n  api_key: \"k\"\n  max_body_bytes: 1000\n"
                           "  max_connections: 12\n  shutdown_deadline_s: 2.5\n  request_timeout_s: 9\n"
                           "  step_timeout_s: 0.25\n"})
    EXPECT_NE(a.out.find(line), std::string::npos) << "missing: " << line << "\n" << a.out;
  EXPECT_NE(a.out.find(dir_ + "/m.gguf"), std::string::npos) << a.out;
  // Pasted back as a config, it gives the same settings.
  const std::string again = write("again.yaml", a.out);
  const Result b = tp::test::run_tpserve("config --config " + again);
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_EQ(without_first_line(b.out), without_first_line(a.out));
}

TEST_F(ConfigCli, DefaultsPrintTimeoutsAndLimitsToo) {
  const Result r = tp::test::run_tpserve("config");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* key : {"request_timeout_s: 60", "step_timeout_s: 300", "shutdown_deadline_s: 10",
                          "max_connections: 1024", "max_body_bytes: 8388608", "max_queued_requests: 1024", "api_key: \"\""})
    EXPECT_NE(r.out.find(key), std::string::npos) << key << "\n" << r.out;
}

TEST_F(ConfigCli, DevicePrintedAndCudaRefusedWhereThereIsNone) {
  const Result r = tp::test::run_tpserve("config");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\n  device: \"cpu\"\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  gpu_memory_utilization: 0.9\n"), std::string::npos) << r.out;
  const Result u = tp::test::run_tpserve("generate --prompt hi --device gpu --model " + model());
  EXPECT_EQ(u.code, 2) << u.out;  // a usage error
  EXPECT_NE(u.out.find("generate: --device must be cpu or cuda, not 'gpu'"), std::string::npos) << u.out;
  if (std::filesystem::exists("/dev/nvidiactl")) GTEST_SKIP() << "a GPU host: cuda is not refused here";
  // No GPU on this machine (and no CUDA backend unless the kernels are built): one line naming the setting,
  // before the weights load.
  expect_refused("generate --prompt hi --max-tokens 1 --threads 1 --device cuda --model " + model(),
                 "<defaults>: model.device: cuda: ");
  const std::string cfg = write("cuda.yaml", "model:\n  device: cuda\n");
  expect_refused("generate --prompt hi --max-tokens 1 --threads 1 --model " + model() + " --config " + cfg,
                 cfg + ": model.device: cuda: ");
  const Result w = tp::test::run_tpserve("generate --prompt hi --device cuda --model " + model());
  EXPECT_EQ(w.out.find("loading"), std::string::npos) << w.out;  // refused before anything loads
  // --device cpu overrides the config's cuda
  const Result c = tp::test::run_tpserve("generate --prompt hi --max-tokens 2 --threads 1 --device cpu --model " +
                                         model() + " --config " + cfg);
  EXPECT_EQ(c.code, 0) << c.out;
}

TEST_F(ConfigCli, SectionGivenTwiceIsRefused) {
  const std::string cfg = write("twice.yaml", "cache:\n  block_size: 16\nserver:\n  port: 1\ncache:\n  memory_mb: 64\n");
  expect_refused("config --config " + cfg, cfg + ": cache: section given twice: at line 1 and again at line 5");
}

TEST_F(ConfigCli, DirectoryAsConfigIsRefused) {
  expect_refused("config --config " + dir_, dir_ + ": is a directory, expected a YAML file");
  expect_refused("generate --prompt hi --config " + dir_, dir_ + ": is a directory, expected a YAML file");
}

TEST_F(ConfigCli, MaxContextBeyondTheModelIsRefusedBeforeLoading) {
  const std::string cfg = write("ctx.yaml", "cache:\n  memory_mb: 16\n  max_context: 100000\n");
  expect_refused("generate --prompt hi --threads 1 --model " + model() + " --config " + cfg,
                 cfg + ": cache.max_context: 100000 exceeds the trained context of the model (8192 tokens in " +
                     model() + ") (line 3); use at most 8192, or 0 for the model's");
  const std::string ok = write("ctx_ok.yaml", "cache:\n  memory_mb: 16\n  max_context: 8192\n");
  const Result r = tp::test::run_tpserve("generate --prompt hi --max-tokens 2 --threads 1 --model " + model() +
                                         " --config " + ok);
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST_F(ConfigCli, KvMemoryBeyondTheNodeIsRefusedBeforeAllocating) {
  // 2^30 MiB (1 PiB, the largest the config accepts) used to end in "internal error: std::bad_alloc"; a few
  // TiB in the kernel's OOM killer.
  for (const char* mb : {"1073741824", "4000000"}) {
    const std::string cfg = write("mem.yaml", std::string("model:\n  dtype: f32\ncache:\n  memory_mb: ") + mb + "\n");
    expect_refused("generate --prompt hi --threads 1 --model " + model() + " --config " + cfg,
                   cfg + ": cache.memory_mb: " + mb + " MiB of KV cache per rank (line 4) does not fit: ");
    const Result r = tp::test::run_tpserve("generate --prompt hi --threads 1 --model " + model() + " --config " + cfg);
    EXPECT_NE(r.out.find("MiB available on this node (MemAvailable)"), std::string::npos) << r.out;
  }
}

TEST_F(ConfigCli, HfDirectoryWithoutTokenizerIsRefusedAsSuch) {
  // It used to fail as "tokenizer pre-type 'default' not supported".
  const std::string copy = dir_ + "/no_tokenizer";
  std::filesystem::remove_all(copy);
  std::filesystem::copy(model(), copy);
  std::filesystem::remove(copy + "/tokenizer.json");
  const std::string cfg = write("small.yaml", "cache:\n  memory_mb: 16\n");
  expect_refused("generate --prompt hi --threads 1 --model " + copy + " --config " + cfg,
                 copy + ": no tokenizer.json: the model directory needs the tokenizer.json of its model");
  const Result r = tp::test::run_tpserve("generate --prompt hi --threads 1 --model " + copy + " --config " + cfg);
  EXPECT_EQ(r.out.find("pre-type"), std::string::npos) << r.out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + 1)) ++n;
  return n;
}

// `tpserve generate` of 2 tokens at tp 2 under mpirun (2 ranks), stdout and stderr together; code: pclose's status.
Result generate_tp2(const std::string& model, const std::string& cfg) {
  const std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 " +
                          std::string(TPSERVE_BIN) + " generate --prompt hi --max-tokens 2 --threads 1 --tp 2 --model " +
                          model + " --config " + cfg + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  Result r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  r.code = pclose(p);
  return r;
}

TEST_F(ConfigCli, WeightsLoadingShowsAFewLinesFromRankZeroOnly) {
  const std::string cfg = write("progress.yaml", "cache:\n  memory_mb: 16\n");
  const Result one = tp::test::run_tpserve("generate --prompt hi --max-tokens 2 --threads 1 --model " + model() +
                                           " --config " + cfg);
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_EQ(count(one.out, "loading weights: "), 2u) << one.out;  // 2 layers: at 50 % and 100 %, not a bar
  EXPECT_NE(one.out.find("loading weights: 2/2 layers, "), std::string::npos) << one.out;
  EXPECT_EQ(one.out.find('\r'), std::string::npos) << one.out;
  // tp 2 under mpirun: rank 1 loads too, quietly.
  const Result two = generate_tp2(model(), cfg);
  const std::string& out = two.out;
  ASSERT_EQ(two.code, 0) << out;
  EXPECT_NE(out.find("rank 1 (tp 1/2)"), std::string::npos) << out;
  EXPECT_EQ(count(out, "loading weights: 2/2 layers"), 1u) << out;
}

// A GGUF file with a type no kernel keeps (tests/peers/fixtures/gguf/synth_lowbit.gguf: llama-quantize's IQ4_XS tensor
// beside kept Q2_K, Q3_K, IQ4_NL and Q5_1 ones): the start-up line names what each is held as; at tp 2 its Q2_K
// ffn_down of layer 0 (256-column blocks) cannot be split in two on its blocks: refused naming the tensor, its type,
// the TP degrees that fit and the way out (a held type's refusal names both: WeightLoader.LowBitFileHolds...).
TEST_F(ConfigCli, HeldTypesNamedAtStartUpAndTheirSlicesChecked) {
  const std::string lowbit = std::string(TPSERVE_SOURCE_DIR) + "/tests/peers/fixtures/gguf/synth_lowbit.gguf";
  const std::string cfg = write("lowbit.yaml", "cache:\n  memory_mb: 16\n");
  const Result one = tp::test::run_tpserve("generate --prompt hi --max-tokens 2 --threads 1 --model " + lowbit +
                                           " --config " + cfg);
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_NE(one.out.find("; its iq4_xs weights held as iq4_nl (requantized at load: no kernel keeps them)"),
            std::string::npos)
      << one.out;
  const Result two = generate_tp2(lowbit, cfg);
  const std::string& out = two.out;
  EXPECT_NE(two.code, 0) << out;
  EXPECT_NE(out.find("blk.0.ffn_down.weight: q2_k blocks of 256 columns: this rank's row-parallel slice [0, 384) of "
                     "768 columns does not fall on whole blocks; tp degrees that slice it on its blocks: 1 (or set "
                     "model.quantized: dequantize)"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("internal error"), std::string::npos) << out;
}

}  // namespace
