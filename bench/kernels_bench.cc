// Kernel micro-benchmarks (never run by ctest). Decode: matrix-vector over a matrix larger than
// the last-level cache, reported as weight GB/s (compare with the machine's STREAM read, ~34-40
// GB/s on the 2-core dev VMs). Prefill: matrix-matrix over a cache-resident matrix, as GFLOP/s.
//   ./g4_microbench --benchmark_filter=Decode
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "base/half.h"
#include "base/thread_pool.h"
#include "kernels/cpu_kernels.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"

namespace g4 {
namespace {

struct Fixture {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

Fixture MakeMatrix(WeightType type, int rows, int cols) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> src(static_cast<size_t>(rows) * cols);
  for (auto& v : src) v = nd(rng);
  Fixture f;
  f.bytes.resize(WeightBytes(type, rows, cols));
  ThreadPool pool(0);
  QuantizeMatrix(src.data(), SourceType::kF32, rows, cols, type, f.bytes.data(), &pool);
  f.w = WeightMatrix{type, rows, cols, f.bytes.data(), f.bytes.size()};
  // The layout the model would hand these kernels (ToKernelLayout).
  if (ActiveKernels().LayoutFor(type) == WeightLayout::kRowGroups16 && CanUseRowGroups(f.w))
    ToRowGroups(&f.w, f.bytes.data(), &pool);
  return f;
}

// range(0): weight type, range(1): threads. ~600 MB of weights: well past any cache.
void BM_Decode(benchmark::State& state) {
  const WeightType type = static_cast<WeightType>(state.range(0));
  const int cols = 1536;
  const int rows = static_cast<int>(600e6 / WeightBytes(type, 1, cols)) / 64 * 64;
  Fixture f = MakeMatrix(type, rows, cols);
  ThreadPool pool(static_cast<int>(state.range(1)));
  std::vector<float> x(cols, 0.5f), y(rows);
  for (auto _ : state) {
    MatMul(f.w, x.data(), 1, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * f.w.bytes);
  state.SetLabel(WeightTypeName(type));
}

// range(0): weight type, range(1): x rows, range(2): threads, range(3): shape (0: E2B gate/up
// 6144 x 1536, 1: E2B down 1536 x 6144).
void BM_Prefill(benchmark::State& state) {
  const WeightType type = static_cast<WeightType>(state.range(0));
  const bool down = state.range(3) == 1;
  const int n = static_cast<int>(state.range(1)), rows = down ? 1536 : 6144, cols = down ? 6144 : 1536;
  Fixture f = MakeMatrix(type, rows, cols);
  ThreadPool pool(static_cast<int>(state.range(2)));
  std::vector<float> x(static_cast<size_t>(n) * cols, 0.25f), y(static_cast<size_t>(n) * rows);
  for (auto _ : state) {
    MatMul(f.w, x.data(), n, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * n * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
  state.SetLabel(WeightTypeName(type));
}

void BM_QuantizeActivations(benchmark::State& state) {
  const int cols = 6144;
  std::vector<float> x(cols, 0.3f);
  std::vector<int8_t> q(cols);
  std::vector<float> s(cols / 32), c(cols / 32);
  const CpuKernels& k = ActiveKernels();
  for (auto _ : state) {
    k.quantize_row_q8(x.data(), cols, q.data(), s.data(), c.data());
    benchmark::DoNotOptimize(q.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * cols * 4);
}

constexpr int kBf16 = static_cast<int>(WeightType::kBF16), kQ8 = static_cast<int>(WeightType::kQ8),
              kQ4 = static_cast<int>(WeightType::kQ4);

BENCHMARK(BM_Decode)->ArgsProduct({{kBf16, kQ8, kQ4}, {1, 2}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Prefill)->ArgsProduct({{kBf16, kQ8, kQ4}, {64, 256}, {1, 2}, {0, 1}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QuantizeActivations);

}  // namespace
}  // namespace g4
