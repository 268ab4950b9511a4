// Config parsing: defaults, every section, and one clear error per kind of bad input.
#include <gtest/gtest.h>

#include <string>

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
  EXPECT_EQ(c.server.host, "127.0.0.1");
  EXPECT_EQ(c.model.path, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
}

TEST(Config, ReadsEverySection) {
  const Config c = parse_config(R"(
model: {path: /m.gguf, dtype: f32, name: smol}
parallel: {tp: 3, dp: 2, threads: 1}
cache: {block_size: 32, memory_mb: 100, max_context: 4096, prefix_caching: false}
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
                      BadCase{"model: {pth: x}", "model.pth: unknown key (valid: chat_template, dtype, name, path)"},
                      BadCase{"parallel: {tp: two}", "parallel.tp: expected an integer, got 'two'"},
                      BadCase{"parallel: {tp: 0}", "parallel.tp: 0 is out of range [1, 4096]"},
                      BadCase{"parallel: {tp: [1, 2]}", "parallel.tp: expected an integer"},
                      BadCase{"cache: {block_size: 12}", "cache.block_size: 12 is not a power of two"},
                      BadCase{"cache: {prefix_caching: maybe}", "cache.prefix_caching: expected true or false"},
                      BadCase{"model: {dtype: f8}", "model.dtype: 'f8' is not one of: bf16, f32"},
                      BadCase{"scheduler: {kv_reservation: lazy}", "scheduler.kv_reservation: 'lazy' is not one of: paged, static"},
                      BadCase{"server: {port: 70000}", "server.port: 70000 is out of range [0, 65535]"},
                      BadCase{"server: {shutdown_deadline_s: -1}", "server.shutdown_deadline_s: -1 is out of range"},
                      BadCase{"server: {step_timeout_s: -2}", "server.step_timeout_s: -2 is out of range"},
                      // found by tests/fuzz/config_fuzz: non-scalar keys escaped as yaml-cpp exceptions
                      BadCase{"{[a]: 1}", "a section name must be a plain name"},
                      BadCase{"model: {[a]: 1}", "model: a key must be a plain name"},
                      BadCase{"model: 3", "model: expected a mapping"},
                      BadCase{"- a\n- b", "<root>: expected a mapping"},
                      BadCase{"model: {path: [unclosed", "<yaml>: not valid YAML"},
                      BadCase{"model: {path: ''}", "model.path: must not be empty"}));

TEST(Config, MissingFileIsAnInputError) {
  EXPECT_THROW(load_config("/nonexistent/tpserve.yaml"), InputError);
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
