// In-process tensor parallelism: one thread per rank, sharing memory. A collective publishes
// each rank's buffer pointer, meets at a barrier, lets every rank work on its share, and meets
// again before anyone may touch its buffer. The barrier spins (each rank usually has a core and
// decode issues two collectives per layer), then yields so oversubscribed runs still progress.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "model/communicator.h"

namespace g4 {

class InProcessGroup {
 public:
  explicit InProcessGroup(int size);
  int size() const { return size_; }
  // The communicator of `rank`; each is used by exactly one thread. The group must outlive them.
  std::unique_ptr<Communicator> Rank(int rank);

 private:
  friend class InProcessCommunicator;
  // may_idle: the wait may be long (BroadcastIdle), so it ends up sleeping rather than yielding.
  void Barrier(int* local_sense, bool may_idle = false);

  const int size_;
  std::vector<void*> send_;  // per rank: the buffer of the current collective
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<int> sense_{0};
};

}  // namespace g4
