// The int8 × int8 GEMM behind W8A8 prefill (packed_kernels.h: onednn_s8_gemm): oneDNN matmul, s8 activations
// × s8 weights → s32, the weights read in place ([n_out, n_in] row-major is oneDNN's [K, N] "ba"; no copy).
// On AVX-512 VNNI CPUs oneDNN runs its brgemm VNNI kernel (it handles the s8-source compensation itself):
// measured on a Zen 4 core ≈ 2× its BF16 matmul at m = 512 (bench/results/decode-quant-zen4-*.md). Only used
// where the CPU has VNNI (AVX-512 or AVX) or AMX int8: oneDNN's pre-VNNI int8 kernels (vpmaddubsw) saturate the
// int16 pair sums, so their s32 result is not exact (NMSE 0.02 on a Zen 3 core with full-range activations).
// Primitives are cached per calling thread by (m, n_out, n_in), as onednn_matmul.cpp does for BF16/F32.
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

#include "kernels/cpu/packed_kernels.h"

namespace tp::cpu::detail {

namespace {

struct Key {
  int64_t m, n_out, n_in;
  bool rows64 = false;  // W in Rows64 (oneDNN's BA16a64b4a), else row-major ("ba")
  int threads = 0;      // oneDNN fixes a primitive's thread count when it is made (omp_get_max_threads then)
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = uint64_t(k.m) * 0x9E3779B97F4A7C15ull;
    h ^= uint64_t(k.n_out) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    h ^= uint64_t(k.n_in) + 0x85EBCA77C2B2AE63ull + (h << 6) + (h >> 2);
    h ^= uint64_t(k.rows64) + (h << 6) + (h >> 2);
    h ^= uint64_t(k.threads) + (h << 6) + (h >> 2);
    return size_t(h);
  }
};

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<Key, dnnl::matmul, KeyHash> primitives;
};

constexpr size_t kMaxCachedPrimitives = 512;  // prefill chunks of many sizes: bound the cache

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

tag weight_tag(bool rows64) { return rows64 ? tag::BA16a64b4a : tag::ba; }

dnnl::matmul::primitive_desc primitive_desc(Context& ctx, const Key& k) {
  const dnnl::matmul::desc desc(dnnl::memory::desc({k.m, k.n_in}, dt::s8, tag::ab),
                                dnnl::memory::desc({k.n_in, k.n_out}, dt::s8, weight_tag(k.rows64)),
                                dnnl::memory::desc({k.m, k.n_out}, dt::s32, tag::ab));
  return dnnl::matmul::primitive_desc(desc, ctx.engine);
}

dnnl::matmul& primitive(Context& ctx, const Key& k) {
  auto it = ctx.primitives.find(k);
  if (it != ctx.primitives.end()) return it->second;
  const dnnl::matmul::primitive_desc pd = primitive_desc(ctx, k);
  if (ctx.primitives.size() >= kMaxCachedPrimitives) ctx.primitives.clear();
  return ctx.primitives.emplace(k, dnnl::matmul(pd)).first->second;
}

bool cpu_int8_exact() {
  return __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni") ||
         __builtin_cpu_supports("amx-int8");
}

bool supported() {
  static const bool ok = [] {
    if (!cpu_int8_exact()) return false;
    try {
      Context ctx;
      primitive(ctx, Key{16, 64, 64});
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

}  // namespace

bool onednn_s8_rows64_supported() {
  static const bool ok = [] {
    if (!supported()) return false;
    try {
      Context ctx;
      const std::string impl = primitive_desc(ctx, Key{16, 64, 64, true}).impl_info_str();
      return impl.rfind("ref", 0) != 0;  // a JIT kernel, not the reference loops
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

bool onednn_s8_gemm(const int8_t* xq, int64_t m, const int8_t* w, int64_t n_out, int64_t n_in, int32_t* acc,
                    int n_threads, bool rows64) {
  if (!supported() || (rows64 && !onednn_s8_rows64_supported())) return false;
  thread_local Context ctx;
  if (omp_get_max_threads() != n_threads) omp_set_num_threads(n_threads);  // before a primitive is made
  dnnl::matmul& mm = primitive(ctx, Key{m, n_out, n_in, rows64, n_threads});
  dnnl::memory src({{m, n_in}, dt::s8, tag::ab}, ctx.engine, const_cast<int8_t*>(xq));
  dnnl::memory wei({{n_in, n_out}, dt::s8, weight_tag(rows64)}, ctx.engine, const_cast<int8_t*>(w));
  dnnl::memory dst({{m, n_out}, dt::s32, tag::ab}, ctx.engine, acc);
  mm.execute(ctx.stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
  ctx.stream.wait();
  return true;
}

}  // namespace tp::cpu::detail
