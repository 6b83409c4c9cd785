#include "grammar/vocabulary_trie.h"

#include <algorithm>
#include <cstdint>

#include "grammar/tool_call_grammar.h"

namespace g4::grammar {

std::shared_ptr<const TokenTrie> BuildVocabularyTrie(int vocab, FunctionRef<std::string(int id)> token_bytes,
                                                     FunctionRef<bool(int id)> is_special,
                                                     std::vector<int> end_tokens) {
  std::vector<std::string> bytes(static_cast<size_t>(std::max(0, vocab)));
  std::vector<char> eligible(bytes.size(), 0);
  for (int id = 0; id < vocab; ++id) {
    bytes[id] = token_bytes(id);
    if (bytes[id].empty()) continue;
    if (const uint8_t stand_in = StandInByte(bytes[id]); stand_in != 0) {
      bytes[id] = std::string(1, static_cast<char>(stand_in));
      eligible[id] = 1;
      continue;
    }
    if (is_special(id)) continue;
    eligible[id] = std::none_of(bytes[id].begin(), bytes[id].end(),
                                [](char c) { return static_cast<uint8_t>(c) >= kFirstNonUtf8Byte; });
  }
  return std::make_shared<TokenTrie>(bytes, eligible, std::move(end_tokens));
}

}  // namespace g4::grammar
