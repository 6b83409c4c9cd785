// Fuzzes the packed-artifact reader (io/pack.h: PackFile::Open, Verify, ReadText) and loading a
// model from an artifact (model/pack_reader.h: LoadPackedModel via LoadModel, then one Forward),
// or, for an assistant drafter's artifact, reading every tensor of its table
// (model/assistant_weights.h: ReadPackedAssistantWeight, what `--spec mtp --draft FILE` binds).
//
// Input: one knob byte, then the artifact. The header and table carry XXH64 checksums that a
// mutation almost never keeps right, so without help every input would stop at "damaged".
//   knob bit 0: recompute the table checksum (when the header's table range lies in the file)
//               and the header checksum before opening, so mutations reach the table parser;
//   knob bit 1: also set the header's file_bytes to the input's size (reaches past the size check);
//   knob bit 2: once it opens, recompute every section checksum (RewritePackChecksums) and load
//               the model, so mutations of the metadata and sections reach LoadPackedModel.
// Any input must give an artifact whose every section lies inside the mapping, or an error that
// says something; a model that loads must run a forward step.
//
// Seeds (fuzz/corpus/pack_fuzz/) are written by this binary from a tiny synthetic model packed by
// PackModel (what `g4 pack` runs):  G4_PACK_FUZZ_WRITE_SEEDS=fuzz/corpus/pack_fuzz
// build-fuzz/fuzz/pack_fuzz
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/hash.h"
#include "fuzz_util.h"
#include "io/pack.h"
#include "model/arch/gemma4_assistant.h"
#include "model/assistant_weights.h"
#include "model/forward.h"
#include "model/loader.h"
#include "model/kv_cache.h"
#include "model/pack_reader.h"
#include "model/pack_writer.h"
#include "model/synth.h"
#include "model/synth_assistant.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "pack_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void Store64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

// Header fields by byte offset (io/pack.h layout).
constexpr size_t kTableOffset = 16, kTableBytes = 24, kTableChecksum = 32, kFileBytes = 40,
                 kHeaderChecksum = 56;

void FixChecksums(std::string& file, bool fix_size) {
  if (file.size() < g4::kPackHeaderBytes) return;
  auto* p = reinterpret_cast<uint8_t*>(file.data());
  if (fix_size) Store64(p + kFileBytes, file.size());
  const uint64_t table_offset = Load64(p + kTableOffset), table_bytes = Load64(p + kTableBytes);
  if (table_offset <= file.size() && table_bytes <= file.size() - table_offset)
    Store64(p + kTableChecksum, g4::Xxh64(p + table_offset, table_bytes));
  Store64(p + kHeaderChecksum, g4::Xxh64(p, kHeaderChecksum));
}

void CheckOpened(const g4::PackFile& pack) {
  const uint64_t size = pack.file_bytes();
  for (const g4::PackSection& s : pack.sections()) {
    Check(s.offset >= g4::kPackHeaderBytes && s.offset <= size && s.bytes <= size - s.offset,
          "an accepted section lies inside the file");
    Check(s.offset % g4::kPackAlignment == 0, "an accepted section is aligned");
    Check(pack.Find(s.name) != nullptr, "every section can be found by name");
    Check(s.meta.is_object(), "section meta is an object");
  }
  Check(pack.meta().is_object(), "artifact meta is an object");
  g4::Status st = pack.VerifyAll(nullptr);
  Check(st.ok() || !st.message().empty(), "a failed verify says why");
  for (const g4::PackSection& s : pack.sections()) {
    g4::Status one = pack.Verify(s);
    Check(one.ok() || st.ok() == false, "VerifyAll passes only if every Verify does");
  }
  if (pack.Find("file/config.json")) {
    auto text = pack.ReadText("file/config.json");
    Check(text.ok() || !text.status().message().empty(), "a failed read says why");
  }
}

// An assistant artifact: each tensor read as `--spec mtp --draft FILE` reads it, short of binding
// a target. What it accepts must be exactly what the table asks for.
void ReadAssistant(const std::string& path) {
  auto config = g4::LoadAssistantConfig(path);
  if (!config.ok()) {
    Check(!config.status().message().empty(), "a refused assistant config says why");
    return;
  }
  auto pack = g4::PackFile::Open(path);
  if (!pack.ok()) return;
  auto quant = g4::PackedAssistantQuant(**pack);
  if (!quant.ok()) {
    Check(!quant.status().message().empty(), "a refused assistant artifact says why");
    return;
  }
  for (const g4::AssistantTensor& t : g4::AssistantTensors(*config)) {
    auto w = g4::ReadPackedAssistantWeight(**pack, t, *config, *quant);
    if (!w.ok()) {
      Check(!w.status().message().empty(), "a refused assistant tensor says why");
      return;
    }
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    switch (t.kind) {
      case g4::AssistantTensorKind::kMatrix:
        Check(w->bytes.size() == g4::WeightBytes(w->type, static_cast<int>(t.shape[0]),
                                                 static_cast<int>(t.shape[1])),
              "an accepted matrix holds its format's bytes for its shape");
        break;
      case g4::AssistantTensorKind::kOrdering:
        Check(static_cast<int64_t>(w->ids.size()) == n, "an accepted ordering has vocab ids");
        for (int32_t id : w->ids)
          Check(id >= 0 && id < config->text.vocab_size, "every accepted id is in the vocabulary");
        break;
      default:
        Check(static_cast<int64_t>(w->values.size()) == n, "an accepted vector has its length");
    }
  }
}

void LoadAndRun(const std::string& path) {
  if (g4::IsAssistantCheckpoint(path)) {
    ReadAssistant(path);
    return;
  }
  g4::ModelOptions options;
  options.threads = 1;
  auto model = g4::LoadModel(path, options);
  if (!model.ok()) {
    Check(!model.status().message().empty(), "a failed load says why");
    return;
  }
  const g4::ModelPlan& plan = (*model)->plan();
  const g4::ModelWeights& w = (*model)->weights();
  // Every bound matrix was copied (or reordered) whole out of the mapped artifact into memory
  // the engine owns: its size is its format's for its shape, and none of it lies in a section.
  Check(w.artifact != nullptr, "weights keep their artifact");
  const auto& pack = *static_cast<const g4::PackFile*>(w.artifact.get());
  auto owned_whole = [&](const g4::WeightMatrix& m) {
    if (!m.data) return true;
    if (m.bytes != g4::WeightBytes(m.type, m.rows, m.cols)) return false;
    const auto begin = reinterpret_cast<uintptr_t>(m.data), end = begin + m.bytes;
    for (const g4::PackSection& s : pack.sections()) {
      const auto s_begin = reinterpret_cast<uintptr_t>(s.data), s_end = s_begin + s.bytes;
      if (begin < s_end && s_begin < end) return false;
    }
    return true;
  };
  Check(owned_whole(w.embed), "embed is copied out whole");
  for (const auto& lw : w.layers)
    Check(owned_whole(lw.q_proj) && owned_whole(lw.down_proj), "layer matrices");
  // One forward step over two tokens.
  g4::KvCache cache(plan, 8, 8);
  g4::Activations act;
  std::vector<g4::BatchRow> rows = {{2, 0, &cache, false},
                                    {std::min(3, plan.vocab - 1), 1, &cache, true}};
  std::vector<float> logits(plan.vocab);
  g4::Status st = (*model)->Forward(rows, act, logits.data());
  Check(st.ok() || !st.message().empty(), "a failed forward says why");
}

// A tiny E2B-shaped model: two layers (sliding, full), PLE, 256-token vocabulary; small enough
// that its artifact (one 4 KiB page per section) stays under 200 KB.
void WriteSeeds(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const std::string work =
      fs::temp_directory_path() / ("g4_pack_fuzz_seeds_" + std::to_string(::getpid()));
  fs::create_directories(work);
  auto spec = g4::SynthPreset("e2b", "tiny");
  Check(spec.ok(), "preset");
  spec->hidden = 32;
  spec->intermediate = 32;
  spec->layers = 2;
  spec->heads = 2;
  spec->kv_heads = 1;
  spec->head_dim = 8;
  spec->global_head_dim = 16;
  spec->window = 4;
  spec->kv_shared = 0;
  spec->ple_dim = 4;
  spec->layer_types = {"sliding_attention", "full_attention"};
  g4::SynthOptions synth;
  synth.vocab = 256;
  synth.tokenizer = std::string(G4_SOURCE_DIR) + "/fuzz/corpus/tokenizer_load_fuzz/tiny_bpe";
  g4::Status st = g4::WriteSynthCheckpoint(*spec, synth, work + "/model");
  if (!st.ok()) std::fprintf(stderr, "%s\n", st.message().c_str());
  Check(st.ok(), "synth");
  st = g4::PackModel(work + "/model", work + "/model.g4", {});
  if (!st.ok()) std::fprintf(stderr, "%s\n", st.message().c_str());
  Check(st.ok(), "pack");
  // A tiny assistant drafter (the E2B's kind: centroid head), packed at q8.
  {
    auto assistant = g4::SynthAssistantPreset("e2b-assistant", "tiny");
    Check(assistant.ok(), "assistant preset");
    st = g4::WriteSynthAssistant(*assistant, {.vocab = 512}, work + "/assistant");
    Check(st.ok(), "assistant synth");
    st = g4::PackAssistant(work + "/assistant", work + "/assistant.g4", g4::WeightType::kQ8, 1);
    Check(st.ok(), "assistant pack");
  }
  // A small artifact without a model: two text sections.
  {
    auto writer = g4::PackWriter::Create(work + "/text.g4");
    Check(writer.ok(), "writer");
    Check((*writer)->AddText("file/config.json", "{\"model_type\": \"gemma4_text\"}").ok(), "add");
    Check((*writer)->AddText("notes", "hello", {{"kind", "text"}}).ok(), "add");
    Check((*writer)->Commit({{"quant", "bf16"}, {"tp", 1}}).ok(), "commit");
  }
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto put = [&](const std::string& name, char knob, const std::string& bytes) {
    std::ofstream(dir + "/" + name, std::ios::binary) << knob << bytes;
  };
  const std::string model = read(work + "/model.g4"), text = read(work + "/text.g4");
  put("model_load", 7, model);
  put("assistant_load", 7, read(work + "/assistant.g4"));
  put("text", 0, text);
  put("text_fixed", 3, text);
  put("text_truncated", 0, text.substr(0, text.size() - 100));
  put("header_only", 0, text.substr(0, g4::kPackHeaderBytes));
  std::string garbled = text;
  garbled[g4::kPackHeaderBytes + g4::kPackAlignment + 2] ^= 0x20;  // inside the first section
  put("text_garbled_section", 0, garbled);
  garbled = text;
  garbled[garbled.size() - 10] ^= 0x01;  // inside the table
  put("text_garbled_table", 1, garbled);
  put("not_a_pack", 0, "{\"sections\": []}");
  fs::remove_all(work);
  std::fprintf(stderr, "pack_fuzz: wrote seeds to %s (model artifact %zu bytes, text %zu)\n",
               dir.c_str(), model.size(), text.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("G4_PACK_FUZZ_WRITE_SEEDS")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g4::fuzz::Knobs knobs(data, size);
  const uint8_t knob = knobs.Byte();
  std::string file(reinterpret_cast<const char*>(data), size);
  if (knob & 1) FixChecksums(file, knob & 2);
  g4::fuzz::MemFile mem(reinterpret_cast<const uint8_t*>(file.data()), file.size());
  auto pack = g4::PackFile::Open(mem.path());
  if (!pack.ok()) {
    Check(!pack.status().message().empty(), "every error says something");
    return 0;
  }
  CheckOpened(**pack);
  if (knob & 4) {
    pack = g4::Status::Error("closed");  // unmap before rewriting
    if (!g4::RewritePackChecksums(mem.path()).ok()) return 0;
    LoadAndRun(mem.path());
  }
  return 0;
}
