// Weights for y = x · Wᵀ and the CPU GEMM/GEMV that applies them.
// W: [n_out, n_in] row-major (one output feature a row) in any PackedWeight format; dense ones (F32, BF16) as
// described below, packed ones on their format's kernel (linear() dispatches; packed_linear.h).
// Large M goes through oneDNN matmul (BF16: activations converted to BF16, accumulate in F32) where oneDNN
// has one for the dtype; small M (decode) — and every M for BF16 on CPUs without AVX-512, where oneDNN has no
// BF16 matmul — through our own GEMV tiles: AVX-512(-BF16) when the CPU has it, else AVX2 + FMA, else a
// portable loop.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "common/dtype.h"
#include "common/packed_weight.h"

namespace tp::cpu {

namespace detail {
struct GemmCache;  // oneDNN's blocked copies of a Weight (onednn_matmul.cpp)
}

class Weight {
 public:
  // A packed weight as the loaders give it (common/packed_weight.h): checked (check_packed_weight), kept as it
  // is stored. F32 / BF16 run on the dense paths below; every other format on its own kernel.
  // Act-order Int8 / Int4 weights (g_idx) are held with their columns sorted by group (common/act_order.h
  // hold_sorted_by_group: a row-parallel slice's groups padded; x gathered per call, column_gather), so the kernels
  // for contiguous groups take them.
  // Int4 / MXFP4 / NVFP4 and GGUF Q4_0 / Q4_1 / Q5_0 / Q8_0 weights are put in 16-row blocks where the GEMM-form
  // kernels are this CPU's (kernels/cpu/rows16.h prepare_rows16_weight: AVX512-BF16 AMD, and Int4 / GGUF Q4_0 / Q4_1
  // / Q5_0 / Q8_0 on AVX2 without AVX-512 VNNI; the same bytes, rows padded to a multiple of 16); GGUF Q8_0 / Q5_0 rows still in the file layout are then regrouped, in place, into the layout
  // this CPU's int8 kernel reads fastest (kernels/cpu/gemm_gguf.h prepare_gguf_weight; the same bytes); W8A8 Int8
  // weights on AMX CPUs into oneDNN's own int8 order (common/rows16_layout.h Rows64: prepare_w8a8_weight);
  // relayout = false keeps the layout given (benchmarks comparing layouts).
  explicit Weight(PackedWeight w, bool relayout = true);
  // A dense weight: converts `n_out * n_in` elements of type `src_type` (F32, F16, BF16, Q8_0, Q4_0, Q4_1;
  // rows contiguous, `src_row_stride` bytes apart) into `dtype` (F32 or BF16).
  Weight(DType dtype, int64_t n_out, int64_t n_in, DType src_type, const void* src, int64_t src_row_stride);
  ~Weight();
  Weight(Weight&&) noexcept;
  Weight& operator=(Weight&&) noexcept;
  Weight(const Weight&) = delete;
  Weight& operator=(const Weight&) = delete;

  WeightFormat format() const { return w_.format; }
  bool dense() const { return w_.format == WeightFormat::F32 || w_.format == WeightFormat::BF16; }
  // The element type of a dense weight (F32 or BF16); throws tp::Error for a packed one.
  DType dtype() const;
  int64_t n_out() const { return w_.n_out; }
  int64_t n_in() const { return n_in_; }  // x's columns (the held weight's, packed().n_in, where padded may be more)
  const void* data() const { return w_.data.data(); }
  // The weight as held: as given, or in a layout of the same values this CPU's kernels read (above); an act-order
  // weight's columns sorted by group (its column j reads x column column_gather()[j]).
  const PackedWeight& packed() const { return w_; }
  // Empty, or [packed().n_in]: the x column each held column reads (−1: a padding column, x 0).
  const std::vector<int32_t>& column_gather() const { return gather_; }
  // Bytes held: values, every scale and the column gather (PackedWeight::n_bytes).
  int64_t n_bytes() const { return w_.n_bytes() + int64_t(gather_.size() * sizeof(int32_t)); }
  // Bytes of the blocked copy oneDNN prefers (made on the first oneDNN-path call, kept with the Weight:
  // 1.1-4x faster GEMM than reading the plain rows; 0 until then or when the plain layout is what it wants).
  int64_t gemm_cache_bytes() const;

 private:
  friend struct detail::GemmCache;
  PackedWeight w_;
  int64_t n_in_ = 0;
  std::vector<int32_t> gather_;  // act-order held sorted: x column of each held column (−1: 0)
  mutable std::shared_ptr<detail::GemmCache> gemm_cache_;  // thread-safe, created on first use
};

// y[m, n_out] = x[m, n_in] · Wᵀ. x and y are F32, row-major, contiguous. Uses the calling thread pool
// (OpenMP); thread count set with set_num_threads. BF16 weights: x is rounded to BF16, products are
// accumulated in F32 (every path).
void linear(const float* x, int64_t m, const Weight& w, float* y);

// Which implementation linear() uses. Auto: GEMV for m < linear_gemm_min_m(w.dtype()), oneDNN otherwise.
//   Gemv: our best GEMV (AVX-512 when the CPU has it, else AVX2, else portable); GemvAvx2: the AVX2 tiles
//   (throws Error without AVX2 + FMA); GemvPortable: the portable loop; Onednn: oneDNN matmul (throws Error
//   when oneDNN has none for the dtype here). For tests and benchmarks; results agree up to F32 summation order.
//   GGUF weights: Auto as packed_linear (int8 tiles; with set_gguf_prefill_bf16(true), W dequantized to
//   BF16 + oneDNN from m = 64 on); Onednn forces the BF16 path, the Gemv* values the best int8
//   tile (other numerics: the activations int8-quantized per block). Other packed formats ignore impl.
enum class LinearImpl : uint8_t { Auto, Gemv, GemvAvx2, GemvPortable, Onednn };
void linear(const float* x, int64_t m, const Weight& w, float* y, LinearImpl impl);
// Smallest m that linear() sends to oneDNN's path for weights of this dtype: 16 where oneDNN has a matmul for it,
// INT64_MAX where it has none (BF16 on CPUs without AVX-512).
int64_t linear_gemm_min_m(DType weight_dtype);
// Whether this CPU runs the AVX-512 GEMV (F32: avx512f; BF16: avx512f + avx512bf16).
bool gemv_has_avx512(DType weight_dtype);
bool gemv_has_avx2();  // avx2 + fma
// Whether oneDNN has a matmul for weights of this dtype on this CPU (BF16: only with AVX-512).
bool linear_has_onednn(DType weight_dtype);

// GGUF weights kept quantized, calls of m ≥ 64 rows (prefill): W dequantized to BF16 + oneDNN's BF16 matmul
// instead of the int8 tiles, where the CPU has AVX-512 BF16 (kernels/cpu/gemm_gguf_bf16.h; 1.7-2.8x faster
// GEMM at m = 512 on Zen 4, pp512 1.7-1.9x). Process-wide, off by default: on, a row's numerics depend on the
// size of the call it is in, which breaks batched == alone (DESIGN §5) for GGUF models kept quantized.
void set_gguf_prefill_bf16(bool on);
bool gguf_prefill_bf16();

// BF16 weights through oneDNN's path on a CPU with AMX, m <= 128 (batched decode steps): our AMX tile kernel on
// oneDNN's blocked copy of W instead of oneDNN's matmul (kernels/cpu/gemm_bf16_amx.h). On by default; off (for
// tests and benchmarks) oneDNN's matmul runs. amx_gemm(): whether the kernel runs here (on and AMX granted).
void set_amx_gemm(bool on);
bool amx_gemm();

// Number of compute threads for every CPU kernel and oneDNN (OpenMP). Process-wide: every kernel applies it
// to the calling thread's OpenMP pool before a parallel region, whichever thread calls.
void set_num_threads(int n);
int num_threads();

}  // namespace tp::cpu
