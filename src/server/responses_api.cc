#include "server/responses_api.h"

#include <cmath>
#include <map>
#include <set>

#include "base/status.h"

namespace g4 {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

bool Fail(ApiError* error, const std::string& param, const std::string& message) {
  *error = MakeApiError(400, message, "invalid_request_error", "", param);
  return false;
}

bool Has(const json& j, const char* name) { return j.contains(name) && !j[name].is_null(); }

// json::value() throws on a present null or a non-boolean; requests may send "stream": null.
bool IsTrue(const json& j, const char* name) {
  return j.contains(name) && j[name].is_boolean() && j[name].get<bool>();
}

bool NonEmptyString(const json& j, const char* name) {
  return j.contains(name) && j[name].is_string() && !j[name].get<std::string>().empty();
}

// Top-level fields: read, passed on to the chat parser (g4's sampling extensions), or refused.
bool CheckFields(const json& body, ApiError* error) {
  static const std::set<std::string> kKnown = {
      "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
      "max_output_tokens", "temperature", "top_p", "stream", "stream_options", "store",
      "previous_response_id", "metadata", "user", "text", "reasoning", "include", "truncation",
      "service_tier", "prompt_cache_key", "safety_identifier", "background", "top_logprobs",
      // g4 extensions, as on chat completions.
      "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty", "repetition_penalty",
      "logit_bias", "stop", "ignore_eos", "timeout"};
  static const std::set<std::string> kRefused = {"conversation", "prompt", "max_tool_calls"};
  for (const auto& [key, value] : body.items()) {
    if (kRefused.count(key))
      return Fail(error, key, Str("'", key, "' is not supported by this server"));
    if (!kKnown.count(key)) return Fail(error, key, Str("unsupported field '", key, "'"));
  }
  if (Has(body, "background") && body["background"] != false)
    return Fail(error, "background",
                "'background' responses are not supported; 'background' must be false");
  if (Has(body, "truncation") && body["truncation"] != "disabled")
    return Fail(error, "truncation",
                "'truncation' must be \"disabled\" (the input is never shortened)");
  if (Has(body, "include")) {
    if (!body["include"].is_array()) return Fail(error, "include", "'include' must be an array");
    if (!body["include"].empty())
      return Fail(error, "include",
                  Str("'include' value ", body["include"][0].dump(),
                      " is not supported; 'include' must be empty"));
  }
  if (Has(body, "top_logprobs") && body["top_logprobs"] != 0)
    return Fail(error, "top_logprobs",
                "'top_logprobs' is not supported on /v1/responses; use chat completions");
  for (const char* name :
       {"service_tier", "prompt_cache_key", "safety_identifier", "user", "previous_response_id"})
    if (Has(body, name) && !body[name].is_string())
      return Fail(error, name, Str("'", name, "' must be a string"));
  for (const char* name : {"stream", "store", "parallel_tool_calls"})
    if (Has(body, name) && !body[name].is_boolean())
      return Fail(error, name, Str("'", name, "' must be a boolean"));
  if (Has(body, "metadata")) {
    const json& m = body["metadata"];
    if (!m.is_object() || m.size() > 16)
      return Fail(error, "metadata", "'metadata' must be an object of at most 16 entries");
    for (const auto& [k, v] : m.items())
      if (!v.is_string() || k.size() > 64 || v.get<std::string>().size() > 512)
        return Fail(
            error, "metadata",
            "'metadata' values must be strings (keys up to 64, values up to 512 characters)");
  }
  if (Has(body, "stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object()) return Fail(error, "stream_options", "'stream_options' must be an object");
    if (!IsTrue(body, "stream"))
      return Fail(error, "stream_options",
                  "'stream_options' is only allowed when 'stream' is true");
    for (const auto& [k, v] : so.items())
      if (k != "include_obfuscation" || !v.is_boolean())
        return Fail(error, "stream_options",
                    "'stream_options' may hold only 'include_obfuscation' (a boolean)");
  }
  return true;
}

// The text of a content array's parts of the allowed types ("input_text", "output_text").
bool PartsText(const json& content, const std::string& where, ApiError* error, std::string* text) {
  if (content.is_string()) {
    *text = content.get<std::string>();
    return true;
  }
  if (!content.is_array())
    return Fail(error, "input", Str(where, ".content must be a string or an array of parts"));
  for (size_t k = 0; k < content.size(); ++k) {
    const json& part = content[k];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return Fail(error, "input", Str(where, ".content[", k, "] must be an object with a 'type'"));
    const std::string type = part["type"].get<std::string>();
    if (type != "input_text" && type != "output_text")
      return Fail(error, "input",
                  Str(where, ".content[", k, "] of type '", type,
                      "' is not supported: this server takes text only (input_text, output_text)"));
    if (!part.contains("text") || !part["text"].is_string())
      return Fail(error, "input", Str(where, ".content[", k, "].text must be a string"));
    *text += part["text"].get<std::string>();
  }
  return true;
}

// Folds Responses input items into chat messages: message items as they are, function_call
// items into the assistant message they follow (as tool_calls), function_call_output items as
// tool messages, reasoning items as the next assistant message's reasoning_content.
class ItemFolder {
 public:
  // `messages` may already hold a previous response's conversation: its calls name tool outputs.
  explicit ItemFolder(ordered_json* messages) : messages_(*messages) {
    for (const ordered_json& m : messages_)
      if (m.contains("tool_calls"))
        for (const ordered_json& call : m["tool_calls"])
          names_[call["id"].get<std::string>()] = call["function"]["name"].get<std::string>();
  }

  bool Add(const json& item, size_t i, ApiError* error) {
    const std::string where = Str("input[", i, "]");
    if (!item.is_object()) return Fail(error, "input", Str(where, " must be an object"));
    std::string type = "message";
    if (item.contains("type")) {
      if (!item["type"].is_string())
        return Fail(error, "input", Str(where, ".type must be a string"));
      type = item["type"].get<std::string>();
    }
    if (type == "message") return AddMessage(item, where, error);
    if (type == "function_call") return AddCall(item, where, error);
    if (type == "function_call_output") return AddOutput(item, where, error);
    if (type == "reasoning") return AddReasoning(item, where, error);
    return Fail(
        error, "input",
        Str(where, " has type '", type,
            "', which is not supported (message, function_call, function_call_output, reasoning)"));
  }

 private:
  bool AddMessage(const json& item, const std::string& where, ApiError* error) {
    static const std::set<std::string> kRoles = {"user", "system", "developer", "assistant"};
    if (!item.contains("role") || !item["role"].is_string() ||
        !kRoles.count(item["role"].get<std::string>()))
      return Fail(error, "input",
                  Str(where, ".role must be one of user, system, developer, assistant"));
    if (!item.contains("content")) return Fail(error, "input", Str(where, ".content is required"));
    std::string text;
    if (!PartsText(item["content"], where, error, &text)) return false;
    const std::string role = item["role"].get<std::string>();
    ordered_json m = {{"role", role}, {"content", text}};
    if (role == "assistant") {
      TakeReasoning(&m);
    } else if (!reasoning_.empty()) {
      reasoning_.clear();  // a thought with no model turn after it has nothing to attach to
    }
    messages_.push_back(std::move(m));
    return true;
  }

  bool AddCall(const json& item, const std::string& where, ApiError* error) {
    if (!NonEmptyString(item, "name"))
      return Fail(error, "input", Str(where, ".name must be a non-empty string"));
    if (!NonEmptyString(item, "call_id"))
      return Fail(error, "input", Str(where, ".call_id must be a non-empty string"));
    if (!item.contains("arguments") || !item["arguments"].is_string())
      return Fail(error, "input", Str(where, ".arguments must be a JSON string"));
    ordered_json call = {{"id", item["call_id"]},
                         {"type", "function"},
                         {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
    names_[item["call_id"].get<std::string>()] = item["name"].get<std::string>();
    // Calls join the assistant message just before them (its text, or earlier calls).
    if (messages_.empty() || messages_.back()["role"] != "assistant" || !reasoning_.empty()) {
      ordered_json m = {{"role", "assistant"}, {"content", ""}};
      TakeReasoning(&m);
      messages_.push_back(std::move(m));
    }
    ordered_json& last = messages_.back();
    if (!last.contains("tool_calls")) last["tool_calls"] = ordered_json::array();
    last["tool_calls"].push_back(std::move(call));
    return true;
  }

  bool AddOutput(const json& item, const std::string& where, ApiError* error) {
    if (!NonEmptyString(item, "call_id"))
      return Fail(error, "input", Str(where, ".call_id must be a non-empty string"));
    if (!item.contains("output")) return Fail(error, "input", Str(where, ".output is required"));
    std::string text;
    if (!PartsText(item["output"], where + ".output", error, &text)) return false;
    const std::string id = item["call_id"].get<std::string>();
    ordered_json m = {{"role", "tool"}, {"tool_call_id", id}, {"content", text}};
    if (auto it = names_.find(id); it != names_.end()) m["name"] = it->second;
    messages_.push_back(std::move(m));
    return true;
  }

  bool AddReasoning(const json& item, const std::string& where, ApiError* error) {
    if (Has(item, "encrypted_content"))
      return Fail(error, "input", Str(where, ".encrypted_content is not supported"));
    for (const char* field : {"summary", "content"}) {
      if (!Has(item, field)) continue;
      if (!item[field].is_array())
        return Fail(error, "input", Str(where, ".", field, " must be an array"));
      for (const json& part : item[field]) {
        if (!part.is_object() || !part.contains("text") || !part["text"].is_string())
          return Fail(error, "input", Str(where, ".", field, " parts need a string 'text'"));
        // The full thought ("content") wins over its summary; here they are the same text.
        if (std::string(field) == "summary" && Has(item, "content")) continue;
        reasoning_ += part["text"].get<std::string>();
      }
    }
    return true;
  }

  void TakeReasoning(ordered_json* m) {
    if (reasoning_.empty()) return;
    (*m)["reasoning_content"] = reasoning_;
    reasoning_.clear();
  }

  ordered_json& messages_;
  std::string reasoning_;
  std::map<std::string, std::string> names_;  // call_id -> function name, for tool messages
};

bool TranslateInput(const json& body, ResponsesRequest* out, ApiError* error) {
  if (!Has(body, "input")) {
    if (out->conversation.empty()) return Fail(error, "input", "'input' is required");
    return true;
  }
  const json& input = body["input"];
  if (input.is_string()) {
    if (input.get<std::string>().empty()) return Fail(error, "input", "'input' is empty");
    out->conversation.push_back({{"role", "user"}, {"content", input}});
    return true;
  }
  if (!input.is_array())
    return Fail(error, "input", "'input' must be a string or an array of items");
  if (input.empty() && out->conversation.empty())
    return Fail(error, "input", "'input' must not be empty");
  ItemFolder folder(&out->conversation);
  for (size_t i = 0; i < input.size(); ++i)
    if (!folder.Add(input[i], i, error)) return false;
  return true;
}

// Flat Responses function tools -> chat tools; tool_choice likewise.
bool TranslateTools(const json& body, ordered_json* chat, ResponsesRequest* out, ApiError* error) {
  if (Has(body, "tools")) {
    const json& tools = body["tools"];
    if (!tools.is_array()) return Fail(error, "tools", "'tools' must be an array");
    ordered_json chat_tools = ordered_json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
      const json& t = tools[i];
      if (!t.is_object() || !t.contains("type") || !t["type"].is_string())
        return Fail(error, "tools", Str("tools[", i, "] must be an object with a 'type'"));
      if (t["type"] != "function")
        return Fail(error, "tools",
                    Str("tools[", i, "] has type '", t["type"].get<std::string>(),
                        "'; this server runs only 'function' tools"));
      if (!NonEmptyString(t, "name"))
        return Fail(error, "tools", Str("tools[", i, "].name must be a non-empty string"));
      if (Has(t, "parameters") && !t["parameters"].is_object())
        return Fail(error, "tools", Str("tools[", i, "].parameters must be a JSON Schema object"));
      if (Has(t, "description") && !t["description"].is_string())
        return Fail(error, "tools", Str("tools[", i, "].description must be a string"));
      ordered_json function = {{"name", t["name"]}};
      if (Has(t, "description")) function["description"] = t["description"];
      if (Has(t, "parameters"))
        function["parameters"] = ordered_json::parse(t["parameters"].dump());
      // strict: true constrains the call to the schema (server/tool_call_constraint.h). Unlike
      // OpenAI's Responses API, where it defaults to true, absent means false here, as in chat.
      if (Has(t, "strict")) function["strict"] = t["strict"];
      chat_tools.push_back({{"type", "function"}, {"function", function}});
    }
    (*chat)["tools"] = chat_tools;
    out->tools = tools;
  }
  if (Has(body, "tool_choice")) {
    const json& c = body["tool_choice"];
    if (c.is_string()) {
      (*chat)["tool_choice"] = c;  // the chat parser checks the value
    } else if (c.is_object() && c.value("type", json()) == "function" &&
               NonEmptyString(c, "name")) {
      (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    } else {
      return Fail(error, "tool_choice",
                  "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                  "\"function\", \"name\": ...}");
    }
    out->tool_choice = c;
  }
  return true;
}

// text.format -> response_format: the chat parser decides what it supports, in one place.
bool TranslateText(const json& body, ordered_json* chat, ResponsesRequest* out, ApiError* error) {
  if (!Has(body, "text")) return true;
  const json& text = body["text"];
  if (!text.is_object()) return Fail(error, "text", "'text' must be an object");
  for (const auto& [k, v] : text.items())
    if (k != "format" && k != "verbosity")
      return Fail(error, "text", Str("unsupported field 'text.", k, "'"));
  if (Has(text, "verbosity") && text["verbosity"] != "low" && text["verbosity"] != "medium" &&
      text["verbosity"] != "high")
    return Fail(error, "text.verbosity", "'text.verbosity' must be low, medium or high");
  if (Has(text, "format")) {
    const json& f = text["format"];
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
      return Fail(error, "text.format", "'text.format' must be an object with a 'type'");
    const std::string type = f["type"].get<std::string>();
    if (type == "json_schema") {
      if (!NonEmptyString(f, "name"))
        return Fail(error, "text.format", "'text.format.name' must be a non-empty string");
      if (!f.contains("schema") || !f["schema"].is_object())
        return Fail(error, "text.format", "'text.format.schema' must be a JSON Schema object");
      ordered_json schema = {{"name", f["name"]},
                             {"schema", ordered_json::parse(f["schema"].dump())}};
      if (f.contains("strict")) schema["strict"] = f["strict"];
      if (f.contains("description")) schema["description"] = f["description"];
      (*chat)["response_format"] = {{"type", "json_schema"}, {"json_schema", schema}};
    } else if (type == "text" || type == "json_object") {
      (*chat)["response_format"] = {{"type", type}};
    } else {
      return Fail(
          error, "text.format",
          Str("'text.format.type' must be text, json_object or json_schema, got '", type, "'"));
    }
  }
  out->text = text;
  if (!out->text.contains("format")) out->text["format"] = {{"type", "text"}};
  return true;
}

// reasoning {effort, summary}: thinking on unless effort is none/minimal (the chat parser maps
// reasoning_effort). A reasoning object without an effort asks for thinking ("medium").
bool TranslateReasoning(const json& body, ordered_json* chat, ResponsesRequest* out,
                        ApiError* error) {
  if (!Has(body, "reasoning")) return true;
  const json& r = body["reasoning"];
  if (!r.is_object()) return Fail(error, "reasoning", "'reasoning' must be an object");
  for (const auto& [k, v] : r.items())
    if (k != "effort" && k != "summary" && k != "generate_summary")
      return Fail(error, "reasoning", Str("unsupported field 'reasoning.", k, "'"));
  static const std::set<std::string> kSummaries = {"auto", "concise", "detailed"};
  for (const char* k : {"summary", "generate_summary"})
    if (Has(r, k) && (!r[k].is_string() || !kSummaries.count(r[k].get<std::string>())))
      return Fail(error, "reasoning.summary",
                  "'reasoning.summary' must be auto, concise or detailed");
  std::string effort = "medium";
  if (Has(r, "effort")) {
    if (!r["effort"].is_string())
      return Fail(error, "reasoning.effort", "'reasoning.effort' must be a string");
    effort = r["effort"].get<std::string>();
  }
  (*chat)["reasoning_effort"] = effort;
  out->reasoning = {{"effort", Has(r, "effort") ? r["effort"] : json(effort)},
                    {"summary", Has(r, "summary") ? r["summary"] : json(nullptr)}};
  return true;
}

// The chat body's other fields: length, sampling and g4's extensions, as sent.
void CopyGenerationFields(const json& body, ordered_json* chat) {
  if (body.contains("max_output_tokens")) (*chat)["max_tokens"] = body["max_output_tokens"];
  for (const char* name :
       {"temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty",
        "repetition_penalty", "logit_bias", "stop", "ignore_eos", "timeout", "parallel_tool_calls"})
    if (body.contains(name)) (*chat)[name] = ordered_json::parse(body[name].dump());
}

// The chat parser names chat fields; a Responses client knows them by their Responses names.
void RenameParam(ApiError* error) {
  static const std::map<std::string, std::string> kNames = {
      {"messages", "input"},
      {"max_tokens", "max_output_tokens"},
      {"response_format", "text.format"},
      {"reasoning_effort", "reasoning.effort"}};
  auto it = kNames.find(error->param);
  if (it == kNames.end()) return;
  // The message names it too ("'max_tokens' must be at least 1"); response_format's message
  // stays chat's own, so that the two routes refuse a format in the same words.
  const std::string quoted = "'" + it->first + "'";
  if (it->first != "response_format")
    for (size_t at = error->message.find(quoted); at != std::string::npos;
         at = error->message.find(quoted, at))
      error->message.replace(at, quoted.size(), "'" + it->second + "'");
  error->param = it->second;
}

}  // namespace

bool ParseResponsesRequest(const std::string& body, const ApiLimits& limits,
                           const ResponsesLookup& lookup, ResponsesRequest* out, ApiError* error) {
  *error = ApiError{};
  if (body.empty()) return Fail(error, "", "the request body is empty; expected a JSON object");
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return Fail(error, "", "the request body is not valid JSON (or not valid UTF-8)");
  if (!j.is_object())
    return Fail(error, "", Str("the request body must be a JSON object, got ", j.type_name()));
  if (!CheckFields(j, error)) return false;

  if (Has(j, "previous_response_id")) {
    const std::string id = j["previous_response_id"].get<std::string>();
    std::optional<ordered_json> previous = lookup ? lookup(id) : std::nullopt;
    if (!previous) {
      *error = MakeApiError(400, Str("Previous response with id '", id, "' not found."),
                            "invalid_request_error", "previous_response_not_found",
                            "previous_response_id");
      return false;
    }
    out->conversation = std::move(*previous);
    out->previous_response_id = id;
  }
  if (!TranslateInput(j, out, error)) return false;
  ordered_json chat = ordered_json::object();
  if (Has(j, "model")) chat["model"] = j["model"];
  if (Has(j, "instructions")) {
    if (!j["instructions"].is_string())
      return Fail(error, "instructions", "'instructions' must be a string");
    out->instructions = j["instructions"];
  }
  chat["messages"] = ordered_json::array();
  if (out->instructions.is_string())
    chat["messages"].push_back(
        {{"role", "system"}, {"content", out->instructions.get<std::string>()}});
  for (const ordered_json& m : out->conversation) chat["messages"].push_back(m);
  if (!TranslateTools(j, &chat, out, error)) return false;
  if (!TranslateText(j, &chat, out, error)) return false;
  if (!TranslateReasoning(j, &chat, out, error)) return false;
  CopyGenerationFields(j, &chat);
  if (!ParseApiRequest(ApiRoute::kChat, chat.dump(), limits, &out->api, error)) {
    RenameParam(error);
    return false;
  }
  out->api.stream = IsTrue(j, "stream");
  out->store = !j.contains("store") || j["store"] != false;
  if (j.contains("max_output_tokens")) out->max_output_tokens = j["max_output_tokens"];
  if (Has(j, "metadata")) out->metadata = j["metadata"];
  if (Has(j, "user")) out->user = j["user"];
  if (Has(j, "parallel_tool_calls"))
    out->parallel_tool_calls = j["parallel_tool_calls"].get<bool>();
  return true;
}

// ---- output ----

ResponsesWriter::ResponsesWriter(ResponsesRequest request, std::string id, int64_t created_at,
                                 std::string model)
    : request_(std::move(request)),
      id_(std::move(id)),
      created_at_(created_at),
      model_(std::move(model)) {}

std::string ResponsesWriter::ItemId(const char* prefix) const {
  // "resp_X" -> "msg_X_2": unique per server process, and tied to the response.
  const std::string tail = id_.substr(id_.find('_') + 1);
  return Str(prefix, tail, "_", output_.size());
}

std::string ResponsesWriter::Event(const std::string& type, json fields) {
  fields["type"] = type;
  fields["sequence_number"] = sequence_++;
  return "event: " + type + "\ndata: " + DumpJson(fields) + "\n\n";
}

namespace {
// A float sampling parameter as the client wrote it (0.95, not 0.949999988079071).
double Echo(float x) { return std::round(static_cast<double>(x) * 1e6) / 1e6; }
}  // namespace

json ResponsesWriter::Response() const {
  const ApiRequest& api = request_.api;
  json r = {{"id", id_},
            {"object", "response"},
            {"created_at", created_at_},
            {"status", status_},
            {"error", error_},
            {"incomplete_details", incomplete_details_},
            {"instructions", request_.instructions},
            {"max_output_tokens", request_.max_output_tokens},
            {"model", model_},
            {"output", output_},
            {"parallel_tool_calls", request_.parallel_tool_calls},
            {"previous_response_id", request_.previous_response_id},
            {"reasoning", request_.reasoning},
            {"store", request_.store},
            {"temperature", Echo(api.sampling.temperature)},
            {"text", request_.text},
            {"tool_choice", request_.tool_choice},
            {"tools", request_.tools},
            {"top_p", Echo(api.sampling.top_p)},
            {"truncation", "disabled"},
            {"usage", usage_},
            {"user", request_.user},
            {"metadata", request_.metadata}};
  return r;
}

std::string ResponsesWriter::Start() {
  std::string out = Event("response.created", {{"response", Response()}});
  return out + Event("response.in_progress", {{"response", Response()}});
}

std::string ResponsesWriter::OpenItem(Open kind) {
  std::string out = CloseItem();
  const size_t index = output_.size();
  json item;
  if (kind == Open::kReasoning) {
    item = {{"id", ItemId("rs_")}, {"type", "reasoning"}, {"summary", json::array()}};
    output_.push_back(item);
    out += Event("response.output_item.added", {{"output_index", index}, {"item", item}});
    out += Event("response.reasoning_summary_part.added",
                 {{"item_id", item["id"]},
                  {"output_index", index},
                  {"summary_index", 0},
                  {"part", {{"type", "summary_text"}, {"text", ""}}}});
    output_[index]["summary"].push_back({{"type", "summary_text"}, {"text", ""}});
  } else {
    item = {{"id", ItemId("msg_")},
            {"type", "message"},
            {"status", "in_progress"},
            {"role", "assistant"},
            {"content", json::array()}};
    output_.push_back(item);
    out += Event("response.output_item.added", {{"output_index", index}, {"item", item}});
    const json part = {{"type", "output_text"},
                       {"text", ""},
                       {"annotations", json::array()},
                       {"logprobs", json::array()}};
    out += Event(
        "response.content_part.added",
        {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}});
    output_[index]["content"].push_back(part);
  }
  open_ = kind;
  return out;
}

std::string ResponsesWriter::CloseItem() {
  if (open_ == Open::kNone) return "";
  const size_t index = output_.size() - 1;
  json& item = output_[index];
  std::string out;
  if (open_ == Open::kReasoning) {
    const json part = item["summary"][0];
    out += Event("response.reasoning_summary_text.done", {{"item_id", item["id"]},
                                                          {"output_index", index},
                                                          {"summary_index", 0},
                                                          {"text", part["text"]}});
    out += Event(
        "response.reasoning_summary_part.done",
        {{"item_id", item["id"]}, {"output_index", index}, {"summary_index", 0}, {"part", part}});
  } else {
    const json part = item["content"][0];
    out += Event("response.output_text.done", {{"item_id", item["id"]},
                                               {"output_index", index},
                                               {"content_index", 0},
                                               {"text", part["text"]},
                                               {"logprobs", json::array()}});
    out += Event(
        "response.content_part.done",
        {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}});
    // A response that stopped early leaves its last message unfinished, as OpenAI marks it.
    item["status"] =
        status_ == "in_progress" || status_ == "completed" ? "completed" : "incomplete";
  }
  out += Event("response.output_item.done", {{"output_index", index}, {"item", item}});
  open_ = Open::kNone;
  return out;
}

std::string ResponsesWriter::Add(const ChatDelta& delta) {
  std::string out;
  if (!delta.reasoning.empty()) {
    ++reasoning_tokens_;  // one delta per generated token: this token was thought
    if (open_ != Open::kReasoning) out += OpenItem(Open::kReasoning);
    const size_t index = output_.size() - 1;
    json& part = output_[index]["summary"][0];
    part["text"] = part["text"].get<std::string>() + delta.reasoning;
    out += Event("response.reasoning_summary_text.delta", {{"item_id", output_[index]["id"]},
                                                           {"output_index", index},
                                                           {"summary_index", 0},
                                                           {"delta", delta.reasoning}});
  }
  if (!delta.content.empty()) {
    if (open_ != Open::kMessage) out += OpenItem(Open::kMessage);
    const size_t index = output_.size() - 1;
    json& part = output_[index]["content"][0];
    part["text"] = part["text"].get<std::string>() + delta.content;
    out += Event("response.output_text.delta", {{"item_id", output_[index]["id"]},
                                                {"output_index", index},
                                                {"content_index", 0},
                                                {"delta", delta.content},
                                                {"logprobs", json::array()}});
  }
  return out;
}

std::string ResponsesWriter::Finish(const SequenceResult& result, const json& tool_calls) {
  if (result.finish_reason == "error") {
    status_ = "failed";
    error_ = {{"code", "server_error"}, {"message", "generation failed: " + result.error}};
  } else if (result.finish_reason == "length") {
    status_ = "incomplete";
    incomplete_details_ = {{"reason", "max_output_tokens"}};
  } else if (result.finish_reason == "timeout" || result.finish_reason == "cancelled") {
    status_ = "incomplete";
    incomplete_details_ = {{"reason", result.finish_reason}};  // g4's own reasons
  }
  std::string out = CloseItem();
  bool have_message = false;
  for (const json& item : output_) have_message = have_message || item["type"] == "message";
  // A completed turn always answers: an empty message when the model said nothing else.
  if (status_ == "in_progress" && !have_message && tool_calls.empty()) {
    out += OpenItem(Open::kMessage);
    out += CloseItem();
  }
  for (const json& call : tool_calls) {
    const size_t index = output_.size();
    const std::string item_id = ItemId("fc_");
    const std::string call_id = "call_" + item_id.substr(3);
    const json& fn = call["function"];
    json item = {{"id", item_id},      {"type", "function_call"}, {"status", "in_progress"},
                 {"call_id", call_id}, {"name", fn["name"]},      {"arguments", ""}};
    output_.push_back(item);
    out += Event("response.output_item.added", {{"output_index", index}, {"item", item}});
    out += Event("response.function_call_arguments.delta",
                 {{"item_id", item_id}, {"output_index", index}, {"delta", fn["arguments"]}});
    out += Event("response.function_call_arguments.done", {{"item_id", item_id},
                                                           {"output_index", index},
                                                           {"name", fn["name"]},
                                                           {"arguments", fn["arguments"]}});
    output_[index]["arguments"] = fn["arguments"];
    // The last call of a response cut short (max_output_tokens, timeout) may be cut itself: it
    // is never claimed complete.
    const bool cut = status_ == "incomplete" && &call == &tool_calls.back();
    output_[index]["status"] = cut ? "incomplete" : "completed";
    out += Event("response.output_item.done", {{"output_index", index}, {"item", output_[index]}});
  }
  if (status_ == "in_progress") status_ = "completed";
  usage_ = {{"input_tokens", result.prompt_tokens},
            {"input_tokens_details", {{"cached_tokens", result.cached_tokens}}},
            {"output_tokens", result.completion_tokens},
            {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens_}}},
            {"total_tokens", result.prompt_tokens + result.completion_tokens}};
  const std::string last = status_ == "completed" ? "response.completed"
                           : status_ == "failed"  ? "response.failed"
                                                  : "response.incomplete";
  return out + Event(last, {{"response", Response()}});
}

ordered_json ResponsesWriter::Conversation() const {
  ordered_json messages = request_.conversation;
  ordered_json turn = {{"role", "assistant"}, {"content", ""}};
  std::string reasoning;
  for (const json& item : output_) {
    if (item["type"] == "reasoning") {
      for (const json& part : item["summary"]) reasoning += part["text"].get<std::string>();
    } else if (item["type"] == "message") {
      turn["content"] =
          turn["content"].get<std::string>() + item["content"][0]["text"].get<std::string>();
    } else if (item["type"] == "function_call") {
      if (!turn.contains("tool_calls")) turn["tool_calls"] = ordered_json::array();
      turn["tool_calls"].push_back(
          {{"id", item["call_id"]},
           {"type", "function"},
           {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
    }
  }
  if (!reasoning.empty()) turn["reasoning_content"] = reasoning;
  messages.push_back(std::move(turn));
  return messages;
}

}  // namespace g4
