// Token masks for constrained decoding over a large vocabulary.
//
// TokenTrie holds the vocabulary's byte strings once per tokenizer as a trie in depth-first
// order (each node: its byte, its depth, where its subtree ends, the tokens ending there). A mask
// for a recogniser state walks the trie with the automaton's memoised transitions and skips the
// whole subtree of any prefix the grammar rejects, so only live prefixes are visited.
// TokenConstraint is one sequence's constraint: the automaton state after the tokens so far, a
// cache of masks per state (most steps revisit a state: inside a string, between digits), and the
// history to roll back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/recognizer.h"

namespace g4::grammar {

class TokenTrie {
 public:
  // `token_bytes[id]`: the bytes token `id` stands for. Tokens with `eligible[id] == 0` (special
  // tokens) and empty ones are never allowed by the grammar; `end_tokens` (eos, end of turn) are
  // allowed exactly when the output so far is complete.
  TokenTrie(const std::vector<std::string>& token_bytes, const std::vector<char>& eligible,
            std::vector<int> end_tokens);

  int vocab() const { return vocab_; }
  size_t nodes() const { return byte_.size(); }
  const std::string& bytes(int token) const { return bytes_[token]; }
  bool IsEnd(int token) const;
  bool Eligible(int token) const { return token >= 0 && token < vocab_ && eligible_[token]; }
  const std::vector<int>& end_tokens() const { return end_tokens_; }

  // Sets in `mask` (vocab bits, word i/64, cleared first) the tokens whose bytes the automaton
  // accepts from `state`, plus the end tokens if `state` is complete.
  void Fill(Automaton& automaton, int state, uint64_t* mask) const;

 private:
  int vocab_;
  std::vector<std::string> bytes_;
  std::vector<char> eligible_;  // in the trie (not special, not empty)
  std::vector<int> end_tokens_;
  // Nodes in depth-first order; node 0 is the root (empty prefix).
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<int32_t> subtree_end_;  // first node after this node's subtree
  std::vector<int32_t> token_begin_;  // tokens ending here: sorted_tokens_[begin, next node's begin)
  std::vector<int32_t> sorted_tokens_;
  int max_depth_ = 0;
};

class TokenConstraint {
 public:
  // `max_cached_masks` bounds the mask cache (each mask is vocab/8 bytes).
  TokenConstraint(std::shared_ptr<const TokenTrie> trie, std::shared_ptr<Automaton> automaton,
                  size_t max_cached_masks = 256);

  // The tokens allowed next: a bitmask over the vocabulary, valid until the next call.
  const uint64_t* Mask();
  // Advances by `token` (false, and nothing changes, if the grammar does not allow it). An end
  // token is accepted when the output is complete and finishes it.
  bool Accept(int token);
  // Undoes the last `n` accepted tokens.
  void Rollback(size_t n);

  bool IsComplete() const { return ended_ || automaton_->CanEnd(state_); }
  // Complete and nothing may follow (no byte is possible, or an end token was accepted).
  bool IsFinished() const { return ended_ || automaton_->Finished(state_); }
  // The grammar allows no token here (only possible when the vocabulary cannot spell what the
  // grammar wants next), or the automaton hit a limit (Automaton::exhausted): generation must
  // stop with StuckReason().
  bool IsStuck();
  std::string StuckReason() const;

  const TokenTrie& trie() const { return *trie_; }
  Automaton& automaton() { return *automaton_; }
  size_t masks_computed() const { return masks_computed_; }

 private:
  std::shared_ptr<const TokenTrie> trie_;
  std::shared_ptr<Automaton> automaton_;
  size_t max_cached_;
  int state_;
  bool ended_ = false;
  std::vector<int> history_;  // state before each accepted token (-3: before an end token)
  std::unordered_map<int, std::vector<uint64_t>> cache_;
  std::vector<uint64_t> end_only_;  // the mask after an end token: nothing
  size_t masks_computed_ = 0;
};

}  // namespace g4::grammar
