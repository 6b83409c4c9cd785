#include "model/loader.h"

#include <algorithm>

#include "base/thread_pool.h"
#include "io/pack.h"
#include "model/architecture.h"
#include "model/pack_reader.h"
#include "model/rank_plan.h"

namespace g4 {

namespace {

constexpr char kPeerFailed[] = "another rank failed to load";

// Rank `rank` of `tp` of SOURCE, without any communication.
Result<std::unique_ptr<Model>> LoadRank(const std::string& source, const ModelOptions& options,
                                        int rank, int tp, int threads) {
  LoadOptions load = options.load;
  if (load.threads == 0) load.threads = threads;
  if (IsPackFile(source)) {
    // Mapped and verified, the weights used in place (no conversion).
    G4_ASSIGN_OR_RETURN(PackedModel packed, LoadPackedModel(source, load.quant, load.threads, rank,
                                                            tp, options.lm_head));
    return std::make_unique<Model>(source, std::move(packed.plan), std::move(packed.weights),
                                   threads, options.kernel_layout);
  }
  G4_ASSIGN_OR_RETURN(const ModelPlan full, LoadModelPlan(source));
  ModelPlan plan = full;
  if (tp > 1) {
    G4_ASSIGN_OR_RETURN(plan, BuildRankPlan(full, rank, tp, {.lm_head = options.lm_head}));
  }
  G4_ASSIGN_OR_RETURN(std::unique_ptr<ModelWeights> weights,
                      LoadRankWeights(full, plan, source, load));
  return std::make_unique<Model>(source, std::move(plan), std::move(weights), threads,
                                 options.kernel_layout);
}

}  // namespace

ModelOptions ModelOptions::OnRanks(Communicator* c, LmHeadPlacement head) const {
  ModelOptions o = *this;
  o.comm = c;
  o.lm_head = head;
  return o;
}

bool IsPeerFailure(const Status& status) {
  return !status.ok() && status.message().find(kPeerFailed) != std::string::npos;
}

Result<std::unique_ptr<Model>> LoadModel(const std::string& source, const ModelOptions& options) {
  Communicator* comm = options.comm;
  const int rank = comm ? comm->rank() : options.rank, tp = comm ? comm->size() : options.tp;
  int threads = options.threads;
  // "All cores" means all cores among the ranks on this host, not each.
  if (comm && tp > 1 && threads <= 0)
    threads = std::max(1, ThreadPool::HardwareThreads() / comm->ranks_on_host());
  Result<std::unique_ptr<Model>> model =
      tp < 1 || rank < 0 || rank >= tp
          ? Result<std::unique_ptr<Model>>(
                Status::Errorf("rank ", rank, " of --tp ", tp, " does not exist"))
          : LoadRank(source, options, rank, tp, threads);
  if (!comm) return model;
  // Agree on success before anyone enters a collective of the forward pass.
  float failed = model.ok() ? 0.0f : 1.0f;
  comm->AllReduceSum(&failed, 1);
  if (!model.ok()) return model.status();
  if (failed > 0) return Status::Errorf("rank ", comm->rank(), ": ", kPeerFailed, " ", source);
  (*model)->set_communicator(comm);
  return model;
}

}  // namespace g4
