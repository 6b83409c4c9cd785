// A prompt of seeded random token ids, for benchmarks, checks and tests that need input but no
// text: <bos> (id 2), then ids drawn from [10, vocab), above the special ids.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace g4 {

inline std::vector<int> RandomPromptIds(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> ids{2};
  while (static_cast<int>(ids.size()) < n) ids.push_back(static_cast<int>(rng() % (vocab - 10)) + 10);
  return ids;
}

}  // namespace g4
