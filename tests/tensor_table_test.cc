// The tensor table (model/tensor_table.h) against independent oracles, on every preset: its
// expansion equals the tensor list the synthetic checkpoint writer keeps by hand (model/synth.cc),
// and the four consumers agree with it: what binding fills, the sections `g4 pack` writes, the
// tensors `g4 doctor` checks and the parameter count. Under tensor parallelism the rank slices
// tile each split tensor exactly once and replicate the rest.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "io/pack.h"
#include "model/architecture.h"
#include "model/pack_reader.h"
#include "model/pack_writer.h"
#include "model/rank_plan.h"
#include "model/synth.h"
#include "model/tensor_table.h"
#include "model/weights.h"
#include "testing/checkpoints.h"
#include "testing/real_configs.h"
#include "testing/run_g4.h"

namespace g4 {
namespace {

const char* kPrefix = "model.language_model.";

// The plan of a synthetic preset, from the config.json the writer would emit.
ModelPlan SynthPlan(const SynthSpec& spec, const SynthOptions& options) {
  auto config = ParseModelConfig(SynthConfigJson(spec, options),
                                 SynthGenerationConfigJson(spec, options), "synth");
  EXPECT_TRUE(config.ok()) << config.status().message();
  auto plan = PlanFromConfig(*config);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? *plan : ModelPlan{};
}

struct Preset {
  std::string name;
  SynthSpec spec;
  SynthOptions options;
};

std::vector<Preset> SynthPresets() {
  std::vector<Preset> out;
  for (const char* preset : {"e2b", "e4b", "12b"})
    for (const char* scale : {"tiny", "full"})
      for (SynthConfigForm form : {SynthConfigForm::kFlat, SynthConfigForm::kPerLayer}) {
        auto spec = SynthPreset(preset, scale);
        EXPECT_TRUE(spec.ok()) << spec.status().message();
        if (!spec.ok()) continue;
        SynthOptions o;
        o.config_form = form;
        out.push_back({std::string(preset) + "-" + scale +
                           (form == SynthConfigForm::kFlat ? "-flat" : "-per-layer"),
                       *spec, o});
      }
  return out;
}

TEST(TensorTable, ExpansionEqualsTheSynthWritersListOnEveryPreset) {
  for (const Preset& p : SynthPresets()) {
    SCOPED_TRACE(p.name);
    const ModelPlan plan = SynthPlan(p.spec, p.options);
    std::map<std::string, std::vector<int64_t>> written;
    int64_t written_params = 0;
    for (const SynthTensor& t : SynthTensors(p.spec, p.options)) {
      if (t.name.rfind(kPrefix, 0) != 0) continue;  // vision/audio towers
      written[t.name.substr(std::string(kPrefix).size())] = t.shape;
      written_params += t.numel();
    }
    std::map<std::string, std::vector<int64_t>> table;
    for (const PlannedTensor& t : PlanTensors(plan)) {
      EXPECT_TRUE(table.emplace(t.name, t.shape).second) << "twice: " << t.name;
      EXPECT_EQ(t.slice.n_rows, t.shape[0]) << t.name;
    }
    EXPECT_EQ(table, written);
    // The parameter count is the table's sum: every stored text tensor.
    EXPECT_EQ(CountParameters(plan).total, written_params);
  }
}

TEST(TensorTable, RealConfigsExpandToTheirParameterCounts) {
  // Independent totals: plan_test.cc's published counts go through CountParameters, which walks
  // the table; here the table's own sum must equal it and every row must be present once.
  for (const nlohmann::json& text : {E2BTextConfig(), E4BTextConfig(), B12TextConfig()}) {
    const ModelPlan plan = PlanOfConfig(OuterConfig(text));
    int64_t sum = 0, ple = 0;
    for (const PlannedTensor& t : PlanTensors(plan)) {
      sum += t.numel();
      if (t.spec->kind == TensorKind::kTable) ple += t.numel();
    }
    EXPECT_EQ(CountParameters(plan).total, sum);
    EXPECT_EQ(CountParameters(plan).ple_table, ple);
  }
}

// Each split tensor's rank slices tile it exactly once; replicated ones are whole everywhere.
void ExpectSlicesCover(const ModelPlan& full, int tp, LmHeadPlacement lm_head) {
  SCOPED_TRACE(testing::Message() << "tp " << tp << " lm_head "
                                  << (lm_head == LmHeadPlacement::kRank0 ? "rank0" : "split"));
  std::vector<ModelPlan> ranks;
  std::vector<std::vector<PlannedTensor>> held;
  for (int r = 0; r < tp; ++r) {
    auto rank = BuildRankPlan(full, r, tp, {.lm_head = lm_head});
    ASSERT_TRUE(rank.ok()) << rank.status().message();
    ranks.push_back(*rank);
    held.push_back(PlanTensors(full, *rank));
  }
  const std::vector<PlannedTensor> whole = PlanTensors(full);
  for (size_t j = 0; j < whole.size(); ++j) {
    const PlannedTensor& t = whole[j];
    SCOPED_TRACE(t.name);
    const TensorSpec& spec = *t.spec;
    const int64_t rows = t.shape[0], cols = t.shape.size() > 1 ? t.shape[1] : 1;
    const bool kv_replicated = spec.rows == Dim::kKv && t.layer >= 0 &&
                               KvReplicated(full.layers[t.layer], ranks[0].layers[t.layer]);
    const bool rank0_head = spec.lm_head && lm_head == LmHeadPlacement::kRank0;
    std::vector<std::pair<int64_t, int64_t>> ranges;  // along the split axis
    for (int r = 0; r < tp; ++r) {
      const TensorSlice& s = held[r][j].slice;
      ASSERT_EQ(held[r][j].name, t.name);
      if (spec.split == Split::kReplicated || kv_replicated) {
        EXPECT_EQ(s.row_begin, 0);
        EXPECT_EQ(s.n_rows, rows);
        EXPECT_EQ(s.col_begin, 0);
        EXPECT_EQ(s.n_cols, cols);
      } else if (spec.split == Split::kRows) {
        EXPECT_EQ(s.n_cols, cols);
        ranges.push_back({s.row_begin, s.n_rows});
      } else {
        EXPECT_EQ(s.n_rows, rows);
        ranges.push_back({s.col_begin, s.n_cols});
      }
      if (rank0_head) {
        EXPECT_EQ(s.n_rows, r == 0 ? rows : 0);
      }
    }
    if (ranges.empty()) continue;
    std::sort(ranges.begin(), ranges.end());
    int64_t next = 0;
    for (auto [begin, count] : ranges) {
      if (count == 0) continue;  // a rank without LM-head rows
      EXPECT_EQ(begin, next) << "gap or overlap";
      next = begin + count;
    }
    EXPECT_EQ(next, spec.split == Split::kRows ? rows : cols);
  }
}

TEST(TensorTable, RankSlicesCoverEachTensorOnceOrReplicate) {
  std::vector<ModelPlan> plans;
  for (const nlohmann::json& text : {E2BTextConfig(), E4BTextConfig(), B12TextConfig()})
    plans.push_back(PlanOfConfig(OuterConfig(text)));
  for (const Preset& p : SynthPresets()) plans.push_back(SynthPlan(p.spec, p.options));
  int checked = 0;
  for (const ModelPlan& full : plans)
    for (int tp : SupportedTensorParallel(full)) {
      if (tp == 1 || tp > 8) continue;
      for (LmHeadPlacement lm : {LmHeadPlacement::kSplitVocab, LmHeadPlacement::kRank0}) {
        ExpectSlicesCover(full, tp, lm);
        ++checked;
      }
    }
  EXPECT_GT(checked, 10);
}

// What binding filled: exactly the table's held slots, each with its slice's shape.
void ExpectBindingMatchesTable(const ModelPlan& full, const ModelPlan& rank, ModelWeights& w) {
  std::set<const WeightMatrix*> expected;
  for (const PlannedTensor& t : PlanTensors(full, rank)) {
    SCOPED_TRACE(t.name);
    switch (t.spec->kind) {
      case TensorKind::kMatrix: {
        const WeightMatrix* m = t.spec->matrix(w, t.layer);
        if (!t.held()) {
          EXPECT_TRUE(m->empty());
          break;
        }
        expected.insert(m);
        EXPECT_EQ(m->rows, t.slice.n_rows);
        EXPECT_EQ(m->cols, t.slice.n_cols);
        break;
      }
      case TensorKind::kVector:
        EXPECT_EQ(static_cast<int64_t>(t.spec->vector(w, t.layer)->size()),
                  t.held() ? t.shape[0] : 0);
        break;
      case TensorKind::kScalar:
        EXPECT_NE(*t.spec->scalar(w, t.layer), 1.0f) << "synthetic layer_scalar left unset";
        break;
      case TensorKind::kTable:
        EXPECT_NE(w.ple_table, nullptr);
        break;
    }
  }
  for (const WeightMatrix* m : w.Matrices())
    if (!m->empty()) {
      EXPECT_TRUE(expected.count(m)) << "a matrix the table does not list";
    }
  if (full.ple_dim == 0) {
    EXPECT_EQ(w.ple_table, nullptr);
  }
}

// The rank<r>/ sections of an artifact: every held tensor of the table except mapped tables,
// in table order, with the slice's shape.
void ExpectSectionsMatchTable(const PackFile& pack, const ModelPlan& full, const ModelPlan& rank) {
  const std::string prefix = "rank" + std::to_string(rank.tp_rank) + "/";
  std::vector<std::string> sections;
  std::map<std::string, const PackSection*> by_name;
  for (const PackSection& s : pack.sections())
    if (s.name.rfind(prefix, 0) == 0 && s.name != prefix + "plan") {
      sections.push_back(s.name.substr(prefix.size()));
      by_name[sections.back()] = &s;
    }
  std::vector<std::string> expected;
  bool has_table = false;
  for (const PlannedTensor& t : PlanTensors(full, rank)) {
    if (t.spec->kind == TensorKind::kTable) has_table = true;
    if (!t.held() || t.spec->kind == TensorKind::kTable) continue;
    expected.push_back(t.internal);
    if (t.spec->kind == TensorKind::kMatrix && by_name.count(t.internal)) {
      EXPECT_EQ(by_name[t.internal]->meta.value("rows", -1), t.slice.n_rows) << t.internal;
      EXPECT_EQ(by_name[t.internal]->meta.value("cols", -1), t.slice.n_cols) << t.internal;
    }
  }
  EXPECT_EQ(sections, expected);
  EXPECT_EQ(pack.Find("ple_table") != nullptr, has_table);
}

TEST(TensorTable, BindingPackAndDoctorWalkTheTable) {
  for (const char* preset : {"e2b", "e4b", "12b"}) {
    SCOPED_TRACE(preset);
    const std::string dir = TinyCheckpoint(preset, {.vocab = 512});
    auto plan = LoadModelPlan(dir);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    // Binding (the whole model).
    auto w = LoadWeights(*plan, dir, {.threads = 1});
    ASSERT_TRUE(w.ok()) << w.status().message();
    ExpectBindingMatchesTable(*plan, *plan, **w);
    // The pack's sections.
    const std::string out = TestTempDir(std::string("table-pack-") + preset) + "/m.g4";
    ASSERT_TRUE(PackModel(dir, out, {.threads = 1}).ok());
    auto pack = PackFile::Open(out);
    ASSERT_TRUE(pack.ok()) << pack.status().message();
    ExpectSectionsMatchTable(**pack, *plan, *plan);
    // Doctor: the tensors it checks and the parameters it finds stored.
    const G4RunResult doctor = RunG4("doctor --model " + dir);
    EXPECT_NE(doctor.output.find(Str(PlanTensors(*plan).size(), " text tensors match")),
              std::string::npos)
        << doctor.output;
    EXPECT_NE(doctor.output.find(Str(CountParameters(*plan).total, " parameters stored")),
              std::string::npos)
        << doctor.output;
  }
}

TEST(TensorTable, RankBindingAndRankSectionsWalkTheTable) {
  const std::string dir = TinyCheckpoint("e4b", {.vocab = 512});
  auto full = LoadModelPlan(dir);
  ASSERT_TRUE(full.ok()) << full.status().message();
  const int tp = 2;
  ASSERT_TRUE(CheckTensorParallel(*full, tp).ok());
  const std::string out = TestTempDir("table-pack-tp2") + "/m.g4";
  ASSERT_TRUE(PackModel(dir, out, {.tp = tp, .threads = 1}).ok());
  auto pack = PackFile::Open(out);
  ASSERT_TRUE(pack.ok()) << pack.status().message();
  for (int r = 0; r < tp; ++r) {
    SCOPED_TRACE(r);
    auto rank = BuildRankPlan(*full, r, tp);
    ASSERT_TRUE(rank.ok());
    auto w = LoadRankWeights(*full, *rank, dir, {.threads = 1});
    ASSERT_TRUE(w.ok()) << w.status().message();
    ExpectBindingMatchesTable(*full, *rank, **w);
    ExpectSectionsMatchTable(**pack, *full, *rank);
  }
}

}  // namespace
}  // namespace g4
