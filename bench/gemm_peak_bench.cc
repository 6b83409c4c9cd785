// The machine's dot-product ceilings and the q8/q4 GEMM tiles measured against them.
//   BM_PeakInt8Dot/threads: int8 multiply-adds per second with the instruction the active kernel
//     table's q8/q4 tiles use (AVX-512 VNNI vpdpbusd on 64 bytes; AVX2 maddubs + madd + add on 32),
//     twelve independent accumulators per thread, no memory traffic. GOPS = 2 x multiply-adds.
//   BM_PeakBf16Dot/threads: bf16 multiply-adds per second, the machine's bf16 ceiling: AVX-512
//     BF16 vdpbf16ps where the CPU has it (what the avx512bf16 table's bf16 tiles use), else FMAs
//     on bf16 widened to f32 (the route the avx2 / avx512 tables take).
//   BM_GemmTile/type/rows/threads/size: the q8/q4/bf16 product of an E2B gate-sized matrix (size 0:
//     6144 x 1536, 9.4 MB in q8, the size of the last-level cache's share a core gets on a busy
//     box; size 1: 768 x 1536, resident in L2, the tile's compute ceiling) with `rows` activation
//     rows, as batched decode and prefill
//     run it (ops::MatMul: activation quantization, the thread split, the tiles). pct_peak: its
//     GOPS per CPU-second against BM_PeakInt8Dot's loop (bf16: BM_PeakBf16Dot's) on the same
//     pool, the two alternated every iteration (the pool's workers spinning between jobs count against the product).
// Every benchmark also reports GOPS per CPU-second: on the shared 2-core dev VMs the wall clock
// mostly measures the other tenants, the CPU time what the code does while it runs (the pool's
// workers spin briefly between jobs, which counts against the tiles).
//   BM_DecodeVsRead/type/threads: decode's matrix-vector product against a plain read of the same
//     128 MB, alternated every iteration (median of the per-iteration ratios: `fraction`).
//   ./g4_microbench --benchmark_filter='Peak|GemmTile|DecodeVsRead'
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "base/stopwatch.h"
#include "base/thread_pool.h"
#include "kernels/cpu_kernels.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"

namespace g4 {
namespace {

constexpr int kAccumulators = 12;  // > latency x throughput of every unit measured here

// Each loop returns a fold of its accumulators so the work stays; the empty asm makes the inputs
// opaque to the compiler on every iteration (no constant folding, no hoisting).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int64_t Int8Avx512(int64_t iters) {
  __m512i acc[kAccumulators];
  for (auto& a : acc) a = _mm512_setzero_si512();
  __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" : "+v"(u), "+v"(s));
#pragma GCC unroll 12
    for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], u, s);
  }
  __m512i sum = acc[0];
  for (int j = 1; j < kAccumulators; ++j) sum = _mm512_add_epi32(sum, acc[j]);
  int32_t lanes[16];  // (GCC 12's _mm512_reduce_* trip -Werror=uninitialized)
  std::memcpy(lanes, &sum, sizeof lanes);
  return lanes[0];
}
constexpr int64_t kInt8MacsAvx512 = 64;  // per instruction

__attribute__((target("avx2"))) int64_t Int8Avx2(int64_t iters) {
  __m256i acc[kAccumulators];
  for (auto& a : acc) a = _mm256_setzero_si256();
  __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" : "+x"(u), "+x"(s));
#pragma GCC unroll 12
    for (int j = 0; j < kAccumulators; ++j) {
      asm volatile("" : "+x"(u));  // a "new" u for each: the products are not shared
      acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
    }
  }
  __m256i sum = acc[0];
  for (int j = 1; j < kAccumulators; ++j) sum = _mm256_add_epi32(sum, acc[j]);
  int32_t lanes[8];
  std::memcpy(lanes, &sum, sizeof lanes);
  return lanes[0];
}
constexpr int64_t kInt8MacsAvx2 = 32;

__attribute__((target("avx512f,avx512bf16"))) int64_t Bf16Avx512(int64_t iters) {
  __m512 acc[kAccumulators];
  for (auto& a : acc) a = _mm512_setzero_ps();
  __m512i a = _mm512_set1_epi16(0x3f80), b = _mm512_set1_epi16(0x3c00);  // 1.0, 2^-7
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" : "+v"(a), "+v"(b));
#pragma GCC unroll 12
    for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], (__m512bh)a, (__m512bh)b);
  }
  __m512 sum = acc[0];
  for (int j = 1; j < kAccumulators; ++j) sum = _mm512_add_ps(sum, acc[j]);
  float lanes[16];
  std::memcpy(lanes, &sum, sizeof lanes);
  return static_cast<int64_t>(lanes[0]);
}
constexpr int64_t kBf16MacsAvx512 = 32;

__attribute__((target("avx2,fma"))) int64_t Bf16Avx2(int64_t iters) {
  __m256 acc[kAccumulators];
  for (auto& a : acc) a = _mm256_setzero_ps();
  __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(0x1p-7f);
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" : "+x"(a), "+x"(b));
#pragma GCC unroll 12
    for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm256_fmadd_ps(a, b, acc[j]);
  }
  __m256 sum = acc[0];
  for (int j = 1; j < kAccumulators; ++j) sum = _mm256_add_ps(sum, acc[j]);
  float lanes[8];
  std::memcpy(lanes, &sum, sizeof lanes);
  return static_cast<int64_t>(lanes[0]);
}
constexpr int64_t kBf16MacsAvx2 = 8;

// "avx512" or "avx512bf16": both run the VNNI q8/q4 tiles.
bool ActiveIsAvx512() { return std::strncmp(ActiveKernels().name, "avx512", 6) == 0; }
bool CpuHasAvx512Bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f");
}

struct PeakLoop {
  int64_t (*loop)(int64_t);
  int64_t macs_per_instruction;
  const char* name;
};
PeakLoop Int8Loop() {
  return ActiveIsAvx512() ? PeakLoop{Int8Avx512, kInt8MacsAvx512, "vpdpbusd zmm"}
                          : PeakLoop{Int8Avx2, kInt8MacsAvx2, "vpmaddubsw+vpmaddwd ymm"};
}
PeakLoop Bf16Loop() {
  return CpuHasAvx512Bf16() ? PeakLoop{Bf16Avx512, kBf16MacsAvx512, "vdpbf16ps zmm"}
                            : PeakLoop{Bf16Avx2, kBf16MacsAvx2, "vfmadd ymm (bf16 widened)"};
}

// Runs the loop as 16 short tasks per thread of the pool (the dynamic queue keeps every thread
// busy to the end); returns the ops (2 per multiply-add).
constexpr int64_t kPeakIters = 1 << 14;
double RunPeak(const PeakLoop& p, ThreadPool& pool, int tasks_per_thread = 16) {
  const int64_t tasks = tasks_per_thread * static_cast<int64_t>(pool.size());
  std::vector<int64_t> folds(tasks);
  pool.ParallelFor(tasks, [&](int64_t t, int) { folds[t] = p.loop(kPeakIters); });
  benchmark::DoNotOptimize(folds.data());
  return 2.0 * static_cast<double>(p.macs_per_instruction) * kAccumulators * kPeakIters * tasks;
}

// CPU seconds of the whole process (every thread): on a shared, oversubscribed box the wall
// clock measures the scheduler, so each figure also comes per CPU-second a thread actually ran.
double ProcessCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void PeakBenchmark(benchmark::State& state, const PeakLoop& p) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  double ops = 0;
  const double cpu0 = ProcessCpuSeconds();
  for (auto _ : state) ops += RunPeak(p, pool);
  state.counters["GOPS"] = benchmark::Counter(ops / 1e9, benchmark::Counter::kIsRate);
  state.counters["GOPS_per_cpu_s"] = ops / 1e9 / (ProcessCpuSeconds() - cpu0);
  state.SetLabel(p.name);
}
void BM_PeakInt8Dot(benchmark::State& state) { PeakBenchmark(state, Int8Loop()); }
void BM_PeakBf16Dot(benchmark::State& state) { PeakBenchmark(state, Bf16Loop()); }

void BM_GemmTile(benchmark::State& state) {
  const WeightType type = static_cast<WeightType>(state.range(0));
  const int n = static_cast<int>(state.range(1)), threads = static_cast<int>(state.range(2));
  const int rows = state.range(3) == 0 ? 6144 : 768, cols = 1536;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> src(static_cast<size_t>(rows) * cols);
  for (auto& v : src) v = nd(rng);
  std::vector<uint8_t> bytes(WeightBytes(type, rows, cols));
  ThreadPool pool(threads);
  QuantizeMatrix(src.data(), SourceType::kF32, rows, cols, type, bytes.data(), &pool);
  WeightMatrix w{type, rows, cols, bytes.data(), bytes.size()};
  if (ActiveKernels().LayoutFor(type) == WeightLayout::kRowGroups16 && CanUseRowGroups(w))
    ToRowGroups(&w, bytes.data(), &pool);
  std::vector<float> x(static_cast<size_t>(n) * cols), y(static_cast<size_t>(n) * rows);
  for (auto& v : x) v = nd(rng) * 50;
  // Each iteration also runs the int8 peak loop on the same pool, untimed by the framework, so
  // the product and its ceiling are measured in the same moments (paired, as the box drifts),
  // both in CPU time: on a busy box the wall clock measures the other tenants.
  const PeakLoop peak = type == WeightType::kBF16 ? Bf16Loop() : Int8Loop();
  double peak_ops = 0, peak_cpu = 0, tile_cpu = 0;
  for (auto _ : state) {
    const double c0 = ProcessCpuSeconds();
    MatMul(w, x.data(), n, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
    const double c1 = ProcessCpuSeconds();
    state.PauseTiming();
    peak_ops += RunPeak(peak, pool, 2);
    const double c2 = ProcessCpuSeconds();
    state.ResumeTiming();
    tile_cpu += c1 - c0;
    peak_cpu += c2 - c1;
  }
  const double ops = 2.0 * rows * cols * n * state.iterations();
  state.counters["GOPS"] = benchmark::Counter(ops / 1e9, benchmark::Counter::kIsRate);
  state.counters["GOPS_per_cpu_s"] = ops / 1e9 / tile_cpu;
  state.counters["peak_per_cpu_s"] = peak_ops / 1e9 / peak_cpu;
  state.counters["pct_peak"] = 100.0 * (ops / tile_cpu) / (peak_ops / peak_cpu);
  state.SetLabel(std::string(ActiveKernels().name) + " " + WeightTypeName(type));
}

// Streams [p, p + n) once with plain loads (XOR-folded, 4 KiB software prefetch as the decode
// tiles use): what the memory gives one pass over the same bytes with nothing else to do.
uint64_t StreamXor(const uint8_t* p, size_t n) {
  using V2 = uint64_t __attribute__((vector_size(16)));
  V2 a0{}, a1{}, a2{}, a3{};
  for (size_t i = 0; i + 64 <= n; i += 64) {
    __builtin_prefetch(p + i + 4096, 0, 3);
    V2 v[4];
    std::memcpy(v, p + i, 64);
    a0 ^= v[0], a1 ^= v[1], a2 ^= v[2], a3 ^= v[3];
  }
  const V2 a = a0 ^ a1 ^ a2 ^ a3;
  return a[0] ^ a[1];
}

// range(0): weight type, range(1): threads. Decode's matrix-vector product over 128 MB of
// weights (4x this VM's L3, so both passes come from memory), each iteration followed by a plain
// read of the same bytes split the same way: `fraction` = decode GB/s / read GB/s, the
// single-matrix form of g4 bench's "decode / weights read alone", paired in time.
void BM_DecodeVsRead(benchmark::State& state) {
  const WeightType type = static_cast<WeightType>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const int cols = 1536;
  const int rows = static_cast<int>(128e6 / WeightBytes(type, 1, cols)) / 64 * 64;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> src(static_cast<size_t>(rows) * cols);
  for (auto& v : src) v = nd(rng);
  std::vector<uint8_t> bytes(WeightBytes(type, rows, cols));
  ThreadPool pool(threads);
  QuantizeMatrix(src.data(), SourceType::kF32, rows, cols, type, bytes.data(), &pool);
  src = {};
  WeightMatrix w{type, rows, cols, bytes.data(), bytes.size()};
  if (ActiveKernels().LayoutFor(type) == WeightLayout::kRowGroups16 && CanUseRowGroups(w))
    ToRowGroups(&w, bytes.data(), &pool);
  std::vector<float> x(cols, 0.5f), y(rows);
  const size_t piece = kMaxDecodeTaskBytes;
  const int64_t pieces = static_cast<int64_t>((bytes.size() + piece - 1) / piece);
  std::vector<uint64_t> folds(pieces);
  std::vector<double> fractions;
  double decode_s = 0, read_s = 0;
  for (auto _ : state) {
    const Stopwatch t0;
    MatMul(w, x.data(), 1, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
    const double d = t0.Seconds();
    state.PauseTiming();
    const Stopwatch t1;
    pool.ParallelFor(pieces, [&](int64_t t, int) {
      const size_t off = static_cast<size_t>(t) * piece;
      folds[t] = StreamXor(bytes.data() + off, std::min(piece, bytes.size() - off));
    });
    benchmark::DoNotOptimize(folds.data());
    const double r = t1.Seconds();
    state.ResumeTiming();
    decode_s += d;
    read_s += r;
    fractions.push_back(r / d);
  }
  std::sort(fractions.begin(), fractions.end());
  state.counters["decode_GBs"] = bytes.size() * static_cast<double>(state.iterations()) / decode_s / 1e9;
  state.counters["read_GBs"] = bytes.size() * static_cast<double>(state.iterations()) / read_s / 1e9;
  state.counters["fraction"] = fractions.empty() ? 0.0 : fractions[fractions.size() / 2];
  state.SetLabel(std::string(ActiveKernels().name) + " " + WeightTypeName(type));
}

constexpr int kQ8 = static_cast<int>(WeightType::kQ8), kQ4 = static_cast<int>(WeightType::kQ4),
              kBf16 = static_cast<int>(WeightType::kBF16);

BENCHMARK(BM_DecodeVsRead)
    ->ArgsProduct({{kQ8, kQ4}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_PeakInt8Dot)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_PeakBf16Dot)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_GemmTile)
    ->ArgsProduct({{kQ8, kQ4, kBf16}, {1, 2, 4, 8, 16, 32, 64}, {1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace g4
