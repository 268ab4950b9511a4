// Decode attention over a paged pool per KV dtype: one query token (SmolLM2's 9 heads, 3 KV heads, head_dim
// 64) against C cached positions in blocks of 16 through a shuffled block table, on the AVX2 and the portable
// path. Reports µs per call (one layer), the KV bytes it reads (C x 2 x 3 x 64 x dtype bytes + block scales)
// and the read rate they imply. Inputs as in the tests: uniform [-1, 1]. Best of --reps after a warm-up.
//   kv_attention_bench [--threads 1] [--contexts 512,2048,8192] [--reps 50]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/kv_dtype.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/paged_attention.h"

namespace {

using namespace tp;
using Clock = std::chrono::steady_clock;

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = s.find(',', at);
    out.push_back(std::stoll(s.substr(at, comma - at)));
    at = comma == std::string::npos ? s.size() : comma + 1;
  }
  return out;
}

int run(int argc, char** argv) {
  int threads = 1, reps = 50;
  std::vector<int64_t> contexts = {512, 2048, 8192};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--threads") threads = std::stoi(v);
    else if (k == "--reps") reps = std::stoi(v);
    else if (k == "--contexts") contexts = parse_list(v);
    else throw std::runtime_error("unknown option " + k);
  }
  cpu::set_num_threads(threads);
  const int64_t n_heads = 9, n_kv = 3, d = 64, bs = 16;
  std::printf("decode attention, 9 heads / 3 KV heads x 64, blocks of 16, %d thread(s), best of %d\n\n", threads, reps);
  std::printf("| context | KV dtype | path | µs per call | KV bytes read | GB/s |\n|---:|---|---|---:|---:|---:|\n");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (int64_t ctx : contexts) {
    const int64_t n_blocks = (ctx + bs - 1) / bs;
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<float> k(size_t(ctx * n_kv * d)), v(k.size()), q(size_t(n_heads * d)), out(q.size());
    for (float& x : k) x = uni(rng);
    for (float& x : v) x = uni(rng);
    for (float& x : q) x = uni(rng);
    std::vector<int64_t> slots(static_cast<size_t>(ctx));
    for (int64_t p = 0; p < ctx; ++p) slots[size_t(p)] = table[size_t(p / bs)] * bs + p % bs;
    for (KvDType dt : {KvDType::F32, KvDType::BF16, KvDType::FP8_E4M3, KvDType::INT8}) {
      const KvBlockLayout layout{dt, bs, n_kv, d, false};
      std::vector<uint8_t> kb(size_t(n_blocks * layout.block_bytes())), vb(kb.size());
      const KvTensorView kv_k{kb.data(), n_blocks, layout, 1.0f}, kv_v{vb.data(), n_blocks, layout, 1.0f};
      cpu::write_kv(k.data(), v.data(), ctx, slots.data(), kv_k, kv_v);
      const int64_t bytes = 2 * (ctx * layout.row_bytes() + n_blocks * layout.scale_bytes());
      for (cpu::AttentionImpl impl : {cpu::AttentionImpl::Avx2, cpu::AttentionImpl::Portable}) {
        if (impl == cpu::AttentionImpl::Avx2 && !cpu::attention_has_avx2()) continue;
        double best = 1e30;
        for (int r = 0; r < reps + 3; ++r) {
          const auto t0 = Clock::now();
          cpu::paged_attention(q.data(), 1, ctx - 1, n_heads, kv_k, kv_v, table.data(), 0.125f, out.data(), impl);
          const double s = std::chrono::duration<double>(Clock::now() - t0).count();
          if (r >= 3) best = std::min(best, s);
        }
        std::printf("| %lld | %s | %s | %.1f | %lld | %.1f |\n", (long long)ctx,
                    std::string(kv_dtype_name(dt)).c_str(), impl == cpu::AttentionImpl::Avx2 ? "avx2" : "portable",
                    best * 1e6, (long long)bytes, double(bytes) / best / 1e9);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kv_attention_bench: %s\n", e.what());
    return 1;
  }
}
