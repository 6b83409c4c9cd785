#include "model/assistant_weights.h"

#include <chrono>
#include <cstring>

#include "kernels/quantize.h"
#include "model/pack_layout.h"

namespace g4 {
namespace {

constexpr char kSectionPrefix[] = "assistant/";
constexpr char kArtifactKind[] = "assistant";

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Status CheckIds(const AssistantWeight& w, int vocab, const std::string& where,
                const std::string& name) {
  for (size_t i = 0; i < w.ids.size(); ++i)
    if (w.ids[i] < 0 || w.ids[i] >= vocab)
      return Status::Errorf(where, ": ", name, "[", i, "] = ", w.ids[i],
                            " is not a token id in [0, ", vocab, ")");
  return OkStatus();
}

}  // namespace

Result<AssistantWeight> ReadAssistantWeight(const TensorStore& store, const AssistantTensor& t,
                                            const AssistantConfig& config, WeightType quant,
                                            ThreadPool* pool, const std::string& where) {
  const TensorView* v = store.Find(t.name);
  if (!v) return Status::Errorf(where, ": assistant tensor ", t.name, " is missing");
  if (v->shape != t.shape)
    return Status::Errorf(where, ": ", t.name, " has shape ", v->ShapeString(), ", expected ",
                          ShapeString(t.shape));
  const int64_t n = v->numel();
  AssistantWeight w;
  if (t.kind == AssistantTensorKind::kOrdering) {
    if (v->dtype != DType::kI64)
      return Status::Errorf(where, ": ", t.name, " must be I64, found ", DTypeName(v->dtype));
    w.ids.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      int64_t id;
      std::memcpy(&id, v->data + 8 * i, 8);
      if (id < 0 || id >= config.text.vocab_size)
        return Status::Errorf(where, ": ", t.name, "[", i, "] = ", id, " is not a token id in [0, ",
                              config.text.vocab_size, ")");
      w.ids[i] = static_cast<int32_t>(id);
    }
    return w;
  }
  if (v->dtype != DType::kBF16 && v->dtype != DType::kF16 && v->dtype != DType::kF32)
    return Status::Errorf(where, ": ", t.name, " has dtype ", DTypeName(v->dtype),
                          " (expected BF16, F16 or F32)");
  if (t.kind != AssistantTensorKind::kMatrix) {
    w.values.resize(n);
    for (int64_t i = 0; i < n; ++i) w.values[i] = static_cast<float>(v->ValueAt(i));
    return w;
  }
  const int rows = static_cast<int>(t.shape[0]), cols = static_cast<int>(t.shape[1]);
  if (t.quantizable && quant != WeightType::kBF16 && WeightTypeFits(quant, cols)) {
    // As the loader quantizes a target's: from the stored values (f16 widens exactly).
    const SourceType source = v->dtype == DType::kBF16  ? SourceType::kBF16
                              : v->dtype == DType::kF16 ? SourceType::kF16
                                                        : SourceType::kF32;
    w.type = quant;
    w.bytes.resize(WeightBytes(quant, rows, cols));
    QuantizeMatrix(v->data, source, rows, cols, quant, w.bytes.data(), pool);
  } else if (v->dtype == DType::kBF16) {
    w.type = WeightType::kBF16;
    w.bytes.assign(v->data, v->data + v->bytes);
  } else {
    w.type = WeightType::kF32;
    w.bytes.resize(n * sizeof(float));
    auto* f = reinterpret_cast<float*>(w.bytes.data());
    for (int64_t i = 0; i < n; ++i) f[i] = static_cast<float>(v->ValueAt(i));
  }
  return w;
}

Result<WeightType> PackedAssistantQuant(const PackFile& pack) {
  const nlohmann::json& meta = pack.meta();
  if (MetaString(meta, "kind") != kArtifactKind)
    return Status::Errorf(pack.path(), ": not an assistant artifact (its meta has no kind \"",
                          kArtifactKind, "\"); pack the assistant's checkpoint with `g4 pack`");
  if (MetaInt(meta, "tp", 1) != 1)
    return Status::Errorf(pack.path(), ": an assistant artifact holds one rank");
  WeightType quant;
  if (!ParseWeightType(MetaString(meta, "quant"), &quant) ||
      (quant != WeightType::kBF16 && quant != WeightType::kQ8 && quant != WeightType::kQ4))
    return Status::Errorf(pack.path(), ": unknown assistant weight format ",
                          meta.value("quant", nlohmann::json()).dump());
  return quant;
}

Result<AssistantWeight> ReadPackedAssistantWeight(const PackFile& pack, const AssistantTensor& t,
                                                  const AssistantConfig& config,
                                                  WeightType packed) {
  const std::string name = kSectionPrefix + t.name;
  const PackSection* s = pack.Find(name);
  if (!s) return Status::Errorf(pack.path(), ": section ", name, " is missing");
  const std::string where = pack.path() + ": section " + name;
  const nlohmann::json& meta = s->meta;
  const std::string kind = MetaString(meta, "kind");
  const std::string type = MetaString(meta, "type");
  const int64_t n = Numel(t.shape);
  AssistantWeight w;
  if (t.kind == AssistantTensorKind::kOrdering) {
    if (kind != "ordering" || type != "i32" || MetaInt(meta, "n", -1) != n ||
        s->bytes != static_cast<uint64_t>(n) * sizeof(int32_t))
      return Status::Errorf(where, ": expected ", n, " int32 token ids (meta ", meta.dump(), ")");
    w.ids.resize(n);
    std::memcpy(w.ids.data(), s->data, s->bytes);
    G4_RETURN_IF_ERROR(CheckIds(w, config.text.vocab_size, where, t.name));
    return w;
  }
  if (t.kind != AssistantTensorKind::kMatrix) {
    if (kind != "vector" || type != "f32" || MetaInt(meta, "n", -1) != n ||
        s->bytes != static_cast<uint64_t>(n) * sizeof(float))
      return Status::Errorf(where, ": expected ", n, " f32 values (meta ", meta.dump(), ")");
    w.values.resize(n);
    std::memcpy(w.values.data(), s->data, s->bytes);
    return w;
  }
  const int rows = static_cast<int>(t.shape[0]), cols = static_cast<int>(t.shape[1]);
  if (kind != "matrix" || !ParseWeightType(type, &w.type) || MetaInt(meta, "rows", -1) != rows ||
      MetaInt(meta, "cols", -1) != cols)
    return Status::Errorf(where, ": expected a ", rows, " x ", cols, " matrix (meta ", meta.dump(),
                          ")");
  // Quantized exactly where packing (or a checkpoint load) at the artifact's format quantizes;
  // anything else is a foreign file.
  const bool quantized =
      packed != WeightType::kBF16 && t.quantizable && WeightTypeFits(packed, cols);
  if (quantized ? w.type != packed : (w.type == WeightType::kQ8 || w.type == WeightType::kQ4))
    return Status::Errorf(where, ": ", WeightTypeName(w.type), " in a ", WeightTypeName(packed),
                          " artifact, which holds this tensor as ",
                          quantized ? WeightTypeName(packed) : "bf16 or f32");
  if (s->bytes != WeightBytes(w.type, rows, cols))
    return Status::Errorf(where, ": ", s->bytes, " bytes, expected ",
                          WeightBytes(w.type, rows, cols), " for ", WeightTypeName(w.type));
  w.bytes.assign(s->data, s->data + s->bytes);
  return w;
}

Status PackAssistant(const std::string& dir, const std::string& out, WeightType quant, int threads,
                     PackModelStats* stats) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  Clock::duration reading{};
  if (IsPackFile(dir))
    return Status::Errorf(dir, " is already a packed artifact; pack a Hugging Face directory");
  if (quant != WeightType::kBF16 && quant != WeightType::kQ8 && quant != WeightType::kQ4)
    return Status::Error("an assistant packs as bf16 (as shipped), q8 or q4");
  G4_ASSIGN_OR_RETURN(const AssistantConfig config, LoadAssistantConfig(dir));
  G4_ASSIGN_OR_RETURN(auto store, TensorStore::OpenDir(dir));
  ThreadPool pool(threads);
  G4_ASSIGN_OR_RETURN(auto writer, PackWriter::Create(out, {.pool = &pool}));
  int sections = 0;
  G4_RETURN_IF_ERROR(AddCheckpointFiles(*writer, dir, &sections));
  // One tensor at a time: peak memory is the largest one (the 12B's dense head).
  for (const AssistantTensor& t : AssistantTensors(config)) {
    const auto read_start = Clock::now();
    G4_ASSIGN_OR_RETURN(AssistantWeight w,
                        ReadAssistantWeight(*store, t, config, quant, &pool, dir));
    reading += Clock::now() - read_start;
    const std::string name = kSectionPrefix + t.name;
    Status st;
    if (t.kind == AssistantTensorKind::kOrdering) {
      st = writer->Add(name, w.ids.data(), w.ids.size() * sizeof(int32_t),
                       {{"kind", "ordering"}, {"type", "i32"}, {"n", w.ids.size()}});
    } else if (t.kind == AssistantTensorKind::kMatrix) {
      st = writer->Add(name, w.bytes.data(), w.bytes.size(),
                       {{"kind", "matrix"},
                        {"type", WeightTypeName(w.type)},
                        {"rows", t.shape[0]},
                        {"cols", t.shape[1]}});
    } else {
      st = writer->Add(name, w.values.data(), w.values.size() * sizeof(float),
                       {{"kind", "vector"}, {"type", "f32"}, {"n", w.values.size()}});
    }
    G4_RETURN_IF_ERROR(st);
    ++sections;
  }
  G4_RETURN_IF_ERROR(writer->Commit({{"format_version", kPackFormatVersion},
                                     {"kind", kArtifactKind},
                                     {"model_type", config.model_type},
                                     {"quant", WeightTypeName(quant)},
                                     {"tp", 1},
                                     {"source", dir}}));
  if (stats) {
    const double total = std::chrono::duration<double>(Clock::now() - start).count();
    stats->load_seconds = std::chrono::duration<double>(reading).count();
    stats->write_seconds = total - stats->load_seconds;
    stats->bytes = writer->bytes_written();
    stats->sections = sections;
  }
  return OkStatus();
}

}  // namespace g4
