// Pins the spec's pitfalls (gemma4-architecture.md §9) on the reference itself, independently of
// the engine: RoPE pairs, the sliding-window edge, K=V, layer_scalar, KV sharing, config forms.
#include "reference/reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>

#include "base/mapped_file.h"
#include "io/safetensors.h"
#include "model/arch/gemma4.h"
#include "model/architecture.h"
#include "model/synth.h"
#include "testing/checkpoints.h"
#include "testing/compare.h"

namespace g4::reference {
namespace {

TEST(ReferenceRope, ProportionalRotatesExactlyPairsJAndJPlus256On512DimHeads) {
  // Full layers: head_dim 512, partial_rotary_factor 0.25 -> 64 pairs (j, j+256), exponent / 512.
  const int hd = 512, pairs = 64, pos = 7;
  const double theta = 1e6;
  for (int d = 0; d < hd; ++d) {
    std::vector<double> x(hd, 0.0);
    x[d] = 1.0;
    ApplyRope(x.data(), hd, pairs, theta, pos);
    const int j = d % 256;
    const bool rotates = j < 64;
    for (int e = 0; e < hd; ++e) {
      if (e != d && e != (d + 256) % 512) {
        EXPECT_EQ(x[e], 0.0) << "dim " << d << " leaked into " << e;
      }
    }
    if (!rotates) {
      EXPECT_EQ(x[d], 1.0) << "dim " << d << " must pass through";
      continue;
    }
    const double angle = pos * std::pow(theta, -2.0 * j / 512.0);
    EXPECT_NEAR(x[d], std::cos(angle), 1e-15) << d;
    // rotate_half: x'[j] = x[j] cos - x[j+256] sin; x'[j+256] = x[j+256] cos + x[j] sin.
    const double partner = x[(d + 256) % 512];
    EXPECT_NEAR(partner, d < 256 ? std::sin(angle) : -std::sin(angle), 1e-15) << d;
    EXPECT_NE(partner, 0.0) << d;
  }
  // The lowest rotating frequency is 1e6^(-126/512) (spec §1.3).
  std::vector<double> x(hd, 0.0);
  x[63] = 1.0;
  ApplyRope(x.data(), hd, pairs, theta, 1);
  EXPECT_NEAR(std::atan2(x[63 + 256], x[63]), std::pow(1e6, -126.0 / 512.0), 1e-12);
}

TEST(ReferenceRope, DefaultRotatesEveryPair) {
  const int hd = 256;
  for (int d = 0; d < hd; ++d) {
    std::vector<double> x(hd, 0.0);
    x[d] = 1.0;
    ApplyRope(x.data(), hd, hd / 2, 1e4, 3);
    EXPECT_NE(x[(d + 128) % 256], 0.0) << d;
  }
}

// The reference's own layer facts against the engine's plan, for the real configs in both forms.
void ExpectSameFacts(const std::string& preset, const std::string& scale, SynthConfigForm form) {
  SCOPED_TRACE(preset + " " + scale + (form == SynthConfigForm::kFlat ? " flat" : " per_layer"));
  auto spec = SynthPreset(preset, scale);
  ASSERT_TRUE(spec.ok());
  SynthOptions o;
  o.config_form = form;
  const std::string dir =
      TestTempDir("config-" + preset + scale + (form == SynthConfigForm::kFlat ? "-flat" : "-plc"));
  ASSERT_TRUE(WriteFileAtomic(dir + "/config.json", SynthConfigJson(*spec, o)).ok());
  ASSERT_TRUE(
      WriteFileAtomic(dir + "/generation_config.json", SynthGenerationConfigJson(*spec, o)).ok());
  auto facts = ReadReferenceConfig(dir);
  ASSERT_TRUE(facts.ok()) << facts.status().message();
  auto cfg = LoadModelConfig(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto plan = PlanFromConfig(*cfg);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(facts->layers.size(), plan->layers.size());
  EXPECT_EQ(facts->hidden, plan->hidden);
  EXPECT_EQ(facts->vocab, plan->vocab);
  EXPECT_EQ(facts->ple_dim, plan->ple_dim);
  for (size_t i = 0; i < plan->layers.size(); ++i) {
    const LayerFacts& f = facts->layers[i];
    const LayerPlan& p = plan->layers[i];
    SCOPED_TRACE("layer " + std::to_string(i));
    EXPECT_EQ(f.sliding, p.is_sliding());
    EXPECT_EQ(f.head_dim, p.head_dim);
    EXPECT_EQ(f.n_heads_q, p.n_heads_q);
    EXPECT_EQ(f.n_heads_kv, p.n_heads_kv);
    EXPECT_EQ(f.window, p.window);
    EXPECT_EQ(f.kv_source, p.kv_source);
    EXPECT_EQ(f.k_eq_v, p.k_eq_v);
    EXPECT_EQ(f.rope_pairs, p.rope_pairs);
    EXPECT_EQ(f.rope_theta, p.rope_theta);
    EXPECT_EQ(f.mlp_width, p.mlp_width);
  }
  // Spec §4 / §1.2, stated directly.
  if (scale == "tiny") {
    // Same rule at small size: the last non-shared layer is full, the one before it sliding.
    const int first_shared = preset == "e2b" ? 5 : preset == "e4b" ? 6 : 12;
    for (int i = first_shared; i < static_cast<int>(facts->layers.size()); ++i)
      EXPECT_EQ(facts->layers[i].kv_source,
                facts->layers[i].sliding ? first_shared - 2 : first_shared - 1);
  } else if (preset == "e2b") {
    for (int i = 15; i < 35; ++i) {
      EXPECT_EQ(facts->layers[i].kv_source, facts->layers[i].sliding ? 13 : 14) << i;
      EXPECT_EQ(facts->layers[i].mlp_width, 12288) << i;
    }
    for (int i = 0; i < 15; ++i) EXPECT_EQ(facts->layers[i].kv_source, i);
    EXPECT_EQ(facts->layers[0].mlp_width, 6144);
    EXPECT_FALSE(facts->layers[4].sliding);
    EXPECT_TRUE(facts->layers[5].sliding);  // 4:1, not 5:1
  } else if (preset == "e4b") {
    for (int i = 24; i < 42; ++i)
      EXPECT_EQ(facts->layers[i].kv_source, facts->layers[i].sliding ? 22 : 23) << i;
    for (int i = 0; i < 24; ++i) EXPECT_EQ(facts->layers[i].kv_source, i);
    EXPECT_EQ(facts->layers[30].mlp_width, 10240);
  } else {
    EXPECT_EQ(facts->layers[5].n_heads_kv, 1);
    EXPECT_TRUE(facts->layers[5].k_eq_v);
    EXPECT_EQ(facts->layers[5].head_dim, 512);
    EXPECT_EQ(facts->layers[5].rope_pairs, 64);
    EXPECT_EQ(facts->layers[4].n_heads_kv, 8);
    EXPECT_FALSE(facts->layers[4].k_eq_v);
    EXPECT_EQ(facts->layers[4].window, 1024);
  }
}

TEST(ReferenceConfig, TwoDerivationsAgreeOnRealConfigs) {
  for (const char* preset : {"e2b", "e4b", "12b"})
    for (const char* scale : {"full", "tiny"})
      for (SynthConfigForm form : {SynthConfigForm::kFlat, SynthConfigForm::kPerLayer})
        ExpectSameFacts(preset, scale, form);
}

// A small-vocabulary tiny checkpoint keeps these probes fast.
SynthOptions Fast() {
  SynthOptions o;
  o.vocab = 512;
  return o;
}

TEST(ReferencePitfalls, SlidingWindowShowsDistanceWMinus1AndHidesW) {
  const std::string dir = TinyCheckpoint("e2b", Fast());
  auto model = ReferenceModel::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const LayerFacts& f = (*model)->layers()[0];
  ASSERT_TRUE(f.sliding);
  const int W = f.window, q = W + 5, n = q + 2;
  const std::vector<int> ids = LcgPrompt(n, 512, 7);

  // Layer 0's attention output at queries q-1 and q, with the K of token q-W perturbed or not.
  auto attention_at = [&](bool perturb, int key_pos, int layer) {
    std::map<int, std::vector<double>> out;
    ReferenceHooks hooks;
    hooks.on_kv = [&](int l, int pos, const std::vector<double>&, std::vector<double>& k,
                      std::vector<double>&) {
      if (perturb && l == layer && pos == key_pos)
        for (double& e : k) e += 0.5;
    };
    hooks.on_attention = [&](int l, int pos, const std::vector<double>& a) {
      if (l == layer) out[pos] = a;
    };
    auto logits = (*model)->Logits<double>(ids, &hooks);
    EXPECT_TRUE(logits.ok());
    return out;
  };
  const auto base = attention_at(false, q - W, 0);
  const auto moved = attention_at(true, q - W, 0);
  EXPECT_EQ(base.at(q), moved.at(q)) << "key at distance W must be hidden";
  EXPECT_NE(base.at(q - 1), moved.at(q - 1)) << "key at distance W-1 must be visible";
  EXPECT_EQ(base.at(q - W - 1), moved.at(q - W - 1))
      << "a key must not be visible before it exists";
  EXPECT_NE(base.at(q - W), moved.at(q - W)) << "the current token is visible";

  // A full layer sees every earlier key.
  int full = -1;
  for (int l = 0; l < static_cast<int>((*model)->layers().size()); ++l)
    if (!(*model)->layers()[l].sliding) {
      full = l;
      break;
    }
  ASSERT_GE(full, 0);
  const auto fbase = attention_at(false, 0, full);
  const auto fmoved = attention_at(true, 0, full);
  EXPECT_NE(fbase.at(n - 1), fmoved.at(n - 1));
}

double Rms(const double* x, int n) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  return std::sqrt(ss / n + 1e-6);
}

TEST(ReferencePitfalls, KEqVTakesVFromTheRawKProjOutput) {
  const std::string dir = TinyCheckpoint("12b", Fast());
  auto model = ReferenceModel::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto store = TensorStore::OpenDir(dir);
  ASSERT_TRUE(store.ok());
  int checked_keqv = 0, checked_plain = 0;
  ReferenceHooks hooks;
  hooks.on_kv = [&](int l, int pos, const std::vector<double>& k_raw, std::vector<double>& k,
                    std::vector<double>& v) {
    const LayerFacts& f = (*model)->layers()[l];
    const TensorView* kn = (*store)->Find("model.language_model.layers." + std::to_string(l) +
                                          ".self_attn.k_norm.weight");
    ASSERT_NE(kn, nullptr);
    for (int g = 0; g < f.n_heads_kv; ++g) {
      const double* raw = k_raw.data() + g * f.head_dim;
      const double r = Rms(raw, f.head_dim);
      // K is RoPE(k_norm(raw)): undo nothing, recompute it from the same raw vector.
      std::vector<double> expect_k(f.head_dim);
      for (int d = 0; d < f.head_dim; ++d) expect_k[d] = raw[d] / r * kn->ValueAt(d);
      ApplyRope(expect_k.data(), f.head_dim, f.rope_pairs, f.rope_theta, pos);
      for (int d = 0; d < f.head_dim; ++d)
        ASSERT_NEAR(k[g * f.head_dim + d], expect_k[d], 1e-12) << "layer " << l;
      bool v_is_normed_raw = true;
      for (int d = 0; d < f.head_dim; ++d)
        v_is_normed_raw &= std::fabs(v[g * f.head_dim + d] - raw[d] / r) < 1e-12;
      if (f.k_eq_v) {
        EXPECT_TRUE(v_is_normed_raw)
            << "layer " << l << ": V must be the weightless norm of raw k_proj";
        ++checked_keqv;
      } else {
        EXPECT_FALSE(v_is_normed_raw) << "layer " << l << ": V must come from v_proj";
        ++checked_plain;
      }
    }
  };
  auto logits = (*model)->Logits<double>(LcgPrompt(6, 512, 7), &hooks);
  ASSERT_TRUE(logits.ok());
  EXPECT_GT(checked_keqv, 0);
  EXPECT_GT(checked_plain, 0);
  // And the 12B layout has no v_proj on its full layers.
  EXPECT_EQ((*store)->Find("model.language_model.layers.5.self_attn.v_proj.weight"), nullptr);
  EXPECT_NE((*store)->Find("model.language_model.layers.4.self_attn.v_proj.weight"), nullptr);
}

TEST(ReferencePitfalls, RemovingLayerScalarChangesTheOutput) {
  const std::string dir = TinyCheckpoint("e4b", Fast());
  auto with = ReferenceModel::Load(dir);
  ReferenceOptions o;
  o.ignore_layer_scalar = true;
  auto without = ReferenceModel::Load(dir, o);
  ASSERT_TRUE(with.ok() && without.ok());
  const auto ids = LcgPrompt(12, 512, 7);
  auto a = (*with)->Logits<double>(ids);
  auto b = (*without)->Logits<double>(ids);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(MaxAbsDiff(*a, *b), 0.1);
}

TEST(ReferencePitfalls, SharedLayersIgnoreTheirOwnStoredKV) {
  const std::string dir = TinyCheckpoint("e2b", Fast());
  auto base_model = ReferenceModel::Load(dir);
  ASSERT_TRUE(base_model.ok());
  const auto& layers = (*base_model)->layers();
  int shared = -1;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l)
    if (layers[l].kv_source != l) {
      shared = l;
      break;
    }
  ASSERT_GE(shared, 0);
  const int source = layers[shared].kv_source;
  const auto ids = LcgPrompt(14, 512, 7);
  auto base = (*base_model)->Logits<double>(ids);
  ASSERT_TRUE(base.ok());

  auto scramble = [](int layer) {
    const std::string p = "model.language_model.layers." + std::to_string(layer) + ".self_attn.";
    return [p](const std::string& name, std::vector<float>& v) {
      if (name != p + "k_proj.weight" && name != p + "v_proj.weight" && name != p + "k_norm.weight")
        return false;
      for (size_t i = 0; i < v.size(); ++i) v[i] = -v[i] * 1.5f + 0.01f * static_cast<float>(i % 7);
      return true;
    };
  };
  const std::string edited_shared = TestTempDir("edited-shared");
  ASSERT_TRUE(CopyCheckpoint(dir, edited_shared, scramble(shared)).ok());
  auto m1 = ReferenceModel::Load(edited_shared);
  ASSERT_TRUE(m1.ok());
  auto l1 = (*m1)->Logits<double>(ids);
  ASSERT_TRUE(l1.ok());
  EXPECT_EQ(MaxAbsDiff(*base, *l1), 0.0) << "shared layer " << shared << " used its own K/V";

  const std::string edited_source = TestTempDir("edited-source");
  ASSERT_TRUE(CopyCheckpoint(dir, edited_source, scramble(source)).ok());
  auto m2 = ReferenceModel::Load(edited_source);
  ASSERT_TRUE(m2.ok());
  auto l2 = (*m2)->Logits<double>(ids);
  ASSERT_TRUE(l2.ok());
  EXPECT_GT(MaxAbsDiff(*base, *l2), 1e-3) << "source layer " << source << " K/V must matter";
}

TEST(ReferencePitfalls, EmbeddingScalesAreRoundedToTheWeightDType) {
  // HF: embed_scale.to(weight.dtype). Tiny presets use H = 96, P = 24 so the rounding shows.
  const std::pair<DType, std::pair<double, double>> cases[] = {
      {DType::kBF16, {9.8125, 4.90625}},
      {DType::kF16, {9.796875, 4.8984375}},
      {DType::kF32, {static_cast<float>(std::sqrt(96.0)), static_cast<float>(std::sqrt(24.0))}}};
  for (const auto& [dtype, scales] : cases) {
    SynthOptions o = Fast();
    o.dtype = dtype;
    auto model = ReferenceModel::Load(TinyCheckpoint("e4b", o));
    ASSERT_TRUE(model.ok()) << model.status().message();
    ASSERT_EQ((*model)->config().hidden, 96);
    ASSERT_EQ((*model)->config().ple_dim, 24);
    EXPECT_EQ((*model)->embedding_scale(), scales.first) << DTypeName(dtype);
    EXPECT_EQ((*model)->ple_scale(), scales.second) << DTypeName(dtype);
    auto logits = (*model)->Logits<double>(LcgPrompt(4, 512, 7));
    ASSERT_TRUE(logits.ok());
  }
}

TEST(ReferenceLoad, MissingTensorAndWrongShapeAreNamedErrors) {
  const std::string dir = TinyCheckpoint("12b", Fast());
  const std::string bad = TestTempDir("bad-missing");
  ASSERT_TRUE(CopyCheckpoint(dir, bad).ok());
  // Drop one tensor by rewriting the file without it.
  auto store = TensorStore::OpenDir(bad);
  ASSERT_TRUE(store.ok());
  std::vector<TensorToWrite> keep;
  for (const auto& n : (*store)->Names()) {
    if (n == "model.language_model.layers.3.layer_scalar") continue;
    const TensorView* t = (*store)->Find(n);
    keep.push_back({n, t->dtype, t->shape, std::vector<uint8_t>(t->data, t->data + t->bytes)});
  }
  store->reset();
  ASSERT_TRUE(WriteSafetensors(bad + "/model.safetensors", keep).ok());
  auto m = ReferenceModel::Load(bad);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("layers.3.layer_scalar"), std::string::npos)
      << m.status().message();

  // q_norm stored with half its length.
  const std::string bad_shape = TestTempDir("bad-shape");
  ASSERT_TRUE(CopyCheckpoint(dir, bad_shape).ok());
  auto store2 = TensorStore::OpenDir(bad_shape);
  ASSERT_TRUE(store2.ok());
  std::vector<TensorToWrite> all;
  for (const auto& n : (*store2)->Names()) {
    const TensorView* t = (*store2)->Find(n);
    TensorToWrite w{n, t->dtype, t->shape, std::vector<uint8_t>(t->data, t->data + t->bytes)};
    if (n == "model.language_model.layers.2.self_attn.q_norm.weight") {
      w.shape[0] /= 2;
      w.data.resize(w.data.size() / 2);
    }
    all.push_back(std::move(w));
  }
  store2->reset();
  ASSERT_TRUE(WriteSafetensors(bad_shape + "/model.safetensors", all).ok());
  auto m2 = ReferenceModel::Load(bad_shape);
  ASSERT_FALSE(m2.ok());
  EXPECT_NE(
      m2.status().message().find("layers.2.self_attn.q_norm.weight has shape [8], expected [16]"),
      std::string::npos)
      << m2.status().message();
}


// The reference splits products over threads and runs positions in chunks against its own K/V
// cache; neither may change a single bit: every output element is the same scalar loop in the
// same order. Prompts run past the sliding window (8/12/16 on the tiny presets), and every
// dtype's widening path is covered.
TEST(ReferenceStreaming, ThreadsAndChunksGiveBitIdenticalLogits) {
  const std::vector<int> ids = LcgPrompt(40, 512, 21);
  for (const std::string preset : {"e2b", "e4b", "12b"}) {
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      if (preset != "e4b" && dtype != DType::kBF16) continue;  // one preset per widening path
      SynthOptions o = Fast();
      o.dtype = dtype;
      const std::string dir = TinyCheckpoint(preset, o);
      ReferenceOptions one;
      one.threads = 1;
      auto base_model = ReferenceModel::Load(dir, one);
      ASSERT_TRUE(base_model.ok()) << base_model.status().message();
      ASSERT_EQ((*base_model)->threads(), 1);
      auto base = (*base_model)->Logits<double>(ids);
      auto base32 = (*base_model)->Logits<float>(ids);
      ASSERT_TRUE(base.ok() && base32.ok());
      ASSERT_EQ(base->size(), ids.size());
      for (int threads : {1, 2, 5}) {
        ReferenceOptions opt;
        opt.threads = threads;
        auto model = ReferenceModel::Load(dir, opt);
        ASSERT_TRUE(model.ok());
        for (int chunk : {0, 1, 5}) {
          const std::string what = preset + " " + DTypeName(dtype) + " threads " +
                                   std::to_string(threads) + " chunk " + std::to_string(chunk);
          auto got = (*model)->Logits<double>(ids, nullptr, chunk);
          ASSERT_TRUE(got.ok()) << what;
          ASSERT_EQ(got->size(), base->size()) << what;
          size_t differ = 0;
          for (size_t t = 0; t < ids.size(); ++t)
            for (size_t v = 0; v < (*got)[t].size(); ++v) differ += (*got)[t][v] != (*base)[t][v];
          EXPECT_EQ(differ, 0u) << what;
          if (chunk == 5) {
            auto got32 = (*model)->Logits<float>(ids, nullptr, chunk);
            ASSERT_TRUE(got32.ok());
            EXPECT_EQ(*got32, *base32) << what << " (float)";
            // The streamed form hands over the same rows, in order.
            int next = 0;
            ASSERT_TRUE((*model)
                            ->ForEachLogits<double>(ids, chunk,
                                                    [&](int pos, const std::vector<double>& row) {
                                                      EXPECT_EQ(pos, next++);
                                                      EXPECT_EQ(row, (*base)[pos]) << what;
                                                    })
                            .ok());
            EXPECT_EQ(next, static_cast<int>(ids.size()));
          }
        }
      }
    }
  }
}

// ReferenceOptions::replace_rows (g4 validate's held-weights oracle): every matrix is offered to
// it by name, and rows it supplies are the rows the reference multiplies with. The checkpoint's
// own rows handed back through readers give the same bits as reading the mapping.
TEST(ReferenceReplaceRows, CheckpointRowsThroughReadersGiveTheSameBits) {
  const std::vector<int> ids = LcgPrompt(20, 512, 3);
  for (const std::string preset : {"e2b", "e4b", "12b"}) {
    const std::string dir = TinyCheckpoint(preset, Fast());
    auto store = TensorStore::OpenDir(dir);
    ASSERT_TRUE(store.ok());
    std::string prefix = "model.";
    if ((*store)->Find("model.language_model.embed_tokens.weight")) prefix = "model.language_model.";
    auto base_model = ReferenceModel::Load(dir);
    ASSERT_TRUE(base_model.ok());
    auto base = (*base_model)->Logits<double>(ids);
    ASSERT_TRUE(base.ok());

    std::vector<std::string> asked;
    std::mutex mu;
    ReferenceOptions through;
    through.replace_rows = [&](const std::string& name) -> RowReader {
      const TensorView* t = (*store)->Find(prefix + name);
      if (!t || t->shape.size() != 2) return nullptr;
      {
        std::lock_guard<std::mutex> lock(mu);
        asked.push_back(name);
      }
      const int64_t cols = t->shape[1];
      return [t, cols](int64_t first, int rows, float* out) {
        for (int64_t i = 0; i < rows * cols; ++i) out[i] = static_cast<float>(t->ValueAt(first * cols + i));
      };
    };
    auto model = ReferenceModel::Load(dir, through);
    ASSERT_TRUE(model.ok());
    auto got = (*model)->Logits<double>(ids);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, *base) << preset;
    // The embedding (input rows and LM head), the PLE projections and every layer's matrices.
    const auto has = [&](const std::string& n) { return std::count(asked.begin(), asked.end(), n) == 1; };
    EXPECT_TRUE(has("embed_tokens.weight")) << preset;
    EXPECT_TRUE(has("layers.0.self_attn.q_proj.weight") && has("layers.0.self_attn.o_proj.weight") &&
                has("layers.0.self_attn.k_proj.weight") && has("layers.0.mlp.down_proj.weight"))
        << preset;
    const int layers = static_cast<int>((*base_model)->layers().size());
    EXPECT_TRUE(has("layers." + std::to_string(layers - 1) + ".mlp.up_proj.weight")) << preset;
    if ((*base_model)->config().ple_dim > 0) {
      EXPECT_TRUE(has("per_layer_model_projection.weight") && has("layers.0.per_layer_input_gate.weight") &&
                  has("layers.0.per_layer_projection.weight"))
          << preset;
    }
    EXPECT_FALSE(has("embed_tokens_per_layer.weight")) << preset << ": the PLE table stays the checkpoint's";

    // Rows a reader changes are used: the embedding's rows halved change the input and the LM
    // head; one layer's down_proj zeroed changes that layer's MLP output.
    for (const std::string changed : {"embed_tokens.weight", "layers.1.mlp.down_proj.weight"}) {
      ReferenceOptions altered = through;
      altered.replace_rows = [&, changed](const std::string& name) -> RowReader {
        RowReader plain = through.replace_rows(name);
        if (name != changed) return plain;
        const bool zero = changed != "embed_tokens.weight";
        const int64_t cols = (*store)->Find(prefix + name)->shape[1];
        return [plain, zero, cols](int64_t first, int rows, float* out) {
          plain(first, rows, out);
          for (int64_t i = 0; i < rows * cols; ++i) out[i] = zero ? 0.0f : out[i] * 0.5f;
        };
      };
      auto m2 = ReferenceModel::Load(dir, altered);
      ASSERT_TRUE(m2.ok());
      auto changed_logits = (*m2)->Logits<double>(ids);
      ASSERT_TRUE(changed_logits.ok());
      double max_diff = 0;
      for (size_t t = 0; t < ids.size(); ++t)
        for (size_t v = 0; v < (*base)[t].size(); ++v)
          max_diff = std::max(max_diff, std::abs((*changed_logits)[t][v] - (*base)[t][v]));
      EXPECT_GT(max_diff, 1e-3) << preset << " " << changed;
    }
  }
}

// Greedy decoding runs the prompt once and then one token per step against the cache; each step
// must equal the argmax (and the maximum) of the teacher-forced logits over prompt + tokens.
TEST(ReferenceStreaming, CachedGreedyEqualsTeacherForcedArgmax) {
  for (const std::string preset : {"e2b", "12b"}) {
    auto model = ReferenceModel::Load(TinyCheckpoint(preset, Fast()));
    ASSERT_TRUE(model.ok());
    const std::vector<int> prompt = LcgPrompt(9, 512, 5);
    const int n_new = 24;  // 9 + 24 positions: past the window of both presets
    auto trace = (*model)->GreedyTrace(prompt, n_new);
    ASSERT_TRUE(trace.ok());
    ASSERT_EQ(static_cast<int>(trace->size()), n_new);
    std::vector<int> all = prompt;
    for (const auto& s : *trace) all.push_back(s.token);
    all.pop_back();
    auto logits = (*model)->Logits<double>(all);
    ASSERT_TRUE(logits.ok());
    for (int s = 0; s < n_new; ++s) {
      const std::vector<double>& row = (*logits)[prompt.size() - 1 + s];
      const int argmax = static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
      EXPECT_EQ((*trace)[s].token, argmax) << preset << " step " << s;
      EXPECT_EQ((*trace)[s].top1, row[argmax]) << preset << " step " << s;
    }
  }
}

}  // namespace
}  // namespace g4::reference
