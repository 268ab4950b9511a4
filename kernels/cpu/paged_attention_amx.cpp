// The AMX tile kernel of paged attention (AttentionTiling::amx): BF16 pools, head_dim % 32 == 0, CPUs with
// amx_tile + amx_bf16 (Intel Xeon since Sapphire Rapids). One kernel for every tile, prefill and decode, cut as
// the AVX-512 lane kernels are (paged_attention_tiled.cpp). The work item's KV blocks are taken in super-chunks of
// up to kSub = 4 sub-chunks (16 positions of one block each, in order from the item's first block: the same
// grouping whether the item is a decode step or a prefill tile), and per super-chunk and vector of 16 query rows:
//   S^T_c [16 positions, 16 rows] = K_c [16, hd] · Q^T [hd, 16]  per sub-chunk c, K straight from the paged block as
//                                                               the A operand (no transpose, no widening), Q^T as B
//                                                               in VNNI pairs;
//   the online softmax over the super-chunk's 64 slots: across the lanes of S^T's rows, P transposed in registers,
//   for vectors of >= kLaneRows rows (prefill); row by row after gathering S, for the vector's rows only, for fewer
//   (decode: the GQA group) — the same operations per row either way;
//   C [16 rows, 16 dims] = P · V per 16 output dims             P parts of 32 positions as A, V rows interleaved in
//                                                               pairs as B, summed in the tile over the super-chunk;
//   Acc[r] = c_r · Acc[r] + C[r]                                 one FMA a row and 16 dims a super-chunk.
// Two parts: a tile multiplies BF16 by BF16 into F32. The scaled q and the weights P are F32; each is split into
// hi + lo, two BF16 values (round to nearest, then the exact remainder rounded again): 16 significant bits, the
// rest (relative 2^-18 or less) dropped. So S = K·q_hi + K·q_lo (one accumulator tile, slice by slice) is the F32
// score to about 2^-18 · Σ|q k|, and P·V the F32 sum to 2^-18 relative — K and V are BF16 already, and storing K in
// BF16 moved the scores 2^9 times more. Three parts (the F32 values exactly, sessions 19-47) took half as many tile
// products again: prefill attention 512 tokens at context 512, 1 thread, 3.2 ms a layer with three against 2.35
// with two, decode at context 128 19.6 against 16.2 µs a call, alternated 3 times
// (bench/results/xeon-amx-attention-parts-20261208.md). (Values under 2^-126 in a part are flushed to zero by the
// tiles: an absolute error below 1e-38.) A C element depends only on its own A row and B column, and everything else is
// per row too, so a query row gets the same operations whatever tile, chunk of the prompt or batch it is computed in:
// prefill equals decode, bit for bit (tests/kernels/test_paged_attention_tiled.cpp runs the lane kernels' invariance
// tests on this one). A super-chunk cut short by the end of the sequence (decode) adds exact zeros where the full one
// (prefill) has positions past the row's own: masked weights are 0 and sums + 0 are unchanged. Super-chunks of 64
// rather than one 16-position chunk at a time (session 20): the accumulator update, the C tile stores and the Q^T loads
// once per 64 positions, P·V in 6 tile products per 16 dims instead of 8 (three parts then; no half-empty lo tile):
// prefill attention 1.2× faster (bench/results/xeon-amx-kernels-20261203.md §18). The tile work of a vector is issued
// in steps among the vector instructions of its neighbour's softmax (the tile and vector units then work at once; see
// the loop over vectors). Tiles: palette 1, all eight 16 rows × 64 bytes (tmm7 unused); configured at the start of each
// work item, released at its end. Built with -ffp-contract=off as the lane kernels (kernels/cpu/CMakeLists.txt).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/paged_attention.h"

#define TP_KV_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16,avx2,fma,f16c")))
#include "kernels/cpu/paged_attention_impl.h"
#include "kernels/cpu/paged_attention_lanes.h"
#include "kernels/cpu/paged_attention_tiled_impl.h"

namespace tp::cpu {
namespace {

bool detect_amx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!attention_has_avx512() || !detail::cpu_has_avx512bf16() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  if (!amx_bf16 || !amx_tile) return false;
  // Linux hands out the 8 KiB tile state per process on request (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 18).
  constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
}

}  // namespace

bool attention_has_amx() {
  static const bool has = detect_amx();
  return has;
}

namespace detail {
namespace {

constexpr int64_t kL = kChunkLanes;     // positions a chunk, query rows a vector
constexpr int64_t kTileFloats = 256;    // one 16 × 64-byte tile, in floats
constexpr int64_t kPrefetchAhead = 3;   // blocks (as attend_tile_lanes_few)
constexpr int64_t kLaneRows = 8;        // vectors of at least this many rows take the softmax across the lanes
constexpr int64_t kSub = 4;             // sub-chunks (16 positions of one KV block each) a super-chunk
constexpr int64_t kSlots = kSub * kL;   // positions a super-chunk
constexpr int64_t kParts = 2;           // BF16 parts of q and of P (hi, lo: tiles 5, 6)

// x ≈ hi + lo, each part BF16: hi = x rounded to nearest even, lo = the remainder x − hi (exact in F32) rounded.
TP_KV_TARGET inline void split2(__m512 x, __m256i* parts) {
  parts[0] = (__m256i)_mm512_cvtneps_pbh(x);
  const __m512 hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(parts[0]), 16));
  parts[1] = (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(x, hi));
}

// Parts of 16 weights of row r, sub-chunk c (of a super-chunk) into the P tiles: tile (c / 2, part) row r, columns
// 16 (c % 2) .. + 15 (pa: [2 halves][2 parts] tiles of 16 rows × 32 BF16).
TP_KV_TARGET inline void store_p(__m512 p, uint16_t* pa, int64_t r, int64_t c) {
  __m256i parts[kParts];
  split2(p, parts);
  for (int64_t q = 0; q < kParts; ++q)
    _mm256_store_si256(reinterpret_cast<__m256i*>(pa + ((c / 2) * kParts + q) * 512 + r * 32 + (c % 2) * 16), parts[q]);
}

// GCC's tile intrinsics are macros that paste their tile numbers into the asm: literal numbers only, hence macros.
// S^T of sub-chunk Cn for one 32-wide slice of head_dim: tmm Cn += its K slice (A operand, tmm4) · the Q^T parts hi,
// lo (tmm5-6, loaded by the caller).
#define TP_AMX_S_SUB(Cn, k, k_stride) \
  do {                                \
    _tile_loadd(4, (k), (k_stride));  \
    _tile_dpbf16ps(Cn, 4, 5);         \
    _tile_dpbf16ps(Cn, 4, 6);         \
  } while (0)

// C tile Cn (one 16-dim piece) += P parts hi, lo of one half (tmm5-6, loaded by the caller) · that half's V pairs of
// the piece (B operand, tmm4).
#define TP_AMX_PV_HALF(Cn, vpairs) \
  do {                             \
    _tile_loadd(4, (vpairs), 64);  \
    _tile_dpbf16ps(Cn, 5, 4);      \
    _tile_dpbf16ps(Cn, 6, 4);      \
  } while (0)

// Step ss of S^T's tile work for one vector of 16 query rows (steps 0 .. 2 + n_ks (1 + nsub) − 1, in order): zero the
// accumulators; per 32-dim slice ks, load its Q^T parts (tmm5-6), then one sub-chunk's products a step; store the
// accumulators into st [nsub tiles]. qt: the vector's Q^T tiles; kr, k_stride: the sub-chunks' K rows.
TP_KV_TARGET inline void s_step(int64_t ss, const uint16_t* qt, const uint8_t* const* kr, const int64_t* k_stride,
                                int64_t nsub, int64_t n_ks, float* st) {
  const int64_t per = 1 + nsub;
  if (ss == 0) {
    _tile_zero(0);
    if (nsub > 1) _tile_zero(1);
    if (nsub > 2) _tile_zero(2);
    if (nsub > 3) _tile_zero(3);
  } else if (ss <= n_ks * per) {
    const int64_t ks = (ss - 1) / per;
    const uint16_t* q = qt + ks * kParts * 512;
    switch ((ss - 1) % per) {
      case 0:
        _tile_loadd(5, q, 64);
        _tile_loadd(6, q + 512, 64);
        break;
      case 1:
        TP_AMX_S_SUB(0, kr[0] + ks * 64, k_stride[0]);
        break;
      case 2:
        TP_AMX_S_SUB(1, kr[1] + ks * 64, k_stride[1]);
        break;
      case 3:
        TP_AMX_S_SUB(2, kr[2] + ks * 64, k_stride[2]);
        break;
      default:
        TP_AMX_S_SUB(3, kr[3] + ks * 64, k_stride[3]);
        break;
    }
  } else {
    _tile_stored(0, st, 64);
    if (nsub > 1) _tile_stored(1, st + kTileFloats, 64);
    if (nsub > 2) _tile_stored(2, st + 2 * kTileFloats, 64);
    if (nsub > 3) _tile_stored(3, st + 3 * kTileFloats, 64);
  }
}

// Step ps of C = P · V's tile work for one vector (steps 0 .. pv_steps − 1, in order), per pass of up to 4 pieces of
// 16 dims: zero the accumulators; per half of the super-chunk, load its P parts (tmm5-6), then one piece's products a
// step; store the accumulators into ct [n_pieces tiles], piece by piece.
TP_KV_TARGET inline int64_t pv_steps(int64_t n_pieces, int64_t n_half) {
  int64_t n = 0;
  for (int64_t pc = 0; pc < n_pieces; pc += 4) n += 2 + n_half * (1 + std::min<int64_t>(4, n_pieces - pc));
  return n;
}

TP_KV_TARGET inline void p_step(int64_t ps, const uint16_t* pa, const uint16_t* vp, int64_t n_pieces, int64_t n_half,
                                float* ct) {
  for (int64_t pc = 0; pc < n_pieces; pc += 4) {
    const int64_t np = std::min<int64_t>(4, n_pieces - pc), per = 1 + np;
    if (ps >= 2 + n_half * per) {
      ps -= 2 + n_half * per;
      continue;
    }
    if (ps == 0) {
      _tile_zero(0);
      if (np > 1) _tile_zero(1);
      if (np > 2) _tile_zero(2);
      if (np > 3) _tile_zero(3);
    } else if (ps <= n_half * per) {
      const int64_t h = (ps - 1) / per;
      const uint16_t* vh = vp + (h * n_pieces + pc) * 512;
      switch ((ps - 1) % per) {
        case 0:
          _tile_loadd(5, pa + (h * kParts) * 512, 64);
          _tile_loadd(6, pa + (h * kParts + 1) * 512, 64);
          break;
        case 1:
          TP_AMX_PV_HALF(0, vh);
          break;
        case 2:
          TP_AMX_PV_HALF(1, vh + 512);
          break;
        case 3:
          TP_AMX_PV_HALF(2, vh + 1024);
          break;
        default:
          TP_AMX_PV_HALF(3, vh + 1536);
          break;
      }
    } else {
      float* cp = ct + pc * kTileFloats;
      _tile_stored(0, cp, 64);
      if (np > 1) _tile_stored(1, cp + kTileFloats, 64);
      if (np > 2) _tile_stored(2, cp + 2 * kTileFloats, 64);
      if (np > 3) _tile_stored(3, cp + 3 * kTileFloats, 64);
    }
    return;
  }
}

// Acc[r] = c_r · Acc[r] + C[r] for the rows r < n_rows of a vector in seen: acc [16, hd] the vector's rows, ct
// [hd / 16] C tiles (16 rows × 16 dims each), c [16].
TP_KV_TARGET inline void update_acc(float* acc, const float* ct, const float* c, uint32_t seen, int64_t n_rows,
                                    int64_t hd) {
  for (int64_t r = 0; r < n_rows; ++r) {
    if (!(seen >> r & 1)) continue;
    const __m512 cv = _mm512_set1_ps(c[r]);
    float* ar = acc + r * hd;
    for (int64_t q = 0; q < hd / kL; ++q)
      _mm512_storeu_ps(ar + q * kL, _mm512_fmadd_ps(cv, _mm512_loadu_ps(ar + q * kL),
                                                    _mm512_load_ps(ct + q * kTileFloats + r * kL)));
  }
}

TP_KV_TARGET void attend_tile_amx(const TileArgs& a, int64_t kv_head, int64_t t0, int64_t n_tok, int64_t b0,
                                  int64_t b1, TileScratch& sc, float* m, float* l, float* acc) {
  const KvTensorView &k = *a.k, &v = *a.v;
  const KvBlockLayout& lay = k.layout;
  const int64_t hd = lay.head_dim, bs = lay.block_size, row = lay.row_bytes(), g = a.group;
  const int64_t n_rows = n_tok * g, n_vec = (n_rows + kL - 1) / kL, W = n_vec * kL;
  const int64_t n_ks = hd / 32, n_pieces = hd / kL;
  const int64_t head_at = kv_head * hd * 2;
  // Scratch (64-byte aligned, in 1 KiB tiles): qb [n_vec, n_ks, kParts] Q^T tiles; vp [2 halves, n_pieces] V-pair
  // tiles; kscr [kSub, n_ks] BF16 K rows of sub-chunks cut by their block's end; st [kSub] S^T; pt [kSub] P^T;
  // pa [2 halves, kParts] P tiles; ct [max(4, n_pieces)] C tiles; st2 [kSub] the other S^T buffer; then mm, ll [W] the
  // rows' running max and sum, rpos [W] their positions, spos [kSlots] the super-chunk's slot positions.
  const int64_t n_ct = std::max<int64_t>(4, n_pieces);
  const int64_t n_qb = n_vec * n_ks * kParts,
                n_tiles = n_qb + 2 * n_pieces + kSub * n_ks + 3 * kSub + 2 * kParts + n_ct;
  const size_t need = size_t(n_tiles * kTileFloats + 3 * W + kSlots + 16);
  if (sc.x.size() < need) sc.x.resize(need);
  float* base = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(sc.x.data()) + 63) & ~uintptr_t(63));
  uint16_t* qb = reinterpret_cast<uint16_t*>(base);
  uint16_t* vp = qb + n_qb * 2 * kTileFloats;
  uint16_t* kscr = vp + 2 * n_pieces * 2 * kTileFloats;
  float* st0 = base + (n_qb + 2 * n_pieces + kSub * n_ks) * kTileFloats;
  float* pt = st0 + kSub * kTileFloats;
  uint16_t* pa = reinterpret_cast<uint16_t*>(pt + kSub * kTileFloats);
  float* ct = pt + (kSub + 2 * kParts) * kTileFloats;
  float* const stb[2] = {st0, ct + n_ct * kTileFloats};
  float* mm = stb[1] + kSub * kTileFloats;
  float* ll = mm + W;
  int32_t* rpos = reinterpret_cast<int32_t*>(ll + W);  // each row's position
  int32_t* spos = rpos + W;                            // each slot's position; INT32_MAX: an empty slot

  const int64_t pos0 = a.start_pos + t0, last = pos0 + n_tok - 1;
  // Q^T in VNNI pairs: tile (iv, ks, part) row kp, column n = the part of q_{16 iv + n}[32 ks + 2 kp + e], e = 0, 1.
  // Built a vector of 16 rows and 32 dims at a time: each row's 16 pairs of each part into a row of tq, then one
  // 16 × 16 transpose of 32-bit pairs a part (rows past n_rows zero).
  for (int64_t iv = 0; iv < n_vec; ++iv)
    for (int64_t ks = 0; ks < n_ks; ++ks) {
      alignas(64) uint32_t tq[kParts][kL][kL];
      for (int64_t n = 0; n < kL; ++n) {
        const int64_t r = iv * kL + n;
        if (r >= n_rows) {
          for (int p = 0; p < kParts; ++p) _mm512_store_si512(tq[p][n], _mm512_setzero_si512());
          continue;
        }
        const float* src = a.q + ((t0 + r / g) * a.n_heads + kv_head * g + r % g) * hd + ks * 32;
        for (int64_t h = 0; h < 2; ++h) {
          __m256i parts[kParts];
          split2(_mm512_mul_ps(_mm512_loadu_ps(src + h * kL), _mm512_set1_ps(a.scale)), parts);
          for (int p = 0; p < kParts; ++p) _mm256_store_si256(reinterpret_cast<__m256i*>(tq[p][n] + h * 8), parts[p]);
        }
      }
      for (int p = 0; p < kParts; ++p) {
        __m512 t[kL];
        for (int64_t n = 0; n < kL; ++n) t[n] = _mm512_load_ps(reinterpret_cast<const float*>(tq[p][n]));
        transpose16(t);
        float* tile = reinterpret_cast<float*>(qb + ((iv * n_ks + ks) * kParts + p) * 512);
        for (int64_t kp = 0; kp < kL; ++kp) _mm512_store_ps(tile + kp * kL, t[kp]);
      }
    }
  for (int64_t r = 0; r < W; ++r) {
    mm[r] = -INFINITY;
    ll[r] = 0.0f;
    rpos[r] = r < n_rows ? int32_t(pos0 + r / g) : -1;  // padding lanes see nothing
  }
  for (int64_t i = 0; i < n_rows * hd; ++i) acc[i] = 0.0f;
  // Interleaves 16-bit elements of two 32-element vectors: lo takes elements 0..15 of a and b, hi 16..31.
  const __m512i il_lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                         37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i il_hi = _mm512_add_epi16(il_lo, _mm512_set1_epi16(16));
  const __m512i col = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                         _mm512_set1_epi32(int32_t(kL)));
  configure_amx_tiles();
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __mmask16 visible[kSlots];
  uint32_t pa_rows = 0xFFFF;  // rows of the P tiles that may be nonzero
  int64_t b = b0, c0 = 0;     // the next sub-chunk: block b, from its position c0
  const uint8_t* kr[kSub];
  int64_t k_stride[kSub];
  for (;;) {
    // Gather the super-chunk: up to kSub sub-chunks (16 positions of one block each), in order from b0.
    int64_t nsub = 0;
    for (int64_t j = 0; j < kSlots; ++j) spos[j] = INT32_MAX;
    while (nsub < kSub && b < b1 && b * bs <= last) {
      const int64_t p0 = b * bs, n = std::min(bs, last + 1 - p0);
      if (c0 >= n) {
        ++b;
        c0 = 0;
        continue;
      }
      // The next blocks into L2 (prefetcht1: L2's outstanding-miss entries, not L1's few fill buffers, which the
      // tile loads need; as the decode weight streams on Intel, kernels/cpu/gemv.h): decode at depth 8192 with
      // prefetcht0 vs this, alternated 4 times, 1 thread: tg64 19.40 / 18.61 / 19.12 / 18.96 vs 19.69 / 20.05 / 19.97 /
      // 19.31 tok/s; 2 threads 37.1 vs 38.6.
      if (c0 == 0)
        for (int64_t ahead = b == b0 ? 1 : kPrefetchAhead; ahead <= kPrefetchAhead; ++ahead) {
          const int64_t bn = b + ahead;
          if (bn >= b1 || bn * bs > last) break;
          const uint8_t* kn = k.block(a.block_table[bn]) + head_at;
          const uint8_t* vn = v.block(a.block_table[bn]) + head_at;
          for (int64_t j = 0; j < bs; ++j)
            for (int64_t o = 0; o < hd * 2; o += 64) {
              _mm_prefetch(reinterpret_cast<const char*>(kn + j * row + o), _MM_HINT_T1);
              _mm_prefetch(reinterpret_cast<const char*>(vn + j * row + o), _MM_HINT_T1);
            }
        }
      const uint8_t* kb = k.block(a.block_table[b]) + head_at + c0 * row;
      const uint8_t* vb = v.block(a.block_table[b]) + head_at + c0 * row;
      const int64_t nc = std::min(kL, n - c0), cpos = p0 + c0;
      for (int64_t j = 0; j < nc; ++j) spos[nsub * kL + j] = int32_t(cpos + j);
      // K rows as the A operand: in place when the sub-chunk's 16 rows lie in the block (rows past nc are masked),
      // else copied with zero rows.
      kr[nsub] = kb;
      k_stride[nsub] = row;
      if (c0 + kL > bs) {
        uint16_t* ks = kscr + nsub * kL * hd;
        for (int64_t j = 0; j < kL; ++j) {
          if (j < nc)
            std::memcpy(ks + j * hd, kb + j * row, size_t(hd) * 2);
          else
            std::memset(ks + j * hd, 0, size_t(hd) * 2);
        }
        kr[nsub] = reinterpret_cast<const uint8_t*>(ks);
        k_stride[nsub] = hd * 2;
      }
      // V pairs: half (nsub / 2), piece (16 dims) tile row 8 (nsub % 2) + i = V[2i][d], V[2i + 1][d] interleaved
      // (zero past nc).
      for (int64_t i = 0; i < kL / 2; ++i) {
        const int64_t j0 = 2 * i, j1 = 2 * i + 1;
        for (int64_t d0 = 0; d0 < hd; d0 += 32) {
          const __m512i x0 = j0 < nc ? _mm512_loadu_si512(vb + j0 * row + d0 * 2) : _mm512_setzero_si512();
          const __m512i x1 = j1 < nc ? _mm512_loadu_si512(vb + j1 * row + d0 * 2) : _mm512_setzero_si512();
          uint16_t* t0p = vp + ((nsub / 2) * n_pieces + d0 / kL) * 512 + ((nsub % 2) * 8 + i) * 32;
          _mm512_store_si512(t0p, _mm512_permutex2var_epi16(x0, il_lo, x1));
          _mm512_store_si512(t0p + 512, _mm512_permutex2var_epi16(x0, il_hi, x1));
        }
      }
      ++nsub;
      c0 += kL;
    }
    if (nsub == 0) break;
    if (nsub % 2)  // the half's second sub-chunk is empty: zero V pairs (its weights are 0; garbage could be NaN)
      for (int64_t pc = 0; pc < n_pieces; ++pc)
        for (int64_t i = 0; i < 8; ++i)
          _mm512_store_si512(vp + ((nsub / 2) * n_pieces + pc) * 512 + (8 + i) * 32, _mm512_setzero_si512());
    const int64_t n_half = (nsub + 1) / 2, n_slots = nsub * kL;
    // Rows of tokens before the first position see nothing of the super-chunk: start at the vector holding the
    // first that does.
    const int64_t first_vec = std::max<int64_t>(0, spos[0] - pos0) * g / kL;
    // The tile work in steps (s_step, p_step), issued among the vector instructions of a softmax so that the tile
    // unit works while the vector units do: issued in a block, the tiles and the softmax ran one after the other
    // (the reorder buffer holds a fraction of a softmax). Per vector iv: its softmax (reading S^T(iv) from one of
    // two buffers) carries P · V(iv − 1) among its exponentials (every 5 slots; all of it before P is rewritten) and
    // S^T(iv + 1) into the other buffer among its P stores (every 4 rows); then Acc(iv − 1) is updated from the C
    // tiles. The same products and per-row operations in another interleaving: the same bits. kv_attention_bench, 512
    // tokens at context 512, 1 thread, the AMX Xeon, alternated 8 times in one run: 2326-2336 µs with the work in
    // blocks, 1988-2076 as here. Variants, each against the blocks in its own run: S^T alone among the exponentials
    // (every 4 slots) 13 % faster; both there, every 2 slots, 2 % (the tile unit then the bottleneck there and idle
    // during the P stores); P · V every 4 slots and S^T every 4 rows 15 %, as here (every 5 slots) about the same.
    const int64_t n_ssteps = 2 + n_ks * (1 + nsub), n_psteps = pv_steps(n_pieces, n_half);
    int64_t pv = -1, pv_end = 0;  // the vector whose P · V is pending (issued among the next one's softmax), its rows,
    uint32_t pv_seen = 0;         // the rows that saw the super-chunk
    alignas(64) float pv_c[kL];   // and their factors c
    int64_t iv = first_vec;
    if (iv < n_vec)
      for (int64_t ss = 0; ss < n_ssteps; ++ss)
        s_step(ss, qb + iv * n_ks * kParts * 512, kr, k_stride, nsub, n_ks, stb[iv & 1]);
    for (; iv < n_vec; ++iv) {
      float* const st = stb[iv & 1];
      float* const st_next = stb[(iv + 1) & 1];
      const uint16_t* qt_next = qb + (iv + 1) * n_ks * kParts * 512;
      int64_t ns = iv + 1 < n_vec ? 0 : n_ssteps;  // the next vector's S^T steps issued
      int64_t ps = pv >= 0 ? 0 : n_psteps;         // the previous vector's P · V steps issued (all before any of
                                                   // S^T's, since they share the tiles; all before P is rewritten)
      // The online softmax over the super-chunk's slots; each row's weights P split into hi, lo tiles. Two ways
      // that give a row the same bits (per row: masked max, c = e^(m_old − m_new), P = e^(S − m_new),
      // L' = L·c + P_0 + … + P_(n_slots − 1) in order, as the lane kernels' chunk softmax): vectors of many rows take
      // it across the lanes and transpose P; vectors of few rows (decode: the GQA group) gather S and take it row by
      // row, for their rows only. Empty slots and positions past a row's own are masked (P = 0: a super-chunk cut
      // short by the end of the sequence adds the same as the full one). A row that sees nothing of it keeps its
      // values either way (c = 1 exactly, P = 0).
      const int64_t r_end = std::min(kL, n_rows - iv * kL);
      alignas(64) float cr[kL];
      uint32_t seen = 0;
      if (r_end >= kLaneRows) {
        // Every row sees every slot (16 real rows, the first's position at or past the last slot's, no empty slot:
        // most super-chunks of a long prefill): the masks are all ones and are left out — the same values.
        const bool all_visible = r_end == kL && rpos[iv * kL] >= spos[n_slots - 1];
        if (!all_visible) {
          const __m512i rp = _mm512_loadu_si512(rpos + iv * kL);
          for (int64_t j = 0; j < n_slots; ++j)
            visible[j] = _mm512_cmp_epi32_mask(rp, _mm512_set1_epi32(spos[j]), _MM_CMPINT_NLT);
        }
        const __m512 m_old = _mm512_loadu_ps(mm + iv * kL);
        // The max in four chains (n_slots is a multiple of 16): max is exact, so any order gives the same bits, and
        // one chain ran at vmaxps's latency (6 % of the kernel's samples in prefill).
        __m512 mx4[4] = {m_old, neg_inf, neg_inf, neg_inf};
        if (all_visible)
          for (int64_t j = 0; j < n_slots; j += 4)
            for (int64_t u = 0; u < 4; ++u) mx4[u] = _mm512_max_ps(mx4[u], _mm512_load_ps(st + (j + u) * kL));
        else
          for (int64_t j = 0; j < n_slots; j += 4)
            for (int64_t u = 0; u < 4; ++u)
              mx4[u] = _mm512_max_ps(mx4[u],
                                     _mm512_mask_blend_ps(visible[j + u], neg_inf, _mm512_load_ps(st + (j + u) * kL)));
        const __m512 mx = _mm512_max_ps(_mm512_max_ps(mx4[0], mx4[1]), _mm512_max_ps(mx4[2], mx4[3]));
        // Lanes that have seen nothing yet keep max -inf; subtract 0 there instead (their weights are masked to 0).
        const __m512 sub = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mx, neg_inf, _CMP_EQ_OQ), mx, _mm512_setzero_ps());
        const __m512 c = exp16(_mm512_sub_ps(m_old, sub));
        __m512 lsum = _mm512_mul_ps(_mm512_loadu_ps(ll + iv * kL), c);
        for (int64_t j = 0; j < n_slots; ++j) {
          if (j % 5 == 4 && ps < n_psteps) p_step(ps++, pa, vp, n_pieces, n_half, ct);
          const __m512 e = exp16(_mm512_sub_ps(_mm512_load_ps(st + j * kL), sub));
          const __m512 p = all_visible ? e : _mm512_maskz_mov_ps(visible[j], e);
          lsum = _mm512_add_ps(lsum, p);
          _mm512_store_ps(pt + j * kL, p);
        }
        _mm512_storeu_ps(mm + iv * kL, mx);
        _mm512_storeu_ps(ll + iv * kL, lsum);
        _mm512_store_ps(cr, c);
        for (; ps < n_psteps; ++ps) p_step(ps, pa, vp, n_pieces, n_half, ct);  // before P is rewritten
        for (int64_t cs = 0; cs < 2 * n_half; ++cs) {
          __m512 p[kL];
          for (int64_t j = 0; j < kL; ++j)
            p[j] = cs < nsub ? _mm512_load_ps(pt + (cs * kL + j) * kL) : _mm512_setzero_ps();
          transpose16(p);
          for (int64_t r = 0; r < kL; ++r) {
            store_p(p[r], pa, r, cs);
            if (r % 4 == 3 && ns < n_ssteps) s_step(ns++, qt_next, kr, k_stride, nsub, n_ks, st_next);
          }
        }
        pa_rows = 0xFFFF;
        seen = (1u << r_end) - 1;
      } else {
        for (; ns < n_ssteps; ++ns) s_step(ns, qt_next, kr, k_stride, nsub, n_ks, st_next);  // before P · V's
        for (; ps < n_psteps; ++ps) p_step(ps, pa, vp, n_pieces, n_half, ct);                // before P is rewritten
        for (int64_t r = 0; r < kL; ++r) {
          const int64_t rw = iv * kL + r, rp = pos0 + rw / g;
          __mmask16 vis[kSub] = {};
          bool any = false;
          if (r < r_end && rp >= spos[0])
            for (int64_t cs = 0; cs < nsub; ++cs) {
              vis[cs] = _mm512_cmp_epi32_mask(_mm512_loadu_si512(spos + cs * kL), _mm512_set1_epi32(int32_t(rp)),
                                              _MM_CMPINT_LE);
              any |= vis[cs] != 0;
            }
          if (!any) {
            if (pa_rows >> r & 1)  // else zero already
              for (int64_t cs = 0; cs < kSub; ++cs) store_p(_mm512_setzero_ps(), pa, r, cs);
            pa_rows &= ~(1u << r);
            continue;
          }
          seen |= 1u << r;
          pa_rows |= 1u << r;
          __m512 s[kSub];
          __m512 smax = neg_inf;
          for (int64_t cs = 0; cs < kSub; ++cs) {
            s[cs] = cs < nsub ? _mm512_mask_blend_ps(vis[cs], neg_inf,
                                                     _mm512_i32gather_ps(col, st + cs * kTileFloats + r, 4))
                              : neg_inf;
            smax = _mm512_max_ps(smax, s[cs]);
          }
          const float m_old = mm[rw];
          const float mx = std::max(m_old, _mm512_reduce_max_ps(smax));
          const float sub = mx == -INFINITY ? 0.0f : mx;
          // exp16(0) is exactly 1: the max did not move (the common case once a row has seen a few chunks).
          cr[r] = mx == m_old && m_old != -INFINITY ? 1.0f : _mm512_cvtss_f32(exp16(_mm512_set1_ps(m_old - sub)));
          alignas(64) float pr[kSlots];
          for (int64_t cs = 0; cs < kSub; ++cs) {
            const __m512 p = _mm512_maskz_mov_ps(vis[cs], exp16(_mm512_sub_ps(s[cs], _mm512_set1_ps(sub))));
            _mm512_store_ps(pr + cs * kL, p);
            store_p(p, pa, r, cs);
          }
          float lsum = ll[rw] * cr[r];
          for (int64_t j = 0; j < n_slots; ++j) lsum += pr[j];
          ll[rw] = lsum;
          mm[rw] = mx;
        }
      }
      // (Both softmax forms have issued every P · V step.)
      for (; ns < n_ssteps; ++ns) s_step(ns, qt_next, kr, k_stride, nsub, n_ks, st_next);
      if (pv >= 0) update_acc(acc + pv * kL * hd, ct, pv_c, pv_seen, pv_end, hd);
      pv = -1;
      if (seen != 0) {
        pv = iv, pv_end = r_end, pv_seen = seen;
        _mm512_store_ps(pv_c, _mm512_load_ps(cr));
      }
    }
    // The last vector's P · V (before the next super-chunk rewrites the V pairs).
    if (pv >= 0) {
      for (int64_t ps = 0; ps < n_psteps; ++ps) p_step(ps, pa, vp, n_pieces, n_half, ct);
      update_acc(acc + pv * kL * hd, ct, pv_c, pv_seen, pv_end, hd);
    }
  }
  _tile_release();
  for (int64_t r = 0; r < n_rows; ++r) {
    m[r] = mm[r];
    l[r] = ll[r];
  }
}

}  // namespace

TileFn tile_amx(KvDType d) { return d == KvDType::BF16 ? attend_tile_amx : nullptr; }

}  // namespace detail
}  // namespace tp::cpu
