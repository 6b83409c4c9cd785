// g4 bench: the memory side, a STREAM-style measurement taken in the same run (the decode
// roofline of this machine) and the peak resident set.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "base/stopwatch.h"
#include "cli/bench.h"
#include "kernels/ops.h"

namespace g4::cli {
namespace {

// Streams [p, p + n) once, 64 bytes per step in four 16-byte vectors, asking for the bytes 4 KiB
// ahead as the decode kernels do (on these VMs the hardware prefetcher alone leaves a core well
// under its bandwidth). Only XORs: one core is never compute-bound here, so this is what the
// memory gives, not what a loop can add. Returns a fold of the bytes so the loads stay.
uint64_t StreamRead(const uint8_t* p, size_t n) {
  using V2 = uint64_t __attribute__((vector_size(16)));
  V2 a0{}, a1{}, a2{}, a3{};
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __builtin_prefetch(p + i + 4096, 0, 3);
    V2 v[4];
    std::memcpy(v, p + i, 64);
    a0 ^= v[0], a1 ^= v[1], a2 ^= v[2], a3 ^= v[3];
  }
  const V2 a = a0 ^ a1 ^ a2 ^ a3;
  uint64_t fold = a[0] ^ a[1];
  for (; i < n; ++i) fold ^= p[i];
  return fold;
}

}  // namespace

int64_t PeakRssBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

// The pieces are the decode task size (kMaxDecodeTaskBytes), as decode splits its matrices.
double ReadGbPerSecond(const ByteSpans& spans, ThreadPool& pool, int passes) {
  constexpr size_t kPiece = kMaxDecodeTaskBytes;
  ByteSpans pieces;
  size_t total = 0;
  for (const auto& [p, n] : spans) {
    for (size_t off = 0; off < n; off += kPiece)
      pieces.push_back({p + off, std::min(kPiece, n - off)});
    total += n;
  }
  std::vector<uint64_t> folds(pieces.size());
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const Stopwatch timer;
    pool.ParallelFor(static_cast<int64_t>(pieces.size()), [&](int64_t t, int) {
      folds[t] = StreamRead(pieces[t].first, pieces[t].second);
    });
    best = std::max(best, total / timer.Seconds() / 1e9);
  }
  uint64_t all = 0;
  for (uint64_t f : folds) all ^= f;
  if (all == 0x1234567) std::printf(" ");  // keep the reads alive
  return best;
}

// STREAM's rule: each array at least 4x the last-level cache. These VMs report a 300 MiB L3, and
// with the 128 MiB arrays used before, the read figure came partly from the cache (46 GB/s against
// 33 for streaming the model's own weights in the same run). Default: 4x the L3, at least 512 MiB
// and at most 1/12 of RAM per array; `array_mib` > 0 overrides it (tests use small arrays). Best
// of several passes, with the same pool and thread count as the model. Taken before the model
// loads; the arrays are freed and the peak-RSS mark reset afterwards, so they do not count in
// peak RSS.
Bandwidth MeasureBandwidth(ThreadPool& pool, int array_mib) {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), ram_pages = sysconf(_SC_PHYS_PAGES),
             page = sysconf(_SC_PAGESIZE);
  size_t array_bytes =
      std::max<size_t>(size_t{512} << 20, l3 > 0 ? 4 * static_cast<size_t>(l3) : 0);
  if (ram_pages > 0 && page > 0)
    array_bytes = std::min(array_bytes, static_cast<size_t>(ram_pages) * page / 12);
  if (array_mib > 0) array_bytes = static_cast<size_t>(array_mib) << 20;
  const int64_t tasks = 256;
  const size_t per = std::max<size_t>(1, array_bytes / sizeof(float) / tasks);
  const size_t n = per * tasks;  // floats per array
  Bandwidth bw;
  {
    std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 0.5f);
    for (int rep = 0; rep < 4; ++rep) {
      const Stopwatch timer;
      pool.ParallelFor(tasks, [&](int64_t t, int) {
        float* pa = a.data() + t * per;
        const float *pb = b.data() + t * per, *pc = c.data() + t * per;
        for (size_t i = 0; i < per; ++i) pa[i] = pb[i] + 0.5f * pc[i];
      });
      bw.triad_gb_s = std::max(bw.triad_gb_s, 3.0 * n * sizeof(float) / timer.Seconds() / 1e9);
    }
    bw.read_gb_s =
        ReadGbPerSecond({{reinterpret_cast<const uint8_t*>(b.data()), n * sizeof(float)}}, pool, 4);
  }
  // "5" resets VmHWM to the current RSS (Linux >= 4.0); if refused, peak RSS includes the arrays.
  std::ofstream("/proc/self/clear_refs") << "5";
  return bw;
}

}  // namespace g4::cli
