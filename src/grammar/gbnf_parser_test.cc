// The GBNF parser and the recogniser, against an independent oracle: random regular grammars
// are written both as GBNF and as an ECMAScript regex (std::regex), and random strings (sampled
// from the grammar, then mutated) must be accepted by one exactly when the other matches.
#include "grammar/gbnf_parser.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <regex>

#include "grammar/recognizer.h"

namespace g4::grammar {
namespace {

bool Matches(const std::string& gbnf, const std::string& input) {
  auto g = ParseGbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return false;
  Recognizer r(std::make_shared<Automaton>(std::move(g).value()));
  return r.AcceptAll(input) && r.IsComplete();
}

std::string ErrorOf(const std::string& gbnf) {
  auto g = ParseGbnf(gbnf);
  return g.ok() ? "" : g.status().message();
}

TEST(GbnfParser, BasicsAndComments) {
  const std::string g = R"(# greeting
root ::= greeting " " name   # trailing comment
greeting ::= "hello" | "hi"
name ::= [A-Z] [a-z]* ( "-" [A-Z] [a-z]* )?
)";
  EXPECT_TRUE(Matches(g, "hello Ann"));
  EXPECT_TRUE(Matches(g, "hi Ann-Marie"));
  EXPECT_FALSE(Matches(g, "hi ann"));
  EXPECT_FALSE(Matches(g, "hello Ann-"));
  EXPECT_FALSE(Matches(g, "hello"));
}

TEST(GbnfParser, Repetitions) {
  const std::string g = "root ::= \"a\"{2,3} \"b\"{2} \"c\"{1,} \"d\"?\n";
  EXPECT_TRUE(Matches(g, "aabbc"));
  EXPECT_TRUE(Matches(g, "aaabbcccd"));
  EXPECT_FALSE(Matches(g, "abbc"));
  EXPECT_FALSE(Matches(g, "aaaabbc"));
  EXPECT_FALSE(Matches(g, "aabbbc"));
  EXPECT_FALSE(Matches(g, "aabb"));
  EXPECT_TRUE(Matches("root ::= (\"ab\" | \"c\")*\n", ""));
  EXPECT_TRUE(Matches("root ::= (\"ab\" | \"c\")*\n", "abcab"));
  EXPECT_FALSE(Matches("root ::= (\"ab\" | \"c\")*\n", "abca"));
  EXPECT_TRUE(Matches("root ::= \"ab\"+\n", "ababab"));  // repetition applies to the whole literal
}

TEST(GbnfParser, ClassesEscapesAndUtf8) {
  EXPECT_TRUE(Matches("root ::= [^\"\\\\]+\n", "abc"));
  EXPECT_FALSE(Matches("root ::= [^\"\\\\]+\n", "a\"c"));
  EXPECT_TRUE(Matches("root ::= [^a]\n", "\xC3\xA9"));       // é: one character, two bytes
  EXPECT_FALSE(Matches("root ::= [^a]\n", "\xC3\xA9\xC3\xA9"));
  EXPECT_FALSE(Matches("root ::= [^a]\n", "\xED\xA0\x80"));  // a surrogate is not UTF-8
  EXPECT_TRUE(Matches("root ::= [\\u00e0-\\u00ff] \"\\x41\" \"\\n\"\n", "\xC3\xA9" "A\n"));
  EXPECT_TRUE(Matches("root ::= \"日本\" .\n", "日本語"));
  EXPECT_TRUE(Matches("root ::= . . .\n", "a\xF0\x9F\x98\x80z"));  // an emoji is one '.'
  EXPECT_TRUE(Matches("root ::= [a-c-]+\n", "a-c"));
}

TEST(GbnfParser, MultilineRulesAndRecursion) {
  const std::string g = R"(root ::= value
value ::= "[" (
    value ("," value)*
  )? "]" | [0-9]
)";
  EXPECT_TRUE(Matches(g, "[[1,[]],2]"));
  EXPECT_FALSE(Matches(g, "[[1,]]"));
  EXPECT_FALSE(Matches(g, "[[1]"));
}

TEST(GbnfParser, ErrorsSayWhere) {
  EXPECT_EQ(ErrorOf("root ::= foo\n"), "line 1, column 10: undefined rule 'foo'");
  EXPECT_EQ(ErrorOf("root ::= \"a\"\nroot ::= \"b\"\n"), "line 2, column 1: rule 'root' is defined twice");
  EXPECT_EQ(ErrorOf("root = \"a\"\n"), "line 1, column 6: expected '::='");
  EXPECT_EQ(ErrorOf("root ::= \"abc\n"), "line 1, column 14: unterminated string literal");
  EXPECT_EQ(ErrorOf("root ::= [a-\n"), "line 1, column 13: unterminated character class");
  EXPECT_EQ(ErrorOf("root ::= ( \"a\" \n"), "line 2, column 1: expected ')'");
  EXPECT_EQ(ErrorOf("root ::= \"a\" )\n"), "line 1, column 14: unexpected ')'");
  EXPECT_EQ(ErrorOf("root ::= \"a\"{3,2}\n"), "line 1, column 18: repetition {3,2}: the maximum is below the minimum");
  EXPECT_EQ(ErrorOf("root ::= \"\\q\"\n"), "line 1, column 12: unknown escape '\\q'");
  EXPECT_EQ(ErrorOf("root ::= * \"a\"\n"), "line 1, column 10: '*' has nothing to repeat");
  EXPECT_EQ(ErrorOf("a ::= \"x\"\n"), "the grammar has no 'root' rule");
  EXPECT_EQ(ErrorOf("root ::= root \"a\" | \"b\"\n"),
            "rule 'root' is left-recursive (it can reach itself without consuming input)");
  EXPECT_EQ(ErrorOf("root ::= x \"b\" | \"c\"\nx ::= root?\n"),
            "rule 'root' is left-recursive (it can reach itself without consuming input)");
  EXPECT_NE(ErrorOf("root ::= \"a\"{100000}\n"), "");
  // A tail-position cycle revisits the same frame: allowed, but a root that matches no string
  // at all is refused (constrained decoding would have no token to allow).
  const std::string kNoString =
      "rule 'root' matches no string (every alternative needs a rule that never ends or an empty character class)";
  EXPECT_EQ(ErrorOf("root ::= x root\nx ::= \"a\"?\n"), kNoString);
  EXPECT_EQ(ErrorOf("root ::= root\n"), kNoString);
  EXPECT_EQ(ErrorOf("root ::= [^\\x00-\\U0010FFFF]\n"), kNoString);
  EXPECT_EQ(ErrorOf("root ::= x root | \"b\"\nx ::= \"a\"?\n"), "");
  EXPECT_TRUE(Matches("root ::= x root | \"b\"\nx ::= \"a\"?\n", "aab"));
  EXPECT_TRUE(Matches("root ::= (\"c\"{0,2}){2,} \"d\"\n", "cccd"));
}

// `s ::= "a" s "x" | "a" s "y" | ""` has 2^n parse stacks after n "a"s: the automaton must stop
// at a limit and say why (the fuzzer found such a grammar hanging the recogniser), while the
// same grammar still works for inputs inside the limits.
TEST(Recognizer, ExponentialAmbiguityStopsAtALimitWithAReason) {
  const std::string kDoubling = "root ::= s\ns ::= \"a\" s \"x\" | \"a\" s \"y\" | \"\"\n";
  {
    auto g = ParseGbnf(kDoubling);
    ASSERT_TRUE(g.ok());
    auto automaton = std::make_shared<Automaton>(std::move(g).value());
    Recognizer r(automaton);
    EXPECT_TRUE(r.AcceptAll("aayx"));
    EXPECT_TRUE(r.IsComplete());
    Recognizer deep(automaton);
    size_t accepted = 0;
    while (accepted < 64 && deep.Accept('a')) ++accepted;
    EXPECT_GE(accepted, 8u);   // 2^8 stacks are well inside the default limits
    EXPECT_LT(accepted, 40u);  // 2^40 are not: it stopped
    ASSERT_TRUE(automaton->exhausted());
    EXPECT_NE(automaton->exhausted_reason().find("the grammar is too ambiguous or too wide to follow"), std::string::npos)
        << automaton->exhausted_reason();
    // Transitions computed before the limit still hold; new ones are dead.
    Recognizer again(automaton);
    EXPECT_TRUE(again.AcceptAll("aayx"));
    EXPECT_FALSE(again.Accept('a'));
  }
  // Each limit on its own, on grammars it alone stops.
  struct Case {
    std::string gbnf;
    AutomatonLimits limits;
    std::string what;
  };
  AutomatonLimits frames, nodes, states, stacks, total;
  frames.max_step_frames = 100;
  total.max_total_frames = 150;
  nodes.max_nodes = 50;
  states.max_states = 10;
  stacks.max_state_frames = 200;
  for (const Case& c : {Case{kDoubling, frames, "over 100 stack frames in one step"},
                        Case{kDoubling, nodes, "over 50 parse stack frames"},
                        Case{"root ::= [a-z]{0,100}\n", states, "over 10 parse states"},
                        Case{kDoubling, stacks, "over 200 parse stacks in all states"},
                        Case{"root ::= [a-z]{0,100}\n", total, "over 150 stack frames visited in all"}}) {
    auto g = ParseGbnf(c.gbnf);
    ASSERT_TRUE(g.ok());
    auto automaton = std::make_shared<Automaton>(std::move(g).value(), c.limits);
    Recognizer r(automaton);
    size_t accepted = 0;
    while (accepted < 100 && r.Accept('a')) ++accepted;
    EXPECT_LT(accepted, 100u) << c.what;
    EXPECT_NE(automaton->exhausted_reason().find(c.what), std::string::npos) << automaton->exhausted_reason();
  }
}

TEST(Recognizer, PrefixesCopyAndUndo) {
  auto g = ParseGbnf("root ::= \"ab\" \"c\"*\n");
  ASSERT_TRUE(g.ok());
  Recognizer r(std::make_shared<Automaton>(std::move(g).value()));
  EXPECT_FALSE(r.IsComplete());
  EXPECT_TRUE(r.Accept('a'));
  EXPECT_FALSE(r.Accept('c'));  // rejected: the state is unchanged
  EXPECT_TRUE(r.Accept('b'));
  EXPECT_TRUE(r.IsComplete());
  EXPECT_FALSE(r.IsFinished());  // more c's may follow
  Recognizer copy = r;
  EXPECT_TRUE(copy.AcceptAll("ccc"));
  EXPECT_TRUE(r.IsComplete());
  copy.Undo(3);
  EXPECT_EQ(copy.state(), r.state());
  r.Undo(1);
  EXPECT_FALSE(r.IsComplete());
  auto fixed = ParseGbnf("root ::= \"ok\"\n");
  Recognizer f(std::make_shared<Automaton>(std::move(fixed).value()));
  EXPECT_TRUE(f.AcceptAll("ok"));
  EXPECT_TRUE(f.IsFinished());
}

// --- Random regular grammars against std::regex ---------------------------------------------

struct Gen {
  std::mt19937 rng;
  int rules = 0;
  std::vector<std::string> rule_regex;  // regex of each defined rule (for references)
  std::vector<std::string> gbnf_rules;

  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }
  char Letter() { return "abcxyz-."[Pick(8)]; }

  // An expression as (gbnf, regex).
  std::pair<std::string, std::string> Expr(int depth) {
    const int kind = depth <= 0 ? Pick(3) : Pick(7);
    if (kind == 0) {  // literal
      std::string lit, re;
      for (int i = 0, n = 1 + Pick(3); i < n; ++i) {
        const char c = Letter();
        lit += c;
        re += c == '.' || c == '-' ? std::string("\\") + c : std::string(1, c);
      }
      return {"\"" + lit + "\"", "(?:" + re + ")"};
    }
    if (kind == 1) {  // class
      const bool neg = Pick(4) == 0;
      std::string body = Pick(2) ? "a-c" : "xz";
      if (Pick(2)) body += "y";
      return {"[" + std::string(neg ? "^" : "") + body + "]",
              "[" + std::string(neg ? "^" : "") + body + "]"};
    }
    if (kind == 2 && !rule_regex.empty()) {
      const int r = Pick(static_cast<int>(rule_regex.size()));
      return {"r" + std::to_string(r), "(?:" + rule_regex[r] + ")"};
    }
    if (kind <= 3) {  // sequence
      auto a = Expr(depth - 1), b = Expr(depth - 1);
      return {a.first + " " + b.first, a.second + b.second};
    }
    if (kind == 4) {  // alternation
      auto a = Expr(depth - 1), b = Expr(depth - 1);
      return {"(" + a.first + " | " + b.first + ")", "(?:" + a.second + "|" + b.second + ")"};
    }
    auto a = Expr(depth - 1);
    static const char* kOps[] = {"*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}"};
    const std::string op = kOps[Pick(7)];
    return {"(" + a.first + ")" + op, "(?:" + a.second + ")" + op};
  }
};

TEST(GbnfParser, RandomRegularGrammarsMatchStdRegex) {
  Gen gen{std::mt19937(1234)};
  int checked = 0, positives = 0;
  for (int trial = 0; trial < 150; ++trial) {
    gen.rule_regex.clear();
    std::string gbnf;
    for (int r = 0; r < 2; ++r) {
      auto [g, re] = gen.Expr(2);
      gbnf += "r" + std::to_string(r) + " ::= " + g + "\n";
      gen.rule_regex.push_back(re);
    }
    auto [g, re] = gen.Expr(3);
    gbnf += "root ::= " + g + "\n";
    auto parsed = ParseGbnf(gbnf);
    ASSERT_TRUE(parsed.ok()) << gbnf << parsed.status().message();
    auto automaton = std::make_shared<Automaton>(std::move(parsed).value());
    const std::regex regex(re, std::regex::ECMAScript);
    // Candidates: random walks that the recogniser allows (likely positives) and random strings.
    for (int s = 0; s < 40; ++s) {
      std::string input;
      Recognizer r(automaton);
      const int len = gen.Pick(10);
      for (int i = 0; i < len; ++i) {
        const char c = "abcxyz-.q"[gen.Pick(9)];
        if (s % 2 == 0) {
          if (!r.Accept(c)) continue;  // follow the grammar
        }
        input += c;
      }
      Recognizer check(automaton);
      const bool ours = check.AcceptAll(input) && check.IsComplete();
      const bool theirs = std::regex_match(input, regex);
      ASSERT_EQ(ours, theirs) << "grammar:\n" << gbnf << "regex: " << re << "\ninput: '" << input << "'";
      ++checked;
      positives += theirs;
    }
  }
  EXPECT_GT(positives, checked / 10);
}

}  // namespace
}  // namespace g4::grammar
