// Forward pass, top to bottom. Each step names the spec section it implements
// (docs/gemma4.md).
#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "base/mapped_file.h"
#include "kernels/cpu_kernels.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"

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
  capacity_rows = rows;
}

Model::Model(std::string source, ModelPlan plan, std::unique_ptr<ModelWeights> weights,
             int threads, bool kernel_layout)
    : dir_(std::move(source)), plan_(std::move(plan)), weights_(std::move(weights)) {
  Prepare(threads, kernel_layout);
}

// The thread pool and one cos/sin table per distinct (head_dim, rotated pairs, theta).
void Model::Prepare(int threads, bool kernel_layout) {
  Model* model = this;
  model->pool_ = std::make_unique<ThreadPool>(threads);
  if (kernel_layout) ToKernelLayout(model->weights_.get(), model->pool_.get());
  // One cos/sin table per distinct (head_dim, rotated pairs, theta): sliding and full.
  for (const LayerPlan& lp : model->plan_.layers) {
    int found = -1;
    for (size_t c = 0; c < model->rope_configs_.size(); ++c) {
      const RopeConfig& rc = model->rope_configs_[c];
      if (rc.head_dim == lp.head_dim && rc.pairs == lp.rope_pairs && rc.theta == lp.rope_theta)
        found = static_cast<int>(c);
    }
    if (found < 0) {
      RopeConfig rc{lp.head_dim, lp.rope_pairs, lp.rope_theta, {}};
      // inv_freq[j] = theta^(-2j/head_dim): the exponent's denominator is the full head dim,
      // also for proportional RoPE, where only the first `pairs` frequencies are non-zero.
      for (int j = 0; j < lp.rope_pairs; ++j)
        rc.inv_freq.push_back(std::pow(lp.rope_theta, -2.0 * j / lp.head_dim));
      model->rope_configs_.push_back(std::move(rc));
      found = static_cast<int>(model->rope_configs_.size()) - 1;
    }
    model->layer_rope_config_.push_back(found);
    model->max_rope_pairs_ = std::max(model->max_rope_pairs_, lp.rope_pairs);
  }
}

namespace {

// Row `row` of a mapped [rows, cols] table in bf16/f16/f32, widened to fp32.
void MappedRowToF32(const uint8_t* table, DType dtype, int64_t row, int cols, float* out) {
  const uint8_t* src = table + static_cast<size_t>(row) * cols * DTypeSize(dtype);
  for (int c = 0; c < cols; ++c) {
    if (dtype == DType::kF32) {
      std::memcpy(&out[c], src + c * 4, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, src + c * 2, 2);
      out[c] = dtype == DType::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
    }
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
  const size_t esize = DTypeSize(w.ple_dtype);
  // Token part: a row of the mapped table, times bf16(sqrt(P)). The row is copied out under a
  // SIGBUS guard: the table is the one thing left mapped, and a checkpoint truncated or
  // rewritten on disk must fail this request, not kill the server with every stream in it.
  thread_local std::vector<uint8_t> row_bytes;
  row_bytes.resize(static_cast<size_t>(LP) * esize);
  for (int r = 0; r < n; ++r) {
    if (!CopyFromMapping(row_bytes.data(),
                         w.ple_table + static_cast<size_t>(rows[r].token) * LP * esize,
                         row_bytes.size()))
      return Status::Errorf(
          "reading the per-layer embedding table failed (SIGBUS): the mapped "
          "checkpoint file was truncated or rewritten on disk; restart to "
          "load it again");
    const uint8_t* row = row_bytes.data();
    float* dst = act.ple_inputs.data() + static_cast<size_t>(r) * LP;
    for (int c = 0; c < LP; ++c) {
      float v;
      if (w.ple_dtype == DType::kBF16) {
        uint16_t h;
        std::memcpy(&h, row + c * 2, 2);
        v = Bf16ToF32(h);
      } else if (w.ple_dtype == DType::kF16) {
        uint16_t h;
        std::memcpy(&h, row + c * 2, 2);
        v = F16ToF32(h);
      } else {
        std::memcpy(&v, row + c * 4, 4);
      }
      dst[c] = v * w.ple_scale;
    }
  }
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

// §3.3 step 4-5: softmax(q k^T) v over the visible positions of the source layer's cache.
// The query heads that share a KV head are done together, so each cached K/V row is read once per
// row, not once per head (8x less cache traffic on E2B's full layers). A single decode row splits
// its positions into chunks across threads (partial softmax per chunk, merged after), so a long
// context keeps both cores busy.
void Model::Attention(const LayerPlan& lp, const std::vector<BatchRow>& rows, Activations& act) {
  const CpuKernels& k = ActiveKernels();
  const int n = static_cast<int>(rows.size()), hd = lp.head_dim, nq = lp.n_heads_q;
  const int qdim = lp.q_dim();
  const int slot = plan_.layers[lp.kv_source].kv_slot;
  auto kv_of = [&](int h) {
    return (lp.q_head_offset + h) / lp.group_size - lp.kv_head_offset;
  };  // local KV head
  // Runs of consecutive local query heads with the same KV head.
  struct Run {
    int h0, count, g;
  };
  constexpr int kMaxRun = 64;
  Run runs[256];  // plans have at most a few tens of query heads per layer
  int n_runs = 0;
  for (int h = 0; h < nq && n_runs < 256; ++h) {
    if (n_runs > 0 && runs[n_runs - 1].g == kv_of(h) && runs[n_runs - 1].count < kMaxRun) {
      runs[n_runs - 1].count++;
    } else {
      runs[n_runs++] = Run{h, 1, kv_of(h)};
    }
  }
  int max_run = 0;
  for (int i = 0; i < n_runs; ++i) max_run = std::max(max_run, runs[i].count);
  // Position chunks: only for one decode row with a long context (else rows x runs suffice).
  int splits = 1;
  if (n == 1) {
    const int64_t pos = rows[0].pos;
    const int64_t visible =
        pos - (lp.window > 0 ? std::max<int64_t>(0, pos - lp.window + 1) : 0) + 1;
    const int want_tasks = 2 * pool_->size();
    splits = static_cast<int>(std::clamp<int64_t>(visible / 128, 1, want_tasks));
    // Few KV heads (E2B has one): split shorter contexts too, down to 32 positions a chunk, so
    // that one thread does not attend alone while the other waits.
    if (n_runs * splits < want_tasks)
      splits = static_cast<int>(std::max<int64_t>(
          splits, std::min<int64_t>((want_tasks + n_runs - 1) / n_runs, visible / 32)));
  }
  const size_t partial_stride = static_cast<size_t>(hd) + 2;  // max, sum, out[hd]
  if (splits > 1) {
    const size_t need = static_cast<size_t>(n_runs) * splits * max_run * partial_stride;
    if (act.attn_partial.size() < need) act.attn_partial.resize(need);
  }
  pool_->ParallelFor(static_cast<int64_t>(n) * n_runs * splits, [&](int64_t task, int) {
    const int split = static_cast<int>(task % splits);
    const int run_index = static_cast<int>(task / splits % n_runs);
    const int r = static_cast<int>(task / splits / n_runs);
    const Run run = runs[run_index];
    const KvCache& cache = *rows[r].cache;
    const int64_t pos = rows[r].pos;
    // Sliding: visible iff 0 <= pos - j < window (the window includes the current token).
    const int64_t lo = lp.window > 0 ? std::max<int64_t>(0, pos - lp.window + 1) : 0;
    const int64_t per_split = (pos - lo + 1 + splits - 1) / splits;
    const int64_t j0 = lo + split * per_split, j1 = std::min(pos, j0 + per_split - 1);
    const int len = static_cast<int>(std::max<int64_t>(0, j1 - j0 + 1));
    thread_local std::vector<float> scores;
    if (scores.size() < static_cast<size_t>(run.count) * len)
      scores.resize(static_cast<size_t>(run.count) * len);
    const float* q0 =
        act.q.data() + static_cast<size_t>(r) * qdim + static_cast<size_t>(run.h0) * hd;
    // Stretches of consecutive cache rows (a sliding ring wraps at most once in [j0, j1]).
    const int64_t stride = cache.RowStride(slot);
    auto for_stretches = [&](auto&& fn) {
      for (int64_t a = j0; a <= j1;) {
        const int64_t b = std::min(j1, a + cache.ContiguousRows(slot, a) - 1);
        fn(a, static_cast<int>(b - a + 1));
        a = b + 1;
      }
    };
    // Attention scale is 1.0: the q/k norms carry the scaling (spec §9.6).
    for_stretches([&](int64_t a, int count) {
      k.attn_scores(q0, run.count, hd, cache.K(slot, a) + run.g * hd, stride, count, hd,
                    scores.data() + (a - j0), len);
    });
    float max_score[kMaxRun], sum[kMaxRun];
    float* outs[kMaxRun];
    for (int c = 0; c < run.count; ++c) {
      float* sc = scores.data() + static_cast<size_t>(c) * len;
      float m = -INFINITY;
      for (int j = 0; j < len; ++j) m = std::max(m, sc[j]);
      const double s = k.exp_sum(sc, len, m);
      max_score[c] = m;
      sum[c] = static_cast<float>(s);
      outs[c] = splits == 1
                    ? act.attn.data() + static_cast<size_t>(r) * qdim +
                          static_cast<size_t>(run.h0 + c) * hd
                    : act.attn_partial.data() +
                          ((static_cast<size_t>(run_index) * splits + split) * max_run + c) *
                              partial_stride +
                          2;
      std::fill(outs[c], outs[c] + hd, 0.0f);
    }
    const int64_t out_stride = splits == 1 ? hd : static_cast<int64_t>(partial_stride);
    for_stretches([&](int64_t a, int count) {
      k.attn_values(scores.data() + (a - j0), len, run.count, cache.V(slot, a) + run.g * hd, stride,
                    count, hd, outs[0], out_stride);
    });
    for (int c = 0; c < run.count; ++c) {
      if (splits == 1) {
        const float inv = 1.0f / sum[c];
        for (int i = 0; i < hd; ++i) outs[c][i] *= inv;
      } else {
        outs[c][-2] = max_score[c];
        outs[c][-1] = sum[c];
      }
    }
  });
  if (splits == 1) return;
  // Merge the chunks of the one row: rescale each partial to the common max.
  for (int ri = 0; ri < n_runs; ++ri)
    for (int c = 0; c < runs[ri].count; ++c) {
      auto partial = [&](int s) {
        return act.attn_partial.data() +
               ((static_cast<size_t>(ri) * splits + s) * max_run + c) * partial_stride;
      };
      float m = -INFINITY;
      for (int s = 0; s < splits; ++s) m = std::max(m, partial(s)[0]);
      double total = 0;
      float* out = act.attn.data() + static_cast<size_t>(runs[ri].h0 + c) * hd;
      std::fill(out, out + hd, 0.0f);
      for (int s = 0; s < splits; ++s) {
        const float* p = partial(s);
        if (p[1] == 0) continue;  // empty chunk
        const float scale = std::exp(p[0] - m);
        total += static_cast<double>(p[1]) * scale;
        k.axpy_f32(scale, p + 2, out, hd);
      }
      const float inv = static_cast<float>(1.0 / total);
      for (int i = 0; i < hd; ++i) out[i] *= inv;
    }
}

Status Model::Forward(const std::vector<BatchRow>& rows, Activations& act, float* logits) {
  const int n = static_cast<int>(rows.size());
  if (n == 0) return OkStatus();
  if (plan_.tp_size > 1 && (!comm_ || comm_->size() != plan_.tp_size))
    return Status::Errorf("Forward: this model is rank ", plan_.tp_rank, " of ", plan_.tp_size,
                          " and needs a communicator of that size (set_communicator)");
  // Validate before touching any cache: rows of one cache are consecutive from its n_past.
  // Rows of one cache are consecutive in the batch (decode: one row each; prefill: a run), so
  // comparing with the previous row is enough and allocates nothing on the decode path.
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

  const ModelWeights& w = *weights_;
  const int H = plan_.hidden, P = plan_.ple_dim;
  const int LP = plan_.n_layers() * P;
  const float eps = static_cast<float>(plan_.rms_norm_eps);
  const int n_rope = static_cast<int>(rope_configs_.size());
  act.Reserve(plan_, n, n_rope, max_rope_pairs_);
  float* x = act.x.data();

  // §3.1 Token embedding, scaled by sqrt(H) rounded to the weight dtype. Under tensor
  // parallelism every rank looks the row up itself (from the mapped table when its LM head is
  // only a vocabulary block): one row per token, cheaper than waiting for a broadcast.
  for (int r = 0; r < n; ++r) {
    float* xr = x + static_cast<size_t>(r) * H;
    if (w.embed_table && w.embed_table_type != WeightType::kBF16) {
      const uint8_t* row =
          w.embed_table + static_cast<size_t>(rows[r].token) * H * DTypeSize(w.embed_table_dtype);
      const SourceType src = w.embed_table_dtype == DType::kBF16  ? SourceType::kBF16
                             : w.embed_table_dtype == DType::kF16 ? SourceType::kF16
                                                                  : SourceType::kF32;
      std::vector<uint8_t> quantized(WeightBytes(w.embed_table_type, 1, H));
      QuantizeMatrix(row, src, 1, H, w.embed_table_type, quantized.data(), nullptr);
      WeightMatrix one_row;
      one_row.type = w.embed_table_type;
      one_row.rows = 1;
      one_row.cols = H;
      one_row.data = quantized.data();
      one_row.bytes = quantized.size();
      DequantizeRow(one_row, 0, xr);
    } else if (w.embed_table) {
      MappedRowToF32(w.embed_table, w.embed_table_dtype, rows[r].token, H, xr);
    } else {
      DequantizeRow(w.embed, rows[r].token, xr);
    }
    for (int i = 0; i < H; ++i) xr[i] *= w.embed_scale;
  }
  // §3.2 Per-layer embeddings.
  if (P > 0) G4_RETURN_IF_ERROR(ComputePle(rows, act));
  // RoPE angles per row, once per distinct table.
  for (int c = 0; c < n_rope; ++c)
    for (int r = 0; r < n; ++r) {
      const size_t base = (static_cast<size_t>(c) * n + r) * max_rope_pairs_;
      for (int j = 0; j < rope_configs_[c].pairs; ++j) {
        const double angle = static_cast<double>(rows[r].pos) * rope_configs_[c].inv_freq[j];
        act.rope_cos[base + j] = static_cast<float>(std::cos(angle));
        act.rope_sin[base + j] = static_cast<float>(std::sin(angle));
      }
    }

  // §3.3 Decoder layers.
  for (const LayerPlan& lp : plan_.layers) {
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
      for (int r = 0; r < n; ++r) {
        float* kc = rows[r].cache->K(lp.kv_slot, rows[r].pos);
        float* vc = rows[r].cache->V(lp.kv_slot, rows[r].pos);
        for (int g = 0; g < lp.n_heads_kv; ++g) {
          const float* kr = act.k.data() + static_cast<size_t>(r) * kvdim + g * hd;
          const float* vr = act.v.data() + static_cast<size_t>(r) * kvdim + g * hd;
          RmsNorm(kr, lw.k_norm.data(), hd, eps, kc + g * hd);
          ApplyRope(kc + g * hd, hd, lp.rope_pairs, cos_of(r), sin_of(r));
          RmsNorm(vr, nullptr, hd, eps, vc + g * hd);  // v_norm has no weight and no RoPE
        }
      }
    }
    // 4-7. Attention over the (source layer's) cache, output projection, residual.
    Attention(lp, rows, act);
    MatMul(lw.o_proj, act.attn.data(), n, act.proj.data(), *pool_);
    if (comm_) comm_->AllReduceSum(act.proj.data(), static_cast<size_t>(n) * H);
    for (int r = 0; r < n; ++r) {
      float* pr = act.proj.data() + static_cast<size_t>(r) * H;
      float* xr = x + static_cast<size_t>(r) * H;
      RmsNorm(pr, lw.post_attention_norm.data(), H, eps, pr);
      for (int i = 0; i < H; ++i) xr[i] += pr[i];
    }
    // 8-10. Feed-forward: down(gelu(gate) * up), post norm, residual.
    for (int r = 0; r < n; ++r)
      RmsNorm(x + static_cast<size_t>(r) * H, lw.pre_feedforward_norm.data(), H, eps,
              act.normed.data() + static_cast<size_t>(r) * H);
    MatMulGeluMul({&lw.gate_proj, act.gate.data()}, {&lw.up_proj, act.up.data()}, act.normed.data(),
                  n, *pool_);
    MatMul(lw.down_proj, act.gate.data(), n, act.proj.data(), *pool_);
    if (comm_) comm_->AllReduceSum(act.proj.data(), static_cast<size_t>(n) * H);
    for (int r = 0; r < n; ++r) {
      float* pr = act.proj.data() + static_cast<size_t>(r) * H;
      float* xr = x + static_cast<size_t>(r) * H;
      RmsNorm(pr, lw.post_feedforward_norm.data(), H, eps, pr);
      for (int i = 0; i < H; ++i) xr[i] += pr[i];
    }
    // 11-12. Per-layer-input block (E2B/E4B): gate(x) -> gelu -> * p_i -> projection -> norm.
    if (P > 0) {
      MatMul(lw.ple_gate, x, n, act.ple_gate.data(), *pool_);
      for (int r = 0; r < n; ++r) {
        float* g = act.ple_gate.data() + static_cast<size_t>(r) * P;
        const float* p = act.ple_inputs.data() + static_cast<size_t>(r) * LP + lp.ple_offset;
        GeluTanhMul(g, p, P, *pool_);
      }
      MatMul(lw.ple_projection, act.ple_gate.data(), n, act.ple_out.data(), *pool_);
      for (int r = 0; r < n; ++r) {
        float* zr = act.ple_out.data() + static_cast<size_t>(r) * H;
        float* xr = x + static_cast<size_t>(r) * H;
        RmsNorm(zr, lw.ple_post_norm.data(), H, eps, zr);
        for (int i = 0; i < H; ++i) xr[i] += zr[i];
      }
    }
    // 13. layer_scalar scales the whole residual stream.
    if (!skip_layer_scalar_)
      for (size_t i = 0; i < static_cast<size_t>(n) * H; ++i) x[i] *= lw.layer_scalar;
  }

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
