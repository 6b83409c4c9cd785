// Tokens -> AST, following Jinja2's grammar and operator precedence.
#pragma once

#include <string_view>

#include "base/status.h"
#include "template/ast.h"

namespace g4::jinja {

// Nesting deeper than this (expressions or blocks) is refused, so that no template can exhaust
// the stack of the parser or the interpreter.
inline constexpr int kMaxNestingDepth = 128;

Result<Body> ParseTemplate(std::string_view source);

}  // namespace g4::jinja
