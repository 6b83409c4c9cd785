// The q8/q4 matrix-product driver shared by the SIMD kernel files: which tiles cover
// W rows [r0, r1) x activation rows [0, x.n), in which order. Each ISA file instantiates it with
// its own tile kernels, so the tiles inline into a driver compiled with that file's -m flags and
// -O3 (a header template, not a function in a file of its own, keeps that).
#pragma once

#include <cstdint>

#include "kernels/cpu/tiling.h"
#include "kernels/cpu_kernels.h"

namespace g4 {

// What a kernel file supplies, as static members of a struct `Tiles`:
//   template <int R, int C> static void RowTile(w, r, x, i, y, ldy);  // row-major layout
//   template <int C> static void RowGroupTile(w, r, x, i, y, ldy);    // kRowGroups16 layout
//   static constexpr int kTileRows, kTileCols;  // row-major R x C tile for x.n > 1
//   static constexpr int kGroupCols;  // widest row-group tile; the rows left take one narrower
// and optionally, for C in [kPairMinCols, kPairMaxCols], two row groups (32 rows) per call:
//   static constexpr int kPairMinCols, kPairMaxCols;
//   template <int C> static void RowGroupPairTile(w, r, x, i, y, ldy);
// All take (const WeightMatrix&, int, const QuantizedRows&, int, float*, int64_t).

// Activation rows [i, i + C) over W's row groups [r0, r1): two groups per tile where the kernel
// file has a pair tile for C rows. Always inlined: the driver stays one flat function, as the
// hand-written twins were (left to itself, GCC inlined the avx2 group tiles differently from
// them).
template <typename Tiles, int C>
[[gnu::always_inline]] inline void RowGroupPass(const WeightMatrix& w, int r0, int r1,
                                                const QuantizedRows& x, int i, float* y,
                                                int64_t ldy) {
  constexpr bool kPairs = [] {
    if constexpr (requires { Tiles::kPairMinCols; })
      return C >= Tiles::kPairMinCols && C <= Tiles::kPairMaxCols;
    return false;
  }();
  int r = r0;
  if constexpr (kPairs)
    for (; r + 2 * kRowGroup <= r1; r += 2 * kRowGroup)
      Tiles::template RowGroupPairTile<C>(w, r, x, i, y, ldy);
  for (; r < r1; r += kRowGroup) Tiles::template RowGroupTile<C>(w, r, x, i, y, ldy);
}

// y[i * ldy + r] = W row r . x row i for r in [r0, r1), all x rows; the CpuKernels::matmul_q8 /
// matmul_q4 signature.
template <typename Tiles>
void MatMulQuantized(const WeightMatrix& w, int r0, int r1, const QuantizedRows& x, float* y,
                     int64_t ldy) {
  if (w.layout == WeightLayout::kRowGroups16) {
    // x rows outer, groups inner: a task's groups stay in L2 while the x tiles pass over them.
    // The rows left after the widest tiles take one pass of exactly their number, which reads
    // the weights once (3 rows as 2 + 1 would read them twice).
    constexpr int kCols = Tiles::kGroupCols;
    int i = 0;
    for (; i + kCols <= x.n; i += kCols) RowGroupPass<Tiles, kCols>(w, r0, r1, x, i, y, ldy);
    WithPassRows<kCols - 1>(x.n - i,
                            [&]<int C>() { RowGroupPass<Tiles, C>(w, r0, r1, x, i, y, ldy); });
    return;
  }
  auto tile = [&]<int R, int C>(int r, int i) {
    Tiles::template RowTile<R, C>(w, r, x, i, y, ldy);
  };
  // Matrix-vector (decode): 4 rows per tile, one x row.
  if (x.n == 1) {
    WalkTiles<4, 1>(r0, r1, x.n, tile);
  } else {
    WalkTiles<Tiles::kTileRows, Tiles::kTileCols>(r0, r1, x.n, tile);
  }
}

}  // namespace g4
