// Register-tile walk shared by the SIMD matrix products.
#pragma once

namespace g4 {

// Decode streams each weight row once, and the hardware prefetcher alone leaves a core at about
// half its bandwidth on these rows (measured, bench/kernels_bench.cc BM_Decode q4 on one thread:
// 6-7 GB/s without, 12-14 GB/s with 12 KiB; 3 KiB and 24-48 KiB did worse). Matrix-vector tiles
// ask for the bytes this far ahead of what they read; rows of a tile are adjacent in memory, so
// the address runs into the next tiles.
constexpr int kPrefetchBytes = 12 * 1024;
inline void PrefetchAhead(const void* p) {
  __builtin_prefetch(static_cast<const char*>(p) + kPrefetchBytes, 0, 3);
}

// Walks W rows [r0, r1) x activation rows [0, n) in R x C tiles (smaller tiles at the edges).
// x rows outer, W rows inner: a task's W rows (a few tens of KiB) stay in L1/L2 while the x
// tiles pass over them.
template <int R, int C, typename Tile>
inline void WalkTiles(int r0, int r1, int n, Tile&& tile) {
  int i = 0;
  for (; i + C <= n; i += C) {
    int r = r0;
    for (; r + R <= r1; r += R) tile.template operator()<R, C>(r, i);
    for (; r < r1; ++r) tile.template operator()<1, C>(r, i);
  }
  for (; i < n; ++i) {
    int r = r0;
    for (; r + R <= r1; r += R) tile.template operator()<R, 1>(r, i);
    for (; r < r1; ++r) tile.template operator()<1, 1>(r, i);
  }
}

}  // namespace g4
