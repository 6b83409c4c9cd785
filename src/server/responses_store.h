// The bounded in-memory store behind previous_response_id and GET/DELETE /v1/responses/{id}:
// the last `capacity` stored responses, least recently used evicted first. Thread-safe; lost on
// restart (OpenAI keeps them 30 days; a client chaining across a restart gets a 400).
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace g4 {

struct StoredResponse {
  nlohmann::json response;              // the response object, as GET returns it
  nlohmann::ordered_json conversation;  // what a previous_response_id continues from
};

class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity = 1024) : capacity_(capacity) {}

  void Put(const std::string& id, StoredResponse value);
  // A copy (the entry may be evicted at once); a hit counts as a use.
  std::optional<StoredResponse> Get(const std::string& id);
  bool Erase(const std::string& id);
  size_t size() const;
  void set_capacity(size_t capacity);

 private:
  void EvictLocked();
  size_t capacity_;
  mutable std::mutex mutex_;
  std::list<std::pair<std::string, StoredResponse>> entries_;  // most recently used first
  std::unordered_map<std::string, std::list<std::pair<std::string, StoredResponse>>::iterator>
      index_;
};

}  // namespace g4
