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

// How many parts a lone row's key chunks are shared out in: 1 (a task per run) when the runs
// divide evenly over the threads, else enough parts for every thread to get an even share.
int SplitsFor(int n_runs, int n_chunks, int threads) {
  if (n_runs % threads == 0) return 1;
  return std::min(n_chunks, 2 * threads);
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

// Positions per key chunk: K and V of one KV head of ~256 KiB each, which stay in the core's L2
// cache (1 MiB and up) while every row of a query block reads them. Chunks of 128 KiB cost a
// lone decode row 5-10% at f32 and 32K positions (twice the partials to store and merge).
int64_t DefaultKeyChunk(KvType type, int hd) {
  const int64_t bytes = static_cast<int64_t>(KvBytes(type, hd, hd));
  return std::clamp<int64_t>((int64_t{256} << 10) / std::max<int64_t>(1, bytes), 16, 1024);
}

int64_t KeyChunk(const AttentionShape& shape, KvType type, AttentionTiles tiles) {
  return tiles.keys > 0 ? tiles.keys : DefaultKeyChunk(type, shape.head_dim);
}

// The one order every path computes a row in. The row's visible positions are cut at fixed
// multiples of the key chunk (absolute positions, not relative to the row or the call); each
// chunk's softmax partial is computed alone (its own max, exp-sum, and unnormalised output from
// zero) and the partials are merged in position order by MergeChunk. So a row's output is the
// same to the bit whether it is a lone decode row split over threads, one row of a batch, or one
// row of a prefill / speculative verify block: greedy speculative decoding gives the plain ids,
// and a prompt's logits do not depend on the prefill chunk size.
//
// The partial of chunk [j0, j1] for the run's heads: max_score[c], exp_sum[c] and
// o[c * o_stride + d] = sum_j exp(s_j - max) v_j[d].
void ChunkPartial(const CpuKernels& k, const AttentionRow& row, const Run& run, int hd,
                  size_t head_at, int64_t j0, int64_t j1, float* scores, float* max_score,
                  float* exp_sum, float* o, int64_t o_stride) {
  const int len = static_cast<int>(j1 - j0 + 1);
  Scores(k, row, row.q + static_cast<size_t>(run.h0) * hd, run.count, hd, head_at, j0, j1, scores,
         len);
  for (int c = 0; c < run.count; ++c) {
    float* sc = scores + static_cast<size_t>(c) * len;
    float m = -INFINITY;
    for (int j = 0; j < len; ++j) m = std::max(m, sc[j]);
    max_score[c] = m;
    exp_sum[c] = static_cast<float>(k.exp_sum(sc, len, m));
    std::fill(o + c * o_stride, o + c * o_stride + hd, 0.0f);
  }
  Values(k, row, scores, len, run.count, hd, head_at, j0, j1, o, o_stride);
}

// Folds a chunk's partial (m, s, o) into a head's running (max, sum, out), which start at
// (-inf, 0, zeros): out = out * exp(max - new max) + o * exp(m - new max). Not inlined: every path
// runs this one compiled copy, so the rounding is the same wherever a row is computed.
[[gnu::noinline]] void MergeChunk(const CpuKernels& k, float& max, float& sum, float* out, float m,
                                  float s, const float* o, int hd) {
  const float new_max = std::max(max, m);
  const float keep = std::exp(max - new_max), add = std::exp(m - new_max);  // exp(-inf) = 0
  sum = sum * keep + s * add;
  // Scaled only when the max grew over a real one: x * 1 is exact, and before the first chunk out
  // is all zeros, so skipping either changes nothing.
  if (keep != 1.0f && max != -INFINITY)
    for (int i = 0; i < hd; ++i) out[i] *= keep;
  k.axpy_f32(add, o, out, hd);
  max = new_max;
}

[[gnu::noinline]] void Normalize(float* out, float sum, int hd) {
  const float inv = 1.0f / sum;
  for (int i = 0; i < hd; ++i) out[i] *= inv;
}

// A thread's scratch: one chunk's scores and one chunk partial's outputs for a run.
struct ThreadBuffers {
  float* scores;     // [max_run][key_chunk]
  float* chunk_out;  // [max_run][head_dim]
};

size_t PerThreadFloats(int max_run, int64_t key_chunk, int hd) {
  return static_cast<size_t>(max_run) * static_cast<size_t>(key_chunk + hd);
}

ThreadBuffers BuffersFor(AttentionScratch& scratch, int thread, int max_run, int64_t key_chunk) {
  float* scores = scratch.scores(thread);
  return {scores, scores + static_cast<size_t>(max_run) * key_chunk};
}

// One chunk's partial for the run's heads, merged at once into their running max, sum and
// unnormalised output (out0 + c * head_dim).
void AddChunk(const CpuKernels& k, const AttentionRow& row, const Run& run, int hd, size_t head_at,
              int64_t j0, int64_t j1, ThreadBuffers buffers, float* max_score, float* sum,
              float* out0) {
  float chunk_max[kMaxRun], chunk_sum[kMaxRun];
  ChunkPartial(k, row, run, hd, head_at, j0, j1, buffers.scores, chunk_max, chunk_sum,
               buffers.chunk_out, hd);
  for (int c = 0; c < run.count; ++c)
    MergeChunk(k, max_score[c], sum[c], out0 + static_cast<size_t>(c) * hd, chunk_max[c],
               chunk_sum[c], buffers.chunk_out + static_cast<size_t>(c) * hd, hd);
}

// Attention of a block of n consecutive rows of one sequence (n = 1: any row) for one run of
// query heads, flash-attention style: the key chunks go by in order, each chunk's K and V read
// once for all n rows (from cache after the first row), and each row's partial for the chunk
// merged into its running max, sum and output at once.
void AttendQueryBlock(const CpuKernels& k, const AttentionShape& shape, const AttentionRow* rows,
                      int n, const Run& run, int64_t key_chunk, ThreadBuffers buffers) {
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
  for (int64_t a = lo - lo % key_chunk; a <= hi; a += key_chunk) {
    const int64_t b = a + key_chunk - 1;
    for (int r = 0; r < n; ++r) {
      const AttentionRow& row = rows[r];
      const int64_t j0 = std::max<int64_t>(a, FirstVisible(shape, row.pos));
      const int64_t j1 = std::min(b, row.pos);
      if (j0 > j1) continue;  // the causal or sliding mask hides this chunk from this row
      AddChunk(k, row, run, hd, head_at, j0, j1, buffers, max_score[r], sum[r],
               row.out + static_cast<size_t>(run.h0) * hd);
    }
  }
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < run.count; ++c)
      Normalize(rows[r].out + static_cast<size_t>(run.h0 + c) * hd, sum[r][c], hd);
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

// A lone row (decode): with few runs and several key chunks, the chunks are shared out across
// the threads in `splits` parts and merged in chunk order (the merges AttendQueryBlock makes as it
// goes): the first part merges its chunks at once into the row's output, the later parts store
// each chunk's partial, and those are merged after, the heads spread over the threads. With
// runs enough for the threads, one task per run.
void AttendLoneRow(const AttentionShape& shape, const AttentionRow& row, const Run* runs,
                   int n_runs, int max_run, AttentionScratch& scratch, ThreadPool& pool,
                   AttentionTiles tiles) {
  const CpuKernels& k = ActiveKernels();
  const int hd = shape.head_dim;
  const int64_t key_chunk = KeyChunk(shape, row.type, tiles);
  const int64_t lo = FirstVisible(shape, row.pos);
  const int64_t first_chunk = lo / key_chunk;
  const int n_chunks = static_cast<int>(row.pos / key_chunk - first_chunk + 1);
  const int splits = SplitsFor(n_runs, n_chunks, pool.size());
  const size_t partial_stride = static_cast<size_t>(hd) + 2;  // max, sum, out[hd]
  scratch.Ensure(
      pool.size(), PerThreadFloats(max_run, key_chunk, hd),
      splits > 1 ? static_cast<size_t>(n_runs) * n_chunks * max_run * partial_stride : 0);
  if (splits == 1) {
    pool.ParallelFor(n_runs, [&](int64_t run_index, int thread) {
      AttendQueryBlock(k, shape, &row, 1, runs[run_index], key_chunk,
                       BuffersFor(scratch, thread, max_run, key_chunk));
    });
    return;
  }
  // partial(run, chunk, head)[0, 1, 2..]: max, sum, out; chunk 0's max and sum are the first
  // part's running ones, its out the row's output.
  float* partials = scratch.partials();
  auto partial = [&](int run_index, int chunk, int c) {
    return partials +
           ((static_cast<size_t>(run_index) * n_chunks + chunk) * max_run + c) * partial_stride;
  };
  const int per_split = (n_chunks + splits - 1) / splits;
  pool.ParallelFor(static_cast<int64_t>(n_runs) * splits, [&](int64_t task, int thread) {
    const int split = static_cast<int>(task % splits);
    const int run_index = static_cast<int>(task / splits);
    const Run run = runs[run_index];
    const size_t head_at = KvBytes(row.type, hd, static_cast<int64_t>(run.g) * hd);
    const ThreadBuffers buffers = BuffersFor(scratch, thread, max_run, key_chunk);
    float* out0 = row.out + static_cast<size_t>(run.h0) * hd;
    float chunk_max[kMaxRun], chunk_sum[kMaxRun], max_score[kMaxRun], sum[kMaxRun];
    if (split == 0) {
      std::fill(out0, out0 + static_cast<size_t>(run.count) * hd, 0.0f);
      std::fill(max_score, max_score + run.count, -INFINITY);
      std::fill(sum, sum + run.count, 0.0f);
    }
    for (int ci = split * per_split; ci < std::min(n_chunks, (split + 1) * per_split); ++ci) {
      const int64_t a = (first_chunk + ci) * key_chunk;
      const int64_t j0 = std::max(a, lo), j1 = std::min(row.pos, a + key_chunk - 1);
      if (split == 0) {
        AddChunk(k, row, run, hd, head_at, j0, j1, buffers, max_score, sum, out0);
        continue;
      }
      ChunkPartial(k, row, run, hd, head_at, j0, j1, buffers.scores, chunk_max, chunk_sum,
                   partial(run_index, ci, 0) + 2, static_cast<int64_t>(partial_stride));
      for (int c = 0; c < run.count; ++c) {
        partial(run_index, ci, c)[0] = chunk_max[c];
        partial(run_index, ci, c)[1] = chunk_sum[c];
      }
    }
    if (split == 0)
      for (int c = 0; c < run.count; ++c) {
        partial(run_index, 0, c)[0] = max_score[c];
        partial(run_index, 0, c)[1] = sum[c];
      }
  });
  // Merge each head's later chunks in order, the heads spread over the threads.
  int64_t heads = 0;
  for (int ri = 0; ri < n_runs; ++ri) heads += runs[ri].count;
  pool.ParallelFor(heads, [&](int64_t head, int) {
    int ri = 0;
    while (head >= runs[ri].count) head -= runs[ri++].count;
    const int c = static_cast<int>(head);
    float* out = row.out + static_cast<size_t>(runs[ri].h0 + c) * hd;
    float max_score = partial(ri, 0, c)[0], sum = partial(ri, 0, c)[1];
    for (int ci = per_split; ci < n_chunks; ++ci) {
      const float* p = partial(ri, ci, c);
      MergeChunk(k, max_score, sum, out, p[0], p[1], p + 2, hd);
    }
    Normalize(out, sum, hd);
  });
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
  const int64_t key_chunk = KeyChunk(shape, rows[0].type, tiles);
  scratch.Ensure(pool.size(), PerThreadFloats(max_run, key_chunk, shape.head_dim), 0);
  pool.ParallelFor(static_cast<int64_t>(n_blocks) * n_runs, [&](int64_t task, int thread) {
    const int b = static_cast<int>(task / n_runs);
    AttendQueryBlock(k, shape, rows + blocks[b], blocks[b + 1] - blocks[b], runs[task % n_runs],
                     key_chunk, BuffersFor(scratch, thread, max_run, key_chunk));
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
  const int max_run = std::min(max_heads_q, kMaxRun);
  // The default key chunk is at most 1024 positions and smallest for an f32 cache. A split decode
  // keeps a partial per key chunk for each head; runs x longest run is below 2 * heads (only a
  // tensor-parallel slice starting inside a KV group has a short run).
  const int64_t chunks = max_positions / DefaultKeyChunk(KvType::kF32, max_head_dim) + 2;
  Ensure(threads, PerThreadFloats(max_run, 1024, max_head_dim),
         2 * static_cast<size_t>(max_heads_q) * chunks * (max_head_dim + 2));
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
    AttendLoneRow(shape, rows[0], runs, n_runs, max_run, scratch, pool, tiles);
  else
    AttendRows(shape, rows, n_rows, runs, n_runs, max_run, scratch, pool, tiles);
}

}  // namespace g4
