// Running a model over tensor-parallel ranks: in-process (one thread per rank, shared memory) or
// one rank per process under mpirun. The same body runs on every rank with that rank's model;
// only rank 0 should write output.
//
//   Status st = RunTensorParallel(tp, [&](Communicator* comm) -> Status {
//     G4_ASSIGN_OR_RETURN(auto model, LoadModel(dir, options.OnRanks(comm)));
//     ...same calls on every rank...
//   });
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "model/communicator.h"
#include "model/forward.h"
#include "model/loader.h"
#include "model/rank_plan.h"

namespace g4 {

// Runs body once per rank. Under an MPI launcher: this process's rank of MPI_COMM_WORLD (tp must
// be 0 = "the world size", or equal it). Otherwise tp threads with in-process communicators, or
// body(nullptr) when tp <= 1. Returns the first failing rank's status (rank 0's first).
Status RunTensorParallel(int tp, const std::function<Status(Communicator* comm)>& body);

// True on the rank that writes output (rank 0, or no communicator).
inline bool IsOutputRank(const Communicator* comm) { return !comm || comm->rank() == 0; }
// False only in an MPI-launched process other than rank 0 (read from the launcher's environment,
// so it is known before MPI starts): that process reports nothing, rank 0 speaks for all.
bool IsOutputProcess();

}  // namespace g4
