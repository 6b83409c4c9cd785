#include "template/lexer.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "template/value.h"

namespace g4::jinja {
namespace {

bool IsSpace(char c) {
  // Python's str.isspace() over ASCII: what Jinja2's "-" whitespace control removes.
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
         (c >= '\x1c' && c <= '\x1f');
}
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's unicode-escape decoding of a string literal body (what Jinja2 applies).
std::string Unescape(std::string_view body) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    switch (c) {
      case '\n': break;  // line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t cp = 0;
        bool ok = i + digits < body.size();
        for (size_t k = 1; ok && k <= digits; ++k) {
          const int h = HexValue(body[i + k]);
          if (h < 0) ok = false;
          cp = cp * 16 + static_cast<uint32_t>(h < 0 ? 0 : h);
        }
        if (!ok || cp > 0x10FFFF) {
          out += '\\';
          out += c;
        } else {
          AppendCodePoint(out, cp);
          i += digits;
        }
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          uint32_t cp = 0;
          size_t k = 0;
          while (k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7') {
            cp = cp * 8 + static_cast<uint32_t>(body[i + k] - '0');
            ++k;
          }
          AppendCodePoint(out, cp);
          i += k - 1;
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : s_(std::move(source)) {}

  Result<std::vector<Token>> Run() {
    size_t pos = 0;
    while (pos < s_.size()) {
      size_t tag = FindTagStart(pos);
      if (tag == std::string::npos) {
        Emit(TokenType::kText, s_.substr(pos), LineAt(pos));
        break;
      }
      const char kind = s_[tag + 1];
      size_t after = tag + 2;
      const bool minus = after < s_.size() && s_[after] == '-';
      const bool plus = after < s_.size() && s_[after] == '+';
      std::string text = s_.substr(pos, tag - pos);
      if (minus) {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (kind != '{' && !plus) {
        // lstrip_blocks: drop spaces and tabs between the line start and a block or comment tag.
        const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        const bool line_starting = pos == 0 || s_[pos - 1] == '\n';
        if ((line_start > 0 || line_starting) &&
            text.find_first_not_of(" \t\f\v", line_start) == std::string::npos) {
          text.resize(line_start);
        }
      }
      if (!text.empty()) Emit(TokenType::kText, std::move(text), LineAt(pos));
      if (minus || plus) ++after;
      Result<size_t> next = kind == '#'   ? SkipComment(tag, after)
                            : kind == '{' ? LexTag(tag, after, TokenType::kVarBegin)
                                          : LexTag(tag, after, TokenType::kBlockBegin);
      if (!next.ok()) return next.status();
      pos = *next;
    }
    tokens_.push_back(Token{TokenType::kEnd, "", LineAt(s_.size())});
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t i = s_.find('{', from); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  int LineAt(size_t pos) {
    for (; line_pos_ < pos && line_pos_ < s_.size(); ++line_pos_) {
      if (s_[line_pos_] == '\n') ++line_;
    }
    return line_;
  }

  void Emit(TokenType type, std::string text, int line) { tokens_.push_back(Token{type, std::move(text), line}); }

  // After a block or comment end: "-" strips all following whitespace, otherwise trim_blocks
  // removes a single newline.
  size_t AfterTagEnd(size_t end, bool strip, bool keep_newline) const {
    if (strip) {
      while (end < s_.size() && IsSpace(s_[end])) ++end;
    } else if (!keep_newline && end < s_.size() && s_[end] == '\n') {
      ++end;
    }
    return end;
  }

  Result<size_t> SkipComment(size_t tag, size_t body) {
    const size_t end = s_.find("#}", body);
    if (end == std::string::npos) return Status::Errorf("line ", LineAt(tag), ": missing end of comment tag");
    const bool strip = end > body && s_[end - 1] == '-';
    const bool keep = end > body && s_[end - 1] == '+';
    return AfterTagEnd(end + 2, strip, keep);
  }

  // {% raw %}...{% endraw %}: the body is text, taken verbatim.
  std::optional<size_t> TryRaw(size_t after) {
    size_t p = after;
    while (p < s_.size() && IsSpace(s_[p])) ++p;
    if (s_.compare(p, 3, "raw") != 0) return std::nullopt;
    p += 3;
    while (p < s_.size() && IsSpace(s_[p])) ++p;
    bool strip_after_open = false;
    if (s_.compare(p, 3, "-%}") == 0) {
      strip_after_open = true;
      ++p;
    }
    if (s_.compare(p, 2, "%}") != 0) return std::nullopt;
    p = AfterTagEnd(p + 2, strip_after_open, false);
    for (size_t q = s_.find("{%", p); q != std::string::npos; q = s_.find("{%", q + 1)) {
      size_t r = q + 2;
      const bool minus = r < s_.size() && (s_[r] == '-' || s_[r] == '+');
      const bool strip_before = r < s_.size() && s_[r] == '-';
      if (minus) ++r;
      while (r < s_.size() && IsSpace(s_[r])) ++r;
      if (s_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < s_.size() && IsSpace(s_[r])) ++r;
      bool strip_after = false;
      if (r < s_.size() && s_[r] == '-') {
        strip_after = true;
        ++r;
      }
      if (s_.compare(r, 2, "%}") != 0) continue;
      std::string text = s_.substr(p, q - p);
      if (strip_before) {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      }
      if (!text.empty()) Emit(TokenType::kText, std::move(text), LineAt(p));
      return AfterTagEnd(r + 2, strip_after, false);
    }
    return std::nullopt;
  }

  Result<size_t> LexTag(size_t tag, size_t pos, TokenType begin) {
    const bool block = begin == TokenType::kBlockBegin;
    if (block) {
      if (auto raw = TryRaw(pos)) return *raw;
    }
    Emit(begin, "", LineAt(tag));
    std::string balance;
    while (true) {
      while (pos < s_.size() && IsSpace(s_[pos])) ++pos;
      if (pos >= s_.size()) {
        return Status::Errorf("line ", LineAt(tag), ": unexpected end of template, expected '",
                              block ? "%}" : "}}", "'");
      }
      const char c = s_[pos];
      const char* close = block ? "%}" : "}}";
      if (balance.empty()) {
        if ((c == '-' || c == '+') && s_.compare(pos + 1, 2, close) == 0) {
          Emit(block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", LineAt(pos));
          return AfterTagEnd(pos + 3, c == '-', !block || c == '+');
        }
        if (s_.compare(pos, 2, close) == 0) {
          Emit(block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", LineAt(pos));
          return AfterTagEnd(pos + 2, false, !block);
        }
      }
      const int line = LineAt(pos);
      if (IsNameStart(c)) {
        size_t end = pos + 1;
        while (end < s_.size() && (IsNameStart(s_[end]) || IsDigit(s_[end]))) ++end;
        Emit(TokenType::kName, s_.substr(pos, end - pos), line);
        pos = end;
      } else if (IsDigit(c)) {
        G4_ASSIGN_OR_RETURN(pos, LexNumber(pos, line));
      } else if (c == '\'' || c == '"') {
        size_t end = pos + 1;
        while (end < s_.size() && s_[end] != c) end += s_[end] == '\\' ? 2 : 1;
        if (end >= s_.size()) return Status::Errorf("line ", line, ": unterminated string literal");
        Emit(TokenType::kString, Unescape(std::string_view(s_).substr(pos + 1, end - pos - 1)), line);
        pos = end + 1;
      } else {
        static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* two : kTwo) {
          if (s_.compare(pos, 2, two) == 0) op = two;
        }
        if (op.empty()) {
          if (!std::strchr("+-*/%~<>=.,:|()[]{}", c) || c == '\0') {
            return Status::Errorf("line ", line, ": unexpected character '", std::string(1, c), "'");
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") {
          balance += op == "(" ? ')' : op == "[" ? ']' : '}';
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty() || balance.back() != op[0]) {
            return Status::Errorf("line ", line, ": unexpected '", op, "'");
          }
          balance.pop_back();
        }
        Emit(TokenType::kOperator, op, line);
        pos += op.size();
      }
    }
  }

  Result<size_t> LexNumber(size_t pos, int line) {
    size_t end = pos;
    auto digits = [&] {
      while (end < s_.size() && (IsDigit(s_[end]) || (s_[end] == '_' && end + 1 < s_.size() && IsDigit(s_[end + 1])))) ++end;
    };
    digits();
    bool is_float = false;
    if (end + 1 < s_.size() && s_[end] == '.' && IsDigit(s_[end + 1])) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < s_.size() && (s_[end] == 'e' || s_[end] == 'E')) {
      size_t e = end + 1;
      if (e < s_.size() && (s_[e] == '+' || s_[e] == '-')) ++e;
      if (e < s_.size() && IsDigit(s_[e])) {
        is_float = true;
        end = e;
        digits();
      }
    }
    std::string text;
    for (size_t i = pos; i < end; ++i) {
      if (s_[i] != '_') text += s_[i];
    }
    Token token{is_float ? TokenType::kFloat : TokenType::kInt, text, line};
    if (is_float) {
      token.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      token.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) return Status::Errorf("line ", line, ": integer literal ", text, " is too large");
    }
    tokens_.push_back(std::move(token));
    return end;
  }

  std::string s_;
  std::vector<Token> tokens_;
  size_t line_pos_ = 0;
  int line_ = 1;
};

}  // namespace

Result<std::vector<Token>> Tokenize(std::string_view source) {
  // Newlines become "\n" and one trailing newline is dropped (keep_trailing_newline=False).
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(std::move(normalized)).Run();
}

}  // namespace g4::jinja
