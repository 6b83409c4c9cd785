// A byte-level recogniser for a Grammar (grammar.h), run as a lazily built automaton.
//
// A parse position is a stack of "where to continue" frames; as in a pushdown recogniser, the
// top frame always points at a byte set (rule references are expanded into every alternative
// when a frame is pushed, and a finished alternative pops to its caller; a reference in tail
// position pushes nothing, so right recursion like `star ::= x star | ` runs in constant depth).
// Frames are hash-consed (one node per (position, parent)), so a stack is one node id and a set
// of stacks is a sorted list of ids. Each distinct set is interned as a *state*, and transitions
// state x byte -> state are memoised in a table: after warm-up, accepting a byte is one array
// read, and copying or undoing a recogniser is copying an int.
//
// Some grammars multiply their parse stacks with every byte (`s ::= "a" s "x" | "a" s "y" | ""`
// has 2^n stacks after n "a"s), which no recogniser of this kind can follow in bounded time or
// memory. Limits bound the automaton's growth; past one, it stops growing, every transition it has
// not computed yet is dead, and exhausted() says why, so a request fails with that reason instead
// of hanging the server.
//
// Not thread-safe: one Automaton belongs to one request (or one thread) at a time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace g4::grammar {

struct AutomatonLimits {
  size_t max_step_frames = size_t{1} << 18;   // stack frames one transition may visit
  size_t max_nodes = size_t{1} << 21;         // distinct stack frames, all states together
  size_t max_states = size_t{1} << 16;        // distinct stack sets (1 KiB of transitions each)
  size_t max_state_frames = size_t{1} << 24;  // the stack sets' sizes added up
  size_t max_total_frames = size_t{1} << 30;  // frames visited by all transitions (time: seconds)
};

class Automaton {
 public:
  static constexpr int kDead = -1;

  explicit Automaton(Grammar grammar, AutomatonLimits limits = {});

  int start() const { return start_; }
  // The state after `byte`, or kDead if the grammar does not allow it.
  int Next(int state, uint8_t byte) {
    if (state < 0) return kDead;
    const int t = trans_[state][byte];
    return t != kUnknown ? t : Compute(state, byte);
  }
  // The state after all of `bytes`, or kDead.
  int Walk(int state, std::string_view bytes);
  // The input so far is a complete sentence of the grammar.
  bool CanEnd(int state) const { return state >= 0 && can_end_[state]; }
  // Complete, and no further byte is possible.
  bool Finished(int state) const {
    return state >= 0 && can_end_[state] && state_tops_[state].empty();
  }

  // A limit was reached: the automaton no longer grows and what it has not computed is dead.
  bool exhausted() const { return !exhausted_.empty(); }
  // Why, for the user ("the grammar is too ambiguous or too wide ..."); empty while not exhausted.
  const std::string& exhausted_reason() const { return exhausted_; }

  const Grammar& grammar() const { return g_; }
  size_t states() const { return state_tops_.size(); }
  size_t nodes() const { return nodes_.size(); }
  size_t frames_visited() const { return total_frames_; }

 private:
  static constexpr int kUnknown = -2;
  struct Node {
    int pos;     // element index the frame continues at (a byte set or a rule reference)
    int parent;  // node to continue with after this frame's alternative ends; -1: the root
  };

  int Compute(int state, uint8_t byte);
  int InternNode(int pos, int parent);
  void Expand(int pos, int parent);  // adds the tops reachable from (pos, parent) to scratch_
  int InternState();                 // the state for scratch_ (sorted, deduplicated)

  void Exhaust(const char* what, size_t limit);

  Grammar g_;
  AutomatonLimits limits_;
  std::string exhausted_;
  size_t step_frames_ = 0;   // frames visited by the current expansion step
  size_t state_frames_ = 0;  // sum of state_tops_ sizes
  size_t total_frames_ = 0;  // frames visited by every expansion so far
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int> node_ids_;
  std::vector<std::vector<int>> state_tops_;
  std::vector<char> can_end_;
  std::vector<std::array<int, 256>> trans_;
  std::unordered_map<uint64_t, std::vector<int>> state_ids_;  // hash of tops -> candidate states
  int start_ = kDead;
  // Expansion scratch.
  std::vector<int> scratch_;
  bool scratch_end_ = false;
  std::vector<Node> work_;         // Expand's work list
  std::vector<uint32_t> visited_;  // per node: stamp of the last expansion that saw it
  uint32_t stamp_ = 0;
};

// A cursor over an Automaton: accept bytes one by one, ask if complete, copy or roll back.
class Recognizer {
 public:
  explicit Recognizer(std::shared_ptr<Automaton> automaton)
      : automaton_(std::move(automaton)), state_(automaton_->start()) {}

  // False (and nothing changes) if the grammar does not allow `byte` here.
  bool Accept(uint8_t byte) {
    const int next = automaton_->Next(state_, byte);
    if (next == Automaton::kDead) return false;
    history_.push_back(state_);
    state_ = next;
    return true;
  }
  bool AcceptAll(std::string_view bytes) {
    for (char c : bytes)
      if (!Accept(static_cast<uint8_t>(c))) return false;
    return true;
  }
  bool IsComplete() const { return automaton_->CanEnd(state_); }
  bool IsFinished() const { return automaton_->Finished(state_); }
  // Undoes the last `n` accepted bytes.
  void Undo(size_t n) {
    for (; n > 0 && !history_.empty(); --n) {
      state_ = history_.back();
      history_.pop_back();
    }
  }
  size_t accepted() const { return history_.size(); }
  int state() const { return state_; }

 private:
  std::shared_ptr<Automaton> automaton_;
  int state_;
  std::vector<int> history_;
};

}  // namespace g4::grammar
