// What a packed artifact (io/pack.h) holds for a model, and loading one back without conversion.
//
// Sections:
//   file/config.json, file/generation_config.json, file/tokenizer.json, file/tokenizer_config.json,
//   file/chat_template.jinja     the checkpoint's own files, byte for byte (those present)
//   rank<r>/plan                 rank r's layer plan as JSON (PlanToJson); on load it must equal
//   the
//                                plan this g4 derives from file/config.json (and, for tp > 1, the
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

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "io/pack.h"
#include "kernels/weight_matrix.h"
#include "model/plan.h"
#include "model/weights.h"

namespace g4 {

struct PackModelOptions {
  WeightType quant = WeightType::kBF16;
  int tp = 1;  // > 1: one set of sections per rank, each exactly what LoadRankModel would hold
  LmHeadPlacement lm_head = LmHeadPlacement::kSplitVocab;  // tp > 1
  int threads = 0;
  PackWriteOptions write;  // write.fail_after_bytes: test hook (simulated full disk)
};

struct PackModelStats {
  double load_seconds = 0;   // reading + converting the checkpoint
  double write_seconds = 0;  // writing + checksumming the artifact
  uint64_t bytes = 0;
  int sections = 0;
};

// Converts checkpoint DIR (as Model::Load would, with options.quant; per rank as LoadRankModel
// would when options.tp > 1, one rank at a time) and writes OUT atomically.
Status PackModel(const std::string& dir, const std::string& out, const PackModelOptions& options,
                 PackModelStats* stats = nullptr);

// The plan as JSON, every LayerPlan field; the pack's plan check and `g4 inspect` read it.
nlohmann::json PlanToJson(const ModelPlan& plan);

struct PackedModel {
  ModelPlan plan;
  std::unique_ptr<ModelWeights> weights;
  WeightType quant = WeightType::kBF16;
};

// Maps artifact PATH, verifies the checksums of rank `rank`'s and the shared sections (in parallel
// over `threads`), checks the stored rank plan against the config and binds that rank's weights.
// `tp` and `lm_head` are what the command runs with: an artifact packed for another rank count or
// LM-head placement is refused, naming both. `requested` kBF16 means "as packed"; q8/q4 must
// match the artifact's format (an artifact is never converted at load: repack instead).
Result<PackedModel> LoadPackedModel(const std::string& path, WeightType requested, int threads,
                                    int rank = 0, int tp = 1,
                                    LmHeadPlacement lm_head = LmHeadPlacement::kSplitVocab);

}  // namespace g4
