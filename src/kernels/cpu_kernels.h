// The inner loops, one table per instruction set. cpu/generic is always built and is the
// baseline the SIMD versions are tested against; the table is chosen once at start-up
// (G4_FORCE_ISA=generic|avx2|avx512|avx512bf16 overrides the detection).
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
  // Rows [i0, i1) of these.
  QuantizedRows Rows(int i0, int i1) const {
    const int64_t blocks = cols / kQuantBlock;
    return {i1 - i0, cols, q + i0 * static_cast<int64_t>(cols), scale + i0 * blocks,
            corr + i0 * blocks};
  }
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
  // sum_i x[i]^2, accumulated in double (RMSNorm's statistic; float products are exact there).
  double (*sum_squares)(const float* x, int n);
  // Index of the first largest x[i] (greedy sampling over the vocabulary). NaN is never chosen;
  // 0 when every value is NaN or -inf.
  int64_t (*argmax)(const float* x, int64_t n);
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
  // How many x rows matmul_bf16 covers in one pass over W (each weight row read once for all of
  // them): up to this many, a product streams its weights like decode (kernels/ops.cc).
  int bf16_pass_rows = 1;
  // Whether matmul_bf16 rounds the activations to bf16 (nearest even) before multiplying, as the
  // bf16 dot-product instructions need; the others multiply the float activations.
  bool bf16_rounds_activations = false;
  // Chosen only when G4_FORCE_ISA names it: a table that trades accuracy beyond the reference
  // tests' float-noise tolerances for speed (avx512bf16).
  bool opt_in = false;
  // gate[i] = gelu_pytorch_tanh(gate[i]) * up[i]. SIMD tanh is exp-based: within ~1e-7 of tanhf.
  void (*gelu_tanh_mul)(float* gate, const float* up, int64_t n);
  // x[i] = exp(x[i] - shift) for i < n, with x[i] <= shift (softmax over attention scores, shift
  // = their max); returns the sum. SIMD exp: within ~2e-7 relative of exp.
  double (*exp_sum)(float* x, int n, float shift);
  // Attention over one KV head's keys/values (rows `k_stride` / `v_stride` floats apart) for the
  // nq query heads that share it. Scores: s[c * s_stride + j] = q_c . k_j (q_c = q + c * q_stride)
  // for j < len. Values: o_c[d] += sum_j p[c * p_stride + j] * v_j[d] (o_c = o + c * o_stride).
  // Register-tiled over several keys and heads at once: each K/V row is loaded once per group of
  // heads, and the outputs stay in registers across the keys.
  void (*attn_scores)(const float* q, int nq, int64_t q_stride, const float* k, int64_t k_stride,
                      int len, int hd, float* s, int64_t s_stride);
  void (*attn_values)(const float* p, int64_t p_stride, int nq, const float* v, int64_t v_stride,
                      int len, int hd, float* o, int64_t o_stride);
  // The same over a compact cache (kernels/kv_format.h): k / v point at the KV head's bytes in
  // the first key's row, and rows are k_stride / v_stride bytes apart. Keys and values are
  // widened to float as they are loaded; the sums are float as above.
  void (*attn_scores_bf16)(const float* q, int nq, int64_t q_stride, const uint8_t* k,
                           int64_t k_stride, int len, int hd, float* s, int64_t s_stride);
  void (*attn_values_bf16)(const float* p, int64_t p_stride, int nq, const uint8_t* v,
                           int64_t v_stride, int len, int hd, float* o, int64_t o_stride);
  void (*attn_scores_q8)(const float* q, int nq, int64_t q_stride, const uint8_t* k,
                         int64_t k_stride, int len, int hd, float* s, int64_t s_stride);
  void (*attn_values_q8)(const float* p, int64_t p_stride, int nq, const uint8_t* v,
                         int64_t v_stride, int len, int hd, float* o, int64_t o_stride);
  // The layouts matmul_q8 / matmul_q4 are fastest on; the model reorders its q8/q4 matrices
  // into them at load (kernels/quantize.h ToRowGroups). Every table also takes kRows;
  // kRowGroups16 only the tables that name it here, and then r0/r1 are multiples of 16.
  WeightLayout q8_layout;
  WeightLayout q4_layout;

  WeightLayout LayoutFor(WeightType type) const {
    return type == WeightType::kQ8   ? q8_layout
           : type == WeightType::kQ4 ? q4_layout
                                     : WeightLayout::kRows;
  }
};

const CpuKernels& GenericKernels();
const CpuKernels* Avx2Kernels();    // nullptr when not compiled in
const CpuKernels* Avx512Kernels();  // AVX-512 F/BW/VL + VNNI q8/q4 products over the AVX2 table
// AVX-512 BF16 bf16-weight products (activations as two bf16 halves) over the AVX-512 table;
// opt_in.
const CpuKernels* Avx512Bf16Kernels();
// The SIMD tables this CPU can run, slowest first (tests compare each with generic).
std::vector<const CpuKernels*> UsableSimdKernels();
// Whether products of a few activation rows prefetch their weights in software as decode's one-row
// pass over long rows always does (bf16 passes of 2-8 rows and one row over short W rows; q8/q4
// passes of up to 16, in their first tile of x rows). Measured with BM_VerifyHead (bf16, one
// thread): on AMD Zen 5 (family 1Ah) the hardware prefetcher falls behind such a pass (2 rows
// 5.9-7.3 ms without, 4.0-4.8 with; 1 row 3.0-3.7), on Zen 4 (family 19h) the prefetches slowed it
// (2 rows 6.4 ms with, 3.7 without); and with BM_Decode/3/2/600/{2,3} on Zen 5 (q4, 600 MB, 2
// threads): 2 rows 16.7 ms with, 19.0-23.9 without, 3 rows 15.8-16.1 with, 19.1-21.1 without, one
// row 13.5. Other CPUs keep the Zen 4 choice, the one measured first. Without it, the AVX-512 bf16
// passes over short W rows also take smaller tiles (bf16_matmul_avx512.cc, kBf16ShortRowCols in
// cpu/tiling.h).
bool SoftwarePrefetchInPasses();
// The table in use: the last usable SIMD table that is not opt_in, else generic (G4_FORCE_ISA
// picks another, opt_in ones included).
const CpuKernels& ActiveKernels();

}  // namespace g4
