// The pool the kernels split their work over (base/thread_pool.h): every task runs exactly once,
// also across jobs back to back. These run under ThreadSanitizer too (tools/test.sh).
#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace g4 {
namespace {

TEST(ThreadPool, RunsEveryTaskOnce) {
  ThreadPool pool(3);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::atomic<int>> hits(1000);
    pool.ParallelFor(1000, [&](int64_t t, int thread) {
      EXPECT_GE(thread, 0);
      EXPECT_LT(thread, 3);
      hits[t]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

// Many tiny jobs back to back whose task counts alternate: a worker still claiming in one job
// must never take a task of the next (it would run twice, and the extra completion would leave
// the caller waiting forever). More threads than cores, so workers get preempted mid-claim.
TEST(ThreadPool, BackToBackJobsOfGrowingSizeRunEachTaskOnce) {
  ThreadPool pool(4);
  std::atomic<int> hits[8];
  for (int round = 0; round < 100000; ++round) {
    const int n = round % 2 == 0 ? 2 : 7;
    for (auto& h : hits) h.store(0, std::memory_order_relaxed);
    pool.ParallelFor(n, [&](int64_t t, int) { hits[t].fetch_add(1, std::memory_order_relaxed); });
    for (int t = 0; t < 8; ++t)
      ASSERT_EQ(hits[t].load(), t < n ? 1 : 0) << "round " << round << " task " << t;
  }
}

}  // namespace
}  // namespace g4
