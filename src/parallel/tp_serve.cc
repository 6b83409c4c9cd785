#include "parallel/tp_serve.h"

#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "model/kv_cache.h"
#include "model/loader.h"
#include "parallel/mpi_communicator.h"
#include "parallel/tensor_parallel.h"
#include "runtime/mtp_drafter.h"

namespace g4 {

namespace {

enum MessageKind : int32_t { kStart = 1, kStep = 2, kStop = 3, kDraft = 4 };

// Fixed size, so the followers know how much to receive before they know what comes.
struct Header {
  int32_t kind = 0;
  int32_t a = 0, b = 0, c = 0;  // start: slots, context, chunk; step: rows; draft: slot, token, n
  int32_t d = 0;                // start: the caches' KvType
  int32_t e = 0;                // start: 1 when the assistant drafts in lockstep
};

// After a draft header, then the hidden state's floats.
struct WireDraft {
  int64_t pos;  // where the slot's cache is (its n_past on rank 0)
  float min_probability;
  int32_t hidden;  // floats that follow
};

static_assert(std::is_trivially_copyable_v<Header> && std::is_trivially_copyable_v<WireRow> &&
              std::is_trivially_copyable_v<WireDraft>);

// Largest slot layout a start message may ask for (the server's own limits are smaller).
constexpr int kMaxSlots = 4096;

}  // namespace

Status FollowSteps(Model& model, Communicator* comm, const LockstepDraft& draft) {
  const ModelPlan& plan = model.plan();
  std::vector<std::unique_ptr<KvCache>> caches;
  std::unique_ptr<Assistant> assistant;  // when rank 0 drafts in lockstep
  std::vector<float> hidden;
  std::vector<int> drafted;
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
      if (h.e) {
        // Rank 0 loaded the same file before it sent this; every rank reports how its load went
        // (a follower that failed goes on following, so rank 0's stop still reaches it).
        std::string error;
        if (draft.path.empty()) {
          error = "no assistant to draft with";
        } else {
          auto loaded = Assistant::Load(draft.path, model, comm, draft.quant);
          if (loaded.ok())
            assistant = std::move(*loaded);
          else
            error = loaded.status().message();
        }
        if (!error.empty())
          std::fprintf(stderr, "g4 serve: rank %d: the assistant: %s\n", comm->rank(),
                       error.c_str());
        float failed = error.empty() ? 0.0f : 1.0f;
        comm->AllReduceSum(&failed, 1);
      }
      continue;
    }
    if (h.kind == kDraft) {
      WireDraft w;
      comm->Broadcast(&w, sizeof w, 0);
      if (!assistant || h.a < 0 || static_cast<size_t>(h.a) >= caches.size() ||
          w.hidden != plan.hidden || h.c < 1)
        return Status::Errorf("tensor-parallel follower: bad draft message (slot ", h.a, ", ", h.c,
                              " tokens, hidden ", w.hidden, ")");
      hidden.resize(static_cast<size_t>(w.hidden));
      comm->Broadcast(hidden.data(), hidden.size() * sizeof(float), 0);
      KvCache* cache = caches[h.a].get();
      cache->set_n_past(w.pos);  // as rank 0's, which may have rolled back since the last step
      // Rank 0 keeps its own tokens; the collectives inside pair up with its Draft.
      (void)assistant->Draft(*cache, h.b, w.pos, hidden.data(), h.c, &drafted, w.min_probability);
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
                                                          const ModelOptions& options,
                                                          const LockstepDraft& draft) {
  if (group_ && followers_.empty()) {
    for (int r = 1; r < group_->size(); ++r)
      followers_.emplace_back([this, r, dir, options, draft] {
        std::unique_ptr<Communicator> comm = group_->Rank(r);
        auto model = LoadModel(dir, options.OnRanks(comm.get()));
        if (!model.ok()) return;  // every rank failed; rank 0 reports it
        Status st = FollowSteps(**model, comm.get(), draft);
        if (!st.ok()) std::fprintf(stderr, "g4 serve: rank %d: %s\n", r, st.message().c_str());
      });
  }
  auto model = LoadModel(dir, options.OnRanks(comm_));
  following_ = model.ok();
  if (model.ok()) hidden_ = (*model)->plan().hidden;
  return model;
}

Status TensorParallelLeader::Start(int slots, int context, int chunk, KvType kv_type,
                                   bool draft_in_lockstep) {
  Header h{kStart, slots, context, chunk, static_cast<int32_t>(kv_type), draft_in_lockstep ? 1 : 0};
  comm_->BroadcastIdle(&h, sizeof h, 0);
  if (!draft_in_lockstep) return OkStatus();
  float failed = 0;
  comm_->AllReduceSum(&failed, 1);
  if (failed > 0)
    return Status::Errorf("--spec mtp with --tp: ", static_cast<int>(failed),
                          " follower rank(s) could not load the assistant (their messages above)");
  draft_in_lockstep_ = true;
  return OkStatus();
}

void TensorParallelLeader::BeforePropose(int slot, const DraftRequest& request) {
  if (!draft_in_lockstep_ || !MtpDrafter::WillDraft(request)) return;
  Header h{kDraft, slot, request.context->back(), request.max_tokens, 0, 0};
  comm_->BroadcastIdle(&h, sizeof h, 0);
  WireDraft w{request.target_cache->n_past(), request.min_probability, hidden_};
  comm_->Broadcast(&w, sizeof w, 0);
  // Broadcast's root only sends: the hidden state is not written.
  comm_->Broadcast(const_cast<float*>(request.target_hidden), sizeof(float) * hidden_, 0);
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

int RunServeFollower(const std::string& dir, const ModelOptions& options,
                     const LockstepDraft& draft) {
  Status st = RunTensorParallel(0, [&](Communicator* comm) -> Status {
    auto model = LoadModel(dir, options.OnRanks(comm));
    if (!model.ok()) return OkStatus();  // every rank failed together; rank 0 reports and exits 1
    return FollowSteps(**model, comm, draft);
  });
  if (st.ok()) return 0;
  std::fprintf(stderr, "g4 serve: %s\n", st.message().c_str());
  return 1;
}

}  // namespace g4
