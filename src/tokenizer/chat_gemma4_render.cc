// Gemma-4 prompt rendering: OpenAI-style messages and tools -> the prompt text the chat template
// would produce (chat_gemma4.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "tokenizer/chat_gemma4.h"
#include "tokenizer/chat_gemma4_syntax.h"

namespace g4 {
namespace gemma4_chat {
namespace {

size_t WhitespaceLength(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20)) return 1;
  auto at = [&](std::string_view seq) { return s.substr(i, seq.size()) == seq; };
  if (at("\xC2\x85") || at("\xC2\xA0")) return 2;
  if (at("\xE1\x9A\x80") || at("\xE2\x80\xA8") || at("\xE2\x80\xA9") || at("\xE2\x80\xAF") ||
      at("\xE2\x81\x9F") || at("\xE3\x80\x80"))
    return 3;
  if (s.size() >= i + 3 && c == 0xE2 && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
      static_cast<unsigned char>(s[i + 2]) >= 0x80 && static_cast<unsigned char>(s[i + 2]) <= 0x8A)
    return 3;  // U+2000..U+200A
  return 0;
}

}  // namespace

std::string_view PyStrip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    size_t n = WhitespaceLength(s, begin);
    if (!n) break;
    begin += n;
  }
  // Scan forward, remembering where the last non-whitespace character ended.
  size_t end = begin, i = begin;
  while (i < s.size()) {
    size_t n = WhitespaceLength(s, i);
    if (n) {
      i += n;
    } else {
      unsigned char c = s[i];
      i += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      end = std::min(i, s.size());
    }
  }
  return s.substr(begin, end - begin);
}

}  // namespace gemma4_chat

using namespace gemma4_chat;

namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Python/Jinja2 value semantics, as the HF template renderer applies them.

bool Truthy(const json* v) {
  if (!v || v->is_null()) return false;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_string())
    return !v->get_ref<const std::string&>().empty();  // json::empty() is false for strings
  if (v->is_array() || v->is_object()) return !v->empty();
  if (v->is_number_float()) return v->get<double>() != 0.0;
  if (v->is_number()) return v->get<int64_t>() != 0;
  return true;
}

// m[key] for a mapping; nullptr for anything else (Jinja's undefined).
const json* Field(const json& m, const char* key) {
  if (!m.is_object()) return nullptr;
  auto it = m.find(key);
  return it == m.end() ? nullptr : &*it;
}

std::string PyFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto end = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific).ptr;
  std::string sci(buf, end);  // "-1.2345e+02"
  size_t e = sci.find('e');
  int exponent = std::atoi(sci.c_str() + e + 1);
  std::string sign = sci[0] == '-' ? "-" : "";
  std::string digits;
  for (size_t i = sign.size(); i < e; ++i)
    if (sci[i] != '.') digits.push_back(sci[i]);
  // repr() switches to exponent form below 1e-4 and from 1e16 on.
  if (exponent < -4 || exponent >= 16) {
    std::string mantissa = digits.substr(0, 1);
    if (digits.size() > 1) mantissa += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return sign + mantissa + exp;
  }
  std::string out;
  if (exponent < 0) {
    out = "0." + std::string(-exponent - 1, '0') + digits;
  } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
    out = digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
  }
  return sign + out;
}

std::string PyRepr(const json& v);

// What {{ value }} prints in Python Jinja2.
std::string PyStr(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return PyRepr(v);
}

std::string PyRepr(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "None";
    case json::value_t::boolean:
      return v.get<bool>() ? "True" : "False";
    case json::value_t::number_integer:
      return std::to_string(v.get<int64_t>());
    case json::value_t::number_unsigned:
      return std::to_string(v.get<uint64_t>());
    case json::value_t::number_float:
      return PyFloat(v.get<double>());
    case json::value_t::string:
      return "'" + v.get<std::string>() + "'";
    case json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + PyRepr(v[i]);
      return out + "]";
    }
    case json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it, first = false)
        out += (first ? "" : ", ") + ("'" + it.key() + "'") + ": " + PyRepr(it.value());
      return out + "}";
    }
    default:
      return "";
  }
}

std::string Upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}

std::string Lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

// Jinja2 |dictsort: by key, case-insensitively (ASCII here).
std::vector<std::pair<std::string, const json*>> DictSort(const json& m) {
  std::vector<std::pair<std::string, const json*>> items;
  if (!m.is_object()) return items;
  for (auto it = m.begin(); it != m.end(); ++it) items.emplace_back(it.key(), &it.value());
  std::stable_sort(items.begin(), items.end(),
                   [](const auto& a, const auto& b) { return Lower(a.first) < Lower(b.first); });
  return items;
}

// format_argument(): strings in <|"|>, booleans lowercase, mappings sorted, Python str otherwise.
std::string FormatArgument(const json& v, bool escape_keys) {
  if (v.is_string()) return Str(kQuote, v.get<std::string>(), kQuote);
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, value] : DictSort(v)) {
      if (!first) out += ",";
      first = false;
      out += escape_keys ? Str(kQuote, key, kQuote) : key;
      out += ":" + FormatArgument(*value, escape_keys);
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + FormatArgument(v[i], escape_keys);
    return out + "]";
  }
  return PyStr(v);
}

// A JSON-schema "type": a string, or a list whose first non-"null" entry counts.
std::string EffectiveType(const json* type) {
  if (!type) return "";
  if (type->is_string()) return Upper(type->get<std::string>());
  if (type->is_array())
    for (const json& t : *type)
      if (!(t.is_string() && t.get<std::string>() == "null")) return Upper(PyStr(t));
  return "";
}

std::string QuotedList(const json& items) {
  std::string out;
  if (!items.is_array()) return out;
  for (size_t i = 0; i < items.size(); ++i)
    out += Str(i ? "," : "", kQuote, PyStr(items[i]), kQuote);
  return out;
}

// format_parameters(): one "name:{description:...,type:...}" entry per property. Reproduces the
// template byte for byte, including its quirks (an OBJECT property opens with ",properties:{").
std::string FormatParameters(const json& properties) {
  static const char* kStandardKeys[] = {"description", "type", "properties", "required",
                                        "nullable"};
  std::string out;
  bool first = true;
  for (const auto& [key, value_ptr] : DictSort(properties)) {
    const json& value = *value_ptr;
    if (std::find(std::begin(kStandardKeys), std::end(kStandardKeys), key) !=
        std::end(kStandardKeys))
      continue;
    if (!first) out += ",";
    first = false;
    std::string type = EffectiveType(Field(value, "type"));
    out += key + ":{";
    bool add_comma = false;
    auto comma = [&] {
      if (add_comma) out += ",";
      add_comma = true;
    };
    if (const json* d = Field(value, "description"); Truthy(d)) {
      out += Str("description:", kQuote, PyStr(*d), kQuote);
      add_comma = true;
    }
    if (Truthy(Field(value, "nullable"))) {
      comma();
      out += "nullable:true";
    }
    if (type == "STRING") {
      if (const json* e = Field(value, "enum"); Truthy(e)) {
        comma();
        out += "enum:" + FormatArgument(*e, true);
      }
    } else if (type == "OBJECT") {
      out += ",properties:{";
      if (const json* p = Field(value, "properties"); p && p->is_object())
        out += FormatParameters(*p);
      else if (value.is_object())
        out += FormatParameters(value);
      out += "}";
      if (const json* r = Field(value, "required"); Truthy(r))
        out += ",required:[" + QuotedList(*r) + "]";
    } else if (type == "ARRAY") {
      const json* items = Field(value, "items");
      if (items && items->is_object() && !items->empty()) {
        out += ",items:{";
        bool first_item = true;
        for (const auto& [item_key, item_value] : DictSort(*items)) {
          if (item_value->is_null()) continue;
          if (!first_item) out += ",";
          first_item = false;
          if (item_key == "properties") {
            out += "properties:{" + (item_value->is_object() ? FormatParameters(*item_value) : "") +
                   "}";
          } else if (item_key == "required") {
            out += "required:[" + QuotedList(*item_value) + "]";
          } else if (item_key == "type") {
            out += "type:" + FormatArgument(json(EffectiveType(item_value)), true);
          } else {
            out += item_key + ":" + FormatArgument(*item_value, true);
          }
        }
        out += "}";
      }
    }
    comma();
    out += Str("type:", kQuote, type, kQuote, "}");
  }
  return out;
}

// format_function_declaration(): "declaration:NAME{description:...,parameters:{...}}".
std::string FormatDeclaration(const json& function) {
  std::string out = "declaration:";
  if (const json* name = Field(function, "name")) out += PyStr(*name);
  out += Str("{description:", kQuote);
  if (const json* d = Field(function, "description")) out += PyStr(*d);
  out += kQuote;
  if (const json* params = Field(function, "parameters"); Truthy(params)) {
    out += ",parameters:{";
    if (const json* p = Field(*params, "properties"); Truthy(p))
      out += "properties:{" + FormatParameters(*p) + "},";
    if (const json* r = Field(*params, "required"); Truthy(r))
      out += "required:[" + QuotedList(*r) + "],";
    if (const json* t = Field(*params, "type"); Truthy(t))
      out += Str("type:", kQuote, EffectiveType(t), kQuote, "}");
  }
  if (const json* response = Field(function, "response")) {
    out += ",response:{";
    if (const json* d = Field(*response, "description"); Truthy(d))
      out += Str("description:", kQuote, PyStr(*d), kQuote, ",");
    if (EffectiveType(Field(*response, "type")) == "OBJECT")
      out += Str("type:", kQuote, "OBJECT", kQuote, "}");
  }
  return out + "}";
}

// "key:value,..." for tool-call arguments and tool responses (keys bare).
std::string FormatMapping(const json& m) {
  std::string out;
  bool first = true;
  for (const auto& [key, value] : DictSort(m)) {
    if (!first) out += ",";
    first = false;
    out += key + ":" + FormatArgument(*value, false);
  }
  return out;
}

// strip_thinking(): drop every "<|channel>...<channel|>" block, then trim.
std::string StripThinking(std::string_view text) {
  std::string result;
  size_t start = 0;
  while (true) {
    size_t close = text.find(kChannelClose, start);
    std::string_view part = text.substr(
        start, close == std::string_view::npos ? std::string_view::npos : close - start);
    size_t open = part.find(kChannelOpen);
    result.append(open == std::string_view::npos ? part : part.substr(0, open));
    if (close == std::string_view::npos) break;
    start = close + kChannelClose.size();
  }
  return std::string(PyStrip(result));
}

// A JSON text that is an object or array becomes that value; anything else stays a string.
json MaybeStructured(const std::string& text) {
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() || parsed.is_array()) return parsed;
  return json(text);
}

struct Message {
  std::string role;  // after assistant -> model, developer -> system
  const json* content = nullptr;
  const json* tool_calls = nullptr;
  std::string reasoning;
  std::vector<std::pair<std::string, json>> tool_responses;  // (name, response)
  size_t source_index = 0;
};

Result<std::string> ContentText(const json* content, bool model, size_t index) {
  if (!content || content->is_null()) return std::string();
  if (content->is_string()) {
    const std::string& s = content->get_ref<const std::string&>();
    return model ? StripThinking(s) : std::string(PyStrip(s));
  }
  if (!content->is_array())
    return Status::Errorf("messages[", index,
                          "].content must be a string, null or an array of parts");
  std::string out;
  for (size_t k = 0; k < content->size(); ++k) {
    const json& part = (*content)[k];
    const json* type = Field(part, "type");
    std::string type_name = type && type->is_string() ? type->get<std::string>() : "";
    if (type_name == "text") {
      const json* text = Field(part, "text");
      if (!text || !text->is_string())
        return Status::Errorf("messages[", index, "].content[", k, "] has no text");
      out += model ? StripThinking(text->get<std::string>())
                   : std::string(PyStrip(text->get<std::string>()));
    } else {
      return Status::Errorf("messages[", index, "].content[", k, "] has type '", type_name,
                            "'; g4 serves text-only Gemma-4 (only 'text' parts)");
    }
  }
  return out;
}

Result<std::vector<Message>> NormalizeMessages(const json& messages) {
  std::vector<Message> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const json* role_ptr = Field(m, "role");
    if (!role_ptr || !role_ptr->is_string()) return Status::Errorf("messages[", i, "] has no role");
    std::string role = role_ptr->get<std::string>();
    if (role == "tool") {
      // Attach to the assistant message whose tool_calls it answers.
      if (out.empty() || out.back().role != "model" || !out.back().tool_calls)
        return Status::Errorf("messages[", i,
                              "] has role 'tool' but does not follow an assistant "
                              "message with tool_calls");
      Message& call_message = out.back();
      const json& calls = *call_message.tool_calls;
      std::string name;
      if (const json* id = Field(m, "tool_call_id"); id && id->is_string()) {
        for (const json& call : calls)
          if (const json* cid = Field(call, "id"); cid && *cid == *id)
            if (const json* fn = Field(call, "function"))
              if (const json* n = Field(*fn, "name"); n && n->is_string())
                name = n->get<std::string>();
      }
      if (name.empty())
        if (const json* n = Field(m, "name"); n && n->is_string()) name = n->get<std::string>();
      if (name.empty() && call_message.tool_responses.size() < calls.size())
        if (const json* fn = Field(calls[call_message.tool_responses.size()], "function"))
          if (const json* n = Field(*fn, "name"); n && n->is_string()) name = n->get<std::string>();
      if (name.empty()) name = "unknown";
      const json* content = Field(m, "content");
      json response;
      if (content && content->is_string()) {
        response = MaybeStructured(content->get<std::string>());
      } else if (content && content->is_array()) {
        G4_ASSIGN_OR_RETURN(std::string text, ContentText(content, false, i));
        response = MaybeStructured(text);
      } else if (content && !content->is_null()) {
        response = *content;
      } else {
        response = json("");
      }
      call_message.tool_responses.emplace_back(name, std::move(response));
      continue;
    }
    Message msg;
    msg.source_index = i;
    if (role == "assistant" || role == "model")
      msg.role = "model";
    else if (role == "developer" || role == "system")
      msg.role = "system";
    else if (role == "user")
      msg.role = "user";
    else
      return Status::Errorf("messages[", i, "].role '", role,
                            "' is not user, assistant, system, developer or tool");
    msg.content = Field(m, "content");
    if (const json* calls = Field(m, "tool_calls"); calls && !calls->is_null()) {
      if (!calls->is_array()) return Status::Errorf("messages[", i, "].tool_calls is not an array");
      if (!calls->empty()) msg.tool_calls = calls;
      for (size_t k = 0; k < calls->size(); ++k) {
        const json* fn = Field((*calls)[k], "function");
        const json* name = fn ? Field(*fn, "name") : nullptr;
        if (!name || !name->is_string())
          return Status::Errorf("messages[", i, "].tool_calls[", k, "] has no function.name");
      }
    }
    if (const json* r = Field(m, "reasoning_content"); r && r->is_string())
      msg.reasoning = r->get<std::string>();
    // Gemma's native form: responses carried on the message itself.
    if (const json* responses = Field(m, "tool_responses"); responses && responses->is_array()) {
      for (const json& r : *responses) {
        const json* n = Field(r, "name");
        const json* value = Field(r, "response");
        msg.tool_responses.emplace_back(n && n->is_string() ? n->get<std::string>() : "unknown",
                                        value ? *value : json(nullptr));
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Result<std::string> RenderGemma4Chat(const json& messages, const json& tools,
                                     const Gemma4ChatOptions& options) {
  if (!messages.is_array() || messages.empty())
    return Status::Error("messages must be a non-empty array");
  if (!tools.is_null() && !tools.is_array()) return Status::Error("tools must be an array");
  G4_ASSIGN_OR_RETURN(std::vector<Message> list, NormalizeMessages(messages));
  const Gemma4TemplateFeatures& f = options.features;
  enum class Prev { kNone, kOther, kToolCall, kToolResponse };
  Prev prev = Prev::kNone;

  std::string out = "<bos>";
  size_t first = 0;
  bool has_tools = tools.is_array() && !tools.empty();
  bool system_first = list[0].role == "system";
  if (options.enable_thinking || has_tools || system_first) {
    out += "<|turn>system\n";
    if (options.enable_thinking) {
      out += f.think_newline ? "<|think|>\n" : "<|think|>";
      prev = Prev::kOther;
    }
    if (system_first) {
      // The template trims the first message's content as one string; parts are joined first.
      G4_ASSIGN_OR_RETURN(std::string text,
                          ContentText(list[0].content, false, list[0].source_index));
      out += PyStrip(text);
      first = 1;
    }
    if (has_tools) {
      for (size_t t = 0; t < tools.size(); ++t) {
        const json* function = Field(tools[t], "function");
        if (!function) function = &tools[t];  // a bare {name, description, parameters}
        const json* name = Field(*function, "name");
        if (!name || !name->is_string())
          return Status::Errorf("tools[", t, "] has no function.name");
        out += "<|tool>" + std::string(PyStrip(FormatDeclaration(*function))) + "<tool|>";
      }
      prev = Prev::kOther;
    }
    out += "<turn|>\n";
  }

  size_t last_user = 0;
  bool any_user = false;
  for (size_t i = first; i < list.size(); ++i)
    if (list[i].role == "user") last_user = i, any_user = true;

  for (size_t i = first; i < list.size(); ++i) {
    const Message& m = list[i];
    bool has_calls = m.tool_calls != nullptr;
    if (!(f.continue_after_tool_response && prev == Prev::kToolResponse && has_calls))
      out += "<|turn>" + m.role + "\n";
    prev = Prev::kNone;
    if (has_calls) {
      if (f.replay_tool_reasoning && !m.reasoning.empty() && (!any_user || i > last_user))
        out += Str(kChannelOpen, kThoughtHeader, m.reasoning, kChannelClose);
      for (const json& call : *m.tool_calls) {
        const json& fn = call["function"];
        out += Str(kToolCallOpen, "call:", fn["name"].get<std::string>(), "{");
        if (const json* args = Field(fn, "arguments")) {
          if (args->is_object()) {
            out += FormatMapping(*args);
          } else if (args->is_string()) {
            json parsed = MaybeStructured(args->get<std::string>());
            out += parsed.is_object() ? FormatMapping(parsed) : args->get<std::string>();
          }
        }
        out += Str("}", kToolCallClose);
      }
      prev = Prev::kToolCall;
    }
    if (!m.tool_responses.empty()) {
      for (const auto& [name, response] : m.tool_responses) {
        out += "<|tool_response>response:" + name + "{";
        out += response.is_object() ? FormatMapping(response)
                                    : "value:" + FormatArgument(response, false);
        out += "}<tool_response|>";
      }
      prev = Prev::kToolResponse;
    }
    G4_ASSIGN_OR_RETURN(std::string text,
                        ContentText(m.content, m.role == "model", m.source_index));
    out += text;
    if (!(!m.tool_responses.empty() && !Truthy(m.content))) out += "<turn|>\n";
  }

  if (options.add_generation_prompt) {
    if (prev != Prev::kToolResponse) out += "<|turn>model\n";
    if (!options.enable_thinking && f.empty_thought_in_prompt)
      out += Str(kChannelOpen, kThoughtHeader, kChannelClose);
  }
  return out;
}

}  // namespace g4
