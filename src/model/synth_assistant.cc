#include "model/synth_assistant.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <numeric>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"

namespace g4 {

using json = nlohmann::json;

namespace {

constexpr const char* kSuffix = "-assistant";
constexpr int kClusterSize = 128;  // the released drafters: 262144 ids in 2048 clusters

int EffectiveVocab(const SynthAssistantSpec& spec, const SynthOptions& options) {
  return options.vocab > 0 ? options.vocab : spec.target.vocab;
}

int Centroids(int vocab) {
  return vocab % kClusterSize == 0 ? vocab / kClusterSize : 0;
}

// A seeded permutation of [0, V) (Fisher-Yates over splitmix64).
std::vector<int64_t> SeededPermutation(int64_t V, uint64_t seed) {
  std::vector<int64_t> p(V);
  std::iota(p.begin(), p.end(), int64_t{0});
  uint64_t s = seed ^ 0x5851f42d4c957f2dull;
  for (int64_t i = V - 1; i > 0; --i) {
    s += 0x9e3779b97f4a7c15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::swap(p[i], p[static_cast<int64_t>(z % static_cast<uint64_t>(i + 1))]);
  }
  return p;
}

}  // namespace

bool IsAssistantPreset(const std::string& preset) {
  const size_t n = std::strlen(kSuffix);
  return preset.size() > n && preset.compare(preset.size() - n, n, kSuffix) == 0;
}

Result<SynthAssistantSpec> SynthAssistantPreset(const std::string& preset,
                                                const std::string& scale) {
  if (!IsAssistantPreset(preset))
    return Status::Errorf("synth: \"", preset, "\" is not an assistant preset");
  SynthAssistantSpec s;
  s.preset = preset;
  const std::string target = preset.substr(0, preset.size() - std::strlen(kSuffix));
  G4_ASSIGN_OR_RETURN(s.target, SynthPreset(target, scale));
  const bool tiny = scale == "tiny";
  // docs/gemma4.md §10: E2B/E4B Ha 256, 4 heads, MLP 2048, centroid head; 12B Ha 1024, 16 heads,
  // MLP 8192, dense head. Tiny: the attention width (heads x head_dim) exceeds Ha on E2B/E4B, as
  // in the real ones.
  if (target == "12b") {
    s.hidden = tiny ? 64 : 1024;
    s.intermediate = tiny ? 128 : 8192;
    s.heads = 16;
  } else {
    s.hidden = tiny ? 32 : 256;
    s.intermediate = tiny ? 64 : 2048;
    s.heads = 4;
    s.centroid_head = true;
  }
  return s;
}

std::string SynthAssistantConfigJson(const SynthAssistantSpec& spec, const SynthOptions& options) {
  const SynthSpec& tg = spec.target;
  const int V = EffectiveVocab(spec, options);
  json t;
  t["model_type"] = tg.unified ? "gemma4_unified_text" : "gemma4_text";
  t["vocab_size"] = V;
  t["hidden_size"] = spec.hidden;
  t["intermediate_size"] = spec.intermediate;
  t["num_hidden_layers"] = 4;
  t["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention",
                      "full_attention"};
  t["num_attention_heads"] = spec.heads;
  t["num_key_value_heads"] = tg.kv_heads;
  t["head_dim"] = tg.head_dim;
  t["global_head_dim"] = tg.global_head_dim;
  t["num_global_key_value_heads"] = tg.global_kv_heads > 0 ? json(tg.global_kv_heads) : json();
  t["attention_k_eq_v"] = tg.k_eq_v;
  t["num_kv_shared_layers"] = 4;
  t["hidden_size_per_layer_input"] = 0;
  t["use_double_wide_mlp"] = false;
  t["hidden_activation"] = "gelu_pytorch_tanh";
  t["rms_norm_eps"] = 1e-6;
  t["sliding_window"] = tg.window;
  t["max_position_embeddings"] = tg.max_position;
  t["final_logit_softcapping"] = json();
  t["rope_parameters"] = {
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
      {"full_attention",
       {{"rope_type", "proportional"}, {"rope_theta", 1000000.0}, {"partial_rotary_factor", 0.25}}}};
  t["tie_word_embeddings"] = true;
  if (options.config_form == SynthConfigForm::kPerLayer) {
    // transformers >= 5.15: the full layer's geometry in per_layer_config (its KV-head override
    // only with K=V, as for the targets).
    t.erase("global_head_dim");
    t.erase("num_global_key_value_heads");
    json o = {{"head_dim", tg.global_head_dim}};
    if (tg.k_eq_v && tg.global_kv_heads > 0) o["num_key_value_heads"] = tg.global_kv_heads;
    t["per_layer_config"] = {{"3", o}};
  }
  json c;
  c["model_type"] = tg.unified ? "gemma4_unified_assistant" : "gemma4_assistant";
  c["architectures"] = {tg.unified ? "Gemma4UnifiedAssistantForCausalLM"
                                   : "Gemma4AssistantForCausalLM"};
  c["backbone_hidden_size"] = tg.hidden;
  const int centroids = Centroids(V);
  c["use_ordered_embeddings"] = spec.centroid_head;
  c["num_centroids"] = centroids > 0 ? centroids : 2048;
  c["centroid_intermediate_top_k"] = centroids > 0 ? std::min(centroids, std::max(2, centroids / 64)) : 32;
  c["tie_word_embeddings"] = true;
  c["text_config"] = t;
  c["dtype"] = options.dtype == DType::kF32 ? "float32"
               : options.dtype == DType::kF16 ? "float16" : "bfloat16";
  c["g4_synthetic"] = {{"preset", spec.preset}, {"scale", tg.scale}, {"seed", options.seed}};
  return c.dump(2) + "\n";
}

Status WriteSynthAssistant(const SynthAssistantSpec& spec, const SynthOptions& options,
                           const std::string& out_dir) {
  namespace fs = std::filesystem;
  if (options.dtype != DType::kBF16 && options.dtype != DType::kF16 && options.dtype != DType::kF32)
    return Status::Errorf("synth: --dtype must be bf16, f16 or f32");
  if (options.shards != 1) return Status::Errorf("synth: an assistant is written as one file");
  const int V = EffectiveVocab(spec, options);
  if (spec.centroid_head && Centroids(V) == 0)
    return Status::Errorf("synth: --vocab ", V, " must be a multiple of ", kClusterSize,
                          " for the centroid head");
  const SynthSpec& tg = spec.target;
  const int64_t Ha = spec.hidden, Hb = tg.hidden, I = spec.intermediate;
  std::vector<SynthTensor> tensors;
  auto normal = [&](const std::string& name, std::vector<int64_t> shape, double std) {
    tensors.push_back(SynthTensor{name, std::move(shape), true, 0.0, std});
  };
  auto norm = [&](const std::string& name, int64_t n, double centre = 1.0) {
    tensors.push_back(SynthTensor{name, {n}, false, 0.9 * centre, 1.1 * centre});
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in) {
    normal(name, {out, in}, 1.0 / std::sqrt(static_cast<double>(in)));
  };
  // Logits = E z with |z| ~ sqrt(Ha): std(E) = 6 / sqrt(Ha) gives logits std ~6, like the target.
  normal("model.embed_tokens.weight", {V, Ha}, 6.0 / std::sqrt(static_cast<double>(Ha)));
  norm("model.norm.weight", Ha);
  // The input [e x sqrt(Hb), h] has O(1) entries (scaled embedding, normed hidden): N(0, 1/in).
  linear("pre_projection.weight", Ha, 2 * Hb);
  linear("post_projection.weight", Hb, Ha);
  if (spec.centroid_head)
    normal("masked_embedding.centroids.weight", {Centroids(V), Ha},
           6.0 / std::sqrt(static_cast<double>(Ha)));
  for (int i = 0; i < 4; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    const int hd = i == 3 ? tg.global_head_dim : tg.head_dim;
    for (const char* n : {"input_layernorm.weight", "post_attention_layernorm.weight",
                          "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"})
      norm(l + n, Ha);
    linear(l + "self_attn.q_proj.weight", int64_t{spec.heads} * hd, Ha);
    norm(l + "self_attn.q_norm.weight", hd, std::pow(static_cast<double>(hd), -0.25));
    linear(l + "self_attn.o_proj.weight", Ha, int64_t{spec.heads} * hd);
    linear(l + "mlp.gate_proj.weight", I, Ha);
    linear(l + "mlp.up_proj.weight", I, Ha);
    linear(l + "mlp.down_proj.weight", Ha, I);
    tensors.push_back(SynthTensor{l + "layer_scalar", {1}, false, 0.4, 0.9});
  }

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::Errorf(out_dir, ": cannot create directory: ", ec.message());
  G4_RETURN_IF_ERROR(
      WriteFileAtomic(out_dir + "/config.json", SynthAssistantConfigJson(spec, options)));

  std::vector<TensorToWrite> specs;
  for (const SynthTensor& t : tensors)
    specs.push_back(TensorToWrite{t.name, options.dtype, t.shape, {}});
  std::vector<int64_t> ordering;
  if (spec.centroid_head) {
    ordering = SeededPermutation(V, options.seed);
    specs.push_back(TensorToWrite{"masked_embedding.token_ordering", DType::kI64, {V}, {}});
  }
  const size_t esize = DTypeSize(options.dtype);
  auto fill = [&](size_t index, uint64_t offset, uint8_t* out, size_t bytes) -> Status {
    if (index == tensors.size()) {  // the ordering, int64 little-endian
      std::memcpy(out, reinterpret_cast<const uint8_t*>(ordering.data()) + offset, bytes);
      return OkStatus();
    }
    const SynthTensor& t = tensors[index];
    const uint64_t first = offset / esize;
    for (size_t e = 0; e < bytes / esize; ++e) {
      StoreFloatElement(options.dtype, SynthValue(t, options.seed, first + e), out + esize * e);
    }
    return OkStatus();
  };
  return WriteSafetensorsStreaming(out_dir + "/model.safetensors", specs, fill,
                                   {{"format", "pt"}});
}

}  // namespace g4
