// Token masks against brute force: a token is in the mask exactly when the automaton accepts all
// of its bytes from the state (end tokens: exactly when the state is complete).
#include "grammar/token_mask.h"

#include <gtest/gtest.h>

#include <random>

#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"

namespace g4::grammar {
namespace {

bool Bit(const uint64_t* mask, int id) { return (mask[id >> 6] >> (id & 63)) & 1; }

// Every mask bit against walking the token's bytes one by one.
void ExpectMaskIsExact(TokenConstraint& c, const std::vector<std::string>& bytes,
                       const std::vector<char>& eligible, const std::vector<int>& ends, int state) {
  const uint64_t* mask = c.Mask();
  for (int id = 0; id < static_cast<int>(bytes.size()); ++id) {
    bool want;
    if (std::find(ends.begin(), ends.end(), id) != ends.end()) {
      want = c.automaton().CanEnd(state);
    } else {
      want = eligible[id] && !bytes[id].empty() && c.automaton().Walk(state, bytes[id]) != Automaton::kDead;
    }
    ASSERT_EQ(Bit(mask, id), want) << "token " << id << " '" << bytes[id] << "'";
  }
}

TEST(TokenMask, SmallVocabularyMatchesBruteForceAlongRandomPaths) {
  // Tokens: every single byte, then random 2-6 byte strings over JSON-ish characters.
  std::mt19937 rng(7);
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  const std::string alphabet = "{}[]\",:0123456789-.eEtruefalsnl abxyz\\";
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    for (int k = 0, n = 2 + rng() % 5; k < n; ++k) s += alphabet[rng() % alphabet.size()];
    bytes.push_back(s);
  }
  bytes.push_back("<eos>");
  const int eos = static_cast<int>(bytes.size()) - 1;
  std::vector<char> eligible(bytes.size(), 1);
  eligible[eos] = 0;
  eligible[5] = 0;  // an excluded "special" token
  auto trie = std::make_shared<TokenTrie>(bytes, eligible, std::vector<int>{eos});
  auto gbnf = JsonSchemaTextToGbnf(R"({"type":"object","properties":{"a":{"type":"integer"},
      "b":{"type":"array","items":{"type":"string","maxLength":4},"maxItems":3},"c":{"enum":[true,"x"]}},
      "required":["a"]})");
  ASSERT_TRUE(gbnf.ok());
  auto g = ParseGbnf(*gbnf);
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto automaton = std::make_shared<Automaton>(std::move(g).value());
  int finished = 0;
  for (int run = 0; run < 30; ++run) {
    TokenConstraint c(trie, automaton, run % 2 ? 256 : 2);  // tiny cache: recomputed masks agree
    std::string out;
    for (int step = 0; step < 60 && !c.IsFinished(); ++step) {
      const int state = automaton->Walk(automaton->start(), out);
      ExpectMaskIsExact(c, bytes, eligible, {eos}, state);
      const uint64_t* mask = c.Mask();
      std::vector<int> allowed;
      for (int id = 0; id < trie->vocab(); ++id)
        if (Bit(mask, id)) allowed.push_back(id);
      ASSERT_FALSE(allowed.empty()) << out;
      const int t = allowed[rng() % allowed.size()];
      ASSERT_TRUE(c.Accept(t));
      if (t != eos) out += bytes[t];
    }
    if (c.IsFinished()) ++finished;
    EXPECT_FALSE(c.Accept(5));
  }
  EXPECT_GT(finished, 0);
}

TEST(TokenMask, RollbackRestoresTheState) {
  std::vector<std::string> bytes = {"a", "b", "ab", "<e>"};
  auto trie = std::make_shared<TokenTrie>(bytes, std::vector<char>{1, 1, 1, 0}, std::vector<int>{3});
  auto g = ParseGbnf("root ::= \"a\" \"b\"+\n");
  ASSERT_TRUE(g.ok());
  TokenConstraint c(trie, std::make_shared<Automaton>(std::move(g).value()));
  EXPECT_TRUE(Bit(c.Mask(), 0));
  EXPECT_TRUE(Bit(c.Mask(), 2));
  EXPECT_FALSE(Bit(c.Mask(), 1));
  EXPECT_FALSE(Bit(c.Mask(), 3));
  EXPECT_TRUE(c.Accept(2));
  EXPECT_TRUE(c.IsComplete());
  EXPECT_FALSE(c.IsFinished());
  EXPECT_TRUE(Bit(c.Mask(), 3));  // complete: the end token may come
  EXPECT_TRUE(c.Accept(3));
  EXPECT_TRUE(c.IsFinished());
  EXPECT_FALSE(Bit(c.Mask(), 1));  // nothing after an end token
  c.Rollback(2);
  EXPECT_FALSE(c.IsComplete());
  EXPECT_TRUE(Bit(c.Mask(), 0));
}

// A grammar whose parse stacks multiply: once the automaton hits a limit, the constraint is stuck
// with the automaton's reason (its mask may lack tokens the grammar allows), never a hang.
TEST(TokenMask, AnExhaustedAutomatonIsStuckWithItsReason) {
  const std::vector<std::string> bytes = {"a", "x", "y", "aa", "<eos>"};
  auto trie = std::make_shared<TokenTrie>(bytes, std::vector<char>{1, 1, 1, 1, 0}, std::vector<int>{4});
  auto g = ParseGbnf("root ::= s\ns ::= \"a\" s \"x\" | \"a\" s \"y\" | \"\"\n");
  ASSERT_TRUE(g.ok());
  TokenConstraint c(trie, std::make_shared<Automaton>(std::move(g).value()));
  EXPECT_FALSE(c.IsStuck());
  int steps = 0;
  while (!c.IsStuck() && steps < 100) {
    ASSERT_TRUE(Bit(c.Mask(), 3));
    ASSERT_TRUE(c.Accept(3));
    ++steps;
  }
  EXPECT_LT(steps, 100);
  EXPECT_TRUE(c.automaton().exhausted());
  EXPECT_EQ(c.StuckReason(), c.automaton().exhausted_reason());

  auto plain = ParseGbnf("root ::= \"b\"\n");  // no token spells "b"
  ASSERT_TRUE(plain.ok());
  TokenConstraint cannot_spell(trie, std::make_shared<Automaton>(std::move(plain).value()));
  EXPECT_TRUE(cannot_spell.IsStuck());
  EXPECT_FALSE(cannot_spell.automaton().exhausted());
  EXPECT_NE(cannot_spell.StuckReason().find("the vocabulary cannot spell"), std::string::npos);
}

}  // namespace
}  // namespace g4::grammar
