// GatherDot against a scalar double loop over the same rows: f32 and bf16 tables, widths around
// the vector lengths, repeated ids, the first and last rows, and counts shorter than the prefetch
// distance.
#include "kernels/gather_dot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/half.h"

namespace g4 {
namespace {

TEST(GatherDot, MatchesAScalarDoubleLoopOverTheGatheredRows) {
  std::mt19937 rng(27);
  std::normal_distribution<float> nd;
  for (WeightType type : {WeightType::kF32, WeightType::kBF16}) {
    for (int cols : {1, 7, 16, 33, 128, 256}) {
      const int rows = 300;
      std::vector<float> f32(static_cast<size_t>(rows) * cols);
      std::vector<uint16_t> bf16(f32.size());
      for (size_t i = 0; i < f32.size(); ++i) {
        bf16[i] = F32ToBf16(nd(rng));
        f32[i] = type == WeightType::kBF16 ? Bf16ToF32(bf16[i]) : nd(rng);
      }
      const WeightMatrix w{type, rows, cols,
                           type == WeightType::kBF16 ? static_cast<const void*>(bf16.data())
                                                     : static_cast<const void*>(f32.data()),
                           f32.size() * (type == WeightType::kBF16 ? 2 : 4)};
      std::vector<float> x(cols);
      for (float& v : x) v = nd(rng);
      for (int n : {0, 1, 5, 8, 9, 200}) {
        std::vector<int32_t> ids(n);
        for (int j = 0; j < n; ++j) ids[j] = std::uniform_int_distribution<int>(0, rows - 1)(rng);
        if (n >= 3) ids[0] = 0, ids[1] = rows - 1, ids[2] = ids[n - 1];  // ends, and a repeat
        std::vector<float> out(n + 1, 12345.0f);
        GatherDot(w, ids.data(), n, x.data(), out.data());
        EXPECT_EQ(out[n], 12345.0f) << "wrote past n";
        for (int j = 0; j < n; ++j) {
          double want = 0, magnitude = 0;
          for (int c = 0; c < cols; ++c) {
            const double p =
                static_cast<double>(f32[static_cast<size_t>(ids[j]) * cols + c]) * x[c];
            want += p;
            magnitude += std::fabs(p);
          }
          // float accumulation's bound: cols rounding errors of at most 2^-23 of sum |products|.
          EXPECT_NEAR(out[j], want, 1.2e-7 * cols * magnitude)
              << WeightTypeName(type) << " cols " << cols << " n " << n << " j " << j;
        }
        if (n >= 3) {
          EXPECT_EQ(out[2], out[n - 1]) << "the same row scores the same";
        }
      }
    }
  }
}

}  // namespace
}  // namespace g4
