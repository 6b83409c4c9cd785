// An assistant drafter's tensors as g4 holds them, read from a Hugging Face checkpoint directory
// or from a `g4 pack` artifact, and the writer of that artifact. Both reads give the same bytes
// for the same format, so an assistant packed at q4 drafts exactly as its directory loaded with
// `--draft-quant q4` does.
//
// Artifact (io/pack.h, meta {"format_version", "kind": "assistant", "model_type", "quant",
// "tp": 1, "source"}):
//   file/config.json, ...      the checkpoint's own files, byte for byte (those present)
//   assistant/<tensor name>    every tensor of the assistant's table (arch/gemma4_assistant.h):
//                              matrices row-major in their held format, meta {kind "matrix",
//                              type, rows, cols}; norms and layer scalars f32, meta {kind
//                              "vector", type "f32", n}; the centroid head's token ordering as
//                              int32 ids, meta {kind "ordering", type "i32", n}
// The assistant copies what it reads (it reorders the centroid table and may regroup rows), so
// an artifact saves the conversion at start-up and ships as one checked file, not a mapping.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "io/pack.h"
#include "io/safetensors.h"
#include "kernels/weight_matrix.h"
#include "model/arch/gemma4_assistant.h"
#include "model/pack_writer.h"

namespace g4 {

struct AssistantWeight {
  // Matrices: bf16 as shipped, f32 (f16/f32 widened), or q8/q4 (a quantizable matrix whose
  // width the format fits); `bytes` row-major WeightMatrix bytes of `type`.
  WeightType type = WeightType::kF32;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // vectors and scalars
  std::vector<int32_t> ids;   // the token ordering, each checked in [0, vocab)
};

// Tensor `t` of the checkpoint in `store` (dtype and shape checked; errors name `where` and the
// tensor), quantized matrices as the engine's loader quantizes a target's.
Result<AssistantWeight> ReadAssistantWeight(const TensorStore& store, const AssistantTensor& t,
                                            const AssistantConfig& config, WeightType quant,
                                            ThreadPool* pool, const std::string& where);

// Tensor `t` of an assistant artifact (sections already verified) whose meta says `packed`
// (PackedAssistantQuant), its meta checked against the table: a section of the wrong kind,
// shape, format or size is refused by name. The format is binding: a matrix is q8/q4 exactly
// where `g4 pack --quant packed` quantizes it.
Result<AssistantWeight> ReadPackedAssistantWeight(const PackFile& pack, const AssistantTensor& t,
                                                  const AssistantConfig& config, WeightType packed);

// The artifact's weight format (meta "quant"), checked: an assistant artifact, one rank.
Result<WeightType> PackedAssistantQuant(const PackFile& pack);

// `g4 pack` of an assistant checkpoint DIR: its matrices in `quant` (bf16: as shipped), written
// atomically to OUT.
Status PackAssistant(const std::string& dir, const std::string& out, WeightType quant, int threads,
                     PackModelStats* stats = nullptr);

}  // namespace g4
