#include "kernels/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu_kernels.h"

namespace g4 {
namespace {

// The most query heads done together on one KV head (bounds the per-task stack arrays).
constexpr int kMaxRun = 64;
constexpr int kMaxRuns = 256;  // layers have at most a few tens of query heads
// The most rows of one sequence in one query block (bounds the per-task running max and sum).
constexpr int kMaxQueryRows = 32;

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

// Calls fn(bytes from the slot's start to the run's KV head at position a, a, count) for each
// stretch of consecutively stored positions in [j0, j1] (a sliding ring wraps at most once).
template <class Fn>
void ForStretches(const AttentionRow& row, size_t head_at, int64_t j0, int64_t j1, Fn&& fn) {
  for (int64_t a = j0; a <= j1;) {
    const int64_t b = std::min(j1, a + (row.capacity - a % row.capacity) - 1);
    fn(static_cast<size_t>(a % row.capacity) * row.stride + head_at, a, static_cast<int>(b - a + 1));
    a = b + 1;
  }
}

// s[c * s_stride + (j - j0)] = q_c . k_j for the run's nq heads and positions j in [j0, j1].
void Scores(const CpuKernels& k, const AttentionRow& row, const float* q0, int nq, int hd,
            size_t head_at, int64_t j0, int64_t j1, float* s, int64_t s_stride) {
  const uint8_t* row_k = static_cast<const uint8_t*>(row.k);
  ForStretches(row, head_at, j0, j1, [&](size_t at, int64_t a, int count) {
    float* out = s + (a - j0);
    switch (row.type) {
      case KvType::kF32:
        k.attn_scores(q0, nq, hd, reinterpret_cast<const float*>(row_k + at), row.stride / 4, count,
                      hd, out, s_stride);
        break;
      case KvType::kBF16:
        k.attn_scores_bf16(q0, nq, hd, row_k + at, row.stride, count, hd, out, s_stride);
        break;
      case KvType::kQ8:
        k.attn_scores_q8(q0, nq, hd, row_k + at, row.stride, count, hd, out, s_stride);
        break;
    }
  });
}

// o_c += sum_j p[c * p_stride + (j - j0)] v_j over positions j in [j0, j1] (o_c = o + c * o_stride).
void Values(const CpuKernels& k, const AttentionRow& row, const float* p, int64_t p_stride, int nq,
            int hd, size_t head_at, int64_t j0, int64_t j1, float* o, int64_t o_stride) {
  const uint8_t* row_v = static_cast<const uint8_t*>(row.v);
  ForStretches(row, head_at, j0, j1, [&](size_t at, int64_t a, int count) {
    const float* pa = p + (a - j0);
    switch (row.type) {
      case KvType::kF32:
        k.attn_values(pa, p_stride, nq, reinterpret_cast<const float*>(row_v + at), row.stride / 4,
                      count, hd, o, o_stride);
        break;
      case KvType::kBF16:
        k.attn_values_bf16(pa, p_stride, nq, row_v + at, row.stride, count, hd, o, o_stride);
        break;
      case KvType::kQ8:
        k.attn_values_q8(pa, p_stride, nq, row_v + at, row.stride, count, hd, o, o_stride);
        break;
    }
  });
}

// Positions per key block: K and V blocks of one KV head of ~128 KiB each, which stay in the
// core's L2 cache while every row of the query block reads them.
int64_t DefaultKeyBlock(KvType type, int hd) {
  const int64_t bytes = static_cast<int64_t>(KvBytes(type, hd, hd));
  return std::clamp<int64_t>((int64_t{128} << 10) / std::max<int64_t>(1, bytes), 16, 1024);
}

// Attention of a block of n consecutive rows of one sequence (n = 1: any row) for one run of
// query heads, flash-attention style: the visible keys go by in blocks of `key_block` positions,
// each block's K and V read once for all n rows (from cache after the first row), and each row
// keeps a running max and sum per head, rescaling its output when the max grows. One row whose
// keys fit one block takes exactly the single-pass path (scores, max, exp, values, / sum).
void AttendQueryBlock(const CpuKernels& k, const AttentionShape& shape, const AttentionRow* rows,
                      int n, const Run& run, int64_t key_block, float* scores) {
  const int hd = shape.head_dim;
  float max_score[kMaxQueryRows][kMaxRun], sum[kMaxQueryRows][kMaxRun];
  for (int r = 0; r < n; ++r) {
    float* out = rows[r].out + static_cast<size_t>(run.h0) * hd;
    std::fill(out, out + static_cast<size_t>(run.count) * hd, 0.0f);
    std::fill(max_score[r], max_score[r] + run.count, -INFINITY);
    std::fill(sum[r], sum[r] + run.count, 0.0f);
  }
  const size_t head_at = KvBytes(rows[0].type, hd, static_cast<int64_t>(run.g) * hd);
  const int64_t lo = FirstVisible(shape, rows[0].pos), hi = rows[n - 1].pos;
  for (int64_t a = lo; a <= hi; a += key_block) {
    const int64_t b = std::min(hi, a + key_block - 1);
    for (int r = 0; r < n; ++r) {
      const AttentionRow& row = rows[r];
      const int64_t j0 = std::max<int64_t>(a, FirstVisible(shape, row.pos));
      const int64_t j1 = std::min(b, row.pos);
      if (j0 > j1) continue;  // the causal or sliding mask hides this block from this row
      const int len = static_cast<int>(j1 - j0 + 1);
      const float* q0 = row.q + static_cast<size_t>(run.h0) * hd;
      float* out0 = row.out + static_cast<size_t>(run.h0) * hd;
      Scores(k, row, q0, run.count, hd, head_at, j0, j1, scores, len);
      for (int c = 0; c < run.count; ++c) {
        float* sc = scores + static_cast<size_t>(c) * len;
        float m = max_score[r][c];
        for (int j = 0; j < len; ++j) m = std::max(m, sc[j]);
        if (m > max_score[r][c] && max_score[r][c] != -INFINITY) {
          const float rescale = std::exp(max_score[r][c] - m);
          sum[r][c] *= rescale;
          float* o = out0 + static_cast<size_t>(c) * hd;
          for (int i = 0; i < hd; ++i) o[i] *= rescale;
        }
        max_score[r][c] = m;
        sum[r][c] += static_cast<float>(k.exp_sum(sc, len, m));
      }
      Values(k, row, scores, len, run.count, hd, head_at, j0, j1, out0, hd);
    }
  }
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < run.count; ++c) {
      const float inv = 1.0f / sum[r][c];
      float* o = rows[r].out + static_cast<size_t>(run.h0 + c) * hd;
      for (int i = 0; i < hd; ++i) o[i] *= inv;
    }
}

// Splits the rows into query blocks of at most `max_rows` consecutive rows of one sequence;
// block_start gets each block's first row and, last, n_rows.
void QueryBlocks(const AttentionRow* rows, int n_rows, int max_rows, std::vector<int>& block_start) {
  block_start.clear();
  for (int r = 0; r < n_rows; ++r) {
    const bool continues = r > 0 && rows[r].k == rows[r - 1].k && rows[r].pos == rows[r - 1].pos + 1 &&
                           r - block_start.back() < max_rows;
    if (!continues) block_start.push_back(r);
  }
  block_start.push_back(n_rows);
}

// A lone row (decode): tasks are (run, chunk of positions); a long context is split into chunks
// across the threads, each leaving a softmax partial (max, sum, unnormalised output) that is
// merged after.
void AttendLoneRow(const AttentionShape& shape, const AttentionRow& row, const Run* runs,
                   int n_runs, int max_run, AttentionScratch& scratch, ThreadPool& pool) {
  const CpuKernels& k = ActiveKernels();
  const int hd = shape.head_dim;
  const int splits = SplitsFor(shape, &row, 1, n_runs, pool.size());
  const int64_t lo = FirstVisible(shape, row.pos);
  const int64_t per_split = (row.pos - lo + 1 + splits - 1) / splits;
  const size_t partial_stride = static_cast<size_t>(hd) + 2;  // max, sum, out[hd]
  scratch.Ensure(pool.size(), static_cast<size_t>(max_run) * per_split,
                 splits > 1 ? static_cast<size_t>(n_runs) * splits * max_run * partial_stride : 0);
  float* partials = scratch.partials();
  auto partial = [&](int run_index, int split, int c) {
    return partials + ((static_cast<size_t>(run_index) * splits + split) * max_run + c) * partial_stride;
  };
  pool.ParallelFor(static_cast<int64_t>(n_runs) * splits, [&](int64_t task, int thread) {
    const int split = static_cast<int>(task % splits);
    const int run_index = static_cast<int>(task / splits);
    const Run run = runs[run_index];
    if (splits == 1) {  // the whole context in one pass
      AttendQueryBlock(k, shape, &row, 1, run, row.pos - lo + 1, scratch.scores(thread));
      return;
    }
    const int64_t j0 = lo + split * per_split, j1 = std::min(row.pos, j0 + per_split - 1);
    const size_t head_at = KvBytes(row.type, hd, static_cast<int64_t>(run.g) * hd);
    for (int c = 0; c < run.count; ++c) {
      float* out = partial(run_index, split, c);
      std::fill(out, out + partial_stride, 0.0f);
      out[0] = -INFINITY;
    }
    if (j0 > j1) return;  // an empty chunk: sum 0
    const int len = static_cast<int>(j1 - j0 + 1);
    float* scores = scratch.scores(thread);
    Scores(k, row, row.q + static_cast<size_t>(run.h0) * hd, run.count, hd, head_at, j0, j1, scores,
           len);
    for (int c = 0; c < run.count; ++c) {
      float* sc = scores + static_cast<size_t>(c) * len;
      float m = -INFINITY;
      for (int j = 0; j < len; ++j) m = std::max(m, sc[j]);
      float* out = partial(run_index, split, c);
      out[0] = m;
      out[1] = static_cast<float>(k.exp_sum(sc, len, m));
    }
    Values(k, row, scores, len, run.count, hd, head_at, j0, j1, partial(run_index, split, 0) + 2,
           static_cast<int64_t>(partial_stride));
  });
  if (splits == 1) return;
  // Merge the chunks: rescale each partial to the common max.
  for (int ri = 0; ri < n_runs; ++ri)
    for (int c = 0; c < runs[ri].count; ++c) {
      float m = -INFINITY;
      for (int s = 0; s < splits; ++s) m = std::max(m, partial(ri, s, c)[0]);
      double total = 0;
      float* out = row.out + static_cast<size_t>(runs[ri].h0 + c) * hd;
      std::fill(out, out + hd, 0.0f);
      for (int s = 0; s < splits; ++s) {
        const float* p = partial(ri, s, c);
        if (p[1] == 0) continue;  // empty chunk
        const float scale = std::exp(p[0] - m);
        total += static_cast<double>(p[1]) * scale;
        k.axpy_f32(scale, p + 2, out, hd);
      }
      const float inv = static_cast<float>(1.0 / total);
      for (int i = 0; i < hd; ++i) out[i] *= inv;
    }
}

// Several rows (prefill chunks, batched decode): tasks are (query block, run). Query blocks are
// made smaller when there would be too few tasks for the threads.
void AttendRows(const AttentionShape& shape, const AttentionRow* rows, int n_rows, const Run* runs,
                int n_runs, int max_run, AttentionScratch& scratch, ThreadPool& pool,
                AttentionTiles tiles) {
  const CpuKernels& k = ActiveKernels();
  std::vector<int>& blocks = scratch.query_blocks();
  int max_rows = std::clamp(tiles.query_rows > 0 ? tiles.query_rows : kMaxQueryRows, 1, kMaxQueryRows);
  QueryBlocks(rows, n_rows, max_rows, blocks);
  while (tiles.query_rows <= 0 && max_rows > 4 &&
         static_cast<int64_t>(blocks.size() - 1) * n_runs < 2 * pool.size()) {
    max_rows /= 2;
    QueryBlocks(rows, n_rows, max_rows, blocks);
  }
  const int n_blocks = static_cast<int>(blocks.size()) - 1;
  const int64_t key_block = tiles.keys > 0 ? tiles.keys : DefaultKeyBlock(rows[0].type, shape.head_dim);
  // Scores of one task: a lone row's whole context, or a key block of a multi-row block.
  int64_t max_len = 0;
  for (int b = 0; b < n_blocks; ++b) {
    const AttentionRow &first = rows[blocks[b]], &last = rows[blocks[b + 1] - 1];
    const int64_t span = last.pos - FirstVisible(shape, first.pos) + 1;  // the block's keys
    max_len = std::max(max_len, blocks[b + 1] - blocks[b] == 1 ? span : std::min(span, key_block));
  }
  scratch.Ensure(pool.size(), static_cast<size_t>(max_run) * max_len, 0);
  pool.ParallelFor(static_cast<int64_t>(n_blocks) * n_runs, [&](int64_t task, int thread) {
    const int b = static_cast<int>(task / n_runs);
    const int n = blocks[b + 1] - blocks[b];
    const AttentionRow* first = rows + blocks[b];
    // A lone row of its sequence reads its keys once anyway: one pass, no rescaling.
    const int64_t keys = n == 1 ? first->pos - FirstVisible(shape, first->pos) + 1 : key_block;
    AttendQueryBlock(k, shape, first, n, runs[task % n_runs], keys, scratch.scores(thread));
  });
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
            AttentionScratch& scratch, ThreadPool& pool, AttentionTiles tiles) {
  if (n_rows <= 0) return;
  Run runs[kMaxRuns];
  int n_runs = 0;
  for (int h = 0; h < shape.n_heads_q && n_runs < kMaxRuns; ++h) {
    const int g = (shape.q_head_offset + h) / shape.group_size - shape.kv_head_offset;
    if (n_runs > 0 && runs[n_runs - 1].g == g && runs[n_runs - 1].count < kMaxRun)
      runs[n_runs - 1].count++;
    else
      runs[n_runs++] = Run{h, 1, g};
  }
  int max_run = 0;
  for (int i = 0; i < n_runs; ++i) max_run = std::max(max_run, runs[i].count);
  if (n_rows == 1)
    AttendLoneRow(shape, rows[0], runs, n_runs, max_run, scratch, pool);
  else
    AttendRows(shape, rows, n_rows, runs, n_runs, max_run, scratch, pool, tiles);
}

}  // namespace g4
