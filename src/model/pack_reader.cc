#include "model/pack_reader.h"

#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "io/pack.h"
#include "model/architecture.h"
#include "model/pack_layout.h"
#include "model/rank_plan.h"

namespace g4 {

namespace {

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
  const int packed_tp = MetaInt(meta, "tp", 1);
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
      meta.contains("lm_head") ? MetaString(meta, "lm_head") : "split";
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
  if (!ParseWeightType(MetaString(meta, "quant"), &quant))
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
  G4_ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(config_text, generation_text, path));
  G4_ASSIGN_OR_RETURN(const ModelPlan full, PlanFromConfig(config));
  if (tp > 1) {
    G4_ASSIGN_OR_RETURN(out.plan, BuildRankPlan(full, rank, tp, {.lm_head = lm_head}));
  } else {
    out.plan = full;
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
  w->tensor_prefix = MetaString(meta, "tensor_prefix");
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
  ForEachPackedTensor(
      full, plan, *w,
      [&](const std::string& name, WeightMatrix& m, int rows, int cols) {
        const PackSection* s = section(name);
        if (!s || !status.ok()) return;
        WeightType type;
        const int r = MetaInt(s->meta, "rows", -1), c = MetaInt(s->meta, "cols", -1);
        if (!ParseWeightType(MetaString(s->meta, "type"), &type) || r != rows || c != cols ||
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
    G4_ASSIGN_OR_RETURN(w->ple_dtype, ParseDType(MetaString(s->meta, "dtype")));
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
    G4_ASSIGN_OR_RETURN(w->embed_table_dtype, ParseDType(MetaString(s->meta, "dtype")));
    const uint64_t expect =
        static_cast<uint64_t>(plan.vocab) * plan.hidden * DTypeSize(w->embed_table_dtype);
    if (s->bytes != expect)
      return Status::Errorf(path, ": section embed_table has ", s->bytes, " bytes, the plan needs ",
                            expect);
    if (!ParseWeightType(MetaString(s->meta, "lookup_type"), &w->embed_table_type))
      return Status::Errorf(path,
                            ": section embed_table has no valid lookup_type: ", s->meta.dump());
    w->embed_table = s->data;
    w->mapped_bytes += static_cast<int64_t>(s->bytes);
  }
  for (const PackSection& s : pack->sections())
    if (s.name.rfind(prefix, 0) == 0 && MetaString(s.meta, "kind") == "matrix")
      w->mapped_bytes += static_cast<int64_t>(s.bytes);
  w->artifact = pack;  // keeps the mapping alive as long as the weights
  out.weights = std::move(w);
  return out;
}

}  // namespace

}  // namespace g4
