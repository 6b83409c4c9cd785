// One sequence's K/V cache. Only KV-owner layers get storage (shared layers read their source's
// cache). Sliding owner layers keep a ring of window + max_chunk - 1 positions, enough for every
// query of a prefill chunk to see its whole window, so memory and per-token cost stay flat with
// context on those layers. Full layers keep every position up to max_context.
// K is stored after k_norm and RoPE, V after the weightless v_norm (spec §3.6), in the cache's
// element format (kernels/kv_format.h: f32, bf16 or q8; --kv-type).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/streamed_buffer.h"
#include "kernels/kv_format.h"
#include "model/plan.h"

namespace g4 {

class KvCache {
 public:
  KvCache(const ModelPlan& plan, int max_context, int max_chunk, KvType type = KvType::kF32);
  // Bytes such a cache allocates, without allocating it (g4 inspect, capacity plans).
  static size_t BytesFor(const ModelPlan& plan, int max_context, int max_chunk,
                         KvType type = KvType::kF32);

  KvType type() const { return type_; }

  int max_context() const { return max_context_; }
  int max_chunk() const { return max_chunk_; }
  // Positions [0, n_past) have been written.
  int64_t n_past() const { return n_past_; }
  void set_n_past(int64_t n) { n_past_ = n; }
  // Forget everything (a new conversation).
  void Reset() { n_past_ = 0; }
  // True if positions [0, n) are all still intact, i.e. the cache can be rewound to n tokens
  // (sliding rings only keep their last positions).
  bool CanTruncateTo(int64_t n) const;
  // Forgets positions [n, n_past): speculative rows the verification rejected. False (and
  // nothing changes) when a ring already overwrote a key that a query at n still sees. A ring of
  // window + max_chunk - 1 slots never has: writing r <= max_chunk rows from position p overwrites
  // only positions <= p + r - window - max_chunk <= p - window, outside the window of
  // any query at p + 1 or later (speculative decoding verifies draft_max + 1 <= max_chunk rows and
  // always keeps the first).
  bool RollbackTo(int64_t n) {
    if (!CanTruncateTo(n)) return false;
    n_past_ = n;
    return true;
  }

  // Row of kv_dim values (RowStride bytes, in type()) for position pos in owner cache `kv_slot`.
  uint8_t* K(int kv_slot, int64_t pos) { return Row(keys_, kv_slot, pos); }
  uint8_t* V(int kv_slot, int64_t pos) { return Row(values_, kv_slot, pos); }
  const uint8_t* K(int kv_slot, int64_t pos) const {
    return const_cast<KvCache*>(this)->K(kv_slot, pos);
  }
  const uint8_t* V(int kv_slot, int64_t pos) const {
    return const_cast<KvCache*>(this)->V(kv_slot, pos);
  }
  // Bytes from one position's row to the next, and how many positions from `pos` on are stored
  // consecutively (a sliding ring wraps to its start after its last slot).
  int64_t RowStride(int kv_slot) const { return slots_[kv_slot].row_bytes; }
  int64_t ContiguousRows(int kv_slot, int64_t pos) const {
    const Slot& s = slots_[kv_slot];
    return s.capacity - pos % s.capacity;
  }

  int capacity(int kv_slot) const { return slots_[kv_slot].capacity; }
  size_t bytes() const { return bytes_; }

 private:
  struct Slot {
    int capacity = 0;
    int window = 0;  // sliding window, 0 for full layers
    int kv_dim = 0;
    size_t row_bytes = 0;  // one position's kv_dim values in the cache's type
    size_t offset = 0;     // into keys_/values_, in bytes
  };
  uint8_t* Row(StreamedBuffer& base, int kv_slot, int64_t pos) {
    const Slot& s = slots_[kv_slot];
    return static_cast<uint8_t*>(base.get()) + s.offset +
           static_cast<size_t>(pos % s.capacity) * s.row_bytes;
  }

  int max_context_;
  int max_chunk_;
  KvType type_;
  int64_t n_past_ = 0;
  std::vector<Slot> slots_;
  // Attention reads a long context's rows every token: huge pages spare a TLB miss per 4 KiB.
  StreamedBuffer keys_, values_;
  size_t bytes_ = 0;
};

}  // namespace g4
