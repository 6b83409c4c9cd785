#include "model/synth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"

namespace g4 {

using json = nlohmann::json;

namespace {

const char* kSliding = "sliding_attention";
const char* kFull = "full_attention";
const char* kTextPrefix = "model.language_model.";

// splitmix64's output function: a good 64-bit mix, so element i of a tensor is a pure function
// of (tensor seed, i) and chunking or sharding cannot change the values.
inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t TensorSeed(const std::string& name, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return Mix(h ^ Mix(seed + 0x9e3779b97f4a7c15ull));
}

int EffectiveVocab(const SynthSpec& spec, const SynthOptions& options) {
  return options.vocab > 0 ? options.vocab : spec.vocab;
}

const char* DTypeConfigName(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return "float16";
    case DType::kF32:
      return "float32";
    default:
      return "bfloat16";
  }
}

std::vector<std::string> Pattern(int layers, int period) {
  std::vector<std::string> types;
  for (int i = 0; i < layers; ++i) types.push_back((i + 1) % period == 0 ? kFull : kSliding);
  types.back() = kFull;  // the last layer is always full (spec §9.5)
  return types;
}

std::string ShardName(int k, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", k, n);
  return buf;
}

}  // namespace

int64_t SynthTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<SynthSpec> SynthPreset(const std::string& preset, const std::string& scale) {
  if (scale != "tiny" && scale != "full")
    return Status::Errorf("synth: --scale must be tiny or full, got \"", scale, "\"");
  // Tiny presets: hidden 96 and PLE width 24 are not perfect squares, so the dtype rounding of
  // the embedding scales shows (bf16(sqrt(96)) = 9.8125, bf16(sqrt(24)) = 4.90625; E2B's 39.25).
  SynthSpec s;
  s.preset = preset;
  s.scale = scale;
  const bool tiny = scale == "tiny";
  if (preset == "e2b") {
    // E2B: 4:1 pattern, MQA, KV sharing (sources = last sliding / last full non-shared layer),
    // double-wide MLP on shared layers, PLE.
    s.hidden = tiny ? 96 : 1536;
    s.intermediate = tiny ? 192 : 6144;
    s.layers = tiny ? 10 : 35;
    s.heads = 8;
    s.kv_heads = 1;
    s.head_dim = tiny ? 16 : 256;
    s.global_head_dim = tiny ? 32 : 512;
    s.double_wide = true;
    s.window = tiny ? 8 : 512;
    s.kv_shared = tiny ? 5 : 20;
    s.ple_dim = tiny ? 24 : 256;
    s.max_position = 131072;
    s.layer_types = Pattern(s.layers, 5);
  } else if (preset == "e4b") {
    s.hidden = tiny ? 96 : 2560;
    s.intermediate = tiny ? 192 : 10240;
    s.layers = tiny ? 12 : 42;
    s.heads = 8;
    s.kv_heads = 2;
    s.head_dim = tiny ? 16 : 256;
    s.global_head_dim = tiny ? 32 : 512;
    s.window = tiny ? 12 : 512;
    s.kv_shared = tiny ? 6 : 18;
    s.ple_dim = tiny ? 24 : 256;
    s.max_position = 131072;
    s.layer_types = Pattern(s.layers, 6);
  } else if (preset == "12b") {
    // 12B: one global KV head with K=V (no v_proj on full layers), no PLE, no sharing.
    s.unified = true;
    s.hidden = tiny ? 96 : 3840;
    s.intermediate = tiny ? 192 : 15360;
    s.layers = tiny ? 12 : 48;
    s.heads = 16;
    s.kv_heads = 8;
    s.head_dim = tiny ? 16 : 256;
    s.global_head_dim = tiny ? 32 : 512;
    s.global_kv_heads = 1;
    s.k_eq_v = true;
    s.window = tiny ? 16 : 1024;
    s.max_position = 262144;
    s.layer_types = Pattern(s.layers, 6);
  } else {
    return Status::Errorf("synth: --preset must be e2b, e4b or 12b, got \"", preset, "\"");
  }
  return s;
}

std::string SynthConfigJson(const SynthSpec& spec, const SynthOptions& options) {
  const int vocab = EffectiveVocab(spec, options);
  json t;
  t["model_type"] = spec.unified ? "gemma4_unified_text" : "gemma4_text";
  t["vocab_size"] = vocab;
  t["vocab_size_per_layer_input"] = vocab;
  t["hidden_size"] = spec.hidden;
  t["intermediate_size"] = spec.intermediate;
  t["num_hidden_layers"] = spec.layers;
  t["num_attention_heads"] = spec.heads;
  t["num_key_value_heads"] = spec.kv_heads;
  t["head_dim"] = spec.head_dim;
  t["attention_k_eq_v"] = spec.k_eq_v;
  t["use_double_wide_mlp"] = spec.double_wide;
  t["layer_types"] = spec.layer_types;
  t["sliding_window"] = spec.window;
  t["num_kv_shared_layers"] = spec.kv_shared;
  t["hidden_size_per_layer_input"] = spec.ple_dim;
  t["final_logit_softcapping"] = 30.0;
  t["rms_norm_eps"] = 1e-6;
  t["hidden_activation"] = "gelu_pytorch_tanh";
  t["max_position_embeddings"] = spec.max_position;
  t["tie_word_embeddings"] = true;
  t["attention_bias"] = false;
  t["attention_dropout"] = 0.0;
  t["initializer_range"] = 0.02;
  t["use_cache"] = true;
  t["use_bidirectional_attention"] = spec.unified ? json("vision") : json(nullptr);
  if (!spec.unified) {
    t["enable_moe_block"] = false;
    t["num_experts"] = nullptr;
    t["top_k_experts"] = nullptr;
    t["moe_intermediate_size"] = nullptr;
  }
  t["pad_token_id"] = 0;
  t["eos_token_id"] = 1;
  t["bos_token_id"] = 2;
  t["dtype"] = DTypeConfigName(options.dtype);
  t["rope_parameters"] = {{kSliding, {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                          {kFull,
                           {{"rope_type", "proportional"},
                            {"rope_theta", 1000000.0},
                            {"partial_rotary_factor", 0.25}}}};
  if (options.config_form == SynthConfigForm::kFlat) {
    t["global_head_dim"] = spec.global_head_dim;
    t["num_global_key_value_heads"] =
        spec.global_kv_heads > 0 ? json(spec.global_kv_heads) : json(nullptr);
  } else {
    // Form B: an override for every full layer; the KV-head override only with K=V (HF gate).
    json plc = json::object();
    for (int i = 0; i < spec.layers; ++i) {
      if (spec.layer_types[i] != kFull) continue;
      json o = {{"head_dim", spec.global_head_dim}};
      if (spec.k_eq_v && spec.global_kv_heads > 0) o["num_key_value_heads"] = spec.global_kv_heads;
      plc[std::to_string(i)] = o;
    }
    t["per_layer_config"] = plc;
  }

  json c;
  c["model_type"] = spec.unified ? "gemma4_unified" : "gemma4";
  c["architectures"] = {spec.unified ? "Gemma4UnifiedForConditionalGeneration"
                                     : "Gemma4ForConditionalGeneration"};
  c["text_config"] = t;
  c["vision_config"] = {{"model_type", spec.unified ? "gemma4_unified_vision" : "gemma4_vision"},
                        {"hidden_size", 32},
                        {"num_hidden_layers", 1},
                        {"patch_size", 16}};
  c["audio_config"] = {{"model_type", spec.unified ? "gemma4_unified_audio" : "gemma4_audio"},
                       {"hidden_size", 32},
                       {"num_hidden_layers", 1}};
  c["eos_token_id"] = {1, 106};
  c["image_token_id"] = 258880;
  c["audio_token_id"] = 258881;
  c["video_token_id"] = 258884;
  c["boi_token_id"] = 255999;
  c["eoi_token_id"] = 258882;
  c["boa_token_id"] = 256000;
  c["eoa_token_id"] = 258883;
  c["eoa_token_index"] = 258883;
  c["vision_soft_tokens_per_image"] = 280;
  c["initializer_range"] = 0.02;
  c["tie_word_embeddings"] = true;
  c["dtype"] = DTypeConfigName(options.dtype);
  c["transformers_version"] = "5.5.0";
  c["g4_synthetic"] = {{"preset", spec.preset}, {"scale", spec.scale}, {"seed", options.seed}};
  return c.dump(2) + "\n";
}

std::string SynthGenerationConfigJson(const SynthSpec& spec, const SynthOptions& options) {
  json g;
  g["bos_token_id"] = 2;
  g["pad_token_id"] = 0;
  g["eos_token_id"] = {1, 106, 50};
  g["do_sample"] = true;
  g["top_k"] = 64;
  g["top_p"] = 0.95;
  g["temperature"] = 1.0;
  if (spec.unified) {
    // Suppressed ids that a --vocab override cuts off are left out rather than left dangling.
    json suppress = json::array();
    for (int id : {258882, 258883})
      if (id < EffectiveVocab(spec, options)) suppress.push_back(id);
    g["suppress_tokens"] = suppress;
  }
  g["transformers_version"] = "5.5.0";
  return g.dump(2) + "\n";
}

std::vector<SynthTensor> SynthTensors(const SynthSpec& spec, const SynthOptions& options) {
  const int64_t V = EffectiveVocab(spec, options), H = spec.hidden, P = spec.ple_dim,
                L = spec.layers;
  std::vector<SynthTensor> out;
  auto normal = [&](const std::string& name, std::vector<int64_t> shape, double std) {
    out.push_back(SynthTensor{name, std::move(shape), true, 0.0, std});
  };
  auto uniform = [&](const std::string& name, std::vector<int64_t> shape, double lo, double hi) {
    out.push_back(SynthTensor{name, std::move(shape), false, lo, hi});
  };
  auto norm = [&](const std::string& name, int64_t n, double centre = 1.0) {
    uniform(name, {n}, 0.9 * centre, 1.1 * centre);
  };
  auto linear = [&](const std::string& name, int64_t out_features, int64_t in_features) {
    normal(name, {out_features, in_features}, 1.0 / std::sqrt(static_cast<double>(in_features)));
  };
  const std::string p = kTextPrefix;
  // Tied LM head: logit std = std(E) * |final hidden| ~ std(E) * sqrt(H); aim for ~6.
  normal(p + "embed_tokens.weight", {V, H}, 6.0 / std::sqrt(static_cast<double>(H)));
  norm(p + "norm.weight", H);
  if (P > 0) {
    // Token part is scaled by sqrt(P) in the model: unit RMS after scaling.
    normal(p + "embed_tokens_per_layer.weight", {V, L * P},
           1.0 / std::sqrt(static_cast<double>(P)));
    linear(p + "per_layer_model_projection.weight", L * P, H);
    norm(p + "per_layer_projection_norm.weight", P);
  }
  const int first_shared = spec.layers - spec.kv_shared;
  for (int i = 0; i < spec.layers; ++i) {
    const std::string l = p + "layers." + std::to_string(i) + ".";
    const bool full = spec.layer_types[i] == kFull;
    const int hd = full ? spec.global_head_dim : spec.head_dim;
    const int kv =
        (full && spec.k_eq_v && spec.global_kv_heads > 0) ? spec.global_kv_heads : spec.kv_heads;
    const bool shared = spec.kv_shared > 0 && i >= first_shared;
    const int width = spec.intermediate * ((spec.double_wide && shared) ? 2 : 1);
    for (const char* n : {"input_layernorm.weight", "post_attention_layernorm.weight",
                          "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"})
      norm(l + n, H);
    // Attention scale is 1.0: q/k norm weights ~ hd^-0.25 keep q.k near unit variance.
    const double qk_centre = std::pow(static_cast<double>(hd), -0.25);
    linear(l + "self_attn.q_proj.weight", int64_t{spec.heads} * hd, H);
    norm(l + "self_attn.q_norm.weight", hd, qk_centre);
    // Shared layers still store k_proj / v_proj / k_norm (unused), as the real checkpoints do.
    linear(l + "self_attn.k_proj.weight", int64_t{kv} * hd, H);
    norm(l + "self_attn.k_norm.weight", hd, qk_centre);
    if (!(full && spec.k_eq_v)) linear(l + "self_attn.v_proj.weight", int64_t{kv} * hd, H);
    linear(l + "self_attn.o_proj.weight", H, int64_t{spec.heads} * hd);
    linear(l + "mlp.gate_proj.weight", width, H);
    linear(l + "mlp.up_proj.weight", width, H);
    linear(l + "mlp.down_proj.weight", H, width);
    if (P > 0) {
      linear(l + "per_layer_input_gate.weight", P, H);
      linear(l + "per_layer_projection.weight", H, P);
      norm(l + "post_per_layer_input_norm.weight", H);
    }
    // Far from 1 so that a missing multiply shows.
    uniform(l + "layer_scalar", {1}, 0.4, 0.9);
  }
  // A few multimodal tensors that a text decoder must skip.
  linear("model.vision_tower.patch_embedder.input_proj.weight", 32, 48);
  linear("model.vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight", 32, 32);
  linear("model.embed_vision.embedding_projection.weight", H, 32);
  normal("model.audio_tower.subsample_conv_projection.layer0.conv.weight", {8, 1, 3, 3}, 0.3);
  linear("model.audio_tower.layers.0.self_attn.q_proj.linear.weight", 32, 32);
  linear("model.embed_audio.embedding_projection.weight", H, 32);
  std::sort(out.begin(), out.end(),
            [](const SynthTensor& a, const SynthTensor& b) { return a.name < b.name; });
  return out;
}

namespace {

float ValueAt(const SynthTensor& tensor, uint64_t tensor_seed, uint64_t index) {
  const uint64_t bits = Mix(tensor_seed + (index + 1) * 0x9e3779b97f4a7c15ull);
  if (tensor.normal) {
    // Irwin-Hall of four 16-bit uniforms: mean 2, variance 1/3; cheap, and bounded at 3.5 sigma.
    double s = 0;
    for (int k = 0; k < 4; ++k)
      s += (static_cast<double>((bits >> (16 * k)) & 0xffff) + 0.5) / 65536.0;
    return static_cast<float>(tensor.lo + tensor.hi * (s - 2.0) * 1.7320508075688772);
  }
  const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;
  return static_cast<float>(tensor.lo + (tensor.hi - tensor.lo) * u);
}

}  // namespace

float SynthValue(const SynthTensor& tensor, uint64_t seed, uint64_t index) {
  return ValueAt(tensor, TensorSeed(tensor.name, seed), index);
}

Status WriteSynthCheckpoint(const SynthSpec& spec, const SynthOptions& options,
                            const std::string& out_dir) {
  namespace fs = std::filesystem;
  if (options.dtype != DType::kBF16 && options.dtype != DType::kF16 && options.dtype != DType::kF32)
    return Status::Errorf("synth: --dtype must be bf16, f16 or f32");
  if (options.vocab != 0 && options.vocab < 256)
    return Status::Errorf("synth: --vocab ", options.vocab,
                          " is too small (the special ids up to 106 must exist; use >= 256)");
  if (options.tokenizer.empty() || !FileExists(options.tokenizer))
    return Status::Errorf(
        "synth: tokenizer.json not found at \"", options.tokenizer,
        "\" (pass --tokenizer PATH; set-up derives assets/tokenizer/gemma4.json)");
  std::vector<SynthTensor> tensors = SynthTensors(spec, options);
  if (options.shards < 1 || options.shards > static_cast<int>(tensors.size()))
    return Status::Errorf("synth: --shards must be in [1, ", tensors.size(), "], got ",
                          options.shards);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::Errorf(out_dir, ": cannot create directory: ", ec.message());

  G4_RETURN_IF_ERROR(WriteFileAtomic(out_dir + "/config.json", SynthConfigJson(spec, options)));
  G4_RETURN_IF_ERROR(WriteFileAtomic(out_dir + "/generation_config.json",
                                     SynthGenerationConfigJson(spec, options)));
  fs::copy_file(options.tokenizer, out_dir + "/tokenizer.json",
                fs::copy_options::overwrite_existing, ec);
  if (ec)
    return Status::Errorf(out_dir, "/tokenizer.json: cannot copy from ", options.tokenizer, ": ",
                          ec.message());

  // Remove weight files of an earlier layout, which TensorStore would otherwise prefer or mix.
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "model.safetensors" || name == "model.safetensors.index.json" ||
        (name.rfind("model-", 0) == 0 && name.find(".safetensors") != std::string::npos))
      fs::remove(entry.path(), ec);
  }

  const size_t esize = DTypeSize(options.dtype);
  uint64_t total_bytes = 0;
  for (const auto& t : tensors) total_bytes += static_cast<uint64_t>(t.numel()) * esize;

  // Contiguous runs of tensors with about total/N bytes each, at least one tensor per shard.
  std::vector<std::vector<size_t>> shards(options.shards);
  {
    uint64_t acc = 0;
    int k = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const size_t left = tensors.size() - i;
      const int shards_after = options.shards - 1 - k;
      if (!shards[k].empty() && k + 1 < options.shards &&
          (acc >= total_bytes * (k + 1) / options.shards ||
           left <= static_cast<size_t>(shards_after)))
        ++k;
      shards[k].push_back(i);
      acc += static_cast<uint64_t>(tensors[i].numel()) * esize;
    }
  }

  json weight_map = json::object();
  for (int k = 0; k < options.shards; ++k) {
    const std::string file =
        options.shards == 1 ? "model.safetensors" : ShardName(k + 1, options.shards);
    std::vector<TensorToWrite> specs;
    std::vector<uint64_t> seeds;
    for (size_t i : shards[k]) {
      specs.push_back(TensorToWrite{tensors[i].name, options.dtype, tensors[i].shape, {}});
      seeds.push_back(TensorSeed(tensors[i].name, options.seed));
      weight_map[tensors[i].name] = file;
    }
    auto fill = [&](size_t index, uint64_t offset, uint8_t* out, size_t bytes) -> Status {
      const SynthTensor& t = tensors[shards[k][index]];
      const uint64_t first = offset / esize;
      const size_t n = bytes / esize;
      for (size_t e = 0; e < n; ++e) {
        StoreFloatElement(options.dtype, ValueAt(t, seeds[index], first + e), out + esize * e);
      }
      return OkStatus();
    };
    G4_RETURN_IF_ERROR(
        WriteSafetensorsStreaming(out_dir + "/" + file, specs, fill, {{"format", "pt"}}));
  }
  if (options.shards > 1) {
    json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    G4_RETURN_IF_ERROR(
        WriteFileAtomic(out_dir + "/model.safetensors.index.json", index.dump(2) + "\n"));
  }
  return OkStatus();
}

}  // namespace g4
