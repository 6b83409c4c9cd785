#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <vector>

#include "model/arch/gemma4.h"
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
  for (int r = 0; r < tp; ++r)
    if (!results[r].ok()) return results[r];
  return OkStatus();
}

Result<std::unique_ptr<Model>> LoadRankModel(const std::string& dir, const ModelOptions& options,
                                             Communicator* comm, const RankPlanOptions& rank_options) {
  Result<std::unique_ptr<Model>> model = [&]() -> Result<std::unique_ptr<Model>> {
    G4_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
    G4_ASSIGN_OR_RETURN(ModelPlan full, BuildGemma4Plan(config));
    const int rank = comm ? comm->rank() : 0, tp = comm ? comm->size() : 1;
    G4_ASSIGN_OR_RETURN(ModelPlan plan, BuildRankPlan(full, rank, tp, rank_options));
    ModelOptions rank_model_options = options;
    // "All cores" means all cores among the ranks on this host, not each.
    if (comm && options.threads <= 0)
      rank_model_options.threads = std::max(1, ThreadPool::HardwareThreads() / comm->ranks_on_host());
    return Model::LoadShare(dir, full, std::move(plan), rank_model_options);
  }();
  if (!comm) return model;
  // Agree on success before anyone enters a collective of the forward pass.
  float failed = model.ok() ? 0.0f : 1.0f;
  comm->AllReduceSum(&failed, 1);
  if (!model.ok()) return model.status();
  if (failed > 0) return Status::Errorf("rank ", comm->rank(), ": another rank failed to load ", dir);
  (*model)->set_communicator(comm);
  return model;
}

}  // namespace g4
