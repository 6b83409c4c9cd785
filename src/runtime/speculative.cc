#include "runtime/speculative.h"

#include <algorithm>
#include <chrono>

#include "runtime/constrained_draft.h"

namespace g4 {

namespace {

// max(0, p - q) over p's support, normalised; q is one-hot at `rejected` when the drafter is
// deterministic (`q` null). Empty when p <= q everywhere (the draft could not have been rejected).
void Residual(const TokenDistribution& p, const TokenDistribution* q, int rejected,
              VerifyScratch& s) {
  s.residual.ids.clear();
  s.residual.probs.clear();
  if (q) {
    if (s.q_dense.empty()) return;
    for (size_t i = 0; i < q->ids.size(); ++i) s.q_dense[q->ids[i]] = q->probs[i];
  }
  double total = 0;
  for (size_t i = 0; i < p.ids.size(); ++i) {
    const int id = p.ids[i];
    const double qx = q ? s.q_dense[id] : (id == rejected ? 1.0 : 0.0);
    const double r = p.probs[i] - qx;
    if (r <= 0) continue;
    s.residual.ids.push_back(id);
    s.residual.probs.push_back(r);
    total += r;
  }
  if (q)
    for (int id : q->ids) s.q_dense[id] = 0;
  for (double& r : s.residual.probs) r /= total;
}

}  // namespace

int VerifyDrafts(Sampler& sampler, float* logits, int vocab, const Draft& draft,
                 std::vector<int>& generated, VerifyScratch& scratch,
                 const uint64_t* const* row_masks, const FunctionRef<void(int token)>* picked) {
  const int n = static_cast<int>(draft.tokens.size());
  auto row = [&](int i) { return logits + static_cast<size_t>(i) * vocab; };
  auto mask = [&](int i) { return row_masks ? row_masks[i] : nullptr; };
  auto append = [&](int token) {
    generated.push_back(token);
    if (picked) (*picked)(token);
  };
  if (sampler.params().greedy()) {
    // The target's own pick at each row; a draft survives while it agrees.
    for (int i = 0;; ++i) {
      const int token = sampler.Sample(row(i), generated, mask(i));
      append(token);
      if (i == n || token != draft.tokens[i]) return i + 1;
    }
  }
  for (int i = 0; i < n; ++i) {
    sampler.Distribution(row(i), generated, &scratch.p, mask(i));
    const int d = draft.tokens[i];
    const double pd = scratch.p.ProbOf(d);
    const TokenDistribution* q = draft.q.empty() ? nullptr : &draft.q[i];
    const double qd = q ? q->ProbOf(d) : 1.0;
    // Accept with probability min(1, p(d) / q(d)).
    if (pd > 0 && (pd >= qd || sampler.Uniform() * qd < pd)) {
      append(d);
      continue;
    }
    Residual(scratch.p, q, d, scratch);
    append(scratch.residual.ids.empty() ? sampler.Draw(scratch.p) : sampler.Draw(scratch.residual));
    return i + 1;
  }
  sampler.Distribution(row(n), generated, &scratch.p, mask(n));
  append(sampler.Draw(scratch.p));
  return n + 1;
}

Result<GenerateResult> GenerateSpeculative(Model& model, KvCache& cache,
                                           const std::vector<int>& prompt,
                                           const GenerateOptions& options, Drafter& drafter,
                                           const SpeculativeOptions& spec,
                                           const std::function<bool(int)>& on_token) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  if (spec.draft_max < 1) return Status::Errorf("draft max must be at least 1, not ", spec.draft_max);
  if (spec.draft_max >= cache.max_chunk())
    return Status::Errorf("a draft of ", spec.draft_max, " tokens needs a KV cache taking ",
                          spec.draft_max + 1, " rows per call; this one takes ", cache.max_chunk());
  const int V = model.plan().vocab;
  GenerateResult result;
  result.prompt_tokens = static_cast<int>(prompt.size());
  Sampler sampler(options.sampling, static_cast<float>(model.plan().softcap), V);
  Activations act;
  model.ReserveActivations(act, spec.draft_max + 1, cache.max_context());
  const auto t0 = Clock::now();
  G4_ASSIGN_OR_RETURN(std::vector<float> first,
                      Prefill(model, cache, prompt, options.prefill_chunk, false, act));
  result.prefill_seconds = since(t0);
  const auto t1 = Clock::now();
  result.finish_reason = "length";

  // Everything the loop needs is sized here: decoding allocates nothing per token.
  const int max_new = std::max(0, options.max_new_tokens);
  const size_t room = static_cast<size_t>(
      std::clamp<int64_t>(max_new, 0, cache.max_context() - cache.n_past() + 1));
  std::vector<float> logits(static_cast<size_t>(spec.draft_max + 1) * V);
  std::copy(first.begin(), first.end(), logits.begin());
  std::vector<int> context;
  const size_t earlier = spec.cached ? spec.cached->size() : 0;
  context.reserve(earlier + prompt.size() + room);
  if (spec.cached) context = *spec.cached;
  context.insert(context.end(), prompt.begin(), prompt.end());
  result.tokens.reserve(room + spec.draft_max + 1);
  Draft draft;
  draft.tokens.reserve(static_cast<size_t>(spec.draft_max));
  VerifyScratch scratch;
  if (!options.sampling.greedy()) scratch.q_dense.assign(static_cast<size_t>(V), 0.0);
  std::vector<BatchRow> rows;
  rows.reserve(static_cast<size_t>(spec.draft_max + 1));
  Communicator* comm = model.communicator();
  std::vector<int> shared(static_cast<size_t>(spec.draft_max + 2));
  int draft_len = spec.draft_max;
  // The assistant drafter's input: the final-normed hidden of the row that gave the last token.
  const int H = model.plan().hidden;
  std::vector<float> last_hidden(drafter.wants_target_state() ? H : 0);
  if (!last_hidden.empty()) std::copy_n(act.logits_in.begin(), H, last_hidden.begin());
  bool prefilled = true;  // logits row 0 is the prompt's: the first token needs no pass
  // Constrained output: drafts are cut where the grammar rejects them and each verify row samples
  // under the mask of its own state (runtime/constrained_draft.h), as plain Generate would.
  grammar::TokenConstraint* constraint = options.constraint;
  const std::vector<std::vector<int>> no_prefixes;
  DraftMasks masks;
  if (constraint) {
    masks.rows.resize(static_cast<size_t>(spec.draft_max + 1) * ((static_cast<size_t>(V) + 63) / 64));
    masks.ptrs.reserve(static_cast<size_t>(spec.draft_max + 1));
  }
  const uint64_t* row0_mask = nullptr;  // an undrafted pass's one row
  if (max_new == 0) return result;

  for (;;) {
    const int64_t past = cache.n_past();
    draft.Clear();
    if (constraint && constraint->IsStuck())
      return Status::Error(constraint->StuckReason());
    if (!prefilled) {
      // Room: every emitted token counts against max_new, every fed row against the context.
      const int n_max = static_cast<int>(std::min<int64_t>(
          {draft_len, max_new - static_cast<int64_t>(result.tokens.size()) - 1,
           cache.max_context() - past - 1}));
      if (n_max > 0) {
        const auto td = Clock::now();
        DraftRequest request;
        request.context = &context;
        request.max_tokens = n_max;
        request.min_probability = spec.draft_p_min;
        request.target_cache = &cache;
        if (!last_hidden.empty()) request.target_hidden = last_hidden.data();
        G4_RETURN_IF_ERROR(drafter.Propose(request, &draft));
        if (static_cast<int>(draft.tokens.size()) > n_max) draft.tokens.resize(n_max);
        result.draft_seconds += since(td);
      }
      if (comm) {
        // Rank 0's draft is every rank's: all must run the same rows.
        shared[0] = static_cast<int>(draft.tokens.size());
        std::copy(draft.tokens.begin(), draft.tokens.end(), shared.begin() + 1);
        comm->Broadcast(shared.data(), sizeof(int) * shared.size(), 0);
        draft.tokens.assign(shared.begin() + 1, shared.begin() + 1 + shared[0]);
        // Rank 0 decides (broadcast below): another rank's q need not match these tokens.
        if (draft.q.size() != draft.tokens.size()) draft.q.clear();
      }
      ConstrainDraft(constraint, no_prefixes, result.tokens, V, draft, masks);
      rows.clear();
      rows.push_back(BatchRow{context.back(), past, &cache, true});
      for (size_t i = 0; i < draft.tokens.size(); ++i)
        rows.push_back(BatchRow{draft.tokens[i], past + 1 + static_cast<int64_t>(i), &cache, true});
      G4_RETURN_IF_ERROR(model.Forward(rows, act, logits.data()));
      ++result.target_passes;
    }
    const size_t before = result.tokens.size();
    const uint64_t* const* row_masks = masks.data();
    if (constraint && !row_masks) {
      row0_mask = constraint->Mask();
      row_masks = &row0_mask;
    }
    int count = VerifyDrafts(sampler, logits.data(), V, draft, result.tokens, scratch, row_masks);
    if (comm) {
      // Rank 0's choices are everyone's (an unseeded sampler differs per rank).
      shared[0] = count;
      std::copy(result.tokens.begin() + before, result.tokens.end(), shared.begin() + 1);
      comm->Broadcast(shared.data(), sizeof(int) * shared.size(), 0);
      count = shared[0];
      result.tokens.resize(before);
      result.tokens.insert(result.tokens.end(), shared.begin() + 1, shared.begin() + 1 + count);
    }
    const int n = static_cast<int>(draft.tokens.size());
    result.drafted += n;
    result.accepted += count - 1;
    if (spec.adaptive && n > 0)
      draft_len = count - 1 == n ? std::min(spec.draft_max, draft_len + 1) : std::max(1, draft_len - 1);

    bool done = false;
    int emitted = 0;
    while (emitted < count && !done) {
      const int token = result.tokens[before + emitted++];
      // The row's mask allowed the token, unless every allowed token had probability 0.
      if (constraint && !constraint->Accept(token))
        return Status::Error(kGrammarSuppressedError);
      context.push_back(token);
      const bool is_stop = !options.ignore_eos && std::find(options.stop_ids.begin(),
                                                            options.stop_ids.end(), token) !=
                                                      options.stop_ids.end();
      // 0: cancelled, 1: go on, 2: the grammar is done (rank 0's decides, as in Generate).
      int keep_going = on_token ? on_token(token) : 1;
      if (keep_going && constraint && constraint->IsFinished()) keep_going = 2;
      if (comm) comm->Broadcast(&keep_going, sizeof keep_going, 0);
      if (!keep_going) {
        result.finish_reason = "cancelled";
        done = true;
      } else if (is_stop || keep_going == 2) {
        result.finish_reason = "stop";
        done = true;
      }
    }
    result.tokens.resize(before + emitted);
    // Row emitted - 1 of the pass gave the last emitted token (row 0 of the prefill's one row).
    if (!last_hidden.empty() && !prefilled)
      std::copy_n(act.logits_in.begin() + static_cast<size_t>(emitted - 1) * H, H,
                  last_hidden.begin());
    // The cache keeps the rows of every emitted token but the last: [last, d1 .. d(emitted-1)].
    if (!prefilled && !cache.RollbackTo(past + emitted))
      return Status::Errorf("internal: the KV cache cannot roll back to ", past + emitted,
                            " positions after a speculative pass");
    prefilled = false;
    if (done || static_cast<int>(result.tokens.size()) >= max_new) break;
    if (cache.n_past() >= cache.max_context()) break;  // context full: "length"
  }
  result.decode_seconds = since(t1);
  return result;
}

}  // namespace g4
