// The simulator's workload: which requests arrive when, with how many prompt and output tokens.
//
// YAML (one mapping; every field named in errors):
//   seed: 0                       # optional, default 0: the only source of randomness
//   requests: 1000                # > 0
//   arrival:                      # exactly one of
//     rate: 10.0                  #   Poisson arrivals, requests/s (> 0)
//     concurrency: 16             #   closed loop: C clients, each sends its next request when the last ends
//   prompt_len: {dist: uniform, min: 128, max: 512}   # dist: fixed (value), uniform (min, max, inclusive),
//   output_len: {dist: fixed, value: 128}              #       exponential (mean, min, max: clipped), tokens >= 1
//   prefix_len: 0                 # optional: tokens every prompt shares at its start (prefix-cache hits)
// JSONL (a trace, extension .jsonl): one object a line {"arrival_s": 0.5, "prompt_len": 100, "output_len": 20};
//   arrival_s >= 0 (need not be sorted). Setting Workload::concurrency (simulate --concurrency C) replays a
//   trace closed loop at C clients, in arrival_s order (file order among equal ones), the times ignored.
//
// Deterministic: the same file gives the same requests (std::mt19937_64 seeded with `seed`; lengths and gaps
// drawn by our own inverse-CDF code, not std:: distributions, whose output the standard leaves open).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tp {

struct SimRequest {
  int64_t id = 0;
  double arrival_s = 0;       // open loop; ignored in a closed loop
  int64_t prompt_len = 1;
  int64_t output_len = 1;
  std::vector<int32_t> prompt;  // [prompt_len] token ids
};

struct LengthDist {
  enum class Kind { Fixed, Uniform, Exponential } kind = Kind::Fixed;
  int64_t value = 1, min = 1, max = 1;
  double mean = 1;
};

struct Workload {
  uint64_t seed = 0;
  int64_t n_requests = 0;
  double rate = 0;            // > 0: Poisson open loop
  int64_t concurrency = 0;    // > 0: closed loop (over a trace too)
  bool trace = false;         // arrivals from the file
  LengthDist prompt_len, output_len;
  int64_t prefix_len = 0;
  std::vector<SimRequest> requests;  // [n_requests], made by load_workload
};

// Reads a YAML workload or a JSONL trace and draws its requests. Throws ConfigError naming the file and field
// (JSONL: "line N: field").
Workload load_workload(const std::string& path);
// Draws w.requests from the distributions (YAML workloads; load_workload calls it).
void draw_requests(Workload& w);

}  // namespace tp
