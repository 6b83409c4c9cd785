#include "model/packed_model.h"

#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "model/arch/gemma4.h"
#include "model/forward.h"
#include "model/rank_plan.h"

namespace g4 {

namespace {

// Every tensor of ModelWeights under `plan`, with the shape the plan requires: the one list both
// writing and loading walk, so the two cannot disagree. Works on const and non-const weights.
template <class W, class MatrixFn, class VectorFn, class ScalarFn>
void ForEachTensor(const ModelPlan& plan, W& w, MatrixFn matrix, VectorFn vector, ScalarFn scalar) {
  const int H = plan.hidden, L = plan.n_layers(), P = plan.ple_dim;
  // The tied LM head: all of it, or under tensor parallelism this rank's vocabulary rows (none
  // on the ranks other than 0 when rank 0 holds the whole head).
  const int head_rows = plan.lm_head_end() - plan.lm_head_begin();
  if (head_rows > 0) matrix("embed", w.embed, head_rows, H);
  vector("final_norm", w.final_norm, H);
  if (P > 0) {
    matrix("ple_model_projection", w.ple_model_projection, L * P, H);
    vector("ple_projection_norm", w.ple_projection_norm, P);
  }
  for (int i = 0; i < L; ++i) {
    const LayerPlan& lp = plan.layers[i];
    auto& lw = w.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    vector(p + "input_norm", lw.input_norm, H);
    vector(p + "post_attention_norm", lw.post_attention_norm, H);
    vector(p + "pre_feedforward_norm", lw.pre_feedforward_norm, H);
    vector(p + "post_feedforward_norm", lw.post_feedforward_norm, H);
    matrix(p + "q_proj", lw.q_proj, lp.q_dim(), H);
    vector(p + "q_norm", lw.q_norm, lp.head_dim);
    matrix(p + "o_proj", lw.o_proj, H, lp.q_dim());
    if (lp.owns_kv()) {
      matrix(p + "k_proj", lw.k_proj, lp.kv_dim(), H);
      vector(p + "k_norm", lw.k_norm, lp.head_dim);
      if (!lp.k_eq_v) matrix(p + "v_proj", lw.v_proj, lp.kv_dim(), H);
    }
    matrix(p + "gate_proj", lw.gate_proj, lp.mlp_width, H);
    matrix(p + "up_proj", lw.up_proj, lp.mlp_width, H);
    matrix(p + "down_proj", lw.down_proj, H, lp.mlp_width);
    if (P > 0) {
      matrix(p + "ple_gate", lw.ple_gate, P, H);
      matrix(p + "ple_projection", lw.ple_projection, H, P);
      vector(p + "ple_post_norm", lw.ple_post_norm, H);
    }
    scalar(p + "layer_scalar", lw.layer_scalar);
  }
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

const char* LmHeadName(LmHeadPlacement p) {
  return p == LmHeadPlacement::kRank0 ? "rank0" : "split";
}

std::string RankPrefix(int rank) { return "rank" + std::to_string(rank) + "/"; }

const char* kCheckpointFiles[] = {"config.json", "generation_config.json", "tokenizer.json",
                                  "tokenizer_config.json", "chat_template.jinja"};

// The first difference between two plan JSONs, for the error message.
std::string FirstDifference(const nlohmann::json& a, const nlohmann::json& b, const std::string& where = "plan") {
  if (a.type() != b.type()) return where;
  if (a.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (!b.contains(it.key())) return where + "." + it.key();
      if (it.value() != b[it.key()]) return FirstDifference(it.value(), b[it.key()], where + "." + it.key());
    }
    for (auto it = b.begin(); it != b.end(); ++it)
      if (!a.contains(it.key())) return where + "." + it.key();
  } else if (a.is_array()) {
    if (a.size() != b.size()) return where + " (length " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) + ")";
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i]) return FirstDifference(a[i], b[i], where + "[" + std::to_string(i) + "]");
  }
  return where + " (" + a.dump() + " vs " + b.dump() + ")";
}

// Metadata fields, read defensively: an artifact is outside input, and json::value() throws on
// a type mismatch and converts an out-of-range number with undefined behaviour.
std::string StringField(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// `fallback` when absent; INT_MIN when present but not an integer that fits an int.
int IntField(const nlohmann::json& j, const char* key, int fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    return v <= static_cast<uint64_t>(INT_MAX) ? static_cast<int>(v) : INT_MIN;
  }
  if (it->is_number_integer()) {
    const int64_t v = it->get<int64_t>();
    return v >= INT_MIN && v <= INT_MAX ? static_cast<int>(v) : INT_MIN;
  }
  return INT_MIN;
}

// `fallback` when absent; false when present but not a finite number within float range.
bool FloatField(const nlohmann::json& j, const char* key, float fallback, float* out) {
  auto it = j.find(key);
  if (it == j.end()) {
    *out = fallback;
    return true;
  }
  if (!it->is_number()) return false;
  const double v = it->get<double>();
  if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max()) return false;
  *out = static_cast<float>(v);
  return true;
}

Result<PackedModel> LoadPackedModelChecked(const std::string& path, WeightType requested,
                                           int threads, int rank, int tp, LmHeadPlacement lm_head);

}  // namespace

nlohmann::json PlanToJson(const ModelPlan& plan) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerPlan& l : plan.layers) {
    // Append new LayerPlan fields here (a changed plan must show in the artifact's plan check).
    layers.push_back({{"index", l.index},
                      {"kind", l.is_sliding() ? "sliding" : "full"},
                      {"head_dim", l.head_dim},
                      {"n_heads_q", l.n_heads_q},
                      {"n_heads_kv", l.n_heads_kv},
                      {"group_size", l.group_size},
                      {"q_head_offset", l.q_head_offset},
                      {"kv_head_offset", l.kv_head_offset},
                      {"window", l.window},
                      {"kv_source", l.kv_source},
                      {"kv_slot", l.kv_slot},
                      {"k_eq_v", l.k_eq_v},
                      {"rope_theta", l.rope_theta},
                      {"rope_pairs", l.rope_pairs},
                      {"mlp_width", l.mlp_width},
                      {"ple_offset", l.ple_offset}});
    // A rank's share (only then, so that --tp 1 plans read as they always did).
    if (plan.tp_size > 1) layers.back()["mlp_offset"] = l.mlp_offset;
  }
  nlohmann::json j = {{"hidden", plan.hidden},       {"vocab", plan.vocab},
                      {"ple_dim", plan.ple_dim},     {"first_kv_shared", plan.first_kv_shared},
                      {"softcap", plan.softcap},     {"rms_norm_eps", plan.rms_norm_eps},
                      {"kv_owners", plan.kv_owners}, {"layers", layers}};
  if (plan.tp_size > 1) {
    j["tp_rank"] = plan.tp_rank;
    j["tp_size"] = plan.tp_size;
    j["lm_head"] = LmHeadName(plan.lm_head);
    j["lm_head_rows"] = {plan.lm_head_begin(), plan.lm_head_end()};
  }
  return j;
}

namespace {

// Writes one rank's plan and tensors under PREFIX.
Status AddRankSections(PackWriter& writer, const std::string& prefix, const ModelPlan& plan,
                       const ModelWeights& w, int* sections) {
  G4_RETURN_IF_ERROR(writer.AddText(prefix + "plan", PlanToJson(plan).dump(1)));
  ++*sections;
  Status status;
  ForEachTensor(
      plan, w,
      [&](const std::string& name, const WeightMatrix& m, int, int) {
        if (!status.ok()) return;
        status = writer.Add(prefix + name, m.data, m.bytes,
                            {{"kind", "matrix"},
                             {"type", WeightTypeName(m.type)},
                             {"rows", m.rows},
                             {"cols", m.cols}});
        ++*sections;
      },
      [&](const std::string& name, const std::vector<float>& v, int) {
        if (!status.ok()) return;
        status = writer.Add(prefix + name, v.data(), v.size() * sizeof(float),
                            {{"kind", "vector"}, {"type", "f32"}, {"n", v.size()}});
        ++*sections;
      },
      [&](const std::string& name, float v) {
        if (!status.ok()) return;
        status = writer.Add(prefix + name, &v, sizeof v,
                            {{"kind", "vector"}, {"type", "f32"}, {"n", 1}});
        ++*sections;
      });
  return status;
}

}  // namespace

Status PackModel(const std::string& dir, const std::string& out, const PackModelOptions& options,
                 PackModelStats* stats) {
  const int tp = options.tp;
  if (tp < 1) return Status::Errorf("--tp ", tp, ": the rank count must be at least 1");
  if (IsPackFile(dir)) return Status::Errorf(dir, " is already a packed artifact; pack a Hugging Face directory");
  if (!FileExists(dir + "/tokenizer.json"))
    return Status::Errorf(dir, "/tokenizer.json is missing: an artifact without the checkpoint's tokenizer would "
                          "serve garbage; copy the tokenizer.json that came with the model");
  const auto t0 = std::chrono::steady_clock::now();
  LoadOptions load;
  load.quant = options.quant;
  load.threads = options.threads;
  // --tp 1: the whole model as Model::Load converts it. --tp N: each rank's share as
  // LoadRankModel would hold it, converted one rank at a time (peak memory: one rank).
  std::unique_ptr<Model> model;
  ModelPlan full;
  if (tp == 1) {
    ModelOptions model_options;
    model_options.threads = options.threads;
    model_options.load = load;
    model_options.kernel_layout = false;  // the artifact holds the row-major layout
    G4_ASSIGN_OR_RETURN(model, Model::Load(dir, model_options));
    full = model->plan();
  } else {
    G4_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
    G4_ASSIGN_OR_RETURN(full, BuildGemma4Plan(config));
    G4_RETURN_IF_ERROR(CheckTensorParallel(full, tp));
  }
  const double load_seconds = Seconds(t0);

  const auto t1 = std::chrono::steady_clock::now();
  ThreadPool own_pool(model ? 1 : options.threads);
  PackWriteOptions write = options.write;
  if (!write.pool) write.pool = model ? &model->pool() : &own_pool;
  G4_ASSIGN_OR_RETURN(auto writer, PackWriter::Create(out, write));
  int sections = 0;
  for (const char* name : kCheckpointFiles) {
    if (!FileExists(dir + "/" + name)) continue;
    G4_ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir + "/" + name));
    G4_RETURN_IF_ERROR(writer->AddText(std::string("file/") + name, text));
    ++sections;
  }
  nlohmann::json meta = {{"format_version", kPackFormatVersion},
                         {"quant", WeightTypeName(options.quant)},
                         {"tp", tp},
                         {"source", dir}};
  if (tp > 1) meta["lm_head"] = LmHeadName(options.lm_head);
  bool embed_table_written = false;
  double convert_seconds = 0;  // rank conversions interleaved with writing (tp > 1)
  for (int r = 0; r < tp; ++r) {
    ModelPlan plan;
    std::unique_ptr<ModelWeights> rank_weights;
    if (model) {
      plan = model->plan();
    } else {
      G4_ASSIGN_OR_RETURN(plan, BuildRankPlan(full, r, tp, {.lm_head = options.lm_head}));
      const auto t = std::chrono::steady_clock::now();
      G4_ASSIGN_OR_RETURN(rank_weights, LoadRankWeights(full, plan, dir, load));
      convert_seconds += Seconds(t);
    }
    const ModelWeights& w = model ? model->weights() : *rank_weights;
    G4_RETURN_IF_ERROR(AddRankSections(*writer, RankPrefix(r), plan, w, &sections));
    if (r == 0) {
      meta["tensor_prefix"] = w.tensor_prefix;
      meta["embed_scale"] = w.embed_scale;
      meta["ple_scale"] = w.ple_scale;
      if (plan.ple_dim > 0) {
        const uint64_t bytes = static_cast<uint64_t>(plan.vocab) * plan.n_layers() * plan.ple_dim *
                               DTypeSize(w.ple_dtype);
        G4_RETURN_IF_ERROR(writer->Add("ple_table", w.ple_table, bytes,
                                       {{"kind", "table"},
                                        {"dtype", DTypeName(w.ple_dtype)},
                                        {"rows", plan.vocab},
                                        {"cols", plan.n_layers() * plan.ple_dim}}));
        ++sections;
      }
    }
    if (w.embed_table && !embed_table_written) {
      // Input tokens may be anywhere in the vocabulary, the rank's LM head rows are a block.
      const uint64_t bytes =
          static_cast<uint64_t>(plan.vocab) * plan.hidden * DTypeSize(w.embed_table_dtype);
      G4_RETURN_IF_ERROR(writer->Add("embed_table", w.embed_table, bytes,
                                     {{"kind", "table"},
                                      {"dtype", DTypeName(w.embed_table_dtype)},
                                      {"rows", plan.vocab},
                                      {"cols", plan.hidden},
                                      {"lookup_type", WeightTypeName(w.embed_table_type)}}));
      ++sections;
      embed_table_written = true;
    }
  }
  G4_RETURN_IF_ERROR(writer->Commit(meta));
  if (stats) {
    stats->load_seconds = load_seconds + convert_seconds;
    stats->write_seconds = Seconds(t1) - convert_seconds;
    stats->bytes = writer->bytes_written();
    stats->sections = sections;
  }
  return OkStatus();
}

Result<PackedModel> LoadPackedModel(const std::string& path, WeightType requested, int threads,
                                    int rank, int tp, LmHeadPlacement lm_head) {
  // The fields are read with the checked helpers above; this is the net for any JSON access
  // that still throws on a malformed artifact.
  try {
    return LoadPackedModelChecked(path, requested, threads, rank, tp, lm_head);
  } catch (const nlohmann::json::exception& e) {
    return Status::Errorf(path, ": malformed artifact metadata (", e.what(),
                          "); re-create it with `g4 pack`");
  }
}

namespace {

Result<PackedModel> LoadPackedModelChecked(const std::string& path, WeightType requested,
                                           int threads, int rank, int tp, LmHeadPlacement lm_head) {
  G4_ASSIGN_OR_RETURN(auto pack_ptr, PackFile::Open(path));
  std::shared_ptr<PackFile> pack = std::move(pack_ptr);
  const nlohmann::json& meta = pack->meta();
  // The rank count first: it decides which sections this process reads at all.
  const int packed_tp = IntField(meta, "tp", 1);
  if (packed_tp < 1)
    return Status::Errorf(path, ": tp in the artifact's meta is ",
                          meta.value("tp", nlohmann::json()).dump(),
                          ", not a positive integer; re-create the artifact with `g4 pack`");
  if (packed_tp != tp)
    return Status::Errorf(path, ": packed with --tp ", packed_tp, " (",
                          packed_tp == 1 ? "one rank" : "one set of weights per rank",
                          ") but this command runs --tp ", tp, ": run it with --tp ", packed_tp,
                          ", or re-pack with `g4 pack --tp ", tp, "`");
  if (rank < 0 || rank >= tp)
    return Status::Errorf(path, ": rank ", rank, " of --tp ", tp, " does not exist");
  const std::string packed_lm_head =
      meta.contains("lm_head") ? StringField(meta, "lm_head") : "split";
  if (tp > 1 && packed_lm_head != LmHeadName(lm_head))
    return Status::Errorf(path, ": packed with the LM head placed \"", packed_lm_head,
                          "\" but this command asks for \"", LmHeadName(lm_head),
                          "\"; use the artifact's placement or re-pack");
  const std::string prefix = RankPrefix(rank);
  {
    // This rank's sections and the shared ones (files, tables); the peers check their own.
    ThreadPool pool(threads);
    G4_RETURN_IF_ERROR(pack->VerifySections(&pool, [&](const PackSection& s) {
      return s.name.rfind(prefix, 0) == 0 || s.name.rfind("rank", 0) != 0;
    }));
  }
  WeightType quant;
  if (!ParseWeightType(StringField(meta, "quant"), &quant))
    return Status::Errorf(path, ": unknown weight format ",
                          meta.value("quant", nlohmann::json()).dump(), " in the artifact");
  if (requested != WeightType::kBF16 && requested != quant)
    return Status::Errorf(path, ": the artifact holds ", WeightTypeName(quant), " weights but ",
                          WeightTypeName(requested),
                          " was asked for; an artifact is never converted at load: run "
                          "`g4 pack --quant ",
                          WeightTypeName(requested), "` (or drop --quant)");

  PackedModel out;
  out.quant = quant;
  G4_ASSIGN_OR_RETURN(std::string config_text, pack->ReadText("file/config.json"));
  std::string generation_text;
  if (pack->Find("file/generation_config.json")) {
    G4_ASSIGN_OR_RETURN(generation_text, pack->ReadText("file/generation_config.json"));
  }
  G4_ASSIGN_OR_RETURN(ModelConfig config, ParseGemma4Config(config_text, generation_text, path));
  G4_ASSIGN_OR_RETURN(ModelPlan full, BuildGemma4Plan(config));
  if (tp > 1) {
    G4_ASSIGN_OR_RETURN(out.plan, BuildRankPlan(full, rank, tp, {.lm_head = lm_head}));
  } else {
    out.plan = std::move(full);
  }
  const ModelPlan& plan = out.plan;
  {
    G4_ASSIGN_OR_RETURN(std::string stored_text, pack->ReadText(prefix + "plan"));
    const nlohmann::json stored = nlohmann::json::parse(stored_text, nullptr, false);
    const nlohmann::json derived = PlanToJson(plan);
    if (stored != derived)
      return Status::Errorf(path, ": the layer plan stored in the artifact differs from the one this g4 derives from "
                            "its config.json at ", FirstDifference(stored, derived),
                            "; the artifact was packed by a different g4: re-run `g4 pack`");
  }

  auto w = std::make_unique<ModelWeights>();
  w->layers.resize(plan.n_layers());
  w->quant = quant;
  w->tensor_prefix = StringField(meta, "tensor_prefix");
  if (!FloatField(meta, "embed_scale", 1.0f, &w->embed_scale) ||
      !FloatField(meta, "ple_scale", 1.0f, &w->ple_scale))
    return Status::Errorf(
        path, ": embed_scale and ple_scale in the artifact's meta must be finite numbers");
  Status status;
  auto section = [&](const std::string& name) -> const PackSection* {
    const PackSection* s = pack->Find(prefix + name);
    if (!s && status.ok())
      status = Status::Errorf(path, ": the artifact has no section ", prefix, name);
    return s;
  };
  ForEachTensor(
      plan, *w,
      [&](const std::string& name, WeightMatrix& m, int rows, int cols) {
        const PackSection* s = section(name);
        if (!s || !status.ok()) return;
        WeightType type;
        const int r = IntField(s->meta, "rows", -1), c = IntField(s->meta, "cols", -1);
        if (!ParseWeightType(StringField(s->meta, "type"), &type) || r != rows || c != cols ||
            s->bytes != WeightBytes(type, rows, cols)) {
          status =
              Status::Errorf(path, ": section ", prefix, name, " holds ", s->meta.dump(), " in ",
                             s->bytes, " bytes; the plan needs [", rows, ", ", cols, "]");
          return;
        }
        m.type = type;
        m.rows = rows;
        m.cols = cols;
        m.data = s->data;
        m.bytes = s->bytes;
      },
      [&](const std::string& name, std::vector<float>& v, int n) {
        const PackSection* s = section(name);
        if (!s || !status.ok()) return;
        if (s->bytes != static_cast<uint64_t>(n) * sizeof(float)) {
          status = Status::Errorf(path, ": section ", prefix, name, " has ", s->bytes,
                                  " bytes, expected ", n, " floats");
          return;
        }
        v.resize(n);
        std::memcpy(v.data(), s->data, s->bytes);
      },
      [&](const std::string& name, float& v) {
        const PackSection* s = section(name);
        if (!s || !status.ok()) return;
        if (s->bytes != sizeof(float)) {
          status = Status::Errorf(path, ": section ", prefix, name, " is not one float");
          return;
        }
        std::memcpy(&v, s->data, sizeof v);
      });
  G4_RETURN_IF_ERROR(status);
  if (plan.ple_dim > 0) {
    const PackSection* s = pack->Find("ple_table");
    if (!s) return Status::Errorf(path, ": the artifact has no ple_table section");
    G4_ASSIGN_OR_RETURN(w->ple_dtype, ParseDType(StringField(s->meta, "dtype")));
    const uint64_t expect = static_cast<uint64_t>(plan.vocab) * plan.n_layers() * plan.ple_dim * DTypeSize(w->ple_dtype);
    if (s->bytes != expect)
      return Status::Errorf(path, ": section ple_table has ", s->bytes, " bytes, the plan needs ", expect);
    w->ple_table = s->data;
    w->mapped_bytes = static_cast<int64_t>(s->bytes);
  }
  if (plan.lm_head_end() - plan.lm_head_begin() != plan.vocab) {
    const PackSection* s = pack->Find("embed_table");
    if (!s)
      return Status::Errorf(
          path,
          ": the artifact has no embed_table section (needed by a rank without the whole LM head)");
    G4_ASSIGN_OR_RETURN(w->embed_table_dtype, ParseDType(StringField(s->meta, "dtype")));
    const uint64_t expect =
        static_cast<uint64_t>(plan.vocab) * plan.hidden * DTypeSize(w->embed_table_dtype);
    if (s->bytes != expect)
      return Status::Errorf(path, ": section embed_table has ", s->bytes, " bytes, the plan needs ",
                            expect);
    if (!ParseWeightType(StringField(s->meta, "lookup_type"), &w->embed_table_type))
      return Status::Errorf(path,
                            ": section embed_table has no valid lookup_type: ", s->meta.dump());
    w->embed_table = s->data;
    w->mapped_bytes += static_cast<int64_t>(s->bytes);
  }
  for (const PackSection& s : pack->sections())
    if (s.name.rfind(prefix, 0) == 0 && StringField(s.meta, "kind") == "matrix")
      w->mapped_bytes += static_cast<int64_t>(s.bytes);
  w->artifact = pack;  // keeps the mapping alive as long as the weights
  out.weights = std::move(w);
  return out;
}

}  // namespace

}  // namespace g4
