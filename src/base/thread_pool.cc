#include "base/thread_pool.h"

#include <sched.h>

#include <chrono>

namespace g4 {

int ThreadPool::HardwareThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = HardwareThreads();
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    state_.fetch_add(uint64_t{1} << 32);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunTasks(uint32_t generation, int thread_index) {
  uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(s >> 32) != generation) return;
    const int64_t task = static_cast<int64_t>(s & kTaskMask);
    if (task == kClosed) {  // the job is being published: it opens within a few stores
      s = state_.load(std::memory_order_acquire);
      continue;
    }
    // Acquire pairs with the publisher's release: if this reads a newer job's count, the
    // closing store came before it, and the claim below fails instead of taking task `task`
    // of a job this worker never saw (which would also count one task too many in done_).
    if (task >= n_tasks_.load(std::memory_order_acquire)) return;
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) continue;
    // The claim succeeded, so this generation's job is still running and job_ is its job.
    (*job_)(task, thread_index);
    done_.fetch_add(1, std::memory_order_release);
    s = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::WorkerLoop(int thread_index) {
  uint32_t seen = 0;
  auto generation = [&] {
    return static_cast<uint32_t>(state_.load(std::memory_order_acquire) >> 32);
  };
  for (;;) {
    // Spin for a short while: the next job usually follows within microseconds.
    auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    while (generation() == seen && std::chrono::steady_clock::now() < spin_until) {
    }
    if (generation() == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation() != seen; });
    }
    // Take the generation before looking at stop_. The other order deadlocked the destructor:
    // woken by the last job, a worker found stop_ still false, then read the generation the
    // destructor had just bumped as "seen" and slept on it, after the only notify (seen once
    // under TSan, kernels_test ThreadPool.BackToBackJobsOfGrowingSizeRunEachTaskOnce).
    // stop_ is stored before that bump, so whoever reads the bump here also reads stop_.
    seen = generation();
    if (stop_.load()) return;
    RunTasks(seen, thread_index);
  }
}

void ThreadPool::ParallelFor(int64_t n_tasks, FunctionRef<void(int64_t, int)> fn) {
  if (n_tasks <= 0) return;
  if (workers_.empty() || n_tasks == 1 || n_tasks >= kClosed) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  uint32_t generation;
  {
    // Under the mutex so a worker between its check and its wait cannot miss the wake-up.
    std::lock_guard<std::mutex> lock(mutex_);
    generation = static_cast<uint32_t>(state_.load() >> 32) + 1;
    // Close the old job before its count changes: a worker still claiming in it may read the
    // new count, and its compare-and-swap must then fail (see RunTasks).
    state_.store((static_cast<uint64_t>(generation) << 32) | kClosed, std::memory_order_relaxed);
    job_ = &fn;
    done_.store(0, std::memory_order_relaxed);
    n_tasks_.store(n_tasks, std::memory_order_release);
    state_.store(static_cast<uint64_t>(generation) << 32, std::memory_order_release);
  }
  wake_.notify_all();
  RunTasks(generation, 0);
  // Every task is claimed; wait for the ones other threads are still running. Yield while
  // waiting: if the worker shares our core, it needs the CPU to finish.
  for (int spins = 0; done_.load(std::memory_order_acquire) != n_tasks; ++spins)
    if (spins > 1000) sched_yield();
}

}  // namespace g4
