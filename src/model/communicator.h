// Collective operations between tensor-parallel ranks. Two implementations: in-process ranks
// (threads sharing memory, in_process_communicator.h) and MPI (processes, possibly on several
// hosts, mpi_communicator.h). The forward pass calls AllReduceSum after the row-parallel
// projections (o_proj, down_proj) and gathers the LM head's vocabulary blocks; everything else it
// does is replicated or local to a rank. Every rank must make the same calls in the same order
// with the same sizes; results are bitwise identical on every rank, so replicated state (the
// residual stream, sampled tokens) never drifts apart.
#pragma once

#include <cstddef>
#include <cstdint>

namespace g4 {

// Time this rank spent inside collectives, waiting for slower peers included (benchmarks).
struct CommStats {
  int64_t calls = 0;
  int64_t bytes = 0;  // payload bytes passed in (per rank)
  double seconds = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Ranks sharing this host's cores (sizes each rank's thread pool).
  virtual int ranks_on_host() const { return size(); }
  // Element-wise sum over all ranks, result on every rank.
  virtual void AllReduceSum(float* data, size_t n) = 0;
  // Every rank contributes `count` floats; recv[r * count, (r + 1) * count) receives rank r's,
  // on every rank. recv holds size() * count floats and must not overlap send.
  virtual void AllGather(const float* send, size_t count, float* recv) = 0;
  // Copies `bytes` from `root` to every rank.
  virtual void Broadcast(void* data, size_t bytes, int root) = 0;
  // Broadcast for a message that may be long in coming (a server's next step while it is
  // idle): the waiting ranks back off to sleeping instead of spinning on a core. Not counted in
  // stats(): waiting for work is not communication.
  virtual void BroadcastIdle(void* data, size_t bytes, int root) = 0;

  CommStats& stats() { return stats_; }

 protected:
  CommStats stats_;
};

}  // namespace g4
