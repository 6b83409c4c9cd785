// Which tokens the vocabulary trie lets a grammar produce, and as which bytes.
#include "grammar/vocabulary_trie.h"

#include <gtest/gtest.h>

#include "grammar/gbnf_parser.h"

namespace g4::grammar {
namespace {

TEST(VocabularyTrie, SpecialsOutMarkersAsStandInsNonUtf8BytesOut) {
  // 0: eos (special), 1: <|tool_call> (special, a marker), 2: "a", 3: a byte fallback 0xF8,
  // 4: another special, 5: an id the tokenizer lacks, 6: "ab".
  const std::vector<std::string> text = {"<eos>", "<|tool_call>", "a", "\xF8", "<pad>", "", "ab"};
  const std::vector<bool> special = {true, true, false, false, true, false, false};
  const auto trie = BuildVocabularyTrie(
      7, [&](int id) { return text[id]; }, [&](int id) { return static_cast<bool>(special[id]); }, {0});
  EXPECT_EQ(trie->vocab(), 7);
  EXPECT_TRUE(trie->IsEnd(0));
  EXPECT_FALSE(trie->Eligible(0));
  EXPECT_TRUE(trie->Eligible(1));
  EXPECT_EQ(trie->bytes(1), "\xF8");  // the marker spells its stand-in byte
  EXPECT_TRUE(trie->Eligible(2));
  EXPECT_FALSE(trie->Eligible(3));  // only the marker may spell 0xF8
  EXPECT_FALSE(trie->Eligible(4));
  EXPECT_FALSE(trie->Eligible(5));
  EXPECT_TRUE(trie->Eligible(6));

  // A grammar asking for the marker then "a" allows token 1 first, never the byte fallback.
  GbnfLimits limits;
  limits.stand_in_bytes = true;
  auto g = ParseGbnf("root ::= \"\\xF8\" \"a\"\n", limits);
  ASSERT_TRUE(g.ok()) << g.status().message();
  TokenConstraint c(trie, std::make_shared<Automaton>(std::move(g).value()));
  const uint64_t* mask = c.Mask();
  EXPECT_EQ(mask[0], uint64_t{1} << 1);
  ASSERT_TRUE(c.Accept(1));
  EXPECT_EQ(c.Mask()[0], uint64_t{1} << 2);
}

}  // namespace
}  // namespace g4::grammar
