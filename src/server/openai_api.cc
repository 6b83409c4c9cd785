#include "server/openai_api.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <limits>
#include <set>

#include "base/status.h"
#include "server/response_format.h"
#include "server/tool_call_constraint.h"

namespace g4 {

ApiError MakeApiError(int status, std::string message, std::string type, std::string code,
                      std::string param) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  e.param = std::move(param);
  return e;
}

using nlohmann::json;

json ApiError::ToJson() const {
  json e = {{"message", message}, {"type", type}};
  e["param"] = param.empty() ? json(nullptr) : json(param);
  e["code"] = code.empty() ? json(nullptr) : json(code);
  return json{{"error", e}};
}

std::string DumpJson(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

namespace {

// Field readers: each returns false and fills the error when the field has the wrong type or
// range. Absent and null fields leave the output alone.
class Reader {
 public:
  Reader(const json& body, ApiError* error) : body_(body), error_(error) {}

  bool Fail(const std::string& param, const std::string& message) {
    error_->status = 400;
    error_->param = param;
    error_->message = message;
    return false;
  }
  bool Has(const char* name) const { return body_.contains(name) && !body_[name].is_null(); }
  const json& Get(const char* name) const { return body_[name]; }

  bool Bool(const char* name, bool* out) {
    if (!Has(name)) return true;
    if (!Get(name).is_boolean()) return Fail(name, Str("'", name, "' must be a boolean"));
    *out = Get(name).get<bool>();
    return true;
  }
  bool Number(const char* name, double lo, double hi, double* out) {
    if (!Has(name)) return true;
    const json& v = Get(name);
    if (!v.is_number()) return Fail(name, Str("'", name, "' must be a number"));
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < lo || d > hi)
      return Fail(name, Str("'", name, "' must be between ", lo, " and ", hi, ", got ", v.dump()));
    *out = d;
    return true;
  }
  bool Float(const char* name, double lo, double hi, float* out) {
    double d = *out;
    if (!Number(name, lo, hi, &d)) return false;
    *out = static_cast<float>(d);
    return true;
  }
  // Integers may arrive as 5 or 5.0; 5.5 is an error.
  bool Integer(const char* name, int64_t lo, int64_t hi, int64_t* out, bool clamp_high = false) {
    if (!Has(name)) return true;
    const json& v = Get(name);
    int64_t n = 0;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      n = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                           : static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      n = v.get<int64_t>();
    } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
               std::floor(v.get<double>()) == v.get<double>() && std::fabs(v.get<double>()) < 9e18) {
      n = static_cast<int64_t>(v.get<double>());
    } else {
      return Fail(name, Str("'", name, "' must be an integer"));
    }
    if (n < lo) return Fail(name, Str("'", name, "' must be at least ", lo, ", got ", n));
    if (n > hi) {
      if (!clamp_high) return Fail(name, Str("'", name, "' must be at most ", hi, ", got ", n));
      n = hi;
    }
    *out = n;
    return true;
  }
  bool String(const char* name, std::string* out) {
    if (!Has(name)) return true;
    if (!Get(name).is_string()) return Fail(name, Str("'", name, "' must be a string"));
    *out = Get(name).get<std::string>();
    return true;
  }

 private:
  const json& body_;
  ApiError* error_;
};

bool ParseBody(const std::string& body, json* out, ApiError* error) {
  if (body.empty()) {
    error->message = "the request body is empty; expected a JSON object";
    return false;
  }
  *out = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) {
    error->message = "the request body is not valid JSON (or not valid UTF-8)";
    return false;
  }
  if (!out->is_object()) {
    error->message = Str("the request body must be a JSON object, got ", out->type_name());
    return false;
  }
  return true;
}

bool ParseStop(Reader& r, std::vector<std::string>* stop) {
  if (!r.Has("stop")) return true;
  const json& v = r.Get("stop");
  std::vector<std::string> out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > 16) return r.Fail("stop", Str("'stop' may hold at most 16 strings, got ", v.size()));
    for (const auto& s : v) {
      if (!s.is_string()) return r.Fail("stop", "'stop' must be a string or an array of strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    return r.Fail("stop", "'stop' must be a string or an array of strings");
  }
  for (const auto& s : out) {
    if (s.empty()) return r.Fail("stop", "'stop' strings must not be empty");
    if (s.size() > 1024) return r.Fail("stop", "'stop' strings must be at most 1024 bytes");
  }
  *stop = std::move(out);
  return true;
}

bool ParseLogitBias(Reader& r, int vocab, std::map<int, float>* bias) {
  if (!r.Has("logit_bias")) return true;
  const json& v = r.Get("logit_bias");
  if (!v.is_object()) return r.Fail("logit_bias", "'logit_bias' must be an object of token id -> bias");
  if (v.size() > 1024) return r.Fail("logit_bias", "'logit_bias' may hold at most 1024 entries");
  for (const auto& [key, value] : v.items()) {
    char* end = nullptr;
    const long id = std::strtol(key.c_str(), &end, 10);
    if (key.empty() || *end != 0 || id < 0 || id >= vocab)
      return r.Fail("logit_bias", Str("'logit_bias' key \"", key, "\" is not a token id in [0, ", vocab, ")"));
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -100 ||
        value.get<double>() > 100)
      return r.Fail("logit_bias", Str("'logit_bias' values must be numbers in [-100, 100]"));
    (*bias)[static_cast<int>(id)] = value.get<float>();
  }
  return true;
}

// Token ids of a prompt given as [1, 2, 3] or [[1, 2, 3]].
bool ParseIds(Reader& r, const json& v, int vocab, std::vector<int>* ids) {
  for (const auto& t : v) {
    if (!t.is_number_integer() && !t.is_number_unsigned())
      return r.Fail("prompt", "'prompt' token arrays must hold integers");
    const int64_t id = t.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(t.get<uint64_t>(), 1ull << 40))
                                              : t.get<int64_t>();
    if (id < 0 || id >= vocab)
      return r.Fail("prompt", Str("'prompt' token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
    ids->push_back(static_cast<int>(id));
  }
  if (ids->empty()) return r.Fail("prompt", "'prompt' is empty");
  return true;
}

bool ParsePrompt(Reader& r, ApiRoute route, int vocab, ApiRequest* out) {
  if (!r.Has("prompt")) return r.Fail("prompt", "'prompt' is required");
  const json& v = r.Get("prompt");
  if (v.is_string()) {
    out->prompt_text = v.get<std::string>();
    if (out->prompt_text.empty()) return r.Fail("prompt", "'prompt' is empty");
    return true;
  }
  if (route == ApiRoute::kCompletion && v.is_array()) {
    if (v.empty()) return r.Fail("prompt", "'prompt' is empty");
    if (v[0].is_string() || v[0].is_array()) {
      // A list of prompts is a batch (n prompts -> n choices); one is allowed.
      if (v.size() != 1)
        return r.Fail("prompt", Str("'prompt' holds ", v.size(), " prompts; this server answers one prompt per request"));
      if (v[0].is_string()) {
        out->prompt_text = v[0].get<std::string>();
        if (out->prompt_text.empty()) return r.Fail("prompt", "'prompt' is empty");
        return true;
      }
      out->has_prompt_ids = true;
      return ParseIds(r, v[0], vocab, &out->prompt_ids);
    }
    out->has_prompt_ids = true;
    return ParseIds(r, v, vocab, &out->prompt_ids);
  }
  return r.Fail("prompt", route == ApiRoute::kCompletion ? "'prompt' must be a string or an array of token ids"
                                                         : "'prompt' must be a string");
}

bool ParseContentParts(Reader& r, const json& content, const std::string& where) {
  if (content.is_string() || content.is_null()) return true;
  if (!content.is_array()) return r.Fail("messages", Str(where, ".content must be a string or an array of parts"));
  for (const auto& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return r.Fail("messages", Str(where, ".content parts must be objects with a 'type'"));
    const std::string type = part["type"].get<std::string>();
    if (type != "text")
      return r.Fail("messages", Str(where, ".content part of type '", type,
                                    "' is not supported: this server serves text models only"));
    if (!part.contains("text") || !part["text"].is_string())
      return r.Fail("messages", Str(where, ".content text parts need a string 'text'"));
  }
  return true;
}

bool ParseMessages(Reader& r, ApiRequest* out) {
  if (!r.Has("messages")) return r.Fail("messages", "'messages' is required");
  const json& v = r.Get("messages");
  if (!v.is_array()) return r.Fail("messages", "'messages' must be an array");
  if (v.empty()) return r.Fail("messages", "'messages' must not be empty");
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  for (size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string where = Str("messages[", i, "]");
    if (!m.is_object()) return r.Fail("messages", Str(where, " must be an object"));
    if (!m.contains("role") || !m["role"].is_string())
      return r.Fail("messages", Str(where, ".role must be a string"));
    const std::string role = m["role"].get<std::string>();
    if (!kRoles.count(role))
      return r.Fail("messages", Str(where, ".role '", role, "' is not one of system, developer, user, assistant, tool"));
    const bool has_calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
    if (!m.contains("content") || m["content"].is_null()) {
      if (!(role == "assistant" && has_calls))
        return r.Fail("messages", Str(where, ".content is required"));
    }
    if (m.contains("content") && !ParseContentParts(r, m["content"], where)) return false;
    if (has_calls) {
      if (role != "assistant") return r.Fail("messages", Str(where, ".tool_calls is only allowed on assistant messages"));
      if (!m["tool_calls"].is_array()) return r.Fail("messages", Str(where, ".tool_calls must be an array"));
      for (const auto& call : m["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
            !call["function"].contains("name") || !call["function"]["name"].is_string())
          return r.Fail("messages", Str(where, ".tool_calls entries need function.name"));
        if (call["function"].contains("arguments") && !call["function"]["arguments"].is_string() &&
            !call["function"]["arguments"].is_object())
          return r.Fail("messages", Str(where, ".tool_calls[].function.arguments must be a JSON string"));
      }
    }
  }
  out->messages = v;
  return true;
}

bool ParseTools(Reader& r, ApiRequest* out) {
  if (r.Has("functions") || r.Has("function_call"))
    return r.Fail(r.Has("functions") ? "functions" : "function_call",
                  "'functions'/'function_call' are deprecated and not supported; use 'tools'/'tool_choice'");
  if (r.Has("tools")) {
    const json& tools = r.Get("tools");
    if (!tools.is_array()) return r.Fail("tools", "'tools' must be an array");
    for (size_t i = 0; i < tools.size(); ++i) {
      const json& t = tools[i];
      if (!t.is_object() || !t.contains("type") || t["type"] != "function")
        return r.Fail("tools", Str("tools[", i, "] must be {\"type\": \"function\", \"function\": {...}}"));
      if (!t.contains("function") || !t["function"].is_object() || !t["function"].contains("name") ||
          !t["function"]["name"].is_string() || t["function"]["name"].get<std::string>().empty())
        return r.Fail("tools", Str("tools[", i, "].function.name must be a non-empty string"));
      if (t["function"].contains("parameters") && !t["function"]["parameters"].is_object() &&
          !t["function"]["parameters"].is_null())
        return r.Fail("tools", Str("tools[", i, "].function.parameters must be a JSON Schema object"));
    }
    out->tools = tools;
    out->tools_enabled = !tools.empty();
  }
  if (r.Has("tool_choice")) {
    const json& c = r.Get("tool_choice");
    const bool have_tools = out->tools.is_array() && !out->tools.empty();
    if (c.is_string()) {
      const std::string s = c.get<std::string>();
      if (s == "none") {
        out->tools_enabled = false;
      } else if (s == "auto") {
      } else if (s == "required") {
        if (!have_tools)
          return r.Fail("tool_choice", "tool_choice \"required\" needs a non-empty 'tools' array");
        out->tool_call_forced = true;
      } else {
        return r.Fail(
            "tool_choice",
            Str("'tool_choice' must be \"none\", \"auto\", \"required\" or ",
                "{\"type\": \"function\", \"function\": {\"name\": ...}}, got \"", s, "\""));
      }
    } else if (c.is_object()) {
      if (!c.contains("type") || c["type"] != "function" || !c.contains("function") ||
          !c["function"].is_object() || !c["function"].contains("name") ||
          !c["function"]["name"].is_string())
        return r.Fail("tool_choice",
                      "an object 'tool_choice' must be {\"type\": \"function\", \"function\": "
                      "{\"name\": ...}}");
      const std::string name = c["function"]["name"].get<std::string>();
      if (!have_tools)
        return r.Fail("tool_choice",
                      Str("tool_choice names function '", name, "' but 'tools' is empty"));
      // Only the named tool is rendered (as SGLang does): the model sees no other to confuse it
      // with.
      json chosen = json::array();
      for (const json& t : out->tools)
        if (t["function"]["name"] == name) chosen.push_back(t);
      if (chosen.empty())
        return r.Fail("tool_choice",
                      Str("tool_choice names function '", name, "', which is not in 'tools'"));
      out->tools = json::array({chosen[0]});
      out->tool_call_forced = true;
    } else {
      return r.Fail("tool_choice", "'tool_choice' must be a string or an object");
    }
  }
  return true;
}

// Every field we read or knowingly ignore. Anything else is an error, never silence.
bool CheckKnownFields(Reader& r, const json& j, ApiRoute route) {
  static const std::set<std::string> kCommon = {
      "model", "max_tokens", "temperature", "top_k", "top_p", "min_p", "seed", "stop",
      "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "stream",
      "stream_options", "n", "user", "timeout", "ignore_eos", "metadata", "store", "service_tier",
      "response_format", "grammar"};
  static const std::set<std::string> kChat = {"messages", "max_completion_tokens", "logprobs", "top_logprobs",
                                              "tools", "tool_choice", "parallel_tool_calls", "functions",
                                              "function_call", "chat_template_kwargs",
                                              "reasoning_effort", "add_generation_prompt"};
  static const std::set<std::string> kCompletion = {"prompt", "logprobs", "echo", "best_of", "suffix"};
  static const std::set<std::string> kGenerate = {"prompt", "max_new_tokens", "raw"};
  for (const auto& [key, value] : j.items()) {
    const bool known = kCommon.count(key) || (route == ApiRoute::kChat && kChat.count(key)) ||
                       (route == ApiRoute::kCompletion && kCompletion.count(key)) ||
                       (route == ApiRoute::kGenerate && kGenerate.count(key));
    if (!known) return r.Fail(key, Str("unsupported field '", key, "'"));
  }
  return true;
}

bool ParseSampling(Reader& r, ApiRoute route, const ApiLimits& limits, SamplingParams* sampling) {
  SamplingParams& s = *sampling;
  // Defaults: the checkpoint's generation_config (sampling if do_sample, else greedy);
  // /generate is greedy unless told otherwise, like the server it replaces.
  if (limits.defaults.do_sample && route != ApiRoute::kGenerate) {
    s.temperature = static_cast<float>(limits.defaults.temperature);
    s.top_k = limits.defaults.top_k;
    s.top_p = static_cast<float>(limits.defaults.top_p);
  }
  if (!r.Float("temperature", 0, 2, &s.temperature)) return false;
  int64_t top_k = s.top_k;
  if (!r.Integer("top_k", 0, 1 << 30, &top_k)) return false;
  s.top_k = static_cast<int>(std::min<int64_t>(top_k, limits.vocab));
  if (!r.Float("top_p", 0, 1, &s.top_p)) return false;
  if (!r.Float("min_p", 0, 1, &s.min_p)) return false;
  if (!r.Float("presence_penalty", -2, 2, &s.presence_penalty)) return false;
  if (!r.Float("frequency_penalty", -2, 2, &s.frequency_penalty)) return false;
  if (!r.Float("repetition_penalty", 0.01, 10, &s.repetition_penalty)) return false;
  if (r.Has("seed")) {
    const json& v = r.Get("seed");
    if (v.is_number_unsigned()) {
      s.seed = v.get<uint64_t>();
    } else if (v.is_number_integer()) {
      s.seed = static_cast<uint64_t>(v.get<int64_t>());
    } else {
      return r.Fail("seed", "'seed' must be an integer");
    }
    s.has_seed = true;
  }
  if (!ParseLogitBias(r, limits.vocab, &s.logit_bias)) return false;
  s.suppress_tokens = limits.suppress_tokens;
  return true;
}

// Length, stop conditions, time limit, n, streaming and user.
bool ParseLimitsAndStream(Reader& r, ApiRoute route, const ApiLimits& limits, ApiRequest* out) {
  int64_t max_tokens = -1;
  // max_tokens caps to the room left later; only the sign and type are errors here.
  const int64_t kHuge = int64_t{1} << 40;
  if (!r.Integer("max_tokens", 1, kHuge, &max_tokens, true)) return false;
  if (route == ApiRoute::kChat && !r.Integer("max_completion_tokens", 1, kHuge, &max_tokens, true)) return false;
  if (route == ApiRoute::kGenerate && !r.Integer("max_new_tokens", 1, kHuge, &max_tokens, true)) return false;
  if (max_tokens > 0) out->max_tokens = max_tokens;

  if (!ParseStop(r, &out->stop)) return false;
  if (!r.Bool("ignore_eos", &out->ignore_eos)) return false;
  if (!r.Number("timeout", 0.001, limits.max_timeout_seconds, &out->timeout_seconds)) return false;

  int64_t n = 1;
  if (!r.Integer("n", 1, 1 << 20, &n)) return false;
  if (n != 1) return r.Fail("n", Str("'n' must be 1 (one choice per request), got ", n));

  if (!r.Bool("stream", &out->stream)) return false;
  if (route == ApiRoute::kGenerate && out->stream)
    return r.Fail("stream", "/generate does not stream; use /v1/completions or /v1/chat/completions");
  if (r.Has("stream_options")) {
    const json& so = r.Get("stream_options");
    if (!so.is_object()) return r.Fail("stream_options", "'stream_options' must be an object");
    if (!out->stream) return r.Fail("stream_options", "'stream_options' is only allowed when 'stream' is true");
    for (const auto& [key, value] : so.items()) {
      if (key != "include_usage") return r.Fail("stream_options", Str("unsupported stream_options field '", key, "'"));
      if (!value.is_boolean()) return r.Fail("stream_options", "'stream_options.include_usage' must be a boolean");
      out->include_usage = value.get<bool>();
    }
  }
  if (r.Has("user") && !r.Get("user").is_string()) return r.Fail("user", "'user' must be a string");
  return true;
}

// The chat route's own fields: messages, tools, logprobs, response_format, thinking.
bool ParseChatFields(Reader& r, ApiRequest* out) {
  if (!ParseMessages(r, out)) return false;
  if (!ParseTools(r, out)) return false;
  if (!r.Bool("logprobs", &out->logprobs)) return false;
  int64_t top = 0;
  if (!r.Integer("top_logprobs", 0, 20, &top)) return false;
  if (r.Has("top_logprobs") && !out->logprobs)
    return r.Fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  out->top_logprobs = static_cast<int>(top);
  if (r.Has("chat_template_kwargs")) {
    const json& k = r.Get("chat_template_kwargs");
    if (!k.is_object()) return r.Fail("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    // Passed to the template as they are (preserve_thinking, anything a template reads);
    // enable_thinking is checked because the server reads it too.
    if (k.contains("enable_thinking")) {
      if (!k["enable_thinking"].is_boolean())
        return r.Fail("chat_template_kwargs", "'chat_template_kwargs.enable_thinking' must be a boolean");
      out->enable_thinking = k["enable_thinking"].get<bool>();
    }
    if (k.contains("messages") || k.contains("tools"))
      return r.Fail("chat_template_kwargs", "'chat_template_kwargs' may not set 'messages' or 'tools'");
  }
  if (r.Has("reasoning_effort")) {
    std::string effort;
    if (!r.String("reasoning_effort", &effort)) return false;
    if (effort == "none" || effort == "minimal") {
      out->enable_thinking = false;
    } else if (effort == "low" || effort == "medium" || effort == "high") {
      out->enable_thinking = true;
    } else {
      return r.Fail("reasoning_effort", "'reasoning_effort' must be none, minimal, low, medium or high");
    }
  }
  if (r.Has("parallel_tool_calls") && !r.Get("parallel_tool_calls").is_boolean())
    return r.Fail("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
  if (r.Has("parallel_tool_calls")) out->parallel_tool_calls = r.Get("parallel_tool_calls").get<bool>();
  bool add_generation_prompt = true;
  if (!r.Bool("add_generation_prompt", &add_generation_prompt)) return false;
  return true;
}

// What the chat template sees (ChatTemplateRequestFromBody): the body re-read with its key order
// kept, since Python dicts keep it and templates print dicts in that order. The body was
// validated above, so this only fails on what validation let through.
bool BuildTemplateRequest(const std::string& body, ApiRequest* out, ApiError* error) {
  auto request = ChatTemplateRequestFromBody(nlohmann::ordered_json::parse(body, nullptr, false));
  if (!request.ok()) {
    *error = MakeApiError(400, request.status().message(), "invalid_request_error", "", "messages");
    return false;
  }
  out->chat_template = std::move(*request);
  return true;
}

// Legacy completions' own fields.
bool ParseCompletionFields(Reader& r, ApiRequest* out) {
  // Legacy completions: logprobs is the number of alternatives (0-5 in OpenAI; we allow 20).
  if (r.Has("logprobs")) {
    int64_t k = 0;
    if (!r.Integer("logprobs", 0, 20, &k)) return false;
    out->logprobs = true;
    out->top_logprobs = static_cast<int>(k);
  }
  bool echo = false;
  if (!r.Bool("echo", &echo)) return false;
  if (echo) return r.Fail("echo", "'echo' is not supported");
  int64_t best_of = 1;
  if (!r.Integer("best_of", 1, 1 << 20, &best_of)) return false;
  if (best_of != 1) return r.Fail("best_of", "'best_of' must be 1");
  std::string suffix;
  if (!r.String("suffix", &suffix)) return false;
  if (!suffix.empty()) return r.Fail("suffix", "'suffix' (insertion) is not supported");
  return true;
}

// response_format / grammar -> output_grammar. The schema is read from the body re-parsed with its
// key order kept: properties come out in the schema's order.
bool ParseOutputGrammar(Reader& r, const std::string& body, ApiRequest* out) {
  if (r.Has("grammar")) {
    if (!r.Get("grammar").is_string()) return r.Fail("grammar", "'grammar' must be a string (GBNF)");
    auto g = CheckedGbnf(r.Get("grammar").get<std::string>());
    if (!g.ok()) return r.Fail("grammar", "'grammar': " + g.status().message());
    out->output_grammar = *g;
  }
  if (r.Has("response_format")) {
    const auto ordered = nlohmann::ordered_json::parse(body, nullptr, false);
    auto g = ResponseFormatGrammar(ordered["response_format"]);
    if (!g.ok()) return r.Fail("response_format", "'response_format' " + g.status().message());
    if (!g->empty() && !out->output_grammar.empty())
      return r.Fail("response_format", "give 'response_format' or 'grammar', not both");
    if (!g->empty()) out->output_grammar = *g;
  }
  if (!out->output_grammar.empty() && out->tool_call_forced)
    return r.Fail("tool_choice", "a forced tool call cannot be combined with 'response_format' or 'grammar'");
  return true;
}

// Strict or forced tool calls -> a tool-call grammar as output_grammar.
bool ParseToolCallGrammar(Reader& r, ApiRequest* out) {
  auto grammars = ToolCallGrammarsFor(out->tools, out->tool_call_forced, out->parallel_tool_calls,
                                      out->enable_thinking);
  if (!grammars.ok()) return r.Fail("tools", grammars.status().message());
  if (grammars->grammar.empty()) return true;
  if (!out->output_grammar.empty())  // forced calls were refused with it already
    return r.Fail("response_format", "strict tools cannot be combined with 'response_format' or 'grammar'");
  out->output_grammar = std::move(grammars->grammar);
  out->output_grammar_in_thought = std::move(grammars->grammar_in_thought);
  out->tool_call_grammar = true;
  return true;
}

}  // namespace

bool ParseApiRequest(ApiRoute route, const std::string& body, const ApiLimits& limits, ApiRequest* out,
                     ApiError* error) {
  *error = ApiError{};
  *out = ApiRequest{};
  out->route = route;
  json j;
  if (!ParseBody(body, &j, error)) return false;
  Reader r(j, error);
  if (!CheckKnownFields(r, j, route)) return false;
  if (!r.String("model", &out->model)) return false;
  if (!ParseSampling(r, route, limits, &out->sampling)) return false;
  if (!ParseLimitsAndStream(r, route, limits, out)) return false;
  if (route == ApiRoute::kChat) {
    if (!ParseChatFields(r, out)) return false;
    if (!BuildTemplateRequest(body, out, error)) return false;
  } else {
    if (!ParsePrompt(r, route, limits.vocab, out)) return false;
  }
  if (route == ApiRoute::kCompletion && !ParseCompletionFields(r, out)) return false;
  if (route == ApiRoute::kGenerate && !r.Bool("raw", &out->raw)) return false;
  if (route == ApiRoute::kGenerate)
    out->chat_template.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", out->prompt_text}}});
  if ((r.Has("response_format") || r.Has("grammar")) && !ParseOutputGrammar(r, body, out)) return false;
  if (route == ApiRoute::kChat && out->tools_enabled && !ParseToolCallGrammar(r, out)) return false;
  return true;
}

bool ParseTokenizeRequest(const std::string& body, TokenizeRequest* out, ApiError* error) {
  *error = ApiError{};
  json j;
  if (!ParseBody(body, &j, error)) return false;
  Reader r(j, error);
  for (const auto& [key, value] : j.items())
    if (key != "content" && key != "prompt" && key != "add_special" && key != "with_pieces" && key != "model")
      return r.Fail(key, Str("unsupported field '", key, "'"));
  const char* field = r.Has("content") ? "content" : "prompt";
  if (!r.Has(field)) return r.Fail("content", "'content' is required");
  if (!r.String(field, &out->content)) return false;
  return r.Bool("add_special", &out->add_special) && r.Bool("with_pieces", &out->with_pieces);
}

bool ParseDetokenizeRequest(const std::string& body, int vocab, std::vector<int>* tokens, ApiError* error) {
  *error = ApiError{};
  json j;
  if (!ParseBody(body, &j, error)) return false;
  Reader r(j, error);
  for (const auto& [key, value] : j.items())
    if (key != "tokens" && key != "model") return r.Fail(key, Str("unsupported field '", key, "'"));
  if (!r.Has("tokens") || !r.Get("tokens").is_array()) return r.Fail("tokens", "'tokens' must be an array of token ids");
  for (const auto& t : r.Get("tokens")) {
    if (!t.is_number_integer() && !t.is_number_unsigned()) return r.Fail("tokens", "'tokens' must hold integers");
    const int64_t id = t.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(t.get<uint64_t>(), 1ull << 40))
                                              : t.get<int64_t>();
    if (id < 0 || id >= vocab) return r.Fail("tokens", Str("token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
    tokens->push_back(static_cast<int>(id));
  }
  return true;
}

}  // namespace g4
