// Forward pass, top to bottom. Each step names the spec section it implements
// (docs/gemma4.md).
#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kv_format.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"
#include "kernels/row_lookup.h"

namespace g4 {

void Activations::Reserve(const ModelPlan& plan, int rows, int n_rope_configs, int max_pairs) {
  if (rows <= capacity_rows && !x.empty()) return;
  rows = std::max(rows, capacity_rows);
  const size_t n = static_cast<size_t>(rows), H = plan.hidden;
  const size_t LP = static_cast<size_t>(plan.n_layers()) * plan.ple_dim;
  x.resize(n * H);
  normed.resize(n * H);
  proj.resize(n * H);
  q.resize(n * plan.max_q_dim());
  attn.resize(n * plan.max_q_dim());
  k.resize(n * plan.max_kv_dim());
  v.resize(n * plan.max_kv_dim());
  gate.resize(n * plan.max_mlp_width());
  up.resize(n * plan.max_mlp_width());
  ple_inputs.resize(n * LP);
  ple_gate.resize(n * LP);  // also holds the context projection while computing PLE inputs
  ple_out.resize(n * H);
  rope_cos.resize(n * n_rope_configs * max_pairs);
  rope_sin.resize(n * n_rope_configs * max_pairs);
  logits_in.resize(n * H);
  attention_rows.resize(n);
  capacity_rows = rows;
}

Model::Model(std::string source, ModelPlan plan, std::unique_ptr<ModelWeights> weights,
             int threads, bool kernel_layout)
    : dir_(std::move(source)), plan_(std::move(plan)), weights_(std::move(weights)) {
  Prepare(threads, kernel_layout);
}

// The thread pool and one cos/sin table per distinct (head_dim, rotated pairs, theta).
void Model::Prepare(int threads, bool kernel_layout) {
  pool_ = std::make_unique<ThreadPool>(threads);
  if (kernel_layout) ToKernelLayout(weights_.get(), pool_.get());
  for (const LayerPlan& lp : plan_.layers) {
    int found = -1;
    for (size_t c = 0; c < rope_configs_.size(); ++c) {
      const RopeConfig& rc = rope_configs_[c];
      if (rc.head_dim == lp.head_dim && rc.pairs == lp.rope_pairs && rc.theta == lp.rope_theta)
        found = static_cast<int>(c);
    }
    if (found < 0) {
      RopeConfig rc{lp.head_dim, lp.rope_pairs, lp.rope_theta, {}};
      // inv_freq[j] = theta^(-2j/head_dim): the exponent's denominator is the full head dim,
      // also for proportional RoPE, where only the first `pairs` frequencies are non-zero.
      for (int j = 0; j < lp.rope_pairs; ++j)
        rc.inv_freq.push_back(std::pow(lp.rope_theta, -2.0 * j / lp.head_dim));
      rope_configs_.push_back(std::move(rc));
      found = static_cast<int>(rope_configs_.size()) - 1;
    }
    layer_rope_config_.push_back(found);
    max_heads_q_ = std::max(max_heads_q_, lp.n_heads_q);
    max_head_dim_ = std::max(max_head_dim_, lp.head_dim);
    max_rope_pairs_ = std::max(max_rope_pairs_, lp.rope_pairs);
  }
}

RowTable EmbeddingTable(const ModelWeights& w, int hidden) {
  if (!w.embed_table) return RowTable{&w.embed, nullptr, DType::kBF16, hidden, w.embed.type, w.embed_scale};
  return RowTable{nullptr, w.embed_table, w.embed_table_dtype, hidden, w.embed_table_type, w.embed_scale};
}

namespace {

// The per-layer embedding table [vocab, L*P], always left mapped (E2B/E4B).
RowTable PleTable(const ModelWeights& w, int width) {
  return RowTable{nullptr, w.ple_table, w.ple_dtype, width, WeightType::kBF16, w.ple_scale};
}

// x[r] += RmsNorm(proj[r]) * weight for each of the n rows (the post norms after attention,
// after the MLP and after the per-layer-input block); proj is normalised in place.
void NormAndAddToResidual(float* proj, const std::vector<float>& weight, int n, int H, float eps,
                          float* x) {
  for (int r = 0; r < n; ++r) {
    float* pr = proj + static_cast<size_t>(r) * H;
    float* xr = x + static_cast<size_t>(r) * H;
    RmsNorm(pr, weight.data(), H, eps, pr);
    for (int i = 0; i < H; ++i) xr[i] += pr[i];
  }
}

}  // namespace

// §3.4 The tied LM head over m normed rows (act.logits_in) into logits[m, vocab]. Under tensor
// parallelism each rank multiplies its vocabulary block and the blocks are all-gathered, or rank 0
// does the whole head and broadcasts (LmHeadPlacement).
void Model::LmHead(int m, Activations& act, float* logits) {
  const ModelWeights& w = *weights_;
  const int V = plan_.vocab;
  if (!comm_ || plan_.tp_size == 1) {
    MatMul(w.embed, act.logits_in.data(), m, logits, *pool_);
    return;
  }
  if (plan_.lm_head == LmHeadPlacement::kRank0) {
    if (comm_->rank() == 0) MatMul(w.embed, act.logits_in.data(), m, logits, *pool_);
    comm_->Broadcast(logits, sizeof(float) * static_cast<size_t>(m) * V, 0);
    return;
  }
  // Uniform blocks for the gather: the last rank's may be short, its tail is padding.
  const size_t block = plan_.lm_head_block(), rows = plan_.lm_head_end() - plan_.lm_head_begin();
  const size_t S = comm_->size();
  act.logits_block.resize(static_cast<size_t>(m) * block);
  act.logits_gathered.resize(S * m * block);
  if (rows > 0) MatMul(w.embed, act.logits_in.data(), m, act.logits_block.data(), *pool_);
  // MatMul wrote [m, rows]; spread it to [m, block] (backwards, so nothing is overwritten early).
  if (rows != block)
    for (int i = m - 1; i >= 0; --i)
      std::memmove(act.logits_block.data() + i * block, act.logits_block.data() + i * rows,
                   rows * sizeof(float));
  comm_->AllGather(act.logits_block.data(), static_cast<size_t>(m) * block,
                   act.logits_gathered.data());
  for (size_t r = 0; r < S; ++r) {
    const size_t begin = r * block, count = std::min(block, V - std::min<size_t>(V, begin));
    for (int i = 0; i < m; ++i)
      std::memcpy(logits + static_cast<size_t>(i) * V + begin,
                  act.logits_gathered.data() + (r * m + i) * block, count * sizeof(float));
  }
}

// §3.2: per-layer inputs p_i for every row, [n, L*P].
Status Model::ComputePle(const std::vector<BatchRow>& rows, Activations& act) {
  const ModelWeights& w = *weights_;
  const int n = static_cast<int>(rows.size()), H = plan_.hidden, P = plan_.ple_dim;
  const int LP = plan_.n_layers() * P;
  // Token part: a row of the mapped table, times bf16(sqrt(P)).
  const RowTable table = PleTable(w, LP);
  for (int r = 0; r < n; ++r)
    if (!LookupRow(table, rows[r].token, act.row_bytes.data(),
                   act.ple_inputs.data() + static_cast<size_t>(r) * LP))
      return Status::Errorf(
          "reading the per-layer embedding table failed (SIGBUS): the mapped "
          "checkpoint file was truncated or rewritten on disk; restart to "
          "load it again");
  // Context part: projection of the scaled embedding, * H^-0.5, RMSNorm per layer slice.
  float* ctx = act.ple_gate.data();
  MatMul(w.ple_model_projection, act.x.data(), n, ctx, *pool_);
  const float proj_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(H)));
  const float combine = static_cast<float>(1.0 / std::sqrt(2.0));
  for (int r = 0; r < n; ++r) {
    float* c = ctx + static_cast<size_t>(r) * LP;
    float* p = act.ple_inputs.data() + static_cast<size_t>(r) * LP;
    for (int i = 0; i < LP; ++i) c[i] *= proj_scale;
    for (int l = 0; l < plan_.n_layers(); ++l)
      RmsNorm(c + l * P, w.ple_projection_norm.data(), P, static_cast<float>(plan_.rms_norm_eps),
              c + l * P);
    for (int i = 0; i < LP; ++i) p[i] = (c[i] + p[i]) * combine;
  }
  return OkStatus();
}

// §3.3 steps 4-5: softmax(q k^T) v over the visible positions of the source layer's cache
// (kernels/attention.h schedules it over the threads).
void Model::Attention(const LayerPlan& lp, const std::vector<BatchRow>& rows, Activations& act) {
  const int slot = plan_.layers[lp.kv_source].kv_slot, qdim = lp.q_dim();
  for (size_t r = 0; r < rows.size(); ++r) {
    KvCache& cache = *rows[r].cache;
    act.attention_rows[r] = AttentionRow{act.q.data() + r * qdim,   act.attn.data() + r * qdim,
                                         rows[r].pos,               cache.K(slot, 0),
                                         cache.V(slot, 0),          cache.RowStride(slot),
                                         cache.capacity(slot),      cache.type()};
  }
  const AttentionShape shape{lp.n_heads_q,     lp.head_dim,        lp.group_size,
                             lp.q_head_offset, lp.kv_head_offset, lp.window};
  Attend(shape, act.attention_rows.data(), static_cast<int>(rows.size()), act.attention, *pool_,
         attention_tiles_);
}

// Rows of one cache must be consecutive from its n_past (decode: one row each; prefill: a run),
// so comparing with the previous row is enough and allocates nothing on the decode path.
Status Model::CheckRows(const std::vector<BatchRow>& rows) const {
  if (plan_.tp_size > 1 && (!comm_ || comm_->size() != plan_.tp_size))
    return Status::Errorf("Forward: this model is rank ", plan_.tp_rank, " of ", plan_.tp_size,
                          " and needs a communicator of that size (set_communicator)");
  const int n = static_cast<int>(rows.size());
  for (int r = 0; r < n; ++r) {
    const BatchRow& row = rows[r];
    if (!row.cache) return Status::Errorf("Forward: row ", r, " has no KV cache");
    if (row.token < 0 || row.token >= plan_.vocab)
      return Status::Errorf("token id ", row.token, " is outside the vocabulary [0, ", plan_.vocab,
                            ")");
    const bool continues = r > 0 && rows[r - 1].cache == row.cache;
    const int64_t expected = continues ? rows[r - 1].pos + 1 : row.cache->n_past();
    if (!continues)
      for (int q = 0; q < r - 1; ++q)
        if (rows[q].cache == row.cache)
          return Status::Errorf("Forward: row ", r, " continues the sequence of row ", q,
                                " after other rows; a sequence's rows must be consecutive");
    if (row.pos != expected)
      return Status::Errorf("Forward: row ", r, " is at position ", row.pos,
                            " but its cache expects ", expected);
    if (row.pos >= row.cache->max_context())
      return Status::Errorf("position ", row.pos, " is past the context size ",
                            row.cache->max_context());
    if (row.pos - row.cache->n_past() + 1 > row.cache->max_chunk())
      return Status::Errorf("Forward: more than ", row.cache->max_chunk(),
                            " rows for one sequence in one call");
  }
  return OkStatus();
}

// Sizes every buffer of `act` for these rows before the first step, so decoding allocates nothing.
void Model::ReserveFor(const std::vector<BatchRow>& rows, Activations& act) const {
  int64_t max_context = 0;
  for (const BatchRow& row : rows)
    max_context = std::max<int64_t>(max_context, row.cache->max_context());
  ReserveActivations(act, static_cast<int>(rows.size()), max_context);
}

void Model::ReserveActivations(Activations& act, int rows, int64_t max_context) const {
  const ModelWeights& w = *weights_;
  const int LP = plan_.n_layers() * plan_.ple_dim;
  act.Reserve(plan_, rows, static_cast<int>(rope_configs_.size()), max_rope_pairs_);
  act.row_bytes.resize(std::max(RowLookupScratchBytes(EmbeddingTable(w, plan_.hidden)),
                                RowLookupScratchBytes(PleTable(w, LP))));
  act.attention.Reserve(pool_->size(), max_heads_q_, max_head_dim_, max_context);
}

// RoPE angles per row, once per distinct table: act.rope_cos/sin[config][row][pair].
void Model::RopeAngles(const std::vector<BatchRow>& rows, Activations& act) const {
  const int n = static_cast<int>(rows.size());
  for (size_t c = 0; c < rope_configs_.size(); ++c)
    for (int r = 0; r < n; ++r) {
      const size_t base = (c * n + r) * max_rope_pairs_;
      for (int j = 0; j < rope_configs_[c].pairs; ++j) {
        const double angle = static_cast<double>(rows[r].pos) * rope_configs_[c].inv_freq[j];
        act.rope_cos[base + j] = static_cast<float>(std::cos(angle));
        act.rope_sin[base + j] = static_cast<float>(std::sin(angle));
      }
    }
}

// §3.3 One decoder layer over every row: x += attention block, x += MLP block, x += PLE block,
// x *= layer_scalar.
void Model::DecoderLayer(const LayerPlan& lp, const std::vector<BatchRow>& rows,
                         Activations& act) {
  const ModelWeights& w = *weights_;
  const int n = static_cast<int>(rows.size()), H = plan_.hidden, P = plan_.ple_dim;
  const int LP = plan_.n_layers() * P;
  const float eps = static_cast<float>(plan_.rms_norm_eps);
  float* x = act.x.data();
  const LayerWeights& lw = w.layers[lp.index];
  const int hd = lp.head_dim, qdim = lp.q_dim(), kvdim = lp.kv_dim();
  const int rc = layer_rope_config_[lp.index];
  auto cos_of = [&](int r) {
    return act.rope_cos.data() + (static_cast<size_t>(rc) * n + r) * max_rope_pairs_;
  };
  auto sin_of = [&](int r) {
    return act.rope_sin.data() + (static_cast<size_t>(rc) * n + r) * max_rope_pairs_;
  };

  // 1-2. Pre-attention norm; queries with q_norm and RoPE.
  for (int r = 0; r < n; ++r)
    RmsNorm(x + static_cast<size_t>(r) * H, lw.input_norm.data(), H, eps,
            act.normed.data() + static_cast<size_t>(r) * H);
  // 3. KV owners also project K and V, from the same normed input in the same pass.
  {
    MatMulOutput outs[3] = {{&lw.q_proj, act.q.data()}};
    int n_outs = 1;
    if (lp.owns_kv()) {
      outs[n_outs++] = {&lw.k_proj, act.k.data()};
      if (!lp.k_eq_v) outs[n_outs++] = {&lw.v_proj, act.v.data()};
    }
    MatMulShared(outs, n_outs, act.normed.data(), n, *pool_);
  }
  for (int r = 0; r < n; ++r)
    for (int h = 0; h < lp.n_heads_q; ++h) {
      float* qh = act.q.data() + static_cast<size_t>(r) * qdim + h * hd;
      RmsNorm(qh, lw.q_norm.data(), hd, eps, qh);
      ApplyRope(qh, hd, lp.rope_pairs, cos_of(r), sin_of(r));
    }
  // KV owners write K and V into each row's cache.
  if (lp.owns_kv()) {
    // §5: with k_eq_v, V is the raw k_proj output, taken before k_norm and RoPE.
    if (lp.k_eq_v)
      std::memcpy(act.v.data(), act.k.data(), sizeof(float) * static_cast<size_t>(n) * kvdim);
    // Normalised in place in act.k / act.v, then stored in the cache's format (kv_format.h).
    for (int r = 0; r < n; ++r) {
      float* kr = act.k.data() + static_cast<size_t>(r) * kvdim;
      float* vr = act.v.data() + static_cast<size_t>(r) * kvdim;
      for (int g = 0; g < lp.n_heads_kv; ++g) {
        RmsNorm(kr + g * hd, lw.k_norm.data(), hd, eps, kr + g * hd);
        ApplyRope(kr + g * hd, hd, lp.rope_pairs, cos_of(r), sin_of(r));
        RmsNorm(vr + g * hd, nullptr, hd, eps, vr + g * hd);  // v_norm: no weight and no RoPE
      }
      KvCache& cache = *rows[r].cache;
      StoreKv(cache.type(), kr, hd, kvdim, cache.K(lp.kv_slot, rows[r].pos));
      StoreKv(cache.type(), vr, hd, kvdim, cache.V(lp.kv_slot, rows[r].pos));
    }
  }
  // 4-7. Attention over the (source layer's) cache, output projection, residual.
  Attention(lp, rows, act);
  MatMul(lw.o_proj, act.attn.data(), n, act.proj.data(), *pool_);
  if (comm_) comm_->AllReduceSum(act.proj.data(), static_cast<size_t>(n) * H);
  NormAndAddToResidual(act.proj.data(), lw.post_attention_norm, n, H, eps, x);
  // 8-10. Feed-forward: down(gelu(gate) * up), post norm, residual.
  for (int r = 0; r < n; ++r)
    RmsNorm(x + static_cast<size_t>(r) * H, lw.pre_feedforward_norm.data(), H, eps,
            act.normed.data() + static_cast<size_t>(r) * H);
  MatMulGeluMul({&lw.gate_proj, act.gate.data()}, {&lw.up_proj, act.up.data()}, act.normed.data(),
                n, *pool_);
  MatMul(lw.down_proj, act.gate.data(), n, act.proj.data(), *pool_);
  if (comm_) comm_->AllReduceSum(act.proj.data(), static_cast<size_t>(n) * H);
  NormAndAddToResidual(act.proj.data(), lw.post_feedforward_norm, n, H, eps, x);
  // 11-12. Per-layer-input block (E2B/E4B): gate(x) -> gelu -> * p_i -> projection -> norm.
  if (P > 0) {
    MatMul(lw.ple_gate, x, n, act.ple_gate.data(), *pool_);
    for (int r = 0; r < n; ++r) {
      float* g = act.ple_gate.data() + static_cast<size_t>(r) * P;
      const float* p = act.ple_inputs.data() + static_cast<size_t>(r) * LP + lp.ple_offset;
      GeluTanhMul(g, p, P, *pool_);
    }
    MatMul(lw.ple_projection, act.ple_gate.data(), n, act.ple_out.data(), *pool_);
    NormAndAddToResidual(act.ple_out.data(), lw.ple_post_norm, n, H, eps, x);
  }
  // 13. layer_scalar scales the whole residual stream.
  if (!skip_layer_scalar_)
    for (size_t i = 0; i < static_cast<size_t>(n) * H; ++i) x[i] *= lw.layer_scalar;
}

Status Model::Forward(const std::vector<BatchRow>& rows, Activations& act, float* logits) {
  const int n = static_cast<int>(rows.size());
  if (n == 0) return OkStatus();
  G4_RETURN_IF_ERROR(CheckRows(rows));  // before touching any cache
  ReserveFor(rows, act);
  const ModelWeights& w = *weights_;
  const int H = plan_.hidden, P = plan_.ple_dim;
  const float eps = static_cast<float>(plan_.rms_norm_eps);
  float* x = act.x.data();

  // §3.1 Token embedding, scaled by sqrt(H) rounded to the weight dtype. Under tensor
  // parallelism every rank looks the row up itself (from the mapped table when its LM head is
  // only a vocabulary block): one row per token, cheaper than waiting for a broadcast.
  const RowTable embed = EmbeddingTable(w, H);
  for (int r = 0; r < n; ++r)
    if (!LookupRow(embed, rows[r].token, act.row_bytes.data(), x + static_cast<size_t>(r) * H))
      return Status::Error(
          "reading the embedding table failed (SIGBUS): the mapped checkpoint file was "
          "truncated or rewritten on disk; restart to load it again");
  // §3.2 Per-layer embeddings.
  if (P > 0) G4_RETURN_IF_ERROR(ComputePle(rows, act));
  RopeAngles(rows, act);
  // §3.3 Decoder layers.
  for (const LayerPlan& lp : plan_.layers) DecoderLayer(lp, rows, act);

  // §3.4 Final norm and the tied LM head (raw logits; softcap is applied when sampling).
  int m = 0;
  for (int r = 0; r < n; ++r)
    if (rows[r].want_logits)
      RmsNorm(x + static_cast<size_t>(r) * H, w.final_norm.data(), H, eps,
              act.logits_in.data() + static_cast<size_t>(m++) * H);
  if (m > 0) LmHead(m, act, logits);

  for (int r = 0; r < n; ++r)
    if (r + 1 == n || rows[r + 1].cache != rows[r].cache)
      rows[r].cache->set_n_past(rows[r].pos + 1);
  return OkStatus();
}

}  // namespace g4
