#include "server/exchange.h"

#include <algorithm>
#include <cstdio>

#include "server/http_transport.h"
#include "server/log.h"

namespace g4 {

using nlohmann::json;
using Clock = Exchange::Clock;

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void LogFinished(const Exchange& ex, const SequenceResult& result) {
  const double tps = result.decode_seconds > 0 && result.completion_tokens > 1
                         ? (result.completion_tokens - 1) / result.decode_seconds
                         : 0.0;
  char line[512];
  std::snprintf(line, sizeof line,
                "%s %s prompt=%d cached=%d completion=%d queue=%.3fs ttft=%.3fs decode=%.1f tok/s finish=%s%s%s",
                ex.who.id.c_str(), ex.path.c_str(), result.prompt_tokens, result.cached_tokens,
                result.completion_tokens, result.queue_seconds, result.ttft_seconds, tps,
                result.finish_reason.c_str(), result.error.empty() ? "" : " error=", result.error.c_str());
  ServerLog(line);
}

}  // namespace

bool OnToken(Exchange& ex, const TokenInfo& info) {
  const auto now = Clock::now();
  if (ex.have_token) {
    ex.metrics->ObserveTokenLatency(Seconds(now - ex.last_token));
  } else {
    ex.metrics->ObserveTtft(Seconds(now - ex.arrived));
  }
  ex.have_token = true;
  ex.last_token = now;
  // The stop token ends the sequence (the scheduler sees it) and is not part of the text.
  if (std::find(ex.stop_ids.begin(), ex.stop_ids.end(), info.token) != ex.stop_ids.end()) return true;
  Event ev;
  const std::string text = ex.stop->Push(ex.decoder->Add(info.token));
  if (ex.chat_output) {
    ev.delta = ex.splitter.Add(text);
  } else {
    ev.delta.content = text;
  }
  if (ex.want_logprobs) ev.logprobs = json::array({LogprobEntry(*ex.tokenizer, info)});
  {
    std::lock_guard<std::mutex> lock(ex.mutex);
    ex.events.push_back(std::move(ev));
  }
  ex.cv.notify_all();
  return !ex.stop->stopped();
}

void OnDone(Exchange& ex, const SequenceResult& result) {
  Event ev;
  std::string text = ex.stop->Push(ex.decoder->Flush());
  text += ex.stop->Flush();
  json calls = json::array();
  if (ex.chat_output) {
    ChatDelta a = ex.splitter.Add(text);
    ChatDelta b = ex.splitter.Finish();
    ev.delta.reasoning = a.reasoning + b.reasoning;
    ev.delta.content = a.content + b.content;
    calls = ex.splitter.ToolCalls();
  } else {
    ev.delta.content = text;
  }
  ex.metrics->AddTokens(result.prompt_tokens, result.cached_tokens, result.completion_tokens);
  ex.metrics->CountFinish(result.finish_reason);
  ex.metrics->ObserveRequestSeconds(Seconds(Clock::now() - ex.arrived));
  if (ex.log_requests) LogFinished(ex, result);
  {
    std::lock_guard<std::mutex> lock(ex.mutex);
    if (!ev.delta.empty()) ex.events.push_back(std::move(ev));
    ex.tool_calls = calls;
    ex.result = result;
    ex.done = true;
  }
  ex.cv.notify_all();
}

bool WaitDone(Exchange& ex, int fd) {
  std::unique_lock<std::mutex> lock(ex.mutex);
  while (!ex.done) {
    ex.cv.wait_for(lock, std::chrono::milliseconds(100));
    if (!ex.done && PeerClosed(fd)) {
      ex.handle->Cancel();
      return false;
    }
  }
  return true;
}

GeneratedOutput Gather(Exchange& ex) {
  std::lock_guard<std::mutex> lock(ex.mutex);
  GeneratedOutput out;
  for (const Event& ev : ex.events) {
    out.content += ev.delta.content;
    out.reasoning += ev.delta.reasoning;
    if (ev.logprobs.is_array())
      for (const json& e : ev.logprobs) out.logprobs.push_back(e);
  }
  out.tool_calls = ex.tool_calls;
  out.result = ex.result;
  return out;
}

namespace {

// httplib's chunked content provider for one stream: each call writes what arrived since the last
// (waiting up to 100 ms for something), and the tail once the sequence is done.
class SseWriter {
 public:
  SseWriter(std::shared_ptr<Exchange> ex, int fd, std::shared_ptr<StreamFormat> format)
      : ex_(std::move(ex)), fd_(fd), format_(std::move(format)) {}

  bool operator()(size_t, httplib::DataSink& sink) {
    auto write = [&](const std::string& data) { return sink.write(data.data(), data.size()); };
    const ApiRoute route = ex_->route;
    if (!started_) {
      started_ = true;
      if (format_) return write(format_->Start());
      if (route == ApiRoute::kChat)
        return write(Sse(ChatChunk(ex_->who, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)));
    }
    std::vector<Event> events;
    bool done = false;
    {
      std::unique_lock<std::mutex> lock(ex_->mutex);
      if (ex_->events.size() <= next_event_ && !ex_->done) ex_->cv.wait_for(lock, std::chrono::milliseconds(100));
      for (; next_event_ < ex_->events.size(); ++next_event_) events.push_back(ex_->events[next_event_]);
      done = ex_->done;
    }
    if (events.empty() && !done && PeerClosed(fd_)) return false;  // the releaser cancels
    for (const Event& ev : events) {
      const std::string piece = format_ ? format_->Piece(ev)
                                        : StreamPiece(route, ex_->who, ev.delta, ex_->want_logprobs ? ev.logprobs : json());
      if (!piece.empty() && !write(piece)) return false;
    }
    if (!done) return true;
    // Done is final: result and tool_calls no longer change.
    const std::string tail = format_ ? format_->Tail(ex_->result, ex_->tool_calls)
                                     : StreamTail(route, ex_->who, ex_->result, ex_->tool_calls, ex_->include_usage);
    if (!write(tail)) return false;
    sink.done();
    return true;
  }

 private:
  std::shared_ptr<Exchange> ex_;
  int fd_;
  std::shared_ptr<StreamFormat> format_;  // null: chat/completions chunks
  bool started_ = false;
  size_t next_event_ = 0;
};

}  // namespace

void StreamExchange(std::shared_ptr<Exchange> ex, int fd, httplib::Response& res, std::atomic<int>* in_flight,
                    std::shared_ptr<StreamFormat> format) {
  in_flight->fetch_add(1);  // released by the releaser, after the last byte
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", SseWriter(ex, fd, std::move(format)), [ex, in_flight](bool success) {
        bool done;
        {
          std::lock_guard<std::mutex> lock(ex->mutex);
          done = ex->done;
        }
        if (!done || !success) {
          ex->handle->Cancel();
          if (!done) ex->metrics->CountError("client_disconnected");
        }
        in_flight->fetch_sub(1);
      });
}

}  // namespace g4
