#include "grammar/token_mask.h"

#include <algorithm>
#include <numeric>

namespace g4::grammar {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes, const std::vector<char>& eligible,
                     std::vector<int> end_tokens)
    : vocab_(static_cast<int>(token_bytes.size())), bytes_(token_bytes), end_tokens_(std::move(end_tokens)) {
  std::vector<int32_t> ids;
  eligible_.assign(vocab_, 0);
  for (int id = 0; id < vocab_; ++id)
    if (!token_bytes[id].empty() && (eligible.empty() || eligible[id])) {
      ids.push_back(id);
      eligible_[id] = 1;
    }
  std::sort(ids.begin(), ids.end(), [&](int a, int b) {
    return token_bytes[a] != token_bytes[b] ? token_bytes[a] < token_bytes[b] : a < b;
  });
  // Sorted strings give the trie in depth-first order: each token adds the nodes past its common
  // prefix with the previous one. Subtree ends are filled when a node's branch closes.
  byte_.push_back(0);
  depth_.push_back(0);
  subtree_end_.push_back(0);
  token_begin_.push_back(0);
  std::vector<int32_t> path = {0};  // node at each depth of the current branch
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& s = token_bytes[id];
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < s.size() && (*prev)[common] == s[common]) ++common;
    common = std::min(common, path.size() - 1);
    while (path.size() > common + 1) {
      subtree_end_[path.back()] = static_cast<int32_t>(byte_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      byte_.push_back(static_cast<uint8_t>(s[d]));
      depth_.push_back(static_cast<uint16_t>(std::min<size_t>(d + 1, 65535)));
      subtree_end_.push_back(0);
      token_begin_.push_back(static_cast<int32_t>(sorted_tokens_.size()));
      path.push_back(static_cast<int32_t>(byte_.size() - 1));
    }
    max_depth_ = std::max(max_depth_, static_cast<int>(s.size()));
    // A token ends at the current node: its tokens are [token_begin_[node], token_begin_[node+1]).
    sorted_tokens_.push_back(id);
    prev = &s;
  }
  while (!path.empty()) {
    subtree_end_[path.back()] = static_cast<int32_t>(byte_.size());
    path.pop_back();
  }
  token_begin_.push_back(static_cast<int32_t>(sorted_tokens_.size()));  // sentinel
}

bool TokenTrie::IsEnd(int token) const {
  return std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end();
}

void TokenTrie::Fill(Automaton& automaton, int state, uint64_t* mask) const {
  const size_t words = (static_cast<size_t>(vocab_) + 63) / 64;
  std::fill(mask, mask + words, 0);
  if (automaton.CanEnd(state))
    for (int t : end_tokens_)
      if (t >= 0 && t < vocab_) mask[t >> 6] |= uint64_t{1} << (t & 63);
  if (state < 0 || automaton.Finished(state)) return;
  thread_local std::vector<int> states;
  states.resize(max_depth_ + 1);
  states[0] = state;
  const int32_t n = static_cast<int32_t>(byte_.size());
  for (int32_t i = 1; i < n;) {
    const int next = automaton.Next(states[depth_[i] - 1], byte_[i]);
    if (next == Automaton::kDead) {
      i = subtree_end_[i];
      continue;
    }
    states[depth_[i]] = next;
    for (int32_t k = token_begin_[i]; k < token_begin_[i + 1]; ++k) {
      const int t = sorted_tokens_[k];
      mask[t >> 6] |= uint64_t{1} << (t & 63);
    }
    ++i;
  }
}

TokenConstraint::TokenConstraint(std::shared_ptr<const TokenTrie> trie, std::shared_ptr<Automaton> automaton,
                                 size_t max_cached_masks)
    : trie_(std::move(trie)), automaton_(std::move(automaton)), max_cached_(std::max<size_t>(max_cached_masks, 1)),
      state_(automaton_->start()) {}

const uint64_t* TokenConstraint::Mask() {
  const size_t words = (static_cast<size_t>(trie_->vocab()) + 63) / 64;
  if (ended_) {
    end_only_.assign(words, 0);
    return end_only_.data();
  }
  auto it = cache_.find(state_);
  if (it != cache_.end()) return it->second.data();
  if (cache_.size() >= max_cached_) cache_.clear();
  std::vector<uint64_t>& mask = cache_[state_];
  mask.resize(words);
  trie_->Fill(*automaton_, state_, mask.data());
  ++masks_computed_;
  return mask.data();
}

bool TokenConstraint::Accept(int token) {
  if (ended_ || token < 0 || token >= trie_->vocab()) return false;
  if (trie_->IsEnd(token)) {
    if (!automaton_->CanEnd(state_)) return false;
    history_.push_back(state_);
    ended_ = true;
    return true;
  }
  if (!trie_->Eligible(token)) return false;
  const int next = automaton_->Walk(state_, trie_->bytes(token));
  if (next == Automaton::kDead) return false;
  history_.push_back(state_);
  state_ = next;
  return true;
}

void TokenConstraint::Rollback(size_t n) {
  for (; n > 0 && !history_.empty(); --n) {
    if (ended_) ended_ = false;
    state_ = history_.back();
    history_.pop_back();
  }
}

bool TokenConstraint::IsStuck() {
  const uint64_t* mask = Mask();
  // An exhausted automaton may have left out of the mask tokens the grammar allows.
  if (automaton_->exhausted()) return true;
  const size_t words = (static_cast<size_t>(trie_->vocab()) + 63) / 64;
  return std::all_of(mask, mask + words, [](uint64_t w) { return w == 0; });
}

std::string TokenConstraint::StuckReason() const {
  if (automaton_->exhausted()) return automaton_->exhausted_reason();
  return "the grammar allows no token here (the vocabulary cannot spell what it expects)";
}

}  // namespace g4::grammar
