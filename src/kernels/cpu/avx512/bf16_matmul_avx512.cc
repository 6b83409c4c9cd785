// The bf16-weight matrix product with 16-lane registers: fp32 FMAs over weights widened 16 at a
// time, each tile's outputs summed in one register (lane_sums.h) and stored together. The 8-lane
// AVX2 tile (cpu/bf16_matmul.h) takes twice the instructions per weight and, at the 128 columns
// of the default model's LM head, one reduction per output: BM_VerifyHead (262,144 x 128) put
// one row at 2.70 ms with it and 1.86 ms with this on one Zen 5 core (medians of 5, alternated;
// docs/performance.md). Compiled with the AVX-512 -m flags and only called after a CPUID check
// (kernels/dispatch.cc).
#include "kernels/cpu/avx512/bf16_matmul_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "base/half.h"
#include "kernels/cpu/avx512/lane_sums.h"
#include "kernels/cpu/tiling.h"

namespace g4 {
namespace {

// Columns k..k+15 of the tile's rows into its R x C accumulators.
template <int R, int C, Ahead kAhead>
[[gnu::always_inline]] inline void Step(const uint16_t* const* wp, const float* const* xp, int k,
                                        __m512* acc) {
  __m512 xv[C];
  for (int c = 0; c < C; ++c) {
    xv[c] = _mm512_loadu_ps(xp[c] + k);
    asm("" : "+v"(xv[c]));  // one load per x row and step, not one per FMA (GCC folds it)
  }
  for (int a = 0; a < R; ++a) {
    if (k % 32 == 0) AskAhead<kAhead>(wp[a] + k);
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp[a] + k));
    const __m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    for (int c = 0; c < C; ++c) acc[a * C + c] = _mm512_fmadd_ps(wv, xv[c], acc[a * C + c]);
  }
}

// R W rows x C x rows. Each output is one 16-lane accumulator over its row in column order, the
// lane sum of lane_sums.h, then the columns past the last 16: the same float whatever R and C, so
// decode, a speculative verify pass and a batch give every row the same logits (greedy verification
// picks exactly the tokens plain decoding picks). Each widened weight vector goes straight into its
// C FMAs; the step's x vectors stay in registers. kAhead: how the weights are asked for ahead
// (memory-bound passes). Always inlined into its pass: GCC called some tiles (4 x 3) out of line, a
// call per 4 W rows that cost the 3-row pass a tenth.
template <int R, int C, Ahead kAhead>
[[gnu::always_inline]] inline void Tile(const uint16_t* w, int cols, int r, const float* x, int i,
                                        float* y, int64_t ldy) {
  static_assert(R * C <= 16);
  const uint16_t* wp[R];
  const float* xp[C];
  for (int a = 0; a < R; ++a) wp[a] = w + static_cast<int64_t>(r + a) * cols;
  for (int c = 0; c < C; ++c) xp[c] = x + static_cast<int64_t>(i + c) * cols;
  __m512 acc[R * C];
  for (int o = 0; o < R * C; ++o) acc[o] = _mm512_setzero_ps();
  int k = 0;
  for (; k + 16 <= cols; k += 16) Step<R, C, kAhead>(wp, xp, k, acc);
  // The R x C sums in one register, then x row c's R outputs moved to its lanes 0..R-1 and
  // stored together.
  const __m512 sums = [&]<size_t... M>(std::index_sequence<M...>) {
    return SumLanes16((M < R * C ? acc[M % (R * C)] : _mm512_setzero_ps())...);
  }
  (std::make_index_sequence<16>());
  alignas(64) static constexpr auto kLanes = [] {
    std::array<std::array<int32_t, 16>, C> lanes{};
    for (int c = 0; c < C; ++c)
      for (int a = 0; a < R; ++a) lanes[c][a] = SumLane(a * C + c);
    return lanes;
  }();
  for (int c = 0; c < C; ++c)
    _mm512_mask_storeu_ps(y + (i + c) * ldy + r, static_cast<__mmask16>((1u << R) - 1),
                          _mm512_permutexvar_ps(_mm512_load_si512(kLanes[c].data()), sums));
  // The columns past the last 16, one at a time in order. Not a masked vector step: GCC takes the
  // masked-load builtins for reads of the accumulator array and then keeps it on the stack,
  // stored every step (2x slower).
  for (int a = 0; a < R && k < cols; ++a)
    for (int c = 0; c < C; ++c) {
      float& out = y[(i + c) * ldy + r + a];
      for (int kk = k; kk < cols; ++kk) out += Bf16ToF32(wp[a][kk]) * xp[c][kk];
    }
}

// W rows per tile for C x rows: as many as fill one register with the R x C lane sums, except over
// short rows on CPUs whose passes do not prefetch into L1 (SoftwarePrefetchInPasses: all but Zen
// 5), where at most 4 (with the L2 prefetches too: 8 slowed one x row by a third or more, 2 slowed
// three x rows by 15-70%). On a Zen 4 core the 16-row prefetching tile read the default model's LM
// head (262,144 x 128) slower with one x row than with two; 4 rows a tile without prefetches read
// it 1.7-3.3x faster with one x row and 1.4-1.5x with two (docs/performance.md "One-row bf16 passes
// on Zen 4"). Long rows (1536 columns) keep 16 / C: 4 rows a tile lost a quarter there with one x
// row.
constexpr int TileRows(int c, bool short_rows) { return short_rows ? std::min(16 / c, 4) : 16 / c; }

// How a pass of C x rows asks for its weights ahead: into L1 where passes prefetch
// (`prefetch_batch`: SoftwarePrefetchInPasses), elsewhere into L2 except one x row over short rows,
// which reads fastest asking for nothing (kernels/cpu/tiling.h kL2PrefetchBytes).
constexpr Ahead PassAhead(int c, bool short_rows, bool prefetch_batch) {
  if (prefetch_batch) return Ahead::kL1;
  return c == 1 && short_rows ? Ahead::kNone : Ahead::kL2;
}

// W rows [r0, r1) x the C x rows from row i in one pass, R W rows a tile. A function of its own:
// with every pass inlined into MatMulBf16, GCC's inlining budget ran out and it called tiles or
// their lane sums out of line in some passes (the 2-row pass spent 15% of `--spec mtp` decoding
// in the call).
template <int C, Ahead kAhead, int R>
[[gnu::noinline]] void Pass(const WeightMatrix& w, int r0, int r1, const float* x, int i, float* y,
                            int64_t ldy) {
  // W's data and row length in locals: read through `w` they were loaded again every tile.
  const auto* data = static_cast<const uint16_t*>(w.data);
  const int cols = w.cols;
  int r = r0;
  for (; r + R <= r1; r += R) Tile<R, C, kAhead>(data, cols, r, x, i, y, ldy);
  for (; r < r1; ++r) Tile<1, C, kAhead>(data, cols, r, x, i, y, ldy);
}

// y[i * ldy + r] = W row r . x row i (CpuKernels::matmul_bf16). Decode and a speculative verify
// pass (n <= 8) read each weight once, in tasks sized like decode's, asking for the weights ahead
// as PassAhead says. More rows (prefill) take 8 x 2 tiles over the task's W rows, which the caller
// sizes to stay in L2 (kernels/ops.cc).
template <bool kPrefetchBatch>
void MatMulBf16(const WeightMatrix& w, int r0, int r1, const float* x, int n, float* y,
                int64_t ldy) {
  const bool short_rows = !kPrefetchBatch && w.cols <= kBf16ShortRowCols;
  if (WithPassRows<kBf16PassRows>(n, [&]<int C>() {
        if (short_rows)
          Pass<C, PassAhead(C, true, kPrefetchBatch), TileRows(C, true)>(w, r0, r1, x, 0, y, ldy);
        else
          Pass<C, PassAhead(C, false, kPrefetchBatch), TileRows(C, false)>(w, r0, r1, x, 0, y, ldy);
      }))
    return;
  const auto* data = static_cast<const uint16_t*>(w.data);
  const int cols = w.cols;
  auto tile = [&]<int R, int C>(int r, int i) {
    Tile<R, C, C == 1 ? Ahead::kL1 : Ahead::kNone>(data, cols, r, x, i, y, ldy);
  };
  WalkTiles<TileRows(2, false), 2>(r0, r1, n, tile);
}

}  // namespace

void UseAvx512Bf16MatMul(CpuKernels* table, bool prefetch_batch) {
  table->matmul_bf16 = prefetch_batch ? MatMulBf16<true> : MatMulBf16<false>;
  table->bf16_pass_rows = kBf16PassRows;
}

}  // namespace g4
