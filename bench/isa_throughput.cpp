// Issue rate of the vector instructions our CPU kernels are built on, on this core: each case runs 10 independent
// 512-bit instructions a loop iteration (no dependency between them, registers only), so the time an iteration
// is 10 ÷ (instructions a cycle). The clock is estimated from vfmadd231ps, taken to issue 2 a cycle (two FMA
// ports: every AVX-512 core we run on); a case the CPU lacks is skipped.
// Why: the same kernel can be compute-bound on one CPU and not another — on the AMX Xeon (family 6 model 167)
// vdpbf16ps issued once every 2 cycles and vpdpbusd twice a cycle (bench/results/xeon-amx-kernels-20261203.md §13),
// which decided gemm_a16_vnni.cpp over gemm_int4_bf16.cpp there.
//   isa_throughput [ITERATIONS=50000000]
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

#define TP_R10(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9)
#define TP_CLOBBER "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9"
#define TP_CASE(NAME, INSN)                                                          \
  __attribute__((noinline)) void NAME(long n) {                                      \
    for (long k = 0; k < n; ++k) asm volatile(TP_R10(INSN) ::: TP_CLOBBER);          \
  }
#define TP_FMA(i) "vfmadd231ps %%zmm20, %%zmm21, %%zmm" #i "\n\t"
#define TP_DPBF16(i) "vdpbf16ps %%zmm20, %%zmm21, %%zmm" #i "\n\t"
#define TP_DPBUSD(i) "vpdpbusd %%zmm20, %%zmm21, %%zmm" #i "\n\t"
#define TP_PERMW(i) "vpermw %%zmm20, %%zmm21, %%zmm" #i "\n\t"
#define TP_PERMD(i) "vpermd %%zmm20, %%zmm21, %%zmm" #i "\n\t"
#define TP_SRLW(i) "vpsrlw $4, %%zmm20, %%zmm" #i "\n\t"
#define TP_TERN(i) "vpternlogd $0xa8, %%zmm20, %%zmm21, %%zmm" #i "\n\t"
#define TP_CVT(i) "vcvtdq2ps %%zmm20, %%zmm" #i "\n\t"
#define TP_PH2PS(i) "vcvtph2ps %%ymm20, %%zmm" #i "\n\t"
#define TP_ZXBW(i) "vpmovzxbw (%%rsp), %%zmm" #i "\n\t"
TP_CASE(fma, TP_FMA)
TP_CASE(dpbf16, TP_DPBF16)
TP_CASE(dpbusd, TP_DPBUSD)
TP_CASE(permw, TP_PERMW)
TP_CASE(permd, TP_PERMD)
TP_CASE(srlw, TP_SRLW)
TP_CASE(tern, TP_TERN)
TP_CASE(cvt, TP_CVT)
TP_CASE(ph2ps, TP_PH2PS)
TP_CASE(zxbw, TP_ZXBW)

double ns_per_iteration(void (*f)(long), long n) {
  f(n / 10);  // warm up (clock ramp)
  const auto t0 = std::chrono::steady_clock::now();
  f(n);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / double(n);
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 50000000;
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw")) {
    std::printf("isa_throughput: no AVX-512 here\n");
    return 0;
  }
  const double fma_ns = ns_per_iteration(fma, n), cycle_ns = fma_ns / 5.0;  // 10 FMAs at 2 a cycle
  std::printf("isa_throughput | clock ~%.2f GHz (from vfmadd231ps at 2 a cycle) | instructions a cycle, 512-bit, "
              "independent\n", 1.0 / cycle_ns);
  struct Case {
    const char* name;
    void (*f)(long);
    bool ok;
  };
  const Case cases[] = {
      {"vfmadd231ps", fma, true},
      {"vdpbf16ps", dpbf16, bool(__builtin_cpu_supports("avx512bf16"))},
      {"vpdpbusd", dpbusd, bool(__builtin_cpu_supports("avx512vnni"))},
      {"vpermw", permw, true},
      {"vpermd", permd, true},
      {"vpsrlw", srlw, true},
      {"vpternlogd", tern, true},
      {"vcvtdq2ps", cvt, true},
      {"vcvtph2ps", ph2ps, true},
      {"vpmovzxbw (mem)", zxbw, true},
  };
  for (const Case& c : cases) {
    if (!c.ok) {
      std::printf("%-16s  (not on this CPU)\n", c.name);
      continue;
    }
    const double ns = c.f == fma ? fma_ns : ns_per_iteration(c.f, n);
    std::printf("%-16s  %5.2f a cycle  (%.3f ns per 10)\n", c.name, 10.0 * cycle_ns / ns, ns);
  }
  return 0;
}
