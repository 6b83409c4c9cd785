// The Gemma-4 text decoder's tensors (docs/gemma4.md §2): one row per kind, in the order the
// pack writes them and binding reports them. Names are relative to the text prefix
// ("model.language_model." or "model.").
#include "model/arch/gemma4.h"
#include "model/tensor_table.h"

namespace g4 {

namespace {

using K = TensorKind;
using D = Dim;

TensorTable MakeGemma4Tensors() {
  TensorTable t;
  t.architecture = "gemma4";
  // The tied embedding: input lookups and the LM head, split by vocabulary rows.
  t.rows.push_back({.name = "embed_tokens.weight", .internal = "embed", .kind = K::kMatrix,
                    .rows = D::kVocab, .cols = D::kHidden, .split = Split::kRows,
                    .read_whole = false, .lm_head = true,
                    .matrix = [](ModelWeights& w, int) { return &w.embed; }});
  t.rows.push_back({.name = "norm.weight", .internal = "final_norm", .kind = K::kVector,
                    .rows = D::kHidden,
                    .vector = [](ModelWeights& w, int) { return &w.final_norm; }});
  // Per-layer embeddings (E2B/E4B): the [V, L*P] table stays mapped (binding fills
  // ModelWeights::ple_table; the pack stores it once as the shared section ple_table).
  t.rows.push_back({.name = "embed_tokens_per_layer.weight", .internal = "ple_table",
                    .kind = K::kTable, .rows = D::kVocab, .cols = D::kLayersPle,
                    .when = When::kWithPle, .read_whole = false});
  t.rows.push_back({.name = "per_layer_model_projection.weight",
                    .internal = "ple_model_projection", .kind = K::kMatrix,
                    .rows = D::kLayersPle, .cols = D::kHidden, .when = When::kWithPle,
                    .matrix = [](ModelWeights& w, int) { return &w.ple_model_projection; }});
  t.rows.push_back({.name = "per_layer_projection_norm.weight", .internal = "ple_projection_norm",
                    .kind = K::kVector, .rows = D::kPle, .when = When::kWithPle,
                    .vector = [](ModelWeights& w, int) { return &w.ple_projection_norm; }});

  // The layer's four norms (replicated, like every vector).
  t.rows.push_back({.name = "layers.{i}.input_layernorm.weight", .internal = "layers.{i}.input_norm",
                    .kind = K::kVector, .rows = D::kHidden, .per_layer = true,
                    .vector = [](ModelWeights& w, int i) { return &w.layers[i].input_norm; }});
  t.rows.push_back({.name = "layers.{i}.post_attention_layernorm.weight",
                    .internal = "layers.{i}.post_attention_norm", .kind = K::kVector,
                    .rows = D::kHidden, .per_layer = true, .vector = [](ModelWeights& w, int i) {
                      return &w.layers[i].post_attention_norm;
                    }});
  t.rows.push_back({.name = "layers.{i}.pre_feedforward_layernorm.weight",
                    .internal = "layers.{i}.pre_feedforward_norm", .kind = K::kVector,
                    .rows = D::kHidden, .per_layer = true, .vector = [](ModelWeights& w, int i) {
                      return &w.layers[i].pre_feedforward_norm;
                    }});
  t.rows.push_back({.name = "layers.{i}.post_feedforward_layernorm.weight",
                    .internal = "layers.{i}.post_feedforward_norm", .kind = K::kVector,
                    .rows = D::kHidden, .per_layer = true, .vector = [](ModelWeights& w, int i) {
                      return &w.layers[i].post_feedforward_norm;
                    }});

  // Attention: query heads split (q_proj rows, o_proj columns); K/V by KV heads, read only on
  // KV-owner layers (shared layers' stored K/V are unused, §2.3); no v_proj on K=V layers.
  t.rows.push_back({.name = "layers.{i}.self_attn.q_proj.weight", .internal = "layers.{i}.q_proj",
                    .kind = K::kMatrix, .rows = D::kQuery, .cols = D::kHidden, .per_layer = true,
                    .split = Split::kRows,
                    .matrix = [](ModelWeights& w, int i) { return &w.layers[i].q_proj; }});
  t.rows.push_back({.name = "layers.{i}.self_attn.q_norm.weight", .internal = "layers.{i}.q_norm",
                    .kind = K::kVector, .rows = D::kHeadDim, .per_layer = true,
                    .vector = [](ModelWeights& w, int i) { return &w.layers[i].q_norm; }});
  t.rows.push_back({.name = "layers.{i}.self_attn.o_proj.weight", .internal = "layers.{i}.o_proj",
                    .kind = K::kMatrix, .rows = D::kHidden, .cols = D::kQuery, .per_layer = true,
                    .split = Split::kColumns,
                    .matrix = [](ModelWeights& w, int i) { return &w.layers[i].o_proj; }});
  t.rows.push_back({.name = "layers.{i}.self_attn.k_proj.weight", .internal = "layers.{i}.k_proj",
                    .kind = K::kMatrix, .rows = D::kKv, .cols = D::kHidden, .per_layer = true,
                    .kv_owner_only = true, .split = Split::kRows,
                    .matrix = [](ModelWeights& w, int i) { return &w.layers[i].k_proj; }});
  t.rows.push_back({.name = "layers.{i}.self_attn.k_norm.weight", .internal = "layers.{i}.k_norm",
                    .kind = K::kVector, .rows = D::kHeadDim, .per_layer = true,
                    .kv_owner_only = true,
                    .vector = [](ModelWeights& w, int i) { return &w.layers[i].k_norm; }});
  t.rows.push_back({.name = "layers.{i}.self_attn.v_proj.weight", .internal = "layers.{i}.v_proj",
                    .kind = K::kMatrix, .rows = D::kKv, .cols = D::kHidden, .per_layer = true,
                    .kv_owner_only = true, .when = When::kNotKEqV, .split = Split::kRows,
                    .matrix = [](ModelWeights& w, int i) { return &w.layers[i].v_proj; }});

  // MLP: gate/up rows and down columns split into blocks.
  t.rows.push_back({.name = "layers.{i}.mlp.gate_proj.weight", .internal = "layers.{i}.gate_proj",
                    .kind = K::kMatrix, .rows = D::kMlp, .cols = D::kHidden, .per_layer = true,
                    .split = Split::kRows,
                    .matrix = [](ModelWeights& w, int i) { return &w.layers[i].gate_proj; }});
  t.rows.push_back({.name = "layers.{i}.mlp.up_proj.weight", .internal = "layers.{i}.up_proj",
                    .kind = K::kMatrix, .rows = D::kMlp, .cols = D::kHidden, .per_layer = true,
                    .split = Split::kRows,
                    .matrix = [](ModelWeights& w, int i) { return &w.layers[i].up_proj; }});
  t.rows.push_back({.name = "layers.{i}.mlp.down_proj.weight", .internal = "layers.{i}.down_proj",
                    .kind = K::kMatrix, .rows = D::kHidden, .cols = D::kMlp, .per_layer = true,
                    .split = Split::kColumns,
                    .matrix = [](ModelWeights& w, int i) { return &w.layers[i].down_proj; }});

  // The layer's per-layer-input block (replicated).
  t.rows.push_back({.name = "layers.{i}.per_layer_input_gate.weight",
                    .internal = "layers.{i}.ple_gate", .kind = K::kMatrix, .rows = D::kPle,
                    .cols = D::kHidden, .per_layer = true, .when = When::kWithPle,
                    .matrix = [](ModelWeights& w, int i) { return &w.layers[i].ple_gate; }});
  t.rows.push_back({.name = "layers.{i}.per_layer_projection.weight",
                    .internal = "layers.{i}.ple_projection", .kind = K::kMatrix,
                    .rows = D::kHidden, .cols = D::kPle, .per_layer = true,
                    .when = When::kWithPle,
                    .matrix = [](ModelWeights& w, int i) { return &w.layers[i].ple_projection; }});
  t.rows.push_back({.name = "layers.{i}.post_per_layer_input_norm.weight",
                    .internal = "layers.{i}.ple_post_norm", .kind = K::kVector,
                    .rows = D::kHidden, .per_layer = true, .when = When::kWithPle,
                    .vector = [](ModelWeights& w, int i) { return &w.layers[i].ple_post_norm; }});

  // layer_scalar is a [1] buffer, not a parameter (no ".weight"): loaders that take only
  // parameters drop it and the model's output goes wrong (docs/gemma4.md pitfalls).
  t.rows.push_back({.name = "layers.{i}.layer_scalar", .internal = "layers.{i}.layer_scalar",
                    .kind = K::kScalar, .rows = D::kOne, .per_layer = true,
                    .scalar = [](ModelWeights& w, int i) { return &w.layers[i].layer_scalar; }});
  return t;
}

}  // namespace

const TensorTable& Gemma4Tensors() {
  static const TensorTable table = MakeGemma4Tensors();
  return table;
}

}  // namespace g4
