// AVX-512 (F, BW, VL) + VNNI versions of the q8/q4 matrix products (with the attention tiles and
// the bf16 product of this folder); the rest of the table is the AVX2 one. vpdpbusd does 64 u8 x
// s8 products with their 4-way sums in one instruction, where
// AVX2 needs maddubs + madd on half as many. Compiled with the matching -m flags and only called
// after a CPUID check (kernels/dispatch.cc).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/avx512/attention_avx512.h"
#include "kernels/cpu/avx512/bf16_matmul_avx512.h"
#include "kernels/cpu/matmul_driver.h"
#include "kernels/cpu/tiling.h"
#include "kernels/cpu_kernels.h"

namespace g4 {
namespace {

inline __mmask16 FirstLanes(int m) {
  return m >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << m) - 1);
}

// Decode's one x row streams the weights (matrix-vector): its tiles ask for them into L1 ahead.
// Tiles of several rows are left to the pass (MatMulPrefetchingFirstTile, GroupPairTile).
constexpr Ahead OneRowAhead(int c) { return c == 1 ? Ahead::kL1 : Ahead::kNone; }

// A 512-bit register of activation bytes: block `b0` in the low half, block `b1` in the high.
inline __m512i ActivationPair(const int8_t* q, int b0, int b1) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b0 * kQuantBlock));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b1 * kQuantBlock));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// The products are summed per block as int32 (8 lanes per 32-byte block), then scaled by
// d_w * d_x of their block. Scales are computed 16 blocks at a time into `sc` and picked per lane
// with a permute: lanes 0-7 take block `first`, lanes 8-15 block `first + second_offset`.
//
// q4 (layout in weight_matrix.h): 64 bytes of a row are blocks b (low nibbles, bytes 0-31),
// b+2 (low, 32-63), b+1 and b+3 (high nibbles). Unsigned nibbles go straight into vpdpbusd; the
// -8 offset is the activation term corr, added per 16 blocks as d_w * corr.
template <int R, int C>
inline void TileQ4(const WeightMatrix& w, int r, const QuantizedRows& x, int i, float* y,
                   int64_t ldy) {
  constexpr Ahead kAhead = OneRowAhead(C);
  const int nb = w.blocks();
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  const __m512i pair_lanes = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
  const __m512i one = _mm512_set1_epi32(1);
  const uint8_t* wq[R];
  const uint16_t* wd[R];
  const ActivationRows<C> act(x, i);
  for (int a = 0; a < R; ++a) {
    wq[a] = w.quants(r + a);
    wd[a] = w.scales(r + a);
  }
  __m512 acc[R][C];
  for (int a = 0; a < R; ++a)
    for (int c = 0; c < C; ++c) acc[a][c] = _mm512_setzero_ps();
  alignas(64) float sc[R][C][16];
  for (int g = 0; g < nb; g += 16) {
    const int m = std::min(16, nb - g);  // even: cols % 64 == 0
    const __mmask16 k = FirstLanes(m);
    __m512 dx[C], cx[C];
    for (int c = 0; c < C; ++c) {
      dx[c] = _mm512_maskz_loadu_ps(k, act.scale[c] + g);
      cx[c] = _mm512_maskz_loadu_ps(k, act.corr[c] + g);
    }
    for (int a = 0; a < R; ++a) {
      AskAhead<kAhead>(wd[a] + g);
      const __m512 dw = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, wd[a] + g));
      for (int c = 0; c < C; ++c) {
        _mm512_store_ps(sc[a][c], _mm512_mul_ps(dw, dx[c]));
        acc[a][c] = _mm512_fmadd_ps(dw, cx[c], acc[a][c]);
      }
    }
    int j = 0;
    for (; j + 4 <= m; j += 4) {
      const __m512i idx_lo = _mm512_add_epi32(pair_lanes, _mm512_set1_epi32(j));
      const __m512i idx_hi = _mm512_add_epi32(idx_lo, one);
      __m512i lo[R], hi[R];
      for (int a = 0; a < R; ++a) {
        AskAhead<kAhead>(wq[a] + (g + j) * (kQuantBlock / 2));
        const __m512i v = _mm512_loadu_si512(wq[a] + (g + j) * (kQuantBlock / 2));
        lo[a] = _mm512_and_si512(v, low_nibbles);
        hi[a] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low_nibbles);
      }
      for (int c = 0; c < C; ++c) {
        const __m512i x_lo = ActivationPair(act.q[c], g + j, g + j + 2);
        const __m512i x_hi = ActivationPair(act.q[c], g + j + 1, g + j + 3);
        for (int a = 0; a < R; ++a) {
          const __m512i p_lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[a], x_lo);
          const __m512i p_hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[a], x_hi);
          const __m512 s = _mm512_load_ps(sc[a][c]);
          acc[a][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p_lo), _mm512_permutexvar_ps(idx_lo, s),
                                      acc[a][c]);
          acc[a][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p_hi), _mm512_permutexvar_ps(idx_hi, s),
                                      acc[a][c]);
        }
      }
    }
    if (j < m) {  // two blocks left: one 32-byte chunk, blocks j (low nibbles) and j+1 (high)
      const __m256i low16 = _mm256_set1_epi8(0x0f);
      const __m512i idx = _mm512_setr_epi32(j, j, j, j, j, j, j, j, j + 1, j + 1, j + 1, j + 1,
                                            j + 1, j + 1, j + 1, j + 1);
      for (int a = 0; a < R; ++a) {
        const __m256i v = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(wq[a] + (g + j) * (kQuantBlock / 2)));
        const __m512i nib = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(v, low16)),
                                               _mm256_and_si256(_mm256_srli_epi16(v, 4), low16), 1);
        for (int c = 0; c < C; ++c) {
          const __m512i xv = ActivationPair(act.q[c], g + j, g + j + 1);
          const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), nib, xv);
          acc[a][c] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
                              _mm512_permutexvar_ps(idx, _mm512_load_ps(sc[a][c])), acc[a][c]);
        }
      }
    }
  }
  for (int a = 0; a < R; ++a)
    for (int c = 0; c < C; ++c) y[(i + c) * ldy + r + a] = _mm512_reduce_add_ps(acc[a][c]);
}

// q8: int8 weights made unsigned (w + 128, an XOR of the sign bit) for vpdpbusd; the +128
// costs 128 * sum(x) per block, which is 16 * corr (corr = -8 d_x sum(q_x)), added as d_w * 16
// corr.
template <int R, int C>
inline void TileQ8(const WeightMatrix& w, int r, const QuantizedRows& x, int i, float* y,
                   int64_t ldy) {
  constexpr Ahead kAhead = OneRowAhead(C);
  const int nb = w.blocks();
  const __m512i sign_bit = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i pair_lanes = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512 sixteen = _mm512_set1_ps(16.0f);
  const int8_t* wq[R];
  const uint16_t* wd[R];
  const ActivationRows<C> act(x, i);
  for (int a = 0; a < R; ++a) {
    wq[a] = reinterpret_cast<const int8_t*>(w.quants(r + a));
    wd[a] = w.scales(r + a);
  }
  __m512 acc[R][C];
  for (int a = 0; a < R; ++a)
    for (int c = 0; c < C; ++c) acc[a][c] = _mm512_setzero_ps();
  alignas(64) float sc[R][C][16];
  for (int g = 0; g < nb; g += 16) {
    const int m = std::min(16, nb - g);
    const __mmask16 k = FirstLanes(m);
    __m512 dx[C], cx[C];
    for (int c = 0; c < C; ++c) {
      dx[c] = _mm512_maskz_loadu_ps(k, act.scale[c] + g);
      cx[c] = _mm512_mul_ps(sixteen, _mm512_maskz_loadu_ps(k, act.corr[c] + g));
    }
    for (int a = 0; a < R; ++a) {
      AskAhead<kAhead>(wd[a] + g);
      const __m512 dw = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, wd[a] + g));
      for (int c = 0; c < C; ++c) {
        _mm512_store_ps(sc[a][c], _mm512_mul_ps(dw, dx[c]));
        acc[a][c] = _mm512_fmadd_ps(dw, cx[c], acc[a][c]);
      }
    }
    int j = 0;
    for (; j + 2 <= m; j += 2) {
      const __m512i idx = _mm512_add_epi32(pair_lanes, _mm512_set1_epi32(j));
      __m512i wu[R];
      for (int a = 0; a < R; ++a) {
        AskAhead<kAhead>(wq[a] + (g + j) * kQuantBlock);
        wu[a] = _mm512_xor_si512(_mm512_loadu_si512(wq[a] + (g + j) * kQuantBlock), sign_bit);
      }
      for (int c = 0; c < C; ++c) {
        const __m512i xv = _mm512_loadu_si512(act.q[c] + (g + j) * kQuantBlock);
        for (int a = 0; a < R; ++a) {
          const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wu[a], xv);
          acc[a][c] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
                              _mm512_permutexvar_ps(idx, _mm512_load_ps(sc[a][c])), acc[a][c]);
        }
      }
    }
    if (j < m) {  // one block left: the low 8 lanes only
      const __mmask64 half = 0xffffffffull;
      const __m512i idx = _mm512_set1_epi32(j);
      for (int a = 0; a < R; ++a) {
        const __m512i wu = _mm512_xor_si512(
            _mm512_maskz_loadu_epi8(half, wq[a] + (g + j) * kQuantBlock), sign_bit);
        for (int c = 0; c < C; ++c) {
          const __m512i xv = _mm512_maskz_loadu_epi8(half, act.q[c] + (g + j) * kQuantBlock);
          const __m512i p =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), wu, xv);  // high lanes: 128 * 0
          acc[a][c] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
                              _mm512_permutexvar_ps(idx, _mm512_load_ps(sc[a][c])), acc[a][c]);
        }
      }
    }
  }
  for (int a = 0; a < R; ++a)
    for (int c = 0; c < C; ++c) y[(i + c) * ldy + r + a] = _mm512_reduce_add_ps(acc[a][c]);
}

// Activation bytes p[0..3] in every 32-bit lane, straight from memory (vpbroadcastd m32, or the
// {1to16} operand of vpdpbusd). Copying a block's 8 dwords into an array first made GCC load
// them as 64-bit pairs and broadcast from general registers (a shift and a domain crossing per
// dword): the 8-row tile ran at ~25% of the vpdpbusd peak (bench/gemm_peak_bench.cc).
inline __m512i BroadcastDword(const int8_t* p) {
  int32_t d;
  std::memcpy(&d, p, sizeof d);
  return _mm512_set1_epi32(d);
}

// Row groups (layout in weight_matrix.h): vector s of a block holds columns 4s..4s+3 of each of
// the 16 rows, so 8 vpdpbusd against broadcast activation dwords leave each row's whole-block
// sum in its own lane. Per block and x row: 8 products, one convert, two FMAs for 16 rows x 32
// columns (the row-major tiles need a convert, a permute and an FMA per 2 blocks of one row).
// Both formats store unsigned values (q4 nibbles q + 8, q8 q + 128); the offset is the
// activation term corr (-8 d_x sum(q_x)), times 16 for q8.
template <bool kIsQ4, int C>
inline void GroupTile(const WeightMatrix& w, int r, const QuantizedRows& x, int i, float* y,
                      int64_t ldy) {
  constexpr Ahead kAhead = OneRowAhead(C);
  constexpr int kBlockBytes = kIsQ4 ? 256 : 512;
  const int nb = w.blocks();
  const uint8_t* wq = w.quants(r);
  const uint16_t* wd = w.scales(r);
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  const float corr_scale = kIsQ4 ? 1.0f : 16.0f;
  const ActivationRows<C> act(x, i);
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const uint8_t* p = wq + static_cast<size_t>(b) * kBlockBytes;
    __m512i ws[8];
    for (int v = 0; v < kBlockBytes / 64; ++v) {
      AskAhead<kAhead, kGroupPrefetchBytes>(p + 64 * v);
      const __m512i bytes = _mm512_loadu_si512(p + 64 * v);
      if constexpr (kIsQ4) {
        ws[v] = _mm512_and_si512(bytes, low_nibbles);
        ws[v + 4] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low_nibbles);
      } else {
        ws[v] = bytes;
      }
    }
    if (b % 2 == 0)
      AskAhead<kAhead, kGroupPrefetchBytes>(wd + b * kRowGroup);  // 64 bytes: 2 blocks' scales
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wd + b * kRowGroup)));
    for (int c = 0; c < C; ++c) {
      const int8_t* a = act.q[c] + b * kQuantBlock;
      // Two chains of 4: half the latency before the conversion.
      __m512i sum0 = _mm512_setzero_si512(), sum1 = _mm512_setzero_si512();
      for (int v = 0; v < 4; ++v) {
        sum0 = _mm512_dpbusd_epi32(sum0, ws[v], BroadcastDword(a + 4 * v));
        sum1 = _mm512_dpbusd_epi32(sum1, ws[v + 4], BroadcastDword(a + 4 * (v + 4)));
      }
      const __m512i sum = _mm512_add_epi32(sum0, sum1);
      const __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(act.scale[c][b]),
                                       _mm512_set1_ps(corr_scale * act.corr[c][b]));
      acc[c] = _mm512_fmadd_ps(dw, f, acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + (i + c) * ldy + r, acc[c]);
}

// Two row groups (32 rows) at once for C activation rows: each activation broadcast feeds two
// weight vectors, so per block and activation row 16 vpdpbusd take 8 broadcasts (GroupTile: 8
// and 8). The integer sums and the float steps per lane are those of GroupTile, in the same
// order: the results are bit-identical. kAhead: how the weights are asked for ahead
// (MatMulPrefetchingFirstTile; into L1 at kGroupPrefetchBytes, the row groups' distance).
template <bool kIsQ4, Ahead kAhead, int C>
inline void GroupPairTile(const WeightMatrix& w, int r, const QuantizedRows& x, int i, float* y,
                          int64_t ldy) {
  constexpr int kBlockBytes = kIsQ4 ? 256 : 512;
  const int nb = w.blocks();
  const uint8_t* wq[2] = {w.quants(r), w.quants(r + kRowGroup)};
  const uint16_t* wd[2] = {w.scales(r), w.scales(r + kRowGroup)};
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  const float corr_scale = kIsQ4 ? 1.0f : 16.0f;
  const ActivationRows<C> act(x, i);
  __m512 acc[2][C];
  for (int g = 0; g < 2; ++g)
    for (int c = 0; c < C; ++c) acc[g][c] = _mm512_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    __m512i sum[2][C];
    for (int g = 0; g < 2; ++g)
      for (int c = 0; c < C; ++c) sum[g][c] = _mm512_setzero_si512();
    for (int v = 0; v < kBlockBytes / 64; ++v) {
      __m512i lo[2], hi[2];
      for (int g = 0; g < 2; ++g) {
        const uint8_t* bytes_at = wq[g] + static_cast<size_t>(b) * kBlockBytes + 64 * v;
        AskAhead<kAhead, kGroupPrefetchBytes>(bytes_at);
        const __m512i bytes = _mm512_loadu_si512(bytes_at);
        if constexpr (kIsQ4) {
          lo[g] = _mm512_and_si512(bytes, low_nibbles);
          hi[g] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low_nibbles);
        } else {
          lo[g] = bytes;
        }
      }
      for (int c = 0; c < C; ++c) {
        const int8_t* a = act.q[c] + b * kQuantBlock;
        const __m512i xl = BroadcastDword(a + 4 * v);
        for (int g = 0; g < 2; ++g) sum[g][c] = _mm512_dpbusd_epi32(sum[g][c], lo[g], xl);
        if constexpr (kIsQ4) {
          const __m512i xh = BroadcastDword(a + 4 * (v + 4));
          for (int g = 0; g < 2; ++g) sum[g][c] = _mm512_dpbusd_epi32(sum[g][c], hi[g], xh);
        }
      }
    }
    for (int g = 0; g < 2; ++g) {
      if (b % 2 == 0) AskAhead<kAhead, kGroupPrefetchBytes>(wd[g] + b * kRowGroup);
      const __m512 dw = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wd[g] + b * kRowGroup)));
      for (int c = 0; c < C; ++c) {
        const __m512 f =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[g][c]), _mm512_set1_ps(act.scale[c][b]),
                            _mm512_set1_ps(corr_scale * act.corr[c][b]));
        acc[g][c] = _mm512_fmadd_ps(dw, f, acc[g][c]);
      }
    }
  }
  for (int g = 0; g < 2; ++g)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + (i + c) * ldy + r + g * kRowGroup, acc[g][c]);
}

// The tiles for the shared driver (kernels/cpu/matmul_driver.h): row groups 4 x rows at a time
// (the rows left in one narrower tile), row-major tiles 4 x 4. The pair tiles ask for their
// weights ahead as kPairAhead says.
template <bool kIsQ4, Ahead kPairAhead = Ahead::kNone>
struct Tiles {
  static constexpr int kTileRows = 4, kTileCols = 4, kGroupCols = 4;
  template <int R, int C>
  static void RowTile(const WeightMatrix& w, int r, const QuantizedRows& x, int i, float* y,
                      int64_t ldy) {
    if constexpr (kIsQ4) {
      TileQ4<R, C>(w, r, x, i, y, ldy);
    } else {
      TileQ8<R, C>(w, r, x, i, y, ldy);
    }
  }
  template <int C>
  static void RowGroupTile(const WeightMatrix& w, int r, const QuantizedRows& x, int i, float* y,
                           int64_t ldy) {
    GroupTile<kIsQ4, C>(w, r, x, i, y, ldy);
  }
  // Two groups at once for 2-4 activation rows (registers: 2 x C sums and accumulators).
  static constexpr int kPairMinCols = 2, kPairMaxCols = 4;
  template <int C>
  static void RowGroupPairTile(const WeightMatrix& w, int r, const QuantizedRows& x, int i,
                               float* y, int64_t ldy) {
    GroupPairTile<kIsQ4, kPairAhead, C>(w, r, x, i, y, ldy);
  }
};

// How the first tile of a pass of 2-16 x rows asks for its weights ahead (QuantizedPassAhead).
// On Zen 5 (SoftwarePrefetchInPasses) the hardware prefetcher falls behind a short pass of several
// activation rows, as a verify pass or batched streams run: into L1 as decode does. Elsewhere (Zen
// 4, Intel) q4 asks into L2 (kL2PrefetchBytes, as the bf16 passes do, where into L1 made them
// slower): BM_Decode q4, 600 MB, one thread on a Zen 4 core, two x rows in 30.9-31.4 ms against
// 38.2-40.4 without, three in 28.8-30.8 against 41.4-42.2 (one row, which prefetches as before,
// 22.6-25.4). The same for q8 was no faster (two rows 30.7-34.4 against 30.5-31.2, three
// 35.5-38.9 against 32.6-33.5; into L1 as on Zen 5 slower still), so q8's passes ask for nothing
// there.
constexpr Ahead QuantizedPassAhead(bool is_q4, bool prefetch_batch) {
  if (prefetch_batch) return Ahead::kL1;
  return is_q4 ? Ahead::kL2 : Ahead::kNone;
}

// A task's first tile of x rows is the one that streams its weights from memory (~128 KiB,
// PrefillRowsPerTask in kernels/ops.cc): it asks for them ahead as kAhead says; the later tiles
// find those weights in L2, where prefetches only take issue slots. Past kPrefetchedPassRows
// (prefill) the first tile is too small a share of the pass to gain (BM_Prefill q8 at 64 rows ran
// 6-11% slower with it on Zen 5). The split leaves each x row in the tile it had, so the outputs
// are the same bits.
constexpr int kPrefetchedPassRows = 16;
template <bool kIsQ4, Ahead kAhead>
void MatMulPrefetchingFirstTile(const WeightMatrix& w, int r0, int r1, const QuantizedRows& x,
                                float* y, int64_t ldy) {
  using Prefetching = Tiles<kIsQ4, kAhead>;
  using Plain = Tiles<kIsQ4>;
  constexpr int kFirst = Prefetching::kGroupCols;
  if (kAhead == Ahead::kNone || x.n > kPrefetchedPassRows) {
    MatMulQuantized<Plain>(w, r0, r1, x, y, ldy);
  } else if (w.layout != WeightLayout::kRowGroups16 || x.n <= kFirst) {
    MatMulQuantized<Prefetching>(w, r0, r1, x, y, ldy);
  } else {
    MatMulQuantized<Prefetching>(w, r0, r1, x.Rows(0, kFirst), y, ldy);
    MatMulQuantized<Plain>(w, r0, r1, x.Rows(kFirst, x.n), y + kFirst * ldy, ldy);
  }
}

}  // namespace

const CpuKernels* Avx512Kernels() {
  static const CpuKernels k = [] {
    CpuKernels t = *Avx2Kernels();
    t.name = "avx512";
    const bool prefetch = SoftwarePrefetchInPasses();
    t.matmul_q8 = prefetch ? MatMulPrefetchingFirstTile<false, QuantizedPassAhead(false, true)>
                           : MatMulPrefetchingFirstTile<false, QuantizedPassAhead(false, false)>;
    t.matmul_q4 = prefetch ? MatMulPrefetchingFirstTile<true, QuantizedPassAhead(true, true)>
                           : MatMulPrefetchingFirstTile<true, QuantizedPassAhead(true, false)>;
    UseAvx512Bf16MatMul(&t, prefetch);
    t.q8_layout = WeightLayout::kRowGroups16;
    t.q4_layout = WeightLayout::kRowGroups16;
    UseAvx512Attention(&t);
    return t;
  }();
  return &k;
}

}  // namespace g4
