#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/half.h"
#include "kernels/cpu_kernels.h"
#include "kernels/quantize.h"

namespace g4 {

namespace {

// Activation rows quantized for q8/q4 products. Grow-only, per calling thread, so steady-state
// decode does not allocate.
struct QuantScratch {
  std::vector<int8_t> q;
  std::vector<float> scale, corr;
};

QuantizedRows QuantizeRows(const float* x, int n, int cols, ThreadPool& pool) {
  thread_local QuantScratch scratch;
  // A thread_local is never captured: workers would see their own. Name the caller's explicitly.
  QuantScratch& s = scratch;
  const size_t nb = static_cast<size_t>(cols) / kQuantBlock;
  if (s.q.size() < static_cast<size_t>(n) * cols) s.q.resize(static_cast<size_t>(n) * cols);
  if (s.scale.size() < n * nb) {
    s.scale.resize(n * nb);
    s.corr.resize(n * nb);
  }
  const CpuKernels& k = ActiveKernels();
  auto row = [&](int64_t i, int) {
    k.quantize_row_q8(x + i * cols, cols, s.q.data() + i * cols, s.scale.data() + i * nb,
                      s.corr.data() + i * nb);
  };
  if (n >= 8) {
    pool.ParallelFor(n, row);
  } else {
    for (int i = 0; i < n; ++i) row(i, 0);
  }
  return QuantizedRows{n, cols, s.q.data(), s.scale.data(), s.corr.data()};
}

// Row-group matrices are split at group boundaries.
int AlignRows(const WeightMatrix& w, int rows) {
  return w.layout == WeightLayout::kRowGroups16 ? std::max(kRowGroup, rows / kRowGroup * kRowGroup)
                                                : rows;
}

// Decode (n = 1, or up to CpuKernels::bf16_pass_rows rows of bf16) streams W once: tasks of up to
// kMaxDecodeTaskBytes, and at least 4 per thread over all the matrices of one call, so both threads
// stay busy to the end and the dynamic queue absorbs a core slowed by a neighbour. Fewer, longer
// tasks stream better: 4 per thread decoded E2B q4 ~2% faster than 8 (6 in-process A/B runs,
// 1.007-1.036; E2B q8 and E4B q4 1.005-1.027), 16 per thread ~2% slower, 2 per thread no better
// than 4. `call_bytes`: the weight bytes of the whole call; `row_bytes`: one row of every matrix a
// task covers (gate and up together).
int DecodeRowsPerTask(const WeightMatrix& w, size_t row_bytes, size_t call_bytes, int threads) {
  const size_t task_bytes = std::clamp<size_t>(
      call_bytes / (4 * static_cast<size_t>(std::max(1, threads))), 16384, kMaxDecodeTaskBytes);
  const int rows = static_cast<int>(std::clamp<size_t>(task_bytes / row_bytes, 4, 65536));
  return AlignRows(w, std::max(4, rows / 4 * 4));
}

// Many x rows (prefill, batched decode): tasks are (block of W rows) x (block of x rows), sized
// so both blocks stay in L2 (~128 KiB of W, 64 x rows) while the register tiles pass over them.
// Without the x blocking a wide input (down_proj: 512 x 12288) is re-read from memory by every
// task.
constexpr int kXRowsPerTask = 64;
// Row-group tasks take an even number of groups, at least two: the AVX-512 tiles go two groups at
// a time, and a group left alone runs the one-group tile. Before, a 1536-column q4 task (144 rows)
// left one group of nine, and rows of more than ~7,000 q4 columns (E2B's double-wide down_proj,
// E4B's down_proj; ~3,800 in q8) made tasks of a single group: the one-group tile took 21% of the
// CPU serving E2B q4 to 16 clients (Zen 4; docs/performance.md "Even row groups per task"). The
// AVX2 tiles (one group at a time) measured the same either way.
int PrefillRowsPerTask(const WeightMatrix& w, size_t row_bytes) {
  const int rows =
      std::max(8, static_cast<int>(std::clamp<size_t>(131072 / row_bytes, 8, 512)) / 8 * 8);
  if (w.layout != WeightLayout::kRowGroups16) return rows;
  return std::max(2 * kRowGroup, rows / (2 * kRowGroup) * (2 * kRowGroup));
}

// y rows [r0, r1) x x rows [i0, i1) of one product.
void ProductBlock(const CpuKernels& k, const WeightMatrix& w, int r0, int r1, int i0, int i1,
                  const float* x, const QuantizedRows& xq, float* y) {
  const int rows = w.rows, cols = w.cols;
  switch (w.type) {
    case WeightType::kF32: {
      const float* wd = static_cast<const float*>(w.data);
      for (int i = i0; i < i1; ++i)
        for (int r = r0; r < r1; ++r)
          y[static_cast<int64_t>(i) * rows + r] = k.dot_f32(
              wd + static_cast<int64_t>(r) * cols, x + static_cast<int64_t>(i) * cols, cols);
      return;
    }
    case WeightType::kBF16:
      k.matmul_bf16(w, r0, r1, x + static_cast<int64_t>(i0) * cols, i1 - i0,
                    y + static_cast<int64_t>(i0) * rows, rows);
      return;
    case WeightType::kQ8:
    case WeightType::kQ4: {
      (w.type == WeightType::kQ8 ? k.matmul_q8 : k.matmul_q4)(
          w, r0, r1, xq.Rows(i0, i1), y + static_cast<int64_t>(i0) * rows, rows);
      return;
    }
  }
}

// One pass over the pool for several products of the same x. A job is one matrix, or (gated)
// gate and up split at the same rows, so each task can finish gelu(gate) * up on its own rows
// while they are in cache, without another hand-off between threads.
void RunProducts(const MatMulOutput* outs, int n_outs, bool gated, const float* x, int n,
                 ThreadPool& pool) {
  if (n_outs <= 0 || n <= 0) return;
  const CpuKernels& k = ActiveKernels();
  int cols = 0;
  for (int j = 0; j < n_outs && cols == 0; ++j) cols = outs[j].w->rows > 0 ? outs[j].w->cols : 0;
  constexpr int kMaxOutputs = 4;
  if (n_outs > kMaxOutputs) {
    std::fprintf(stderr, "g4: internal error: MatMulShared takes at most %d matrices\n",
                 kMaxOutputs);
    std::abort();
  }
  // Task t of a job: W rows block t % row_tasks, x rows block t / row_tasks.
  struct Job {
    const MatMulOutput* members;
    int n_members, rows, rows_per_task;
    int64_t row_tasks, first_task;
  };
  Job jobs[kMaxOutputs];
  int64_t n_tasks = 0;
  bool quantized = false;
  const int x_tasks = (n + kXRowsPerTask - 1) / kXRowsPerTask;
  size_t call_bytes = 0;
  for (int j = 0; j < n_outs; ++j)
    call_bytes += WeightBytes(outs[j].w->type, outs[j].w->rows, outs[j].w->cols);
  const int threads = pool.size();
  int n_jobs = 0;
  for (int j = 0; j < n_outs; j += gated ? 2 : 1) {
    const WeightMatrix& w = *outs[j].w;
    const int n_members = gated ? 2 : 1;
    size_t row_bytes = 0;
    for (int m = 0; m < n_members; ++m) {
      const WeightMatrix& wm = *outs[j + m].w;
      if (wm.rows != w.rows || (wm.rows > 0 && wm.cols != cols)) {
        std::fprintf(stderr, "g4: internal error: MatMulShared given %dx%d and %dx%d matrices\n",
                     w.rows, cols, wm.rows, wm.cols);
        std::abort();
      }
      if ((wm.type == WeightType::kQ8 || wm.type == WeightType::kQ4) &&
          wm.layout != WeightLayout::kRows && wm.layout != k.LayoutFor(wm.type)) {
        std::fprintf(stderr, "g4: internal error: a row-group matrix given to the %s kernels\n",
                     k.name);
        std::abort();
      }
      if (gated && (wm.layout != w.layout || wm.type != w.type)) {
        std::fprintf(stderr, "g4: internal error: gate and up differ in type or layout\n");
        std::abort();
      }
      quantized |= wm.type == WeightType::kQ8 || wm.type == WeightType::kQ4;
      row_bytes += WeightBytes(wm.type, 1, wm.cols);
    }
    if (w.rows == 0) continue;  // nothing on this rank
    row_bytes = std::max<size_t>(1, row_bytes);
    // A few rows of bf16 (a speculative verify pass) are one pass over W as well: streamed.
    const bool streamed = n == 1 || (w.type == WeightType::kBF16 && n <= k.bf16_pass_rows);
    const int rows_per_task = streamed ? DecodeRowsPerTask(w, row_bytes, call_bytes, threads)
                                       : PrefillRowsPerTask(w, row_bytes);
    const int64_t row_tasks = (w.rows + rows_per_task - 1) / rows_per_task;
    jobs[n_jobs++] = Job{&outs[j], n_members, w.rows, rows_per_task, row_tasks, n_tasks};
    n_tasks += row_tasks * x_tasks;
  }
  if (n_tasks == 0) return;
  const QuantizedRows xq = quantized ? QuantizeRows(x, n, cols, pool) : QuantizedRows{};
  pool.ParallelFor(n_tasks, [&](int64_t task, int) {
    int j = n_jobs - 1;
    while (task < jobs[j].first_task) --j;
    const Job& job = jobs[j];
    const int64_t t = task - job.first_task;
    const int r0 = static_cast<int>(t % job.row_tasks) * job.rows_per_task;
    const int r1 = std::min(job.rows, r0 + job.rows_per_task);
    const int i0 = static_cast<int>(t / job.row_tasks) * kXRowsPerTask;
    const int i1 = std::min(n, i0 + kXRowsPerTask);
    for (int m = 0; m < job.n_members; ++m)
      ProductBlock(k, *job.members[m].w, r0, r1, i0, i1, x, xq, job.members[m].y);
    if (gated)
      for (int i = i0; i < i1; ++i) {
        const int64_t at = static_cast<int64_t>(i) * job.rows + r0;
        k.gelu_tanh_mul(job.members[0].y + at, job.members[1].y + at, r1 - r0);
      }
  });
}

}  // namespace

void MatMul(const WeightMatrix& w, const float* x, int n, float* y, ThreadPool& pool) {
  const MatMulOutput out{&w, y};
  MatMulShared(&out, 1, x, n, pool);
}

// All products share x: it is quantized once, and one ParallelFor covers every matrix's tasks,
// so the small projections (E2B's k/v: 0.2 MB, a few microseconds) do not each pay a hand-off
// between threads and a wait for the slowest task.
void MatMulShared(const MatMulOutput* outs, int n_outs, const float* x, int n, ThreadPool& pool) {
  RunProducts(outs, n_outs, false, x, n, pool);
}

void MatMulGeluMul(const MatMulOutput& gate, const MatMulOutput& up, const float* x, int n,
                   ThreadPool& pool) {
  const MatMulOutput outs[2] = {gate, up};
  RunProducts(outs, 2, true, x, n, pool);
}

void DequantizeRow(const WeightMatrix& w, int row, float* out) { DequantizeRowTo(w, row, out); }

namespace {
// out[i] = x[i] * scale (* weight[i]). Separate in-place and out-of-place loops, each with
// restrict pointers, so the compiler vectorises them (it would not with out possibly overlapping
// x or weight at an offset).
void ScaleInPlace(float* __restrict x, const float* __restrict weight, int dim, float scale) {
  if (weight) {
    for (int i = 0; i < dim; ++i) x[i] = x[i] * scale * weight[i];
  } else {
    for (int i = 0; i < dim; ++i) x[i] *= scale;
  }
}
void ScaleTo(const float* __restrict x, const float* __restrict weight, int dim, float scale,
             float* __restrict out) {
  if (weight) {
    for (int i = 0; i < dim; ++i) out[i] = x[i] * scale * weight[i];
  } else {
    for (int i = 0; i < dim; ++i) out[i] = x[i] * scale;
  }
}
}  // namespace

void RmsNorm(const float* x, const float* weight, int dim, float eps, float* out) {
  // SIMD sum of squares (in double): a scalar one, and a scalar scaling loop, made this the
  // largest serial step of a decoded token while the other thread waits.
  const double ss = ActiveKernels().sum_squares(x, dim);
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
  if (out == x) {
    ScaleInPlace(out, weight, dim, scale);
  } else {
    ScaleTo(x, weight, dim, scale, out);
  }
}

float GeluTanh(float x) {
  const float kAlpha = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(kAlpha * (x + 0.044715f * x * x * x)));
}

void GeluTanhMul(float* gate, const float* up, int64_t n, ThreadPool& pool) {
  const CpuKernels& k = ActiveKernels();
  constexpr int64_t kChunk = 16384;  // below this a pool hand-off costs more than it saves
  if (n <= kChunk) {
    k.gelu_tanh_mul(gate, up, n);
    return;
  }
  pool.ParallelFor((n + kChunk - 1) / kChunk, [&](int64_t t, int) {
    const int64_t begin = t * kChunk;
    k.gelu_tanh_mul(gate + begin, up + begin, std::min(kChunk, n - begin));
  });
}

void ApplyRope(float* head, int head_dim, int n_pairs, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int j = 0; j < n_pairs; ++j) {
    float a = head[j], b = head[j + half];
    head[j] = a * cos[j] - b * sin[j];
    head[j + half] = b * cos[j] + a * sin[j];
  }
}

void Softcap(float* x, int64_t n, float softcap) {
  if (softcap <= 0) return;
  const float inv = 1.0f / softcap;
  for (int64_t i = 0; i < n; ++i) x[i] = softcap * std::tanh(x[i] * inv);
}

int64_t ArgMax(const float* x, int64_t n) { return ActiveKernels().argmax(x, n); }

void PrefetchWeights(const WeightMatrix& w) {
  const char* bytes = static_cast<const char*>(w.data);
  const size_t n = WeightBytes(w.type, w.rows, w.cols);
  for (size_t b = 0; b < n; b += 64) __builtin_prefetch(bytes + b, 0, 2);
}

}  // namespace g4
