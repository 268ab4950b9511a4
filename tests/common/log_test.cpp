// Logger: the text and JSON line formats (fixed time), quoting and escaping, level filtering, and that lines
// written from several threads arrive whole.
#include "common/log.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"

namespace tp {
namespace {

constexpr int64_t kT = 1738324800123;  // 2025-01-31T12:00:00.123Z

TEST(Log, TextLine) {
  const Logger log(LogFormat::Text);
  EXPECT_EQ(log.format_line(kT, LogLevel::Info, "POST /v1/completions 200",
                            {{"id", "cmpl-1"}, {"prompt_tokens", 5}, {"ttft_s", 0.25}, {"ok", true},
                             {"error", "bad \"x\" = 1"}, {"empty", ""}, {"ignored", std::vector<std::string>{"a", "b"}},
                             {"status", 200, false}}),
            "2025-01-31T12:00:00.123Z INFO  POST /v1/completions 200 id=cmpl-1 prompt_tokens=5 ttft_s=0.25 ok=true "
            "error=\"bad \\\"x\\\" = 1\" empty=\"\" ignored=[a,b]");
  EXPECT_EQ(log.format_line(kT, LogLevel::Warn, "w", {}), "2025-01-31T12:00:00.123Z WARN  w");
  EXPECT_EQ(log.format_line(kT, LogLevel::Error, "e", {}), "2025-01-31T12:00:00.123Z ERROR e");
}

TEST(Log, JsonLineParses) {
  const Logger log(LogFormat::Json);
  const std::string line = log.format_line(
      kT, LogLevel::Warn, "say \"hi\"\n",
      {{"id", "x\ty\x01"}, {"n", int64_t(1) << 40}, {"d", 0.5}, {"nan", std::nan("")}, {"b", false},
       {"list", std::vector<std::string>{"p\"q", "r"}}, {"status", 404, false}});
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["time"], "2025-01-31T12:00:00.123Z");
  EXPECT_EQ(j["level"], "warn");
  EXPECT_EQ(j["msg"], "say \"hi\"\n");
  EXPECT_EQ(j["id"], "x\ty\x01");
  EXPECT_EQ(j["n"], int64_t(1) << 40);
  EXPECT_EQ(j["d"], 0.5);
  EXPECT_TRUE(j["nan"].is_null());
  EXPECT_EQ(j["b"], false);
  EXPECT_EQ(j["list"], nlohmann::json::array({"p\"q", "r"}));
  EXPECT_EQ(j["status"], 404);  // JSON-only fields are in JSON lines
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(Log, ParseNamesAndLevelFilter) {
  EXPECT_EQ(parse_log_format("json", "--log-format"), LogFormat::Json);
  EXPECT_EQ(parse_log_format("text", "--log-format"), LogFormat::Text);
  try {
    parse_log_format("yaml", "--log-format");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--log-format: 'yaml'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_log_level("loud", "x"), InputError);
  EXPECT_EQ(parse_log_level("warn", "x"), LogLevel::Warn);

  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Logger log(LogFormat::Text, LogLevel::Warn, f);
  log.info("hidden");
  log.warn("shown");
  std::rewind(f);
  char buf[256] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const std::string out(buf, n);
  EXPECT_EQ(out.find("hidden"), std::string::npos) << out;
  EXPECT_NE(out.find("WARN  shown\n"), std::string::npos) << out;
}

TEST(Log, ThreadsWriteWholeLines) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Logger log(LogFormat::Json, LogLevel::Info, f);
  const std::string payload(2000, 'x');
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) log.info("m", {{"t", t}, {"i", i}, {"p", payload}});
    });
  for (auto& th : threads) th.join();
  std::rewind(f);
  std::string all;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) all.append(buf, n);
  std::fclose(f);
  std::istringstream in(all);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ASSERT_NO_THROW(nlohmann::json::parse(line)) << line.substr(0, 100);
    ++lines;
  }
  EXPECT_EQ(lines, 800);
}

}  // namespace
}  // namespace tp
