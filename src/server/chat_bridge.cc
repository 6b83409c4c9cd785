// Provisional Gemma-4 chat format (shared/docs/tokenizer-and-assets.md §2.2) until
// tokenizer/chat_gemma4 lands; then this file forwards to it.
#include "server/chat_bridge.h"

#include <vector>

namespace g4 {

using nlohmann::json;

namespace {

std::string ContentText(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array())
    for (const auto& part : content)
      if (part.contains("text") && part["text"].is_string()) out += part["text"].get<std::string>();
  return out;
}

std::string Trim(const std::string& s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Gemma-4 tool syntax: {key:value,...}, strings wrapped in <|"|>.
std::string ToolValue(const json& v) {
  if (v.is_string()) return "<|\"|>" + v.get<std::string>() + "<|\"|>";
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) out += ",";
      first = false;
      out += k + ":" + ToolValue(x);
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + ToolValue(v[i]);
    return out + "]";
  }
  return v.dump();
}

// Parses the Gemma-4 tool value syntax back into JSON.
class ToolParser {
 public:
  explicit ToolParser(std::string_view s) : s_(s) {}
  bool Value(json* out) {
    Skip();
    if (Eat("<|\"|>")) {
      const size_t end = s_.find("<|\"|>", i_);
      if (end == std::string_view::npos) return false;
      *out = std::string(s_.substr(i_, end - i_));
      i_ = end + 5;
      return true;
    }
    if (Eat("{")) {
      *out = json::object();
      Skip();
      if (Eat("}")) return true;
      for (;;) {
        Skip();
        const size_t colon = s_.find(':', i_);
        if (colon == std::string_view::npos) return false;
        std::string key = Trim(std::string(s_.substr(i_, colon - i_)));
        if (key.size() >= 2 && key.front() == '"' && key.back() == '"') key = key.substr(1, key.size() - 2);
        i_ = colon + 1;
        json v;
        if (!Value(&v)) return false;
        (*out)[key] = v;
        Skip();
        if (Eat("}")) return true;
        if (!Eat(",")) return false;
      }
    }
    if (Eat("[")) {
      *out = json::array();
      Skip();
      if (Eat("]")) return true;
      for (;;) {
        json v;
        if (!Value(&v)) return false;
        out->push_back(v);
        Skip();
        if (Eat("]")) return true;
        if (!Eat(",")) return false;
      }
    }
    // A bare scalar: up to the next delimiter.
    size_t end = i_;
    while (end < s_.size() && s_[end] != ',' && s_[end] != '}' && s_[end] != ']') ++end;
    std::string word = Trim(std::string(s_.substr(i_, end - i_)));
    i_ = end;
    json parsed = json::parse(word, nullptr, false);
    *out = parsed.is_discarded() ? json(word) : parsed;
    return true;
  }
  size_t pos() const { return i_; }

 private:
  void Skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  bool Eat(std::string_view t) {
    if (s_.substr(i_, t.size()) != t) return false;
    i_ += t.size();
    return true;
  }
  std::string_view s_;
  size_t i_ = 0;
};

const char* const kChannelOpen = "<|channel>";
const char* const kChannelClose = "<channel|>";
const char* const kCallOpen = "<|tool_call>";
const char* const kCallClose = "<tool_call|>";

}  // namespace

Result<std::string> RenderChatPrompt(const json& messages, const json& tools, bool enable_thinking) {
  std::string out = "<bos>";
  size_t first = 0;
  const bool has_tools = tools.is_array() && !tools.empty();
  const bool system_first = !messages.empty() && (messages[0]["role"] == "system" || messages[0]["role"] == "developer");
  if (enable_thinking || has_tools || system_first) {
    out += "<|turn>system\n";
    if (enable_thinking) out += "<|think|>";
    if (system_first) {
      out += Trim(ContentText(messages[0]["content"]));
      first = 1;
    }
    if (has_tools) {
      for (const auto& t : tools) {
        const json& f = t["function"];
        json decl = json::object();
        if (f.contains("description")) decl["description"] = f["description"];
        if (f.contains("parameters") && !f["parameters"].is_null()) decl["parameters"] = f["parameters"];
        out += "<|tool>declaration:" + f["name"].get<std::string>() + ToolValue(decl) + "<tool|>";
      }
    }
    out += "<turn|>\n";
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string role = m["role"].get<std::string>();
    if (role == "tool") {
      std::string name = m.contains("name") && m["name"].is_string() ? m["name"].get<std::string>() : "tool";
      out += "<|turn>user\n<|tool_response>response:" + name + "{value:" +
             ToolValue(json(ContentText(m["content"]))) + "}<tool_response|><turn|>\n";
      continue;
    }
    out += "<|turn>" + std::string(role == "assistant" ? "model" : role == "developer" ? "system" : role) + "\n";
    if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
      for (const auto& call : m["tool_calls"]) {
        const json& f = call["function"];
        json args = json::object();
        if (f.contains("arguments")) {
          if (f["arguments"].is_string()) {
            args = json::parse(f["arguments"].get<std::string>(), nullptr, false);
            if (args.is_discarded()) return Status::Error("a tool call's arguments are not valid JSON");
          } else {
            args = f["arguments"];
          }
        }
        out += std::string(kCallOpen) + "call:" + f["name"].get<std::string>() + ToolValue(args) + kCallClose;
      }
    }
    if (m.contains("content") && !m["content"].is_null()) out += Trim(ContentText(m["content"]));
    out += "<turn|>\n";
  }
  out += "<|turn>model\n";
  if (!enable_thinking) out += "<|channel>thought\n<channel|>";
  return out;
}

struct ChatOutputSplitter::Impl {
  enum Mode { kContent, kReasoning, kCall } mode = kContent;
  std::string pending;
  std::vector<std::string> calls;
  json tool_calls = json::array();

  // Moves text from `pending` to the delta until a marker (or a possible marker prefix) blocks.
  void Drain(ChatDelta* d, bool final) {
    for (;;) {
      const char* close = mode == kReasoning ? kChannelClose : mode == kCall ? kCallClose : nullptr;
      std::vector<std::string_view> markers;
      if (mode == kContent) markers = {kChannelOpen, kCallOpen};
      else markers = {close};
      size_t best = std::string::npos;
      std::string_view which;
      for (auto mk : markers) {
        size_t p = pending.find(mk);
        if (p < best) best = p, which = mk;
      }
      size_t emit = best;
      if (best == std::string::npos) {
        emit = pending.size();
        if (!final) {
          // Hold back a suffix that may start a marker.
          for (auto mk : markers)
            for (size_t len = std::min(mk.size() - 1, pending.size()); len > 0; --len)
              if (pending.compare(pending.size() - len, len, mk.substr(0, len)) == 0) {
                emit = std::min(emit, pending.size() - len);
                break;
              }
        }
      }
      std::string text = pending.substr(0, emit);
      if (mode == kContent) d->content += text;
      else if (mode == kReasoning) d->reasoning += text;
      else calls.back() += text;
      pending.erase(0, emit);
      if (best == std::string::npos) return;
      pending.erase(0, which.size());
      if (mode == kContent && which == kChannelOpen) {
        mode = kReasoning;
        // The channel name ("thought\n") is not part of the reasoning.
        if (pending.rfind("thought\n", 0) == 0) pending.erase(0, 8);
      } else if (mode == kContent) {
        mode = kCall;
        calls.emplace_back();
      } else {
        mode = kContent;
      }
    }
  }
};

ChatOutputSplitter::ChatOutputSplitter() : impl_(std::make_unique<Impl>()) {}
ChatOutputSplitter::~ChatOutputSplitter() = default;

ChatDelta ChatOutputSplitter::Add(std::string_view text) {
  ChatDelta d;
  impl_->pending.append(text);
  impl_->Drain(&d, false);
  return d;
}

ChatDelta ChatOutputSplitter::Finish() {
  ChatDelta d;
  impl_->Drain(&d, true);
  for (size_t i = 0; i < impl_->calls.size(); ++i) {
    std::string call = Trim(impl_->calls[i]);
    if (call.rfind("call:", 0) == 0) call = call.substr(5);
    const size_t brace = call.find('{');
    std::string name = Trim(call.substr(0, brace));
    json args = json::object();
    if (brace != std::string::npos) {
      ToolParser p(std::string_view(call).substr(brace));
      json v;
      if (p.Value(&v)) args = v;
    }
    impl_->tool_calls.push_back(json{{"id", "call_" + std::to_string(i)},
                                     {"type", "function"},
                                     {"function", {{"name", name}, {"arguments", args.dump()}}}});
  }
  return d;
}

json ChatOutputSplitter::ToolCalls() const { return impl_->tool_calls; }

}  // namespace g4
