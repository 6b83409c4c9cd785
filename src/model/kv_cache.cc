#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace g4 {

KvCache::KvCache(const ModelPlan& plan, int max_context, int max_chunk, KvType type)
    : max_context_(std::max(1, max_context)), max_chunk_(std::max(1, max_chunk)), type_(type) {
  size_t total = 0;
  for (int layer : plan.kv_owners) {
    const LayerPlan& lp = plan.layers[layer];
    Slot s;
    s.kv_dim = lp.kv_dim();
    s.capacity =
        lp.is_sliding() ? std::min(max_context_, lp.window + max_chunk_ - 1) : max_context_;
    s.window = lp.is_sliding() ? lp.window : 0;
    s.row_bytes = KvBytes(type, lp.head_dim, s.kv_dim);
    s.offset = total;
    total += static_cast<size_t>(s.capacity) * s.row_bytes;
    slots_.push_back(s);
  }
  for (StreamedBuffer* buffer : {&keys_, &values_}) {
    const size_t bytes = std::max<size_t>(total, 1);
    *buffer = AllocateStreamed(bytes);
    std::memset(buffer->get(), 0, bytes);  // after the madvise: the first touch takes huge pages
  }
  bytes_ = 2 * total;
}

size_t KvCache::BytesFor(const ModelPlan& plan, int max_context, int max_chunk, KvType type) {
  max_context = std::max(1, max_context);
  max_chunk = std::max(1, max_chunk);
  size_t total = 0;
  for (int layer : plan.kv_owners) {
    const LayerPlan& lp = plan.layers[layer];
    const int capacity =
        lp.is_sliding() ? std::min(max_context, lp.window + max_chunk - 1) : max_context;
    total += static_cast<size_t>(capacity) * KvBytes(type, lp.head_dim, lp.kv_dim());
  }
  return 2 * total;
}

bool KvCache::CanTruncateTo(int64_t n) const {
  if (n >= n_past_) return n == n_past_;
  if (n < 0) return false;
  // A ring holds positions [n_past - capacity, n_past); a query at n needs [n - window + 1, n).
  for (const Slot& s : slots_) {
    if (s.window == 0 || s.capacity >= max_context_) continue;
    if (n_past_ - s.capacity > std::max<int64_t>(0, n - s.window + 1)) return false;
  }
  return true;
}

}  // namespace g4
