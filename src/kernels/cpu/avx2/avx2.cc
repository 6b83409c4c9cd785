// AVX2 + FMA + F16C versions of the kernel table. This file is compiled with -mavx2 -mfma -mf16c
// and only called after a CPUID check (kernels/dispatch.cc).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "base/half.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/matmul_driver.h"
#include "kernels/cpu/tiling.h"
#include "kernels/cpu_kernels.h"
#include "kernels/kv_format.h"

namespace g4 {
namespace {

float DotF32(const float* a, const float* b, int n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = HorizontalSum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

float DotBf16F32(const uint16_t* w, const float* x, int n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(LoadBf16(w + i), _mm256_loadu_ps(x + i), s0);
    s1 = _mm256_fmadd_ps(LoadBf16(w + i + 8), _mm256_loadu_ps(x + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(LoadBf16(w + i), _mm256_loadu_ps(x + i), s0);
  float s = HorizontalSum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += Bf16ToF32(w[i]) * x[i];
  return s;
}

void Bf16ToF32Row(const uint16_t* src, float* dst, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadBf16(src + i));
  for (; i < n; ++i) dst[i] = Bf16ToF32(src[i]);
}

void AxpyF32(float a, const float* x, float* y, int n) {
  __m256 va = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

double SumSquares(const float* x, int n) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    const __m256d d[4] = {
        _mm256_cvtps_pd(_mm256_castps256_ps128(v0)), _mm256_cvtps_pd(_mm256_extractf128_ps(v0, 1)),
        _mm256_cvtps_pd(_mm256_castps256_ps128(v1)), _mm256_cvtps_pd(_mm256_extractf128_ps(v1, 1))};
    for (int c = 0; c < 4; ++c) acc[c] = _mm256_fmadd_pd(d[c], d[c], acc[c]);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes,
                  _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3])));
  double s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

// Each lane keeps its largest value and where it was (a strict compare keeps the first of equal
// values); the lanes are merged by value, then by the smaller index.
int64_t ArgMaxF32(const float* x, int64_t n) {
  float best_value = -INFINITY;
  int64_t best = 0, i = 0;
  if (n >= 16 && n <= INT32_MAX) {
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    __m256i at0 = _mm256_setzero_si256(), at1 = at0;
    __m256i cur0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i cur1 = _mm256_add_epi32(cur0, _mm256_set1_epi32(8));
    const __m256i step = _mm256_set1_epi32(16);
    for (; i + 16 <= n; i += 16) {
      const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
      const __m256 gt0 = _mm256_cmp_ps(v0, m0, _CMP_GT_OQ), gt1 = _mm256_cmp_ps(v1, m1, _CMP_GT_OQ);
      m0 = _mm256_blendv_ps(m0, v0, gt0);
      m1 = _mm256_blendv_ps(m1, v1, gt1);
      at0 = _mm256_blendv_epi8(at0, cur0, _mm256_castps_si256(gt0));
      at1 = _mm256_blendv_epi8(at1, cur1, _mm256_castps_si256(gt1));
      cur0 = _mm256_add_epi32(cur0, step);
      cur1 = _mm256_add_epi32(cur1, step);
    }
    alignas(32) float value[16];
    alignas(32) int32_t index[16];
    _mm256_store_ps(value, m0);
    _mm256_store_ps(value + 8, m1);
    _mm256_store_si256(reinterpret_cast<__m256i*>(index), at0);
    _mm256_store_si256(reinterpret_cast<__m256i*>(index + 8), at1);
    for (int l = 0; l < 16; ++l)
      if (value[l] > best_value || (value[l] == best_value && index[l] < best)) {
        best_value = value[l];
        best = index[l];
      }
    if (best_value == -INFINITY) best = 0;  // no lane found a value above -inf
  }
  for (; i < n; ++i)  // later than every vector element: only a larger value wins
    if (x[i] > best_value) {
      best_value = x[i];
      best = i;
    }
  return best;
}

void QuantizeRowQ8(const float* x, int cols, int8_t* q, float* scale, float* corr) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int b = 0; b < cols / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(xb + 8 * k);
      amax = _mm256_max_ps(amax, _mm256_and_ps(v[k], abs_mask));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float amax_s = _mm_cvtss_f32(m);
    const __m256 inv = _mm256_set1_ps(amax_s > 0 ? 127.0f / amax_s : 0.0f);
    __m256i iv[4];
    __m256i sum = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
      iv[k] = _mm256_cvtps_epi32(
          _mm256_round_ps(_mm256_mul_ps(v[k], inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      sum = _mm256_add_epi32(sum, iv[k]);
    }
    // packs interleave 128-bit lanes; the permute puts the 32 bytes back in order.
    __m256i p16a = _mm256_packs_epi32(iv[0], iv[1]), p16b = _mm256_packs_epi32(iv[2], iv[3]);
    __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kQuantBlock), p8);
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    scale[b] = amax_s / 127.0f;
    corr[b] = -8.0f * scale[b] * static_cast<float>(_mm_cvtsi128_si32(s));
  }
}

inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
inline float HorizontalMin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_min_ss(m, _mm_movehdup_ps(m)));
}
inline __m256 Round(__m256 v) {
  return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline uint16_t ToF16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

// 32 int32 lanes (4 vectors, in order) -> 32 int8 in order.
inline __m256i PackBytes(const __m256i* iv) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256i p16a = _mm256_packs_epi32(iv[0], iv[1]), p16b = _mm256_packs_epi32(iv[2], iv[3]);
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), order);
}

void QuantizeRowQ8W(const float* x, int cols, int8_t* q, uint16_t* scales) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int b = 0; b < cols / kQuantBlock; ++b) {
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + b * kQuantBlock + 8 * k);
      amax = _mm256_max_ps(amax, _mm256_and_ps(v[k], abs_mask));
    }
    scales[b] = ToF16(HorizontalMax(amax) / 127.0f);
    const float d = _cvtsh_ss(scales[b]);
    const __m256 inv = _mm256_set1_ps(d > 0 ? 1.0f / d : 0.0f);
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    __m256i iv[4];
    for (int k = 0; k < 4; ++k)
      iv[k] =
          _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(Round(_mm256_mul_ps(v[k], inv)), lo), hi));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kQuantBlock), PackBytes(iv));
  }
}

// One q4 block: the least-squares search of generic.cc, 8 lanes at a time. Returns the block's
// 32 values + 8 (0..15) as bytes and its scale.
inline __m256i QuantizeBlockQ4(const float* x, float* d_out) {
  __m256 v[4];
  __m256 mx = _mm256_set1_ps(-INFINITY), mn = _mm256_set1_ps(INFINITY);
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    mx = _mm256_max_ps(mx, v[k]);
    mn = _mm256_min_ps(mn, v[k]);
  }
  const float hmax = HorizontalMax(mx), hmin = HorizontalMin(mn);
  const float m = -hmin > hmax ? hmin : hmax;
  const __m256 lo = _mm256_set1_ps(-8.0f), hi = _mm256_set1_ps(7.0f);
  float best_score = -1, best_inv = 0, best_d = 0;
  if (m != 0) {
    for (int step = -4; step <= 8; ++step) {
      const float inv = (-8.0f + 0.5f * step) / m;
      const __m256 vinv = _mm256_set1_ps(inv);
      __m256 sxq = _mm256_setzero_ps(), sqq = _mm256_setzero_ps();
      for (int k = 0; k < 4; ++k) {
        const __m256 q = _mm256_min_ps(_mm256_max_ps(Round(_mm256_mul_ps(v[k], vinv)), lo), hi);
        sxq = _mm256_fmadd_ps(v[k], q, sxq);
        sqq = _mm256_fmadd_ps(q, q, sqq);
      }
      const float xq = HorizontalSum(sxq), qq = HorizontalSum(sqq);
      if (qq == 0) continue;
      const float score = xq * xq / qq;
      if (score > best_score) {
        best_score = score;
        best_inv = inv;
        best_d = xq / qq;
      }
    }
  }
  *d_out = best_d;
  const __m256 vinv = _mm256_set1_ps(best_inv), eight = _mm256_set1_ps(8.0f);
  __m256i iv[4];
  for (int k = 0; k < 4; ++k)
    iv[k] = _mm256_cvtps_epi32(_mm256_add_ps(
        _mm256_min_ps(_mm256_max_ps(Round(_mm256_mul_ps(v[k], vinv)), lo), hi), eight));
  return PackBytes(iv);
}

void QuantizeRowQ4W(const float* x, int cols, uint8_t* q, uint16_t* scales) {
  for (int b = 0; b < cols / kQuantBlock; b += 2) {
    float d0, d1;
    const __m256i q0 = QuantizeBlockQ4(x + b * kQuantBlock, &d0);
    const __m256i q1 = QuantizeBlockQ4(x + (b + 1) * kQuantBlock, &d1);
    scales[b] = ToF16(d0);
    scales[b + 1] = ToF16(d1);
    // Bytes are <= 15, so a 16-bit shift cannot carry into the neighbour byte.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b / 2 * 32),
                        _mm256_or_si256(q0, _mm256_slli_epi16(q1, 4)));
  }
}

// Eight block scales (fp16 weights or f32 activations), zero-padded when fewer than 8 remain.
inline __m256 LoadF16x8(const uint16_t* p, int m) {
  if (m == 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  alignas(16) uint16_t tmp[8] = {};
  std::memcpy(tmp, p, sizeof(uint16_t) * m);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp)));
}
inline __m256 LoadF32x8(const float* p, int m) {
  if (m == 8) return _mm256_loadu_ps(p);
  alignas(32) float tmp[8] = {};
  std::memcpy(tmp, p, sizeof(float) * m);
  return _mm256_load_ps(tmp);
}

// R rows of W times C rows of x. Per block: int8 dot products (|w| * sign(x, w) through
// maddubs, then pairs to int32 through madd), converted once and scaled by d_w * d_x.
template <int R, int C>
inline void TileQ8(const WeightMatrix& w, int r, const QuantizedRows& x, int i, float* y,
                   int64_t ldy) {
  const int nb = w.blocks();
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* wq[R];
  const uint16_t* wd[R];
  const ActivationRows<C> act(x, i);
  for (int a = 0; a < R; ++a) {
    wq[a] = reinterpret_cast<const int8_t*>(w.quants(r + a));
    wd[a] = w.scales(r + a);
  }
  __m256 acc[R][C];
  for (int a = 0; a < R; ++a)
    for (int c = 0; c < C; ++c) acc[a][c] = _mm256_setzero_ps();
  alignas(32) float sc[R][C][8];
  for (int g = 0; g < nb; g += 8) {
    const int m = std::min(8, nb - g);
    __m256 sx[C];
    for (int c = 0; c < C; ++c) sx[c] = LoadF32x8(act.scale[c] + g, m);
    for (int a = 0; a < R; ++a) {
      if (C == 1) PrefetchAhead(wd[a] + g);
      const __m256 d = LoadF16x8(wd[a] + g, m);
      for (int c = 0; c < C; ++c) _mm256_store_ps(sc[a][c], _mm256_mul_ps(d, sx[c]));
    }
    for (int j = 0; j < m; ++j) {
      const int off = (g + j) * kQuantBlock;
      __m256i wv[R], wa[R];
      for (int a = 0; a < R; ++a) {
        if (C == 1) PrefetchAhead(wq[a] + off);
        wv[a] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq[a] + off));
        wa[a] = _mm256_abs_epi8(wv[a]);
      }
      for (int c = 0; c < C; ++c) {
        const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act.q[c] + off));
        for (int a = 0; a < R; ++a) {
          const __m256i p =
              _mm256_madd_epi16(_mm256_maddubs_epi16(wa[a], _mm256_sign_epi8(av, wv[a])), ones);
          acc[a][c] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(&sc[a][c][j]), acc[a][c]);
        }
      }
    }
  }
  for (int a = 0; a < R; ++a)
    for (int c = 0; c < C; ++c) y[(i + c) * ldy + r + a] = HorizontalSum(acc[a][c]);
}

// q4: unsigned nibbles (q in [0, 15]) go straight into maddubs (15 * 127 * 2 cannot saturate);
// the -8 offset is the precomputed activation term corr, added per 8 blocks as d_w * corr.
template <int R, int C>
inline void TileQ4(const WeightMatrix& w, int r, const QuantizedRows& x, int i, float* y,
                   int64_t ldy) {
  const int nb = w.blocks();
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low = _mm256_set1_epi8(0x0f);
  const uint8_t* wq[R];
  const uint16_t* wd[R];
  const ActivationRows<C> act(x, i);
  for (int a = 0; a < R; ++a) {
    wq[a] = w.quants(r + a);
    wd[a] = w.scales(r + a);
  }
  __m256 acc[R][C];
  for (int a = 0; a < R; ++a)
    for (int c = 0; c < C; ++c) acc[a][c] = _mm256_setzero_ps();
  alignas(32) float sc[R][C][8];
  for (int g = 0; g < nb; g += 8) {
    const int m = std::min(8, nb - g);  // even: cols % 64 == 0
    __m256 sx[C];
    for (int c = 0; c < C; ++c) sx[c] = LoadF32x8(act.scale[c] + g, m);
    for (int a = 0; a < R; ++a) {
      if (C == 1) PrefetchAhead(wd[a] + g);
      const __m256 d = LoadF16x8(wd[a] + g, m);
      for (int c = 0; c < C; ++c) {
        _mm256_store_ps(sc[a][c], _mm256_mul_ps(d, sx[c]));
        // The lanes of acc are summed at the end, so the 8 blocks' offset terms go in directly.
        acc[a][c] = _mm256_fmadd_ps(d, LoadF32x8(act.corr[c] + g, m), acc[a][c]);
      }
    }
    for (int j = 0; j < m; j += 2) {
      const int chunk = (g + j) / 2 * 32;
      __m256i lo[R], hi[R];
      for (int a = 0; a < R; ++a) {
        if (C == 1) PrefetchAhead(wq[a] + chunk);
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq[a] + chunk));
        lo[a] = _mm256_and_si256(v, low);
        hi[a] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
      }
      const int off = (g + j) * kQuantBlock;
      for (int c = 0; c < C; ++c) {
        const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act.q[c] + off));
        const __m256i a1 =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act.q[c] + off + 32));
        for (int a = 0; a < R; ++a) {
          const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[a], a0), ones);
          const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[a], a1), ones);
          acc[a][c] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_broadcast_ss(&sc[a][c][j]), acc[a][c]);
          acc[a][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_broadcast_ss(&sc[a][c][j + 1]),
                                      acc[a][c]);
        }
      }
    }
  }
  for (int a = 0; a < R; ++a)
    for (int c = 0; c < C; ++c) y[(i + c) * ldy + r + a] = HorizontalSum(acc[a][c]);
}

// Row groups (layout in weight_matrix.h), q8: stored as q + 128, which maddubs cannot take
// against signed activations (255 x 127 pairs saturate 16 bits). XOR 0x80 gives q back, and the
// products go in as |q| x sign(x, q) (each pair <= 2 x 128 x 127, no saturation), summed to 32 bits
// per row with madd. Per 32 weights: sign, maddubs, madd and an add; the conversion and scaling
// come once per block for 8 rows (the row-major tile converts and scales every row's block).
template <int C>
inline void GroupTileQ8(const WeightMatrix& w, int r, const QuantizedRows& x, int i, float* y,
                        int64_t ldy) {
  const int nb = w.blocks();
  const uint8_t* wq = w.quants(r);
  const uint16_t* wd = w.scales(r);
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  const ActivationRows<C> act(x, i);
  __m256 acc[C][2];
  for (int c = 0; c < C; ++c) acc[c][0] = acc[c][1] = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const uint8_t* p = wq + static_cast<size_t>(b) * 512;
    __m256i sum[C][2];
    for (int c = 0; c < C; ++c) sum[c][0] = sum[c][1] = _mm256_setzero_si256();
    for (int step = 0; step < 8; ++step) {
      if (C == 1) PrefetchAhead<kGroupPrefetchBytes>(p + 64 * step);
      __m256i q[2], magnitude[2];
      for (int h = 0; h < 2; ++h) {
        q[h] = _mm256_xor_si256(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * step + 32 * h)), bias);
        magnitude[h] = _mm256_abs_epi8(q[h]);
      }
      for (int c = 0; c < C; ++c) {
        int32_t cols;  // activation columns 4 step..4 step+3 of block b
        std::memcpy(&cols, act.q[c] + b * kQuantBlock + 4 * step, 4);
        const __m256i a = _mm256_set1_epi32(cols);
        for (int h = 0; h < 2; ++h)
          sum[c][h] = _mm256_add_epi32(
              sum[c][h], _mm256_madd_epi16(
                             _mm256_maddubs_epi16(magnitude[h], _mm256_sign_epi8(a, q[h])), ones));
      }
    }
    if (C == 1 && b % 2 == 0)
      PrefetchAhead<kGroupPrefetchBytes>(wd + b * kRowGroup);  // 64 bytes: 2 blocks' scales
    __m256 dw[2];
    for (int h = 0; h < 2; ++h)
      dw[h] = _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(wd + b * kRowGroup + 8 * h)));
    for (int c = 0; c < C; ++c) {
      const __m256 sa = _mm256_set1_ps(act.scale[c][b]);
      for (int h = 0; h < 2; ++h)
        acc[c][h] =
            _mm256_fmadd_ps(dw[h], _mm256_mul_ps(_mm256_cvtepi32_ps(sum[c][h]), sa), acc[c][h]);
    }
  }
  for (int c = 0; c < C; ++c)
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(y + (i + c) * ldy + r + 8 * h, acc[c][h]);
}

// Row groups (layout in weight_matrix.h), q4: a 64-byte vector of the layout is two registers
// here, rows 0-7 and rows 8-15. maddubs adds 2 nibble x activation products into a 16-bit lane;
// with nibbles <= 15 and |x| <= 127 a whole block (16 products per lane, <= 30480) fits, so the
// 16-bit sums are widened once per block and 16 rows x 32 columns cost one conversion and two
// FMAs per register half.
template <int C>
inline void GroupTileQ4(const WeightMatrix& w, int r, const QuantizedRows& x, int i, float* y,
                        int64_t ldy) {
  const int nb = w.blocks();
  const uint8_t* wq = w.quants(r);
  const uint16_t* wd = w.scales(r);
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  const ActivationRows<C> act(x, i);
  __m256 acc[C][2];
  for (int c = 0; c < C; ++c) acc[c][0] = acc[c][1] = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const uint8_t* p = wq + static_cast<size_t>(b) * 256;
    __m256i sum[C][2];
    for (int c = 0; c < C; ++c) sum[c][0] = sum[c][1] = _mm256_setzero_si256();
    for (int v = 0; v < 4; ++v) {
      if (C == 1) PrefetchAhead<kGroupPrefetchBytes>(p + 64 * v);
      __m256i lo[2], hi[2];
      for (int h = 0; h < 2; ++h) {
        const __m256i bytes =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * v + 32 * h));
        lo[h] = _mm256_and_si256(bytes, low_nibbles);
        hi[h] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low_nibbles);
      }
      for (int c = 0; c < C; ++c) {
        int32_t d_lo, d_hi;  // activation columns 4v..4v+3 and 16+4v..16+4v+3 of block b
        std::memcpy(&d_lo, act.q[c] + b * kQuantBlock + 4 * v, 4);
        std::memcpy(&d_hi, act.q[c] + b * kQuantBlock + 16 + 4 * v, 4);
        const __m256i a_lo = _mm256_set1_epi32(d_lo), a_hi = _mm256_set1_epi32(d_hi);
        for (int h = 0; h < 2; ++h)
          sum[c][h] =
              _mm256_add_epi16(sum[c][h], _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], a_lo),
                                                           _mm256_maddubs_epi16(hi[h], a_hi)));
      }
    }
    if (C == 1 && b % 2 == 0)
      PrefetchAhead<kGroupPrefetchBytes>(wd + b * kRowGroup);  // 64 bytes: 2 blocks' scales
    __m256 dw[2];
    for (int h = 0; h < 2; ++h)
      dw[h] = _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(wd + b * kRowGroup + 8 * h)));
    for (int c = 0; c < C; ++c) {
      const __m256 sa = _mm256_set1_ps(act.scale[c][b]), co = _mm256_set1_ps(act.corr[c][b]);
      for (int h = 0; h < 2; ++h) {
        const __m256 f =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(sum[c][h], ones)), sa, co);
        acc[c][h] = _mm256_fmadd_ps(dw[h], f, acc[c][h]);
      }
    }
  }
  for (int c = 0; c < C; ++c)
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(y + (i + c) * ldy + r + 8 * h, acc[c][h]);
}

// The tiles for the shared driver (kernels/cpu/matmul_driver.h). Row groups: 2 x rows at a time,
// then 1. Row-major tiles for x.n > 1, measured (bench/kernels_bench.cc, 6144x1536, 64 rows):
// q8 2x2, 2x3, 3x2 and 4x2 within noise; q4 4x2 ~5-10% faster than 2x2 (nibble unpacking
// amortised over two x rows).
struct Q8Tiles {
  static constexpr int kTileRows = 2, kTileCols = 2, kGroupCols = 2;
  template <int R, int C>
  static void RowTile(const WeightMatrix& w, int r, const QuantizedRows& x, int i, float* y,
                      int64_t ldy) {
    TileQ8<R, C>(w, r, x, i, y, ldy);
  }
  template <int C>
  static void RowGroupTile(const WeightMatrix& w, int r, const QuantizedRows& x, int i, float* y,
                           int64_t ldy) {
    GroupTileQ8<C>(w, r, x, i, y, ldy);
  }
};

struct Q4Tiles {
  static constexpr int kTileRows = 4, kTileCols = 2, kGroupCols = 2;
  template <int R, int C>
  static void RowTile(const WeightMatrix& w, int r, const QuantizedRows& x, int i, float* y,
                      int64_t ldy) {
    TileQ4<R, C>(w, r, x, i, y, ldy);
  }
  template <int C>
  static void RowGroupTile(const WeightMatrix& w, int r, const QuantizedRows& x, int i, float* y,
                           int64_t ldy) {
    GroupTileQ4<C>(w, r, x, i, y, ldy);
  }
};

// e^y for y <= 0 (inputs below -87 give 0): 2^n * p(r), y = n ln2 + r with ln2 split in two
// so r is exact to float precision, and a degree-6 polynomial for e^r on [-ln2/2, ln2/2].
inline __m256 ExpNonPositive(__m256 y) {
  y = _mm256_max_ps(y, _mm256_set1_ps(-87.0f));
  const __m256 n = Round(_mm256_mul_ps(y, _mm256_set1_ps(1.44269504088896341f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), y);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// tanh(u) = sign(u) (1 - t) / (1 + t), t = e^(-2|u|). Near 0 the subtraction leaves an absolute
// error of ~1e-7, which 0.5 x (1 + tanh) does not notice.
inline __m256 Tanh(__m256 u) {
  const __m256 sign = _mm256_and_ps(u, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)));
  const __m256 t = ExpNonPositive(_mm256_mul_ps(_mm256_set1_ps(-2.0f), _mm256_andnot_ps(sign, u)));
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_or_ps(sign, _mm256_div_ps(_mm256_sub_ps(one, t), _mm256_add_ps(one, t)));
}

void GeluTanhMulRow(float* gate, const float* up, int64_t n) {
  const __m256 alpha = _mm256_set1_ps(0.7978845608028654f), beta = _mm256_set1_ps(0.044715f);
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  auto gelu_mul = [&](__m256 x, __m256 u) {
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 th = Tanh(_mm256_mul_ps(alpha, _mm256_fmadd_ps(beta, x3, x)));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, th)), u);
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(gate + i, gelu_mul(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  // The last few in a padded vector, not scalar tanhf: an element's result must not depend on
  // where a caller's chunk ends (the threaded feed-forward finishes each task's rows itself).
  if (i < n) {
    alignas(32) float g[8] = {}, u[8] = {};
    const int64_t rest = n - i;
    std::memcpy(g, gate + i, rest * sizeof(float));
    std::memcpy(u, up + i, rest * sizeof(float));
    _mm256_store_ps(g, gelu_mul(_mm256_load_ps(g), _mm256_load_ps(u)));
    std::memcpy(gate + i, g, rest * sizeof(float));
  }
}

// Attention tiles read K/V rows in order and ask for the rows this many keys ahead: in decode
// the cache rows come from memory (the weights streamed between layers evict them). Cold rows
// (BM_Attention, 8 heads x 2048 keys x 512 dims, one thread): values 6.3 GB/s without, 8.0-8.4
// with 4-8 rows ahead; scores 5.1 and 6.4-6.8.
constexpr int kAttnPrefetchRows = 8;

// How the attention tiles load 8 consecutive values of a cached K/V head row, per cache format
// (kernels/kv_format.h): widened to float in registers, so a compact cache is read from memory at
// its own size. `row` is the head's first byte in one position's row.
struct F32Kv {
  static constexpr int kPrefetchEvery = 16;  // values per 64-byte line
  static __m256 Load(const uint8_t* row, int d) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + d);
  }
  static int64_t Offset(int d) { return int64_t{4} * d; }
};
struct Bf16Kv {
  static constexpr int kPrefetchEvery = 32;
  static __m256 Load(const uint8_t* row, int d) {
    return LoadBf16(reinterpret_cast<const uint16_t*>(row) + d);
  }
  static int64_t Offset(int d) { return int64_t{2} * d; }
};
// Blocks of kBlock int8 then their float scale; 8 values never straddle a block (kBlock >= 8).
template <int kBlock>
struct Q8Kv {
  static constexpr int kPrefetchEvery = 32;  // 36 bytes a block of 32: every line is asked for
  static int64_t Offset(int d) { return (d / kBlock) * int64_t{kBlock + 4} + d % kBlock; }
  static __m256 Load(const uint8_t* row, int d) {
    const uint8_t* block = row + (d / kBlock) * (kBlock + 4);
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + d % kBlock));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)),
                         _mm256_broadcast_ss(reinterpret_cast<const float*>(block + kBlock)));
  }
};

// Scores in tiles of 4 keys x 2 heads: 6 loads per 8 FMAs, where one dot at a time loads both
// operands for every FMA.
template <class Kv, int J, int H>
inline void ScoresTile(const float* q, int64_t q_stride, const uint8_t* k, int64_t k_stride,
                       int hd, float* s, int64_t s_stride) {
  __m256 acc[J][H];
  for (int j = 0; j < J; ++j)
    for (int h = 0; h < H; ++h) acc[j][h] = _mm256_setzero_ps();
  for (int d = 0; d < hd; d += 8) {
    if (d % Kv::kPrefetchEvery == 0)
      for (int j = 0; j < J; ++j)
        __builtin_prefetch(k + (j + kAttnPrefetchRows) * k_stride + Kv::Offset(d));
    __m256 qv[H];
    for (int h = 0; h < H; ++h) qv[h] = _mm256_loadu_ps(q + h * q_stride + d);
    for (int j = 0; j < J; ++j) {
      const __m256 kv = Kv::Load(k + j * k_stride, d);
      for (int h = 0; h < H; ++h) acc[j][h] = _mm256_fmadd_ps(kv, qv[h], acc[j][h]);
    }
  }
  for (int j = 0; j < J; ++j)
    for (int h = 0; h < H; ++h) s[h * s_stride + j] = HorizontalSum(acc[j][h]);
}

// hd a multiple of 8; k_stride in bytes. f32 keys in tiles of 4 keys x 2 heads; compact keys in
// 2 keys x 4 heads, so each key vector is widened once per 4 heads rather than per 2 (the
// widening, not the FMAs, bounds a compact tile; docs/notes/kv-cache-lab.md).
template <class Kv, int TJ = std::is_same_v<Kv, F32Kv> ? 4 : 2,
          int TH = std::is_same_v<Kv, F32Kv> ? 2 : 4>
void ScoresTiled(const float* q, int nq, int64_t q_stride, const uint8_t* k, int64_t k_stride,
                 int len, int hd, float* s, int64_t s_stride) {
  int j = 0;
  for (; j + TJ <= len; j += TJ) {
    int c = 0;
    for (; c + TH <= nq; c += TH)
      ScoresTile<Kv, TJ, TH>(q + c * q_stride, q_stride, k + j * k_stride, k_stride, hd,
                             s + c * s_stride + j, s_stride);
    for (; c < nq; ++c)
      ScoresTile<Kv, TJ, 1>(q + c * q_stride, q_stride, k + j * k_stride, k_stride, hd,
                            s + c * s_stride + j, s_stride);
  }
  for (; j < len; ++j)
    for (int c = 0; c < nq; ++c)
      ScoresTile<Kv, 1, 1>(q + c * q_stride, q_stride, k + j * k_stride, k_stride, hd,
                           s + c * s_stride + j, s_stride);
}

void AttnScores(const float* q, int nq, int64_t q_stride, const float* k, int64_t k_stride, int len,
                int hd, float* s, int64_t s_stride) {
  if (hd % 8 != 0) {
    for (int c = 0; c < nq; ++c)
      for (int j = 0; j < len; ++j)
        s[c * s_stride + j] = DotF32(q + c * q_stride, k + j * k_stride, hd);
    return;
  }
  ScoresTiled<F32Kv>(q, nq, q_stride, reinterpret_cast<const uint8_t*>(k), 4 * k_stride, len, hd,
                     s, s_stride);
}

void AttnScoresBf16(const float* q, int nq, int64_t q_stride, const uint8_t* k, int64_t k_stride,
                    int len, int hd, float* s, int64_t s_stride) {
  if (hd % 8 != 0)
    return GenericKernels().attn_scores_bf16(q, nq, q_stride, k, k_stride, len, hd, s, s_stride);
  ScoresTiled<Bf16Kv>(q, nq, q_stride, k, k_stride, len, hd, s, s_stride);
}

void AttnScoresQ8(const float* q, int nq, int64_t q_stride, const uint8_t* k, int64_t k_stride,
                  int len, int hd, float* s, int64_t s_stride) {
  switch (KvQ8Block(hd)) {
    case 32:
      return ScoresTiled<Q8Kv<32>>(q, nq, q_stride, k, k_stride, len, hd, s, s_stride);
    case 16:
      return ScoresTiled<Q8Kv<16>>(q, nq, q_stride, k, k_stride, len, hd, s, s_stride);
    case 8:
      return ScoresTiled<Q8Kv<8>>(q, nq, q_stride, k, k_stride, len, hd, s, s_stride);
    default:
      return GenericKernels().attn_scores_q8(q, nq, q_stride, k, k_stride, len, hd, s, s_stride);
  }
}

// Values key-block by key-block: J keys x H heads of weights sit in registers while the tile
// walks the J value rows from start to end, adding into the H output rows. Value rows are read
// in order, once per key block, and the outputs (at most 8 heads x 512 dims = 16 KiB) stay in
// L1. Walking dims outermost instead (outputs in registers, every key once per 16 dims) read V
// with a row-sized stride, one cache line per key per pass: latency-bound, and at 1-2 KiB
// strides only a few cache sets hold the lines (cold 8 heads x 2048 keys x 512 dims, one
// thread: 2.1 GB/s, against 6.7 GB/s this way before prefetching, BM_Attention).
template <class Kv, int J, int H>
inline void ValuesTile(const float* p, int64_t p_stride, const uint8_t* v, int64_t v_stride,
                       int hd, float* o, int64_t o_stride) {
  __m256 ph[H][J];
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < J; ++j) ph[h][j] = _mm256_broadcast_ss(p + h * p_stride + j);
  for (int d = 0; d < hd; d += 8) {
    if (d % Kv::kPrefetchEvery == 0)
      for (int j = 0; j < J; ++j)
        __builtin_prefetch(v + (j + kAttnPrefetchRows) * v_stride + Kv::Offset(d));
    __m256 vj[J];
    for (int j = 0; j < J; ++j) vj[j] = Kv::Load(v + j * v_stride, d);
    for (int h = 0; h < H; ++h) {
      __m256 acc = _mm256_loadu_ps(o + h * o_stride + d);
      for (int j = 0; j < J; ++j) acc = _mm256_fmadd_ps(ph[h][j], vj[j], acc);
      _mm256_storeu_ps(o + h * o_stride + d, acc);
    }
  }
}

// hd a multiple of 8; v_stride in bytes. Compact values: 4 heads a tile, as for the scores.
template <class Kv, int TH = std::is_same_v<Kv, F32Kv> ? 2 : 4>
void ValuesTiled(const float* p, int64_t p_stride, int nq, const uint8_t* v, int64_t v_stride,
                 int len, int hd, float* o, int64_t o_stride) {
  int j = 0;
  auto keys = [&]<int J>() {
    for (; j + J <= len; j += J) {
      int c = 0;
      for (; c + TH <= nq; c += TH)
        ValuesTile<Kv, J, TH>(p + c * p_stride + j, p_stride, v + j * v_stride, v_stride, hd,
                              o + c * o_stride, o_stride);
      for (; c < nq; ++c)
        ValuesTile<Kv, J, 1>(p + c * p_stride + j, p_stride, v + j * v_stride, v_stride, hd,
                             o + c * o_stride, o_stride);
    }
  };
  keys.template operator()<4>();
  keys.template operator()<1>();
}

void AttnValues(const float* p, int64_t p_stride, int nq, const float* v, int64_t v_stride, int len,
                int hd, float* o, int64_t o_stride) {
  if (hd % 8 != 0) {
    for (int c = 0; c < nq; ++c)
      for (int j = 0; j < len; ++j)
        AxpyF32(p[c * p_stride + j], v + j * v_stride, o + c * o_stride, hd);
    return;
  }
  ValuesTiled<F32Kv>(p, p_stride, nq, reinterpret_cast<const uint8_t*>(v), 4 * v_stride, len, hd,
                     o, o_stride);
}

void AttnValuesBf16(const float* p, int64_t p_stride, int nq, const uint8_t* v, int64_t v_stride,
                    int len, int hd, float* o, int64_t o_stride) {
  if (hd % 8 != 0)
    return GenericKernels().attn_values_bf16(p, p_stride, nq, v, v_stride, len, hd, o, o_stride);
  ValuesTiled<Bf16Kv>(p, p_stride, nq, v, v_stride, len, hd, o, o_stride);
}

void AttnValuesQ8(const float* p, int64_t p_stride, int nq, const uint8_t* v, int64_t v_stride,
                  int len, int hd, float* o, int64_t o_stride) {
  switch (KvQ8Block(hd)) {
    case 32:
      return ValuesTiled<Q8Kv<32>>(p, p_stride, nq, v, v_stride, len, hd, o, o_stride);
    case 16:
      return ValuesTiled<Q8Kv<16>>(p, p_stride, nq, v, v_stride, len, hd, o, o_stride);
    case 8:
      return ValuesTiled<Q8Kv<8>>(p, p_stride, nq, v, v_stride, len, hd, o, o_stride);
    default:
      return GenericKernels().attn_values_q8(p, p_stride, nq, v, v_stride, len, hd, o, o_stride);
  }
}

double ExpSum(float* x, int n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = ExpNonPositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  double sum = 0;
  for (float v : lanes) sum += v;
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

}  // namespace

const CpuKernels* Avx2Kernels() {
  static const CpuKernels k{
      .name = "avx2",
      .dot_f32 = DotF32,
      .dot_bf16_f32 = DotBf16F32,
      .bf16_to_f32 = Bf16ToF32Row,
      .axpy_f32 = AxpyF32,
      .sum_squares = SumSquares,
      .argmax = ArgMaxF32,
      .quantize_row_q8 = QuantizeRowQ8,
      .quantize_row_q8w = QuantizeRowQ8W,
      .quantize_row_q4w = QuantizeRowQ4W,
      .matmul_q8 = MatMulQuantized<Q8Tiles>,
      .matmul_q4 = MatMulQuantized<Q4Tiles>,
      .matmul_bf16 = SoftwarePrefetchInPasses() ? MatMulBf16<16, true> : MatMulBf16<16, false>,
      .bf16_pass_rows = kBf16PassRows,
      .gelu_tanh_mul = GeluTanhMulRow,
      .exp_sum = ExpSum,
      .attn_scores = AttnScores,
      .attn_values = AttnValues,
      .attn_scores_bf16 = AttnScoresBf16,
      .attn_values_bf16 = AttnValuesBf16,
      .attn_scores_q8 = AttnScoresQ8,
      .attn_values_q8 = AttnValuesQ8,
      .q8_layout = WeightLayout::kRowGroups16,
      .q4_layout = WeightLayout::kRowGroups16,
  };
  return &k;
}

}  // namespace g4
