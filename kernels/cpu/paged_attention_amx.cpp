// The AMX tile kernel of paged attention (AttentionTiling::amx): BF16 pools, head_dim % 32 == 0, CPUs with
// amx_tile + amx_bf16 (Intel Xeon since Sapphire Rapids). One kernel for every tile, prefill and decode, cut as
// the AVX-512 lane kernels are (paged_attention_tiled.cpp); per 16-position chunk of a KV block and vector of 16
// query rows of the tile:
//   S^T [16 positions, 16 rows] = K [16, hd] · Q^T [hd, 16]   K straight from the paged block as the A operand
//                                                              (no transpose, no widening), Q^T as B in VNNI pairs;
//   the online softmax of the lane kernels (paged_attention_lanes.h): across the lanes of S^T's rows, P
//   transposed in registers, for vectors of >= kLaneRows rows (prefill); row by row after transposing S, for the
//   vector's rows only, for fewer (decode: the GQA group) — the same operations per row either way;
//   C [16 rows, 16 dims] = P · V per 16 output dims            V rows interleaved in pairs as B;
//   Acc[r] = c_r · Acc[r] + C[r]                                one FMA a row and 16 dims.
// Exact parts: a tile multiplies BF16 by BF16 into F32. The scaled q and the weights P are F32; each is split into
// hi + mid + lo, three BF16 values whose sum is the F32 value exactly (round to nearest twice; each remainder is
// exact), so S = K·q_hi + K·q_mid + K·q_lo (one accumulator tile, slice by slice) and P·V are the F32 products up to
// summation order — K and V are BF16 already. (Values under 2^-126 in a part are flushed to zero by the tiles: an absolute error below 1e-38.)
// A C element depends only on its own A row and B column, and everything else is per row too, so a query row gets
// the same operations whatever tile, chunk of the prompt or batch it is computed in: prefill equals decode, bit
// for bit (tests/kernels/test_paged_attention_tiled.cpp runs the lane kernels' invariance tests on this one).
// Tiles: palette 1, all eight 16 rows × 64 bytes; configured at the start of each work item, released at its end.
// Built with -ffp-contract=off as the lane kernels (kernels/cpu/CMakeLists.txt).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

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
constexpr int64_t kGatherRows = 4;      // vectors of at most this many rows gather their S rows (else transpose)

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

TP_KV_TARGET inline void configure_tiles() {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.colsb[i] = 64;
    cfg.rows[i] = 16;
  }
  _tile_loadconfig(&cfg);
}

// x = hi + mid + lo exactly, each part BF16 (round to nearest even; the remainders are exact in F32).
TP_KV_TARGET inline void split3(__m512 x, __m256i* parts) {
  for (int p = 0; p < 3; ++p) {
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(x);
    parts[p] = h;
    x = _mm512_sub_ps(x, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
}

// Row r of the P tiles: hi | mid parts of p (tile pa) and lo | 0 (tile pa + 512).
TP_KV_TARGET inline void store_p_row(__m512 p, uint16_t* pa, int64_t r) {
  __m256i parts[3];
  split3(p, parts);
  _mm512_store_si512(pa + r * 32, _mm512_inserti64x4(_mm512_castsi256_si512(parts[0]), parts[1], 1));
  _mm512_store_si512(pa + 512 + r * 32, _mm512_inserti64x4(_mm512_castsi256_si512(parts[2]), _mm256_setzero_si256(), 1));
}

// GCC's tile intrinsics are macros that paste their tile numbers into the asm: literal numbers only, hence macros.
// S^T for one 32-wide slice of head_dim: tmm0 += K slice (A operand, into tile A) · Q^T parts hi, mid, lo (q3).
#define TP_AMX_S_SLICE(A, k, k_stride, q3) \
  do {                                     \
    _tile_loadd(A, (k), (k_stride));       \
    _tile_loadd(4, (q3), 64);              \
    _tile_loadd(6, (q3) + 512, 64);        \
    _tile_loadd(7, (q3) + 1024, 64);       \
    _tile_dpbf16ps(0, A, 4);               \
    _tile_dpbf16ps(0, A, 6);               \
    _tile_dpbf16ps(0, A, 7);               \
  } while (0)

// C tile Cn = P (tmm6: hi | mid, tmm7: lo | 0) · the V pairs of one 16-dim piece (B operand, into tile Bn), stored
// to c.
#define TP_AMX_PV_PIECE(Cn, Bn, vpairs, c) \
  do {                                     \
    _tile_zero(Cn);                        \
    _tile_loadd(Bn, (vpairs), 64);         \
    _tile_dpbf16ps(Cn, 6, Bn);             \
    _tile_dpbf16ps(Cn, 7, Bn);             \
    _tile_stored(Cn, (c), 64);             \
  } while (0)

TP_KV_TARGET void attend_tile_amx(const TileArgs& a, int64_t kv_head, int64_t t0, int64_t n_tok, int64_t b0,
                                  int64_t b1, TileScratch& sc, float* m, float* l, float* acc) {
  const KvTensorView &k = *a.k, &v = *a.v;
  const KvBlockLayout& lay = k.layout;
  const int64_t hd = lay.head_dim, bs = lay.block_size, row = lay.row_bytes(), g = a.group;
  const int64_t n_rows = n_tok * g, n_vec = (n_rows + kL - 1) / kL, W = n_vec * kL;
  const int64_t n_ks = hd / 32, n_pieces = hd / kL;
  const int64_t head_at = kv_head * hd * 2;
  // Scratch (64-byte aligned, in 1 KiB tiles): qb [n_vec, n_ks, 3 parts] Q^T tiles; vp [n_pieces] V-pair tiles;
  // kscr [16, hd] BF16 K rows of a chunk cut by its block's end; st S^T; pt P^T; pa [2] P tiles; ct [4] C tiles;
  // then mm, ll [W] the rows' running max and sum, rpos [W] their positions.
  const int64_t n_qb = n_vec * n_ks * 3, n_tiles = n_qb + n_pieces + n_ks + 1 + 1 + 2 + 4;
  const size_t need = size_t(n_tiles * kTileFloats + 3 * W + 16);
  if (sc.x.size() < need) sc.x.resize(need);
  float* base = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(sc.x.data()) + 63) & ~uintptr_t(63));
  uint16_t* qb = reinterpret_cast<uint16_t*>(base);
  uint16_t* vp = qb + n_qb * 2 * kTileFloats;
  uint16_t* kscr = vp + n_pieces * 2 * kTileFloats;
  float* st = base + (n_qb + n_pieces + n_ks) * kTileFloats;
  float* pt = st + kTileFloats;
  uint16_t* pa = reinterpret_cast<uint16_t*>(pt + kTileFloats);
  float* ct = pt + 3 * kTileFloats;
  float* mm = ct + 4 * kTileFloats;
  float* ll = mm + W;
  int32_t* rpos = reinterpret_cast<int32_t*>(ll + W);  // each row's position

  const int64_t pos0 = a.start_pos + t0, last = pos0 + n_tok - 1;
  // Q^T in VNNI pairs: tile (iv, ks, part) row kp, column n = the part of q_{16 iv + n}[32 ks + 2 kp + e], e = 0, 1.
  std::memset(qb, 0, size_t(n_qb) * 2 * kTileFloats * sizeof(uint16_t));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* src = a.q + ((t0 + r / g) * a.n_heads + kv_head * g + r % g) * hd;
    const int64_t iv = r / kL, n = r % kL;
    for (int64_t d0 = 0; d0 < hd; d0 += kL) {
      __m256i parts[3];
      split3(_mm512_mul_ps(_mm512_loadu_ps(src + d0), _mm512_set1_ps(a.scale)), parts);
      for (int p = 0; p < 3; ++p) {
        alignas(32) uint32_t pairs[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(pairs), parts[p]);
        uint32_t* tile = reinterpret_cast<uint32_t*>(qb + ((iv * n_ks + d0 / 32) * 3 + p) * 512);
        const int64_t kp0 = (d0 % 32) / 2;
        for (int64_t i = 0; i < 8; ++i) tile[(kp0 + i) * kL + n] = pairs[i];
      }
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
  configure_tiles();
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __mmask16 visible[kL];
  uint32_t pa_rows = 0xFFFF;  // rows of the P tiles that may be nonzero
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t p0 = b * bs;
    if (p0 > last) break;
    const int64_t n = std::min(bs, last + 1 - p0);
    const uint8_t* kb = k.block(a.block_table[b]) + head_at;
    const uint8_t* vb = v.block(a.block_table[b]) + head_at;
    for (int64_t ahead = b == b0 ? 1 : kPrefetchAhead; ahead <= kPrefetchAhead; ++ahead) {
      const int64_t bn = b + ahead;
      if (bn >= b1 || bn * bs > last) break;
      const uint8_t* kn = k.block(a.block_table[bn]) + head_at;
      const uint8_t* vn = v.block(a.block_table[bn]) + head_at;
      for (int64_t j = 0; j < bs; ++j)
        for (int64_t o = 0; o < hd * 2; o += 64) {
          __builtin_prefetch(kn + j * row + o);
          __builtin_prefetch(vn + j * row + o);
        }
    }
    for (int64_t c0 = 0; c0 < n; c0 += kL) {
      const int64_t nc = std::min(kL, n - c0), cpos = p0 + c0;
      // K rows as the A operand: in place when the chunk's 16 rows lie in the block (rows past nc are masked
      // below), else copied with zero rows.
      const uint8_t* kr = kb + c0 * row;
      int64_t k_stride = row;
      if (c0 + kL > bs) {
        for (int64_t j = 0; j < kL; ++j) {
          if (j < nc)
            std::memcpy(kscr + j * hd, kr + j * row, size_t(hd) * 2);
          else
            std::memset(kscr + j * hd, 0, size_t(hd) * 2);
        }
        kr = reinterpret_cast<const uint8_t*>(kscr);
        k_stride = hd * 2;
      }
      // V pairs: tile piece (16 dims) row i and row 8 + i = V[2i][d], V[2i + 1][d] interleaved (zero past nc).
      for (int64_t i = 0; i < kL / 2; ++i) {
        const int64_t j0 = 2 * i, j1 = 2 * i + 1;
        for (int64_t d0 = 0; d0 < hd; d0 += 32) {
          const __m512i x0 = j0 < nc ? _mm512_loadu_si512(vb + (c0 + j0) * row + d0 * 2) : _mm512_setzero_si512();
          const __m512i x1 = j1 < nc ? _mm512_loadu_si512(vb + (c0 + j1) * row + d0 * 2) : _mm512_setzero_si512();
          const __m512i lo = _mm512_permutex2var_epi16(x0, il_lo, x1), hi = _mm512_permutex2var_epi16(x0, il_hi, x1);
          uint16_t* t0p = vp + (d0 / kL) * 512;
          uint16_t* t1p = t0p + 512;
          _mm512_store_si512(t0p + i * 32, lo);
          _mm512_store_si512(t0p + (i + 8) * 32, lo);
          _mm512_store_si512(t1p + i * 32, hi);
          _mm512_store_si512(t1p + (i + 8) * 32, hi);
        }
      }
      // Rows of tokens before cpos see nothing of this chunk: start at the vector holding the first that does.
      const int64_t first_vec = std::max<int64_t>(0, cpos - pos0) * g / kL;
      for (int64_t iv = first_vec; iv < n_vec; ++iv) {
        _tile_zero(0);
        const uint16_t* q3 = qb + iv * n_ks * 3 * 512;
        int64_t ks = 0;
        for (; ks + 2 <= n_ks; ks += 2) {
          TP_AMX_S_SLICE(1, kr + ks * 64, k_stride, q3 + ks * 3 * 512);
          TP_AMX_S_SLICE(5, kr + (ks + 1) * 64, k_stride, q3 + (ks + 1) * 3 * 512);
        }
        if (ks < n_ks) TP_AMX_S_SLICE(1, kr + ks * 64, k_stride, q3 + ks * 3 * 512);
        _tile_stored(0, st, 64);
        __m512 s[kL];  // S^T rows (s[j] = chunk position j's scores of the vector's 16 rows), or S rows
        // The online softmax; each row's weights P split into hi | mid (tile 6) and lo | 0 (tile 7). Two ways that
        // give a row the same bits (the lane kernels' softmax, paged_attention_lanes.h, per row: masked max,
        // c = e^(m_old − m_new), P = e^(S − m_new), L' = L·c + P_0 + … + P_15 in order): vectors of many rows take
        // it across the lanes and transpose P; vectors of few rows (decode: the GQA group) transpose S and take it
        // row by row, for their rows only. A row that sees nothing of the chunk keeps its values either way
        // (c = 1 exactly, P = 0).
        const int64_t r_end = std::min(kL, n_rows - iv * kL);
        alignas(64) float cr[kL];
        uint32_t seen = 0;
        if (r_end >= kLaneRows) {
          for (int64_t j = 0; j < kL; ++j) s[j] = _mm512_load_ps(st + j * kL);
          const __m512i rp = _mm512_loadu_si512(rpos + iv * kL);
          for (int64_t j = 0; j < kL; ++j)
            visible[j] = j < nc ? _mm512_cmp_epi32_mask(rp, _mm512_set1_epi32(int32_t(cpos + j)), _MM_CMPINT_NLT) : 0;
          _mm512_store_ps(cr, chunk_softmax(s, visible, pt, mm + iv * kL, ll + iv * kL));
          __m512 p[kL];
          for (int64_t j = 0; j < kL; ++j) p[j] = _mm512_load_ps(pt + j * kL);
          transpose16(p);
          for (int64_t r = 0; r < kL; ++r) store_p_row(p[r], pa, r);
          pa_rows = 0xFFFF;
          seen = (1u << r_end) - 1;
        } else {
          if (r_end > kGatherRows) {
            for (int64_t j = 0; j < kL; ++j) s[j] = _mm512_load_ps(st + j * kL);
            transpose16(s);
          } else {  // a few rows: gather their columns of S^T
            const __m512i col = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                   _mm512_set1_epi32(int32_t(kL)));
            for (int64_t r = 0; r < r_end; ++r) s[r] = _mm512_i32gather_ps(col, st + r, 4);
          }
          for (int64_t r = 0; r < kL; ++r) {
            const int64_t row = iv * kL + r, rp = pos0 + row / g;
            const int64_t nv = r >= r_end || rp < cpos ? 0 : std::min(nc, rp - cpos + 1);
            if (nv == 0) {
              if (pa_rows >> r & 1) store_p_row(_mm512_setzero_ps(), pa, r);  // else zero already
              pa_rows &= ~(1u << r);
              continue;
            }
            seen |= 1u << r;
            pa_rows |= 1u << r;
            const __mmask16 vis = __mmask16((1u << nv) - 1);
            const __m512 sr = _mm512_mask_blend_ps(vis, neg_inf, s[r]);
            const float m_old = mm[row];
            const float mx = std::max(m_old, _mm512_reduce_max_ps(sr));
            const float sub = mx == -INFINITY ? 0.0f : mx;
            // exp16(0) is exactly 1: the max did not move (the common case once a row has seen a few chunks).
            cr[r] = mx == m_old && m_old != -INFINITY ? 1.0f : _mm512_cvtss_f32(exp16(_mm512_set1_ps(m_old - sub)));
            const __m512 p = _mm512_maskz_mov_ps(vis, exp16(_mm512_sub_ps(sr, _mm512_set1_ps(sub))));
            alignas(64) float pr[kL];
            _mm512_store_ps(pr, p);
            float lsum = ll[row] * cr[r];
            for (int64_t j = 0; j < kL; ++j) lsum += pr[j];
            ll[row] = lsum;
            mm[row] = mx;
            store_p_row(p, pa, r);
          }
        }
        if (seen == 0) continue;
        _tile_loadd(6, pa, 64);
        _tile_loadd(7, pa + 512, 64);
        for (int64_t pc = 0; pc < n_pieces; pc += 4) {
          const int64_t np = std::min<int64_t>(4, n_pieces - pc);
          TP_AMX_PV_PIECE(0, 1, vp + pc * 512, ct);
          if (np > 1) TP_AMX_PV_PIECE(2, 5, vp + (pc + 1) * 512, ct + kTileFloats);
          if (np > 2) TP_AMX_PV_PIECE(3, 1, vp + (pc + 2) * 512, ct + 2 * kTileFloats);
          if (np > 3) TP_AMX_PV_PIECE(4, 5, vp + (pc + 3) * 512, ct + 3 * kTileFloats);
          for (int64_t r = 0; r < r_end; ++r) {
            if (!(seen >> r & 1)) continue;
            const __m512 cv = _mm512_set1_ps(cr[r]);
            float* ar = acc + (iv * kL + r) * hd + pc * kL;
            for (int64_t q = 0; q < np; ++q)
              _mm512_storeu_ps(ar + q * kL, _mm512_fmadd_ps(cv, _mm512_loadu_ps(ar + q * kL),
                                                            _mm512_load_ps(ct + q * kTileFloats + r * kL)));
          }
        }
      }
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
