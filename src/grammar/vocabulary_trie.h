// The one place that turns a tokenizer's vocabulary into the TokenTrie constrained decoding masks
// over (the server's response formats and tool calls, g4 bench --json-schema). The grammar layer
// does not see the tokenizer, so the caller hands in what the tokenizer knows per id.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/function_ref.h"
#include "grammar/token_mask.h"

namespace g4::grammar {

// `token_bytes(id)`: the bytes token `id` decodes to ("" for an id the tokenizer does not have);
// `is_special(id)`: a control token. Special tokens are never produced by a grammar, except the
// Gemma-4 protocol markers (<|tool_call>, <|"|>, ...), which stand for their single stand-in byte
// (grammar/tool_call_grammar.h); tokens holding a byte that never occurs in UTF-8 (byte
// fallbacks F5-FF) are left out, so only the markers produce the stand-ins. `end_tokens` (eos,
// end of turn) end a complete output.
std::shared_ptr<const TokenTrie> BuildVocabularyTrie(int vocab, FunctionRef<std::string(int id)> token_bytes,
                                                     FunctionRef<bool(int id)> is_special,
                                                     std::vector<int> end_tokens);

}  // namespace g4::grammar
