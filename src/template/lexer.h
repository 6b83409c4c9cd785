// Splits a Jinja template into text and tag tokens, applying whitespace control the way Jinja2
// does under Hugging Face's environment (trim_blocks, lstrip_blocks, keep_trailing_newline off).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace g4::jinja {

enum class TokenType : uint8_t {
  kText,        // literal template data (already whitespace-trimmed)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the unescaped value
  kInt,
  kFloat,
  kOperator,  // text holds the operator: "+", "//", "(", ...
  kEnd,
};

struct Token {
  TokenType type;
  std::string text;
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0;
};

Result<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace g4::jinja
