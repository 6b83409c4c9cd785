#include "server/responses_store.h"

namespace g4 {

void ResponseStore::Put(const std::string& id, StoredResponse value) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = index_.find(id); it != index_.end()) {
    entries_.erase(it->second);
    index_.erase(it);
  }
  entries_.emplace_front(id, std::move(value));
  index_[id] = entries_.begin();
  EvictLocked();
}

std::optional<StoredResponse> ResponseStore::Get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  entries_.splice(entries_.begin(), entries_, it->second);
  return it->second->second;
}

bool ResponseStore::Erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  entries_.erase(it->second);
  index_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

void ResponseStore::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_ = capacity;
  EvictLocked();
}

void ResponseStore::EvictLocked() {
  while (entries_.size() > capacity_) {
    index_.erase(entries_.back().first);
    entries_.pop_back();
  }
}

}  // namespace g4
