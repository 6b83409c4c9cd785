// q8/q4/bf16 matrix products: AVX2 vs generic (same integer math, so nearly bit-equal) vs a
// double-precision product of the dequantized weights (bounds the activation-quantization error).
#include "kernels/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "base/thread_pool.h"
#include "kernels/cpu_kernels.h"
#include "kernels/ops.h"

namespace g4 {
namespace {

struct Quantized {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

Quantized Make(const std::vector<float>& src, int rows, int cols, WeightType type) {
  Quantized q;
  q.bytes.resize(WeightBytes(type, rows, cols));
  QuantizeMatrix(src.data(), SourceType::kF32, rows, cols, type, q.bytes.data(), nullptr);
  q.w = WeightMatrix{type, rows, cols, q.bytes.data(), q.bytes.size()};
  return q;
}

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

TEST(Quantize, RoundTripWithinHalfAStep) {
  const int rows = 7, cols = 128;
  auto src = Random(rows * cols, 3, 0.05f);
  src[5] = 0.9f;  // an outlier sets its block's scale
  for (WeightType type : {WeightType::kQ8, WeightType::kQ4}) {
    Quantized q = Make(src, rows, cols, type);
    std::vector<float> row(cols);
    for (int r = 0; r < rows; ++r) {
      DequantizeRowTo(q.w, r, row.data());
      for (int b = 0; b < cols / 32; ++b) {
        // q8 rounds to the nearest step. q4 trades the block's extremes for a finer grid
        // (least-squares scale), so its extremes may be clamped by a few steps.
        const float d =
            std::fabs(F16ToF32(q.w.scales(r)[b])) * (type == WeightType::kQ4 ? 8.0f : 1.0f);
        for (int i = b * 32; i < b * 32 + 32; ++i)
          ASSERT_LE(std::fabs(row[i] - src[r * cols + i]), 0.5f * d * 1.001f + 1e-7f)
              << WeightTypeName(type) << " row " << r << " col " << i;
      }
    }
  }
  // The least-squares q4 grid beats plain absmax scaling (d = max/8) in squared error.
  Quantized q4 = Make(src, rows, cols, WeightType::kQ4);
  std::vector<float> row(cols);
  double err_lsq = 0, err_absmax = 0;
  for (int r = 0; r < rows; ++r) {
    DequantizeRowTo(q4.w, r, row.data());
    for (int b = 0; b < cols / 32; ++b) {
      float m = 0;
      for (int i = b * 32; i < b * 32 + 32; ++i) m = std::max(m, std::fabs(src[r * cols + i]));
      for (int i = b * 32; i < b * 32 + 32; ++i) {
        const float w = src[r * cols + i], d = m / 7.5f;
        const float absmax = d * std::clamp(std::nearbyint(w / d), -8.0f, 7.0f);
        err_lsq += (row[i] - w) * (row[i] - w);
        err_absmax += (absmax - w) * (absmax - w);
      }
    }
  }
  EXPECT_LT(err_lsq, 0.8 * err_absmax);
}

TEST(Quantize, FitsAndBytes) {
  EXPECT_TRUE(WeightTypeFits(WeightType::kQ8, 96));
  EXPECT_FALSE(WeightTypeFits(WeightType::kQ4, 96));
  EXPECT_FALSE(WeightTypeFits(WeightType::kQ8, 16));
  EXPECT_EQ(WeightBytes(WeightType::kQ8, 2, 64), 2u * 64 + 2 * 2 * 2);
  EXPECT_EQ(WeightBytes(WeightType::kQ4, 2, 64), 2u * 32 + 2 * 2 * 2);
  WeightType t;
  EXPECT_TRUE(ParseWeightType("q4", &t));
  EXPECT_EQ(t, WeightType::kQ4);
  EXPECT_FALSE(ParseWeightType("q5", &t));
}

// RMS of a - b relative to the typical size of a product of these random rows
// (|w| |x| / sqrt(cols)), so a single output that happens to be near zero is not an outlier.
double RelRms(const std::vector<float>& a, const std::vector<double>& b, double typical) {
  double num = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(num / a.size()) / typical;
}

// y[n, w.rows] from one call of table k over W rows [r0, w.rows), rows before r0 left NaN; x
// quantized per row as the threaded products do.
std::vector<float> KernelProduct(const CpuKernels& k, const WeightMatrix& w,
                                 const std::vector<float>& x, int n, int r0 = 0) {
  const int rows = w.rows, cols = w.cols;
  std::vector<float> y(static_cast<size_t>(n) * rows, NAN);
  if (w.type == WeightType::kBF16) {
    k.matmul_bf16(w, r0, rows, x.data(), n, y.data(), rows);
    return y;
  }
  const int nb = cols / 32;
  std::vector<int8_t> xq(static_cast<size_t>(n) * cols);
  std::vector<float> xs(n * nb), xc(n * nb);
  for (int i = 0; i < n; ++i)
    k.quantize_row_q8(x.data() + i * cols, cols, xq.data() + i * cols, xs.data() + i * nb,
                      xc.data() + i * nb);
  const QuantizedRows qr{n, cols, xq.data(), xs.data(), xc.data()};
  (w.type == WeightType::kQ8 ? k.matmul_q8 : k.matmul_q4)(w, r0, rows, qr, y.data(), rows);
  return y;
}

// For each listed x row: table k's product of that row alone equals, bit for bit, its rows of
// y_batch (k's product of the whole batch), so a verify pass or a batch picks the tokens decode
// picks.
void ExpectRowsAlone(const CpuKernels& k, const WeightMatrix& w, const std::vector<float>& x,
                     const std::vector<float>& y_batch, const std::vector<int>& x_rows,
                     const std::string& where) {
  const int rows = w.rows, cols = w.cols;
  for (int i : x_rows) {
    const std::vector<float> x_row(x.begin() + static_cast<size_t>(i) * cols,
                                   x.begin() + static_cast<size_t>(i + 1) * cols);
    const auto one = KernelProduct(k, w, x_row, 1);
    for (int r = 0; r < rows; ++r)
      if (one[r] != y_batch[static_cast<size_t>(i) * rows + r]) {
        // The first differing output is enough: one message, not one per row.
        ADD_FAILURE() << where << " isa " << k.name << " x row " << i << " row " << r << ": alone "
                      << one[r] << ", in the batch " << y_batch[static_cast<size_t>(i) * rows + r];
        return;
      }
  }
}

std::vector<int> AllRows(int n) {
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  return all;
}

class MatMulTest : public ::testing::TestWithParam<WeightType> {};

TEST_P(MatMulTest, SimdMatchesGenericAndDoubleReference) {
  const WeightType type = GetParam();
  const CpuKernels& gen = GenericKernels();
  // Every SIMD table this CPU runs (AVX2, and AVX-512 VNNI where present), each against generic.
  const std::vector<const CpuKernels*> simd_tables = UsableSimdKernels();
  ThreadPool pool(2);
  // Odd row counts (edge tiles), a partial 8-block scale group (cols 320), n = 1 (decode path)
  // and several x rows (tiled path, with a leftover row).
  // Column counts also hit the SIMD tails: q4 blocks left over after 4-block steps (320 = 10
  // blocks, 576 = 16 + 2), q8 an odd block at the end of a 16-block group (544 = 16 + 1, 96).
  // bf16 takes any width: 53 and 200 end in a partial 16-column (AVX-512) / 8-column step.
  const std::vector<int> col_counts = type == WeightType::kQ4
                                          ? std::vector<int>{64, 320, 576, 1536}
                                      : type == WeightType::kQ8
                                          ? std::vector<int>{64, 96, 320, 544, 1536}
                                          : std::vector<int>{53, 64, 200, 320, 1536};
  // bf16 x rows: 2-8 are one weight-stationary pass (a verify pass: R = 4 tiles up to 6 rows, 3
  // beyond), 9 and 70 passes of 8 and a rest. q8/q4 row groups: tiles of 4 rows, then 3, 2 or 1.
  const std::vector<int> x_counts = type == WeightType::kBF16
                                        ? std::vector<int>{1, 2, 3, 5, 6, 7, 8, 9, 70}
                                        : std::vector<int>{1, 2, 3, 5, 7, 70};
  for (int cols : col_counts) {
    // 16 and 48: whole 16-row groups, which tables asking for row groups also get reordered.
    for (int rows : {1, 5, 16, 48, 67}) {
      for (int n : x_counts) {
        auto wsrc = Random(static_cast<size_t>(rows) * cols, rows * 7 + cols, 0.05f);
        auto x = Random(static_cast<size_t>(n) * cols, n * 13 + cols);
        Quantized q;
        std::vector<uint16_t> bf;
        if (type == WeightType::kBF16) {
          for (float v : wsrc) bf.push_back(F32ToBf16(v));
          q.w = WeightMatrix{type, rows, cols, bf.data(), bf.size() * 2};
        } else {
          q = Make(wsrc, rows, cols, type);
        }
        // Double product of the weights as stored.
        std::vector<double> ref(static_cast<size_t>(n) * rows);
        std::vector<float> wrow(cols);
        for (int r = 0; r < rows; ++r) {
          DequantizeRowTo(q.w, r, wrow.data());
          for (int i = 0; i < n; ++i) {
            double s = 0;
            for (int c = 0; c < cols; ++c) s += static_cast<double>(wrow[c]) * x[i * cols + c];
            ref[i * rows + r] = s;
          }
        }
        // The same over the activations rounded to bf16, what a table with
        // bf16_rounds_activations multiplies (products exact in float: only the sums round).
        std::vector<double> ref_bx;
        if (type == WeightType::kBF16) {
          ref_bx.resize(ref.size());
          for (int r = 0; r < rows; ++r) {
            DequantizeRowTo(q.w, r, wrow.data());
            for (int i = 0; i < n; ++i) {
              double s = 0;
              for (int c = 0; c < cols; ++c)
                s += static_cast<double>(wrow[c]) * RoundToBf16(x[i * cols + c]);
              ref_bx[i * rows + r] = s;
            }
          }
        }
        double ww = 0, xx = 0;
        for (float v : wsrc) ww += v * v;
        for (float v : x) xx += v * v;
        const double typical = std::sqrt(ww / rows * xx / n / cols);
        auto run = [&](const CpuKernels& k, const WeightMatrix& wm, int r0 = 0) {
          return KernelProduct(k, wm, x, n, r0);
        };
        const std::string where = std::string(WeightTypeName(type)) + " rows " +
                                  std::to_string(rows) + " cols " + std::to_string(cols) + " n " +
                                  std::to_string(n);
        const auto y_gen = run(gen, q.w);
        // 8-bit activations: ~0.4% relative error per product, far less for bf16 (fp32 math).
        const double bound = type == WeightType::kBF16 ? 1e-5 : 1.5e-2;
        EXPECT_LT(RelRms(y_gen, ref, typical), bound) << where;
        // bf16 activations: rounding each x to 8 significant bits costs 5e-4 to 2.5e-3 relative
        // RMS over these shapes (measured); the sums over bf16(x) stay within 1.1e-7 of double.
        const double rounded_bound = 4e-3, rounded_sum_bound = 1e-6;
        const bool active_rounds =
            type == WeightType::kBF16 && ActiveKernels().bf16_rounds_activations;
        std::vector<float> y_ops(static_cast<size_t>(n) * rows);
        MatMul(q.w, x.data(), n, y_ops.data(), pool);
        EXPECT_LT(RelRms(y_ops, ref, typical), active_rounds ? rounded_bound : bound) << where;
        if (active_rounds) {
          EXPECT_LT(RelRms(y_ops, ref_bx, typical), rounded_sum_bound) << where;
        }
        std::vector<double> g(y_gen.begin(), y_gen.end());
        for (const CpuKernels* simd : simd_tables) {
          const auto y_simd = run(*simd, q.w);
          if (type == WeightType::kBF16 && simd->bf16_rounds_activations) {
            const double to_rounded = RelRms(y_simd, ref_bx, typical);
            const double to_exact = RelRms(y_simd, ref, typical);
            if (std::getenv("G4_PRINT_NOISE"))
              std::printf("%s isa %s: vs bf16(x) %.2e, vs x %.2e\n", where.c_str(), simd->name,
                          to_rounded, to_exact);
            EXPECT_LT(to_rounded, rounded_sum_bound) << where << " isa " << simd->name;
            EXPECT_LT(to_exact, rounded_bound) << where << " isa " << simd->name;
            // Each output is one row's product whatever the tile: x row i alone gives the same
            // bits as inside the batch (decode and batched decode agree exactly).
            ExpectRowsAlone(*simd, q.w, x, y_simd, {0, n - 1}, where);
            continue;
          }
          EXPECT_LT(RelRms(y_simd, g, typical), 1e-5) << where << " isa " << simd->name;
          // As above: a bf16 output is the same float alone and in any batch, so a speculative
          // verify pass picks exactly the tokens plain decoding does.
          if (type == WeightType::kBF16) ExpectRowsAlone(*simd, q.w, x, y_simd, AllRows(n), where);
          if (simd->LayoutFor(type) != WeightLayout::kRowGroups16 || !CanUseRowGroups(q.w))
            continue;
          std::vector<uint8_t> grouped_bytes(q.w.bytes);
          WeightMatrix grouped = q.w;
          ToRowGroups(&grouped, grouped_bytes.data(), nullptr);
          const auto y_grouped = run(*simd, grouped);
          EXPECT_LT(RelRms(y_grouped, g, typical), 1e-5) << where << " row groups " << simd->name;
          // Each x row alone gives the bits it gets in the batch, whichever tile (4, 3, 2 or 1
          // rows, one or two groups) took it: a verify pass picks the tokens decode picks.
          ExpectRowsAlone(*simd, grouped, x, y_grouped, AllRows(n), where + " row groups");
          if (rows > kRowGroup) {  // a task's range starting at a later group
            const auto y_tail = run(*simd, grouped, kRowGroup);
            for (int i = 0; i < n; ++i)
              for (int r = 0; r < rows; ++r) {
                const size_t at = static_cast<size_t>(i) * rows + r;
                if (r < kRowGroup) {
                  EXPECT_TRUE(std::isnan(y_tail[at])) << where << " row " << r << " written";
                } else {
                  EXPECT_EQ(y_tail[at], y_grouped[at]) << where << " row " << r;
                }
              }
          }
          if (&ActiveKernels() == simd) {  // the threaded path the model takes
            std::vector<float> y_pool(static_cast<size_t>(n) * rows);
            MatMul(grouped, x.data(), n, y_pool.data(), pool);
            EXPECT_LT(RelRms(y_pool, ref, typical), bound) << where << " row groups, pool";
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatMulTest,
                         ::testing::Values(WeightType::kBF16, WeightType::kQ8, WeightType::kQ4),
                         [](const auto& info) { return std::string(WeightTypeName(info.param)); });

// The threaded products cut each call into tasks (decode: blocks sized by the whole call, gate
// and up at the same rows; row groups stay whole). Whatever the cut, each
// output row is the active kernel's product over that row alone, so the pooled result must equal
// one kernel call over all rows bit for bit, for every matrix of a shared call and for gelu(gate)
// * up. Sizes: 16-row groups with a partial task at the end of each matrix.
TEST(Quantize, PooledProductsEqualOneKernelCallOverAllRows) {
  const CpuKernels& k = ActiveKernels();
  for (WeightType type : {WeightType::kBF16, WeightType::kQ8, WeightType::kQ4}) {
    for (int threads : {2, 3}) {
      ThreadPool pool(threads);
      const int cols = 256;
      for (int n : {1, 3}) {
        const int row_counts[3] = {4096 + 48, 1040, 7008};
        Quantized q[3];
        std::vector<uint16_t> bf[3];
        std::vector<uint8_t> grouped[3];
        WeightMatrix w[3];
        for (int m = 0; m < 3; ++m) {
          const int rows = row_counts[m];
          auto src = Random(static_cast<size_t>(rows) * cols, 31 * m + rows, 0.05f);
          if (type == WeightType::kBF16) {
            for (float v : src) bf[m].push_back(F32ToBf16(v));
            w[m] = WeightMatrix{type, rows, cols, bf[m].data(), bf[m].size() * 2};
          } else {
            q[m] = Make(src, rows, cols, type);
            w[m] = q[m].w;
            if (k.LayoutFor(type) == WeightLayout::kRowGroups16) {
              grouped[m].resize(w[m].bytes);
              ToRowGroups(&w[m], grouped[m].data(), nullptr);
            }
          }
        }
        const auto x = Random(static_cast<size_t>(n) * cols, 5 + n);
        auto one_call = [&](const WeightMatrix& wm) { return KernelProduct(k, wm, x, n); };
        const std::string where = std::string(WeightTypeName(type)) + " threads " +
                                  std::to_string(threads) + " n " + std::to_string(n);
        std::vector<float> y[3];
        MatMulOutput outs[3];
        for (int m = 0; m < 3; ++m) {
          y[m].assign(static_cast<size_t>(n) * row_counts[m], NAN);
          outs[m] = {&w[m], y[m].data()};
        }
        MatMulShared(outs, 3, x.data(), n, pool);
        for (int m = 0; m < 3; ++m) EXPECT_EQ(y[m], one_call(w[m])) << where << " matrix " << m;
        // Gate and up: matrices 0 and a second one of the same shape (rows 0 re-used as up).
        std::vector<float> gate(static_cast<size_t>(n) * row_counts[0], NAN), up(gate.size(), NAN);
        MatMulGeluMul({&w[0], gate.data()}, {&w[0], up.data()}, x.data(), n, pool);
        std::vector<float> want_gate = one_call(w[0]);
        const std::vector<float> want_up = want_gate;
        k.gelu_tanh_mul(want_gate.data(), want_up.data(), static_cast<int64_t>(want_gate.size()));
        EXPECT_EQ(up, want_up) << where << " up";
        EXPECT_EQ(gate, want_gate) << where << " gelu(gate) * up";
      }
    }
  }
}

// The row-group layout (weight_matrix.h) holds exactly the row-major values, in place or copied;
// only q8/q4 matrices of whole 16-row groups qualify. (The SIMD products on it are checked
// against the row-major double product in MatMulTest.)
TEST(Quantize, RowGroupsHoldTheSameValues) {
  const int rows = 48, cols = 320 + 64;
  for (WeightType type : {WeightType::kQ8, WeightType::kQ4}) {
    Quantized q = Make(Random(static_cast<size_t>(rows) * cols, 17, 0.05f), rows, cols, type);
    ASSERT_TRUE(CanUseRowGroups(q.w));
    std::vector<uint8_t> copy(q.w.bytes), in_place(q.bytes);
    WeightMatrix a = q.w, b = q.w;
    ToRowGroups(&a, copy.data(), nullptr);
    ToRowGroups(&b, in_place.data(), nullptr);
    EXPECT_EQ(a.layout, WeightLayout::kRowGroups16);
    EXPECT_EQ(copy, in_place);
    EXPECT_NE(copy, q.bytes) << "the layout did not change";
    EXPECT_FALSE(CanUseRowGroups(a)) << "already grouped";
    std::vector<float> want(cols), got(cols);
    for (int r = 0; r < rows; ++r) {
      DequantizeRowTo(q.w, r, want.data());
      DequantizeRowTo(a, r, got.data());
      ASSERT_EQ(want, got) << WeightTypeName(type) << " row " << r;
    }
    Quantized odd = Make(Random(static_cast<size_t>(40) * cols, 5, 0.05f), 40, cols, type);
    EXPECT_FALSE(CanUseRowGroups(odd.w)) << "40 rows is not whole groups";
  }
}

TEST(Quantize, ActivationQuantizationSameOnEveryIsa) {
  if (UsableSimdKernels().empty()) GTEST_SKIP() << "no AVX2";
  const CpuKernels* simd = UsableSimdKernels().front();
  auto x = Random(512, 9);
  x[3] = 0;
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // an all-zero block
  std::vector<int8_t> q1(512), q2(512);
  std::vector<float> s1(16), s2(16), c1(16), c2(16);
  GenericKernels().quantize_row_q8(x.data(), 512, q1.data(), s1.data(), c1.data());
  simd->quantize_row_q8(x.data(), 512, q2.data(), s2.data(), c2.data());
  EXPECT_EQ(q1, q2);
  EXPECT_EQ(s1, s2);
  EXPECT_EQ(c1, c2);
}

TEST(Quantize, WeightQuantizationAgreesAcrossIsas) {
  if (UsableSimdKernels().empty()) GTEST_SKIP() << "no AVX2";
  const CpuKernels* simd = UsableSimdKernels().front();
  const int cols = 4096;
  auto x = Random(cols, 21, 0.03f);
  std::fill(x.begin() + 64, x.begin() + 128, 0.0f);  // all-zero blocks
  std::vector<int8_t> q8a(cols), q8b(cols);
  std::vector<uint16_t> sa(cols / 32), sb(cols / 32);
  GenericKernels().quantize_row_q8w(x.data(), cols, q8a.data(), sa.data());
  simd->quantize_row_q8w(x.data(), cols, q8b.data(), sb.data());
  EXPECT_EQ(q8a, q8b);
  EXPECT_EQ(sa, sb);
  std::vector<uint8_t> q4a(cols / 2), q4b(cols / 2);
  GenericKernels().quantize_row_q4w(x.data(), cols, q4a.data(), sa.data());
  simd->quantize_row_q4w(x.data(), cols, q4b.data(), sb.data());
  int same_blocks = 0;
  for (int b = 0; b < cols / 32; ++b) same_blocks += sa[b] == sb[b];
  EXPECT_GE(same_blocks, cols / 32 - 2);  // float vs double sums may break a rare tie differently
}

}  // namespace
}  // namespace g4
