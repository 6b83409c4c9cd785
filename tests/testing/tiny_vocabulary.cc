#include "testing/tiny_vocabulary.h"

#include <string>
#include <vector>

namespace g4 {

std::shared_ptr<grammar::TokenTrie> TinyTrie(int vocab, int eos) {
  std::vector<std::string> bytes(vocab);
  std::vector<char> eligible(vocab, 1);
  const char* pieces[] = {"{\"", "\":", "\",\"", "true", "false", "null", "12", "0", "\"}", "ab", "Jo", " ",
                          "\"a\"", "],", "[", "@x.io", "\\n", "\\u00e9", "é", "日本"};
  for (int id = 0; id < vocab; ++id) {
    if (id < 2) {
      bytes[id] = "<s" + std::to_string(id) + ">";
      eligible[id] = 0;
    } else if (id < 258) {
      bytes[id] = std::string(1, static_cast<char>(id - 2));
    } else {
      bytes[id] = pieces[id % (sizeof pieces / sizeof *pieces)];
      bytes[id] += std::string(id % 3, 'a' + id % 7);
    }
  }
  return std::make_shared<grammar::TokenTrie>(bytes, eligible, std::vector<int>{eos});
}

std::string TokensText(const grammar::TokenTrie& trie, const std::vector<int>& tokens) {
  std::string text;
  for (int t : tokens)
    if (!trie.IsEnd(t)) text += trie.bytes(t);
  return text;
}

}  // namespace g4
