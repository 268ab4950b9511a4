// Issue rate of the vector instructions our CPU kernels are built on, on this core: each case runs 10 independent
// 512-bit instructions a loop iteration (no dependency between them, registers only), so the time an iteration
// is 10 ÷ (instructions a cycle). The clock is estimated from vfmadd231ps, taken to issue 2 a cycle (two FMA
// ports: every AVX-512 core we run on); a case the CPU lacks is skipped.
// Why: the same kernel can be compute-bound on one CPU and not another — on the AMX Xeon (family 6 model 167)
// vdpbf16ps issued once every 2 cycles and vpdpbusd twice a cycle (bench/results/xeon-amx-kernels-20261203.md §13),
// which decided gemm_a16_vnni.cpp over gemm_int4_bf16.cpp there. On a CPU without AVX-512 (Zen 3: AVX2 + FMA +
// F16C) the 256-bit forms of the AVX2 kernels' instructions instead. Each line of FMAs also gives the measured F32
// peak of one core: 10 FMAs × lanes × 2 FLOP ÷ the time an iteration (the compute roofline bench/batch_steps.py
// takes with --roofline-gflops).
//   isa_throughput [ITERATIONS=50000000]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>

namespace {

#define TP_R10(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9)
#define TP_CLOBBER "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9"
#define TP_CASE_CLOBBERING(NAME, INSN, ...)                                          \
  __attribute__((noinline)) void NAME(long n) {                                      \
    for (long k = 0; k < n; ++k) asm volatile(TP_R10(INSN) ::: __VA_ARGS__);         \
  }
#define TP_CASE(NAME, INSN) TP_CASE_CLOBBERING(NAME, INSN, TP_CLOBBER)
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
#define TP_CLOBBER_Y "ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7", "ymm8", "ymm9"
#define TP_CASE_Y(NAME, INSN) TP_CASE_CLOBBERING(NAME, INSN, TP_CLOBBER_Y)
#define TP_FMA_Y(i) "vfmadd231ps %%ymm10, %%ymm11, %%ymm" #i "\n\t"
#define TP_MADDUBS_Y(i) "vpmaddubsw %%ymm10, %%ymm11, %%ymm" #i "\n\t"
#define TP_MADDWD_Y(i) "vpmaddwd %%ymm10, %%ymm11, %%ymm" #i "\n\t"
#define TP_SHUFB_Y(i) "vpshufb %%ymm10, %%ymm11, %%ymm" #i "\n\t"
#define TP_SLLD_Y(i) "vpslld $16, %%ymm10, %%ymm" #i "\n\t"
#define TP_PH2PS_Y(i) "vcvtph2ps %%xmm10, %%ymm" #i "\n\t"
#define TP_ZXWD_Y(i) "vpmovzxwd (%%rsp), %%ymm" #i "\n\t"
TP_CASE_Y(fma_y, TP_FMA_Y)
TP_CASE_Y(maddubs_y, TP_MADDUBS_Y)
TP_CASE_Y(maddwd_y, TP_MADDWD_Y)
TP_CASE_Y(shufb_y, TP_SHUFB_Y)
TP_CASE_Y(slld_y, TP_SLLD_Y)
TP_CASE_Y(ph2ps_y, TP_PH2PS_Y)
TP_CASE_Y(zxwd_y, TP_ZXWD_Y)

double ns_per_iteration(void (*f)(long), long n) {
  f(n / 10);  // warm up (clock ramp)
  const auto t0 = std::chrono::steady_clock::now();
  f(n);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / double(n);
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 50000000;
  struct Case {
    const char* name;
    void (*f)(long);
    bool ok;
  };
  // Instructions a cycle of each case, the clock taken from the first (FMAs at 2 a cycle).
  const auto report = [n](const Case* cases, size_t n_cases, int bits) {
    const double fma_ns = ns_per_iteration(cases[0].f, n), cycle_ns = fma_ns / 5.0;  // 10 FMAs at 2 a cycle
    std::printf("isa_throughput | clock ~%.2f GHz (from vfmadd231ps at 2 a cycle) | F32 FMA peak %.1f GFLOP/s a core "
                "(measured) | instructions a cycle, %d-bit, independent\n",
                1.0 / cycle_ns, 10.0 * (bits / 32) * 2.0 / fma_ns, bits);
    for (size_t i = 0; i < n_cases; ++i) {
      const Case& c = cases[i];
      if (!c.ok) {
        std::printf("%-16s  (not on this CPU)\n", c.name);
        continue;
      }
      const double ns = i == 0 ? fma_ns : ns_per_iteration(c.f, n);
      std::printf("%-16s  %5.2f a cycle  (%.3f ns per 10)\n", c.name, 10.0 * cycle_ns / ns, ns);
    }
  };
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw")) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c")) {
      std::printf("isa_throughput: neither AVX-512 nor AVX2 + FMA + F16C here\n");
      return 0;
    }
    const Case cases[] = {
        {"vfmadd231ps", fma_y, true},     {"vpmaddubsw", maddubs_y, true}, {"vpmaddwd", maddwd_y, true},
        {"vpshufb", shufb_y, true},       {"vpslld", slld_y, true},        {"vcvtph2ps", ph2ps_y, true},
        {"vpmovzxwd (mem)", zxwd_y, true},
    };
    report(cases, std::size(cases), 256);
    return 0;
  }
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
  report(cases, std::size(cases), 512);
  return 0;
}
