// Sums of the 16 lanes of many registers at once, shared by the AVX-512 tiles (compiled with the
// AVX-512 -m flags only).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <utility>

namespace g4 {
namespace {

// The folds of SumLanes16. FoldPair: x0's 8-lane partial (lane l: x0[l] + x0[l + 8]) in the low
// half, x1's in the high. FoldQuad over two of those: 128-bit lane L holds the 4-lane partial of
// the L-th of their four registers.
[[gnu::always_inline]] inline __m512 FoldPair(__m512 x0, __m512 x1) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, 0x44), _mm512_shuffle_f32x4(x0, x1, 0xEE));
}
[[gnu::always_inline]] inline __m512 FoldQuad(__m512 a0, __m512 a1) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(3, 1, 3, 1)));
}

// The sums of the lanes of 16 registers in one register, lane SumLane(i) holding x[i]'s: folded
// pairwise (halves, then 128-bit lanes, then within lanes) in 29 instructions, where 16 separate
// reductions take ~160 and cost a third of a 2 x 8 attention scores tile at head dim 512. Each
// sum is the same tree whichever register it sits in: t[l] = x[l] + x[l + 8], u[l] = t[l] +
// t[l + 4], v[l] = u[l] + u[l + 2], v[0] + v[1]. The registers are taken by value: GCC keeps an
// array of 16 whose address a reduction takes on the stack, zeroed before the tile's loop and
// stored after it. Always inlined: called out of line (GCC did so in the bf16 product's 2-row
// tiles), its 16 registers go through the stack each tile.
[[gnu::always_inline]] inline __m512 SumLanes16(__m512 x0, __m512 x1, __m512 x2, __m512 x3,
                                                __m512 x4, __m512 x5, __m512 x6, __m512 x7,
                                                __m512 x8, __m512 x9, __m512 x10, __m512 x11,
                                                __m512 x12, __m512 x13, __m512 x14, __m512 x15) {
  const __m512 b0 = FoldQuad(FoldPair(x0, x1), FoldPair(x2, x3));
  const __m512 b1 = FoldQuad(FoldPair(x4, x5), FoldPair(x6, x7));
  const __m512 b2 = FoldQuad(FoldPair(x8, x9), FoldPair(x10, x11));
  const __m512 b3 = FoldQuad(FoldPair(x12, x13), FoldPair(x14, x15));
  const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(b0, b1), _mm512_unpackhi_ps(b0, b1));
  const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(b2, b3), _mm512_unpackhi_ps(b2, b3));
  return _mm512_add_ps(
      _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t1))),
      _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t1))));
}

// The same over an array of 16.
[[gnu::always_inline]] inline __m512 SumLanes16(const __m512* x) {
  return [&]<size_t... M>(std::index_sequence<M...>) { return SumLanes16(x[M]...); }
  (std::make_index_sequence<16>());
}

// The lane of SumLanes16's result that holds register i's sum.
constexpr int SumLane(int i) { return 4 * (i % 4) + i / 4; }

// out[i] = the sum of the lanes of x[i], for 16 registers.
inline void SumEach16(const __m512* x, float* out) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, SumLanes16(x));
  for (int i = 0; i < 16; ++i) out[i] = lanes[SumLane(i)];
}

}  // namespace
}  // namespace g4
