// Gemma-4 model output -> reasoning, content and tool calls, streaming (chat_gemma4.h).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>

#include "tokenizer/chat_gemma4.h"
#include "tokenizer/chat_gemma4_syntax.h"

namespace g4 {

using nlohmann::json;
using namespace gemma4_chat;

// ---------------------------------------------------------------------------------------------
// Output parsing

namespace {

// lenient: the repair pass for what models really write (ParseGemma4ArgumentsLenient).
class ArgumentParser {
 public:
  explicit ArgumentParser(std::string_view text, bool lenient = false) : s_(text), lenient_(lenient) {}

  Result<json> ParseTop() {
    SkipSpace();
    G4_ASSIGN_OR_RETURN(json value, ParseValue());
    SkipSpace();
    // Lenient: stray closing braces after the object ("{a:1}}") are dropped.
    while (lenient_ && pos_ < s_.size() && (s_[pos_] == '}' || s_[pos_] == ']')) {
      ++pos_;
      SkipSpace();
    }
    if (pos_ != s_.size()) return Error("trailing text");
    return value;
  }

 private:
  Status Error(const std::string& what) const {
    return Status::Errorf("tool-call arguments: ", what, " at offset ", pos_, " in \"",
                          s_.substr(0, 200), "\"");
  }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool Consume(std::string_view token) {
    if (s_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }
  // Lenient: where the next entry of the enclosing object starts (", key:"), or where the
  // enclosing object or list closes, or npos. A value without its closing quote ends there.
  size_t ValueEnd(size_t from) const {
    for (size_t i = from; i < s_.size(); ++i) {
      const char c = s_[i];
      if (c == '}' || c == ']') {
        size_t j = i + 1;  // only the last closer(s) of the text end a value: text may hold braces
        while (j < s_.size() && (s_[j] == '}' || s_[j] == ']' || s_[j] == ' ' || s_[j] == '\n')) ++j;
        if (j == s_.size() || s_[j] == ',') return i;
      }
      if (c == ',' && NextIsKey(i + 1)) return i;
    }
    return std::string_view::npos;
  }
  bool NextIsKey(size_t i) const {
    while (i < s_.size() && (s_[i] == ' ' || s_[i] == '\n')) ++i;
    if (s_.substr(i, kQuote.size()) == kQuote) {
      const size_t close = s_.find(kQuote, i + kQuote.size());
      return close != std::string_view::npos && s_.substr(close + kQuote.size(), 1) == ":";
    }
    size_t j = i;
    while (j < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[j])) || s_[j] == '_' || s_[j] == '-')) ++j;
    while (j < s_.size() && s_[j] == ' ') ++j;
    return j > i && j < s_.size() && s_[j] == ':';
  }
  Result<std::string> QuotedString() {
    size_t end = s_.find(kQuote, pos_);
    if (end == std::string_view::npos && lenient_) {
      // A missing closing <|"|>: the string runs to where the next entry or the object starts.
      end = ValueEnd(pos_);
      if (end == std::string_view::npos) end = s_.size();
      std::string value(s_.substr(pos_, end - pos_));
      pos_ = end;
      return value;
    }
    if (end == std::string_view::npos) return Error("unterminated <|\"|> string");
    std::string value(s_.substr(pos_, end - pos_));
    pos_ = end + kQuote.size();
    return value;
  }
  Result<std::string> JsonString() {  // a "..." string, for models that slip into JSON
    size_t start = pos_ - 1;
    bool escaped = false;
    for (; pos_ < s_.size(); ++pos_) {
      if (escaped)
        escaped = false;
      else if (s_[pos_] == '\\')
        escaped = true;
      else if (s_[pos_] == '"')
        break;
    }
    if (pos_ >= s_.size()) return Error("unterminated string");
    ++pos_;
    json parsed = json::parse(s_.substr(start, pos_ - start), nullptr, false);
    if (!parsed.is_string()) return Error("bad string");
    return parsed.get<std::string>();
  }
  Result<json> ParseValue() {
    if (++depth_ > 64) return Error("nesting too deep");
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{depth_};
    SkipSpace();
    if (Consume(kQuote)) {
      G4_ASSIGN_OR_RETURN(std::string s, QuotedString());
      return json(std::move(s));
    }
    if (Consume("\"")) {
      G4_ASSIGN_OR_RETURN(std::string s, JsonString());
      return json(std::move(s));
    }
    if (lenient_ && Consume("'")) {
      G4_ASSIGN_OR_RETURN(std::string s, SingleQuoted());
      return json(std::move(s));
    }
    if (Consume("{")) return ParseObject();
    if (Consume("[")) return ParseArray();
    return ParseBare();
  }
  Result<json> ParseObject() {
    const bool outer = in_list_;
    in_list_ = false;
    auto obj = ParseObjectEntries();
    in_list_ = outer;
    return obj;
  }
  Result<json> ParseArray() {
    const bool outer = in_list_;
    in_list_ = true;
    auto arr = ParseArrayItems();
    in_list_ = outer;
    return arr;
  }
  Result<json> ParseObjectEntries() {
    json obj = json::object();
    SkipSpace();
    if (Consume("}")) return obj;
    while (true) {
      SkipSpace();
      std::string key;
      if (Consume(kQuote)) {
        G4_ASSIGN_OR_RETURN(key, QuotedString());
      } else if (Consume("\"")) {
        G4_ASSIGN_OR_RETURN(key, JsonString());
      } else {
        size_t colon = s_.find(':', pos_);
        if (colon == std::string_view::npos) return Error("key without ':'");
        key = std::string(PyStrip(s_.substr(pos_, colon - pos_)));
        pos_ = colon;
      }
      SkipSpace();
      if (!Consume(":")) return Error("expected ':'");
      G4_ASSIGN_OR_RETURN(json value, ParseValue());
      obj[key] = std::move(value);
      SkipSpace();
      if (Consume(",")) continue;
      if (Consume("}")) return obj;
      return Error("expected ',' or '}'");
    }
  }
  Result<json> ParseArrayItems() {
    json arr = json::array();
    SkipSpace();
    if (Consume("]")) return arr;
    while (true) {
      G4_ASSIGN_OR_RETURN(json value, ParseValue());
      arr.push_back(std::move(value));
      SkipSpace();
      if (Consume(",")) continue;
      if (Consume("]")) return arr;
      return Error("expected ',' or ']'");
    }
  }
  // 'text' with \' and \\ escapes, as Python prints strings.
  Result<std::string> SingleQuoted() {
    std::string value;
    for (; pos_ < s_.size(); ++pos_) {
      if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) {
        value += s_[++pos_];
      } else if (s_[pos_] == '\'') {
        ++pos_;
        return value;
      } else {
        value += s_[pos_];
      }
    }
    return Error("unterminated ' string");
  }
  Result<json> ParseBare() {
    size_t start = pos_;
    if (lenient_ && !in_list_) {
      // An unquoted object value may hold commas and spaces: it runs to the next entry or the
      // closer. (In a list a comma always separates items.)
      pos_ = ValueEnd(pos_);
      if (pos_ == std::string_view::npos) pos_ = s_.size();
    }
    while ((!lenient_ || in_list_) && pos_ < s_.size() && s_[pos_] != ',' && s_[pos_] != '}' && s_[pos_] != ']') ++pos_;
    std::string word(PyStrip(s_.substr(start, pos_ - start)));
    if (word.empty()) return Error("missing value");
    if (word == "true") return json(true);
    if (word == "false") return json(false);
    if (word == "null" || word == "None") return json(nullptr);
    json number = json::parse(word, nullptr, false);
    if (number.is_number()) return number;
    return json(word);
  }

  std::string_view s_;
  bool lenient_ = false;
  bool in_list_ = false;  // the value being read is a list item
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<json> ParseGemma4Arguments(std::string_view text) { return ArgumentParser(text).ParseTop(); }

Result<json> ParseGemma4ArgumentsLenient(std::string_view text) {
  // The lenient reading first: strict parsing "succeeds" on some malformed text with the wrong
  // values ('Paris' keeps its quotes; "Paris, France" splits at the comma). On well-formed text
  // both readings agree.
  if (auto lenient = ArgumentParser(text, /*lenient=*/true).ParseTop(); lenient.ok()) return lenient;
  return ParseGemma4Arguments(text);
}

void Gemma4OutputParser::EmitText(std::string_view text, ChatOutput* out) {
  if (state_ == State::kReasoning) {
    out->reasoning.append(text);
    return;
  }
  if (!content_started_) {
    std::string_view stripped = PyStrip(text);
    if (stripped.empty()) return;
    text = text.substr(stripped.data() - text.data());
    content_started_ = true;
  }
  out->content.append(text);
}

void Gemma4OutputParser::FinishToolCall(std::string_view body, ChatOutput* out) {
  // body: "call:NAME{...}"
  std::string_view rest = PyStrip(body);
  bool ok = rest.substr(0, 5) == "call:";
  size_t brace = rest.find('{');
  if (ok && brace != std::string_view::npos) {
    std::string name(PyStrip(rest.substr(5, brace - 5)));
    auto args = ParseGemma4ArgumentsLenient(rest.substr(brace));
    if (!name.empty() && args.ok() && args->is_object()) {
      // replace: text that is not valid UTF-8 must not throw out of the parser (json::dump
      // would); it becomes U+FFFD, as everywhere else text reaches a client.
      out->tool_calls.push_back(
          ChatToolCall{name, args->dump(-1, ' ', false, json::error_handler_t::replace)});
      return;
    }
    if (!name.empty() && keep_malformed_calls_) {
      out->tool_calls.push_back(ChatToolCall{name, std::string(PyStrip(rest.substr(brace)))});
      return;
    }
  }
  // Not a call we can read: keep it visible as content rather than lose it.
  content_started_ = true;
  out->content += Str(kToolCallOpen, body);
}

void Gemma4OutputParser::Drain(bool final, ChatOutput* out) {
  while (state_ != State::kDone) {
    std::string_view buf = buffer_;
    if (state_ == State::kToolCall) {
      size_t close = buf.find(kToolCallClose);
      if (close == std::string_view::npos) {
        if (!final) return;
        // Generation ended inside a call (e.g. at a stop token): read what is there.
        std::string body = buffer_;
        for (std::string_view end : kEndMarkers)
          if (size_t at = body.find(end); at != std::string::npos) body.resize(at);
        buffer_.clear();
        FinishToolCall(body, out);
        state_ = State::kDone;
        return;
      }
      std::string body(buf.substr(0, close));
      buffer_.erase(0, close + kToolCallClose.size());
      FinishToolCall(body, out);
      state_ = State::kContent;
      continue;
    }
    if (state_ == State::kReasoning && reasoning_header_pending_) {
      if (buf.size() < kThoughtHeader.size() && kThoughtHeader.substr(0, buf.size()) == buf &&
          !final)
        return;
      if (buf.substr(0, kThoughtHeader.size()) == kThoughtHeader)
        buffer_.erase(0, kThoughtHeader.size());
      reasoning_header_pending_ = false;
      continue;
    }
    // Content or reasoning: find the first marker that changes state.
    std::vector<std::pair<std::string_view, int>> markers;  // (marker, action)
    if (state_ == State::kContent) {
      markers = {{kChannelOpen, 1}, {kToolCallOpen, 2}};
    } else {
      markers = {{kChannelClose, 3}};
    }
    for (std::string_view end : kEndMarkers) markers.emplace_back(end, 4);
    size_t best = std::string_view::npos;
    int action = 0;
    std::string_view found;
    for (auto [marker, act] : markers) {
      size_t at = buf.find(marker);
      if (at < best) best = at, action = act, found = marker;
    }
    if (best == std::string_view::npos) {
      // Hold back a tail that may be the start of a marker ("<|chan").
      size_t hold = 0;
      size_t lt = buf.rfind('<');
      if (!final && lt != std::string_view::npos) {
        std::string_view tail = buf.substr(lt);
        for (auto [marker, act] : markers)
          if (tail.size() < marker.size() && marker.substr(0, tail.size()) == tail)
            hold = tail.size();
      }
      EmitText(buf.substr(0, buf.size() - hold), out);
      buffer_.erase(0, buffer_.size() - hold);
      return;
    }
    EmitText(buf.substr(0, best), out);
    buffer_.erase(0, best + found.size());
    switch (action) {
      case 1:
        state_ = State::kReasoning;
        reasoning_header_pending_ = true;
        break;
      case 2:
        state_ = State::kToolCall;
        break;
      case 3:
        state_ = State::kContent;
        break;
      default:
        state_ = State::kDone;
        buffer_.clear();
        break;
    }
  }
}

ChatOutput Gemma4OutputParser::Push(std::string_view text) {
  ChatOutput out;
  if (state_ == State::kDone) return out;
  buffer_.append(text);
  Drain(false, &out);
  return out;
}

ChatOutput Gemma4OutputParser::Finish() {
  ChatOutput out;
  Drain(true, &out);
  state_ = State::kDone;
  buffer_.clear();
  return out;
}

bool PromptOpensThought(std::string_view prompt) {
  const std::string open = Str(kChannelOpen, kThoughtHeader);
  return prompt.size() >= open.size() && prompt.substr(prompt.size() - open.size()) == open;
}

ChatOutput ParseGemma4Output(std::string_view text) {
  Gemma4OutputParser parser;
  ChatOutput out = parser.Push(text);
  ChatOutput rest = parser.Finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  out.tool_calls.insert(out.tool_calls.end(), rest.tool_calls.begin(), rest.tool_calls.end());
  return out;
}

}  // namespace g4
