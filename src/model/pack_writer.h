// `g4 pack`: converts a checkpoint once and writes it as an artifact (sections:
// model/pack_layout.h) that LoadModel maps with no conversion (model/pack_reader.h).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "io/pack.h"
#include "kernels/weight_matrix.h"
#include "model/plan.h"

namespace g4 {

struct PackModelOptions {
  WeightType quant = WeightType::kBF16;
  int tp = 1;  // > 1: one set of sections per rank, each exactly what LoadModel holds for that rank
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

// Converts checkpoint DIR (each rank as LoadModel loads it with options.quant, one rank at a
// time) and writes OUT atomically.
Status PackModel(const std::string& dir, const std::string& out, const PackModelOptions& options,
                 PackModelStats* stats = nullptr);

}  // namespace g4
