// The reference's row products against the arithmetic their header promises, written out plainly
// here: whichever build runs (baseline or AVX2), the bits must equal these loops'.
#include "reference/row_products.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "base/half.h"

namespace g4::reference {
namespace {

template <class T>
T FourPartialSums(const T* w, const T* x, int n) {
  T s[4] = {0, 0, 0, 0};
  int i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) s[k] += w[i + k] * x[i + k];
  for (; i < n; ++i) s[0] += w[i] * x[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

template <class T>
void CheckDotRows() {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  // Row counts and widths that leave a remainder after the groups of four rows and four lanes.
  for (int rows : {1, 3, 4, 7, 16})
    for (int cols : {1, 3, 4, 5, 17, 64, 259}) {
      std::vector<T> w(static_cast<size_t>(rows) * cols), x(cols), out(rows);
      for (T& v : w) v = static_cast<T>(u(rng));
      for (T& v : x) v = static_cast<T>(u(rng));
      DotRows(w.data(), rows, cols, x.data(), out.data());
      for (int r = 0; r < rows; ++r) {
        const T want = FourPartialSums(w.data() + static_cast<size_t>(r) * cols, x.data(), cols);
        EXPECT_EQ(std::memcmp(&want, &out[r], sizeof(T)), 0)
            << "rows " << rows << " cols " << cols << " row " << r << ": " << out[r] << " != " << want;
      }
    }
}

TEST(RowProducts, DotRowsDoubleHasTheDocumentedSummationOrder) { CheckDotRows<double>(); }
TEST(RowProducts, DotRowsFloatHasTheDocumentedSummationOrder) { CheckDotRows<float>(); }

TEST(RowProducts, WidenRowsConvertsEachStoredTypeExactly) {
  constexpr int kRows = 5, kCols = 7;
  std::mt19937 rng(9);
  std::vector<uint16_t> halves(kRows * kCols);
  for (uint16_t& h : halves) {
    do h = static_cast<uint16_t>(rng());
    while (((h >> 10) & 0x1f) == 0x1f || ((h >> 7) & 0xff) == 0xff);  // no Inf/NaN in either reading
  }
  std::vector<float> floats(kRows * kCols);
  for (float& f : floats) f = std::uniform_real_distribution<float>(-3, 3)(rng);
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    TensorView t;
    t.dtype = dtype;
    t.shape = {kRows, kCols};
    t.data = dtype == DType::kF32 ? reinterpret_cast<const uint8_t*>(floats.data())
                                  : reinterpret_cast<const uint8_t*>(halves.data());
    // Rows 1..3: the offset of the first row counts.
    std::vector<double> out(3 * kCols);
    WidenRows(t, 1, 3, kCols, out.data());
    for (int i = 0; i < 3 * kCols; ++i) {
      const int k = kCols + i;
      const double want = dtype == DType::kBF16 ? Bf16ToF32(halves[k])
                          : dtype == DType::kF16 ? F16ToF32(halves[k])
                                                 : floats[k];
      EXPECT_EQ(out[i], want) << "dtype " << static_cast<int>(dtype) << " element " << k;
    }
  }
}

}  // namespace
}  // namespace g4::reference
