#include "runtime/draft_model_drafter.h"

#include <algorithm>
#include <cmath>

namespace g4 {

namespace {

SamplingParams DrafterSampling(SamplingParams params) {
  // Its own stream of draws: the target's generator decides acceptance.
  if (params.has_seed) params.seed ^= 0x9e3779b97f4a7c15ull;
  return params;
}

}  // namespace

Result<std::unique_ptr<DraftModelDrafter>> DraftModelDrafter::Create(
    Model& draft, int target_vocab, const SamplingParams& sampling, int context, int max_chunk) {
  if (draft.plan().vocab != target_vocab)
    return Status::Errorf("the draft model ", draft.dir(), " has a vocabulary of ",
                          draft.plan().vocab, " tokens but the target has ", target_vocab,
                          ": a draft model must share the target's tokenizer");
  if (draft.communicator())
    return Status::Error("a draft model cannot run tensor parallel");
  return std::unique_ptr<DraftModelDrafter>(
      new DraftModelDrafter(draft, sampling, context, max_chunk));
}

DraftModelDrafter::DraftModelDrafter(Model& draft, const SamplingParams& sampling, int context,
                                     int max_chunk)
    : model_(draft),
      cache_(draft.plan(), context, max_chunk),
      sampler_(DrafterSampling(sampling), static_cast<float>(draft.plan().softcap),
               draft.plan().vocab),
      logits_(draft.plan().vocab) {
  cached_.reserve(static_cast<size_t>(cache_.max_context()));
  model_.ReserveActivations(act_, cache_.max_chunk(), cache_.max_context());
  rows_.reserve(static_cast<size_t>(cache_.max_chunk()));
  history_.reserve(static_cast<size_t>(cache_.max_chunk()));
}

void DraftModelDrafter::Reset() {
  sampler_ = Sampler(sampler_.params(), static_cast<float>(model_.plan().softcap),
                     model_.plan().vocab);  // a new conversation draws as a fresh drafter does
  cache_.Reset();
  cached_.clear();
}

Status DraftModelDrafter::Feed(const std::vector<int>& ids, size_t begin, size_t end) {
  const size_t chunk = static_cast<size_t>(cache_.max_chunk());
  for (size_t start = begin; start < end; start += chunk) {
    const size_t stop = std::min(end, start + chunk);
    rows_.clear();
    for (size_t i = start; i < stop; ++i)
      rows_.push_back(BatchRow{ids[i], cache_.n_past() + static_cast<int64_t>(i - start), &cache_,
                               i + 1 == end});
    G4_RETURN_IF_ERROR(model_.Forward(rows_, act_, stop == end ? logits_.data() : nullptr));
    cached_.insert(cached_.end(), ids.begin() + start, ids.begin() + stop);
  }
  return OkStatus();
}

Status DraftModelDrafter::Propose(const DraftRequest& request, Draft* draft) {
  draft->Clear();
  const std::vector<int>& ctx = *request.context;
  if (ctx.empty() || request.max_tokens <= 0) return OkStatus();
  // Keep the cached prefix the context still agrees with (the accepted drafts), never all of the
  // context: its last token must run to give the next logits.
  size_t common = 0;
  const size_t limit = std::min(cached_.size(), ctx.size() - 1);
  while (common < limit && cached_[common] == ctx[common]) ++common;
  if (!cache_.RollbackTo(static_cast<int64_t>(common))) {
    cache_.Reset();
    common = 0;
  }
  cached_.resize(common);
  if (static_cast<int64_t>(ctx.size()) > cache_.max_context()) return OkStatus();
  G4_RETURN_IF_ERROR(Feed(ctx, common, ctx.size()));
  history_.clear();
  const int n = static_cast<int>(
      std::min<int64_t>(request.max_tokens, cache_.max_context() - cache_.n_past() + 1));
  if (!sampler_.params().greedy() && draft->q.size() < static_cast<size_t>(n))
    draft->q.resize(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    int token;
    const float p_min = request.min_probability;
    if (sampler_.params().greedy()) {
      token = sampler_.Sample(logits_.data(), history_);  // the most likely token
      if (p_min > 0 && std::exp(sampler_.LogProb(token)) < p_min) break;
    } else {
      TokenDistribution& q = draft->q[k];
      sampler_.Distribution(logits_.data(), history_, &q);
      // Decided on the distribution (most likely id first), before the draw.
      if (p_min > 0 && (q.probs.empty() || q.probs.front() < p_min)) break;
      token = sampler_.Draw(q);
    }
    draft->tokens.push_back(token);
    history_.push_back(token);
    if (k + 1 < n) G4_RETURN_IF_ERROR(Feed(draft->tokens, draft->tokens.size() - 1, draft->tokens.size()));
  }
  if (!draft->q.empty()) draft->q.resize(draft->tokens.size());
  return OkStatus();
}

}  // namespace g4
