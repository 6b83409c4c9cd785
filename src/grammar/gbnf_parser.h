// The GBNF grammar format that llama.cpp and llama-server accept ("grammar" request field):
//
//   root  ::= greeting " " name   # comments run to the end of the line
//   greeting ::= "hello" | "hi"
//   name  ::= [A-Z] [a-z]* ( "-" [A-Z] [a-z]* )?
//   digits ::= [0-9]{1,3}
//
// Rules `name ::= alternatives`, names of letters, digits, '-' and '_'; a rule ends at a newline
// unless inside parentheses or right after '::=' or '|'. Terminals: "literals" and [classes]
// (ranges a-z, negation [^...], escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH) and '.' (any
// character); postfix * + ? {m} {m,} {m,n} apply to the element before them. Literals and classes
// are Unicode code points, matched as their UTF-8 bytes. `root` is the start rule.
#pragma once

#include <string_view>

#include "base/status.h"
#include "grammar/grammar.h"

namespace g4::grammar {

struct GbnfLimits {
  int max_repetition = 10000;     // largest m or n in {m,n}
  int max_elements = 1 << 21;     // elements of the expanded grammar
  int max_nesting = 256;          // parentheses inside parentheses
  // Internal grammars only (never a client's): in a literal, "\xHH" with HH >= F5 is the raw
  // byte HH, a byte that never occurs in UTF-8. Token masks map special tokens to such bytes
  // (tool_call_grammar.h), so a grammar can ask for a special token as a whole token.
  bool stand_in_bytes = false;
};

// Errors say where: "line 3, column 14: expected '::='".
Result<Grammar> ParseGbnf(std::string_view text, const GbnfLimits& limits = {});

}  // namespace g4::grammar
