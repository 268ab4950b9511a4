// libFuzzer target: arbitrary bytes through deserialize_step_plan / deserialize_step_result
// (parallel/step_plan.h), with a round-trip property: whatever deserializes re-serializes to the same bytes.
// Input: byte 0 chooses the message (bit 0: 0 StepPlan, 1 StepResult) and whether the frame is fixed up
// first (bit 1: write total_bytes and the FNV-1a checksum into the header, so mutations reach the body
// checks instead of stopping at the checksum); the rest is the buffer.
// Accepted outcomes: a value that round-trips, or tp::Error. Anything else aborts: another exception type
// (uncaught, so the report shows the throw site), a sanitizer report, or a round-trip mismatch.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "common/error.h"
#include "parallel/step_plan.h"

namespace {

// Both headers (PlanHeader and ResultHeader in step_plan.cpp: 40 and 48 bytes) have total_bytes (uint64) at
// offset 24 and checksum (uint32) at offset 32.
constexpr size_t kHeaderBytes = 40, kTotalOffset = 24, kChecksumOffset = 32;

void fix_frame(std::vector<uint8_t>& b) {
  if (b.size() < kHeaderBytes) return;
  const uint64_t total = b.size();
  std::memcpy(b.data() + kTotalOffset, &total, sizeof(total));
  uint32_t h = 2166136261u;  // FNV-1a 32 over every byte except the checksum field
  for (size_t i = 0; i < b.size(); ++i)
    if (i < kChecksumOffset || i >= kChecksumOffset + 4) h = (h ^ b[i]) * 16777619u;
  std::memcpy(b.data() + kChecksumOffset, &h, sizeof(h));
}

void check_round_trip(const std::vector<uint8_t>& in, const std::vector<uint8_t>& out, const char* what) {
  if (in == out) return;
  size_t i = 0;
  while (i < in.size() && i < out.size() && in[i] == out[i]) ++i;
  std::fprintf(stderr, "step_plan_fuzz: %s round trip differs: %zu bytes in, %zu bytes out, first difference at %zu\n",
               what, in.size(), out.size(), i);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool result = data[0] & 1;
  std::vector<uint8_t> bytes(data + 1, data + size);
  if (data[0] & 2) fix_frame(bytes);
  try {
    if (result) {
      const tp::StepResult r = tp::deserialize_step_result(bytes);
      check_round_trip(bytes, tp::serialize(r), "StepResult");
    } else {
      const tp::StepPlan p = tp::deserialize_step_plan(bytes);
      check_round_trip(bytes, tp::serialize(p), "StepPlan");
    }
  } catch (const tp::Error&) {
  }
  return 0;
}
