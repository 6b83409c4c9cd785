// Attention over a KV cache: softmax(q k^T) v for a batch of rows, each with its own cache
// (docs/gemma4.md §3.3 steps 4-5). The query heads that share a KV head are done together, so each
// cached K/V row is read once per row, not once per head.
//
// One order for every row: its visible positions are cut into key chunks at fixed multiples of
// the chunk size, each chunk's softmax partial (max, sum, output) is computed alone and the
// partials are merged in position order. A lone decode row shares its chunks out across the
// threads (a long context keeps every core busy); consecutive rows of one sequence (a prefill
// chunk, a speculative verify) go in query blocks that read each key chunk once for the whole
// block (prefill at depth is bound by the arithmetic, not by streaming the cache per token).
// Either way a row's output is the same to the bit: it does not depend on the rows attended
// beside it or on the thread count, so greedy speculative decoding gives exactly the plain ids.
//
// kernels/ knows nothing of the model: the caller passes each row's cache slot as raw pointers.
// Position p of a slot lives at base + (p % capacity) * stride bytes (a sliding layer's ring
// wraps; a full layer's capacity is its whole context), in the slot's format
// (kernels/kv_format.h: f32, bf16 or q8). The attention scale is 1: Gemma-4's
// q/k norms carry the scaling (§9.6), and there is no attention softcap.
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/kv_format.h"

namespace g4 {

// The layer's head geometry. Query head h (local index) reads KV head
// (q_head_offset + h) / group_size - kv_head_offset of the row's cache (local index); the offsets
// are non-zero only on a tensor-parallel rank that holds a slice of the heads.
struct AttentionShape {
  int n_heads_q = 0;
  int head_dim = 0;
  int group_size = 1;  // query heads per KV head
  int q_head_offset = 0;
  int kv_head_offset = 0;
  int window = 0;  // sliding window (positions, the current one included); 0 = full causal
};

// One query row: a token at `pos` attending to positions [max(0, pos - window + 1), pos] of its
// cache slot, which must already hold them (the row's own K/V included).
struct AttentionRow {
  const float* q = nullptr;  // [n_heads_q * head_dim]
  float* out = nullptr;      // [n_heads_q * head_dim]
  int64_t pos = 0;
  const void* k = nullptr;  // the slot's K rows: position p at k + (p % capacity) * stride bytes
  const void* v = nullptr;  // the same for V
  int64_t stride = 0;       // bytes from one stored position to the next (>= the KV heads' bytes)
  int64_t capacity = 0;     // stored positions before the ring wraps
  KvType type = KvType::kF32;
};

// Tile sizes; 0 picks them (query blocks of up to 32 rows, fewer when the threads would lack
// tasks; key chunks of ~256 KiB of K per KV head). The key chunk is part of the order every row
// is computed in, so results compare bit for bit only under the same `keys`. Tests set small ones
// to exercise many chunks on tiny models.
struct AttentionTiles {
  int query_rows = 0;  // rows of one sequence per query block (at most 32)
  int keys = 0;        // positions per key chunk
};

// Per-thread score rows and the split-decode partials, sized once (Reserve) so a decode step does
// not allocate. Attend grows them if a call needs more than was reserved.
class AttentionScratch {
 public:
  // Enough for `threads` threads, layers of up to `max_heads_q` query heads of up to
  // `max_head_dim`, and rows that see up to `max_positions` positions.
  void Reserve(int threads, int max_heads_q, int max_head_dim, int64_t max_positions);

  // For attention.cc: grows the buffers to at least this (never shrinks them).
  void Ensure(int threads, size_t per_thread, size_t partial);
  float* scores(int thread) { return scores_.data() + static_cast<size_t>(thread) * per_thread_; }
  float* partials() { return partial_.data(); }
  std::vector<int>& query_blocks() { return query_blocks_; }

 private:
  std::vector<float> scores_;  // [threads][per_thread_]
  size_t per_thread_ = 0;
  std::vector<float> partial_;     // split decode: [run][key chunk][head in run][max, sum, out[hd]]
  std::vector<int> query_blocks_;  // the blocked path's first row of each query block, then n_rows
};

// Computes rows[i].out for every row, using the pool's threads.
void Attend(const AttentionShape& shape, const AttentionRow* rows, int n_rows,
            AttentionScratch& scratch, ThreadPool& pool, AttentionTiles tiles = {});

}  // namespace g4
