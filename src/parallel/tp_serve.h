// Tensor-parallel serving (`g4 serve --tp N`, or `mpirun -np N g4 serve`). Rank 0 runs the HTTP
// server and the Scheduler; the other ranks follow. Before each Forward the scheduler's engine
// thread hands the step to a StepBroadcaster (a StepListener), which sends it to the followers;
// each follower (FollowSteps) runs the same Forward on its own slices and its own copy of the
// slots' KV caches (holding only its KV heads), so the collectives inside Forward pair up.
//
// Messages, all from rank 0, in this order:
//   start {slots, context, chunk}  once, after every rank has loaded: followers allocate caches
//   step  {n rows}, then the rows  per Forward: token, slot, position, wants logits
//   stop                           at shutdown, or when rank 0 fails after the load
// A follower's caches track rank 0's by position alone: a slot's first row in a step is at the
// position rank 0's cache is at, which rank 0 may have rewound (prefix reuse) or reset since.
// Sampling, tokenizing and every byte of output stay on rank 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "kernels/kv_format.h"
#include "model/communicator.h"
#include "model/forward.h"
#include "model/loader.h"
#include "parallel/in_process_communicator.h"
#include "runtime/scheduler.h"

namespace g4 {

// One row of a step message.
struct WireRow {
  int64_t pos;
  int32_t token;
  int32_t slot;
  int32_t want_logits;
  int32_t unused;
};

// Runs on a follower rank until rank 0 says stop (OK), or returns an error for a message that
// makes no sense (then rank 0 cannot go on either). `model` holds this rank's share.
Status FollowSteps(Model& model, Communicator* comm);

// Rank 0's side: the rank group, the load, and the messages.
class TensorParallelLeader : public StepListener {
 public:
  // tp ranks: this process's MPI world when launched by mpirun (its other processes run
  // FollowSteps, see RunServeFollower), else tp in-process ranks whose followers are threads.
  static Result<std::unique_ptr<TensorParallelLeader>> Create(int tp);
  ~TensorParallelLeader() override;  // Stop()

  Communicator* comm() const { return comm_; }
  bool over_mpi() const { return over_mpi_; }

  // Loads rank 0's share while every other rank loads its own (in-process: started here). If any
  // rank fails, all do, and the followers have returned.
  Result<std::unique_ptr<Model>> Load(const std::string& dir, const ModelOptions& options);
  // Tells the followers the slot layout (the scheduler's). After a successful Load, before the
  // first step.
  void Start(int slots, int context, int chunk, KvType kv_type = KvType::kF32);
  void BeforeForward(const std::vector<BatchRow>& rows, const std::vector<int>& row_slots) override;
  // Tells the followers to stop (if they are following) and joins in-process follower threads.
  // After the scheduler has stopped; idempotent.
  void Stop();

 private:
  TensorParallelLeader() = default;

  Communicator* comm_ = nullptr;
  bool over_mpi_ = false;
  std::unique_ptr<InProcessGroup> group_;
  std::unique_ptr<Communicator> own_comm_;  // in-process rank 0
  std::vector<std::thread> followers_;
  std::vector<WireRow> wire_;
  bool following_ = false;  // the followers loaded and wait for messages
};

// A follower process under mpirun: loads its share of `dir` with rank 0 and follows until rank 0
// says stop. Returns the process exit code; writes nothing unless following fails.
int RunServeFollower(const std::string& dir, const ModelOptions& options);

}  // namespace g4
