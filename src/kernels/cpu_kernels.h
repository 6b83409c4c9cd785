// The inner loops, one table per instruction set. cpu/generic is always built and is the
// baseline the SIMD versions are tested against; the table is chosen once at start-up
// (G4_FORCE_ISA=generic|avx2 overrides the detection).
#pragma once

#include <cstdint>

namespace g4 {

struct CpuKernels {
  const char* name;
  // sum_i a[i] * b[i]
  float (*dot_f32)(const float* a, const float* b, int n);
  // sum_i bf16(w[i]) * x[i]
  float (*dot_bf16_f32)(const uint16_t* w, const float* x, int n);
  // dst[i] = bf16(src[i]) widened
  void (*bf16_to_f32)(const uint16_t* src, float* dst, int n);
  // y[i] += a * x[i]
  void (*axpy_f32)(float a, const float* x, float* y, int n);
};

const CpuKernels& GenericKernels();
const CpuKernels* Avx2Kernels();  // nullptr when not compiled in
// The table in use: AVX2+FMA+F16C when the CPU has them, else generic.
const CpuKernels& ActiveKernels();

}  // namespace g4
