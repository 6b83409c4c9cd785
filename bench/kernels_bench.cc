// Kernel micro-benchmarks (never run by ctest). Decode: matrix-vector over a matrix larger than
// the last-level cache, reported as weight GB/s (compare with the machine's STREAM read, ~34-40
// GB/s on the 2-core dev VMs), and over one resident in it (the kernel's own ceiling). Prefill:
// matrix-matrix over a cache-resident matrix, as GFLOP/s.
//   ./g4_microbench --benchmark_filter=Decode
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "base/streamed_buffer.h"
#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/cpu_kernels.h"
#include "kernels/kv_format.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"

namespace g4 {
namespace {

// The matrix in a StreamedBuffer, on huge pages as the engine's weights are: on a std::vector's
// 4 KiB pages the default model's LM head (262,144 x 128 bf16) read one x row at 3.2-3.6 ms a
// pass on a Zen 4 VM, where decoding reads it in 2.65, and two rows cost the same as one.
struct Fixture {
  StreamedBuffer bytes;
  WeightMatrix w;
};

Fixture MakeMatrix(WeightType type, int rows, int cols) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> src(static_cast<size_t>(rows) * cols);
  for (auto& v : src) v = nd(rng);
  Fixture f;
  const size_t bytes = WeightBytes(type, rows, cols);
  f.bytes = AllocateStreamed(bytes);
  ThreadPool pool(0);
  QuantizeMatrix(src.data(), SourceType::kF32, rows, cols, type, f.bytes.get(), &pool);
  f.w = WeightMatrix{type, rows, cols, f.bytes.get(), bytes};
  // The layout the model would hand these kernels (ToKernelLayout).
  if (ActiveKernels().LayoutFor(type) == WeightLayout::kRowGroups16 && CanUseRowGroups(f.w))
    ToRowGroups(&f.w, f.bytes.get(), &pool);
  return f;
}

// range(0): weight type, range(1): threads, range(2): MB of weights (600: well past any cache,
// what decode streams; 8: resident in the last-level cache, so the figure is the kernel's own
// ceiling: decode can only reach the memory's bandwidth if this is well above it), range(3):
// activation rows (2 or 3: a speculative verify pass of one or two drafted tokens, which should
// cost little more than one row's pass over the same weights).
void BM_Decode(benchmark::State& state) {
  const WeightType type = static_cast<WeightType>(state.range(0));
  const int cols = 1536;
  const int rows = static_cast<int>(state.range(2) * 1e6 / WeightBytes(type, 1, cols)) / 64 * 64;
  Fixture f = MakeMatrix(type, rows, cols);
  ThreadPool pool(static_cast<int>(state.range(1)));
  const int n = static_cast<int>(state.range(3));
  std::vector<float> x(static_cast<size_t>(n) * cols, 0.5f), y(static_cast<size_t>(n) * rows);
  for (auto _ : state) {
    MatMul(f.w, x.data(), n, y.data(), pool);
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
  const int n = static_cast<int>(state.range(1)), rows = down ? 1536 : 6144,
            cols = down ? 6144 : 1536;
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

// A speculative verify pass's LM head: the default model's tied head (262,144 x 128 bf16, 67 MB,
// past the last-level cache) times range(0) x rows (1: decode), range(1) threads. Compare the
// time per call across x rows: extra rows should add only their arithmetic.
void BM_VerifyHead(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), rows = 262144, cols = 128;
  Fixture f = MakeMatrix(WeightType::kBF16, rows, cols);
  ThreadPool pool(static_cast<int>(state.range(1)));
  std::vector<float> x(static_cast<size_t>(n) * cols), y(static_cast<size_t>(n) * rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97) * 0.01f - 0.5f;
  for (auto _ : state) {
    MatMul(f.w, x.data(), n, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * f.w.bytes);
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

// Greedy sampling over the 262,144 logits of one row (1 MiB, cache-resident as after the LM head).
void BM_ArgMax(benchmark::State& state) {
  const int64_t n = 262144;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * 7919) % 100003) * 1e-3f;
  for (auto _ : state) benchmark::DoNotOptimize(ArgMax(x.data(), n));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * 4);
}

// One KV head's attention for 8 query heads at one decode position, one thread: the E2B shapes
// (head dim 256 over the 512-key sliding window, 512 over a long full-attention context).
// range(0): head dim, range(1): keys, range(2): 0 = scores (q . K), 1 = values (p V),
// range(3): distinct K/V buffers cycled through (1: cache-resident; 96: ~200-800 MB, as in decode,
// where the weights streamed between layers evict the cache), range(4): the cache format
// (KvType: 0 f32, 1 bf16, 2 q8). Reported as K or V bytes (in that format) per second and GFLOP/s.
void BM_Attention(benchmark::State& state) {
  const int hd = static_cast<int>(state.range(0)), len = static_cast<int>(state.range(1));
  const bool values = state.range(2) == 1;
  const int copies = static_cast<int>(state.range(3)), nq = 8;
  const KvType type = static_cast<KvType>(state.range(4));
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  const size_t kv_floats = static_cast<size_t>(len) * hd, row = KvBytes(type, hd, hd);
  const size_t kv_bytes = row * len;
  std::vector<float> floats(kv_floats), q(static_cast<size_t>(nq) * hd),
      s(static_cast<size_t>(nq) * len), o(static_cast<size_t>(nq) * hd);
  std::vector<uint8_t> kv(kv_bytes * copies);
  for (int c = 0; c < copies; ++c) {
    for (float& x : floats) x = nd(rng);
    StoreKv(type, floats.data(), hd, static_cast<int64_t>(kv_floats), kv.data() + kv_bytes * c);
  }
  for (float& x : q) x = nd(rng);
  for (float& x : s) x = std::abs(nd(rng)) / len;
  const CpuKernels& k = ActiveKernels();
  int copy = 0;
  for (auto _ : state) {
    const uint8_t* rows = kv.data() + kv_bytes * copy;
    const float* f = reinterpret_cast<const float*>(rows);
    if (values) {
      if (type == KvType::kF32) k.attn_values(s.data(), len, nq, f, hd, len, hd, o.data(), hd);
      if (type == KvType::kBF16) k.attn_values_bf16(s.data(), len, nq, rows, row, len, hd, o.data(), hd);
      if (type == KvType::kQ8) k.attn_values_q8(s.data(), len, nq, rows, row, len, hd, o.data(), hd);
    } else {
      if (type == KvType::kF32) k.attn_scores(q.data(), nq, hd, f, hd, len, hd, s.data(), len);
      if (type == KvType::kBF16) k.attn_scores_bf16(q.data(), nq, hd, rows, row, len, hd, s.data(), len);
      if (type == KvType::kQ8) k.attn_scores_q8(q.data(), nq, hd, rows, row, len, hd, s.data(), len);
    }
    benchmark::DoNotOptimize(values ? o.data() : s.data());
    copy = (copy + 1) % copies;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kv_bytes);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * nq * len * hd * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
  state.SetLabel(std::string(k.name) + " " + KvTypeName(type) + (values ? " values" : " scores"));
}

constexpr int kBf16 = static_cast<int>(WeightType::kBF16), kQ8 = static_cast<int>(WeightType::kQ8),
              kQ4 = static_cast<int>(WeightType::kQ4);

BENCHMARK(BM_Decode)
    ->ArgsProduct({{kBf16, kQ8, kQ4}, {1, 2}, {600, 8}, {1, 2, 3}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Prefill)
    ->ArgsProduct({{kBf16, kQ8, kQ4}, {64, 256}, {1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_VerifyHead)
    ->ArgsProduct({{1, 2, 3, 4, 5, 8}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QuantizeActivations);
BENCHMARK(BM_ArgMax);
// Attention of one prefill chunk of `rows` rows deep in a full-attention cache (E2B's global
// layers: head_dim 512, 8 query heads on 1 KV head), over the thread pool: the cost that grows
// with the prompt. Reports prompt rows per second for this one layer.
void BM_AttendPrefill(benchmark::State& state) {
  const int hd = 512, nq = 8, rows = static_cast<int>(state.range(0));
  const int64_t depth = state.range(1), ctx = depth + rows;
  const KvType type = static_cast<KvType>(state.range(2));
  const int threads = static_cast<int>(state.range(3));
  const int64_t stride = static_cast<int64_t>(KvBytes(type, hd, hd));
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<uint8_t> k(static_cast<size_t>(ctx) * stride), v(k.size());
  std::vector<float> row(hd);
  for (int64_t p = 0; p < ctx; ++p)
    for (std::vector<uint8_t>* kv : {&k, &v}) {
      for (float& x : row) x = nd(rng) / 8;
      StoreKv(type, row.data(), hd, hd, kv->data() + p * stride);
    }
  std::vector<float> q(static_cast<size_t>(rows) * nq * hd), out(q.size());
  for (float& x : q) x = nd(rng);
  std::vector<AttentionRow> chunk;
  for (int r = 0; r < rows; ++r)
    chunk.push_back(AttentionRow{q.data() + static_cast<size_t>(r) * nq * hd,
                                 out.data() + static_cast<size_t>(r) * nq * hd, depth + r, k.data(),
                                 v.data(), stride, ctx, type});
  ThreadPool pool(threads);
  AttentionScratch scratch;
  const AttentionShape shape{nq, hd, nq, 0, 0, 0};
  for (auto _ : state) {
    Attend(shape, chunk.data(), rows, scratch, pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["rows/s"] = benchmark::Counter(static_cast<double>(rows) * state.iterations(),
                                                benchmark::Counter::kIsRate);
  state.SetLabel(std::string(KvTypeName(type)) + " depth " + std::to_string(depth));
}

BENCHMARK(BM_Attention)->ArgsProduct({{256}, {512}, {0, 1}, {1, 96}, {0, 1, 2}})->UseRealTime();
BENCHMARK(BM_Attention)->ArgsProduct({{512}, {2048}, {0, 1}, {1, 96}, {0, 1, 2}})->UseRealTime();
// rows 1: a decode row at depth (AttendLoneRow, keys split over the threads).
BENCHMARK(BM_AttendPrefill)->ArgsProduct({{1, 64}, {2048, 8192, 32768}, {0, 1, 2}, {2}})->UseRealTime();

}  // namespace
}  // namespace g4
