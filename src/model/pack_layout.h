// What a packed artifact (io/pack.h) holds for a model: the section names, the plan as JSON and
// the walk over a rank's tensors, which the writer (pack_writer.h) and the reader
// (pack_reader.h) share so the two cannot disagree.
//
// Sections:
//   file/config.json, file/generation_config.json, file/tokenizer.json, file/tokenizer_config.json,
//   file/chat_template.jinja     the checkpoint's own files, byte for byte (those present)
//   rank<r>/plan                 rank r's layer plan as JSON (PlanToJson); on load it must equal
//                                the plan this g4 derives from file/config.json (and, for tp > 1, the
//                                rank plan of model/rank_plan.h), so an artifact built by a g4
//                                that derived a different plan is refused, not misread
//   rank<r>/<tensor>             every matrix exactly as rank r's kernels read it (WeightMatrix
//                                bytes of its type: bf16/f32/q8/q4; for tp > 1 only the rank's
//                                slice, replicated tensors in every rank) and every norm vector
//                                as f32; meta {kind, type, rows, cols}
//   ple_table                    the per-layer embedding table as stored in the checkpoint
//   embed_table                  tp > 1 with the LM head split: the whole [vocab, H] embedding as
//                                stored in the checkpoint, for input lookups (one row per token)
// Artifact meta: g4 format version, quant, tp, lm_head (tp > 1), tensor prefix, embedding scales,
// source. Rank r of a --tp N artifact verifies and binds only rank<r>/ and the shared sections.
// A --tp N artifact loads only with --tp N: every reader of format version 1, including the ones
// before per-rank artifacts existed, refuses meta.tp other than its own rank count by name, so
// per-rank artifacts did not need a new format version.
// A loaded artifact's matrices point into the mapping (no copy, no conversion); only the small
// norm vectors are copied.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/pack.h"
#include "model/plan.h"
#include "model/tensor_table.h"
#include "model/weights.h"

namespace g4 {

// The checkpoint's own files an artifact carries (file/<name>), those present.
const std::vector<std::string>& PackedCheckpointFiles();

// Writes those of DIR's files as file/<name> sections, counting them into *sections.
Status AddCheckpointFiles(PackWriter& writer, const std::string& dir, int* sections);

// "rank3/": the prefix of rank 3's sections.
std::string RankPrefix(int rank);

// The meta's lm_head value: "split" or "rank0".
const char* LmHeadName(LmHeadPlacement placement);

// The plan as JSON, every LayerPlan field; the pack's plan check and `g4 inspect` read it.
nlohmann::json PlanToJson(const ModelPlan& plan);

// Every tensor a rank's sections hold, from the tensor table (model/tensor_table.h), in table
// order: the one walk both writing and loading use, so the two cannot disagree. Matrices have
// the rank's slice shape; mapped tables (the PLE table) are shared sections, not walked here.
// `full` is the whole model's plan, `plan` the rank's (the same at tp 1).
template <class MatrixFn, class VectorFn, class ScalarFn>
void ForEachPackedTensor(const ModelPlan& full, const ModelPlan& plan, const ModelWeights& weights,
                   MatrixFn matrix, VectorFn vector, ScalarFn scalar) {
  // The slots are reached through the table's accessors, which take mutable weights; the
  // writer's callbacks only read them.
  ModelWeights& w = const_cast<ModelWeights&>(weights);
  for (const PlannedTensor& t : PlanTensors(full, plan)) {
    if (!t.held()) continue;
    switch (t.spec->kind) {
      case TensorKind::kMatrix:
        matrix(t.internal, *t.spec->matrix(w, t.layer), static_cast<int>(t.slice.n_rows),
               static_cast<int>(t.slice.n_cols));
        break;
      case TensorKind::kVector:
        vector(t.internal, *t.spec->vector(w, t.layer), static_cast<int>(t.shape[0]));
        break;
      case TensorKind::kScalar:
        scalar(t.internal, *t.spec->scalar(w, t.layer));
        break;
      case TensorKind::kTable:
        break;
    }
  }
}

}  // namespace g4
