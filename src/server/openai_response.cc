#include "server/openai_response.h"

#include "tokenizer/tokenizer.h"

namespace g4 {

using nlohmann::json;

namespace {

json TokenBytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// The text of one token for logprobs (special markers kept).
std::string TokenText(const Tokenizer& tok, int id) { return tok.Decode({id}, false); }

}  // namespace

std::string FinishReason(const SequenceResult& result, const json& tool_calls) {
  if (result.finish_reason == "stop" && !tool_calls.empty()) return "tool_calls";
  return result.finish_reason;
}

json Usage(const SequenceResult& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"total_tokens", r.prompt_tokens + r.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

json LogprobEntry(const Tokenizer& tok, const TokenInfo& info) {
  const std::string text = TokenText(tok, info.token);
  json top = json::array();
  for (const auto& [id, lp] : info.top) {
    const std::string t = TokenText(tok, id);
    top.push_back({{"token", t}, {"logprob", lp}, {"bytes", TokenBytes(t)}});
  }
  return {{"token", text}, {"logprob", info.logprob}, {"bytes", TokenBytes(text)}, {"top_logprobs", top}};
}

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

json ChatChunk(const ResponseIdentity& who, json delta, json finish, json logprobs) {
  json choice = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)},
                 {"finish_reason", std::move(finish)}};
  return {{"id", who.id}, {"object", "chat.completion.chunk"}, {"created", who.created}, {"model", who.model},
          {"choices", json::array({choice})}};
}

json CompletionChunk(const ResponseIdentity& who, const std::string& text, json finish, json logprobs) {
  json choice = {{"index", 0}, {"text", text}, {"logprobs", std::move(logprobs)}, {"finish_reason", std::move(finish)}};
  return {{"id", who.id}, {"object", "text_completion"}, {"created", who.created}, {"model", who.model},
          {"choices", json::array({choice})}};
}

std::string Sse(const json& j) { return "data: " + DumpJson(j) + "\n\n"; }

json WholeResponse(ApiRoute route, const ResponseIdentity& who, const GeneratedOutput& out, bool logprobs,
                   const std::string& prompt) {
  const std::string finish = FinishReason(out.result, out.tool_calls);
  if (route == ApiRoute::kGenerate) {
    json body = {{"prompt", prompt}, {"response", out.content}, {"prompt_tokens", out.result.prompt_tokens},
                 {"gen_tokens", out.result.completion_tokens}, {"finish_reason", finish}};
    if (!out.reasoning.empty()) body["reasoning"] = out.reasoning;
    return body;
  }
  json choice;
  if (route == ApiRoute::kChat) {
    json message = {{"role", "assistant"}, {"content", out.content}};
    if (!out.reasoning.empty()) message["reasoning_content"] = out.reasoning;
    if (!out.tool_calls.empty()) {
      message["tool_calls"] = out.tool_calls;
      if (out.content.empty()) message["content"] = nullptr;
    }
    choice = {{"index", 0}, {"message", message}, {"finish_reason", finish}};
    choice["logprobs"] = logprobs ? json{{"content", out.logprobs}} : json(nullptr);
  } else {
    choice = {{"index", 0}, {"text", out.content}, {"finish_reason", finish}};
    choice["logprobs"] = logprobs ? CompletionLogprobs(out.logprobs) : json(nullptr);
  }
  return {{"id", who.id},
          {"object", route == ApiRoute::kChat ? "chat.completion" : "text_completion"},
          {"created", who.created},
          {"model", who.model},
          {"choices", json::array({choice})},
          {"usage", Usage(out.result)}};
}

std::string StreamPiece(ApiRoute route, const ResponseIdentity& who, const ChatDelta& delta,
                        const json& logprobs) {
  json lp = nullptr;
  if (logprobs.is_array()) {
    lp = route == ApiRoute::kChat ? json{{"content", logprobs}}
                                  : CompletionLogprobs(logprobs.get<std::vector<json>>());
  }
  if (delta.empty() && lp.is_null()) return "";
  if (route != ApiRoute::kChat) return Sse(CompletionChunk(who, delta.content, nullptr, lp));
  json d = json::object();
  if (!delta.reasoning.empty()) d["reasoning_content"] = delta.reasoning;
  if (!delta.content.empty() || d.empty()) d["content"] = delta.content;
  return Sse(ChatChunk(who, d, nullptr, lp));
}

std::string StreamTail(ApiRoute route, const ResponseIdentity& who, const SequenceResult& result,
                       const json& tool_calls, bool include_usage) {
  std::string tail;
  if (result.finish_reason == "error") {
    tail += Sse(MakeApiError(500, "generation failed: " + result.error, "server_error").ToJson());
  } else {
    const std::string finish = FinishReason(result, tool_calls);
    if (route == ApiRoute::kChat) {
      if (!tool_calls.empty()) {
        json calls = tool_calls;
        for (size_t i = 0; i < calls.size(); ++i) calls[i]["index"] = i;
        tail += Sse(ChatChunk(who, {{"tool_calls", calls}}, nullptr, nullptr));
      }
      tail += Sse(ChatChunk(who, json::object(), finish, nullptr));
    } else {
      tail += Sse(CompletionChunk(who, "", finish, nullptr));
    }
    if (include_usage) {
      json usage = {{"id", who.id},
                    {"object", route == ApiRoute::kChat ? "chat.completion.chunk" : "text_completion"},
                    {"created", who.created},
                    {"model", who.model},
                    {"choices", json::array()},
                    {"usage", Usage(result)}};
      tail += Sse(usage);
    }
  }
  return tail + "data: [DONE]\n\n";
}

}  // namespace g4
