#include "grammar/gbnf_parser.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace g4::grammar {
namespace {

// Marks a stand-in byte from ParseChar (above every code point).
constexpr uint32_t kRawByte = 0x80000000u;

class Parser {
 public:
  Parser(std::string_view text, const GbnfLimits& limits) : s_(text), limits_(limits) {}

  Result<Grammar> Run() {
    while (true) {
      SkipSpace(true);
      if (pos_ >= s_.size()) break;
      if (!ParseRule()) return Status::Error(error_);
    }
    for (const auto& [name, where] : first_use_)
      if (!defined_.count(name)) {
        pos_ = where;
        Fail(Str("undefined rule '", name, "'"));
        return Status::Error(error_);
      }
    if (!defined_.count("root")) return Status::Error("the grammar has no 'root' rule");
    if (elements_ > limits_.max_elements)
      return Status::Errorf("grammar too large: over ", limits_.max_elements, " elements once expanded");
    return b_.Finish("root");
  }

 private:
  bool Fail(const std::string& message) {
    if (!error_.empty()) return false;
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    error_ = Str("line ", line, ", column ", col, ": ", message);
    return false;
  }
  bool AtEnd() const { return pos_ >= s_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }

  // Spaces, tabs and comments; newlines too when `newlines` (inside parentheses, after ::= or |).
  void SkipSpace(bool newlines) {
    while (!AtEnd()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && s_[pos_] != '\n') ++pos_;
      } else if (newlines && c == '\\' && (Peek(1) == '\n' || Peek(1) == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  static bool NameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  std::string ParseName() {
    const size_t start = pos_;
    while (!AtEnd() && NameChar(s_[pos_])) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }

  int RuleFor(const std::string& name) {
    const auto it = rule_ids_.find(name);
    if (it != rule_ids_.end()) return it->second;
    const int id = b_.AddRule(name);
    rule_ids_[name] = id;
    return id;
  }
  int HelperRule(const std::string& base) { return b_.AddRule(Str(base, "_", ++helpers_)); }

  bool ParseRule() {
    const size_t start = pos_;
    const std::string name = ParseName();
    if (name.empty()) return Fail(Str("expected a rule name, found '", Peek(), "'"));
    if (defined_.count(name)) {
      pos_ = start;
      return Fail(Str("rule '", name, "' is defined twice"));
    }
    defined_.insert({name, start});
    current_ = name;
    SkipSpace(false);
    if (s_.substr(pos_, 3) != "::=") return Fail("expected '::='");
    pos_ += 3;
    SkipSpace(true);
    if (!ParseAlternatives(RuleFor(name), false)) return false;
    if (AtEnd()) return true;
    if (s_[pos_] == '\n' || s_[pos_] == '\r') return true;
    return Fail(Str("expected a newline or the end after rule '", name, "', found '", s_[pos_], "'"));
  }

  bool ParseAlternatives(int rule, bool nested) {
    while (true) {
      std::vector<Element> seq;
      if (!ParseSequence(&seq, nested)) return false;
      b_.AddAlternative(rule, seq);
      elements_ += seq.size() + 1;
      if (Peek() != '|') return true;
      ++pos_;
      SkipSpace(true);
    }
  }

  bool ParseSequence(std::vector<Element>* seq, bool nested) {
    size_t last_start = seq->size();
    bool have_last = false;
    while (!AtEnd()) {
      const char c = s_[pos_];
      if (c == '"') {
        last_start = seq->size();
        have_last = true;
        if (!ParseLiteral(seq)) return false;
      } else if (c == '[') {
        last_start = seq->size();
        have_last = true;
        if (!ParseClass(seq)) return false;
      } else if (c == '.') {
        ++pos_;
        last_start = seq->size();
        have_last = true;
        seq->push_back(b_.CodePoints({{0, 0x10FFFF}}, Str(current_, "_any")));
      } else if (c == '(') {
        if (++nesting_ > limits_.max_nesting)
          return Fail(Str("parentheses nested deeper than ", limits_.max_nesting));
        ++pos_;
        SkipSpace(true);
        const int group = HelperRule(current_);
        if (!ParseAlternatives(group, true)) return false;
        if (Peek() != ')') return Fail("expected ')'");
        ++pos_;
        --nesting_;
        last_start = seq->size();
        have_last = true;
        seq->push_back(b_.Ref(group));
      } else if (NameChar(c)) {
        const size_t at = pos_;
        const std::string name = ParseName();
        first_use_.insert({name, at});
        last_start = seq->size();
        have_last = true;
        seq->push_back(b_.Ref(RuleFor(name)));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) return Fail(Str("'", c, "' has nothing to repeat"));
        if (!ParseRepetition(seq, last_start)) return false;
        have_last = false;  // "a**" is an error, as in llama.cpp
      } else {
        break;
      }
      SkipSpace(nested);
    }
    if (!AtEnd() && s_[pos_] != '|' && s_[pos_] != ')' && s_[pos_] != '\n' && s_[pos_] != '\r')
      return Fail(Str("unexpected '", s_[pos_], "'"));
    if (!AtEnd() && s_[pos_] == ')' && !nested) return Fail("unexpected ')'");
    return true;
  }

  bool ParseCount(int* out) {
    const size_t start = pos_;
    long v = 0;
    while (!AtEnd() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + (s_[pos_] - '0');
      if (v > limits_.max_repetition) return Fail(Str("repetition count over ", limits_.max_repetition));
      ++pos_;
    }
    if (pos_ == start) return Fail("expected a number");
    *out = static_cast<int>(v);
    return true;
  }

  // Replaces seq[last_start..] (the unit) by its repetition {min,max} (max -1: unbounded).
  bool ParseRepetition(std::vector<Element>* seq, size_t last_start) {
    int min = 0, max = -1;
    const char c = s_[pos_++];
    if (c == '+') min = 1;
    if (c == '?') max = 1;
    if (c == '{') {
      SkipSpace(false);
      if (!ParseCount(&min)) return false;
      SkipSpace(false);
      max = min;
      if (Peek() == ',') {
        ++pos_;
        SkipSpace(false);
        max = -1;
        if (Peek() != '}' && !ParseCount(&max)) return false;
        SkipSpace(false);
      }
      if (Peek() != '}') return Fail("expected '}'");
      ++pos_;
      if (max >= 0 && max < min) return Fail(Str("repetition {", min, ",", max, "}: the maximum is below the minimum"));
    }
    const std::vector<Element> unit(seq->begin() + last_start, seq->end());
    seq->resize(last_start);
    const long copies = static_cast<long>(unit.size()) * (min + (max > min ? 1 : 0)) + 2;
    elements_ += copies + (max > min ? (max - min) * (unit.size() + 2) : unit.size() + 2);
    if (elements_ > limits_.max_elements)
      return Fail(Str("grammar too large: over ", limits_.max_elements, " elements once expanded"));
    for (int i = 0; i < min; ++i) seq->insert(seq->end(), unit.begin(), unit.end());
    if (max < 0) {  // star ::= unit star | (empty)
      const int star = HelperRule(current_);
      std::vector<Element> alt = unit;
      alt.push_back(b_.Ref(star));
      b_.AddAlternative(star, alt);
      b_.AddAlternative(star, {});
      seq->push_back(b_.Ref(star));
    } else if (max > min) {  // opt_k ::= unit opt_{k-1} | (empty); opt_1 ::= unit | (empty)
      int next = -1;
      for (int k = 1; k <= max - min; ++k) {
        const int opt = HelperRule(current_);
        std::vector<Element> alt = unit;
        if (next >= 0) alt.push_back(b_.Ref(next));
        b_.AddAlternative(opt, alt);
        b_.AddAlternative(opt, {});
        next = opt;
      }
      seq->push_back(b_.Ref(next));
    }
    return true;
  }

  // One code point of the source (UTF-8), or an escape; `quote` is the closing delimiter.
  bool ParseChar(uint32_t* out) {
    if (AtEnd()) return Fail("unexpected end of input");
    const unsigned char c = s_[pos_];
    if (c == '\\') {
      ++pos_;
      if (AtEnd()) return Fail("unexpected end of input after '\\'");
      const char e = s_[pos_++];
      int digits = 0;
      switch (e) {
        case 'n': *out = '\n'; return true;
        case 'r': *out = '\r'; return true;
        case 't': *out = '\t'; return true;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'':
          *out = static_cast<unsigned char>(e);
          return true;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
          --pos_;
          return Fail(Str("unknown escape '\\", e, "'"));
      }
      uint32_t v = 0;
      for (int i = 0; i < digits; ++i) {
        const char h = Peek();
        int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (d < 0) return Fail(Str("expected ", digits, " hex digits after '\\", e, "'"));
        v = v * 16 + d;
        ++pos_;
      }
      if (v > 0x10FFFF) return Fail("code point above U+10FFFF");
      if (e == 'x' && v >= 0xF5 && limits_.stand_in_bytes) v |= kRawByte;
      *out = v;
      return true;
    }
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + n > s_.size()) return Fail("invalid UTF-8 in the grammar");
    uint32_t v = n == 1 ? c : n == 2 ? (c & 31) : n == 3 ? (c & 15) : (c & 7);
    for (int i = 1; i < n; ++i) {
      const unsigned char k = s_[pos_ + i];
      if ((k >> 6) != 2) return Fail("invalid UTF-8 in the grammar");
      v = (v << 6) | (k & 63);
    }
    pos_ += n;
    *out = v;
    return true;
  }

  bool ParseLiteral(std::vector<Element>* seq) {
    ++pos_;  // "
    while (true) {
      if (AtEnd() || s_[pos_] == '\n') return Fail("unterminated string literal");
      if (s_[pos_] == '"') break;
      uint32_t cp;
      if (!ParseChar(&cp)) return false;
      if (cp & kRawByte) {  // a stand-in byte (GbnfLimits::stand_in_bytes)
        ByteSet one;
        one.Add(cp & 0xFF);
        seq->push_back(b_.Bytes(one));
        continue;
      }
      // The character's UTF-8 bytes, one singleton set each.
      uint8_t bytes[4];
      const int n = cp < 0x80 ? (bytes[0] = cp, 1)
                  : cp < 0x800 ? (bytes[0] = 0xC0 | (cp >> 6), bytes[1] = 0x80 | (cp & 63), 2)
                  : cp < 0x10000 ? (bytes[0] = 0xE0 | (cp >> 12), bytes[1] = 0x80 | ((cp >> 6) & 63),
                                    bytes[2] = 0x80 | (cp & 63), 3)
                                 : (bytes[0] = 0xF0 | (cp >> 18), bytes[1] = 0x80 | ((cp >> 12) & 63),
                                    bytes[2] = 0x80 | ((cp >> 6) & 63), bytes[3] = 0x80 | (cp & 63), 4);
      for (int i = 0; i < n; ++i) {
        ByteSet one;
        one.Add(bytes[i]);
        seq->push_back(b_.Bytes(one));
      }
    }
    ++pos_;
    return true;
  }

  bool ParseClass(std::vector<Element>* seq) {
    ++pos_;  // [
    bool negated = false;
    if (Peek() == '^') { negated = true; ++pos_; }
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (true) {
      if (AtEnd() || s_[pos_] == '\n') return Fail("unterminated character class");
      if (s_[pos_] == ']') break;
      uint32_t lo, hi;
      if (!ParseChar(&lo)) return false;
      lo &= ~kRawByte;  // stand-in bytes are for literals only; in a class \xHH is U+00HH
      hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && Peek(1) != '\0' && Peek(1) != '\n') {
        ++pos_;
        if (!ParseChar(&hi)) return false;
        hi &= ~kRawByte;
        if (hi < lo) return Fail("character range is reversed");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;
    if (negated) {
      std::sort(ranges.begin(), ranges.end());
      std::vector<std::pair<uint32_t, uint32_t>> rest;
      uint32_t next = 0;
      for (auto [lo, hi] : ranges) {
        if (lo > next) rest.emplace_back(next, lo - 1);
        next = std::max(next, hi + 1);
      }
      if (next <= 0x10FFFF) rest.emplace_back(next, 0x10FFFF);
      ranges = rest;
    }
    seq->push_back(b_.CodePoints(ranges, Str(current_, "_class")));
    return true;
  }

  std::string_view s_;
  GbnfLimits limits_;
  size_t pos_ = 0;
  std::string error_;
  GrammarBuilder b_;
  std::map<std::string, int> rule_ids_;
  std::map<std::string, size_t> defined_, first_use_;
  std::string current_;
  int helpers_ = 0;
  int nesting_ = 0;
  long elements_ = 0;
};

}  // namespace

Result<Grammar> ParseGbnf(std::string_view text, const GbnfLimits& limits) {
  return Parser(text, limits).Run();
}

}  // namespace g4::grammar
