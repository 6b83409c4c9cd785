// Whole-tensor operations used by the forward pass. Activations are fp32, row-major [n, dim].
// Each op is one pass; threading happens here (over output rows or (row, head) pairs), never in
// the model code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/weight_matrix.h"

namespace g4 {

// The largest stretch of one matrix a decode (n = 1) task streams. Each task starts a new stream
// that the prefetchers must pick up again: 600 MB matrix-vector on 2 threads, g4_microbench
// BM_Decode, 16-19 GB/s with 32 KiB tasks and 23-27 with 128-256 KiB (Intel VM); on the Zen 5 VM,
// E2B q8 decode, 128 KiB and 1 MiB alternated 6 times: 18.8 vs 21.0 tok/s on average, 1 MiB ahead
// in 5 of the 6 pairs (and in 2 of 3 for q4); 4 MiB no better (docs/notes/benchmarks-lab.md).
constexpr size_t kMaxDecodeTaskBytes = size_t{1} << 20;

// y[n, w.rows] = x[n, w.cols] * W^T.
void MatMul(const WeightMatrix& w, const float* x, int n, float* y, ThreadPool& pool);

// Several products of the same x (q/k/v, gate/up) in one pass over the pool:
// outs[j].y[n, outs[j].w->rows] = x[n, cols] * W_j^T. Every W_j has the same cols; at most 4.
struct MatMulOutput {
  const WeightMatrix* w;
  float* y;
};
void MatMulShared(const MatMulOutput* outs, int n_outs, const float* x, int n, ThreadPool& pool);

// gate.y = GeluTanh(x W_gate^T) * (x W_up^T), up.y holds x W_up^T: the feed-forward's first
// half in one pass, each task finishing the product of its own rows. Gate and up have the same
// shape, type and layout.
void MatMulGeluMul(const MatMulOutput& gate, const MatMulOutput& up, const float* x, int n,
                   ThreadPool& pool);

// Asks for all of W's bytes into L2 (a hint: returns once the requests are issued, reads
// nothing). For a chain of small products that will read each matrix once from memory: asked
// together, the lines come in parallel instead of each product waiting for its own.
void PrefetchWeights(const WeightMatrix& w);

// Row `row` of W widened to fp32 (embedding lookup from the tied matrix).
void DequantizeRow(const WeightMatrix& w, int row, float* out);

// out = x / sqrt(mean(x^2) + eps) * weight (weight may be null: the weightless v-norm).
void RmsNorm(const float* x, const float* weight, int dim, float eps, float* out);

// gelu_pytorch_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
float GeluTanh(float x);

// gate[i] = GeluTanh(gate[i]) * up[i] for i < n, vectorised, split over the pool when large.
void GeluTanhMul(float* gate, const float* up, int64_t n, ThreadPool& pool);

// Rotates pairs (j, j + head_dim/2) for j < n_pairs by pos * inv_freq[j]; cos/sin precomputed
// by the caller (RopeTable) for this position.
void ApplyRope(float* head, int head_dim, int n_pairs, const float* cos, const float* sin);

// softcap * tanh(x / softcap) in place.
void Softcap(float* x, int64_t n, float softcap);

// Index of the first largest value (NaN never wins; 0 if all are NaN or -inf).
int64_t ArgMax(const float* x, int64_t n);

}  // namespace g4
