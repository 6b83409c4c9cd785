// Running a model over tensor-parallel ranks: in-process (one thread per rank, shared memory) or
// one rank per process under mpirun. The same body runs on every rank with that rank's model;
// only rank 0 should write output.
//
//   Status st = RunTensorParallel(tp, [&](Communicator* comm) -> Status {
//     G4_ASSIGN_OR_RETURN(auto model, LoadRankModel(dir, options, comm));
//     ...same calls on every rank...
//   });
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "model/communicator.h"
#include "model/forward.h"
#include "model/rank_plan.h"

namespace g4 {

// Runs body once per rank. Under an MPI launcher: this process's rank of MPI_COMM_WORLD (tp must
// be 0 = "the world size", or equal it). Otherwise tp threads with in-process communicators, or
// body(nullptr) when tp <= 1. Returns the first failing rank's status (rank 0's first).
Status RunTensorParallel(int tp, const std::function<Status(Communicator* comm)>& body);

// Loads comm's rank of DIR (the whole model when comm is null) and attaches comm. DIR may be a
// checkpoint (the rank's slices are read from the mapped files) or an artifact packed with
// `g4 pack --tp <comm's size>` (the rank maps its own sections; another rank count is refused). All
// ranks call it together: if any rank fails, every rank returns an error (none is left waiting in a
// collective for a peer that gave up).
Result<std::unique_ptr<Model>> LoadRankModel(const std::string& dir, const ModelOptions& options,
                                             Communicator* comm, const RankPlanOptions& rank_options = {});

// True when `status` only says that a peer rank failed to load (LoadRankModel); the peer's own
// status has the cause. Under mpirun a process other than rank 0 reports its error only when it
// is its own (a damaged section of its rank), so the cause is printed once.
bool IsPeerFailure(const Status& status);

// True on the rank that writes output (rank 0, or no communicator).
inline bool IsOutputRank(const Communicator* comm) { return !comm || comm->rank() == 0; }
// False only in an MPI-launched process other than rank 0 (read from the launcher's environment,
// so it is known before MPI starts): that process reports nothing, rank 0 speaks for all.
bool IsOutputProcess();

}  // namespace g4
