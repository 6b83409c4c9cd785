#include "model/pack_writer.h"

#include <chrono>

#include "base/mapped_file.h"
#include "model/architecture.h"
#include "model/loader.h"
#include "model/pack_layout.h"
#include "model/rank_plan.h"

namespace g4 {

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Writes one rank's plan and tensors under PREFIX.
Status AddRankSections(PackWriter& writer, const std::string& prefix, const ModelPlan& full,
                       const ModelPlan& plan, const ModelWeights& w, int* sections) {
  G4_RETURN_IF_ERROR(writer.AddText(prefix + "plan", PlanToJson(plan).dump(1)));
  ++*sections;
  Status status;
  ForEachPackedTensor(
      full, plan, w,
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
  // Unsupported rank counts fail before anything is written.
  G4_ASSIGN_OR_RETURN(const ModelPlan full, LoadModelPlan(dir));
  G4_RETURN_IF_ERROR(CheckTensorParallel(full, tp));
  // Each rank as LoadModel holds it (the whole model at --tp 1), converted one rank at a time
  // (peak memory: one rank), in the row-major layout every machine reads.
  ModelOptions load_options;
  load_options.threads = options.threads;
  load_options.load.quant = options.quant;
  load_options.load.threads = options.threads;
  load_options.kernel_layout = false;
  load_options.tp = tp;
  load_options.lm_head = options.lm_head;

  const auto t1 = std::chrono::steady_clock::now();
  ThreadPool own_pool(options.threads);
  PackWriteOptions write = options.write;
  if (!write.pool) write.pool = &own_pool;
  G4_ASSIGN_OR_RETURN(auto writer, PackWriter::Create(out, write));
  int sections = 0;
  G4_RETURN_IF_ERROR(AddCheckpointFiles(*writer, dir, &sections));
  nlohmann::json meta = {{"format_version", kPackFormatVersion},
                         {"quant", WeightTypeName(options.quant)},
                         {"tp", tp},
                         {"source", dir}};
  if (tp > 1) meta["lm_head"] = LmHeadName(options.lm_head);
  bool embed_table_written = false;
  double convert_seconds = 0;  // rank conversions interleaved with writing
  for (int r = 0; r < tp; ++r) {
    load_options.rank = r;
    const auto t = std::chrono::steady_clock::now();
    G4_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(dir, load_options));
    convert_seconds += Seconds(t);
    const ModelPlan& plan = model->plan();
    const ModelWeights& w = model->weights();
    G4_RETURN_IF_ERROR(AddRankSections(*writer, RankPrefix(r), full, plan, w, &sections));
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
    stats->load_seconds = convert_seconds;
    stats->write_seconds = Seconds(t1) - convert_seconds;
    stats->bytes = writer->bytes_written();
    stats->sections = sections;
  }
  return OkStatus();
}

}  // namespace g4
