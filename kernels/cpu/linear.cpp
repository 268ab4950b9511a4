#include "kernels/cpu/linear.h"

#include "kernels/cpu/rows16.h"
#include "kernels/cpu/gemm_gguf.h"
#include "kernels/cpu/gemm_gguf_bf16.h"
#include "kernels/cpu/packed_kernels.h"

#include <omp.h>
#include <sys/mman.h>

// GCC 12: see gemv.cpp (AVX-512 header intrinsics trip -Wuninitialized once inlined).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/act_order.h"
#include "common/error.h"
#include "kernels/cpu/bf16_round.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/gemm_bf16_amx.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/packed_linear.h"

namespace tp::cpu {

namespace {

// GEMV → oneDNN crossover (bench/gemv_bench.cpp --sweep / --shapes). oneDNN's avx512 brgemm (Zen 4, older
// Xeons) only pays off once M ≈ 16 and streams W at ~57% of DRAM at M = 1 (DESIGN §4). With AMX-BF16 the same
// M holds: on a Xeon with AMX (2026-12-03, 1 thread) our AVX-512-BF16 GEMV streamed SmolLM2's decode shapes at
// 10.7-14.8 GB/s p50 vs oneDNN's 10.4-10.9 (1.0-1.4x), and at 2 threads 19-30 vs 9-11 GB/s (2.0-2.7x: oneDNN
// runs M < 16 on one thread); M sweep (1536x576, GFLOP/s, gemv/oneDNN): 1 thread m=4 55/39, m=8 74/86,
// m=16 85/165; 2 threads m=8 142/85, m=16 162/167. One crossover for every thread count keeps a row's kernel,
// and so its bits, independent of the threads.
constexpr int64_t kGemmMinM = 16;

// Without a oneDNN matmul for the dtype (BF16 on AVX2-only CPUs) every M takes our tiles (gemv_avx2.cpp).
constexpr int64_t kNoGemm = std::numeric_limits<int64_t>::max();

int64_t gemm_min_m(DType dtype) { return detail::onednn_supports(dtype) ? kGemmMinM : kNoGemm; }

std::atomic<int> g_num_threads{0};  // 0: not set yet, use OpenMP's default

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// x [m, n_in] F32 -> thread-local BF16 rows of stride round_up(n_in, 32), zero-padded.
const uint16_t* x_to_bf16(const float* x, int64_t m, int64_t n_in, int64_t* stride) {
  thread_local std::vector<uint16_t> buf;
  const int64_t s = round_up(n_in, detail::kGemvXAlign);
  if (int64_t(buf.size()) < m * s) buf.resize(size_t(m * s));
  for (int64_t g = 0; g < m; ++g) {
    uint16_t* row = buf.data() + g * s;
    detail::round_bf16(x + g * n_in, n_in, row);
    for (int64_t k = n_in; k < s; ++k) row[k] = 0;
  }
  *stride = s;
  return buf.data();
}

// The best GEMV this CPU has, at most `best` (Gemv: AVX-512, then AVX2, then portable).
void gemv(const float* x, int64_t m, const Weight& w, float* y, LinearImpl best) {
  const int nt = num_threads();
  const bool avx512 = best == LinearImpl::Gemv, avx2 = avx512 || best == LinearImpl::GemvAvx2;
  if (avx2 && !detail::cpu_has_avx2()) throw Error("linear: this CPU has no AVX2 + FMA");
  if (w.dtype() == DType::F32) {
    const auto* wd = static_cast<const float*>(w.data());
    if (avx512 && detail::cpu_has_avx512f())
      detail::gemv_f32_avx512(x, m, wd, w.n_out(), w.n_in(), y, nt);
    else if (avx2 && detail::cpu_has_avx2())
      detail::gemv_f32_avx2(x, m, wd, w.n_out(), w.n_in(), y, nt);
    else
      detail::gemv_f32_portable(x, m, wd, w.n_out(), w.n_in(), y, nt);
    return;
  }
  const auto* wd = static_cast<const uint16_t*>(w.data());
  if (avx2 && !(avx512 && detail::cpu_has_avx512bf16()) && detail::cpu_has_avx2()) {
    detail::gemv_bf16_avx2(x, m, wd, w.n_out(), w.n_in(), y, nt);
    return;
  }
  int64_t stride = 0;
  const uint16_t* xb = x_to_bf16(x, m, w.n_in(), &stride);
  if (avx512 && detail::cpu_has_avx512bf16())
    detail::gemv_bf16_avx512(xb, stride, m, wd, w.n_out(), w.n_in(), y, nt);
  else
    detail::gemv_bf16_portable(xb, stride, m, wd, w.n_out(), w.n_in(), y, nt);
}

}  // namespace

// Weight bytes on 2 MiB pages: a decode step streams every weight once, and with 4 KiB pages each 4 KiB of
// the stream costs a TLB miss and a page walk (measured on Zen 4, 1 thread, a decode step's shapes streamed
// back to back: 36 -> 38-39 GB/s). The buffer is already written (the loaders fill it), so the kernel is asked
// to collapse the 2 MiB regions that hold it into huge pages now (MADV_COLLAPSE, Linux >= 6.1; the regions
// may hold neighbouring heap bytes, which it keeps as they are). Best effort: where the kernel cannot (an older
// kernel, THP off, a region past the mapping) the pages stay as they are.
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
constexpr uintptr_t kHugePage = uintptr_t(1) << 21;

void detail::back_with_huge_pages(const void* p, int64_t n) {
#ifdef __linux__
  if (p == nullptr || n < int64_t(kHugePage) / 2) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + uintptr_t(n) + kHugePage - 1) & ~(kHugePage - 1);
  for (uintptr_t a = begin; a < end; a += kHugePage) madvise(reinterpret_cast<void*>(a), kHugePage, MADV_COLLAPSE);
#else
  (void)p;
  (void)n;
#endif
}

// ------------------------------------------------------------------------------------------------ Weight
Weight::Weight(PackedWeight w, bool relayout) : w_(std::move(w)), n_in_(w_.n_in) {
  check_packed_weight(w_);
  if (relayout) {
    // act-order: then a weight of contiguous groups for every kernel below (a slice's held groups in 16s for
    // Int4 where the 16-row GEMM form is this CPU's, which takes them: less padding)
    hold_sorted_by_group(&w_, &gather_, w_.format == WeightFormat::Int4 && detail::rows16_takes_int4() ? 16 : 32);
    detail::prepare_rows16_weight(&w_);  // first: a weight it takes stays out of the GGUF regroupings
    detail::prepare_gguf_weight(&w_);
    detail::prepare_w8a8_weight(&w_);  // W8A8 Int8 on AMX: oneDNN's order (kernels/cpu/gemm_int_w8a8_rows64.cpp)
  }
  detail::back_with_huge_pages(w_.data.data(), w_.data.size());
}

Weight::Weight(DType dtype, int64_t n_out, int64_t n_in, DType src_type, const void* src, int64_t src_row_stride) {
  if (dtype != DType::F32 && dtype != DType::BF16)
    throw InputError("Weight: storage dtype must be f32 or bf16, got " + std::string(dtype_name(dtype)));
  if (n_out < 0 || n_in < 0)
    throw InputError("Weight: negative shape [" + std::to_string(n_out) + ", " + std::to_string(n_in) + "]");
  if (n_in % dtype_block_elems(src_type) != 0)
    throw InputError("Weight: n_in " + std::to_string(n_in) + " is not a multiple of the " +
                     std::string(dtype_name(src_type)) + " block size");
  if (n_out > 0 && src_row_stride < dtype_row_bytes(src_type, n_in))
    throw InputError("Weight: source row stride " + std::to_string(src_row_stride) + " bytes is less than a " +
                     std::string(dtype_name(src_type)) + " row of " + std::to_string(n_in));
  w_.format = dtype == DType::F32 ? WeightFormat::F32 : WeightFormat::BF16;
  w_.n_out = n_out;
  w_.n_in = n_in_ = n_in;
  w_.data = AlignedBytes(n_out * w_.row_bytes());

  const auto* s = static_cast<const uint8_t*>(src);
  const int64_t dst_row = dtype_row_bytes(dtype, n_in);
  uint8_t* d = w_.data.data();
  if (src_type == dtype) {
    for (int64_t r = 0; r < n_out; ++r) std::memcpy(d + r * dst_row, s + r * src_row_stride, size_t(dst_row));
    detail::back_with_huge_pages(d, w_.data.size());
    return;
  }
#pragma omp parallel num_threads(num_threads()) if (n_out * n_in >= (int64_t(1) << 18))
  {
    std::vector<float> row(static_cast<size_t>(n_in));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n_out; ++r) {
      dequantize_row(src_type, s + r * src_row_stride, row.data(), n_in);
      if (dtype == DType::F32) {
        std::memcpy(d + r * dst_row, row.data(), size_t(dst_row));
      } else {
        auto* out = reinterpret_cast<uint16_t*>(d + r * dst_row);
        for (int64_t k = 0; k < n_in; ++k) out[k] = f32_to_bf16(row[size_t(k)]);
      }
    }
  }
  detail::back_with_huge_pages(d, w_.data.size());
}

Weight::~Weight() = default;
Weight::Weight(Weight&& o) noexcept = default;
Weight& Weight::operator=(Weight&& o) noexcept = default;

DType Weight::dtype() const {
  if (w_.format == WeightFormat::F32) return DType::F32;
  if (w_.format == WeightFormat::BF16) return DType::BF16;
  throw Error("Weight::dtype: a " + std::string(weight_format_name(w_.format)) + " weight is not dense");
}

int64_t Weight::gemm_cache_bytes() const { return detail::gemm_cache_bytes(*this); }

// ------------------------------------------------------------------------------------------------ linear
int64_t linear_gemm_min_m(DType weight_dtype) { return gemm_min_m(weight_dtype); }

bool gemv_has_avx512(DType weight_dtype) {
  return weight_dtype == DType::BF16 ? detail::cpu_has_avx512bf16() : detail::cpu_has_avx512f();
}

bool gemv_has_avx2() { return detail::cpu_has_avx2(); }

bool linear_has_onednn(DType weight_dtype) { return detail::onednn_supports(weight_dtype); }

void linear(const float* x, int64_t m, const Weight& w, float* y) { linear(x, m, w, y, LinearImpl::Auto); }

void linear(const float* x, int64_t m, const Weight& w, float* y, LinearImpl impl) {
  if (m <= 0 || w.n_out() == 0) return;
  if (w.n_in() == 0) {
    std::memset(y, 0, size_t(m * w.n_out()) * sizeof(float));
    return;
  }
  if (!w.dense()) {
    if (is_gguf_format(w.format()) && impl != LinearImpl::Auto) {  // GGUF: the int8 tile or dequant + oneDNN
      detail::gemm_gguf(x, m, w.packed(), y, num_threads(),
                        impl == LinearImpl::Onednn ? detail::GgufKernel::DequantBf16 : detail::gguf_best_tile());
      return;
    }
    const std::vector<int32_t>& gather = w.column_gather();
    if (!gather.empty()) {  // act-order held sorted by group: x's columns in the held order (0 for padding)
      thread_local std::vector<float> xg;
      const int64_t n = w.packed().n_in, k = w.n_in();
      xg.resize(size_t(m * n));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) xg[size_t(i * n + j)] = gather[size_t(j)] < 0 ? 0.0f : x[i * k + gather[size_t(j)]];
      x = xg.data();
    }
    detail::packed_linear(x, m, w.packed(), y, num_threads());
    return;
  }
  if (impl == LinearImpl::Auto) impl = m < gemm_min_m(w.dtype()) ? LinearImpl::Gemv : LinearImpl::Onednn;
  if (impl == LinearImpl::Onednn)
    detail::onednn_linear(x, m, w, y, num_threads());
  else
    gemv(x, m, w, y, impl);
}

void set_gguf_prefill_bf16(bool on) { detail::set_gguf_bf16_enabled(on); }
bool gguf_prefill_bf16() { return detail::gguf_bf16_enabled(); }
void set_amx_gemm(bool on) { detail::set_amx_gemm(on); }
bool amx_gemm() { return detail::amx_gemm_enabled(); }

void set_num_threads(int n) {
  if (n < 1) n = 1;
  g_num_threads.store(n, std::memory_order_relaxed);
  omp_set_num_threads(n);
}

int num_threads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : omp_get_max_threads();
}

}  // namespace tp::cpu
