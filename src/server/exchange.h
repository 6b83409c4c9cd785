// One generation request in flight, between the HTTP thread that waits for it and the engine
// thread that produces it: the scheduler's per-token and done callbacks turn tokens into text
// (incremental detokenizing, stop strings, the chat splitter) and hand it over as events; the
// HTTP thread either waits for the whole result or streams the events as SSE chunks.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/scheduler.h"
#include "server/chat_bridge.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/openai_response.h"
#include "server/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace g4 {

// One piece of output on its way from the engine thread to the HTTP thread.
struct Event {
  ChatDelta delta;
  nlohmann::json logprobs;  // array of LogprobEntry, one per token; null if not asked
};

struct Exchange {
  using Clock = std::chrono::steady_clock;

  ApiRoute route = ApiRoute::kChat;
  ResponseIdentity who;
  std::string path;
  Clock::time_point arrived;
  bool chat_output = false;  // split reasoning/content/tool calls
  bool want_logprobs = false;
  bool include_usage = false;  // streams only
  std::vector<int> stop_ids;
  Metrics* metrics = nullptr;
  const Tokenizer* tokenizer = nullptr;
  bool log_requests = true;

  // Engine-thread state.
  std::unique_ptr<IncrementalDecoder> decoder;
  std::unique_ptr<StopMatcher> stop;
  ChatOutputSplitter splitter;
  Clock::time_point last_token;
  bool have_token = false;

  // Shared, under mutex.
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<Event> events;
  bool done = false;
  SequenceResult result;
  nlohmann::json tool_calls = nlohmann::json::array();
  std::shared_ptr<SequenceHandle> handle;
};

// The scheduler's callbacks (SequenceRequest::on_token / on_done), on the engine thread.
bool OnToken(Exchange& ex, const TokenInfo& info);
void OnDone(Exchange& ex, const SequenceResult& result);

// Waits for the whole result; false if the client went away first (the sequence is cancelled).
bool WaitDone(Exchange& ex, int fd);
// The whole output of a finished exchange.
GeneratedOutput Gather(Exchange& ex);

// How another API writes a stream (the Responses API's events): the SSE text that opens it, that
// of each event, and the tail once the sequence is done. Without one, a stream is chat or
// completions chunks by the exchange's route.
class StreamFormat {
 public:
  virtual ~StreamFormat() = default;
  virtual std::string Start() = 0;
  virtual std::string Piece(const Event& event) = 0;
  virtual std::string Tail(const SequenceResult& result, const nlohmann::json& tool_calls) = 0;
};

// Answers with an SSE stream of the exchange's events, written by httplib on this HTTP thread as
// they come. `in_flight` counts the stream until its last byte is written (or the client left,
// which cancels the sequence).
void StreamExchange(std::shared_ptr<Exchange> ex, int fd, httplib::Response& res, std::atomic<int>* in_flight,
                    std::shared_ptr<StreamFormat> format = nullptr);

}  // namespace g4
