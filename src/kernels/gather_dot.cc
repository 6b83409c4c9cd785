#include "kernels/gather_dot.h"

#include <cstdio>
#include <cstdlib>

#include "kernels/cpu_kernels.h"

namespace g4 {
namespace {

// Rows fetched ahead of the one being scored: ids scattered over the table are out of the
// hardware prefetchers' reach; 8 rows of 256 bytes keep ~32 cache lines in flight.
constexpr int kPrefetchRows = 8;

template <typename T, typename Dot>
void Gather(const T* table, int cols, const int32_t* ids, int n, const float* x, float* out,
            Dot dot) {
  const size_t row_bytes = sizeof(T) * static_cast<size_t>(cols);
  auto prefetch = [&](int j) {
    const char* row = reinterpret_cast<const char*>(table + static_cast<int64_t>(ids[j]) * cols);
    for (size_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(row + b, 0, 3);
  };
  for (int j = 0; j < kPrefetchRows && j < n; ++j) prefetch(j);
  for (int j = 0; j < n; ++j) {
    if (j + kPrefetchRows < n) prefetch(j + kPrefetchRows);
    out[j] = dot(table + static_cast<int64_t>(ids[j]) * cols, x, cols);
  }
}

}  // namespace

void GatherDot(const WeightMatrix& w, const int32_t* ids, int n, const float* x, float* out) {
  const CpuKernels& k = ActiveKernels();
  if (w.layout != WeightLayout::kRows ||
      (w.type != WeightType::kF32 && w.type != WeightType::kBF16)) {
    std::fprintf(stderr, "g4: internal error: GatherDot takes f32 or bf16 rows, not %s\n",
                 WeightTypeName(w.type));
    std::abort();
  }
  if (w.type == WeightType::kBF16)
    Gather(static_cast<const uint16_t*>(w.data), w.cols, ids, n, x, out, k.dot_bf16_f32);
  else
    Gather(static_cast<const float*>(w.data), w.cols, ids, n, x, out, k.dot_f32);
}

}  // namespace g4
