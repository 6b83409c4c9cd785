// A context-free grammar over bytes, as the recogniser runs it. Every rule is a list of
// alternatives; an alternative is a sequence of elements, each a byte set (one input byte out of a
// 256-bit set) or a reference to a rule, ended by an END element. Repetition, groups and
// code-point classes are already expanded into helper rules by whoever built the grammar (the
// GBNF parser, gbnf_parser.h), so the recogniser sees only bytes and rule references.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace g4::grammar {

struct ByteSet {
  std::array<uint64_t, 4> bits{};
  void Add(int b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(int lo, int hi) {
    for (int b = lo; b <= hi; ++b) Add(b);
  }
  bool Has(int b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  bool operator==(const ByteSet&) const = default;
};

struct Element {
  enum Kind : uint8_t { kEnd, kBytes, kRule };
  Kind kind = kEnd;
  int value = 0;  // kBytes: index into Grammar::sets; kRule: rule index
};

struct Grammar {
  std::vector<std::string> rule_names;            // helper rules get "name_N" names
  std::vector<std::vector<int>> rule_alternatives;  // rule -> start index of each alternative
  std::vector<Element> elements;                  // all alternatives, each ended by kEnd
  std::vector<ByteSet> sets;
  int root = -1;

  int rules() const { return static_cast<int>(rule_names.size()); }
};

// Building blocks for grammar producers. An alternative is given as its elements (no kEnd).
class GrammarBuilder {
 public:
  int AddRule(const std::string& name);  // a new, still empty rule; returns its index
  int FindRule(const std::string& name) const;  // -1 if absent
  void AddAlternative(int rule, const std::vector<Element>& elements);
  Element Bytes(const ByteSet& set);  // interned
  Element Ref(int rule) const { return {Element::kRule, rule}; }
  // Code-point ranges [lo, hi] (inclusive, any order, may overlap) as a rule of UTF-8 byte
  // sequences; surrogates (D800-DFFF) are never matched. Returns the element to use: a single
  // byte set when every range is ASCII, otherwise a reference to a new helper rule.
  Element CodePoints(const std::vector<std::pair<uint32_t, uint32_t>>& ranges, const std::string& hint);
  // The finished grammar: every rule has at least one alternative (else an error naming it),
  // no rule can reach itself without consuming a byte (left recursion would never end), and the
  // root matches at least one string.
  Result<Grammar> Finish(const std::string& root_name);

  Grammar& grammar() { return g_; }

 private:
  Grammar g_;
  std::vector<std::vector<std::vector<Element>>> alts_;
};

// The grammar back as GBNF text (byte sets as \xHH classes), for tests and messages.
std::string ToGbnf(const Grammar& g);

}  // namespace g4::grammar
