// Continuous batching over a fixed set of slots. Each slot owns a KvCache; a dedicated engine
// thread runs the loop: admit queued sequences into free slots, then build ONE Model::Forward
// call holding one decode row per running sequence plus prefill chunks of newly admitted ones
// (weights are read once per step for all of them), sample every row with its own Sampler and
// hand tokens to per-sequence callbacks. Sequences join and leave at every step.
//
// The engine's math is per row, so batching never changes a sequence's result: greedy output is
// the same token for token alone or among others (scheduler_test checks this).
//
// Speculative decoding (SchedulerOptions::make_drafter): each decoding slot with a drafter
// proposes up to draft_max tokens; its rows [last, d1..dN] join the step's one forward pass with
// logits for each, VerifyDrafts (runtime/speculative.h) keeps what the slot's own sampler agrees
// with, and the slot's cache rolls back past the rejected rows. Tokens reach the callbacks one by
// one, so stop strings and max_new_tokens cut exactly where they would without drafting.
// Constrained sequences draft too: a draft is cut at the first token the grammar (or forced
// prefix) would reject, each verify row samples under the mask of the state after the drafts
// before it, and the recogniser advances over the kept tokens only, so greedy output is plain
// constrained decoding's. While a forced prefix has one next token, that token is the draft.
// Logprobs come from the verify rows (the target's own logits).
// A drafter that reads the target (the assistant, runtime/mtp_drafter.h) gets the slot's own cache
// and the hidden state of the slot's row that gave its last token.
//
// Threads: Submit/Cancel/stats may be called from any thread. Callbacks run on the engine thread
// and must be quick (detokenize, match stops, hand text to the waiting HTTP thread).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/forward.h"
#include "model/kv_cache.h"
#include "grammar/token_mask.h"
#include "runtime/constrained_draft.h"
#include "runtime/drafter.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"

namespace g4 {

// One generated token and, when asked, its log-probability and the most likely alternatives
// (under the distribution it was sampled from).
struct TokenInfo {
  int token = 0;
  double logprob = 0;
  std::vector<std::pair<int, double>> top;
};

struct SequenceResult {
  // "stop" (eos id or the callback asked to stop), "length" (max_new_tokens or context full),
  // "timeout", "cancelled" (client went away), "error".
  std::string finish_reason;
  std::string error;  // set when finish_reason == "error"
  int prompt_tokens = 0;
  int cached_tokens = 0;  // prompt tokens reused from the slot's cache (prefix reuse)
  int completion_tokens = 0;
  double queue_seconds = 0;  // submit -> admitted into a slot
  double ttft_seconds = 0;   // submit -> first token sampled (0 if none)
  double decode_seconds = 0; // first token -> last token
};

struct SequenceRequest {
  std::vector<int> prompt;  // must be non-empty and shorter than the slot context
  int max_new_tokens = 16;  // capped to the room left in the context
  SamplingParams sampling;
  std::vector<int> stop_ids;  // usually the model's eos ids; the stop token is reported
  int top_logprobs = -1;      // < 0: no logprobs; >= 0: logprob of each token + k alternatives
  double timeout_seconds = 0; // 0: none; counted from Submit
  // Constrained start (e.g. a forced tool call): when non-empty, the generated tokens must begin
  // with one of these sequences; tokens that continue none of them are masked out before
  // sampling. Once one is complete, sampling is free.
  std::vector<std::vector<int>> forced_prefixes;
  // Constrained output (structured outputs, strict tool calls): every token is drawn from the
  // constraint's mask, and the sequence ends ("stop") once the grammar is complete and nothing
  // may follow. Owned by this sequence (it holds the recogniser state). With forced_prefixes
  // too, the prefix decides the first tokens (the grammar must accept them: else the sequence
  // ends with an error) and the grammar the rest. Running out of max_new_tokens first gives
  // "length".
  std::shared_ptr<grammar::TokenConstraint> constraint;
  // Per generated token, on the engine thread. Return false to end the sequence ("stop"),
  // e.g. when a stop string matched.
  std::function<bool(const TokenInfo&)> on_token;
  // Exactly once per accepted sequence, on the engine thread. A rejected Submit calls nothing.
  std::function<void(const SequenceResult&)> on_done;
};

// What a caller holds to cancel its sequence (e.g. when the client disconnects).
class SequenceHandle {
 public:
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  uint64_t id() const { return id_; }

 private:
  friend class Scheduler;
  std::atomic<bool> cancelled_{false};
  uint64_t id_ = 0;
};

enum class Admission { kAccepted, kQueueFull, kInvalid, kStopped };

struct SubmitResult {
  Admission admission = Admission::kInvalid;
  std::string message;  // why not accepted
  std::shared_ptr<SequenceHandle> handle;
};

struct SchedulerOptions {
  int parallel = 1;         // slots, i.e. sequences running at once
  int context = 4096;       // tokens per slot (prompt + generated)
  int max_queue = 64;       // waiting sequences beyond the running ones; more -> kQueueFull
  int prefill_chunk = 64;   // rows of one sequence per step (the cache's max_chunk)
  int max_batch_rows = 256; // prefill rows per step across sequences (decode rows always run)
  bool prefix_reuse = true; // keep a free slot's cache and reuse its common prefix
  KvType kv_type = KvType::kF32;  // the slots' cache element format (--kv-type)
  // Speculative decoding: called once per slot (0 .. parallel-1) by the constructor; a slot whose
  // drafter is null decodes plainly. Unset: no speculation.
  std::function<std::unique_ptr<Drafter>(int slot)> make_drafter;
  int draft_max = 4;  // tokens drafted per slot and step; capped below prefill_chunk (a slot's rows)
  bool draft_adaptive = false;  // one fewer after a rejection, one more after a full acceptance
  float draft_p_min = 0;        // drafters stop before a token they give less probability
};

struct SchedulerStats {
  int queued = 0;
  int running = 0;
  int slots = 0;
  int64_t kv_tokens_used = 0;   // positions held by running sequences
  int64_t kv_tokens_total = 0;  // slots * context
  size_t kv_bytes = 0;          // allocated cache memory
  uint64_t steps = 0;           // Forward calls so far
  uint64_t rows = 0;            // rows run so far
  // Speculative decoding (all 0 without it). A target pass is one slot's decode step with
  // speculation on (a step carrying several slots counts once per slot); it yields 1 + the
  // accepted drafts of that slot.
  bool speculative = false;
  uint64_t spec_target_passes = 0;
  uint64_t spec_tokens = 0;    // tokens those passes produced
  uint64_t spec_drafted = 0;   // drafted tokens verified
  uint64_t spec_accepted = 0;  // of which the target kept
  double spec_draft_seconds = 0;  // time spent proposing (on the engine thread)
};

// Sees every step before it runs, on the engine thread: the rows and each row's slot index
// (0 .. parallel-1). Tensor-parallel serving uses it on rank 0 to send the step to the other
// ranks, which run the same Forward on their own slices and caches (parallel/tp_serve.h).
class StepListener {
 public:
  virtual ~StepListener() = default;
  virtual void BeforeForward(const std::vector<BatchRow>& rows,
                             const std::vector<int>& row_slots) = 0;
  // Sees each call of a slot's drafter before it proposes. Tensor-parallel serving sends it on
  // when the assistant drafts on every rank in lockstep (its KV heads are split over them).
  virtual void BeforePropose(int /*slot*/, const DraftRequest& /*request*/) {}
};

class Scheduler {
 public:
  // `listener`, if given, must outlive the scheduler.
  Scheduler(Model& model, const SchedulerOptions& options, StepListener* listener = nullptr);
  ~Scheduler();  // Stop(): cancels what is left and joins the engine thread
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  SubmitResult Submit(SequenceRequest request);
  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }

  // Refuse new sequences; the running and queued ones go on. Returns at once.
  void StopAccepting();
  // Blocks until nothing is queued or running, or the deadline passes; true if idle.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  // Cancels everything and joins the engine thread.
  void Stop();

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    SequenceRequest request;
    std::shared_ptr<SequenceHandle> handle;
    Clock::time_point submitted;
  };
  struct Slot {
    KvCache cache;
    std::vector<int> cached_tokens;  // tokens whose K/V the cache holds, [0, n_past)
    bool busy = false;
    // The running sequence.
    SequenceRequest request;
    std::shared_ptr<SequenceHandle> handle;
    std::unique_ptr<Sampler> sampler;
    Clock::time_point submitted, admitted, first_token, deadline;
    bool has_deadline = false;
    size_t prompt_done = 0;  // prompt tokens already in the cache
    int cached = 0;
    std::vector<int> generated;
    int max_new = 0;
    uint64_t order = 0;  // admission order, so prefill goes first come first served
    int index = 0;       // in slots_
    // Speculative decoding: the slot's drafter (null: none), whether this sequence drafts, the
    // drafter's view (prompt + generated), this step's proposal and verification scratch.
    std::unique_ptr<Drafter> drafter;
    bool speculate = false;
    int draft_len = 0;
    std::vector<int> context;
    Draft draft;
    VerifyScratch scratch;
    // For a drafter that reads the target (the assistant): the final-normed hidden state of the
    // row that gave generated.back() ([hidden]; empty for the other drafters).
    std::vector<float> last_hidden;
    // Constrained drafting: each verify row's mask (runtime/constrained_draft.h); the kept
    // tokens' logprobs, one per verify row.
    DraftMasks masks;
    std::vector<TokenInfo> row_infos;
    Slot(const ModelPlan& plan, int context, int chunk, KvType kv_type, int index)
        : cache(plan, context, chunk, kv_type), index(index) {}
  };

  void Loop();
  void Admit(Pending pending);
  void Step();
  // Each speculating slot's proposal for this step into slot.draft (cleared for the others).
  void ProposeDrafts();
  // Hands a verified slot's `count` new tokens (the tail of slot.generated) to its callbacks,
  // rolls its cache back past the rejected drafts and ends it where a token says so.
  // `hidden` is the slot's first logits row in act_.logits_in (the hidden of row k gave the
  // (k+1)-th emitted token).
  void EmitVerified(Slot& slot, int count, size_t hidden);
  // Keeps logits row `row`'s hidden state as the slot's last_hidden, if its drafter wants it.
  void KeepHidden(Slot& slot, size_t row);
  void Finish(Slot& slot, const std::string& reason, const std::string& error = "");

  Model& model_;
  SchedulerOptions options_;
  StepListener* listener_;
  std::vector<std::unique_ptr<Slot>> slots_;
  Activations act_;
  std::vector<float> logits_;
  std::vector<BatchRow> rows_;
  std::vector<int> row_slots_;  // slot index of each row

  mutable std::mutex mutex_;
  std::condition_variable wake_;     // engine thread: work arrived or stop
  std::condition_variable idle_cv_;  // WaitIdle
  std::deque<Pending> queue_;
  bool accepting_ = true;
  bool stop_ = false;
  int running_ = 0;
  uint64_t next_id_ = 1;
  uint64_t next_order_ = 0;
  std::atomic<int64_t> kv_used_{0};
  std::atomic<uint64_t> steps_{0}, rows_run_{0};
  std::atomic<uint64_t> spec_passes_{0}, spec_tokens_{0}, spec_drafted_{0}, spec_accepted_{0};
  std::atomic<uint64_t> spec_draft_ns_{0};
  std::thread thread_;
};

}  // namespace g4
