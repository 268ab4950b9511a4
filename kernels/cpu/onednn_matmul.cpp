#include "kernels/cpu/onednn_matmul.h"

#include <omp.h>

#include <mutex>
#include <string>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/bf16_round.h"
#include "kernels/cpu/gemm_bf16_amx.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/linear.h"

namespace tp::cpu::detail {

struct GemmCache {
  std::mutex mu;
  std::vector<std::pair<dnnl::memory::desc, dnnl::memory>> copies;  // one per blocked layout

  static std::mutex& create_mu() {
    static std::mutex mu;
    return mu;
  }
  static GemmCache& of(const Weight& w) {
    std::lock_guard lock(create_mu());
    if (!w.gemm_cache_) w.gemm_cache_ = std::make_shared<GemmCache>();
    return *w.gemm_cache_;
  }
  static GemmCache* peek(const Weight& w) {
    std::lock_guard lock(create_mu());
    return w.gemm_cache_.get();
  }
};

namespace {

struct Key {
  int64_t m, n_out, n_in;
  DType dtype;
  int64_t ldy = 0;  // onednn_matmul_bf16: y's row stride, W plain; 0: onednn_linear (W's layout "any")
  int threads = 0;  // oneDNN fixes a primitive's thread count when it is made (omp_get_max_threads then)
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = uint64_t(k.m) * 0x9E3779B97F4A7C15ull;
    h ^= uint64_t(k.n_out) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    h ^= uint64_t(k.n_in) + 0x85EBCA77C2B2AE63ull + (h << 6) + (h >> 2);
    h ^= uint64_t(k.dtype) + (h << 6) + (h >> 2);
    h ^= uint64_t(k.ldy) + 0x27D4EB2F165667C5ull + (h << 6) + (h >> 2);
    h ^= uint64_t(k.threads) + (h << 6) + (h >> 2);
    return size_t(h);
  }
};

// One per calling thread: oneDNN streams are not thread-safe, and a per-thread map needs no lock.
struct Prim {
  dnnl::matmul matmul;
  dnnl::memory::desc weights;  // the layout the primitive reads W in
  bool amx_blocked = false;    // BF16 W in BA16a64b2a, whole blocks: gemm_bf16_amx can read the copy (made once here)
};

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<Key, Prim, KeyHash> primitives;
  std::vector<uint16_t> x_bf16;
};

constexpr size_t kMaxCachedPrimitives = 512;  // prefill chunks of many sizes: bound the cache

Context& context() {
  thread_local Context ctx;
  return ctx;
}

Prim& primitive(Context& ctx, const Key& key) {
  auto it = ctx.primitives.find(key);
  if (it != ctx.primitives.end()) return it->second;
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const dt in_type = key.dtype == DType::BF16 ? dt::bf16 : dt::f32;
  const dnnl::memory::desc src_md({key.m, key.n_in}, in_type, tag::ab);
  const dnnl::memory::desc wei_md = key.ldy > 0 ? dnnl::memory::desc({key.n_in, key.n_out}, in_type, tag::ba)
                                                 : dnnl::memory::desc({key.n_in, key.n_out}, in_type, tag::any);
  const dnnl::memory::desc dst_md = key.ldy > 0 ? dnnl::memory::desc({key.m, key.n_out}, dt::f32, {key.ldy, 1})
                                                 : dnnl::memory::desc({key.m, key.n_out}, dt::f32, tag::ab);
  const dnnl::matmul::desc desc(src_md, wei_md, dst_md);
  const dnnl::matmul::primitive_desc pd(desc, ctx.engine);
  if (ctx.primitives.size() >= kMaxCachedPrimitives) ctx.primitives.clear();
  const bool amx_blocked = key.dtype == DType::BF16 && key.n_in % 32 == 0 && key.n_out % 64 == 0 &&
                           pd.weights_desc() == dnnl::memory::desc({key.n_in, key.n_out}, dt::bf16, tag::BA16a64b2a);
  return ctx.primitives.emplace(key, Prim{dnnl::matmul(pd), pd.weights_desc(), amx_blocked}).first->second;
}

// W in the layout `want`: the plain buffer when that is it, else the Weight's cached reordered copy.
dnnl::memory weights_in(Context& ctx, const Weight& w, const dnnl::memory::desc& want) {
  const dnnl::memory::desc plain({w.n_in(), w.n_out()},
                                 w.dtype() == DType::BF16 ? dnnl::memory::data_type::bf16
                                                          : dnnl::memory::data_type::f32,
                                 dnnl::memory::format_tag::ba);
  dnnl::memory plain_mem(plain, ctx.engine, const_cast<void*>(w.data()));
  if (want == plain) return plain_mem;
  GemmCache& cache = GemmCache::of(w);
  std::lock_guard lock(cache.mu);
  for (auto& [desc, mem] : cache.copies)
    if (desc == want) return mem;
  dnnl::memory blocked(want, ctx.engine);
  dnnl::reorder(plain_mem, blocked).execute(ctx.stream, plain_mem, blocked);
  ctx.stream.wait();
  back_with_huge_pages(blocked.get_data_handle(), int64_t(want.get_size()));
  cache.copies.emplace_back(want, blocked);
  return blocked;
}

}  // namespace

void onednn_linear(const float* x, int64_t m, const Weight& w, float* y, int n_threads) {
  if (!onednn_supports(w.dtype()))
    throw Error("oneDNN has no " + std::string(dtype_name(w.dtype())) + " matmul on this CPU (BF16 needs AVX-512)");
  Context& ctx = context();
  if (omp_get_max_threads() != n_threads) omp_set_num_threads(n_threads);  // before a primitive is made
  Prim& prim = primitive(ctx, Key{m, w.n_out(), w.n_in(), w.dtype(), 0, n_threads});

  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const int64_t n_in = w.n_in(), n_out = w.n_out();
  const bool bf16 = w.dtype() == DType::BF16;
  dnnl::memory wei_mem = weights_in(ctx, w, prim.weights);
  // Batched decode steps on AMX: our tile kernel on the same blocked copy (gemm_bf16_amx.h).
  if (prim.amx_blocked && m <= kAmxGemmMaxM && amx_gemm_enabled()) {
    gemm_bf16_amx(x, m, n_in, static_cast<const uint16_t*>(wei_mem.get_data_handle()), n_out, y, n_threads);
    return;
  }
  void* src = const_cast<float*>(x);
  if (bf16) {
    const int64_t n = m * n_in;
    if (int64_t(ctx.x_bf16.size()) < n) ctx.x_bf16.resize(size_t(n));
    uint16_t* xb = ctx.x_bf16.data();
    // x's rows over the threads (f32_to_bf16's bits, 16 a step on AVX-512: the scalar loop was ~10% of a BF16
    // 512-token prefill on a Xeon with AMX, as much as its matmuls' third).
#pragma omp parallel num_threads(n_threads) if (n_threads > 1 && n >= (int64_t(1) << 16))
    {
      const auto [r0, r1] = thread_rows(m, 1, omp_get_thread_num(), omp_get_num_threads());
      detail::round_bf16(x + r0 * n_in, (r1 - r0) * n_in, xb + r0 * n_in);
    }
    src = xb;
  }
  const dt in_type = bf16 ? dt::bf16 : dt::f32;
  dnnl::memory src_mem({{m, n_in}, in_type, tag::ab}, ctx.engine, src);
  dnnl::memory dst_mem({{m, n_out}, dt::f32, tag::ab}, ctx.engine, y);
  prim.matmul.execute(ctx.stream, {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, wei_mem}, {DNNL_ARG_DST, dst_mem}});
  ctx.stream.wait();
}

namespace {

// y (rows ldy apart) = x · Wᵀ, x and W plain row-major in `dtype` (F32 or BF16), W read as it is.
void matmul_plain(DType dtype, const void* x, int64_t m, int64_t n_in, const void* w, int64_t n_out, float* y,
                  int64_t ldy, int n_threads) {
  if (!onednn_supports(dtype))
    throw Error("oneDNN has no " + std::string(dtype_name(dtype)) + " matmul on this CPU (BF16 needs AVX-512)");
  Context& ctx = context();
  if (omp_get_max_threads() != n_threads) omp_set_num_threads(n_threads);  // before a primitive is made
  Prim& prim = primitive(ctx, Key{m, n_out, n_in, dtype, ldy, n_threads});
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const dt in_type = dtype == DType::BF16 ? dt::bf16 : dt::f32;
  dnnl::memory src_mem({{m, n_in}, in_type, tag::ab}, ctx.engine, const_cast<void*>(x));
  dnnl::memory wei_mem(prim.weights, ctx.engine, const_cast<void*>(w));
  dnnl::memory dst_mem({{m, n_out}, dt::f32, {ldy, 1}}, ctx.engine, y);
  prim.matmul.execute(ctx.stream, {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, wei_mem}, {DNNL_ARG_DST, dst_mem}});
  ctx.stream.wait();
}

}  // namespace

void onednn_matmul_bf16(const uint16_t* x, int64_t m, int64_t n_in, const uint16_t* w, int64_t n_out, float* y,
                        int64_t ldy, int n_threads) {
  matmul_plain(DType::BF16, x, m, n_in, w, n_out, y, ldy, n_threads);
}

void onednn_matmul_f32(const float* x, int64_t m, int64_t n_in, const float* w, int64_t n_out, float* y, int64_t ldy,
                       int n_threads) {
  matmul_plain(DType::F32, x, m, n_in, w, n_out, y, ldy, n_threads);
}

int64_t gemm_cache_bytes(const Weight& w) {
  GemmCache* cache = GemmCache::peek(w);
  if (cache == nullptr) return 0;
  std::lock_guard lock(cache->mu);
  int64_t n = 0;
  for (const auto& [desc, mem] : cache->copies) n += int64_t(desc.get_size());
  return n;
}

bool onednn_supports(DType weight_dtype) {
  const auto probe = [](dnnl::memory::data_type t) {
    try {
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      using tag = dnnl::memory::format_tag;
      const dnnl::matmul::desc desc(dnnl::memory::desc({16, 64}, t, tag::ab), dnnl::memory::desc({64, 64}, t, tag::any),
                                    dnnl::memory::desc({16, 64}, dnnl::memory::data_type::f32, tag::ab));
      const dnnl::matmul::primitive_desc pd(desc, engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  };
  static const bool f32 = probe(dnnl::memory::data_type::f32);
  static const bool bf16 = probe(dnnl::memory::data_type::bf16);
  return weight_dtype == DType::BF16 ? bf16 : weight_dtype == DType::F32 ? f32 : false;
}

}  // namespace tp::cpu::detail
