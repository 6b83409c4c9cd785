// A made-up byte vocabulary for the tiny test models' 512 ids, so constrained decoding can run on
// them: 0-1 special (`eos` ends a complete output), 2..257 one byte each (byte b is id b + 2),
// the rest JSON-ish pieces, so random weights wander over many grammar paths.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "grammar/token_mask.h"

namespace g4 {

std::shared_ptr<grammar::TokenTrie> TinyTrie(int vocab, int eos);

// The bytes `tokens` spell (end tokens spell nothing).
std::string TokensText(const grammar::TokenTrie& trie, const std::vector<int>& tokens);

}  // namespace g4
