// Small helpers shared by the tests that compare two forward passes (engine, reference, TP).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace g4 {

// A deterministic prompt of n ids: BOS (2), then pseudo-random ids below `vocab` (an LCG, so the
// same seed gives the same prompt on every platform).
inline std::vector<int> LcgPrompt(int n, int vocab, uint32_t seed) {
  std::vector<int> ids = {2};
  uint32_t s = seed;
  while (static_cast<int>(ids.size()) < n) {
    s = s * 1664525u + 1013904223u;
    ids.push_back(static_cast<int>(s >> 8) % vocab);
  }
  return ids;
}

// Largest |a - b| over rows of logits (any element types); rows of different counts fail the test.
template <class A, class B>
double MaxAbsDiff(const std::vector<std::vector<A>>& a, const std::vector<std::vector<B>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t r = 0; r < std::min(a.size(), b.size()); ++r) {
    EXPECT_EQ(a[r].size(), b[r].size());
    for (size_t i = 0; i < std::min(a[r].size(), b[r].size()); ++i)
      m = std::max(m, std::fabs(static_cast<double>(a[r][i]) - static_cast<double>(b[r][i])));
  }
  return m;
}

}  // namespace g4
