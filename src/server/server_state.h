// What the server's threads share: options, phase, the engine once loaded, metrics, counters.
// Internal to src/server (routes.cc and server.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "grammar/token_mask.h"
#include "runtime/serving_engine.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/responses_store.h"
#include "server/server.h"

namespace g4 {

enum class Phase { kLoading, kReady, kDraining, kFailed };

struct ServerState {
  ServerOptions options;
  std::string model_name;
  std::atomic<Phase> phase{Phase::kLoading};
  // Set once by the loader thread; `engine` is published after `owned_engine` and `limits` are
  // in place, and before the phase turns ready, so a handler that saw kReady may use both.
  std::unique_ptr<ServingEngine> owned_engine;
  std::atomic<ServingEngine*> engine{nullptr};
  ApiLimits limits;
  Metrics metrics;
  std::atomic<int> in_flight{0};  // requests being handled, and streams until their last byte
  std::atomic<uint64_t> next_request{1};
  std::string id_salt;  // random per process, so ids do not repeat across restarts
  // The vocabulary trie for constrained decoding, built on the first request that needs it.
  std::mutex token_trie_mutex;
  std::shared_ptr<const grammar::TokenTrie> token_trie;
  ResponseStore responses;  // /v1/responses: previous_response_id, GET and DELETE
};

}  // namespace g4
