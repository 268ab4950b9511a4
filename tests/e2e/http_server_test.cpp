// `tpserve serve` as a user runs it: the real binary on SmolLM2 (Q4_1, 1 thread) as a child process, driven
// by a small Beast HTTP client. Greedy completions equal `tpserve generate`; streaming equals non-streaming;
// errors are OpenAI JSON with the right status; a client that disconnects mid-stream gets its request
// aborted (KV usage returns to 0); SIGTERM exits 0; one access-log line per request (text, and JSON with
// --log-format json, where every stderr line parses); a taken port fails before the model loads.
#include <fcntl.h>
#include <poll.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using json = nlohmann::json;

std::string model() { return std::string(TPSERVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Server {
  pid_t pid = -1;
  int port = 0;
  std::string log;
  std::string err;  // stderr alone when started with split_stderr, else empty (stderr goes to `log`)

  // Starts `tpserve serve --port 0 ...extra` and waits for its "serving ... at http://host:port" line.
  void start(const std::vector<std::string>& extra, bool split_stderr = false) {
    // A fresh, empty log made here before the fork: a name that could exist from an earlier run (pids are
    // reused) would let the poll below read a stale "serving ... at" line before the child truncates it.
    std::string name = testing::TempDir() + "/tpserve_http_XXXXXX";
    const int fd = mkstemp(name.data());
    ASSERT_GE(fd, 0) << "mkstemp " << name;
    log = name;
    int err_fd = fd;
    if (split_stderr) {
      err = testing::TempDir() + "/tpserve_http_err_XXXXXX";
      err_fd = mkstemp(err.data());
      ASSERT_GE(err_fd, 0) << "mkstemp " << err;
    }
    std::vector<std::string> args = {TPSERVE_BIN, "serve", "--model", model(), "--port", "0", "--threads", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid = fork();
    if (pid == 0) {
      dup2(fd, 1);
      dup2(err_fd, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fd);
    if (err_fd != fd) close(err_fd);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string out = slurp(log);
      const auto at = out.find(" at http://127.0.0.1:");
      if (at != std::string::npos && out.find('\n', at) != std::string::npos) {
        port = std::stoi(out.substr(at + 21));
        return;
      }
      int status;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL() << "server did not start:\n" << slurp(log) << (err.empty() ? "" : slurp(err));
  }

  // SIGTERM, then the exit code (-1: killed by a signal or timeout).
  int stop() {
    if (pid <= 0) return -1;
    kill(pid, SIGTERM);
    for (int i = 0; i < 300; ++i) {
      int status;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
    return -1;
  }
};

struct Resp {
  int status = 0;
  std::string content_type;
  std::string body;
  json j() const { return json::parse(body); }
};

// until_closed: after the response, read until the server closes the connection.
Resp request(int port, const std::string& method, const std::string& target, const std::string& body = {},
             const std::vector<std::pair<std::string, std::string>>& headers = {}, bool until_closed = false) {
  net::io_context io;
  tcp::socket s(io);
  s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), uint16_t(port)));
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  beast::error_code ec;
  http::write(s, req, ec);
  beast::flat_buffer buf;
  http::response_parser<http::string_body> p;
  p.body_limit(64 << 20);
  http::read(s, buf, p, ec);
  if (ec) return {0, "", "client error: " + ec.message()};
  for (std::array<char, 256> rest; until_closed && !ec;) s.read_some(net::buffer(rest), ec);
  return {int(p.get().result_int()), std::string(p.get()[http::field::content_type]), p.get().body()};
}

Resp post(int port, const std::string& target, const json& body,
          const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  return request(port, "POST", target, body.dump(), headers);
}

// The JSON payloads of an SSE body, [DONE] excluded; done says whether it ended with [DONE].
std::vector<json> sse_events(const std::string& body, bool& done) {
  std::vector<json> out;
  done = false;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    out.push_back(json::parse(data));
  }
  return out;
}

double metric(const std::string& text, const std::string& name) {
  const auto at = text.find("\n" + name + "{");
  if (at == std::string::npos) return -1;
  const auto sp = text.find("} ", at);
  return std::stod(text.substr(sp + 2, text.find('\n', sp) - sp - 2));
}

// The lines of `path` that contain `needle`, once there are at least `n` (polled up to 5 s: the access line is
// written just after the response).
std::vector<std::string> wait_lines(const std::string& path, const std::string& needle, size_t n = 1) {
  std::vector<std::string> found;
  for (int i = 0; i < 100; ++i) {
    found.clear();
    std::istringstream in(slurp(path));
    std::string line;
    while (std::getline(in, line))
      if (line.find(needle) != std::string::npos) found.push_back(line);
    if (found.size() >= n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return found;
}

class HttpServerTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string cfg = testing::TempDir() + "/tpserve_http_test." + std::to_string(getpid()) + ".yaml";
    std::ofstream(cfg) << "server:\n  max_body_bytes: 65536\n";
    server_.start({"--config", cfg});
  }
  static void TearDownTestSuite() { server_.stop(); }
  static Server server_;
  int port() const { return server_.port; }
};
Server HttpServerTest::server_;

TEST_F(HttpServerTest, HealthAndModels) {
  ASSERT_GT(port(), 0);
  const Resp h = request(port(), "GET", "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.j()["status"], "ok");
  const Resp m = request(port(), "GET", "/v1/models");
  ASSERT_EQ(m.status, 200) << m.body;
  EXPECT_EQ(m.j()["object"], "list");
  EXPECT_EQ(m.j()["data"][0]["id"], "SmolLM2-135M-Instruct");
}

TEST_F(HttpServerTest, GreedyCompletionEqualsGenerateAndStreaming) {
  ASSERT_GT(port(), 0);
  const std::string prompt = "The capital of France is";
  const json body = {{"model", "SmolLM2-135M-Instruct"}, {"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}};
  const Resp a = post(port(), "/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.body;
  const json j = a.j();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "SmolLM2-135M-Instruct");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  EXPECT_EQ(j["usage"]["total_tokens"], 13);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  const std::string text = j["choices"][0]["text"];
  EXPECT_EQ(text.rfind(" Paris", 0), 0u) << text;

  // Same text as `tpserve generate` (the CLI prints prompt + text, then "\n\nprefill:").
  const std::string cmd = std::string(TPSERVE_BIN) + " generate --model " + model() + " --prompt '" + prompt +
                          "' --max-tokens 8 --threads 1 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  ASSERT_EQ(pclose(p), 0) << out;
  EXPECT_EQ(out.substr(0, out.find("\n\nprefill:")), prompt + text);

  // Deterministic, and streaming gives the same text in chunks, then [DONE].
  EXPECT_EQ(post(port(), "/v1/completions", body).j()["choices"][0]["text"], text);
  json sb = body;
  sb["stream"] = true;
  sb["stream_options"] = {{"include_usage", true}};
  const Resp s = post(port(), "/v1/completions", sb);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.content_type, "text/event-stream");
  bool done;
  const std::vector<json> ev = sse_events(s.body, done);
  EXPECT_TRUE(done);
  ASSERT_GE(ev.size(), 3u);
  std::string streamed;
  for (size_t i = 0; i + 1 < ev.size(); ++i) streamed += ev[i]["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(ev[ev.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(ev.back()["usage"]["completion_tokens"], 8);
  EXPECT_TRUE(ev.back()["choices"].empty());
}

TEST_F(HttpServerTest, StopStringIsNotEmitted) {
  ASSERT_GT(port(), 0);
  const json body = {{"prompt", "The capital of France is"}, {"max_tokens", 8}, {"temperature", 0}, {"stop", {"."}}};
  const Resp a = post(port(), "/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.j()["choices"][0]["text"], " Paris");
  EXPECT_EQ(a.j()["choices"][0]["finish_reason"], "stop");
}

TEST_F(HttpServerTest, ChatCompletionStreamingMatchesNonStreaming) {
  ASSERT_GT(port(), 0);
  json body = {{"messages", {{{"role", "user"}, {"content", "What is 2+2?"}}}}, {"max_tokens", 12}, {"temperature", 0}};
  const Resp a = post(port(), "/v1/chat/completions", body);
  ASSERT_EQ(a.status, 200) << a.body;
  const json j = a.j();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const std::string text = j["choices"][0]["message"]["content"];
  EXPECT_FALSE(text.empty());
  body["stream"] = true;
  const Resp s = post(port(), "/v1/chat/completions", body);
  bool done;
  const std::vector<json> ev = sse_events(s.body, done);
  EXPECT_TRUE(done);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
  std::string streamed;
  for (const json& e : ev)
    if (e["choices"][0]["delta"].contains("content")) streamed += e["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(ev.back()["choices"][0]["finish_reason"], j["choices"][0]["finish_reason"]);
}

TEST_F(HttpServerTest, ChoicesLogprobsAndPenalties) {
  ASSERT_GT(port(), 0);
  // n = 2 with a seed: choice i is the one-choice request with seed + i.
  json body = {{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"temperature", 0.9}, {"seed", 11}, {"n", 2}};
  const Resp two = post(port(), "/v1/completions", body);
  ASSERT_EQ(two.status, 200) << two.body;
  const json j = two.j();
  ASSERT_EQ(j["choices"].size(), 2u) << two.body;
  int64_t n_tokens = 0;
  for (int i = 0; i < 2; ++i) {
    const json& c = j["choices"][size_t(i)];
    EXPECT_EQ(c["index"], i);
    json solo = body;
    solo["n"] = 1;
    solo["seed"] = 11 + i;
    const Resp one = post(port(), "/v1/completions", solo);
    ASSERT_EQ(one.status, 200) << one.body;
    EXPECT_EQ(one.j()["choices"][0]["text"], c["text"]) << "choice " << i;
    n_tokens += one.j()["usage"]["completion_tokens"].get<int64_t>();
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], n_tokens);

  // Logprobs (completions shape), greedy: the sampled token is the most likely one.
  const Resp lp = post(port(), "/v1/completions",
                       {{"prompt", "The capital of France is"}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 1}});
  ASSERT_EQ(lp.status, 200) << lp.body;
  const json lj = lp.j();
  const json& l = lj["choices"][0]["logprobs"];
  ASSERT_EQ(l["tokens"].size(), 4u) << lp.body;
  std::string joined;
  for (size_t i = 0; i < 4; ++i) {
    joined += l["tokens"][i].get<std::string>();
    const double v = l["token_logprobs"][i];
    EXPECT_LE(v, 0.0);
    ASSERT_EQ(l["top_logprobs"][i].size(), 1u) << lp.body;
    EXPECT_DOUBLE_EQ(l["top_logprobs"][i].begin().value().get<double>(), v);
    EXPECT_EQ(l["top_logprobs"][i].begin().key(), l["tokens"][i]);
  }
  EXPECT_EQ(joined, lj["choices"][0]["text"]);
  EXPECT_EQ(l["text_offset"][0], 0);

  // A frequency penalty changes a repetitive greedy completion, the same way every time.
  json rep = {{"prompt", "1, 1, 1, 1, 1, 1,"}, {"max_tokens", 10}, {"temperature", 0}};
  const std::string plain = post(port(), "/v1/completions", rep).j()["choices"][0]["text"];
  rep["frequency_penalty"] = 2.0;
  const std::string penalized = post(port(), "/v1/completions", rep).j()["choices"][0]["text"];
  EXPECT_NE(penalized, plain);
  EXPECT_EQ(post(port(), "/v1/completions", rep).j()["choices"][0]["text"], penalized);
}

int thread_count(pid_t pid) {
  std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

TEST_F(HttpServerTest, IdleKeepAliveConnectionsCostNoThreads) {
  ASSERT_GT(port(), 0);
  const int before = thread_count(server_.pid);
  ASSERT_GT(before, 0);
  net::io_context io;
  std::vector<tcp::socket> idle;
  for (int i = 0; i < 64; ++i) {
    idle.emplace_back(io);
    idle.back().connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), uint16_t(port())));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LE(thread_count(server_.pid), before + 2) << "64 idle connections";
  const Resp r = post(port(), "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(HttpServerTest, TokenizeDetokenizeRoundTrip) {
  ASSERT_GT(port(), 0);
  const Resp t = post(port(), "/tokenize", {{"prompt", "Hello, world! 123"}});
  ASSERT_EQ(t.status, 200) << t.body;
  const json tokens = t.j()["tokens"];
  EXPECT_EQ(t.j()["count"], tokens.size());
  const Resp d = post(port(), "/detokenize", {{"tokens", tokens}});
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.j()["prompt"], "Hello, world! 123");
}

TEST_F(HttpServerTest, ErrorsAreOpenAiJson) {
  ASSERT_GT(port(), 0);
  struct Case {
    std::string target, body;
    int status;
    std::string param, code;
  };
  const Case cases[] = {
      {"/v1/completions", "{not json", 400, "", "invalid_json"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": "ten"})", 400, "max_tokens", "invalid_type"},
      {"/v1/chat/completions", R"({"messages": "hi"})", 400, "messages", ""},
      {"/v1/completions", R"({"model": "gpt-4", "prompt": "hi"})", 404, "model", "model_not_found"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": 100000})", 400, "", ""},
      {"/v1/completions", R"({"prompt": "hi", "n": 17})", 400, "n", "invalid_value"},
      {"/v1/completions", R"({"prompt": "hi", "logprobs": 21})", 400, "logprobs", "invalid_value"},
      {"/v1/completions", R"({"prompt": "hi", "logit_bias": {"x": 1}})", 400, "logit_bias", "invalid_value"},
      {"/v1/completions", R"({"prompt": "hi", "logit_bias": {"49152": 1}})", 400, "logit_bias[0]", "invalid_value"},
      {"/v1/completions", R"({"prompt": [[1, 2], [3, 49152]]})", 400, "prompt[1][1]", "invalid_value"},
      {"/v1/completions", R"({"prompt": ["a", [1]]})", 400, "prompt[1]", "invalid_type"},
      {"/v1/completions", R"({"prompt": "hi", "presence_penalty": 2.5})", 400, "presence_penalty", "invalid_value"},
      {"/v1/completions", R"({"prompt": "hi", "repetition_penalty": 0})", 400, "repetition_penalty", "invalid_value"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", 400,
       "top_logprobs", "invalid_value"},
      {"/v1/completions", "{\"prompt\": \"" + std::string(70000, 'a') + "\"}", 413, "", ""},
  };
  for (const Case& c : cases) {
    const Resp r = request(port(), "POST", c.target, c.body);
    EXPECT_EQ(r.status, c.status) << c.body.substr(0, 80) << "\n" << r.body;
    json j;
    ASSERT_NO_THROW(j = r.j()) << r.body;
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    if (!c.param.empty()) {
      EXPECT_EQ(j["error"]["param"], c.param) << r.body;
    }
    if (!c.code.empty()) {
      EXPECT_EQ(j["error"]["code"], c.code) << r.body;
    }
  }
  EXPECT_EQ(request(port(), "GET", "/nope").status, 404);
  EXPECT_EQ(request(port(), "GET", "/health").status, 200);  // still serving
}

// /metrics reports the KV footprint the start-up report printed (both from kvstore/capacity): the default
// cache.dtype bf16, 512 MiB, blocks of 16 on SmolLM2 = 23040 B/token, 368640 B/block, 1456 blocks.
TEST_F(HttpServerTest, MetricsShowTheStartUpKvFootprint) {
  ASSERT_GT(port(), 0);
  const std::string m = request(port(), "GET", "/metrics").body;
  const std::string log = slurp(server_.log);
  EXPECT_NE(log.find("KV cache per rank: 23040 B/token (2 x 30 layers x 3 KV heads x 64 x 2 B bf16), block 16 "
                     "tokens = 368640 B"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("KV pool per rank: 1456 blocks"), std::string::npos) << log;
  EXPECT_EQ(metric(m, "tpserve:kv_cache_bytes_per_token"), 23040);
  EXPECT_EQ(metric(m, "tpserve:kv_cache_block_bytes"), 368640);
  EXPECT_EQ(metric(m, "tpserve:kv_cache_blocks_total"), 1456);
  EXPECT_NE(m.find("vllm:cache_config_info{block_size=\"16\",cache_dtype=\"bf16\","), std::string::npos) << m;
}

TEST_F(HttpServerTest, DisconnectMidStreamAbortsAndFreesBlocks) {
  ASSERT_GT(port(), 0);
  const std::string before = request(port(), "GET", "/metrics").body;
  {
    net::io_context io;
    tcp::socket s(io);
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), uint16_t(port())));
    const std::string body =
        json{{"prompt", "Tell me a long story."}, {"max_tokens", 400}, {"ignore_eos", true}, {"stream", true}}.dump();
    http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
    req.set(http::field::host, "127.0.0.1");
    req.body() = body;
    req.prepare_payload();
    http::write(s, req);
    std::string got;
    std::array<char, 1024> buf;
    while (got.find("data: {", got.find("data: {") + 1) == std::string::npos) {  // two chunks arrived
      const size_t n = s.read_some(net::buffer(buf));
      got.append(buf.data(), n);
    }
    const std::string mid = request(port(), "GET", "/metrics").body;
    EXPECT_GT(metric(mid, "vllm:kv_cache_usage_perc"), 0.0);
    EXPECT_EQ(metric(mid, "vllm:num_requests_running"), 1);
  }  // closed mid-stream
  double usage = -1, running = -1;
  std::string after;
  for (int i = 0; i < 100; ++i) {
    after = request(port(), "GET", "/metrics").body;
    usage = metric(after, "vllm:kv_cache_usage_perc");
    running = metric(after, "vllm:num_requests_running");
    if (usage == 0 && running == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(usage, 0);
  EXPECT_EQ(running, 0);
  EXPECT_LT(metric(after, "vllm:generation_tokens_total"), metric(before, "vllm:generation_tokens_total") + 400);
  EXPECT_GT(metric(after, "vllm:prompt_tokens_total"), metric(before, "vllm:prompt_tokens_total"));
  const std::string aborted =
      "\nvllm:request_success_total{engine=\"0\",finished_reason=\"abort\",model_name=\"SmolLM2-135M-Instruct\"} ";
  auto count = [&](const std::string& t) {
    const auto at = t.find(aborted);
    return at == std::string::npos ? -1.0 : std::stod(t.substr(at + aborted.size()));
  };
  EXPECT_GE(count(before), 0);
  EXPECT_EQ(count(after), count(before) + 1);
  EXPECT_NE(after.find("vllm:time_to_first_token_seconds_count"), std::string::npos);
  EXPECT_EQ(request(port(), "GET", "/health").status, 200);
}

// Seconds until the server closes a connection on which a client sent `partial` and then nothing.
double seconds_until_closed(int port, const std::string& partial) {
  net::io_context io;
  tcp::socket s(io);
  s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), uint16_t(port)));
  if (!partial.empty()) net::write(s, net::buffer(partial));
  const auto t0 = std::chrono::steady_clock::now();
  std::array<char, 256> buf;
  beast::error_code ec;
  while (!ec) {  // until EOF or reset; never longer than 10 s (a server without the timeout fails, not hangs)
    pollfd p{s.native_handle(), POLLIN, 0};
    if (poll(&p, 1, 10000) == 0) break;
    s.read_some(net::buffer(buf), ec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(HttpServerAuth, ApiKeyRequiredOnV1RequestTimeoutAndSigtermExitsZero) {
  const std::string cfg = testing::TempDir() + "/tpserve_http_auth." + std::to_string(getpid()) + ".yaml";
  std::ofstream(cfg) << "server:\n  api_key: sekret\n  request_timeout_s: 3\n  max_connections: 2\n";
  Server srv;
  srv.start({"--config", cfg});
  ASSERT_GT(srv.port, 0);
  // Each request before the timeout checks closes its connection and waits for the server's close: a
  // connection the server is still finishing counts against max_connections (2), and a third connection
  // accepted past the cap is a /health reserve one with a 2 s read timeout, not request_timeout_s.
  const std::string body = json{{"prompt", "Hi"}, {"max_tokens", 2}}.dump();
  auto closing = [&](const std::string& method, const std::string& target, const std::string& b,
                     std::vector<std::pair<std::string, std::string>> headers) {
    headers.emplace_back("Connection", "close");
    return request(srv.port, method, target, b, headers, true);
  };
  const Resp none = closing("POST", "/v1/completions", body, {});
  EXPECT_EQ(none.status, 401) << none.body;
  EXPECT_EQ(none.j()["error"]["type"], "authentication_error");
  EXPECT_EQ(closing("POST", "/v1/completions", body, {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(closing("GET", "/v1/models", "", {}).status, 401);
  EXPECT_EQ(closing("POST", "/v1/completions", body, {{"Authorization", "Bearer sekret"}}).status, 200);
  EXPECT_EQ(closing("GET", "/health", "", {}).status, 200);
  // A client that stalls mid-request, or connects and says nothing, loses its connection after
  // server.request_timeout_s (3 s: long enough that a loaded machine does not expire the busy connections of
  // the max_connections check below early); the server keeps serving.
  const double stalled = seconds_until_closed(srv.port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le");
  EXPECT_GT(stalled, 2.8);
  EXPECT_LT(stalled, 10.0);
  const double silent = seconds_until_closed(srv.port, "");
  EXPECT_GT(silent, 2.8);
  EXPECT_LT(silent, 10.0);
  // The last request before the cap check closes its connection and waits for the server's close: a kept-alive
  // connection still being finished by the server would take one of the two slots.
  EXPECT_EQ(request(srv.port, "GET", "/health", {}, {{"Connection", "close"}}, true).status, 200);
  {  // server.max_connections: 2 busy (each in the middle of a request) -> another request gets 503, /health
     // is still answered (the reserve); the request timeout frees the slots again
    net::io_context io;
    std::vector<tcp::socket> held;
    for (int i = 0; i < 2; ++i) {
      held.emplace_back(io);
      held.back().connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), uint16_t(srv.port)));
      net::write(held.back(), net::buffer(std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")));
    }
    // Polled, not slept: on a loaded machine (CI runs tests in parallel) the server may take a while to
    // accept the held connections, and its timers may fire late.
    const auto t_held = std::chrono::steady_clock::now();
    Resp busy = request(srv.port, "GET", "/nope");
    while (busy.status != 503 && std::chrono::steady_clock::now() - t_held < std::chrono::seconds(2)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      busy = request(srv.port, "GET", "/nope");
    }
    EXPECT_EQ(busy.status, 503) << busy.body;
    EXPECT_NE(busy.body.find("too many open connections"), std::string::npos) << busy.body;
    EXPECT_EQ(request(srv.port, "GET", "/health").status, 200);
    int freed = request(srv.port, "GET", "/nope").status;
    while (freed != 404 && std::chrono::steady_clock::now() - t_held < std::chrono::seconds(15)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      freed = request(srv.port, "GET", "/nope").status;
    }
    EXPECT_EQ(freed, 404);
    EXPECT_GT(std::chrono::steady_clock::now() - t_held, std::chrono::milliseconds(2500));  // freed by the timeout
  }
  EXPECT_EQ(srv.stop(), 0) << slurp(srv.log);
}

TEST_F(HttpServerTest, AccessLogOneLinePerRequestWithItsFields) {
  ASSERT_GT(port(), 0);
  const Resp ok = post(port(), "/v1/completions",
                       {{"prompt", "The capital of France is"}, {"max_tokens", 3}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(ok.status, 200) << ok.body;
  const std::string id = ok.j()["id"];
  const Resp bad = request(port(), "POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": "access-log-x"})");
  ASSERT_EQ(bad.status, 400) << bad.body;
  ASSERT_EQ(request(port(), "GET", "/nope-access-log").status, 404);

  const auto l200 = wait_lines(server_.log, "id=" + id);
  ASSERT_EQ(l200.size(), 1u) << slurp(server_.log);
  EXPECT_NE(l200[0].find(" INFO  POST /v1/completions 200 id=" + id + " prompt_tokens=5 output_tokens=3 ttft_s="),
            std::string::npos) << l200[0];
  EXPECT_NE(l200[0].find(" total_s="), std::string::npos) << l200[0];
  EXPECT_NE(l200[0].find(" peer=127.0.0.1:"), std::string::npos) << l200[0];
  const auto l400 = wait_lines(server_.log, "access-log-x");
  ASSERT_EQ(l400.size(), 1u) << slurp(server_.log);
  EXPECT_NE(l400[0].find(" WARN  POST /v1/completions 400 "), std::string::npos) << l400[0];
  EXPECT_NE(l400[0].find(" error=\"max_tokens "), std::string::npos) << l400[0];
  const auto l404 = wait_lines(server_.log, "/nope-access-log 404");
  ASSERT_EQ(l404.size(), 1u) << slurp(server_.log);
  EXPECT_NE(l404[0].find(" WARN  GET /nope-access-log 404 "), std::string::npos) << l404[0];
  EXPECT_NE(l404[0].find(" error=\"Not Found: GET /nope-access-log\""), std::string::npos) << l404[0];
}

TEST(HttpServerLogJson, EveryStderrLineIsJsonWithAccessAndStatsFields) {
  const std::string cfg = testing::TempDir() + "/tpserve_http_json." + std::to_string(getpid()) + ".yaml";
  std::ofstream(cfg) << "server:\n  stats_interval_s: 0.5\n";
  Server srv;
  srv.start({"--config", cfg, "--log-format", "json"}, true);
  ASSERT_GT(srv.port, 0);
  const Resp ok = post(srv.port, "/v1/completions",
                       {{"prompt", "The capital of France is"}, {"max_tokens", 3}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(ok.status, 200) << ok.body;
  ASSERT_EQ(request(srv.port, "POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": "x"})").status, 400);
  ASSERT_EQ(request(srv.port, "GET", "/nope").status, 404);
  EXPECT_FALSE(wait_lines(srv.err, "\"event\":\"stats\"").empty()) << slurp(srv.err);
  EXPECT_EQ(srv.stop(), 0) << slurp(srv.log) << slurp(srv.err);

  std::istringstream in(slurp(srv.err));
  std::string line;
  std::vector<json> access, stats;
  int n_lines = 0;
  while (std::getline(in, line)) {
    ++n_lines;
    json j;
    ASSERT_NO_THROW(j = json::parse(line)) << "not JSON: " << line;
    EXPECT_TRUE(j.contains("time") && j.contains("level") && j.contains("msg")) << line;
    if (j.value("event", "") == "access") access.push_back(j);
    if (j.value("event", "") == "stats") stats.push_back(j);
  }
  EXPECT_GT(n_lines, 3);
  ASSERT_EQ(access.size(), 3u) << slurp(srv.err);
  // The access line of a generation is written when its job finishes, on another thread than the one that
  // answers the 400 and the 404 at once: the three lines may come in any order, so they are found by status.
  std::sort(access.begin(), access.end(), [](const json& x, const json& y) {
    return x.value("status", 0) < y.value("status", 0);
  });
  const json& a = access[0];
  EXPECT_EQ(a["method"], "POST");
  EXPECT_EQ(a["route"], "/v1/completions");
  EXPECT_EQ(a["status"], 200);
  EXPECT_EQ(a["id"], ok.j()["id"]);
  EXPECT_EQ(a["prompt_tokens"], 5);
  EXPECT_EQ(a["output_tokens"], 3);
  EXPECT_GT(a["ttft_s"].get<double>(), 0.0);
  EXPECT_GE(a["total_s"].get<double>(), a["ttft_s"].get<double>());
  EXPECT_EQ(a["level"], "info");
  EXPECT_EQ(access[1]["status"], 400);
  EXPECT_EQ(access[1]["level"], "warn");
  EXPECT_NE(access[1]["error"].get<std::string>().find("max_tokens"), std::string::npos) << access[1];
  EXPECT_EQ(access[2]["route"], "/nope");
  EXPECT_EQ(access[2]["status"], 404);
  EXPECT_EQ(access[2]["error"], "Not Found: GET /nope");
  ASSERT_FALSE(stats.empty());
  double generated = 0;
  for (const json& st : stats) generated += st["generation_tokens_per_s"].get<double>();
  EXPECT_GT(generated, 0.0);
  EXPECT_NE(stats[0]["msg"].get<std::string>().find("Avg prompt throughput: "), std::string::npos) << stats[0];
}

TEST(ServePortCheck, TakenPortFailsAtOnceBeforeTheModelLoads) {
  net::io_context io;
  tcp::acceptor taken(io, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  const int port = taken.local_endpoint().port();
  // A model path that does not exist: checked after the port, the error must be the port's.
  const std::string cmd = std::string(TPSERVE_BIN) + " serve --model /nonexistent/model.gguf --port " +
                          std::to_string(port) + " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << out;
  EXPECT_LT(seconds, 2.0);
  EXPECT_EQ(out, "tpserve serve: cannot listen on 127.0.0.1:" + std::to_string(port) +
                     ": Address already in use (server.host, server.port)\n");
}

}  // namespace
