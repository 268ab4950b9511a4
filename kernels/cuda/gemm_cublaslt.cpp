// BF16 and FP8 GEMMs through cuBLASLt (gemm.h). Host code: the CUDA runtime and cuBLASLt C APIs only.
//
// Row-major y[m, n] = x[m, k] · w[n, k]ᵀ is, in cuBLAS's column-major terms, yᵀ (n × m, ld n) =
// op_T(A) · B with A = w read as a k × n column-major matrix (ld k) and B = xᵀ as k × m (ld k): the "TN"
// layout FP8 requires on Hopper. Each shape's descriptors and algorithm (cuBLASLt's heuristic) are made once
// per Blas and cached.
#include <cublasLt.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/launch_config.h"

namespace tp::cuda {

namespace {

// The descriptors of one matmul shape, destroyed with it.
struct MatmulDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  MatmulDescs() = default;
  MatmulDescs(const MatmulDescs&) = delete;
  MatmulDescs& operator=(const MatmulDescs&) = delete;
  ~MatmulDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// A shape's descriptors and the algorithm cuBLASLt's heuristic chose for it.
struct MatmulPlan {
  MatmulDescs descs;
  cublasLtMatmulAlgo_t algo{};
};

// (input type, output type, m, n, k)
using PlanKey = std::tuple<int, int, int64_t, int64_t, int64_t>;

}  // namespace

struct Blas::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<PlanKey, std::unique_ptr<MatmulPlan>> plans;  // one per shape seen: the heuristic runs once
};

Blas::Blas(int64_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  check_non_negative("cuda::Blas", "workspace_bytes", workspace_bytes);
  check(cublasLtCreate(&impl_->handle), "cublasLtCreate");
  impl_->workspace_bytes = size_t(workspace_bytes);
  if (workspace_bytes > 0) {
    const cudaError_t rc = cudaMalloc(&impl_->workspace, impl_->workspace_bytes);
    if (rc != cudaSuccess) {
      cublasLtDestroy(impl_->handle);
      check(rc, "cuda::Blas: cudaMalloc of the cuBLASLt workspace");
    }
  }
}

Blas::~Blas() {
  impl_->plans.clear();
  if (impl_->workspace) cudaFree(impl_->workspace);
  if (impl_->handle) cublasLtDestroy(impl_->handle);
}

namespace {

// The plan of y[m, n] (d_type) = x[m, k] (in_type) · w[n, k]ᵀ (in_type), F32 compute and scale: made and
// cached on first use.
const MatmulPlan& plan_for(Blas::Impl& blas, cudaDataType_t in_type, cudaDataType_t d_type, int64_t m, int64_t n,
                           int64_t k, const char* entry) {
  const PlanKey key{int(in_type), int(d_type), m, n, k};
  auto it = blas.plans.find(key);
  if (it != blas.plans.end()) return *it->second;
  auto plan = std::make_unique<MatmulPlan>();
  MatmulDescs& ds = plan->descs;
  const std::string at = std::string(entry) + ": ";
  check(cublasLtMatmulDescCreate(&ds.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), (at + "cublasLtMatmulDescCreate").c_str());
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t),
        (at + "TRANSA").c_str());
  check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n),
        (at + "TRANSB").c_str());
  check(cublasLtMatrixLayoutCreate(&ds.a, in_type, uint64_t(k), uint64_t(n), k), (at + "layout A").c_str());
  check(cublasLtMatrixLayoutCreate(&ds.b, in_type, uint64_t(k), uint64_t(m), k), (at + "layout B").c_str());
  check(cublasLtMatrixLayoutCreate(&ds.d, d_type, uint64_t(n), uint64_t(m), n), (at + "layout D").c_str());
  check(cublasLtMatmulPreferenceCreate(&ds.pref), (at + "cublasLtMatmulPreferenceCreate").c_str());
  check(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &blas.workspace_bytes,
                                            sizeof blas.workspace_bytes),
        (at + "workspace preference").c_str());
  cublasLtMatmulHeuristicResult_t result{};
  int n_results = 0;
  check(cublasLtMatmulAlgoGetHeuristic(blas.handle, ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref, 1, &result, &n_results),
        (at + "cublasLtMatmulAlgoGetHeuristic").c_str());
  if (n_results == 0)
    throw Error(at + "cuBLASLt has no algorithm for m " + std::to_string(m) + ", n " + std::to_string(n) + ", k " +
                std::to_string(k) + " on this device");
  plan->algo = result.algo;
  return *blas.plans.emplace(key, std::move(plan)).first->second;
}

void matmul_tn(Blas::Impl& blas, cudaDataType_t in_type, const void* x, const void* w, cudaDataType_t d_type,
               void* y, int64_t m, int64_t n, int64_t k, cudaStream_t stream, const char* entry) {
  const MatmulPlan& p = plan_for(blas, in_type, d_type, m, n, k, entry);
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasLtMatmul(blas.handle, p.descs.op, &alpha, w, p.descs.a, x, p.descs.b, &beta, y, p.descs.d, y,
                       p.descs.d, &p.algo, blas.workspace, blas.workspace_bytes, stream),
        (std::string(entry) + ": cublasLtMatmul").c_str());
}

void check_shape(const char* entry, int64_t m, int64_t n, int64_t k) {
  check_positive(entry, "m", m);
  check_positive(entry, "n", n);
  check_positive(entry, "k", k);
}

}  // namespace

void gemm_bf16(Blas& blas, const uint16_t* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, void* y,
               DType y_type, cudaStream_t stream) {
  constexpr const char* kEntry = "cuda::gemm_bf16";
  check_shape(kEntry, m, n, k);
  if (k % 2 != 0 || n % 2 != 0) bad_argument(kEntry, "k and n must be even (4-byte aligned rows)");
  check_aligned(kEntry, "x", x, 16);
  check_aligned(kEntry, "w", w, 16);
  check_aligned(kEntry, "y", y, 16);
  if (y_type != DType::F32 && y_type != DType::BF16) bad_argument(kEntry, "y type must be F32 or BF16");
  matmul_tn(blas.impl(), CUDA_R_16BF, x, w, y_type == DType::F32 ? CUDA_R_32F : CUDA_R_16BF, y, m, n, k, stream,
            kEntry);
}

void gemm_fp8(Blas& blas, const uint8_t* xq, const float* x_scale, const uint8_t* wq, const float* w_scale,
              int64_t m, int64_t n, int64_t k, float* y, cudaStream_t stream) {
  constexpr const char* kEntry = "cuda::gemm_fp8";
  check_shape(kEntry, m, n, k);
  if (k % 16 != 0) bad_argument(kEntry, "k " + std::to_string(k) + " is not a multiple of 16");
  if (n % 4 != 0) bad_argument(kEntry, "n " + std::to_string(n) + " is not a multiple of 4");
  check_aligned(kEntry, "xq", xq, 16);
  check_aligned(kEntry, "wq", wq, 16);
  check_aligned(kEntry, "y", y, 16);
  matmul_tn(blas.impl(), CUDA_R_8F_E4M3, xq, wq, CUDA_R_32F, y, m, n, k, stream, kEntry);
  scale_rows_cols(y, m, n, x_scale, w_scale, stream);
}

}  // namespace tp::cuda
