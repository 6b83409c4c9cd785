// AVX-512 BF16 version of the bf16-weight matrix product; the rest of the table is the AVX-512
// one. vdpbf16ps multiplies 32 bf16 pairs and adds each pair's two products into a float lane:
// twice the multiply-adds of an fp32 FMA per instruction, and the weights need no widening. Both
// operands are bf16 (products of two bf16 values are exact in float), so the activations lose
// precision, measured against the float64 reference (docs/notes/benchmarks-lab.md):
//   - one bf16 each (8 significant bits): the tiny presets' logits 0.37-0.88 from float64, against
//     the tests' 2e-3 tolerance (the float path: 3-6e-5). G4_BF16_ROUND=1 selects it, to measure.
//   - two bf16 halves, x = hi + lo (16 bits; the default here), two vdpbf16ps per weight vector:
//     0.8-1.3e-3, within that tolerance, but over the float-noise bounds of the default model
//     against PyTorch and of perplexity against the reference.
// So the table is opt_in (G4_FORCE_ISA=avx512bf16): the default bf16 product stays the float one.
// Compiled with the matching -m flags and only called after a CPUID check (kernels/dispatch.cc).
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kernels/cpu/tiling.h"
#include "kernels/cpu_kernels.h"

namespace g4 {
namespace {

// 32 activations x[k..k+31] (the first `m` of them; the rest 0) as bf16 in memory order, the
// pairing vdpbf16ps expects against 32 consecutive weights of a row.
inline __m512bh ActivationsBf16(const float* x, int m) {
  if (m >= 32)
    return _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
  const __mmask16 lo = m >= 16 ? static_cast<__mmask16>(0xffff) : (1u << m) - 1;
  const __mmask16 hi = m <= 16 ? 0 : static_cast<__mmask16>((1u << (m - 16)) - 1);
  return _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, x + 16), _mm512_maskz_loadu_ps(lo, x));
}

// x = hi + lo with hi = bf16(x) and lo = bf16(x - hi) (x - hi is exact in float): the pair
// carries 16 significant bits of x, so hi.w + lo.w is the float product to ~2^-17 relative.
inline void SplitActivations(const float* x, int m, __m512bh* hi, __m512bh* lo) {
  __m512 x0, x1;
  if (m >= 32) {
    x0 = _mm512_loadu_ps(x);
    x1 = _mm512_loadu_ps(x + 16);
  } else {
    const __mmask16 k0 = m >= 16 ? static_cast<__mmask16>(0xffff) : (1u << m) - 1;
    const __mmask16 k1 = m <= 16 ? 0 : static_cast<__mmask16>((1u << (m - 16)) - 1);
    x0 = _mm512_maskz_loadu_ps(k0, x);
    x1 = _mm512_maskz_loadu_ps(k1, x + 16);
  }
  const __m512bh h = _mm512_cvtne2ps_pbh(x1, x0);
  const __m512i hb = reinterpret_cast<__m512i>(h);
  const __m512 h0 = _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hb)), 16));
  const __m512 h1 = _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hb, 1)), 16));
  *hi = h;
  *lo = _mm512_cvtne2ps_pbh(_mm512_sub_ps(x1, h1), _mm512_sub_ps(x0, h0));
}

// The first `m` of 32 weights (the rest 0, so a stray NaN/Inf past the row cannot reach a sum).
inline __m512bh WeightsBf16(const uint16_t* w, int m) {
  if (m >= 32) return reinterpret_cast<__m512bh>(_mm512_loadu_si512(w));
  const __mmask32 k = (1u << m) - 1;
  return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(k, w));
}

inline int Steps(int cols) { return (cols + 31) / 32; }

// Activation rows i..i+c-1 as the tiles take them: per row and 32-column step, hi then lo.
template <bool kSplit>
void PrepareActivations(const float* x, int cols, int i, int c, __m512i* out) {
  for (int row = 0; row < c; ++row) {
    const float* xr = x + static_cast<int64_t>(i + row) * cols;
    __m512i* o = out + static_cast<int64_t>(row) * Steps(cols) * 2;
    for (int k = 0; k < cols; k += 32, o += 2) {
      __m512bh hi, lo;
      if constexpr (kSplit) {
        SplitActivations(xr + k, cols - k, &hi, &lo);
        o[1] = reinterpret_cast<__m512i>(lo);
      } else {
        hi = ActivationsBf16(xr + k, cols - k);
      }
      o[0] = reinterpret_cast<__m512i>(hi);
    }
  }
}

// R weight rows x C activation rows. Each output is one accumulator over the row in the same
// order whatever R and C are, so a row's product is bit-identical in decode (C = 1) and in any
// batch: batched and single-stream decode agree exactly.
// `prepared` (nullptr: convert here, as decode does): activation rows i..i+C-1 already converted
// by PrepareActivations, the same vectors this tile would make.
template <bool kSplit, int R, int C>
inline void TileBf16(const WeightMatrix& w, int r, const float* x, int i, float* y, int64_t ldy,
                     const __m512i* prepared) {
  const int cols = w.cols;
  const uint16_t* wp[R];
  const float* xp[C];
  for (int a = 0; a < R; ++a)
    wp[a] = static_cast<const uint16_t*>(w.data) + static_cast<int64_t>(r + a) * cols;
  for (int c = 0; c < C; ++c) xp[c] = x + static_cast<int64_t>(i + c) * cols;
  __m512 acc[R][C];
  for (int a = 0; a < R; ++a)
    for (int c = 0; c < C; ++c) acc[a][c] = _mm512_setzero_ps();
  for (int k = 0; k < cols; k += 32) {
    const int m = cols - k;  // >= 32 except in the last step
    __m512bh xv[C], xl[C];
    for (int c = 0; c < C; ++c) {
      if (prepared) {
        const __m512i* p = prepared + (static_cast<int64_t>(c) * Steps(cols) + k / 32) * 2;
        xv[c] = reinterpret_cast<__m512bh>(p[0]);
        if constexpr (kSplit) xl[c] = reinterpret_cast<__m512bh>(p[1]);
      } else if constexpr (kSplit) {
        SplitActivations(xp[c] + k, m, &xv[c], &xl[c]);
      } else {
        xv[c] = ActivationsBf16(xp[c] + k, m);
      }
    }
    for (int a = 0; a < R; ++a) {
      if (C == 1) PrefetchAhead(wp[a] + k);  // one 64-byte line per step
      const __m512bh wv = WeightsBf16(wp[a] + k, m);
      for (int c = 0; c < C; ++c) {
        acc[a][c] = _mm512_dpbf16_ps(acc[a][c], wv, xv[c]);
        if constexpr (kSplit) acc[a][c] = _mm512_dpbf16_ps(acc[a][c], wv, xl[c]);
      }
    }
  }
  for (int a = 0; a < R; ++a)
    for (int c = 0; c < C; ++c) y[(i + c) * ldy + r + a] = _mm512_reduce_add_ps(acc[a][c]);
}

// Tiles of 4 W rows x 4 activation rows (16 accumulators, 4 or 8 activation registers, 1 weight
// register). With several activation rows, each group of 4 is converted once into a per-thread
// buffer and read by every tile of W rows [r0, r1) (converting inside each tile cost a third of
// the split's instructions); decode converts in its tile. Activation rows left over take one
// 4 x 2 and one 4 x 1 pass, so 2 or 3 streams still share each weight load.
template <bool kSplit>
void MatMulBf16(const WeightMatrix& w, int r0, int r1, const float* x, int n, float* y,
                int64_t ldy) {
  __m512i* prepared = nullptr;
  if (n > 1) {
    // Grows to the widest product once per thread (prefill and batched decode only).
    struct alignas(64) Vector {
      __m512i v;
    };
    thread_local std::vector<Vector> buffer;
    const size_t need = static_cast<size_t>(4) * Steps(w.cols) * 2;
    if (buffer.size() < need) buffer.resize(need);
    prepared = &buffer[0].v;
  }
  auto rows = [&]<int C>(int i) {
    if (prepared) PrepareActivations<kSplit>(x, w.cols, i, C, prepared);
    int r = r0;
    for (; r + 4 <= r1; r += 4) TileBf16<kSplit, 4, C>(w, r, x, i, y, ldy, prepared);
    for (; r < r1; ++r) TileBf16<kSplit, 1, C>(w, r, x, i, y, ldy, prepared);
  };
  int i = 0;
  for (; i + 4 <= n; i += 4) rows.template operator()<4>(i);
  if (i + 2 <= n) {
    rows.template operator()<2>(i);
    i += 2;
  }
  if (i < n) rows.template operator()<1>(i);
}

}  // namespace

const CpuKernels* Avx512Bf16Kernels() {
  static const CpuKernels k = [] {
    CpuKernels t = *Avx512Kernels();
    t.name = "avx512bf16";
    // Read once, with the table: the experiment switch above (not for serving).
    static const bool round = std::getenv("G4_BF16_ROUND") != nullptr;
    t.matmul_bf16 = round ? MatMulBf16<false> : MatMulBf16<true>;
    t.bf16_rounds_activations = round;
    t.bf16_pass_rows = 1;  // several activation rows take passes of 4, 2, 1 (MatMulBf16 above)
    t.opt_in = true;
    return t;
  }();
  return &k;
}

}  // namespace g4
