// A persistent pool of worker threads. The caller takes part in every ParallelFor, so a pool
// of size N uses N-1 workers plus the calling thread. Workers spin briefly between jobs (decode
// issues many small jobs back to back) and then sleep.
// A job is finished when its tasks are, not when every worker has checked in: on a shared,
// oversubscribed machine a descheduled worker must not hold up the caller, which then simply
// runs the remaining tasks itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "base/function_ref.h"

namespace g4 {

class ThreadPool {
 public:
  // n_threads <= 0 means one per hardware thread.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(task, thread_index) for every task in [0, n_tasks) and returns when all are done.
  // thread_index is in [0, size()) and is stable within one call (for per-thread scratch).
  // Not reentrant: fn must not call ParallelFor on the same pool. fn is only referenced (no
  // copy, no allocation), which is safe because the call returns after the last task.
  void ParallelFor(int64_t n_tasks, FunctionRef<void(int64_t, int)> fn);

  static int HardwareThreads();

 private:
  void WorkerLoop(int thread_index);
  void RunTasks(uint32_t generation, int thread_index);

  static constexpr uint64_t kTaskMask = 0xffffffffu;
  static constexpr int64_t kClosed = 0xffffffff;  // task index of a job still being published

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::mutex call_mutex_;  // one ParallelFor at a time
  const FunctionRef<void(int64_t, int)>* job_ = nullptr;
  std::atomic<int64_t> n_tasks_{0};
  // (generation << 32) | next task index: a task is claimed by a compare-and-swap that fails once
  // a newer job has been published, so a late worker can never run a stale or foreign task.
  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace g4
