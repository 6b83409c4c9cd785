#include "parallel/tp_serve.h"

#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "model/kv_cache.h"
#include "model/loader.h"
#include "parallel/mpi_communicator.h"
#include "parallel/tensor_parallel.h"

namespace g4 {

namespace {

enum MessageKind : int32_t { kStart = 1, kStep = 2, kStop = 3 };

// Fixed size, so the followers know how much to receive before they know what comes.
struct Header {
  int32_t kind = 0;
  int32_t a = 0, b = 0, c = 0;  // start: slots, context, chunk; step: rows
  int32_t d = 0;                // start: the caches' KvType
};

static_assert(std::is_trivially_copyable_v<Header> && std::is_trivially_copyable_v<WireRow>);

// Largest slot layout a start message may ask for (the server's own limits are smaller).
constexpr int kMaxSlots = 4096;

}  // namespace

Status FollowSteps(Model& model, Communicator* comm) {
  const ModelPlan& plan = model.plan();
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<WireRow> wire;
  std::vector<BatchRow> rows;
  std::vector<char> seen;
  std::vector<float> logits;
  Activations act;
  for (;;) {
    Header h;
    comm->BroadcastIdle(&h, sizeof h, 0);
    if (h.kind == kStop) return OkStatus();
    if (h.kind == kStart) {
      if (h.a < 1 || h.a > kMaxSlots || h.b < 2 || h.c < 1 || h.d < 0 ||
          h.d > static_cast<int>(KvType::kQ8))
        return Status::Errorf("tensor-parallel follower: bad start message (slots ", h.a,
                              ", context ", h.b, ", chunk ", h.c, ")");
      caches.clear();
      for (int i = 0; i < h.a; ++i) caches.push_back(std::make_unique<KvCache>(plan, h.b, h.c, static_cast<KvType>(h.d)));
      continue;
    }
    if (h.kind != kStep || h.a < 1)
      return Status::Errorf("tensor-parallel follower: unknown message ", h.kind, " (", h.a, ")");
    wire.resize(static_cast<size_t>(h.a));
    comm->Broadcast(wire.data(), wire.size() * sizeof(WireRow), 0);
    rows.clear();
    seen.assign(caches.size(), 0);
    int wanted = 0;
    for (const WireRow& w : wire) {
      if (w.slot < 0 || static_cast<size_t>(w.slot) >= caches.size())
        return Status::Errorf("tensor-parallel follower: step for slot ", w.slot, " of ",
                              caches.size());
      KvCache* cache = caches[w.slot].get();
      // Rank 0 may have rewound or reset this slot's cache since the last step; its first row
      // here says where that cache is now.
      if (!seen[w.slot]) cache->set_n_past(w.pos);
      seen[w.slot] = 1;
      rows.push_back(BatchRow{w.token, w.pos, cache, w.want_logits != 0});
      wanted += w.want_logits != 0;
    }
    logits.resize(static_cast<size_t>(wanted) * plan.vocab);
    // Rank 0 ran the same rows on caches in the same state: if this fails, it failed the same
    // way before any collective and ends the sequences; the next step resynchronizes the caches.
    (void)model.Forward(rows, act, wanted > 0 ? logits.data() : nullptr);
  }
}

Result<std::unique_ptr<TensorParallelLeader>> TensorParallelLeader::Create(int tp) {
  std::unique_ptr<TensorParallelLeader> leader(new TensorParallelLeader());
  if (LaunchedByMpi()) {
    G4_ASSIGN_OR_RETURN(leader->comm_, MpiWorld());
    if (tp > 0 && tp != leader->comm_->size())
      return Status::Errorf("--tp ", tp, " but mpirun started ", leader->comm_->size(),
                            " ranks: give --tp equal to mpirun -np (or leave --tp out)");
    leader->over_mpi_ = true;
    return leader;
  }
  if (tp < 2) return Status::Errorf("tensor-parallel serving needs --tp 2 or more, got ", tp);
  leader->group_ = std::make_unique<InProcessGroup>(tp);
  leader->own_comm_ = leader->group_->Rank(0);
  leader->comm_ = leader->own_comm_.get();
  return leader;
}

TensorParallelLeader::~TensorParallelLeader() { Stop(); }

Result<std::unique_ptr<Model>> TensorParallelLeader::Load(const std::string& dir,
                                                          const ModelOptions& options) {
  if (group_ && followers_.empty()) {
    for (int r = 1; r < group_->size(); ++r)
      followers_.emplace_back([this, r, dir, options] {
        std::unique_ptr<Communicator> comm = group_->Rank(r);
        auto model = LoadModel(dir, options.OnRanks(comm.get()));
        if (!model.ok()) return;  // every rank failed; rank 0 reports it
        Status st = FollowSteps(**model, comm.get());
        if (!st.ok()) std::fprintf(stderr, "g4 serve: rank %d: %s\n", r, st.message().c_str());
      });
  }
  auto model = LoadModel(dir, options.OnRanks(comm_));
  following_ = model.ok();
  return model;
}

void TensorParallelLeader::Start(int slots, int context, int chunk, KvType kv_type) {
  Header h{kStart, slots, context, chunk, static_cast<int32_t>(kv_type)};
  comm_->BroadcastIdle(&h, sizeof h, 0);
}

void TensorParallelLeader::BeforeForward(const std::vector<BatchRow>& rows,
                                         const std::vector<int>& row_slots) {
  Header h{kStep, static_cast<int32_t>(rows.size()), 0, 0, 0};
  comm_->BroadcastIdle(&h, sizeof h, 0);
  std::vector<WireRow>& wire = wire_;
  wire.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    wire[i] = WireRow{rows[i].pos, rows[i].token, row_slots[i], rows[i].want_logits ? 1 : 0, 0};
  comm_->Broadcast(wire.data(), wire.size() * sizeof(WireRow), 0);
}

void TensorParallelLeader::Stop() {
  if (following_) {
    Header h{kStop, 0, 0, 0};
    comm_->BroadcastIdle(&h, sizeof h, 0);
    following_ = false;
  }
  for (auto& t : followers_) t.join();
  followers_.clear();
}

int RunServeFollower(const std::string& dir, const ModelOptions& options) {
  Status st = RunTensorParallel(0, [&](Communicator* comm) -> Status {
    auto model = LoadModel(dir, options.OnRanks(comm));
    if (!model.ok()) return OkStatus();  // every rank failed together; rank 0 reports and exits 1
    return FollowSteps(**model, comm);
  });
  if (st.ok()) return 0;
  std::fprintf(stderr, "g4 serve: %s\n", st.message().c_str());
  return 1;
}

}  // namespace g4
