#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "kernels/cpu_kernels.h"
#include "kernels/kv_format.h"
#include "kernels/ops.h"

namespace g4 {
namespace {

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(RoundToBf16(std::sqrt(1536.0f)), 39.25f);  // spec §3.1: HF's embed scale
  EXPECT_EQ(RoundToBf16(std::sqrt(2560.0f)), 50.5f);
  EXPECT_EQ(RoundToBf16(std::sqrt(3840.0f)), 62.0f);
  EXPECT_EQ(F16ToF32(F32ToF16(1.0009765625f)), 1.0009765625f);
  EXPECT_EQ(F16ToF32(F32ToF16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(F16ToF32(F32ToF16(1e6f))));
}

TEST(Kernels, Avx2MatchesGeneric) {
  const std::vector<const CpuKernels*> simd = UsableSimdKernels();
  const CpuKernels& gen = GenericKernels();
  if (simd.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  const CpuKernels* avx2 = simd.front();
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (int n : {1, 7, 8, 15, 16, 17, 100, 256, 515}) {
    std::vector<float> a(n), b(n);
    std::vector<uint16_t> w(n);
    for (int i = 0; i < n; ++i) {
      a[i] = nd(rng);
      b[i] = nd(rng);
      w[i] = F32ToBf16(nd(rng));
    }
    EXPECT_NEAR(avx2->dot_f32(a.data(), b.data(), n), gen.dot_f32(a.data(), b.data(), n), 1e-4 * n);
    EXPECT_NEAR(avx2->dot_bf16_f32(w.data(), b.data(), n), gen.dot_bf16_f32(w.data(), b.data(), n),
                1e-4 * n);
    std::vector<float> x(n), y(n);
    avx2->bf16_to_f32(w.data(), x.data(), n);
    gen.bf16_to_f32(w.data(), y.data(), n);
    EXPECT_EQ(x, y);
  }
}

// Greedy sampling's argmax and RMSNorm's sum of squares, every table: the first of tied maxima
// wins (ties across vector lanes and between the vector part and the tail), NaN never wins,
// all -inf or all NaN gives 0; lengths around the vector widths and a vocabulary-sized one.
TEST(Kernels, ArgMaxAndSumSquaresMatchScalarDefinitions) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<const CpuKernels*> tables = UsableSimdKernels();
  tables.push_back(&GenericKernels());
  auto first_max = [](const std::vector<float>& v) {
    int64_t best = 0;
    bool found = false;
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isnan(v[i]) && v[i] != -INFINITY && (!found || v[i] > v[best])) {
        best = static_cast<int64_t>(i);
        found = true;
      }
    return best;
  };
  for (const CpuKernels* k : tables) {
    for (int n : {1, 2, 7, 15, 16, 17, 31, 32, 33, 100, 1000, 262144 + 5}) {
      std::vector<float> x(n);
      for (float& v : x) v = nd(rng);
      EXPECT_EQ(k->argmax(x.data(), n), first_max(x)) << k->name << " n=" << n;
      // A tie: the same maximum planted at two places (same lane, other lanes, the tail).
      for (int at : {0, 3, 8, 13, 16, 23, n - 1}) {
        if (at >= n) continue;
        for (int again : {at + 1, at + 8, at + 16, at + 17, n - 1}) {
          if (again <= at || again >= n) continue;
          std::vector<float> t = x;
          t[at] = t[again] = 100.0f;
          EXPECT_EQ(k->argmax(t.data(), n), at)
              << k->name << " n=" << n << " ties " << at << "," << again;
          t[at] = NAN;  // NaN is skipped: the later copy wins
          EXPECT_EQ(k->argmax(t.data(), n), again) << k->name << " n=" << n;
        }
      }
      std::vector<float> neg(n, -INFINITY);
      EXPECT_EQ(k->argmax(neg.data(), n), 0) << k->name;
      std::vector<float> nan(n, NAN);
      EXPECT_EQ(k->argmax(nan.data(), n), 0) << k->name;
      neg[n - 1] = -1e30f;
      EXPECT_EQ(k->argmax(neg.data(), n), n - 1) << k->name;

      long double want = 0;
      for (float v : x) want += static_cast<long double>(v) * v;
      // Rounding of n double additions: at most ~n * 1.1e-16 relative.
      EXPECT_NEAR(k->sum_squares(x.data(), n), static_cast<double>(want),
                  std::max(1e-14, 2e-16 * n) * static_cast<double>(want))
          << k->name << " n=" << n;
    }
  }
}

// The SIMD GELU uses its own exp-based tanh: compare with double-precision GELU over the range
// activations take (and past it: tanh saturates, exp underflows), including odd tails.
TEST(Kernels, SimdGeluMatchesDoubleGelu) {
  std::vector<float> x;
  for (float v = -30.0f; v <= 30.0f; v += 0.0137f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, 100.0f, -100.0f, 3e38f, -3e38f})
    x.push_back(v);
  std::vector<float> up(x.size());
  for (size_t i = 0; i < up.size(); ++i) up[i] = 1.0f + 0.001f * static_cast<float>(i % 7);
  std::vector<const CpuKernels*> tables = UsableSimdKernels();
  tables.push_back(&GenericKernels());
  for (const CpuKernels* k : tables) {
    for (size_t n : {x.size(), x.size() - 3}) {
      std::vector<float> g(x.begin(), x.begin() + n);
      k->gelu_tanh_mul(g.data(), up.data(), static_cast<int64_t>(n));
      for (size_t i = 0; i < n; ++i) {
        const double xd = x[i];
        const double want = 0.5 * xd *
                            (1.0 + std::tanh(0.7978845608028654 * (xd + 0.044715 * xd * xd * xd))) *
                            up[i];
        // ~1e-7 absolute in tanh, scaled by |x|; relative 1e-6 for the large outputs.
        EXPECT_NEAR(g[i], want, 1e-6 * std::max(1.0, std::fabs(want)) + 2e-7 * std::fabs(xd))
            << k->name << " x=" << x[i];
      }
    }
  }
}

// Softmax numerators: exp(x - max) and their sum, every table against double exp, including
// scores far below the max (underflow to 0) and lengths that leave a tail.
TEST(Kernels, ExpSumMatchesDoubleExp) {
  std::vector<float> x;
  for (float v = -120.0f; v <= 0.0f; v += 0.0731f) x.push_back(v + 3.5f);
  x.push_back(3.5f);  // the max itself: exp(0) = 1
  std::vector<const CpuKernels*> tables = UsableSimdKernels();
  tables.push_back(&GenericKernels());
  for (const CpuKernels* k : tables) {
    for (size_t n : {x.size(), x.size() - 5, size_t{3}, size_t{0}}) {
      std::vector<float> e(x.begin(), x.begin() + n);
      const double sum = k->exp_sum(e.data(), static_cast<int>(n), 3.5f);
      double want_sum = 0;
      for (size_t i = 0; i < n; ++i) {
        const double want = std::exp(static_cast<double>(x[i]) - 3.5);
        want_sum += want;
        EXPECT_NEAR(e[i], want, 3e-7 * want + 1e-37) << k->name << " x=" << x[i];
      }
      EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum + 1e-30) << k->name << " n=" << n;
    }
  }
}

// Grouped-query attention pieces against double sums, for every table: head counts that leave
// tile remainders, key counts that are not multiples of 4, head dims the tiles take (16, 256)
// and ones they hand to the plain loop (24), rows farther apart than hd (a KV head inside a
// wider cache row), and values accumulated onto what the output already holds.
TEST(Kernels, AttentionScoresAndValuesMatchDouble) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  std::vector<const CpuKernels*> tables = UsableSimdKernels();
  tables.push_back(&GenericKernels());
  for (int hd : {16, 24, 48, 256}) {
    for (int nq : {1, 3, 8, 13}) {  // 13: head groups of 8, 4 and 1 (AVX-512 tiles)
      for (int len : {1, 6, 33}) {
        const int64_t q_stride = hd + 8, row = 2 * hd + 16, s_stride = len + 3, o_stride = hd + 4;
        std::vector<float> q(nq * q_stride), kv(len * row), p(nq * s_stride), o0(nq * o_stride);
        for (std::vector<float>* v : {&q, &kv, &p, &o0})
          for (float& x : *v) x = nd(rng);
        const float* keys = kv.data() + hd / 2;  // an offset inside each row
        for (const CpuKernels* k : tables) {
          const std::string where = std::string(k->name) + " hd " + std::to_string(hd) + " nq " +
                                    std::to_string(nq) + " len " + std::to_string(len);
          std::vector<float> s(nq * s_stride, NAN), o(o0);
          k->attn_scores(q.data(), nq, q_stride, keys, row, len, hd, s.data(), s_stride);
          k->attn_values(p.data(), s_stride, nq, keys, row, len, hd, o.data(), o_stride);
          for (int c = 0; c < nq; ++c) {
            for (int j = 0; j < len; ++j) {
              double want = 0, mag = 0;
              for (int d = 0; d < hd; ++d) {
                want += static_cast<double>(q[c * q_stride + d]) * keys[j * row + d];
                mag += std::fabs(static_cast<double>(q[c * q_stride + d]) * keys[j * row + d]);
              }
              EXPECT_NEAR(s[c * s_stride + j], want, 1e-6 * mag)
                  << where << " c " << c << " j " << j;
            }
            EXPECT_TRUE(std::isnan(s[c * s_stride + len])) << where << ": wrote past len";
            for (int d = 0; d < hd; ++d) {
              double want = o0[c * o_stride + d], mag = std::fabs(want);
              for (int j = 0; j < len; ++j) {
                want += static_cast<double>(p[c * s_stride + j]) * keys[j * row + d];
                mag += std::fabs(static_cast<double>(p[c * s_stride + j]) * keys[j * row + d]);
              }
              EXPECT_NEAR(o[c * o_stride + d], want, 1e-6 * mag)
                  << where << " c " << c << " d " << d;
            }
            for (int d = hd; d < o_stride; ++d)
              EXPECT_EQ(o[c * o_stride + d], o0[c * o_stride + d]) << where << ": wrote past hd";
          }
        }
      }
    }
  }
}

// The bf16 / q8 cache versions of the same against double sums over the values the format
// stored (kernels/kv_format.h), for every table: q8 blocks of 16 (hd 16, 48), 8 (hd 24, the
// tiles' plain-loop fallback) and 32 (hd 256); a KV head one head into a three-head row.
TEST(Kernels, CompactCacheAttentionMatchesDoubleOverStoredValues) {
  std::mt19937 rng(12);
  std::normal_distribution<float> nd;
  std::vector<const CpuKernels*> tables = UsableSimdKernels();
  tables.push_back(&GenericKernels());
  for (KvType type : {KvType::kBF16, KvType::kQ8})
    for (int hd : {16, 24, 48, 256})
      for (int nq : {1, 3, 8, 13})
        for (int len : {1, 6, 33}) {
          const int64_t q_stride = hd + 8, s_stride = len + 3, o_stride = hd + 4;
          const int64_t row = KvBytes(type, hd, 3 * hd), head = KvBytes(type, hd, hd);
          std::vector<float> q(nq * q_stride), p(nq * s_stride), o0(nq * o_stride);
          for (std::vector<float>* v : {&q, &p, &o0})
            for (float& x : *v) x = nd(rng);
          std::vector<uint8_t> kv(len * row);
          std::vector<float> values(3 * hd), stored(static_cast<size_t>(len) * hd);
          for (int j = 0; j < len; ++j) {
            for (float& x : values) x = nd(rng);
            StoreKv(type, values.data(), hd, 3 * hd, kv.data() + j * row);
            LoadKv(type, kv.data() + j * row + head, hd, hd, stored.data() + j * hd);
          }
          const uint8_t* keys = kv.data() + head;
          for (const CpuKernels* k : tables) {
            const std::string where = std::string(k->name) + " " + KvTypeName(type) + " hd " +
                                      std::to_string(hd) + " nq " + std::to_string(nq) + " len " +
                                      std::to_string(len);
            std::vector<float> s(nq * s_stride, NAN), o(o0);
            if (type == KvType::kBF16) {
              k->attn_scores_bf16(q.data(), nq, q_stride, keys, row, len, hd, s.data(), s_stride);
              k->attn_values_bf16(p.data(), s_stride, nq, keys, row, len, hd, o.data(), o_stride);
            } else {
              k->attn_scores_q8(q.data(), nq, q_stride, keys, row, len, hd, s.data(), s_stride);
              k->attn_values_q8(p.data(), s_stride, nq, keys, row, len, hd, o.data(), o_stride);
            }
            for (int c = 0; c < nq; ++c) {
              for (int j = 0; j < len; ++j) {
                double want = 0, mag = 0;
                for (int d = 0; d < hd; ++d) {
                  const double t = static_cast<double>(q[c * q_stride + d]) * stored[j * hd + d];
                  want += t;
                  mag += std::fabs(t);
                }
                EXPECT_NEAR(s[c * s_stride + j], want, 1e-6 * mag)
                    << where << " c " << c << " j " << j;
              }
              EXPECT_TRUE(std::isnan(s[c * s_stride + len])) << where << ": wrote past len";
              for (int d = 0; d < hd; ++d) {
                double want = o0[c * o_stride + d], mag = std::fabs(want);
                for (int j = 0; j < len; ++j) {
                  const double t = static_cast<double>(p[c * s_stride + j]) * stored[j * hd + d];
                  want += t;
                  mag += std::fabs(t);
                }
                EXPECT_NEAR(o[c * o_stride + d], want, 1e-6 * mag)
                    << where << " c " << c << " d " << d;
              }
              for (int d = hd; d < o_stride; ++d)
                EXPECT_EQ(o[c * o_stride + d], o0[c * o_stride + d]) << where << ": wrote past hd";
            }
          }
        }
}

TEST(Ops, MatMulMatchesNaiveForAllBatchSizes) {
  ThreadPool pool(2);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  const int rows = 37, cols = 53;
  std::vector<uint16_t> wb(rows * cols);
  std::vector<float> wf(rows * cols);
  for (int i = 0; i < rows * cols; ++i) {
    wb[i] = F32ToBf16(nd(rng));
    wf[i] = Bf16ToF32(wb[i]);
  }
  for (WeightType type : {WeightType::kBF16, WeightType::kF32}) {
    WeightMatrix w{type, rows, cols,
                   type == WeightType::kBF16 ? static_cast<const void*>(wb.data()) : wf.data(), 0};
    for (int n : {1, 2, 5}) {
      std::vector<float> x(n * cols), y(n * rows);
      for (auto& v : x) v = nd(rng);
      MatMul(w, x.data(), n, y.data(), pool);
      // A table whose bf16 product rounds the activations (AVX-512 BF16) multiplies bf16(x).
      const bool round_x = type == WeightType::kBF16 && ActiveKernels().bf16_rounds_activations;
      for (int i = 0; i < n; ++i)
        for (int r = 0; r < rows; ++r) {
          double s = 0;
          for (int c = 0; c < cols; ++c) {
            const float xv = x[i * cols + c];
            s += static_cast<double>(wf[r * cols + c]) * (round_x ? RoundToBf16(xv) : xv);
          }
          EXPECT_NEAR(y[i * rows + r], s, 1e-4) << "n=" << n << " r=" << r;
        }
    }
  }
}

TEST(Ops, RopeRotatesOnlyTheFirstPairs) {
  // 8-dim head with 2 of 4 pairs rotated: dims 0,1 pair with 4,5; dims 2,3,6,7 unchanged.
  float head[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const float c[2] = {0.0f, 0.5f}, s[2] = {1.0f, 0.8f};
  ApplyRope(head, 8, 2, c, s);
  EXPECT_FLOAT_EQ(head[0], 1 * 0.0f - 5 * 1.0f);
  EXPECT_FLOAT_EQ(head[4], 5 * 0.0f + 1 * 1.0f);
  EXPECT_FLOAT_EQ(head[1], 2 * 0.5f - 6 * 0.8f);
  EXPECT_FLOAT_EQ(head[5], 6 * 0.5f + 2 * 0.8f);
  EXPECT_EQ(head[2], 3);
  EXPECT_EQ(head[3], 4);
  EXPECT_EQ(head[6], 7);
  EXPECT_EQ(head[7], 8);
}

}  // namespace
}  // namespace g4
