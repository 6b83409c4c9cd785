// Portable scalar kernels: the oracle every SIMD table is tested against.
#include <cmath>

#include "base/half.h"
#include "kernels/cpu_kernels.h"

namespace g4 {
namespace {

float DotF32(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

float DotBf16F32(const uint16_t* w, const float* x, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += Bf16ToF32(w[i]) * x[i];
  return s;
}

void Bf16ToF32Row(const uint16_t* src, float* dst, int n) {
  for (int i = 0; i < n; ++i) dst[i] = Bf16ToF32(src[i]);
}

void AxpyF32(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

void QuantizeRowQ8(const float* x, int cols, int8_t* q, float* scale, float* corr) {
  for (int b = 0; b < cols / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0;
    for (int i = 0; i < kQuantBlock; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int i = 0; i < kQuantBlock; ++i) {
      const int v = static_cast<int>(std::nearbyint(xb[i] * inv));
      q[b * kQuantBlock + i] = static_cast<int8_t>(v);
      sum += v;
    }
    scale[b] = amax / 127.0f;
    corr[b] = -8.0f * scale[b] * static_cast<float>(sum);
  }
}

void MatMulQ8(const WeightMatrix& w, int r0, int r1, const QuantizedRows& x, float* y, int64_t ldy) {
  const int nb = w.blocks();
  for (int r = r0; r < r1; ++r) {
    const int8_t* wq = reinterpret_cast<const int8_t*>(w.quants(r));
    const uint16_t* wd = w.scales(r);
    for (int i = 0; i < x.n; ++i) {
      const int8_t* aq = x.q + static_cast<int64_t>(i) * x.cols;
      const float* as = x.scale + static_cast<int64_t>(i) * nb;
      float s = 0;
      for (int b = 0; b < nb; ++b) {
        int dot = 0;
        for (int j = 0; j < kQuantBlock; ++j) dot += wq[b * kQuantBlock + j] * aq[b * kQuantBlock + j];
        s += F16ToF32(wd[b]) * as[b] * static_cast<float>(dot);
      }
      y[i * ldy + r] = s;
    }
  }
}

void MatMulQ4(const WeightMatrix& w, int r0, int r1, const QuantizedRows& x, float* y, int64_t ldy) {
  const int nb = w.blocks();
  for (int r = r0; r < r1; ++r) {
    const uint8_t* wq = w.quants(r);
    const uint16_t* wd = w.scales(r);
    for (int i = 0; i < x.n; ++i) {
      const int8_t* aq = x.q + static_cast<int64_t>(i) * x.cols;
      const float* as = x.scale + static_cast<int64_t>(i) * nb;
      const float* ac = x.corr + static_cast<int64_t>(i) * nb;
      float s = 0;
      for (int b = 0; b < nb; ++b) {
        // Block b lives in chunk b/2: low nibbles for even b, high nibbles for odd b.
        const uint8_t* chunk = wq + (b / 2) * 32;
        const int shift = (b % 2) * 4;
        int dot = 0;
        for (int j = 0; j < kQuantBlock; ++j) dot += ((chunk[j] >> shift) & 15) * aq[b * kQuantBlock + j];
        const float d = F16ToF32(wd[b]);
        s += d * as[b] * static_cast<float>(dot) + d * ac[b];
      }
      y[i * ldy + r] = s;
    }
  }
}

void MatMulBf16(const WeightMatrix& w, int r0, int r1, const float* x, int n, float* y, int64_t ldy) {
  const uint16_t* wd = static_cast<const uint16_t*>(w.data);
  for (int r = r0; r < r1; ++r)
    for (int i = 0; i < n; ++i)
      y[i * ldy + r] = DotBf16F32(wd + static_cast<int64_t>(r) * w.cols, x + static_cast<int64_t>(i) * w.cols, w.cols);
}

}  // namespace

const CpuKernels& GenericKernels() {
  static const CpuKernels k{"generic", DotF32,   DotBf16F32, Bf16ToF32Row, AxpyF32,
                            QuantizeRowQ8, MatMulQ8, MatMulQ4, MatMulBf16};
  return k;
}

}  // namespace g4
