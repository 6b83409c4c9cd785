// Collective operations between tensor-parallel ranks. Two implementations: in-process ranks
// (threads sharing memory) and MPI (processes, possibly on several hosts). The forward pass calls
// AllReduceSum after the row-parallel projections (o_proj, down_proj); everything else it does is
// replicated or local to a rank.
#pragma once

#include <cstddef>

namespace g4 {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Element-wise sum over all ranks, result on every rank.
  virtual void AllReduceSum(float* data, size_t n) = 0;
  // Copies `bytes` from `root` to every rank.
  virtual void Broadcast(void* data, size_t bytes, int root) = 0;
};

}  // namespace g4
