// The typed tpserve configuration, read from YAML (configs/*.yaml). Every key is optional and has the default
// below; an unknown key, a section or key given twice, a wrong type or an out-of-range value throws
// ConfigError("<file>", "<section.key>", reason + " (line N)"). Paths are resolved relative to the config
// file's directory when relative. Checks that need the model or the machine are done where those are known
// (check_config_for_model below; the KV memory check in launch/host_memory.h).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tp {

struct ModelSection {
  std::string path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";  // GGUF file or HF directory
  std::string dtype = "bf16";     // runtime weight dtype: "bf16" or "f32"
  std::string quantized = "keep"; // GGUF block-quantized weights: "keep" (run quantized) or "dequantize" (to dtype)
  std::string name;               // served model name; empty: taken from the file
  std::string chat_template;      // empty: from the model file
  std::string device = "cpu";     // where the forward runs: "cpu", or "cuda" (a build with CUDA and a GPU)
};

struct ParallelSection {
  int64_t tp = 1;                 // tensor-parallel degree, >= 1
  int64_t dp = 1;                 // data-parallel replicas, >= 1
  int64_t threads = 0;            // compute threads per rank; 0: cores / ranks
  // Memory one rank may hold for weights + KV pool, a byte size ("512MiB", "2GB"; kvstore/capacity's
  // parse_byte_size, checked at start-up); empty: no limit. On GPU the device's memory plays this part.
  std::string rank_memory;
};

struct CacheSection {
  int64_t block_size = 16;        // tokens per KV block, power of two in [1, 1024]
  int64_t memory_mb = 512;        // KV budget per rank in MiB, >= 1
  std::string dtype = "bf16";     // KV element type (common/kv_dtype.h): "bf16", "f32", "fp8_e4m3", "int8"
  int64_t max_context = 0;        // max tokens per sequence; 0: the model's trained context
  bool prefix_caching = true;
  // On cuda: the fraction of each GPU's total memory for weights + activations + KV (vLLM's meaning), in
  // (0, 1]; the KV pool is what remains of it (kvstore/gpu_memory_plan.h) and memory_mb is not used.
  double gpu_memory_utilization = 0.9;
};

struct SchedulerSection {
  int64_t max_num_seqs = 64;              // running sequences per step, >= 1
  int64_t max_num_batched_tokens = 2048;  // tokens per step, >= 1
  int64_t max_queued_requests = 1024;     // waiting requests before 429, >= 1
  std::string kv_reservation = "paged";   // "paged": blocks as tokens arrive; "static": max_context per request
};

struct ServerSection {
  std::string host = "127.0.0.1";
  int64_t port = 8000;            // [0, 65535]; 0: any free port
  std::string api_key;            // empty: no authentication
  int64_t max_body_bytes = 8 << 20;
  int64_t max_connections = 1024;   // open connections served at once (a thread each); more get 503
  double shutdown_deadline_s = 10.0;
  double request_timeout_s = 60.0;  // a client must deliver each request (headers + body) within this; 0: never
  // A step (one forward on every rank) making no progress — no layer finished — for this long means a rank
  // stopped responding while alive: /health turns 503 and the job is aborted (MPI_Abort), so it never hangs.
  // A long step that keeps finishing layers (a long prefill) is never stopped. 0: never.
  double step_timeout_s = 300.0;
  std::string metrics_prefix = "vllm";  // /metrics names: "vllm" (vllm:..., what vLLM dashboards read) or "tpserve"
  double keepalive_timeout_s = 5.0;  // a kept-alive connection idle this long between requests is closed; 0: never
  double send_timeout_s = 30.0;      // one response write (or stream chunk) taking longer closes the connection; 0: never
  std::string log_format = "text";   // "text" | "json": the server's log lines on stderr (access log, stats)
  double stats_interval_s = 10.0;    // a throughput / queue / KV stats line this often, when it changed; 0: off
};

// KV cache events (kvstore/kv_events.h) published by `tpserve serve` over ZeroMQ PUB in vLLM's wire shape
// (kvstore/kv_event_wire.h), for the router's prefix index and external KV-aware routers.
struct KvEventsSection {
  bool enable = false;
  // ZeroMQ bind endpoint; a "*" port is any free one (GET /kv_events on the replica says which).
  std::string endpoint = "tcp://127.0.0.1:*";
  std::string topic;  // the first frame of every message (vLLM: "" by default)
};

// `tpserve router`: the front door over several replicas (coordinator/router_*.h).
struct RouterSection {
  std::vector<std::string> replicas;      // base URLs "http://host:port" of `tpserve serve` replicas
  std::string policy = "prefix_aware";    // round_robin | least_load | prefix_aware (coordinator/router_policy.h)
  double health_interval_s = 1.0;         // GET /health of every replica this often
  double health_timeout_s = 2.0;          // a replica not answering within this counts as a failed check
  int64_t unhealthy_after = 2;            // consecutive failed checks before a replica is marked down
  // RouteCostParams::kv_usage_tokens: tokens of load a replica's full KV cache counts as. 0 (off) by default: the
  // usage read from a replica's /metrics lags by up to health_interval_s and still counts requests that have since
  // finished, while the router's own in-flight tokens (the load term) are exact; a stale sample outweighed a
  // conversation's cached prefix in testing. Set it when replicas also serve clients the router does not see.
  double kv_usage_tokens = 0;
  bool kv_fetch = false;                  // add kv_transfer_params.fetch_from when another replica holds more
  int64_t max_replays = 3;                // how many times one request is moved to another replica
};

struct Config {
  std::string source = "<defaults>";  // the file it came from
  ModelSection model;
  ParallelSection parallel;
  CacheSection cache;
  SchedulerSection scheduler;
  ServerSection server;
  KvEventsSection kv_events;
  RouterSection router;
  // 1-based line of each key read from the file, by "section.key"; absent for defaults.
  std::map<std::string, int64_t> lines;
  // " (line N)" when `key` ("cache.max_context") was read from the file, else "".
  std::string line_of(const std::string& key) const;
};

// Reads and validates a YAML config file. Throws ConfigError / InputError (unreadable, or a directory).
Config load_config(const std::string& path);
// Parses YAML text; `source` names it in errors; relative paths resolve against `base_dir`.
Config parse_config(const std::string& yaml_text, const std::string& source, const std::string& base_dir);

// Every setting of `c` as YAML that parse_config reads back to the same values: each section and key in the
// order of this header, strings double-quoted, numbers in their shortest exact form, a relative model path made
// absolute against the working directory (where it would be opened).
std::string format_config(const Config& c);

// The config against the model it will serve: cache.max_context must not exceed the model's trained context
// `model_max_context` (0: unknown, not checked). Throws ConfigError naming the file, key, line and the model's
// value.
void check_config_for_model(const Config& c, int64_t model_max_context, const std::string& model_path);

}  // namespace tp
