#include "reference/row_products.h"

#include <cstring>
#include <vector>

#include "base/half.h"

namespace g4::reference {
namespace {

// Every f16 bit pattern as float: a table, because the scalar conversion is too slow to run on
// each weight of every product.
const float* F16Table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = F16ToF32(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

// The bodies are inlined into one function per instruction set below; -ffp-contract=off (set for
// this file in CMakeLists.txt) keeps the AVX2 build from fusing multiply and add, so both builds
// round every product and every sum the same way.
template <class T>
[[gnu::always_inline]] inline void WidenBody(const TensorView& t, int64_t first, int rows, int cols, T* out) {
  const size_t count = static_cast<size_t>(rows) * cols;
  const size_t start = static_cast<size_t>(first) * cols;
  switch (t.dtype) {
    case DType::kBF16: {
      const uint8_t* p = t.data + start * 2;
      for (size_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        const uint32_t bits = static_cast<uint32_t>(h) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        out[i] = static_cast<T>(f);
      }
      break;
    }
    case DType::kF16: {
      const float* table = F16Table();
      const uint8_t* p = t.data + start * 2;
      for (size_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = static_cast<T>(table[h]);
      }
      break;
    }
    default: {
      const uint8_t* p = t.data + start * 4;
      for (size_t i = 0; i < count; ++i) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        out[i] = static_cast<T>(f);
      }
    }
  }
}

// Four partial sums as the four lanes of one vector (GCC/Clang vector extensions: two SSE2
// registers in the baseline build, one AVX2 register in the other). Four rows at a time share each
// load of x.
template <class T>
struct LanesOf;
template <>
struct LanesOf<double> {
  typedef double type __attribute__((vector_size(32)));
};
template <>
struct LanesOf<float> {
  typedef float type __attribute__((vector_size(16)));
};
template <class T>
using Lanes = typename LanesOf<T>::type;

// Helpers take and fill vectors by reference: returning one by value would change the calling
// convention between the two builds.
template <class T>
[[gnu::always_inline]] inline void Load(const T* p, Lanes<T>& v) {
  std::memcpy(&v, p, sizeof v);
}

template <class T>
[[gnu::always_inline]] inline T Sum(const Lanes<T>& a) {
  return (a[0] + a[1]) + (a[2] + a[3]);
}

template <class T>
[[gnu::always_inline]] inline void DotBody(const T* w, int rows, int cols, const T* x, T* out) {
  const int body = cols & ~3;
  int r = 0;
  for (; r + 4 <= rows; r += 4) {
    const T* w0 = w + static_cast<size_t>(r) * cols;
    const T* w1 = w0 + cols;
    const T* w2 = w1 + cols;
    const T* w3 = w2 + cols;
    Lanes<T> a0 = {}, a1 = {}, a2 = {}, a3 = {}, xv, wv;
    for (int i = 0; i < body; i += 4) {
      Load(x + i, xv);
      Load(w0 + i, wv);
      a0 += wv * xv;
      Load(w1 + i, wv);
      a1 += wv * xv;
      Load(w2 + i, wv);
      a2 += wv * xv;
      Load(w3 + i, wv);
      a3 += wv * xv;
    }
    for (int i = body; i < cols; ++i) {
      a0[0] += w0[i] * x[i];
      a1[0] += w1[i] * x[i];
      a2[0] += w2[i] * x[i];
      a3[0] += w3[i] * x[i];
    }
    out[r] = Sum<T>(a0);
    out[r + 1] = Sum<T>(a1);
    out[r + 2] = Sum<T>(a2);
    out[r + 3] = Sum<T>(a3);
  }
  for (; r < rows; ++r) {
    const T* wr = w + static_cast<size_t>(r) * cols;
    Lanes<T> a = {}, xv, wv;
    for (int i = 0; i < body; i += 4) {
      Load(x + i, xv);
      Load(wr + i, wv);
      a += wv * xv;
    }
    for (int i = body; i < cols; ++i) a[0] += wr[i] * x[i];
    out[r] = Sum<T>(a);
  }
}

#if defined(__x86_64__)
#define G4_REF_AVX2 [[gnu::target("avx2")]]
#else
#define G4_REF_AVX2
#endif

template <class T>
void WidenBaseline(const TensorView& t, int64_t first, int rows, int cols, T* out) {
  WidenBody(t, first, rows, cols, out);
}
template <class T>
G4_REF_AVX2 void WidenAvx2(const TensorView& t, int64_t first, int rows, int cols, T* out) {
  WidenBody(t, first, rows, cols, out);
}
template <class T>
void DotBaseline(const T* w, int rows, int cols, const T* x, T* out) {
  DotBody(w, rows, cols, x, out);
}
template <class T>
G4_REF_AVX2 void DotAvx2(const T* w, int rows, int cols, const T* x, T* out) {
  DotBody(w, rows, cols, x, out);
}

bool HasAvx2() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

}  // namespace

template <class T>
void WidenRows(const TensorView& t, int64_t first, int rows, int cols, T* out) {
  if (HasAvx2())
    WidenAvx2(t, first, rows, cols, out);
  else
    WidenBaseline(t, first, rows, cols, out);
}

template <class T>
void DotRows(const T* w, int rows, int cols, const T* x, T* out) {
  if (HasAvx2())
    DotAvx2(w, rows, cols, x, out);
  else
    DotBaseline(w, rows, cols, x, out);
}

template void WidenRows<double>(const TensorView&, int64_t, int, int, double*);
template void WidenRows<float>(const TensorView&, int64_t, int, int, float*);
template void DotRows<double>(const double*, int, int, const double*, double*);
template void DotRows<float>(const float*, int, int, const float*, float*);

}  // namespace g4::reference
