#include "model/assistant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "base/half.h"
#include "io/safetensors.h"
#include "kernels/cpu_kernels.h"
#include "kernels/gather_dot.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"
#include "model/assistant_weights.h"

namespace g4 {
namespace {

// The softmax probability of the largest of n scores: 1 / sum(exp(s - max)). NaN scores count
// for nothing, as in ArgMax.
double TopProbability(const float* scores, int64_t n) {
  const float best = scores[ArgMax(scores, n)];
  if (!(best > -std::numeric_limits<float>::infinity())) return 0;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    if (scores[i] > -std::numeric_limits<float>::infinity())
      sum += std::exp(static_cast<double>(scores[i]) - best);
  return 1 / sum;
}

}  // namespace

Result<std::unique_ptr<Assistant>> Assistant::Load(const std::string& dir, Model& target,
                                                   Communicator* lockstep, WeightType quant) {
  if (quant != WeightType::kBF16 && quant != WeightType::kQ8 && quant != WeightType::kQ4)
    return Status::Error("the assistant's matrices load as bf16 (as shipped), q8 or q4");
  G4_ASSIGN_OR_RETURN(AssistantConfig config, LoadAssistantConfig(dir));
  G4_ASSIGN_OR_RETURN(AssistantPlan plan, BuildAssistantPlan(config, target.plan()));
  if (target.weights().embed_table == nullptr && target.weights().embed.rows != target.plan().vocab)
    return Status::Errorf("the assistant drafter needs the target's whole embedding table");
  bool splits_kv = false;
  for (const LayerPlan& lp : plan.layers) {
    if (!LayerSplitsKv(lp)) continue;
    splits_kv = true;
    if (!lockstep)
      return Status::Errorf(
          "the assistant reads all ", lp.n_heads_q / lp.group_size, " KV heads of target layer ",
          lp.kv_source, ", which tensor parallelism splits over the ranks (this rank holds ",
          lp.n_heads_kv, "); it drafts alone here, so it needs them all on one rank");
  }
  std::unique_ptr<Assistant> a(new Assistant(target, std::move(plan)));
  if (lockstep && lockstep->size() > 1) {
    a->lockstep_ = lockstep;
    a->splits_kv_ = splits_kv;
  }
  G4_RETURN_IF_ERROR(a->Bind(dir, quant));
  return a;
}

Status Assistant::Bind(const std::string& path, WeightType quant) {
  const AssistantPlan& p = plan_;
  layers_.resize(p.layers.size());
  if (IsPackFile(path)) {
    G4_ASSIGN_OR_RETURN(auto pack, PackFile::Open(path));
    G4_ASSIGN_OR_RETURN(const WeightType packed, PackedAssistantQuant(*pack));
    if (quant != WeightType::kBF16 && quant != packed)
      return Status::Errorf(path, ": the assistant artifact holds ", WeightTypeName(packed),
                            " matrices but --draft-quant ", WeightTypeName(quant),
                            " was asked for; an artifact is never converted at load: run `g4 "
                            "pack --quant ",
                            WeightTypeName(quant),
                            "` on the assistant's checkpoint (or drop --draft-quant)");
    G4_RETURN_IF_ERROR(pack->VerifyAll(&target_.pool()));
    for (const AssistantTensor& t : AssistantTensors(p.config)) {
      G4_ASSIGN_OR_RETURN(AssistantWeight w, ReadPackedAssistantWeight(*pack, t, p.config, packed));
      G4_RETURN_IF_ERROR(Install(t, std::move(w)));
    }
  } else {
    G4_ASSIGN_OR_RETURN(auto store, TensorStore::OpenDir(path));
    for (const AssistantTensor& t : AssistantTensors(p.config)) {
      G4_ASSIGN_OR_RETURN(AssistantWeight w,
                          ReadAssistantWeight(*store, t, p.config, quant, &target_.pool(), path));
      G4_RETURN_IF_ERROR(Install(t, std::move(w)));
    }
  }
  if (p.centroid_head()) ClusterTable();

  // RoPE frequencies per layer (the target's tables: same theta, pairs and head dim).
  int max_q = 0, max_hd = 0, max_heads = 0;
  for (const LayerPlan& lp : p.layers) {
    std::vector<double> f(lp.rope_pairs);
    for (int j = 0; j < lp.rope_pairs; ++j)
      f[j] = std::pow(lp.rope_theta, -2.0 * j / lp.head_dim);
    inv_freq_.push_back(std::move(f));
    max_q = std::max(max_q, lp.q_dim());
    max_hd = std::max(max_hd, lp.head_dim);
    max_heads = std::max(max_heads, lp.n_heads_q);
  }
  const int Ha = p.hidden, Hb = p.backbone_hidden;
  in_.resize(2 * Hb);
  embed_row_bytes_.resize(RowLookupScratchBytes(EmbeddingTable(target_.weights(), Hb)));
  x_.resize(Ha);
  a_.resize(Ha);
  o_.resize(Ha);
  z_.resize(Ha);
  q_.resize(max_q);
  attn_.resize(max_q);
  gate_.resize(p.mlp_width);
  up_.resize(p.mlp_width);
  next_h_.resize(Hb);
  chain_h_.resize(Hb);
  step_logits_.resize(p.vocab);
  scores_.resize(p.config.num_centroids);
  kth_.resize(p.config.num_centroids);
  top_.resize(p.centroid_head() ? p.config.centroid_top_k : 0);
  const size_t n_candidates =
      p.centroid_head() ? static_cast<size_t>(p.config.centroid_top_k) * p.cluster_size() : 0;
  candidates_.resize(n_candidates);
  candidate_rows_.resize(n_candidates);
  cos_.resize(max_hd / 2);
  sin_.resize(max_hd / 2);
  // The weights one step reads (the dense head's table aside): a small assistant's step runs on
  // the calling thread. The default assistant's 2.7 MiB step, 2 threads on the loaded VM: 2.2 ms
  // through the target's pool (~25 hand-offs, each waiting for a worker that shares its core
  // with other processes), 0.5 ms on the calling thread (docs/performance.md).
  trunk_matrices_ = {&pre_projection_};
  for (const Layer& l : layers_)
    for (const WeightMatrix* m : {&l.q_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj})
      trunk_matrices_.push_back(m);
  trunk_matrices_.push_back(&post_projection_);
  size_t trunk_bytes = 0;
  for (const WeightMatrix* m : trunk_matrices_)
    trunk_bytes += WeightBytes(m->type, m->rows, m->cols);
  const size_t step_bytes = trunk_bytes +
                            WeightBytes(centroids_.type, centroids_.rows, centroids_.cols) +
                            WeightBytes(embed_.type, static_cast<int>(n_candidates), embed_.cols);
  step_pool_ = step_bytes <= kSerialStepBytes ? &serial_ : &target_.pool();
  warm_trunk_ = step_pool_ == &serial_ && trunk_bytes <= kWarmTrunkBytes;
  attention_.Reserve(step_pool_->size(), max_heads, max_hd, 0);
  return OkStatus();
}

Status Assistant::Install(const AssistantTensor& t, AssistantWeight w) {
  if (t.kind == AssistantTensorKind::kOrdering) {
    ordering_ = std::move(w.ids);
    return OkStatus();
  }
  Layer* l = t.layer >= 0 ? &layers_[t.layer] : nullptr;
  if (t.kind == AssistantTensorKind::kScalar) {
    l->layer_scalar = w.values[0];
    return OkStatus();
  }
  if (t.kind == AssistantTensorKind::kVector) {
    std::vector<float>* slot = nullptr;
    if (t.name == "model.norm.weight")
      slot = &final_norm_;
    else if (t.name.ends_with(".input_layernorm.weight"))
      slot = &l->input_norm;
    else if (t.name.ends_with(".post_attention_layernorm.weight"))
      slot = &l->post_attention_norm;
    else if (t.name.ends_with(".pre_feedforward_layernorm.weight"))
      slot = &l->pre_feedforward_norm;
    else if (t.name.ends_with(".post_feedforward_layernorm.weight"))
      slot = &l->post_feedforward_norm;
    else if (t.name.ends_with(".q_norm.weight"))
      slot = &l->q_norm;
    if (!slot) return Status::Errorf("assistant: no slot for ", t.name);
    *slot = std::move(w.values);
    return OkStatus();
  }
  WeightMatrix* slot = nullptr;
  if (t.name == "model.embed_tokens.weight")
    slot = &embed_;
  else if (t.name == "pre_projection.weight")
    slot = &pre_projection_;
  else if (t.name == "post_projection.weight")
    slot = &post_projection_;
  else if (t.name == "masked_embedding.centroids.weight")
    slot = &centroids_;
  else if (t.name.ends_with(".q_proj.weight"))
    slot = &l->q_proj;
  else if (t.name.ends_with(".o_proj.weight"))
    slot = &l->o_proj;
  else if (t.name.ends_with(".gate_proj.weight"))
    slot = &l->gate_proj;
  else if (t.name.ends_with(".up_proj.weight"))
    slot = &l->up_proj;
  else if (t.name.ends_with(".down_proj.weight"))
    slot = &l->down_proj;
  if (!slot) return Status::Errorf("assistant: no slot for ", t.name);
  buffers_.push_back(std::move(w.bytes));
  WeightMatrix& m = *slot;
  m.type = w.type;
  m.rows = static_cast<int>(t.shape[0]);
  m.cols = static_cast<int>(t.shape[1]);
  m.data = buffers_.back().data();
  m.bytes = buffers_.back().size();
  // Quantized matrices in the layout the kernels read, as the loader leaves a target's.
  if (CanUseRowGroups(m) && ActiveKernels().LayoutFor(m.type) == WeightLayout::kRowGroups16)
    ToRowGroups(&m, buffers_.back().data(), &target_.pool());
  return OkStatus();
}

// The centroid head only ever scores whole clusters, so its table is kept in cluster order: a
// cluster's 128 rows are one contiguous 32 KiB stretch instead of 128 rows scattered over the
// table, each on its own page (a TLB miss each). The default assistant's draft step, 1 thread
// on the loaded VM: 1.27 ms with the rows scattered (prefetched), 0.77 ms clustered
// (tools/default_model/draft_cost.py, docs/performance.md). Replaces the table (no second
// copy), row i holding id ordering_[i].
void Assistant::ClusterTable() {
  const size_t row_bytes = WeightBytes(embed_.type, 1, embed_.cols);
  const auto* table = static_cast<const uint8_t*>(embed_.data);
  std::vector<uint8_t> clustered(row_bytes * ordering_.size());
  for (size_t i = 0; i < ordering_.size(); ++i)
    std::memcpy(clustered.data() + i * row_bytes,
                table + static_cast<size_t>(ordering_[i]) * row_bytes, row_bytes);
  // The clustered copy replaces the table when the assistant owns it (a widened or converted
  // copy); a table read in place from the mapping stays there, and the copy is kept beside it.
  std::vector<uint8_t>* owner = nullptr;
  for (std::vector<uint8_t>& b : buffers_)
    if (b.data() == table) owner = &b;
  if (owner)
    *owner = std::move(clustered);
  else
    owner = &buffers_.emplace_back(std::move(clustered));
  embed_.data = owner->data();
  embed_.bytes = owner->size();
  embed_.rows = static_cast<int>(ordering_.size());
}

Status Assistant::Step(const KvCache& cache, int token, int64_t pos, const float* h,
                       float* logits, float* h_next) {
  G4_RETURN_IF_ERROR(Trunk(cache, token, pos, h, h_next));
  LmHead(z_.data(), logits);
  return OkStatus();
}

Status Assistant::Trunk(const KvCache& cache, int token, int64_t pos, const float* h,
                        float* h_next) {
  const AssistantPlan& p = plan_;
  const int Ha = p.hidden, Hb = p.backbone_hidden;
  const float eps = static_cast<float>(p.rms_norm_eps);
  ThreadPool& pool = *step_pool_;
  if (token < 0 || token >= p.vocab)
    return Status::Errorf("assistant: token id ", token, " is outside the vocabulary");
  if (pos < 1 || cache.n_past() < pos)
    return Status::Errorf("assistant: position ", pos, " needs the target's cache to hold [0, ",
                          pos, "), it holds ", cache.n_past());
  // Attention scratch for this cache's longest context, once per larger cache (not per token).
  if (cache.max_context() > reserved_context_) {
    int max_hd = 0, max_heads = 0;
    for (const LayerPlan& lp : p.layers)
      max_hd = std::max(max_hd, lp.head_dim), max_heads = std::max(max_heads, lp.n_heads_q);
    attention_.Reserve(pool.size(), max_heads, max_hd, cache.max_context());
    reserved_context_ = cache.max_context();
  }
  // §10.3 input: [target embedding x sqrt(Hb) (the target's own scale), h] -> pre_projection.
  if (!LookupRow(EmbeddingTable(target_.weights(), Hb), token, embed_row_bytes_.data(), in_.data()))
    return Status::Error(
        "the target's embedding table became unreadable (truncated or rewritten "
        "on disk); restart to load it again");
  std::memcpy(in_.data() + Hb, h, sizeof(float) * Hb);
  if (warm_trunk_)
    for (const WeightMatrix* m : trunk_matrices_) PrefetchWeights(*m);
  MatMul(pre_projection_, in_.data(), 1, x_.data(), pool);

  for (size_t li = 0; li < p.layers.size(); ++li) {
    const LayerPlan& lp = p.layers[li];
    const Layer& w = layers_[li];
    const int hd = lp.head_dim;
    RmsNorm(x_.data(), w.input_norm.data(), Ha, eps, a_.data());
    MatMul(w.q_proj, a_.data(), 1, q_.data(), pool);
    for (int j = 0; j < lp.rope_pairs; ++j) {
      const double angle = static_cast<double>(pos) * inv_freq_[li][j];
      cos_[j] = static_cast<float>(std::cos(angle));
      sin_[j] = static_cast<float>(std::sin(angle));
    }
    for (int hh = 0; hh < lp.n_heads_q; ++hh) {
      float* head = q_.data() + static_cast<size_t>(hh) * hd;
      RmsNorm(head, w.q_norm.data(), hd, eps, head);
      ApplyRope(head, hd, lp.rope_pairs, cos_.data(), sin_.data());
    }
    // Keys strictly before pos: a query "at" pos - 1 with the window shortened by one sees
    // [pos - W + 1, pos - 1] (sliding) or [0, pos - 1] (full). The queries of the KV heads this
    // cache holds (all of them unless split over the ranks: then the other heads' outputs come
    // from the other ranks, and x + 0 keeps each sum exact).
    const int slot = lp.kv_slot;
    const int h0 = lp.kv_head_offset * lp.group_size, heads = lp.n_heads_kv * lp.group_size;
    const bool split = LayerSplitsKv(lp);
    if (split) std::fill_n(attn_.begin(), lp.q_dim(), 0.0f);
    const size_t first = static_cast<size_t>(h0) * hd;
    const AttentionRow row{q_.data() + first,    attn_.data() + first, pos - 1,
                           cache.K(slot, 0),     cache.V(slot, 0),     cache.RowStride(slot),
                           cache.capacity(slot), cache.type()};
    const AttentionShape shape{
        heads, hd, lp.group_size, h0, lp.kv_head_offset, lp.window > 0 ? lp.window - 1 : 0};
    Attend(shape, &row, 1, attention_, pool);
    if (split) lockstep_->AllReduceSum(attn_.data(), lp.q_dim());
    MatMul(w.o_proj, attn_.data(), 1, o_.data(), pool);
    RmsNorm(o_.data(), w.post_attention_norm.data(), Ha, eps, o_.data());
    for (int i = 0; i < Ha; ++i) x_[i] += o_[i];
    RmsNorm(x_.data(), w.pre_feedforward_norm.data(), Ha, eps, a_.data());
    MatMulGeluMul({&w.gate_proj, gate_.data()}, {&w.up_proj, up_.data()}, a_.data(), 1, pool);
    MatMul(w.down_proj, gate_.data(), 1, o_.data(), pool);
    RmsNorm(o_.data(), w.post_feedforward_norm.data(), Ha, eps, o_.data());
    for (int i = 0; i < Ha; ++i) x_[i] = (x_[i] + o_[i]) * w.layer_scalar;
  }
  RmsNorm(x_.data(), final_norm_.data(), Ha, eps, z_.data());
  MatMul(post_projection_, z_.data(), 1, h_next, pool);
  return OkStatus();
}

// §10.3 step 4, centroid head: the top_k clusters by centroid score (ties: lower index) and
// their ids' scores, E[id] z, straight from the table.
void Assistant::ScoreCandidates(const float* z) {
  const AssistantPlan& p = plan_;
  const int nc = p.config.num_centroids, k = p.config.centroid_top_k, cs = p.cluster_size();
  MatMul(centroids_, z, 1, scores_.data(), *step_pool_);
  // The k-th largest score, then every cluster above it and, lowest index first, as many of
  // those equal to it as fit: the set a sort by (score desc, index asc) would take first, with
  // no sort (their order does not matter: each candidate carries its own row and id).
  std::copy(scores_.begin(), scores_.end(), kth_.begin());
  std::nth_element(kth_.begin(), kth_.begin() + (k - 1), kth_.end(), std::greater<float>());
  const float kth = kth_[k - 1];
  int taken = 0;
  for (int c = 0; c < nc; ++c)
    if (scores_[c] > kth) top_[taken++] = c;
  for (int c = 0; c < nc && taken < k; ++c)
    if (scores_[c] == kth) top_[taken++] = c;
  for (int r = 0; r < k; ++r)
    std::iota(candidate_rows_.begin() + static_cast<size_t>(r) * cs,
              candidate_rows_.begin() + static_cast<size_t>(r + 1) * cs, top_[r] * cs);
  GatherDot(embed_, candidate_rows_.data(), k * cs, z, candidates_.data());
}

// The candidate ArgMax over the dense logits would pick: the highest score, then the lowest id
// (every other id sits at min(candidates) - 1, below the best). As ArgMax: NaN never wins, and
// 0 when nothing is above -inf.
int Assistant::BestCandidate() const {
  const int64_t n = static_cast<int64_t>(candidates_.size());
  const int64_t first = ArgMax(candidates_.data(), n);
  const float best = candidates_[first];
  if (!(best > -std::numeric_limits<float>::infinity())) return 0;
  int id = ordering_[candidate_rows_[first]];
  for (int64_t j = first + 1; j < n; ++j)
    if (candidates_[j] == best) id = std::min(id, ordering_[candidate_rows_[j]]);
  return id;
}

// §10.3 step 4: the tied head over the assistant's own table, densely or through the top clusters.
void Assistant::LmHead(const float* z, float* logits) {
  const AssistantPlan& p = plan_;
  if (!p.centroid_head()) {
    MatMul(embed_, z, 1, logits, target_.pool());
    return;
  }
  if (dense_head_) {  // the test hook: every row of the clustered table, back at its id
    dense_rows_.resize(p.vocab);
    MatMul(embed_, z, 1, dense_rows_.data(), target_.pool());
    std::fill(logits, logits + p.vocab, -std::numeric_limits<float>::infinity());
    for (size_t i = 0; i < ordering_.size(); ++i) logits[ordering_[i]] = dense_rows_[i];
    return;
  }
  ScoreCandidates(z);
  float lowest = std::numeric_limits<float>::infinity();
  for (float s : candidates_) lowest = std::min(lowest, s);
  std::fill(logits, logits + p.vocab, lowest - 1);
  for (size_t j = 0; j < candidate_rows_.size(); ++j)
    logits[ordering_[candidate_rows_[j]]] = candidates_[j];
}

Status Assistant::Draft(const KvCache& cache, int token, int64_t pos, const float* h, int n,
                        std::vector<int>* tokens, float min_probability) {
  tokens->clear();
  // Ranks that each hold every KV head draft alike: rank 0 alone does (its tokens are kept).
  if (lockstep_ && !splits_kv_ && lockstep_->rank() != 0) return OkStatus();
  std::copy_n(h, plan_.backbone_hidden, chain_h_.begin());
  // Greedy through the centroid head needs only the candidates' scores; the dense head (and the
  // test hook) goes through the logits.
  const bool candidates_only = plan_.centroid_head() && !dense_head_;
  for (int i = 0; i < n; ++i) {
    G4_RETURN_IF_ERROR(Trunk(cache, token, pos, chain_h_.data(), next_h_.data()));
    const float* scores;
    int64_t n_scores;
    if (candidates_only) {
      ScoreCandidates(z_.data());
      token = BestCandidate();
      scores = candidates_.data();
      n_scores = static_cast<int64_t>(candidates_.size());
    } else {
      LmHead(z_.data(), step_logits_.data());
      token = static_cast<int>(ArgMax(step_logits_.data(), plan_.vocab));
      scores = step_logits_.data();
      n_scores = plan_.vocab;
    }
    int stop = min_probability > 0 && TopProbability(scores, n_scores) < min_probability;
    if (splits_kv_) {
      // Every rank takes rank 0's token and stop, so all run the same steps (and sums).
      int decision[2] = {token, stop};
      lockstep_->Broadcast(decision, sizeof decision, 0);
      token = decision[0];
      stop = decision[1];
    }
    if (stop) break;
    tokens->push_back(token);
    chain_h_.swap(next_h_);
  }
  return OkStatus();
}

}  // namespace g4
