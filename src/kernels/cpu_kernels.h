// The inner loops, one table per instruction set. cpu/generic is always built and is the
// baseline the SIMD versions are tested against; the table is chosen once at start-up
// (G4_FORCE_ISA=generic|avx2|avx512 overrides the detection).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/weight_matrix.h"

namespace g4 {

// Activation rows quantized for the integer dot products against q8/q4 weights: per block of 32
// values an int8 vector and its scale (x ~ scale * q), plus corr = -8 * scale * sum(q), the term
// that q4's unsigned nibbles (q - 8) need (precomputed once per activation, not per weight row).
struct QuantizedRows {
  int n = 0;
  int cols = 0;
  const int8_t* q = nullptr;     // [n][cols]
  const float* scale = nullptr;  // [n][cols/32]
  const float* corr = nullptr;   // [n][cols/32]
};

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
  // Quantizes one row of `cols` (a multiple of 32) floats: q, scale[cols/32], corr[cols/32].
  // Round to nearest even of x * 127 / max|x| per block, so every ISA gets the same ints.
  void (*quantize_row_q8)(const float* x, int cols, int8_t* q, float* scale, float* corr);
  // Weight quantization at load (layouts in weight_matrix.h), one row of `cols` values. q4 picks
  // each block's scale by a least-squares search over grid widths (kernels/quantize.h). The ISAs
  // may differ in the choice when two candidates tie to rounding.
  void (*quantize_row_q8w)(const float* x, int cols, int8_t* q, uint16_t* scales);
  void (*quantize_row_q4w)(const float* x, int cols, uint8_t* q, uint16_t* scales);
  // y[i * ldy + r] = sum_c W[r, c] * x_i[c] for rows r in [r0, r1) and every row i of x.
  // Rows of W are read once per tile of x rows (register-tiled), so n > 1 costs far less than n
  // matrix-vector products.
  void (*matmul_q8)(const WeightMatrix& w, int r0, int r1, const QuantizedRows& x, float* y,
                    int64_t ldy);
  void (*matmul_q4)(const WeightMatrix& w, int r0, int r1, const QuantizedRows& x, float* y,
                    int64_t ldy);
  void (*matmul_bf16)(const WeightMatrix& w, int r0, int r1, const float* x, int n, float* y,
                      int64_t ldy);
  // gate[i] = gelu_pytorch_tanh(gate[i]) * up[i]. SIMD tanh is exp-based: within ~1e-7 of tanhf.
  void (*gelu_tanh_mul)(float* gate, const float* up, int64_t n);
};

const CpuKernels& GenericKernels();
const CpuKernels* Avx2Kernels();    // nullptr when not compiled in
const CpuKernels* Avx512Kernels();  // AVX-512 F/BW/VL + VNNI q8/q4 products over the AVX2 table
// The SIMD tables this CPU can run, slowest first (tests compare each with generic).
std::vector<const CpuKernels*> UsableSimdKernels();
// The table in use: the last usable SIMD table, else generic (G4_FORCE_ISA picks another).
const CpuKernels& ActiveKernels();

}  // namespace g4
