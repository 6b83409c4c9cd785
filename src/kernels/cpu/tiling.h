// Register-tile walk shared by the SIMD matrix products.
#pragma once

#include <cstdint>

#include "kernels/cpu_kernels.h"

namespace g4 {

// Decode streams each weight row once, and the hardware prefetcher alone leaves a core at about
// half its bandwidth on these rows (measured, bench/kernels_bench.cc BM_Decode q4 on one thread:
// 6-7 GB/s without, 12-14 GB/s with 12 KiB; 3 KiB and 24-48 KiB did worse). Matrix-vector tiles
// ask for the bytes this far ahead of what they read; rows of a tile are adjacent in memory, so
// the address runs into the next tiles.
constexpr int kPrefetchBytes = 12 * 1024;
// Row-group tiles read one stream (all 16 rows of a group are adjacent): 4 KiB ahead streamed a
// 600 MB q4 matrix-vector on 2 threads at 30.1 GB/s against 28.0 with 12 KiB (q8 30.2 / 29.0; the
// distances alternated in one process, the plain read of the same VM 29.3).
constexpr int kGroupPrefetchBytes = 4 * 1024;
// Always inlined: GCC may leave a call out of line, see a function with no visible effect and drop
// it as dead (a first build of AskAhead lost the AVX-512 pair tiles' prefetches that way).
template <int kDistance = kPrefetchBytes, int kLocality = 3>
[[gnu::always_inline]] inline void PrefetchAhead(const void* p) {
  __builtin_prefetch(static_cast<const char*>(p) + kDistance, 0, kLocality);
}
// The AVX-512 bf16 passes (1-8 x rows) on CPUs whose passes do not prefetch into L1
// (SoftwarePrefetchInPasses) ask for their weights this far ahead into L2 (locality 2,
// prefetcht1), all but one x row over short rows. On a Zen 4 core, one thread: BM_VerifyHead (the
// default model's LM head, 262,144 x 128) read two x rows in 2.0-2.4 ms against 2.8-3.5 without,
// three in 2.5-2.8 against 3.3-3.9; one row no faster, and plain decoding of the default model
// lost (g4 bench, 6 rounds alternated: 311-401 tok/s against 372-418 before); BM_Decode
// (1536-column rows) one row in 28 ms against 32-34 with kPrefetchBytes into L1, two in 27-28
// against 35-38 without. 8-32 KiB were close; 1-4 KiB no better than none; into L1 (locality 3, at
// 2-12 KiB) or non-temporal (0) over the short rows 1.4-1.6x slower than none (docs/performance.md
// "bf16 passes prefetch into L2").
constexpr int kL2PrefetchBytes = 16 * 1024;

// How a tile of a memory-bound pass asks for its weights ahead, once per 64-byte line: not at all,
// into L1 kL1Distance ahead (kPrefetchBytes for row-major rows, kGroupPrefetchBytes for row
// groups), or into L2 kL2PrefetchBytes ahead. Which one a pass takes is each table's rule
// (PassAhead for the AVX-512 bf16 passes, QuantizedPassAhead for its q8/q4 passes).
enum class Ahead { kNone, kL1, kL2 };
template <Ahead kAhead, int kL1Distance = kPrefetchBytes>
[[gnu::always_inline]] inline void AskAhead(const void* p) {
  if constexpr (kAhead == Ahead::kL1) PrefetchAhead<kL1Distance, 3>(p);
  if constexpr (kAhead == Ahead::kL2) PrefetchAhead<kL2PrefetchBytes, 2>(p);
}

// Where activation rows i..i+C-1 of a quantized batch start: their int8 values, block scales and
// block correction terms (the set-up every C-row tile needs).
template <int C>
struct ActivationRows {
  const int8_t* q[C];
  const float* scale[C];
  const float* corr[C];
  ActivationRows(const QuantizedRows& x, int i) {
    const int blocks = x.cols / kQuantBlock;
    for (int c = 0; c < C; ++c) {
      q[c] = x.q + static_cast<int64_t>(i + c) * x.cols;
      scale[c] = x.scale + static_cast<int64_t>(i + c) * blocks;
      corr[c] = x.corr + static_cast<int64_t>(i + c) * blocks;
    }
  }
};

// Up to this many x rows take one pass over a bf16 W in the AVX2 and AVX-512 float products
// (CpuKernels::bf16_pass_rows): decode and speculative verify passes read each weight once.
constexpr int kBf16PassRows = 8;
// bf16 W rows of at most this many columns are short (the default model's LM head has 128): one
// x row over them is not worth prefetching into L1 for, except where passes of several rows do
// (SoftwarePrefetchInPasses); the AVX-512 passes take smaller tiles over them. Measured at 128
// and 1536 columns only (docs/performance.md "One-row bf16 passes on Zen 4"): 512 is a guess.
constexpr int kBf16ShortRowCols = 512;

// Whether a bf16 pass of C x rows (C <= kBf16PassRows) of the AVX2 table asks for its weights
// ahead: decode's one row over long W rows always (memory-bound), any pass where passes prefetch
// (`prefetch_batch`: SoftwarePrefetchInPasses). The AVX-512 table has its own rule
// (PassAhead: into L2 where not, kL2PrefetchBytes); the AVX2 passes were not measured with that.
constexpr bool Bf16PassPrefetches(int c, bool short_rows, bool prefetch_batch) {
  return prefetch_batch || (c == 1 && !short_rows);
}

// Calls pass.template operator()<C>() with C = n for 1 <= n <= kMaxRows (a pass compiled for
// each row count) and returns true; false for other n.
template <int kMaxRows, int C = 1, typename Pass>
inline bool WithPassRows(int n, Pass&& pass) {
  if constexpr (C > kMaxRows) {
    return false;
  } else {
    if (n == C) {
      pass.template operator()<C>();
      return true;
    }
    return WithPassRows<kMaxRows, C + 1>(n, pass);
  }
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
