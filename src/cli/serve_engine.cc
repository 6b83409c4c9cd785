#include "cli/serve_engine.h"

#include <optional>

#include "io/pack.h"
#include "kernels/weight_matrix.h"
#include "model/assistant.h"
#include "model/communicator.h"
#include "model/forward.h"
#include "model/loader.h"
#include "parallel/mpi_communicator.h"
#include "parallel/tp_serve.h"
#include "runtime/draft_model_drafter.h"
#include "runtime/mtp_drafter.h"
#include "runtime/ngram_drafter.h"
#include "server/log.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace g4::cli {
namespace {

class LoadedEngine : public ServingEngine {
 public:
  ~LoadedEngine() override { Shutdown(); }

  Scheduler& scheduler() override { return *scheduler_; }
  const EngineInfo& info() const override { return info_; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  const ChatTemplate& chat_template() const override { return *chat_template_; }

  Status CheckUnchanged() const override {
    const auto& store = model_->weights().store;
    return store ? store->CheckUnchanged() : OkStatus();
  }

  void Shutdown() override {
    if (scheduler_) scheduler_->Stop();
    if (tp_ && !tp_stopped_) {
      tp_stopped_ = true;
      tp_->Stop();  // the followers leave their step loop and exit
      const CommStats& cs = tp_->comm()->stats();
      ServerLog(Str("tensor parallel: ", cs.calls, " collectives, ", cs.seconds, " s in them"));
    }
  }

 private:
  friend Result<std::unique_ptr<ServingEngine>> g4::cli::LoadServingEngine(const ServeModelOptions&,
                                                                           const SchedulerOptions&);
  // Declaration order is destruction order reversed: the scheduler (which calls the model and
  // the leader every step) goes first, then the model (which uses the leader's communicator).
  std::unique_ptr<TensorParallelLeader> tp_;
  bool tp_stopped_ = false;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Model> draft_model_;  // --spec draft: shared by the slots' drafters
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  EngineInfo info_;
  std::unique_ptr<Scheduler> scheduler_;
};

// --spec: one drafter per slot, handed to the scheduler through its options. Prompt lookup needs
// nothing; the assistant (mtp) is loaded once and shared by the slots' drafters, each reading its
// own slot's cache and hidden state; a draft model is loaded once (the target's format and
// threads) and each slot's drafter keeps its own KV cache of the slot's context. Draft-model
// drafters draft greedily whatever a request samples with: a deterministic draft's q is one-hot,
// which speculative sampling allows. Under tensor parallelism the drafters run on rank 0 (the
// scheduler's) and their rows reach the other ranks with the step; an assistant that reads KV
// heads split over the ranks drafts on every rank in lockstep (*draft_in_lockstep, see
// parallel/tp_serve.h).
Status AddDrafters(const SpecFlags& spec, const ModelOptions& load, Model& target,
                   SchedulerOptions* so, std::unique_ptr<Model>* draft_model,
                   bool* draft_in_lockstep) {
  *draft_in_lockstep = false;
  if (!spec.enabled()) return OkStatus();
  G4_RETURN_IF_ERROR(CheckSpecFlags(spec));
  so->draft_max = spec.draft_max;
  so->draft_adaptive = spec.adaptive;
  so->draft_p_min = spec.p_min;
  so->prefill_chunk = ChunkFor(spec, so->prefill_chunk);
  if (spec.spec == "ngram") {
    const int n_min = spec.ngram_min, n_max = spec.ngram_max;
    so->make_drafter = [n_min, n_max](int) { return std::make_unique<NgramDrafter>(n_min, n_max); };
    return OkStatus();
  }
  if (spec.spec == "mtp") {
    G4_ASSIGN_OR_RETURN(
        std::unique_ptr<Assistant> loaded,
        Assistant::Load(spec.draft, target, target.communicator(), DraftQuant(spec)));
    *draft_in_lockstep = loaded->splits_kv();
    std::shared_ptr<Assistant> assistant = std::move(loaded);
    so->make_drafter = [assistant](int) { return std::make_unique<MtpDrafter>(assistant); };
    return OkStatus();
  }
  G4_ASSIGN_OR_RETURN(*draft_model, LoadModel(spec.draft, load));
  auto drafters = std::make_shared<std::vector<std::unique_ptr<Drafter>>>();
  for (int i = 0; i < so->parallel; ++i) {
    G4_ASSIGN_OR_RETURN(std::unique_ptr<DraftModelDrafter> d,
                        DraftModelDrafter::Create(**draft_model, target.plan().vocab, SamplingParams{},
                                                  so->context, so->prefill_chunk));
    drafters->push_back(std::move(d));
  }
  so->make_drafter = [drafters](int slot) {
    return slot < static_cast<int>(drafters->size()) ? std::move((*drafters)[slot]) : nullptr;
  };
  return OkStatus();
}

}  // namespace

LockstepDraft FollowerDraft(const SpecFlags& spec) {
  if (spec.spec != "mtp") return {};
  return LockstepDraft{spec.draft, DraftQuant(spec)};
}

Result<std::unique_ptr<ServingEngine>> LoadServingEngine(const ServeModelOptions& model,
                                                         const SchedulerOptions& scheduler_options) {
  auto engine = std::make_unique<LoadedEngine>();
  ModelOptions mo;
  mo.threads = model.threads;
  if (!ParseWeightType(model.quant, &mo.load.quant))
    return Status::Errorf("unknown weight format '", model.quant, "' (bf16, q8, q4)");
  if (model.tp > 1 || LaunchedByMpi()) {
    G4_ASSIGN_OR_RETURN(engine->tp_, TensorParallelLeader::Create(model.tp));
    G4_ASSIGN_OR_RETURN(engine->model_,
                        engine->tp_->Load(model.model_dir, mo, FollowerDraft(model.spec)));
  } else {
    G4_ASSIGN_OR_RETURN(engine->model_, LoadModel(model.model_dir, mo));
  }
  // MODEL may be a directory or a `g4 pack` artifact: small files are read through io/pack.
  G4_ASSIGN_OR_RETURN(engine->tokenizer_, LoadModelTokenizer(model.model_dir));
  // The checkpoint's own chat template (an artifact carries the one it was packed with).
  G4_ASSIGN_OR_RETURN(ChatTemplate chat_template, ChatTemplate::Load(model.model_dir));
  ServerLog(Str("chat template: ", chat_template.Describe()));
  engine->chat_template_.emplace(std::move(chat_template));
  const ModelPlan& plan = engine->model_->plan();
  EngineInfo& info = engine->info_;
  info.vocab = plan.vocab;
  info.n_layers = plan.n_layers();
  info.max_position_embeddings = plan.config.max_position_embeddings;
  info.eos_token_ids = plan.config.eos_token_ids;
  info.suppress_tokens = plan.config.suppress_tokens;
  info.generation = plan.config.generation;
  SchedulerOptions so = scheduler_options;
  // Before the followers allocate their caches: drafting may raise the rows per call.
  bool draft_in_lockstep = false;
  G4_RETURN_IF_ERROR(
      AddDrafters(model.spec, mo, *engine->model_, &so, &engine->draft_model_, &draft_in_lockstep));
  if (engine->tp_)
    G4_RETURN_IF_ERROR(engine->tp_->Start(so.parallel, so.context, so.prefill_chunk, so.kv_type,
                                          draft_in_lockstep));
  if (model.spec.enabled())
    ServerLog(Str(
        "speculative decoding: ", model.spec.spec,
        model.spec.spec != "ngram" ? " (" + model.spec.draft + ")" : "", ", up to ", so.draft_max,
        " drafted tokens per slot and step", so.draft_adaptive ? " (adaptive)" : "",
        so.draft_p_min > 0 ? Str(", drafting tokens of probability >= ", so.draft_p_min) : ""));
  engine->scheduler_ = std::make_unique<Scheduler>(*engine->model_, so, engine->tp_.get());
  return std::unique_ptr<ServingEngine>(std::move(engine));
}

}  // namespace g4::cli
