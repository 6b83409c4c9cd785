#include "kernels/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu_kernels.h"

namespace g4 {
namespace {

// The most query heads done together on one KV head (bounds the per-task stack arrays).
constexpr int kMaxRun = 64;
constexpr int kMaxRuns = 256;  // layers have at most a few tens of query heads

// A run of consecutive local query heads that read the same KV head.
struct Run {
  int h0, count, g;
};

int FirstVisible(const AttentionShape& shape, int64_t pos) {
  // Sliding: position j is visible iff 0 <= pos - j < window.
  return shape.window > 0 ? static_cast<int>(std::max<int64_t>(0, pos - shape.window + 1)) : 0;
}

// Position chunks per row: more than one only for a lone decode row with a long context (else
// rows x runs give the threads enough tasks).
int SplitsFor(const AttentionShape& shape, const AttentionRow* rows, int n_rows, int n_runs,
              int threads) {
  if (n_rows != 1) return 1;
  const int64_t visible = rows[0].pos - FirstVisible(shape, rows[0].pos) + 1;
  const int want_tasks = 2 * threads;
  int splits = static_cast<int>(std::clamp<int64_t>(visible / 128, 1, want_tasks));
  // Few KV heads (E2B has one): split shorter contexts too, down to 32 positions a chunk, so that
  // one thread does not attend alone while the other waits.
  if (n_runs * splits < want_tasks)
    splits = static_cast<int>(std::max<int64_t>(
        splits, std::min<int64_t>((want_tasks + n_runs - 1) / n_runs, visible / 32)));
  return splits;
}

}  // namespace

void AttentionScratch::Ensure(int threads, size_t per_thread, size_t partial) {
  per_thread_ = std::max(per_thread_, per_thread);
  const size_t scores = static_cast<size_t>(threads) * per_thread_;
  if (scores_.size() < scores) scores_.resize(scores);
  if (partial_.size() < partial) partial_.resize(partial);
}

void AttentionScratch::Reserve(int threads, int max_heads_q, int max_head_dim,
                               int64_t max_positions) {
  const size_t heads = static_cast<size_t>(std::min(max_heads_q, kMaxRun));
  // A split decode has at most 2 * threads chunks per run, and runs x longest run is below
  // 2 * heads (only a tensor-parallel slice starting inside a KV group has a short run).
  Ensure(threads, heads * static_cast<size_t>(max_positions),
         2 * static_cast<size_t>(max_heads_q) * 2 * threads * (max_head_dim + 2));
}

void Attend(const AttentionShape& shape, const AttentionRow* rows, int n_rows,
            AttentionScratch& scratch, ThreadPool& pool) {
  if (n_rows <= 0) return;
  const CpuKernels& k = ActiveKernels();
  const int hd = shape.head_dim, nq = shape.n_heads_q;
  Run runs[kMaxRuns];
  int n_runs = 0;
  for (int h = 0; h < nq && n_runs < kMaxRuns; ++h) {
    const int g = (shape.q_head_offset + h) / shape.group_size - shape.kv_head_offset;
    if (n_runs > 0 && runs[n_runs - 1].g == g && runs[n_runs - 1].count < kMaxRun)
      runs[n_runs - 1].count++;
    else
      runs[n_runs++] = Run{h, 1, g};
  }
  int max_run = 0;
  for (int i = 0; i < n_runs; ++i) max_run = std::max(max_run, runs[i].count);
  const int splits = SplitsFor(shape, rows, n_rows, n_runs, pool.size());

  // Scores of one task: run.count heads x the positions of its chunk.
  int64_t max_len = 0;
  for (int r = 0; r < n_rows; ++r)
    max_len = std::max<int64_t>(max_len, rows[r].pos - FirstVisible(shape, rows[r].pos) + 1);
  max_len = (max_len + splits - 1) / splits;
  const size_t partial_stride = static_cast<size_t>(hd) + 2;  // max, sum, out[hd]
  scratch.Ensure(pool.size(), static_cast<size_t>(max_run) * max_len,
                 splits > 1 ? static_cast<size_t>(n_runs) * splits * max_run * partial_stride : 0);
  float* partials = scratch.partial_.data();

  pool.ParallelFor(static_cast<int64_t>(n_rows) * n_runs * splits, [&](int64_t task, int thread) {
    const int split = static_cast<int>(task % splits);
    const int run_index = static_cast<int>(task / splits % n_runs);
    const AttentionRow& row = rows[task / splits / n_runs];
    const Run run = runs[run_index];
    const int64_t lo = FirstVisible(shape, row.pos);
    const int64_t per_split = (row.pos - lo + 1 + splits - 1) / splits;
    const int64_t j0 = lo + split * per_split, j1 = std::min(row.pos, j0 + per_split - 1);
    const int len = static_cast<int>(std::max<int64_t>(0, j1 - j0 + 1));
    float* scores = scratch.scores(thread);
    const float* q0 = row.q + static_cast<size_t>(run.h0) * hd;
    // Stretches of consecutive stored rows (a sliding ring wraps at most once in [j0, j1]).
    // `at`: bytes from the slot's start to the run's KV head in the stretch's first row.
    const size_t head_at = KvBytes(row.type, hd, static_cast<int64_t>(run.g) * hd);
    auto for_stretches = [&](auto&& fn) {
      for (int64_t a = j0; a <= j1;) {
        const int64_t b = std::min(j1, a + (row.capacity - a % row.capacity) - 1);
        fn(static_cast<size_t>(a % row.capacity) * row.stride + head_at, a,
           static_cast<int>(b - a + 1));
        a = b + 1;
      }
    };
    const uint8_t* row_k = static_cast<const uint8_t*>(row.k);
    const uint8_t* row_v = static_cast<const uint8_t*>(row.v);
    for_stretches([&](size_t at, int64_t a, int count) {
      float* s = scores + (a - j0);
      switch (row.type) {
        case KvType::kF32:
          k.attn_scores(q0, run.count, hd, reinterpret_cast<const float*>(row_k + at),
                        row.stride / 4, count, hd, s, len);
          break;
        case KvType::kBF16:
          k.attn_scores_bf16(q0, run.count, hd, row_k + at, row.stride, count, hd, s, len);
          break;
        case KvType::kQ8:
          k.attn_scores_q8(q0, run.count, hd, row_k + at, row.stride, count, hd, s, len);
          break;
      }
    });
    float max_score[kMaxRun], sum[kMaxRun];
    float* outs[kMaxRun];
    for (int c = 0; c < run.count; ++c) {
      float* sc = scores + static_cast<size_t>(c) * len;
      float m = -INFINITY;
      for (int j = 0; j < len; ++j) m = std::max(m, sc[j]);
      sum[c] = static_cast<float>(k.exp_sum(sc, len, m));
      max_score[c] = m;
      outs[c] = splits == 1 ? row.out + static_cast<size_t>(run.h0 + c) * hd
                            : partials +
                                  ((static_cast<size_t>(run_index) * splits + split) * max_run + c) *
                                      partial_stride +
                                  2;
      std::fill(outs[c], outs[c] + hd, 0.0f);
    }
    const int64_t out_stride = splits == 1 ? hd : static_cast<int64_t>(partial_stride);
    for_stretches([&](size_t at, int64_t a, int count) {
      const float* p = scores + (a - j0);
      switch (row.type) {
        case KvType::kF32:
          k.attn_values(p, len, run.count, reinterpret_cast<const float*>(row_v + at),
                        row.stride / 4, count, hd, outs[0], out_stride);
          break;
        case KvType::kBF16:
          k.attn_values_bf16(p, len, run.count, row_v + at, row.stride, count, hd, outs[0],
                             out_stride);
          break;
        case KvType::kQ8:
          k.attn_values_q8(p, len, run.count, row_v + at, row.stride, count, hd, outs[0],
                           out_stride);
          break;
      }
    });
    for (int c = 0; c < run.count; ++c) {
      if (splits == 1) {
        const float inv = 1.0f / sum[c];
        for (int i = 0; i < hd; ++i) outs[c][i] *= inv;
      } else {
        outs[c][-2] = max_score[c];
        outs[c][-1] = sum[c];
      }
    }
  });
  if (splits == 1) return;
  // Merge the chunks of the one row: rescale each partial to the common max.
  for (int ri = 0; ri < n_runs; ++ri)
    for (int c = 0; c < runs[ri].count; ++c) {
      auto partial = [&](int s) {
        return partials + ((static_cast<size_t>(ri) * splits + s) * max_run + c) * partial_stride;
      };
      float m = -INFINITY;
      for (int s = 0; s < splits; ++s) m = std::max(m, partial(s)[0]);
      double total = 0;
      float* out = rows[0].out + static_cast<size_t>(runs[ri].h0 + c) * hd;
      std::fill(out, out + hd, 0.0f);
      for (int s = 0; s < splits; ++s) {
        const float* p = partial(s);
        if (p[1] == 0) continue;  // empty chunk
        const float scale = std::exp(p[0] - m);
        total += static_cast<double>(p[1]) * scale;
        k.axpy_f32(scale, p + 2, out, hd);
      }
      const float inv = static_cast<float>(1.0 / total);
      for (int i = 0; i < hd; ++i) out[i] *= inv;
    }
}

}  // namespace g4
