#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <vector>

#include "parallel/in_process_communicator.h"
#include "parallel/mpi_communicator.h"

namespace g4 {

bool IsOutputProcess() {
  if (!LaunchedByMpi()) return true;
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* r = std::getenv(v)) return std::atoi(r) == 0;
  return true;
}

Status RunTensorParallel(int tp, const std::function<Status(Communicator*)>& body) {
  if (LaunchedByMpi()) {
    G4_ASSIGN_OR_RETURN(Communicator * world, MpiWorld());
    if (tp > 0 && tp != world->size())
      return Status::Errorf("--tp ", tp, " but mpirun started ", world->size(),
                            " ranks: give --tp equal to mpirun -np (or leave --tp out)");
    return body(world);
  }
  if (tp <= 1) return body(nullptr);
  InProcessGroup group(tp);
  std::vector<Status> results(tp);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> comm = group.Rank(r);
      results[r] = body(comm.get());
    });
  for (auto& t : threads) t.join();
  // The rank whose own failure it was (a damaged rank-1 section, say), not a peer that only
  // learned that someone failed.
  for (int r = 0; r < tp; ++r)
    if (!results[r].ok() && !IsPeerFailure(results[r]))
      return results[r];
  for (int r = 0; r < tp; ++r)
    if (!results[r].ok()) return results[r];
  return OkStatus();
}

}  // namespace g4
