#include "runtime/scheduler.h"

#include <algorithm>

#include "runtime/generate.h"

namespace g4 {

namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

Scheduler::Scheduler(Model& model, const SchedulerOptions& options, StepListener* listener)
    : model_(model), options_(options), listener_(listener) {
  options_.parallel = std::max(1, options_.parallel);
  options_.context = std::max(2, options_.context);
  options_.max_queue = std::max(0, options_.max_queue);
  options_.prefill_chunk = std::max(1, options_.prefill_chunk);
  options_.max_batch_rows = std::max(1, options_.max_batch_rows);
  // Every cache is allocated up front: no allocation on the hot path, and memory use is known
  // (and reported) before the first request.
  for (int i = 0; i < options_.parallel; ++i)
    slots_.push_back(
        std::make_unique<Slot>(model_.plan(), options_.context, options_.prefill_chunk,
                              options_.kv_type, i));
  // A slot verifies [last, d1..dN] in one call, so N stays below the cache's rows per call.
  options_.draft_max = std::clamp(options_.draft_max, 1, std::max(1, options_.prefill_chunk - 1));
  if (options_.make_drafter && options_.prefill_chunk > 1)
    for (auto& slot : slots_) {
      slot->drafter = options_.make_drafter(slot->index);
      if (slot->drafter && slot->drafter->wants_target_state())
        slot->last_hidden.resize(static_cast<size_t>(model_.plan().hidden));
    }
  thread_ = std::thread([this] { Loop(); });
}

Scheduler::~Scheduler() { Stop(); }

SubmitResult Scheduler::Submit(SequenceRequest request) {
  SubmitResult out;
  const int vocab = model_.plan().vocab;
  if (request.prompt.empty()) {
    out.message = "the prompt is empty";
    return out;
  }
  if (static_cast<int64_t>(request.prompt.size()) >= options_.context) {
    out.message = Str("the prompt has ", request.prompt.size(), " tokens but the context is ",
                      options_.context, " tokens (at least one must be left to generate)");
    return out;
  }
  for (int t : request.prompt) {
    if (t < 0 || t >= vocab) {
      out.message = Str("token id ", t, " is outside the vocabulary [0, ", vocab, ")");
      return out;
    }
  }
  if (request.max_new_tokens < 1) {
    out.message = "max_new_tokens must be at least 1";
    return out;
  }
  for (const auto& prefix : request.forced_prefixes) {
    for (int t : prefix) {
      if (t < 0 || t >= vocab) {
        out.message = Str("forced token id ", t, " is outside the vocabulary [0, ", vocab, ")");
        return out;
      }
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!accepting_ || stop_) {
    out.admission = Admission::kStopped;
    out.message = "the server is shutting down";
    return out;
  }
  // Free slots take sequences at once; max_queue more may wait.
  const size_t free_slots = static_cast<size_t>(std::max(0, options_.parallel - running_));
  if (queue_.size() >= static_cast<size_t>(options_.max_queue) + free_slots) {
    out.admission = Admission::kQueueFull;
    out.message = Str("server busy: ", running_, " sequences running and ", queue_.size(),
                      " queued (limit ", options_.max_queue, ")");
    return out;
  }
  auto handle = std::make_shared<SequenceHandle>();
  handle->id_ = next_id_++;
  queue_.push_back(Pending{std::move(request), handle, Clock::now()});
  out.admission = Admission::kAccepted;
  out.handle = handle;
  wake_.notify_one();
  return out;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s.queued = static_cast<int>(queue_.size());
    s.running = running_;
  }
  s.slots = options_.parallel;
  s.kv_tokens_used = kv_used_.load();
  s.kv_tokens_total = static_cast<int64_t>(options_.parallel) * options_.context;
  for (const auto& slot : slots_) s.kv_bytes += slot->cache.bytes();
  s.steps = steps_.load();
  s.rows = rows_run_.load();
  for (const auto& slot : slots_) s.speculative |= slot->drafter != nullptr;
  s.spec_target_passes = spec_passes_.load();
  s.spec_tokens = spec_tokens_.load();
  s.spec_drafted = spec_drafted_.load();
  s.spec_accepted = spec_accepted_.load();
  s.spec_draft_seconds = static_cast<double>(spec_draft_ns_.load()) * 1e-9;
  return s;
}

void Scheduler::StopAccepting() {
  std::lock_guard<std::mutex> lock(mutex_);
  accepting_ = false;
}

bool Scheduler::WaitIdle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_cv_.wait_until(lock, deadline, [&] { return queue_.empty() && running_ == 0; });
}

void Scheduler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    accepting_ = false;
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::Loop() {
  for (;;) {
    std::vector<std::pair<Pending, std::string>> dropped;  // finished while queued
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty() || running_ > 0; });
      if (stop_) break;
      // Queued sequences whose client left or whose time ran out never take a slot.
      const auto now = Clock::now();
      for (auto it = queue_.begin(); it != queue_.end();) {
        const double timeout = it->request.timeout_seconds;
        if (it->handle->cancelled()) {
          dropped.emplace_back(std::move(*it), "cancelled");
          it = queue_.erase(it);
        } else if (timeout > 0 && Seconds(now - it->submitted) >= timeout) {
          dropped.emplace_back(std::move(*it), "timeout");
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      while (!queue_.empty() && running_ < options_.parallel) {
        Pending pending = std::move(queue_.front());
        queue_.pop_front();
        ++running_;
        lock.unlock();
        Admit(std::move(pending));
        lock.lock();
      }
      if (queue_.empty() && running_ == 0) idle_cv_.notify_all();
    }
    for (auto& [pending, reason] : dropped) {
      SequenceResult result;
      result.finish_reason = reason;
      result.prompt_tokens = static_cast<int>(pending.request.prompt.size());
      result.queue_seconds = Seconds(Clock::now() - pending.submitted);
      if (pending.request.on_done) pending.request.on_done(result);
    }
    if (!dropped.empty()) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (queue_.empty() && running_ == 0) idle_cv_.notify_all();
    }
    bool any_running = false;
    for (const auto& slot : slots_) any_running |= slot->busy;
    if (any_running) Step();
  }
  // Stopping: everything left ends as cancelled.
  for (auto& slot : slots_)
    if (slot->busy) Finish(*slot, "cancelled");
  std::deque<Pending> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left.swap(queue_);
  }
  for (auto& pending : left) {
    SequenceResult result;
    result.finish_reason = "cancelled";
    result.prompt_tokens = static_cast<int>(pending.request.prompt.size());
    if (pending.request.on_done) pending.request.on_done(result);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  idle_cv_.notify_all();
}

void Scheduler::Admit(Pending pending) {
  const std::vector<int>& prompt = pending.request.prompt;
  // Pick a free slot: the one whose cache shares the longest reusable prefix with the prompt,
  // else the first free one.
  Slot* best = nullptr;
  size_t best_common = 0;
  for (auto& slot_ptr : slots_) {
    Slot& slot = *slot_ptr;
    if (slot.busy) continue;
    if (!best) best = &slot;
    if (!options_.prefix_reuse) break;
    size_t common = 0;
    const size_t limit = std::min(slot.cached_tokens.size(), prompt.size() - 1);  // keep >= 1 to run
    while (common < limit && slot.cached_tokens[common] == prompt[common]) ++common;
    if (common > best_common && slot.cache.CanTruncateTo(static_cast<int64_t>(common))) {
      best = &slot;
      best_common = common;
    }
  }
  Slot& slot = *best;  // Loop admits only while a slot is free
  if (best_common > 0) {
    slot.cache.set_n_past(static_cast<int64_t>(best_common));
    slot.cached_tokens.resize(best_common);
  } else {
    slot.cache.Reset();
    slot.cached_tokens.clear();
  }
  slot.busy = true;
  slot.request = std::move(pending.request);
  slot.handle = std::move(pending.handle);
  slot.sampler = std::make_unique<Sampler>(slot.request.sampling, static_cast<float>(model_.plan().softcap),
                                           model_.plan().vocab);
  slot.submitted = pending.submitted;
  slot.admitted = Clock::now();
  slot.first_token = {};
  slot.has_deadline = slot.request.timeout_seconds > 0;
  if (slot.has_deadline)
    slot.deadline = slot.submitted + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(slot.request.timeout_seconds));
  slot.prompt_done = best_common;
  slot.cached = static_cast<int>(best_common);
  slot.generated.clear();
  // The last generated token is never fed back, so context - prompt tokens can be generated.
  const int room = options_.context - static_cast<int>(slot.request.prompt.size());
  slot.max_new = std::max(1, std::min(slot.request.max_new_tokens, room));
  slot.order = next_order_++;
  // Constrained and logprobs sequences draft too: ConstrainDraft masks their verify rows.
  slot.speculate = slot.drafter != nullptr;
  slot.masks.ptrs.clear();
  if (slot.speculate) {
    slot.drafter->Reset();
    slot.draft_len = options_.draft_max;
    slot.context = slot.request.prompt;
    slot.context.reserve(slot.context.size() + static_cast<size_t>(slot.max_new));
  }
}

void Scheduler::Finish(Slot& slot, const std::string& reason, const std::string& error) {
  SequenceResult result;
  result.finish_reason = reason;
  result.error = error;
  result.prompt_tokens = static_cast<int>(slot.request.prompt.size());
  result.cached_tokens = slot.cached;
  result.completion_tokens = static_cast<int>(slot.generated.size());
  const auto now = Clock::now();
  result.queue_seconds = Seconds(slot.admitted - slot.submitted);
  if (!slot.generated.empty()) {
    result.ttft_seconds = Seconds(slot.first_token - slot.submitted);
    result.decode_seconds = Seconds(now - slot.first_token);
  }
  if (reason == "error") {
    // The cache may hold a partial write; never reuse it.
    slot.cache.Reset();
    slot.cached_tokens.clear();
  }
  auto on_done = std::move(slot.request.on_done);
  slot.request = SequenceRequest{};  // drops the callbacks and whatever they hold
  slot.handle.reset();
  slot.sampler.reset();
  slot.masks.forced.clear();
  slot.busy = false;
  if (on_done) on_done(result);
  std::lock_guard<std::mutex> lock(mutex_);
  --running_;
  if (queue_.empty() && running_ == 0) idle_cv_.notify_all();
}

void Scheduler::ProposeDrafts() {
  for (auto& slot_ptr : slots_) {
    Slot& slot = *slot_ptr;
    slot.draft.Clear();
    if (!slot.busy || !slot.speculate || slot.generated.empty()) continue;
    // Room: every emitted token counts against max_new, every row against the context and the
    // cache's rows per call.
    const int64_t past = slot.cache.n_past();
    const int n_max = static_cast<int>(std::min<int64_t>(
        {slot.draft_len, slot.max_new - static_cast<int64_t>(slot.generated.size()) - 1,
         slot.cache.max_context() - past - 1, slot.cache.max_chunk() - 1}));
    if (n_max <= 0) continue;
    const auto t0 = Clock::now();
    Status st;
    if (!ForcedDraft(slot.request.forced_prefixes, slot.generated, n_max, slot.draft)) {
      DraftRequest request;
      request.context = &slot.context;
      request.max_tokens = n_max;
      request.min_probability = options_.draft_p_min;
      request.target_cache = &slot.cache;
      if (!slot.last_hidden.empty()) request.target_hidden = slot.last_hidden.data();
      if (listener_) listener_->BeforePropose(slot.index, request);
      st = slot.drafter->Propose(request, &slot.draft);
    }
    spec_draft_ns_.fetch_add(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
    if (!st.ok()) {
      Finish(slot, "error", "the drafter failed: " + st.message());
      continue;
    }
    if (static_cast<int>(slot.draft.tokens.size()) > n_max) slot.draft.tokens.resize(n_max);
    if (slot.draft.q.size() > slot.draft.tokens.size()) slot.draft.q.resize(slot.draft.tokens.size());
    ConstrainDraft(slot.request.constraint.get(), slot.request.forced_prefixes, slot.generated,
                   model_.plan().vocab, slot.draft, slot.masks);
    // A sampling drafter's q is spread over the vocabulary when a residual is built.
    if (!slot.draft.q.empty() && slot.scratch.q_dense.empty())
      slot.scratch.q_dense.assign(static_cast<size_t>(model_.plan().vocab), 0.0);
  }
}

void Scheduler::Step() {
  const auto now = Clock::now();
  for (auto& slot : slots_) {
    if (!slot->busy) continue;
    if (slot->handle->cancelled()) {
      Finish(*slot, "cancelled");
    } else if (slot->has_deadline && now >= slot->deadline) {
      Finish(*slot, "timeout");
    }
  }
  if (options_.make_drafter) ProposeDrafts();

  // Rows: per generating sequence its decode row and its drafts, then prefill chunks first come
  // first served within the row budget. `owners[i]` is the slot of the i-th group of rows that
  // want logits (1 + drafts for a decoding slot, the chunk's last row for a prefill).
  rows_.clear();
  row_slots_.clear();
  struct Owner {
    Slot* slot;
    int rows;  // logits rows
  };
  std::vector<Owner> owners;
  struct Taken {
    Slot* slot;
    size_t begin, end;
  };
  std::vector<Taken> taken;
  for (auto& slot_ptr : slots_) {
    Slot& slot = *slot_ptr;
    if (!slot.busy || slot.generated.empty()) continue;
    const int64_t past = slot.cache.n_past();
    rows_.push_back(BatchRow{slot.generated.back(), past, &slot.cache, true});
    row_slots_.push_back(slot.index);
    for (size_t i = 0; i < slot.draft.tokens.size(); ++i) {
      rows_.push_back(BatchRow{slot.draft.tokens[i], past + 1 + static_cast<int64_t>(i), &slot.cache, true});
      row_slots_.push_back(slot.index);
    }
    owners.push_back(Owner{&slot, 1 + static_cast<int>(slot.draft.tokens.size())});
  }
  std::vector<Slot*> prefilling;
  for (auto& slot_ptr : slots_)
    if (slot_ptr->busy && slot_ptr->generated.empty()) prefilling.push_back(slot_ptr.get());
  std::sort(prefilling.begin(), prefilling.end(), [](Slot* a, Slot* b) { return a->order < b->order; });
  int budget = options_.max_batch_rows;
  for (Slot* slot : prefilling) {
    const std::vector<int>& prompt = slot->request.prompt;
    const size_t k = std::min<size_t>({prompt.size() - slot->prompt_done,
                                       static_cast<size_t>(options_.prefill_chunk),
                                       static_cast<size_t>(budget)});
    if (k == 0) break;
    const size_t begin = slot->prompt_done, end = begin + k;
    for (size_t i = begin; i < end; ++i) {
      const bool last = i + 1 == prompt.size();
      rows_.push_back(BatchRow{prompt[i], slot->cache.n_past() + static_cast<int64_t>(i - begin),
                               &slot->cache, last});
      row_slots_.push_back(slot->index);
      if (last) owners.push_back(Owner{slot, 1});
    }
    taken.push_back(Taken{slot, begin, end});
    budget -= static_cast<int>(k);
  }
  if (rows_.empty()) return;

  // Logits come back in row order among the rows that want them; decode rows (and drafts) come
  // first and a prefill chunk's only wanted row is its last, so row order == owners order.
  const int vocab = model_.plan().vocab;
  std::vector<size_t> first_row(owners.size());
  size_t logit_rows = 0;
  for (size_t i = 0; i < owners.size(); ++i) {
    first_row[i] = logit_rows;
    logit_rows += static_cast<size_t>(owners[i].rows);
  }
  const size_t need = logit_rows * static_cast<size_t>(vocab);
  if (logits_.size() < need) logits_.resize(need);
  if (listener_) listener_->BeforeForward(rows_, row_slots_);
  Status st = model_.Forward(rows_, act_, owners.empty() ? nullptr : logits_.data());
  steps_.fetch_add(1);
  rows_run_.fetch_add(rows_.size());
  if (!st.ok()) {
    for (auto& slot : slots_)
      if (slot->busy) Finish(*slot, "error", st.message());
    kv_used_.store(0);
    return;
  }
  // The caches now hold the rows' tokens (a slot's rejected drafts are rolled back below).
  for (size_t i = 0; i < rows_.size(); ++i)
    slots_[row_slots_[i]]->cached_tokens.push_back(rows_[i].token);
  for (const Taken& t : taken) t.slot->prompt_done = t.end;

  // Sampling is per row with each slot's own sampler, so rows are sampled in parallel (a pass
  // over the vocabulary per row adds up at 16 rows); callbacks then run in row order. A slot with
  // drafts is verified: VerifyDrafts appends its kept tokens to `generated` (`verified` of them).
  std::vector<TokenInfo> infos(owners.size());
  std::vector<int> verified(owners.size(), 0);
  model_.pool().ParallelFor(static_cast<int64_t>(owners.size()), [&](int64_t i, int) {
    Slot& slot = *owners[i].slot;
    float* logits = logits_.data() + first_row[i] * vocab;
    if (!slot.draft.tokens.empty()) {
      // Logprobs of each verify row, taken while the sampler holds its distribution.
      const int top = slot.request.top_logprobs;
      slot.row_infos.clear();
      auto record = [&](int token) {
        TokenInfo info;
        info.token = token;
        info.logprob = slot.sampler->LogProb(token);
        if (top > 0) info.top = slot.sampler->TopLogProbs(top);
        slot.row_infos.push_back(std::move(info));
      };
      const FunctionRef<void(int)> picked(record);
      verified[i] = VerifyDrafts(*slot.sampler, logits, vocab, slot.draft, slot.generated, slot.scratch,
                                 slot.masks.data(), top >= 0 ? &picked : nullptr);
      return;
    }
    TokenInfo& info = infos[i];
    const uint64_t* allowed = nullptr;
    if (!slot.request.forced_prefixes.empty()) {
      const std::vector<int> ids = AllowedNextTokens(slot.request.forced_prefixes, slot.generated);
      if (!ids.empty()) {
        TokenMaskOf(ids, vocab, &slot.masks.forced);
        allowed = slot.masks.forced.data();
      }
    }
    if (slot.request.constraint && !allowed) {
      if (slot.request.constraint->IsStuck()) {
        info.token = -1;  // no token can continue the grammar: finished below with an error
        return;
      }
      allowed = slot.request.constraint->Mask();
    }
    info.token = slot.sampler->Sample(logits, slot.generated, allowed);
    if (slot.request.top_logprobs >= 0) {
      info.logprob = slot.sampler->LogProb(info.token);
      if (slot.request.top_logprobs > 0) info.top = slot.sampler->TopLogProbs(slot.request.top_logprobs);
    }
  });
  const auto sampled_at = Clock::now();
  for (size_t i = 0; i < owners.size(); ++i) {
    Slot& slot = *owners[i].slot;
    if (verified[i] > 0) {
      EmitVerified(slot, verified[i], first_row[i]);
      continue;
    }
    const TokenInfo& info = infos[i];
    if (info.token < 0) {
      Finish(slot, "error", slot.request.constraint->StuckReason());
      continue;
    }
    // The mask allowed the token, so the grammar accepts it, unless every allowed token had
    // probability 0 (all suppressed) and the sampler fell back to another one.
    if (slot.request.constraint && !slot.request.constraint->Accept(info.token)) {
      Finish(slot, "error", kGrammarSuppressedError);
      continue;
    }
    if (slot.generated.empty()) {
      slot.first_token = sampled_at;
    } else if (slot.speculate) {
      spec_passes_.fetch_add(1);  // a pass without a draft (none found, or no room)
      spec_tokens_.fetch_add(1);
    }
    slot.generated.push_back(info.token);
    if (slot.speculate) {
      slot.context.push_back(info.token);
      KeepHidden(slot, first_row[i]);
    }
    // Once the grammar is complete with nothing left to add, the sequence ends ("stop") without
    // waiting for an end token.
    const bool grammar_done = slot.request.constraint && slot.request.constraint->IsFinished();
    const bool keep_going = !slot.request.on_token || slot.request.on_token(info);
    const auto& stops = slot.request.stop_ids;
    if (!keep_going || grammar_done || std::find(stops.begin(), stops.end(), info.token) != stops.end()) {
      Finish(slot, "stop");
    } else if (static_cast<int>(slot.generated.size()) >= slot.max_new ||
               slot.cache.n_past() >= slot.cache.max_context()) {
      Finish(slot, "length");
    }
  }
  int64_t used = 0;
  for (const auto& slot : slots_)
    if (slot->busy) used += slot->cache.n_past();
  kv_used_.store(used);
}

void Scheduler::KeepHidden(Slot& slot, size_t row) {
  if (slot.last_hidden.empty()) return;
  const size_t H = slot.last_hidden.size();
  std::copy_n(act_.logits_in.begin() + static_cast<std::ptrdiff_t>(row * H), H, slot.last_hidden.begin());
}

void Scheduler::EmitVerified(Slot& slot, int count, size_t hidden) {
  const int n = static_cast<int>(slot.draft.tokens.size());
  const size_t before = slot.generated.size() - static_cast<size_t>(count);
  // The cache holds [last, d1..dn] after `past`; it keeps the rows of every emitted token but the
  // last (the accepted drafts equal the emitted tokens before the target's own).
  const int64_t past = slot.cache.n_past() - n - 1;
  spec_passes_.fetch_add(1);
  spec_drafted_.fetch_add(static_cast<uint64_t>(n));
  spec_accepted_.fetch_add(static_cast<uint64_t>(count - 1));
  if (options_.draft_adaptive)
    slot.draft_len = count - 1 == n ? std::min(options_.draft_max, slot.draft_len + 1)
                                    : std::max(1, slot.draft_len - 1);
  // One token at a time, as without drafting: a stop id, a stop string (on_token returns false)
  // or max_new ends the sequence there and the rest of the accepted tokens are dropped.
  // A constrained sequence's recogniser advances over each emitted token, and a finished grammar
  // ends it, as in plain decoding.
  const char* reason = nullptr;
  const char* error = nullptr;
  int emitted = 0;
  const auto& stops = slot.request.stop_ids;
  grammar::TokenConstraint* constraint = slot.request.constraint.get();
  const bool logprobs = slot.request.top_logprobs >= 0;
  while (emitted < count && !reason) {
    TokenInfo info;
    if (logprobs) info = std::move(slot.row_infos[static_cast<size_t>(emitted)]);
    info.token = slot.generated[before + emitted];
    // The row's mask allowed the token unless all it allowed had probability 0 (see Step).
    if (constraint && !constraint->Accept(info.token)) {
      reason = "error";
      error = kGrammarSuppressedError;
      break;
    }
    ++emitted;
    slot.context.push_back(info.token);
    const bool grammar_done = constraint && constraint->IsFinished();
    const bool keep_going = !slot.request.on_token || slot.request.on_token(info);
    if (!keep_going || grammar_done || std::find(stops.begin(), stops.end(), info.token) != stops.end())
      reason = "stop";
    else if (static_cast<int>(before) + emitted >= slot.max_new)
      reason = "length";
  }
  slot.generated.resize(before + static_cast<size_t>(emitted));
  if (error) {
    Finish(slot, "error", error);
    return;
  }
  if (emitted > 0) KeepHidden(slot, hidden + static_cast<size_t>(emitted - 1));  // the row that gave the last one
  spec_tokens_.fetch_add(static_cast<uint64_t>(emitted));
  if (!slot.cache.RollbackTo(past + emitted)) {
    Finish(slot, "error", Str("internal: the KV cache cannot roll back to ", past + emitted,
                              " positions after a speculative pass"));
    return;
  }
  slot.cached_tokens.resize(static_cast<size_t>(past + emitted));
  if (!reason && slot.cache.n_past() >= slot.cache.max_context()) reason = "length";
  if (reason) Finish(slot, reason);
}

}  // namespace g4
