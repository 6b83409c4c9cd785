#include "parallel/tensor_parallel.h"

#include "io/pack.h"

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <vector>

#include "model/arch/gemma4.h"
#include "parallel/in_process_communicator.h"
#include "parallel/mpi_communicator.h"

namespace g4 {

namespace {
constexpr char kPeerFailed[] = "another rank failed to load";
}  // namespace

bool IsPeerFailure(const Status& status) {
  return !status.ok() && status.message().find(kPeerFailed) != std::string::npos;
}

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
    if (!results[r].ok() && results[r].message().find(kPeerFailed) == std::string::npos)
      return results[r];
  for (int r = 0; r < tp; ++r)
    if (!results[r].ok()) return results[r];
  return OkStatus();
}

Result<std::unique_ptr<Model>> LoadRankModel(const std::string& dir, const ModelOptions& options,
                                             Communicator* comm, const RankPlanOptions& rank_options) {
  Result<std::unique_ptr<Model>> model = [&]() -> Result<std::unique_ptr<Model>> {
    if (!comm || comm->size() == 1) return Model::Load(dir, options);  // HF directory or packed file
    const int rank = comm->rank(), tp = comm->size();
    ModelOptions rank_model_options = options;
    // "All cores" means all cores among the ranks on this host, not each.
    if (options.threads <= 0)
      rank_model_options.threads = std::max(1, ThreadPool::HardwareThreads() / comm->ranks_on_host());
    // A `g4 pack --tp N` artifact: this rank maps only its own sections (and the shared ones).
    if (IsPackFile(dir))
      return Model::LoadPacked(dir, rank_model_options, rank, tp, rank_options.lm_head);
    G4_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
    G4_ASSIGN_OR_RETURN(ModelPlan full, BuildGemma4Plan(config));
    G4_ASSIGN_OR_RETURN(ModelPlan plan, BuildRankPlan(full, rank, tp, rank_options));
    return Model::LoadShare(dir, full, std::move(plan), rank_model_options);
  }();
  if (!comm) return model;
  // Agree on success before anyone enters a collective of the forward pass.
  float failed = model.ok() ? 0.0f : 1.0f;
  comm->AllReduceSum(&failed, 1);
  if (!model.ok()) return model.status();
  if (failed > 0) return Status::Errorf("rank ", comm->rank(), ": ", kPeerFailed, " ", dir);
  (*model)->set_communicator(comm);
  return model;
}

}  // namespace g4
