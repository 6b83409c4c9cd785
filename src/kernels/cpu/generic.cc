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

}  // namespace

const CpuKernels& GenericKernels() {
  static const CpuKernels k{"generic", DotF32, DotBf16F32, Bf16ToF32Row, AxpyF32};
  return k;
}

}  // namespace g4
