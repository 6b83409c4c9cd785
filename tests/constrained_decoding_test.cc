// Constrained decoding end to end below the server: token masks over the real 262,144-token
// vocabulary against brute force, and generation on a random-weight tiny model (greedy and
// sampled, alone and through the scheduler) whose every output is complete JSON that an
// independent parser (nlohmann) reads and whose fields hold the schema's promises.
#include <gtest/gtest.h>

#include <chrono>

#include "grammar/gbnf_parser.h"
#include "grammar/token_mask.h"
#include "runtime/generate.h"
#include "runtime/scheduler.h"
#include "testing/checkpoints.h"
#include "testing/grammars.h"
#include "testing/sequences.h"
#include "testing/tiny_model.h"
#include "testing/tiny_vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace g4 {
namespace {

using grammar::Automaton;
using grammar::TokenConstraint;
using grammar::TokenTrie;

TEST(ConstrainedDecoding, RealVocabularyMasksMatchBruteForce) {
  auto tok = Tokenizer::Load(TestTokenizerPath());
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const int vocab = (*tok)->vocab_size();
  std::vector<std::string> bytes(vocab);
  std::vector<char> eligible(vocab, 0);
  for (int id = 0; id < vocab; ++id) {
    bytes[id] = (*tok)->TokenBytes(id);
    eligible[id] = (*tok)->InRange(id) && !(*tok)->IsSpecial(id);
  }
  const int eos = (*tok)->eos_id();
  const auto t0 = std::chrono::steady_clock::now();
  auto trie = std::make_shared<TokenTrie>(bytes, eligible, std::vector<int>{eos});
  const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  auto automaton = SchemaAutomaton(kPersonSchema);
  // States along a valid output: start, inside a key, inside a string value, after a digit.
  const std::string out = R"({"name":"Jo Ann","age":42,"ok":true})";
  int checked = 0;
  for (size_t prefix : {size_t{0}, size_t{3}, size_t{12}, size_t{23}, out.size()}) {
    TokenConstraint c(trie, automaton);
    const int state = automaton->Walk(automaton->start(), out.substr(0, prefix));
    ASSERT_NE(state, Automaton::kDead) << prefix;
    // Drive the constraint to that state with single-byte tokens where possible.
    for (char ch : out.substr(0, prefix)) {
      auto ids = (*tok)->Encode(std::string(1, ch));
      ASSERT_EQ(ids.size(), 1u);
      ASSERT_TRUE(c.Accept(ids[0])) << ch;
    }
    const auto m0 = std::chrono::steady_clock::now();
    const uint64_t* mask = c.Mask();
    const double mask_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - m0).count();
    int allowed = 0;
    for (int id = 0; id < vocab; ++id) {
      const bool bit = (mask[id >> 6] >> (id & 63)) & 1;
      const bool want = id == eos ? automaton->CanEnd(state)
                                  : eligible[id] && !bytes[id].empty() &&
                                        automaton->Walk(state, bytes[id]) != Automaton::kDead;
      ASSERT_EQ(bit, want) << "prefix " << prefix << " token " << id << " '" << bytes[id] << "'";
      allowed += bit;
      ++checked;
    }
    std::printf("prefix %2zu: %6d tokens allowed, first mask %.2f ms (trie %zu nodes, built in %.0f ms)\n",
                prefix, allowed, mask_ms, trie->nodes(), build_ms);
  }
  EXPECT_EQ(checked, 5 * vocab);
  // Every token walked from five states: far inside the automaton's limits (AutomatonLimits).
  EXPECT_FALSE(automaton->exhausted()) << automaton->exhausted_reason();
  std::printf("automaton: %zu states, %zu stack frames, %zu frames visited\n", automaton->states(),
              automaton->nodes(), automaton->frames_visited());
}

class ConstrainedGeneration : public TinyModelTest {};

TEST_F(ConstrainedGeneration, GreedyAndSampledOutputsAreCompleteValidJson) {
  ASSERT_NE(model_, nullptr);
  const int eos = 1;
  auto trie = TinyTrie(model_->plan().vocab, eos);
  auto automaton = SchemaAutomaton(kPersonSchema);
  int stopped = 0;
  for (int run = 0; run < 12; ++run) {
    KvCache cache(model_->plan(), 512, 64);
    TokenConstraint c(trie, automaton);
    GenerateOptions go;
    go.max_new_tokens = 400;
    go.stop_ids = {eos};
    go.constraint = &c;
    if (run > 0) {
      go.sampling = SeededSampling(1.0f + 0.1f * run, run);
      go.sampling.top_k = run % 3 == 0 ? 40 : 0;
      go.sampling.logit_bias[258 + run] = 5.0f;
    }
    auto r = Generate(*model_, cache, {2, 3 + run, 4}, go);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const std::string text = TokensText(*trie, r->tokens);
    if (r->finish_reason == "stop") {
      ++stopped;
      EXPECT_TRUE(c.IsComplete());
      CheckPerson(text);
    } else {
      EXPECT_EQ(r->finish_reason, "length");
      EXPECT_FALSE(c.IsComplete()) << text;  // never a cut-off output claimed complete
    }
  }
  EXPECT_GE(stopped, 6);
}

TEST_F(ConstrainedGeneration, AllAllowedTokensSuppressedIsAnErrorNotAnInvalidToken) {
  ASSERT_NE(model_, nullptr);
  auto trie = TinyTrie(model_->plan().vocab, 1);
  auto g = grammar::ParseGbnf("root ::= \"a\"\n");
  ASSERT_TRUE(g.ok());
  for (float temperature : {0.0f, 1.0f}) {
    TokenConstraint c(trie, std::make_shared<Automaton>(std::move(g).value()));
    g = grammar::ParseGbnf("root ::= \"a\"\n");
    KvCache cache(model_->plan(), 64, 64);
    GenerateOptions go;
    go.max_new_tokens = 4;
    go.constraint = &c;
    go.sampling.temperature = temperature;
    go.sampling.suppress_tokens = {2 + 'a'};  // the only token the grammar allows
    auto r = Generate(*model_, cache, {2, 3}, go);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), kGrammarSuppressedError);
  }
}

TEST_F(ConstrainedGeneration, SchedulerRowsAreConstrainedAndUnsatisfiableEndsWithLength) {
  ASSERT_NE(model_, nullptr);
  const int eos = 1;
  auto trie = TinyTrie(model_->plan().vocab, eos);
  SchedulerOptions so;
  so.parallel = 4;
  so.context = 512;
  Scheduler scheduler(*model_, so);
  std::vector<SequenceRunner> runners(6);
  std::vector<std::shared_ptr<TokenConstraint>> constraints;
  for (int i = 0; i < 6; ++i) {
    SequenceRequest req;
    req.prompt = {2, 10 + i, 20 + i};
    // The last one needs at least 20 array items within 15 tokens: it cannot finish.
    const bool tight = i == 5;
    req.max_new_tokens = tight ? 15 : 300;
    req.stop_ids = {eos};
    req.sampling = SeededSampling(i % 2 ? 0.0f : 1.3f, i);
    req.constraint = std::make_shared<TokenConstraint>(
        trie, SchemaAutomaton(tight ? R"({"type":"array","items":{"type":"integer"},"minItems":20})" : kPersonSchema));
    constraints.push_back(req.constraint);
    runners[i].Wire(req);
    ASSERT_EQ(scheduler.Submit(std::move(req)).admission, Admission::kAccepted);
  }
  for (int i = 0; i < 6; ++i) {
    SequenceOutcome o = runners[i].future.get();
    const std::string text = TokensText(*trie, o.tokens);
    if (i == 5) {
      EXPECT_EQ(o.result.finish_reason, "length") << text;
      EXPECT_EQ(o.tokens.size(), 15u);
      EXPECT_FALSE(constraints[i]->IsComplete());
    } else if (o.result.finish_reason == "stop") {
      CheckPerson(text);
    } else {
      EXPECT_EQ(o.result.finish_reason, "length") << text;
    }
  }
}

// A grammar whose parse stacks double with each "a" (the bias makes the model pick "a" every
// time): the recogniser stops at its limit and generation ends with that reason, in Generate and
// in the scheduler, instead of hanging or emitting a token the grammar may not allow.
TEST_F(ConstrainedGeneration, ExhaustedGrammarEndsWithItsReason) {
  ASSERT_NE(model_, nullptr);
  const int eos = 1;
  const int a = 2 + 'a';
  auto trie = TinyTrie(model_->plan().vocab, eos);
  const std::string kDoubling = "root ::= s\ns ::= \"a\" s \"x\" | \"a\" s \"y\" | \"\"\n";
  auto automaton = [&] {
    auto g = grammar::ParseGbnf(kDoubling);
    return std::make_shared<Automaton>(std::move(g).value());
  };
  {
    TokenConstraint c(trie, automaton());
    KvCache cache(model_->plan(), 256, 64);
    GenerateOptions go;
    go.max_new_tokens = 200;
    go.stop_ids = {eos};
    go.constraint = &c;
    go.sampling.logit_bias[a] = 100.0f;
    auto r = Generate(*model_, cache, {2, 3}, go);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(c.automaton().exhausted());
    EXPECT_EQ(r.status().message(), c.automaton().exhausted_reason());
  }
  SchedulerOptions so;
  so.parallel = 2;
  so.context = 256;
  Scheduler scheduler(*model_, so);
  SequenceRunner runner;
  SequenceRequest req;
  req.prompt = {2, 3};
  req.max_new_tokens = 200;
  req.stop_ids = {eos};
  req.sampling.logit_bias[a] = 100.0f;
  req.constraint = std::make_shared<TokenConstraint>(trie, automaton());
  auto constraint = req.constraint;
  runner.Wire(req);
  ASSERT_EQ(scheduler.Submit(std::move(req)).admission, Admission::kAccepted);
  SequenceOutcome o = runner.future.get();
  EXPECT_EQ(o.result.finish_reason, "error");
  EXPECT_EQ(o.result.error, constraint->automaton().exhausted_reason());
  EXPECT_FALSE(o.result.error.empty());
  EXPECT_LT(o.tokens.size(), 40u);
  for (int t : o.tokens) EXPECT_EQ(t, a);
}

}  // namespace
}  // namespace g4
