// AVX2 + FMA versions of the kernel table. This file is compiled with -mavx2 -mfma -mf16c and
// only called after a CPUID check (kernels/dispatch.cc).
#include <immintrin.h>

#include "base/half.h"
#include "kernels/cpu_kernels.h"

namespace g4 {
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

float DotF32(const float* a, const float* b, int n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
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

}  // namespace

const CpuKernels* Avx2Kernels() {
  static const CpuKernels k{"avx2", DotF32, DotBf16F32, Bf16ToF32Row, AxpyF32};
  return &k;
}

}  // namespace g4
