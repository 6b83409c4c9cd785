#include "server/server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "io/pack.h"
#include "kernels/weight_matrix.h"
#include "model/arch/gemma4.h"
#include "model/forward.h"
#include "parallel/mpi_communicator.h"
#include "parallel/rank_plan.h"
#include "parallel/tp_serve.h"
#include "runtime/scheduler.h"
#include "server/chat_bridge.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace g4 {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

enum class Phase { kLoading, kReady, kDraining, kFailed };

struct ServerState {
  ServerOptions options;
  std::string model_name;
  int context = 0;
  std::atomic<Phase> phase{Phase::kLoading};
  // Tensor parallel: rank 0's side of the rank group (outlives the model, which uses its
  // communicator, and the scheduler, which calls it every step).
  std::unique_ptr<TensorParallelLeader> tp;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Scheduler> scheduler;
  ApiLimits limits;
  Gemma4TemplateFeatures chat_features;  // from the checkpoint's chat_template.jinja, if any
  Metrics metrics;
  std::atomic<int> in_flight{0};
  std::atomic<uint64_t> next_request{1};
  std::string id_salt;
  std::mutex log_mutex;
};

void Log(ServerState& s, const std::string& line) {
  std::lock_guard<std::mutex> lock(s.log_mutex);
  std::fprintf(stderr, "g4 serve: %s\n", line.c_str());
  std::fflush(stderr);
}

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void SendJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(DumpJson(body), "application/json");
}

void SendError(httplib::Response& res, const ApiError& e) { SendJson(res, e.status, e.ToJson()); }

ApiError MakeError(int status, std::string message, std::string type, std::string code = "",
                   std::string param = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  e.param = std::move(param);
  return e;
}

// The socket of this request's connection, found by its address pair, so a waiting handler can
// notice that the client went away (cpp-httplib 0.11 does not expose it). -1 if not found.
int FindConnectionSocket(const httplib::Request& req) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* entry = ::readdir(dir)) {
    const int fd = std::atoi(entry->d_name);
    if (fd <= 2) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof local, peer_len = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
    auto port_of = [](const sockaddr_storage& a) -> int {
      if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
      if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
      return -1;
    };
    if (port_of(local) == req.local_port && port_of(peer) == req.remote_port) {
      found = fd;
      break;
    }
  }
  ::closedir(dir);
  return found;
}

// True once the peer has closed (or reset) the connection. Pipelined bytes count as alive.
bool PeerClosed(int fd) {
  if (fd < 0) return false;
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;
  if (n == 0) return true;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

// One piece of output on its way from the engine thread to the HTTP thread.
struct Event {
  ChatDelta delta;
  json logprobs;  // chat: array of content entries; completion: token entries; null if none
};

// A generation request in flight, shared by the HTTP thread and the engine callbacks.
struct Exchange {
  ServerState* server = nullptr;
  ApiRoute route = ApiRoute::kChat;
  std::string id;
  std::string path;
  int64_t created = 0;
  Clock::time_point arrived;
  bool chat_output = false;  // split reasoning/content/tool calls
  bool want_logprobs = false;
  std::vector<int> stop_ids;

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
  json tool_calls = json::array();
  std::shared_ptr<SequenceHandle> handle;
};

json TokenBytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// The text of one token for logprobs (special markers kept).
std::string TokenText(const Tokenizer& tok, int id) { return tok.Decode({id}, false); }

json LogprobEntry(const Exchange& ex, const TokenInfo& info) {
  const Tokenizer& tok = *ex.server->tokenizer;
  const std::string text = TokenText(tok, info.token);
  json top = json::array();
  for (const auto& [id, lp] : info.top) {
    const std::string t = TokenText(tok, id);
    top.push_back({{"token", t}, {"logprob", lp}, {"bytes", TokenBytes(t)}});
  }
  return {{"token", text}, {"logprob", info.logprob}, {"bytes", TokenBytes(text)}, {"top_logprobs", top}};
}

bool OnToken(Exchange& ex, const TokenInfo& info) {
  const auto now = Clock::now();
  if (ex.have_token) {
    ex.server->metrics.ObserveTokenLatency(std::chrono::duration<double>(now - ex.last_token).count());
  } else {
    ex.server->metrics.ObserveTtft(std::chrono::duration<double>(now - ex.arrived).count());
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
  if (ex.want_logprobs) ev.logprobs = json::array({LogprobEntry(ex, info)});
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
  ServerState& s = *ex.server;
  s.metrics.AddTokens(result.prompt_tokens, result.cached_tokens, result.completion_tokens);
  s.metrics.CountFinish(result.finish_reason);
  s.metrics.ObserveRequestSeconds(Since(ex.arrived));
  if (s.options.log_requests) {
    const double tps = result.decode_seconds > 0 && result.completion_tokens > 1
                           ? (result.completion_tokens - 1) / result.decode_seconds
                           : 0.0;
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s %s prompt=%d cached=%d completion=%d queue=%.3fs ttft=%.3fs decode=%.1f tok/s finish=%s%s%s",
                  ex.id.c_str(), ex.path.c_str(), result.prompt_tokens, result.cached_tokens,
                  result.completion_tokens, result.queue_seconds, result.ttft_seconds, tps,
                  result.finish_reason.c_str(), result.error.empty() ? "" : " error=", result.error.c_str());
    Log(s, line);
  }
  {
    std::lock_guard<std::mutex> lock(ex.mutex);
    if (!ev.delta.empty()) ex.events.push_back(std::move(ev));
    ex.tool_calls = calls;
    ex.result = result;
    ex.done = true;
  }
  ex.cv.notify_all();
}

std::string FinishReason(const Exchange& ex) {
  if (ex.result.finish_reason == "stop" && !ex.tool_calls.empty()) return "tool_calls";
  return ex.result.finish_reason;
}

json Usage(const SequenceResult& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"total_tokens", r.prompt_tokens + r.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

// Legacy completions logprobs: parallel arrays.
json CompletionLogprobs(const std::vector<json>& entries) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = 0;
  for (const json& e : entries) {
    tokens.push_back(e["token"]);
    lps.push_back(e["logprob"]);
    json top = json::object();
    for (const json& t : e["top_logprobs"]) top[t["token"].get<std::string>()] = t["logprob"];
    tops.push_back(top);
    offsets.push_back(offset);
    offset += e["token"].get<std::string>().size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json ChatChunk(const Exchange& ex, const std::string& model, json delta, json finish, json logprobs) {
  json choice = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)},
                 {"finish_reason", std::move(finish)}};
  return {{"id", ex.id}, {"object", "chat.completion.chunk"}, {"created", ex.created}, {"model", model},
          {"choices", json::array({choice})}};
}

json CompletionChunk(const Exchange& ex, const std::string& model, const std::string& text, json finish,
                     json logprobs) {
  json choice = {{"index", 0}, {"text", text}, {"logprobs", std::move(logprobs)}, {"finish_reason", std::move(finish)}};
  return {{"id", ex.id}, {"object", "text_completion"}, {"created", ex.created}, {"model", model},
          {"choices", json::array({choice})}};
}

std::string Sse(const json& j) { return "data: " + DumpJson(j) + "\n\n"; }

std::string NewId(ServerState& s, const char* prefix) {
  return Str(prefix, s.id_salt, s.next_request.fetch_add(1));
}

// A forced tool_choice: the token sequences the output must open with, one per allowed tool:
// "<|tool_call>call:NAME{" (the Gemma-4 call syntax), so the model writes only the arguments.
std::vector<std::vector<int>> ForcedCallPrefixes(const Tokenizer& tok, const ApiRequest& r) {
  std::vector<std::vector<int>> prefixes;
  if (!r.tool_call_forced) return prefixes;
  for (const json& t : r.tools)
    prefixes.push_back(
        tok.Encode("<|tool_call>call:" + t["function"]["name"].get<std::string>() + "{", false));
  return prefixes;
}

// Tokenizes the request into prompt ids, or fails with a 400.
bool BuildPrompt(ServerState& s, const ApiRequest& r, std::vector<int>* ids, ApiError* error) {
  const Tokenizer& tok = *s.tokenizer;
  if (r.route == ApiRoute::kChat || (r.route == ApiRoute::kGenerate && !r.raw)) {
    json messages = r.messages;
    if (r.route == ApiRoute::kGenerate) messages = json::array({{{"role", "user"}, {"content", r.prompt_text}}});
    Gemma4ChatOptions chat;
    chat.enable_thinking = r.enable_thinking;
    chat.features = s.chat_features;
    auto text = RenderGemma4Chat(messages, r.tools_enabled ? r.tools : json(nullptr), chat);
    if (!text.ok()) {
      *error = MakeError(400, text.status().message(), "invalid_request_error", "", "messages");
      return false;
    }
    *ids = tok.Encode(*text, /*add_bos=*/false);
  } else if (r.has_prompt_ids) {
    *ids = r.prompt_ids;
  } else {
    *ids = tok.Encode(r.prompt_text, /*add_bos=*/true);
  }
  if (static_cast<int64_t>(ids->size()) >= s.context) {
    *error = MakeError(400,
                       Str("the prompt has ", ids->size(), " tokens but the context is ", s.context,
                           " tokens per slot (--ctx), and at least one token must be left to generate"),
                       "invalid_request_error", "context_length_exceeded",
                       r.route == ApiRoute::kChat ? "messages" : "prompt");
    return false;
  }
  return true;
}

// Waits for a non-streaming exchange; false if the client went away (the sequence is cancelled).
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

void HandleGeneration(ServerState& s, ApiRoute route, const httplib::Request& req, httplib::Response& res) {
  ApiRequest r;
  ApiError error;
  if (!ParseApiRequest(route, req.body, s.limits, &r, &error)) {
    s.metrics.CountError("invalid_request");
    return SendError(res, error);
  }
  std::vector<int> prompt;
  if (!BuildPrompt(s, r, &prompt, &error)) {
    s.metrics.CountError(error.code.empty() ? "invalid_request" : error.code);
    return SendError(res, error);
  }
  auto ex = std::make_shared<Exchange>();
  ex->server = &s;
  ex->route = route;
  ex->path = req.path;
  ex->id = NewId(s, route == ApiRoute::kChat ? "chatcmpl-" : route == ApiRoute::kCompletion ? "cmpl-" : "gen-");
  ex->created = static_cast<int64_t>(std::time(nullptr));
  ex->arrived = Clock::now();
  ex->chat_output = route == ApiRoute::kChat || (route == ApiRoute::kGenerate && !r.raw);
  ex->want_logprobs = r.logprobs;
  ex->stop_ids = r.ignore_eos ? std::vector<int>{} : s.model->plan().config.eos_token_ids;
  // Chat output keeps the protocol markers for the splitter; raw completions drop special tokens.
  ex->decoder = std::make_unique<IncrementalDecoder>(*s.tokenizer, /*skip_special=*/!ex->chat_output);
  ex->stop = std::make_unique<StopMatcher>(r.stop);
  ex->splitter = ChatOutputSplitter(/*forced_call=*/r.tool_call_forced);

  SequenceRequest seq;
  seq.prompt = prompt;
  const int64_t room = s.context - static_cast<int64_t>(prompt.size());
  seq.max_new_tokens = static_cast<int>(std::min<int64_t>(r.max_tokens.value_or(room), room));
  seq.forced_prefixes = ForcedCallPrefixes(*s.tokenizer, r);
  size_t longest = 0;
  for (const auto& p : seq.forced_prefixes) longest = std::max(longest, p.size());
  if (longest > 0 && static_cast<size_t>(seq.max_new_tokens) <= longest) {
    // The call's opening alone would use up the budget: no room for arguments.
    s.metrics.CountError("invalid_request");
    return SendError(
        res, MakeError(400,
                       Str("a forced tool call needs more than ", longest,
                           " tokens (\"<|tool_call>call:NAME{\"", " takes ", longest,
                           "), but only ", seq.max_new_tokens,
                           r.max_tokens && *r.max_tokens <= room ? " were allowed by max_tokens"
                                                                 : " are left in the context"),
                       "invalid_request_error", "",
                       r.max_tokens && *r.max_tokens <= room ? "max_tokens" : "messages"));
  }
  seq.sampling = r.sampling;
  seq.stop_ids = ex->stop_ids;
  seq.top_logprobs = r.logprobs ? r.top_logprobs : -1;
  seq.timeout_seconds = r.timeout_seconds > 0 ? std::min(r.timeout_seconds, s.options.timeout_seconds)
                                              : s.options.timeout_seconds;
  seq.on_token = [ex](const TokenInfo& info) { return OnToken(*ex, info); };
  seq.on_done = [ex](const SequenceResult& result) { OnDone(*ex, result); };
  SubmitResult submitted = s.scheduler->Submit(std::move(seq));
  if (submitted.admission == Admission::kQueueFull) {
    s.metrics.CountError("queue_full");
    res.set_header("Retry-After", "1");
    return SendError(res, MakeError(429, submitted.message, "rate_limit_exceeded", "queue_full"));
  }
  if (submitted.admission == Admission::kStopped) {
    s.metrics.CountError("draining");
    return SendError(res, MakeError(503, submitted.message, "unavailable", "draining"));
  }
  if (submitted.admission != Admission::kAccepted) {
    s.metrics.CountError("invalid_request");
    return SendError(res, MakeError(400, submitted.message, "invalid_request_error"));
  }
  ex->handle = submitted.handle;
  const int fd = FindConnectionSocket(req);
  const std::string model = s.model_name;

  if (!r.stream) {
    if (!WaitDone(*ex, fd)) {
      s.metrics.CountError("client_disconnected");
      res.status = 499;  // nobody reads it
      return;
    }
    std::string content, reasoning;
    std::vector<json> entries;
    for (const Event& ev : ex->events) {
      content += ev.delta.content;
      reasoning += ev.delta.reasoning;
      if (ev.logprobs.is_array())
        for (const json& e : ev.logprobs) entries.push_back(e);
    }
    if (ex->result.finish_reason == "error") {
      s.metrics.CountError("engine");
      return SendError(res, MakeError(500, "generation failed: " + ex->result.error, "server_error"));
    }
    const std::string finish = FinishReason(*ex);
    if (route == ApiRoute::kGenerate) {
      json body = {{"prompt", r.prompt_text}, {"response", content}, {"prompt_tokens", ex->result.prompt_tokens},
                   {"gen_tokens", ex->result.completion_tokens}, {"finish_reason", finish}};
      if (!reasoning.empty()) body["reasoning"] = reasoning;
      return SendJson(res, 200, body);
    }
    json choice;
    if (route == ApiRoute::kChat) {
      json message = {{"role", "assistant"}, {"content", content}};
      if (!reasoning.empty()) message["reasoning_content"] = reasoning;
      if (!ex->tool_calls.empty()) {
        message["tool_calls"] = ex->tool_calls;
        if (content.empty()) message["content"] = nullptr;
      }
      choice = {{"index", 0}, {"message", message}, {"finish_reason", finish}};
      choice["logprobs"] = r.logprobs ? json{{"content", entries}} : json(nullptr);
    } else {
      choice = {{"index", 0}, {"text", content}, {"finish_reason", finish}};
      choice["logprobs"] = r.logprobs ? CompletionLogprobs(entries) : json(nullptr);
    }
    json body = {{"id", ex->id},
                 {"object", route == ApiRoute::kChat ? "chat.completion" : "text_completion"},
                 {"created", ex->created},
                 {"model", model},
                 {"choices", json::array({choice})},
                 {"usage", Usage(ex->result)}};
    return SendJson(res, 200, body);
  }

  // Streaming: SSE chunks written from the provider, which runs on this HTTP thread.
  struct StreamState {
    bool started = false;
    size_t next_event = 0;
  };
  auto state = std::make_shared<StreamState>();
  const bool include_usage = r.include_usage;
  const bool logprobs = r.logprobs;
  s.in_flight.fetch_add(1);  // released by the releaser, after the last byte
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [ex, state, fd, model, route, include_usage, logprobs](size_t, httplib::DataSink& sink) -> bool {
        auto write = [&](const std::string& data) { return sink.write(data.data(), data.size()); };
        if (!state->started) {
          state->started = true;
          if (route == ApiRoute::kChat)
            return write(Sse(ChatChunk(*ex, model, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)));
        }
        std::vector<Event> events;
        bool done = false;
        {
          std::unique_lock<std::mutex> lock(ex->mutex);
          if (ex->events.size() <= state->next_event && !ex->done)
            ex->cv.wait_for(lock, std::chrono::milliseconds(100));
          for (; state->next_event < ex->events.size(); ++state->next_event)
            events.push_back(ex->events[state->next_event]);
          done = ex->done;
        }
        if (events.empty() && !done && PeerClosed(fd)) return false;  // releaser cancels
        for (const Event& ev : events) {
          json lp = nullptr;
          if (logprobs && ev.logprobs.is_array()) {
            lp = route == ApiRoute::kChat ? json{{"content", ev.logprobs}}
                                          : CompletionLogprobs(ev.logprobs.get<std::vector<json>>());
          }
          if (ev.delta.empty() && lp.is_null()) continue;
          json chunk;
          if (route == ApiRoute::kChat) {
            json delta = json::object();
            if (!ev.delta.reasoning.empty()) delta["reasoning_content"] = ev.delta.reasoning;
            if (!ev.delta.content.empty() || delta.empty()) delta["content"] = ev.delta.content;
            chunk = ChatChunk(*ex, model, delta, nullptr, lp);
          } else {
            chunk = CompletionChunk(*ex, model, ev.delta.content, nullptr, lp);
          }
          if (!write(Sse(chunk))) return false;
        }
        if (!done) return true;
        std::string tail;
        if (ex->result.finish_reason == "error") {
          tail += Sse(MakeError(500, "generation failed: " + ex->result.error, "server_error").ToJson());
        } else {
          const std::string finish = FinishReason(*ex);
          if (route == ApiRoute::kChat) {
            if (!ex->tool_calls.empty()) {
              json calls = ex->tool_calls;
              for (size_t i = 0; i < calls.size(); ++i) calls[i]["index"] = i;
              tail += Sse(ChatChunk(*ex, model, {{"tool_calls", calls}}, nullptr, nullptr));
            }
            tail += Sse(ChatChunk(*ex, model, json::object(), finish, nullptr));
          } else {
            tail += Sse(CompletionChunk(*ex, model, "", finish, nullptr));
          }
          if (include_usage) {
            json usage = {{"id", ex->id},
                          {"object", route == ApiRoute::kChat ? "chat.completion.chunk" : "text_completion"},
                          {"created", ex->created},
                          {"model", model},
                          {"choices", json::array()},
                          {"usage", Usage(ex->result)}};
            tail += Sse(usage);
          }
        }
        tail += "data: [DONE]\n\n";
        if (!write(tail)) return false;
        sink.done();
        return true;
      },
      [ex, &s](bool success) {
        bool done;
        {
          std::lock_guard<std::mutex> lock(ex->mutex);
          done = ex->done;
        }
        if (!done || !success) {
          ex->handle->Cancel();
          if (!done) s.metrics.CountError("client_disconnected");
        }
        s.in_flight.fetch_sub(1);
      });
}

void HandleTokenize(ServerState& s, const httplib::Request& req, httplib::Response& res) {
  TokenizeRequest r;
  ApiError error;
  if (!ParseTokenizeRequest(req.body, &r, &error)) {
    s.metrics.CountError("invalid_request");
    return SendError(res, error);
  }
  const std::vector<int> ids = s.tokenizer->Encode(r.content, r.add_special);
  json tokens = json::array();
  for (int id : ids) {
    if (r.with_pieces) {
      tokens.push_back({{"id", id}, {"piece", std::string(s.tokenizer->Piece(id))}});
    } else {
      tokens.push_back(id);
    }
  }
  SendJson(res, 200, {{"tokens", tokens}});
}

void HandleDetokenize(ServerState& s, const httplib::Request& req, httplib::Response& res) {
  std::vector<int> ids;
  ApiError error;
  if (!ParseDetokenizeRequest(req.body, s.model->plan().vocab, &ids, &error)) {
    s.metrics.CountError("invalid_request");
    return SendError(res, error);
  }
  SendJson(res, 200, {{"content", s.tokenizer->Decode(ids, false)}});
}

std::string RouteLabel(const std::string& path) {
  static const char* kRoutes[] = {"/v1/chat/completions", "/v1/completions", "/generate", "/v1/models",
                                  "/health", "/v1/health", "/metrics", "/tokenize", "/detokenize"};
  for (const char* r : kRoutes)
    if (path == r) return r;
  return "other";
}

// Checks the model is up; otherwise answers 503.
bool Ready(ServerState& s, httplib::Response& res) {
  const Phase phase = s.phase.load();
  if (phase == Phase::kReady) {
    // The checkpoint's PLE table stays mapped: if the file was replaced or rewritten on disk,
    // refuse (one stat per shard) rather than serve from a stale or vanishing mapping.
    const auto& store = s.model->weights().store;
    Status unchanged = store ? store->CheckUnchanged() : OkStatus();
    if (unchanged.ok()) return true;
    s.metrics.CountError("model_changed");
    SendError(res, MakeError(503, unchanged.message(), "unavailable", "model_changed"));
    return false;
  }
  const bool loading = phase == Phase::kLoading;
  s.metrics.CountError(loading ? "loading" : "draining");
  res.set_header("Retry-After", "5");
  SendError(res, MakeError(503, loading ? "the model is loading" : "the server is shutting down", "unavailable",
                           loading ? "loading" : "draining"));
  return false;
}

bool BearerMatches(const std::string& header, const std::string& key) {
  const std::string want = "Bearer " + key;
  if (header.size() != want.size()) return false;
  unsigned char diff = 0;  // constant time: do not leak the key through timing
  for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned char>(header[i] ^ want[i]);
  return diff == 0;
}

Status LoadEverything(ServerState& s) {
  ModelOptions mo;
  mo.threads = s.options.threads;
  if (!ParseWeightType(s.options.quant, &mo.load.quant))
    return Status::Errorf("unknown weight format '", s.options.quant, "' (bf16, q8, q4)");
  if (s.options.tp > 1 || LaunchedByMpi()) {
    G4_ASSIGN_OR_RETURN(s.tp, TensorParallelLeader::Create(s.options.tp));
    G4_ASSIGN_OR_RETURN(s.model, s.tp->Load(s.options.model_dir, mo));
  } else {
    G4_ASSIGN_OR_RETURN(s.model, Model::Load(s.options.model_dir, mo));
  }
  // MODEL may be a directory or a `g4 pack` artifact: small files are read through io/pack.
  G4_ASSIGN_OR_RETURN(s.tokenizer, LoadModelTokenizer(s.options.model_dir));
  // The template revision decides small prompt details (thinking marker, empty thought channel).
  if (ModelHasFile(s.options.model_dir, "chat_template.jinja")) {
    G4_ASSIGN_OR_RETURN(std::string text,
                        ReadModelTextFile(s.options.model_dir, "chat_template.jinja"));
    const ChatTemplateInfo info = DetectChatTemplate(text);
    s.chat_features = info.features;
    Log(s, Str("chat template: ", info.revision, info.known ? "" : " (" + info.warning + ")"));
  }
  const ModelPlan& plan = s.model->plan();
  s.limits.vocab = plan.vocab;
  s.limits.defaults = plan.config.generation;
  s.limits.suppress_tokens = plan.config.suppress_tokens;
  s.limits.max_timeout_seconds = std::max(1.0, s.options.timeout_seconds);
  SchedulerOptions so;
  so.parallel = s.options.parallel;
  so.context = s.context;
  so.max_queue = s.options.max_queue;
  so.prefill_chunk = s.options.prefill_chunk;
  so.max_batch_rows = s.options.max_batch_rows;
  so.prefix_reuse = s.options.prefix_reuse;
  if (s.tp) s.tp->Start(so.parallel, so.context, so.prefill_chunk);
  s.scheduler = std::make_unique<Scheduler>(*s.model, so, s.tp.get());
  return OkStatus();
}

}  // namespace

int RunServer(const ServerOptions& options) {
  ServerState s;
  s.options = options;
  {
    std::random_device rd;
    char salt[16];
    std::snprintf(salt, sizeof salt, "%06x-", rd() & 0xffffff);
    s.id_salt = salt;
  }
  // Flags and config are checked before anything starts (front-door validation).
  if (options.parallel < 1 || options.parallel > 256) {
    std::fprintf(stderr, "g4 serve: --parallel must be in [1, 256], got %d\n", options.parallel);
    return 2;
  }
  if (options.port < 0 || options.port > 65535) {
    std::fprintf(stderr, "g4 serve: --port must be in [0, 65535], got %d\n", options.port);
    return 2;
  }
  auto config = LoadModelConfig(options.model_dir);
  if (!config.ok()) {
    std::fprintf(stderr, "g4 serve: %s\n", config.status().message().c_str());
    return 1;
  }
  const int model_max = config->max_position_embeddings > 0 ? config->max_position_embeddings : 4096;
  s.context = options.context > 0 ? options.context : std::min(4096, model_max);
  if (s.context < 2 || s.context > model_max) {
    std::fprintf(stderr, "g4 serve: --ctx must be in [2, %d] (the model's max_position_embeddings), got %d\n",
                 model_max, options.context);
    return 2;
  }
  if (options.tp > 1) {
    // A --tp the model cannot be split over is refused now, with the reason, not after loading.
    auto plan = BuildGemma4Plan(*config);
    Status st = plan.ok() ? CheckTensorParallel(*plan, options.tp) : plan.status();
    if (!st.ok()) {
      std::fprintf(stderr, "g4 serve: %s\n", st.message().c_str());
      return 2;
    }
  }
  s.model_name = options.model_name;
  if (s.model_name.empty()) {
    std::string dir = options.model_dir;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    s.model_name = dir.substr(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/') + 1);
  }

  // Signals: every thread blocks SIGTERM/SIGINT; one thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  httplib::Server svr;
  const int http_threads = options.http_threads > 0 ? options.http_threads
                                                    : std::max(32, options.parallel + options.max_queue + 16);
  svr.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
  svr.set_payload_max_length(options.max_body_bytes);
  svr.set_keep_alive_timeout(5);
  svr.set_read_timeout(30);
  svr.set_write_timeout(30);

  svr.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/health" || req.path == "/v1/health" || s.options.api_key.empty())
      return httplib::Server::HandlerResponse::Unhandled;
    if (BearerMatches(req.get_header_value("Authorization"), s.options.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    s.metrics.CountRequest(RouteLabel(req.path), 401);
    s.metrics.CountError("unauthorized");
    SendError(res, MakeError(401, "missing or wrong API key (send 'Authorization: Bearer <key>')",
                             "invalid_request_error", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.set_error_handler(httplib::Server::HandlerWithResponse([&s](const httplib::Request& req,
                                                                   httplib::Response& res) {
    if (!res.body.empty() || res.status == 499) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      e.message = Str("unknown route ", req.method, " ", req.path);
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message = Str("the request body is larger than ", s.options.max_body_bytes, " bytes");
      e.code = "payload_too_large";
    } else {
      e.message = Str("HTTP ", res.status);
    }
    s.metrics.CountRequest(RouteLabel(req.path), res.status);
    s.metrics.CountError(res.status == 404 ? "not_found" : res.status == 413 ? "payload_too_large" : "http");
    SendError(res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([&s](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    s.metrics.CountError("internal");
    SendError(res, MakeError(500, "internal error", "server_error"));
  });

  // Every handler: counted, in-flight tracked, and no exception escapes.
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  auto wrap = [&s](const std::string& route, bool needs_model, Handler fn) {
    return [&s, route, needs_model, fn](const httplib::Request& req, httplib::Response& res) {
      s.in_flight.fetch_add(1);
      try {
        if (!needs_model || Ready(s, res)) fn(req, res);
      } catch (const std::exception& e) {
        s.metrics.CountError("internal");
        SendError(res, MakeError(500, Str("internal error: ", e.what()), "server_error"));
      }
      s.metrics.CountRequest(route, res.status == -1 ? 200 : res.status);  // -1: a stream, 200 once sent
      s.in_flight.fetch_sub(1);
    };
  };
  // POST bodies are read here, through httplib's content reader, against a deadline for the
  // whole body (ServerOptions::body_timeout_seconds); then the handler sees a complete request.
  using BodyReader = httplib::Server::HandlerWithContentReader;
  auto with_body = [&s](Handler fn) -> BodyReader {
    return [&s, fn](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& read) {
      const auto deadline =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(s.options.body_timeout_seconds));
      std::string body;
      bool late = false;
      const bool complete = read([&](const char* data, size_t n) {
        body.append(data, n);
        late = Clock::now() > deadline;
        return !late;
      });
      if (!complete) {
        // httplib sets 413 when the body is over --max-body; otherwise late, or a broken read.
        const bool too_large = res.status == 413;
        const int status = too_large ? 413 : late ? 408 : 400;
        s.metrics.CountRequest(RouteLabel(req.path), status);
        s.metrics.CountError(too_large ? "payload_too_large" : late ? "body_timeout" : "body_read");
        // Answer and close: the unread rest of the body must not be parsed as the next request,
        // and a slow client must not keep the thread. httplib 0.11 keeps a keep-alive connection
        // open unless the request itself said "Connection: close", so the answer is written to
        // the socket here and the socket shut down; httplib's own write then fails and it closes.
        res.set_header("Connection", "close");
        SendError(
            res, MakeError(status,
                           too_large ? Str("the request body is larger than ", s.options.max_body_bytes, " bytes")
                           : late    ? Str("the request body did not arrive within ",
                                           s.options.body_timeout_seconds, " s")
                                     : "the request body could not be read",
                           "invalid_request_error",
                           too_large ? "payload_too_large" : late ? "request_timeout" : ""));
        if (const int fd = FindConnectionSocket(req); fd >= 0) {
          const std::string reply = Str("HTTP/1.1 ", status, status == 408 ? " Request Timeout" : status == 413 ? " Payload Too Large" : " Bad Request",
                                        "\r\nContent-Type: application/json\r\nContent-Length: ", res.body.size(),
                                        "\r\nConnection: close\r\n\r\n", res.body);
          (void)!::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
          ::shutdown(fd, SHUT_RDWR);
        }
        return;
      }
      httplib::Request full = req;
      full.body = std::move(body);
      fn(full, res);
    };
  };
  svr.Post("/v1/chat/completions", with_body(wrap("/v1/chat/completions", true, [&s](const auto& req, auto& res) {
             HandleGeneration(s, ApiRoute::kChat, req, res);
           })));
  svr.Post("/v1/completions", with_body(wrap("/v1/completions", true, [&s](const auto& req, auto& res) {
             HandleGeneration(s, ApiRoute::kCompletion, req, res);
           })));
  svr.Post("/generate", with_body(wrap("/generate", true, [&s](const auto& req, auto& res) {
             HandleGeneration(s, ApiRoute::kGenerate, req, res);
           })));
  svr.Post("/tokenize", with_body(wrap("/tokenize", true, [&s](const auto& req, auto& res) { HandleTokenize(s, req, res); })));
  svr.Post("/detokenize",
           with_body(wrap("/detokenize", true, [&s](const auto& req, auto& res) { HandleDetokenize(s, req, res); })));
  svr.Get("/v1/models", wrap("/v1/models", false, [&s](const auto&, auto& res) {
            json m = {{"id", s.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "g4"},
                      {"max_model_len", s.context}};
            SendJson(res, 200, {{"object", "list"}, {"data", json::array({m})}});
          }));
  auto health = [&s](const httplib::Request&, httplib::Response& res) {
    const Phase phase = s.phase.load();
    if (phase == Phase::kReady) {
      // A checkpoint changed on disk under the mapping: unhealthy, so that a supervisor restarts.
      const auto& store = s.model->weights().store;
      if (Status st = store ? store->CheckUnchanged() : OkStatus(); !st.ok())
        return SendJson(res, 503, {{"status", "model_changed"}, {"message", st.message()}});
      return SendJson(res, 200, {{"status", "ok"}});
    }
    SendJson(res, 503, {{"status", phase == Phase::kLoading ? "loading" : phase == Phase::kDraining ? "draining" : "error"}});
  };
  svr.Get("/health", wrap("/health", false, health));
  svr.Get("/v1/health", wrap("/v1/health", false, health));
  svr.Get("/metrics", wrap("/metrics", false, [&s](const auto&, auto& res) {
            ServerGauges g;
            g.ready = s.phase.load() == Phase::kReady;
            g.draining = s.phase.load() == Phase::kDraining;
            g.in_flight = s.in_flight.load();
            g.context = s.context;
            if (s.scheduler && s.phase.load() != Phase::kLoading) {
              g.have_scheduler = true;
              g.scheduler = s.scheduler->stats();
            }
            res.set_content(s.metrics.Render(g), "text/plain; version=0.0.4");
          }));

  // Port 0 takes a free port (tests); the log line says which.
  int port = options.port;
  if (port == 0) {
    port = svr.bind_to_any_port(options.host);
  } else if (!svr.bind_to_port(options.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    std::fprintf(stderr, "g4 serve: cannot listen on %s:%d: %s\n", options.host.c_str(), options.port,
                 std::strerror(errno));
    return 1;
  }
  Log(s, Str("listening on http://", options.host, ":", port, " (model ", s.model_name, " loading from ",
             options.model_dir, "; ctx ", s.context, " x ", options.parallel, " slots)"));
  if (options.tp > 1)
    Log(s, LaunchedByMpi()
               ? Str("tensor parallel over ", options.tp, " mpirun processes; this is rank 0 (pid ",
                     ::getpid(), "), the others follow it")
               : Str("tensor parallel over ", options.tp, " ranks (threads of this process)"));

  std::atomic<bool> loader_done{false};
  std::atomic<int> exit_code{0};
  std::thread loader([&] {
    const auto t0 = Clock::now();
    // Tests hold the loading phase open to observe it (G4_SERVE_LOAD_DELAY_MS).
    if (const char* delay = std::getenv("G4_SERVE_LOAD_DELAY_MS"))
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
    Status st = LoadEverything(s);
    if (!st.ok()) {
      Log(s, "cannot load the model: " + st.message());
      s.phase.store(Phase::kFailed);
      exit_code.store(1);
      loader_done.store(true);
      svr.stop();
      return;
    }
    Phase expected = Phase::kLoading;
    if (s.phase.compare_exchange_strong(expected, Phase::kReady)) {
      const SchedulerStats st2 = s.scheduler->stats();
      Log(s, Str("ready in ", Since(t0), " s: ", s.model->plan().n_layers(), " layers, vocab ", s.model->plan().vocab,
                 ", KV caches ", st2.kv_bytes >> 20, " MiB"));
    }
    loader_done.store(true);
  });

  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig == SIGINT && s.phase.load() == Phase::kFailed) return;
    if (s.phase.load() == Phase::kFailed) return;  // woken by main after a failure
    Log(s, Str("signal ", sig, ": draining (grace ", s.options.grace_seconds, " s)"));
    s.phase.store(Phase::kDraining);
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(s.options.grace_seconds));
    auto flush_until = deadline;
    if (loader_done.load() && s.scheduler) {
      s.scheduler->StopAccepting();
      if (!s.scheduler->WaitIdle(deadline)) {
        // Cancel what is left: every sequence ends now with finish_reason "cancelled", so its
        // client gets a final chunk instead of a stream that runs on past the grace period.
        Log(s, "grace period over; cancelling what is left");
        s.scheduler->Stop();
        flush_until = Clock::now() + std::chrono::seconds(5);
      }
    }
    // Let the HTTP threads write their last bytes.
    while (s.in_flight.load() > 0 && Clock::now() < flush_until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    svr.stop();
  });

  svr.listen_after_bind();
  // Wake the signal thread if it is still waiting (failed load).
  if (s.phase.load() == Phase::kFailed) pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  if (!loader_done.load()) {
    if (!LaunchedByMpi()) {
      // Stopped while still loading: nothing is in flight, and a load cannot be interrupted.
      Log(s, "stopped while loading");
      std::fflush(stderr);
      std::_Exit(0);
    }
    // The other processes are loading with this one: finish, so that all can be told to stop.
    Log(s, "stopped while loading; letting every rank finish loading so that all stop together");
  }
  loader.join();
  if (s.scheduler) s.scheduler->Stop();
  if (s.tp) {
    s.tp->Stop();  // the followers leave their step loop and exit
    const CommStats& cs = s.tp->comm()->stats();
    Log(s, Str("tensor parallel: ", cs.calls, " collectives, ", cs.seconds, " s in them"));
  }
  Log(s, exit_code.load() == 0 ? "stopped" : "exiting after an error");
  return exit_code.load();
}

}  // namespace g4
