#include "grammar/recognizer.h"

#include <algorithm>

#include "base/status.h"

namespace g4::grammar {

Automaton::Automaton(Grammar grammar, AutomatonLimits limits)
    : g_(std::move(grammar)), limits_(limits) {
  ++stamp_;
  step_frames_ = 0;
  scratch_.clear();
  scratch_end_ = false;
  for (int alt : g_.rule_alternatives[g_.root]) Expand(alt, -1);
  start_ = exhausted() ? kDead : InternState();
}

void Automaton::Exhaust(const char* what, size_t limit) {
  if (exhausted()) return;
  exhausted_ = Str("the grammar is too ambiguous or too wide to follow: over ", limit, " ", what,
                   " (rules that match the same text in many ways multiply the parse stacks)");
}

int Automaton::InternNode(int pos, int parent) {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  const auto [it, inserted] = node_ids_.try_emplace(key, static_cast<int>(nodes_.size()));
  if (inserted) {
    if (nodes_.size() >= limits_.max_nodes) Exhaust("parse stack frames", limits_.max_nodes);
    nodes_.push_back({pos, parent});
    visited_.push_back(0);
  }
  return it->second;
}

void Automaton::Expand(int pos, int parent) {
  // An explicit work list, not recursion: a long chain of rules must not exhaust the stack.
  work_.clear();
  work_.push_back({pos, parent});
  while (!work_.empty()) {
    if (++step_frames_ > limits_.max_step_frames)
      Exhaust("stack frames in one step", limits_.max_step_frames);
    if (++total_frames_ > limits_.max_total_frames)
      Exhaust("stack frames visited in all", limits_.max_total_frames);
    if (exhausted()) return;
    auto [p, par] = work_.back();
    work_.pop_back();
    const Element& e = g_.elements[p];
    if (e.kind == Element::kEnd) {
      if (par < 0) {
        scratch_end_ = true;
      } else {
        work_.push_back({nodes_[par].pos, nodes_[par].parent});  // the caller goes on
      }
      continue;
    }
    const int node = InternNode(p, par);
    if (visited_[node] == stamp_) continue;  // this frame was already expanded in this step
    visited_[node] = stamp_;
    if (e.kind == Element::kBytes) {
      scratch_.push_back(node);
      continue;
    }
    // A reference: continue after it (nothing to push in tail position), enter each alternative.
    const int cont = g_.elements[p + 1].kind == Element::kEnd ? par : InternNode(p + 1, par);
    for (int alt : g_.rule_alternatives[e.value]) work_.push_back({alt, cont});
  }
}

int Automaton::InternState() {
  std::sort(scratch_.begin(), scratch_.end());
  scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
  if (scratch_.empty() && !scratch_end_) return kDead;
  uint64_t h = scratch_end_ ? 0x9E3779B97F4A7C15ull : 0x12345;
  for (int t : scratch_) h = (h ^ static_cast<uint64_t>(t)) * 0x100000001B3ull;
  auto& bucket = state_ids_[h];
  for (int id : bucket)
    if (can_end_[id] == scratch_end_ && state_tops_[id] == scratch_) return id;
  if (state_tops_.size() >= limits_.max_states) Exhaust("parse states", limits_.max_states);
  if (state_frames_ + scratch_.size() > limits_.max_state_frames)
    Exhaust("parse stacks in all states", limits_.max_state_frames);
  if (exhausted()) return kDead;
  state_frames_ += scratch_.size();
  const int id = static_cast<int>(state_tops_.size());
  state_tops_.push_back(scratch_);
  can_end_.push_back(scratch_end_);
  std::array<int, 256> row;
  row.fill(kUnknown);
  trans_.push_back(row);
  bucket.push_back(id);
  return id;
}

int Automaton::Compute(int state, uint8_t byte) {
  if (state < 0 || exhausted()) return kDead;
  ++stamp_;
  step_frames_ = 0;
  scratch_.clear();
  scratch_end_ = false;
  const std::vector<int> tops = state_tops_[state];  // Expand may grow state_tops_'s owner
  for (int top : tops) {
    const Node n = nodes_[top];
    if (!g_.sets[g_.elements[n.pos].value].Has(byte)) continue;
    Expand(n.pos + 1, n.parent);
  }
  if (exhausted()) return kDead;  // not memoised: nothing past the limit is computed again
  const int next = InternState();
  trans_[state][byte] = next;
  return next;
}

int Automaton::Walk(int state, std::string_view bytes) {
  for (char c : bytes) {
    if (state < 0) return kDead;
    state = Next(state, static_cast<uint8_t>(c));
  }
  return state;
}

}  // namespace g4::grammar
