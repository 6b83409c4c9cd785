#include "server/routes.h"

#include <algorithm>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/gbnf_parser.h"
#include "grammar/token_mask.h"
#include "grammar/tool_call_grammar.h"
#include "grammar/vocabulary_trie.h"
#include "server/exchange.h"
#include "server/http_transport.h"
#include "server/openai_response.h"
#include "server/responses_api.h"
#include "tokenizer/chat_gemma4.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace g4 {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string NewId(ServerState& s, const char* prefix) {
  return Str(prefix, s.id_salt, s.next_request.fetch_add(1));
}

// Checks the model is up; otherwise answers 503.
bool Ready(ServerState& s, httplib::Response& res) {
  const Phase phase = s.phase.load();
  if (phase == Phase::kReady) {
    // The checkpoint stays mapped: if a file was replaced or rewritten on disk, refuse rather than
    // serve from a stale or vanishing mapping.
    Status unchanged = s.engine.load()->CheckUnchanged();
    if (unchanged.ok()) return true;
    s.metrics.CountError("model_changed");
    SendError(res, MakeApiError(503, unchanged.message(), "unavailable", "model_changed"));
    return false;
  }
  const bool loading = phase == Phase::kLoading;
  s.metrics.CountError(loading ? "loading" : "draining");
  res.set_header("Retry-After", "5");
  SendError(res, MakeApiError(503, loading ? "the model is loading" : "the server is shutting down", "unavailable",
                              loading ? "loading" : "draining"));
  return false;
}

// A forced tool_choice: the token sequences the output must open with, one per allowed tool:
// "<|tool_call>call:NAME{" (the Gemma-4 call syntax), so the model writes only the arguments.
// In an open thought channel (in_thought) the output closes it first ("<channel|>"). With a
// tool-call grammar too, the opening is still these tokens (the canonical tokenization), and the
// grammar takes over for the arguments.
std::vector<std::vector<int>> ForcedCallPrefixes(const Tokenizer& tok, const ApiRequest& r, bool in_thought) {
  std::vector<std::vector<int>> prefixes;
  if (!r.tool_call_forced) return prefixes;
  for (const json& t : r.tools)
    prefixes.push_back(tok.Encode(Str(in_thought ? "<channel|>" : "", "<|tool_call>call:",
                                      t["function"]["name"].get<std::string>(), "{"),
                                  false));
  return prefixes;
}

// The vocabulary trie for token masks (grammar/vocabulary_trie.h), built once per server (a few
// hundred ms for 262k tokens); the end-of-sequence ids end a complete output.
std::shared_ptr<const grammar::TokenTrie> TokenTrieFor(ServerState& s, ServingEngine& engine) {
  std::lock_guard<std::mutex> lock(s.token_trie_mutex);
  if (!s.token_trie) {
    const Tokenizer& tok = engine.tokenizer();
    s.token_trie = grammar::BuildVocabularyTrie(
        engine.info().vocab, [&](int id) { return tok.InRange(id) ? tok.TokenBytes(id) : std::string(); },
        [&](int id) { return tok.IsSpecial(id); }, engine.info().eos_token_ids);
  }
  return s.token_trie;
}

// Tokenizes the request into prompt ids, or fails with a 400.
// *in_thought: the rendered prompt leaves the model inside a thought channel.
bool BuildPrompt(ServerState& s, ServingEngine& engine, const ApiRequest& r, std::vector<int>* ids,
                 bool* in_thought, ApiError* error) {
  const Tokenizer& tok = engine.tokenizer();
  if (r.route == ApiRoute::kChat || (r.route == ApiRoute::kGenerate && !r.raw)) {
    auto text = engine.chat_template().Render(r.chat_template);
    if (!text.ok()) {
      *error = MakeApiError(400, text.status().message(), "invalid_request_error", "", "messages");
      return false;
    }
    *ids = tok.Encode(*text, /*add_bos=*/false);  // the template writes {{ bos_token }} itself
    *in_thought = PromptOpensThought(*text);
  } else if (r.has_prompt_ids) {
    *ids = r.prompt_ids;
  } else {
    *ids = tok.Encode(r.prompt_text, /*add_bos=*/true);
  }
  const int context = s.options.context;
  if (static_cast<int64_t>(ids->size()) >= context) {
    *error = MakeApiError(400,
                          Str("the prompt has ", ids->size(), " tokens but the context is ", context,
                              " tokens per slot (--ctx), and at least one token must be left to generate"),
                          "invalid_request_error", "context_length_exceeded",
                          r.route == ApiRoute::kChat ? "messages" : "prompt");
    return false;
  }
  return true;
}

std::shared_ptr<Exchange> NewExchange(ServerState& s, ServingEngine& engine, const ApiRequest& r,
                                      const std::string& path, bool in_thought) {
  auto ex = std::make_shared<Exchange>();
  ex->route = r.route;
  ex->path = path;
  ex->who.id = NewId(s, r.route == ApiRoute::kChat         ? "chatcmpl-"
                        : r.route == ApiRoute::kCompletion ? "cmpl-"
                                                           : "gen-");
  ex->who.created = static_cast<int64_t>(std::time(nullptr));
  ex->who.model = s.model_name;
  ex->arrived = Clock::now();
  ex->chat_output = r.route == ApiRoute::kChat || (r.route == ApiRoute::kGenerate && !r.raw);
  ex->want_logprobs = r.logprobs;
  ex->include_usage = r.include_usage;
  ex->stop_ids = r.ignore_eos ? std::vector<int>{} : engine.info().eos_token_ids;
  ex->metrics = &s.metrics;
  ex->tokenizer = &engine.tokenizer();
  ex->log_requests = s.options.log_requests;
  // Chat output keeps the protocol markers for the splitter; raw completions drop special tokens.
  ex->decoder = std::make_unique<IncrementalDecoder>(engine.tokenizer(), /*skip_special=*/!ex->chat_output);
  ex->stop = std::make_unique<StopMatcher>(r.stop);
  ex->splitter = ChatOutputSplitter(/*forced_call=*/r.tool_call_forced, in_thought);
  return ex;
}

// The scheduler's request for `ex`, or a 400 when a forced tool call leaves no room.
bool BuildSequence(ServerState& s, ServingEngine& engine, const ApiRequest& r, std::vector<int> prompt,
                   bool in_thought, const std::shared_ptr<Exchange>& ex, SequenceRequest* seq,
                   ApiError* error) {
  const int64_t room = s.options.context - static_cast<int64_t>(prompt.size());
  seq->prompt = std::move(prompt);
  seq->max_new_tokens = static_cast<int>(std::min<int64_t>(r.max_tokens.value_or(room), room));
  seq->forced_prefixes = ForcedCallPrefixes(engine.tokenizer(), r, in_thought);
  size_t longest = 0;
  for (const auto& p : seq->forced_prefixes) longest = std::max(longest, p.size());
  if (longest > 0 && static_cast<size_t>(seq->max_new_tokens) <= longest) {
    // The call's opening alone would use up the budget: no room for arguments.
    const bool by_max_tokens = r.max_tokens && *r.max_tokens <= room;
    *error = MakeApiError(400,
                          Str("a forced tool call needs more than ", longest,
                              " tokens (\"<|tool_call>call:NAME{\"", " takes ", longest, "), but only ",
                              seq->max_new_tokens,
                              by_max_tokens ? " were allowed by max_tokens" : " are left in the context"),
                          "invalid_request_error", "", by_max_tokens ? "max_tokens" : "messages");
    return false;
  }
  if (!r.output_grammar.empty()) {
    grammar::GbnfLimits limits;
    limits.stand_in_bytes = r.tool_call_grammar;  // only the server's own tool-call grammars
    const std::string& text = in_thought && r.tool_call_grammar ? r.output_grammar_in_thought : r.output_grammar;
    auto g = grammar::ParseGbnf(text, limits);  // checked when the request was parsed
    if (!g.ok()) {
      *error = MakeApiError(400, g.status().message(), "invalid_request_error", "", "response_format");
      return false;
    }
    auto automaton = std::make_shared<grammar::Automaton>(std::move(g).value());
    if (automaton->exhausted()) {  // too wide to start: say so now rather than at the first token
      *error = MakeApiError(400, automaton->exhausted_reason(), "invalid_request_error", "", "response_format");
      return false;
    }
    seq->constraint = std::make_shared<grammar::TokenConstraint>(TokenTrieFor(s, engine), std::move(automaton));
  }
  seq->sampling = r.sampling;
  seq->stop_ids = ex->stop_ids;
  seq->top_logprobs = r.logprobs ? r.top_logprobs : -1;
  seq->timeout_seconds = r.timeout_seconds > 0 ? std::min(r.timeout_seconds, s.options.timeout_seconds)
                                               : s.options.timeout_seconds;
  seq->on_token = [ex](const TokenInfo& info) { return OnToken(*ex, info); };
  seq->on_done = [ex](const SequenceResult& result) { OnDone(*ex, result); };
  return true;
}

// Submits; on refusal answers 429 (queue full), 503 (draining) or 400 and returns false.
bool Submit(ServerState& s, ServingEngine& engine, SequenceRequest seq, Exchange& ex, httplib::Response& res) {
  SubmitResult submitted = engine.scheduler().Submit(std::move(seq));
  if (submitted.admission == Admission::kQueueFull) {
    s.metrics.CountError("queue_full");
    res.set_header("Retry-After", "1");
    SendError(res, MakeApiError(429, submitted.message, "rate_limit_exceeded", "queue_full"));
    return false;
  }
  if (submitted.admission == Admission::kStopped) {
    s.metrics.CountError("draining");
    SendError(res, MakeApiError(503, submitted.message, "unavailable", "draining"));
    return false;
  }
  if (submitted.admission != Admission::kAccepted) {
    s.metrics.CountError("invalid_request");
    SendError(res, MakeApiError(400, submitted.message, "invalid_request_error"));
    return false;
  }
  ex.handle = submitted.handle;
  return true;
}

void RespondWhole(ServerState& s, const ApiRequest& r, Exchange& ex, int fd, httplib::Response& res) {
  if (!WaitDone(ex, fd)) {
    s.metrics.CountError("client_disconnected");
    res.status = 499;  // nobody reads it
    return;
  }
  const GeneratedOutput out = Gather(ex);
  if (out.result.finish_reason == "error") {
    s.metrics.CountError("engine");
    return SendError(res, MakeApiError(500, "generation failed: " + out.result.error, "server_error"));
  }
  SendJson(res, 200, WholeResponse(r.route, ex.who, out, r.logprobs, r.prompt_text));
}

void HandleGeneration(ServerState& s, ApiRoute route, const httplib::Request& req, httplib::Response& res) {
  ServingEngine& engine = *s.engine.load();
  ApiRequest r;
  ApiError error;
  if (!ParseApiRequest(route, req.body, s.limits, &r, &error)) {
    s.metrics.CountError("invalid_request");
    return SendError(res, error);
  }
  std::vector<int> prompt;
  bool in_thought = false;
  if (!BuildPrompt(s, engine, r, &prompt, &in_thought, &error)) {
    s.metrics.CountError(error.code.empty() ? "invalid_request" : error.code);
    return SendError(res, error);
  }
  if (in_thought && !r.output_grammar.empty() && !r.tool_call_grammar) {
    // The grammar constrains the whole output, which would then be read as the thought.
    s.metrics.CountError("invalid_request");
    return SendError(res, MakeApiError(400, "structured output ('response_format' or 'grammar') needs thinking "
                                            "off: the prompt opens a thought channel",
                                       "invalid_request_error", "", "response_format"));
  }
  std::shared_ptr<Exchange> ex = NewExchange(s, engine, r, req.path, in_thought);
  SequenceRequest seq;
  if (!BuildSequence(s, engine, r, std::move(prompt), in_thought, ex, &seq, &error)) {
    s.metrics.CountError("invalid_request");
    return SendError(res, error);
  }
  if (!Submit(s, engine, std::move(seq), *ex, res)) return;
  const int fd = FindConnectionSocket(req);
  if (r.stream) return StreamExchange(ex, fd, res, &s.in_flight);
  RespondWhole(s, r, *ex, fd, res);
}

// /v1/responses: a stream's events come from the ResponsesWriter, and a finished response goes
// into the store (unless the request said store: false).
void StoreResponse(ServerState& s, const ResponsesWriter& writer) {
  if (writer.request().store) s.responses.Put(writer.id(), {writer.Response(), writer.Conversation()});
}

class ResponsesStreamFormat : public StreamFormat {
 public:
  ResponsesStreamFormat(ServerState& s, ResponsesWriter writer) : s_(s), writer_(std::move(writer)) {}
  std::string Start() override { return writer_.Start(); }
  std::string Piece(const Event& event) override { return writer_.Add(event.delta); }
  std::string Tail(const SequenceResult& result, const json& tool_calls) override {
    std::string tail = writer_.Finish(result, tool_calls);
    StoreResponse(s_, writer_);
    return tail;
  }

 private:
  ServerState& s_;
  ResponsesWriter writer_;
};

// POST /v1/responses: translated to a chat request (responses_api.h), then the chat path.
void HandleResponses(ServerState& s, const httplib::Request& req, httplib::Response& res) {
  ServingEngine& engine = *s.engine.load();
  ResponsesRequest rr;
  ApiError error;
  auto lookup = [&s](const std::string& id) -> std::optional<nlohmann::ordered_json> {
    std::optional<StoredResponse> stored = s.responses.Get(id);
    if (!stored) return std::nullopt;
    return std::move(stored->conversation);
  };
  if (!ParseResponsesRequest(req.body, s.limits, lookup, &rr, &error)) {
    s.metrics.CountError(error.code.empty() ? "invalid_request" : error.code);
    return SendError(res, error);
  }
  const ApiRequest r = rr.api;
  std::vector<int> prompt;
  bool in_thought = false;
  if (!BuildPrompt(s, engine, r, &prompt, &in_thought, &error)) {
    if (error.param == "messages") error.param = "input";
    s.metrics.CountError(error.code.empty() ? "invalid_request" : error.code);
    return SendError(res, error);
  }
  std::shared_ptr<Exchange> ex = NewExchange(s, engine, r, req.path, in_thought);
  ex->who.id = NewId(s, "resp_");
  SequenceRequest seq;
  if (!BuildSequence(s, engine, r, std::move(prompt), in_thought, ex, &seq, &error)) {
    if (error.param == "max_tokens") error.param = "max_output_tokens";
    if (error.param == "messages") error.param = "input";
    s.metrics.CountError("invalid_request");
    return SendError(res, error);
  }
  if (!Submit(s, engine, std::move(seq), *ex, res)) return;
  ResponsesWriter writer(std::move(rr), ex->who.id, ex->who.created, ex->who.model);
  const int fd = FindConnectionSocket(req);
  if (r.stream)
    return StreamExchange(ex, fd, res, &s.in_flight, std::make_shared<ResponsesStreamFormat>(s, std::move(writer)));
  if (!WaitDone(*ex, fd)) {
    s.metrics.CountError("client_disconnected");
    res.status = 499;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(ex->mutex);
    if (ex->result.finish_reason == "error") {
      s.metrics.CountError("engine");
      return SendError(res, MakeApiError(500, "generation failed: " + ex->result.error, "server_error"));
    }
    writer.Start();
    for (const Event& ev : ex->events) writer.Add(ev.delta);
    writer.Finish(ex->result, ex->tool_calls);
  }
  StoreResponse(s, writer);
  SendJson(res, 200, writer.Response());
}

// GET and DELETE /v1/responses/{id}: the store's copy.
void HandleStoredResponse(ServerState& s, bool erase, const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  if (erase) {
    if (!s.responses.Erase(id))
      return SendError(res, MakeApiError(404, Str("Response with id '", id, "' not found."), "invalid_request_error",
                                         "not_found", "response_id"));
    return SendJson(res, 200, {{"id", id}, {"object", "response.deleted"}, {"deleted", true}});
  }
  if (req.has_param("stream") && req.get_param_value("stream") != "false")
    return SendError(res, MakeApiError(400, "streaming a stored response again is not supported",
                                       "invalid_request_error", "", "stream"));
  std::optional<StoredResponse> stored = s.responses.Get(id);
  if (!stored)
    return SendError(res, MakeApiError(404, Str("Response with id '", id, "' not found."), "invalid_request_error",
                                       "not_found", "response_id"));
  SendJson(res, 200, stored->response);
}

void HandleTokenize(ServerState& s, const httplib::Request& req, httplib::Response& res) {
  const Tokenizer& tok = s.engine.load()->tokenizer();
  TokenizeRequest r;
  ApiError error;
  if (!ParseTokenizeRequest(req.body, &r, &error)) {
    s.metrics.CountError("invalid_request");
    return SendError(res, error);
  }
  const std::vector<int> ids = tok.Encode(r.content, r.add_special);
  json tokens = json::array();
  for (int id : ids) {
    if (r.with_pieces) {
      tokens.push_back({{"id", id}, {"piece", std::string(tok.Piece(id))}});
    } else {
      tokens.push_back(id);
    }
  }
  SendJson(res, 200, {{"tokens", tokens}});
}

// llama-server's /apply-template: the prompt a chat-completions body renders to, not generated.
void HandleApplyTemplate(ServerState& s, const httplib::Request& req, httplib::Response& res) {
  ServingEngine& engine = *s.engine.load();
  ApiRequest r;
  ApiError error;
  if (!ParseApiRequest(ApiRoute::kChat, req.body, s.limits, &r, &error)) {
    s.metrics.CountError("invalid_request");
    return SendError(res, error);
  }
  auto text = engine.chat_template().Render(r.chat_template);
  if (!text.ok()) {
    s.metrics.CountError("invalid_request");
    return SendError(res, MakeApiError(400, text.status().message(), "invalid_request_error", "", "messages"));
  }
  SendJson(res, 200, {{"prompt", *text}});
}

void HandleDetokenize(ServerState& s, const httplib::Request& req, httplib::Response& res) {
  ServingEngine& engine = *s.engine.load();
  std::vector<int> ids;
  ApiError error;
  if (!ParseDetokenizeRequest(req.body, engine.info().vocab, &ids, &error)) {
    s.metrics.CountError("invalid_request");
    return SendError(res, error);
  }
  SendJson(res, 200, {{"content", engine.tokenizer().Decode(ids, false)}});
}

void HandleModels(ServerState& s, httplib::Response& res) {
  json m = {{"id", s.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "g4"},
            {"max_model_len", s.options.context}};
  SendJson(res, 200, {{"object", "list"}, {"data", json::array({m})}});
}

void HandleHealth(ServerState& s, httplib::Response& res) {
  const Phase phase = s.phase.load();
  if (phase == Phase::kReady) {
    // A checkpoint changed on disk under the mapping: unhealthy, so that a supervisor restarts.
    if (Status st = s.engine.load()->CheckUnchanged(); !st.ok())
      return SendJson(res, 503, {{"status", "model_changed"}, {"message", st.message()}});
    return SendJson(res, 200, {{"status", "ok"}});
  }
  SendJson(res, 503, {{"status", phase == Phase::kLoading    ? "loading"
                                 : phase == Phase::kDraining ? "draining"
                                                             : "error"}});
}

void HandleMetrics(ServerState& s, httplib::Response& res) {
  ServerGauges g;
  g.ready = s.phase.load() == Phase::kReady;
  g.draining = s.phase.load() == Phase::kDraining;
  g.in_flight = s.in_flight.load();
  g.context = s.options.context;
  if (ServingEngine* engine = s.engine.load()) {
    g.have_scheduler = true;
    g.scheduler = engine->scheduler().stats();
  }
  res.set_content(s.metrics.Render(g), "text/plain; version=0.0.4");
}

// Every handler: counted, in-flight tracked, and no exception escapes. `needs_model`: 503 unless
// the model is loaded and unchanged.
Handler Counted(ServerState& s, const std::string& route, bool needs_model, Handler fn) {
  return [&s, route, needs_model, fn](const httplib::Request& req, httplib::Response& res) {
    s.in_flight.fetch_add(1);
    try {
      if (!needs_model || Ready(s, res)) fn(req, res);
    } catch (const std::exception& e) {
      s.metrics.CountError("internal");
      SendError(res, MakeApiError(500, Str("internal error: ", e.what()), "server_error"));
    }
    s.metrics.CountRequest(route, res.status == -1 ? 200 : res.status);  // -1: a stream, 200 once sent
    s.in_flight.fetch_sub(1);
  };
}

}  // namespace

void RegisterRoutes(httplib::Server& svr, ServerState& s) {
  auto post = [&](const std::string& path, Handler fn) {
    svr.Post(path, WithBody(s.options, s.metrics, Counted(s, path, /*needs_model=*/true, std::move(fn))));
  };
  auto get = [&](const std::string& path, Handler fn) {
    svr.Get(path, Counted(s, path, /*needs_model=*/false, std::move(fn)));
  };
  const std::pair<const char*, ApiRoute> generation[] = {
      {"/v1/chat/completions", ApiRoute::kChat},
      {"/v1/completions", ApiRoute::kCompletion},
      {"/generate", ApiRoute::kGenerate}};
  for (const auto& [path, route] : generation)
    post(path, [&s, route = route](const auto& req, auto& res) { HandleGeneration(s, route, req, res); });
  post("/v1/responses", [&s](const auto& req, auto& res) { HandleResponses(s, req, res); });
  const std::string stored = R"(/v1/responses/([A-Za-z0-9_.\-]+))";
  for (const bool erase : {false, true}) {
    Handler fn = Counted(s, "/v1/responses/{id}", /*needs_model=*/false,
                         [&s, erase](const auto& req, auto& res) { HandleStoredResponse(s, erase, req, res); });
    if (erase) {
      svr.Delete(stored, std::move(fn));
    } else {
      svr.Get(stored, std::move(fn));
    }
  }
  post("/tokenize", [&s](const auto& req, auto& res) { HandleTokenize(s, req, res); });
  post("/detokenize", [&s](const auto& req, auto& res) { HandleDetokenize(s, req, res); });
  post("/apply-template", [&s](const auto& req, auto& res) { HandleApplyTemplate(s, req, res); });
  get("/v1/models", [&s](const auto&, auto& res) { HandleModels(s, res); });
  get("/health", [&s](const auto&, auto& res) { HandleHealth(s, res); });
  get("/v1/health", [&s](const auto&, auto& res) { HandleHealth(s, res); });
  get("/metrics", [&s](const auto&, auto& res) { HandleMetrics(s, res); });
}

}  // namespace g4
