// The bf16-weight matrix product of the AVX2 table (fp32 FMAs over weights widened 8 at a time);
// the AVX-512 table has its own 16-lane one (avx512/bf16_matmul_avx512.cc). kRegisters: the
// vector registers the tiles may fill.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "base/half.h"
#include "kernels/cpu/tiling.h"
#include "kernels/cpu_kernels.h"

namespace g4 {
// Internal linkage: an ISA file that includes it compiles its own copy, with its own -m flags.
namespace {

inline float HorizontalSum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

inline __m256 LoadBf16(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// R W rows x C x rows, weight-stationary: each 8-column weight vector is widened once and
// multiplied into all C rows' accumulators. Each output is one 8-lane accumulator over its row in
// column order, HorizontalSum, then the columns past the last 8 in order: the same float whatever
// R and C, so decode, a speculative verify pass and a batch give every row the same logits
// (greedy verification picks exactly the tokens plain decoding picks). Summing four outputs at
// once with hadds instead made GCC keep acc[][] in memory: decode 1.5x slower (g4_microbench
// BM_VerifyHead/1/1). kPrefetch: ask for the weights ahead (decode, memory-bound). For a pass of
// several rows it depends on the CPU's hardware prefetcher (SoftwarePrefetchInPasses).
template <int R, int C, bool kPrefetch>
inline void TileBf16(const WeightMatrix& w, int r, const float* x, int i, float* y, int64_t ldy) {
  const int cols = w.cols;
  const uint16_t* wp[R];
  const float* xp[C];
  for (int a = 0; a < R; ++a)
    wp[a] = static_cast<const uint16_t*>(w.data) + static_cast<int64_t>(r + a) * cols;
  for (int c = 0; c < C; ++c) xp[c] = x + static_cast<int64_t>(i + c) * cols;
  __m256 acc[R][C];
  for (int a = 0; a < R; ++a)
    for (int c = 0; c < C; ++c) acc[a][c] = _mm256_setzero_ps();
  int k = 0;
  for (; k + 8 <= cols; k += 8) {
    __m256 wv[R];
    for (int a = 0; a < R; ++a) {
      if (kPrefetch && k % 32 == 0) PrefetchAhead(wp[a] + k);  // once per 64-byte line
      wv[a] = LoadBf16(wp[a] + k);
    }
    for (int c = 0; c < C; ++c) {
      const __m256 xv = _mm256_loadu_ps(xp[c] + k);
      for (int a = 0; a < R; ++a) acc[a][c] = _mm256_fmadd_ps(wv[a], xv, acc[a][c]);
    }
  }
  for (int a = 0; a < R; ++a)
    for (int c = 0; c < C; ++c) {
      float s = HorizontalSum(acc[a][c]);
      for (int kk = k; kk < cols; ++kk) s += Bf16ToF32(wp[a][kk]) * xp[c][kk];
      y[(i + c) * ldy + r + a] = s;
    }
}

// W rows [r0, r1) x the C x rows from row i in one pass, prefetched as Bf16PassPrefetches says.
// R: as many W rows (up to 4) as leave registers for R x C accumulators, R weight vectors and one
// x vector.
template <int kRegisters, int C, bool kPrefetch>
inline void Bf16Pass(const WeightMatrix& w, int r0, int r1, const float* x, int i, float* y,
                     int64_t ldy) {
  constexpr int R = std::clamp((kRegisters - 1) / (C + 1), 1, 4);
  int r = r0;
  for (; r + R <= r1; r += R) TileBf16<R, C, kPrefetch>(w, r, x, i, y, ldy);
  for (; r < r1; ++r) TileBf16<1, C, kPrefetch>(w, r, x, i, y, ldy);
}

// y[i * ldy + r] = W row r . x row i (CpuKernels::matmul_bf16). Decode and a speculative verify
// pass (n <= 8) read each weight once, in tasks sized like decode's; more rows (prefill) take 4 x 2
// tiles over the task's W rows, which the caller sizes to stay in L2 (kernels/ops.cc).
template <int kRegisters, bool kPrefetchBatch>
void MatMulBf16(const WeightMatrix& w, int r0, int r1, const float* x, int n, float* y,
                int64_t ldy) {
  const bool short_rows = w.cols <= kBf16ShortRowCols;
  if (WithPassRows<kBf16PassRows>(n, [&]<int C>() {
        // One pass compiled per C where row length does not change the choice (C > 1).
        if (short_rows)
          Bf16Pass<kRegisters, C, Bf16PassPrefetches(C, true, kPrefetchBatch)>(w, r0, r1, x, 0, y,
                                                                               ldy);
        else
          Bf16Pass<kRegisters, C, Bf16PassPrefetches(C, false, kPrefetchBatch)>(w, r0, r1, x, 0, y,
                                                                                ldy);
      }))
    return;
  auto tile = [&]<int R, int C>(int r, int i) { TileBf16<R, C, C == 1>(w, r, x, i, y, ldy); };
  WalkTiles<4, 2>(r0, r1, n, tile);
}

}  // namespace
}  // namespace g4
