// g4 probe (internal, for g4 validate): what runs in the fresh process. Loads like `g4 serve`
// (the path as given, so an artifact is mapped and verified) and answers the requests validate
// wrote, as OUT.json (greedy tokens, load facts) and OUT.npy (teacher-forced logits).
#include "cli/probe.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/stopwatch.h"
#include "cli/cli_util.h"
#include "cli/command.h"
#include "io/npy.h"
#include "io/pack.h"
#include "parallel/tensor_parallel.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"

extern char** environ;

namespace g4::cli {
namespace {

nlohmann::json RequestToJson(const ProbeRequest& r) {
  return {{"greedy", r.greedy}, {"n_new", r.n_new}, {"teacher", r.teacher}, {"chunk", r.chunk}};
}

std::string LoadedFormats(const ModelWeights& w) {
  std::map<std::string, int64_t> bytes;
  auto add = [&](const WeightMatrix& m) {
    if (!m.empty()) bytes[WeightTypeName(m.type)] += static_cast<int64_t>(m.bytes);
  };
  add(w.embed);
  for (const auto& l : w.layers)
    for (const WeightMatrix* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj})
      add(*m);
  std::string s;
  for (const auto& [name, b] : bytes) s += (s.empty() ? "" : "+") + name;
  return s;
}

int RunProbeCommand(int argc, char** argv) {
  CLI::App app{"(internal, for g4 validate) load a model the way the server does and answer requests", "g4 probe"};
  std::string model, requests, out, quant = "bf16";
  int threads = 0, tp = 1;
  app.add_option("--model", model, "checkpoint directory or packed artifact")->required();
  app.add_option("--tp", tp, "tensor-parallel ranks (threads of this process)");
  app.add_option("--quant", quant, "weight format")->check(CLI::IsMember({"bf16", "q8", "q4"}));
  app.add_option("--requests", requests, "request JSON")->required();
  app.add_option("--out", out, "output prefix: writes OUT.json and OUT.npy")->required();
  app.add_option("--threads", threads, "threads (0 = all cores)");
  CLI11_PARSE(app, argc, argv);
  auto text = ReadFileToString(requests);
  if (!text.ok()) return Fail("probe", text.status());
  ProbeRequest req;
  try {
    const auto j = nlohmann::json::parse(*text);
    req.greedy = j.at("greedy").get<std::vector<std::vector<int>>>();
    req.n_new = j.at("n_new").get<int>();
    req.teacher = j.at("teacher").get<std::vector<int>>();
    req.chunk = j.at("chunk").get<int>();
  } catch (const std::exception& e) {
    return Fail("probe", Status::Errorf(requests, ": bad request: ", e.what()));
  }
  WeightType type;
  ParseWeightType(quant, &type);
  auto result = RunProbe(model, type, threads, tp, req);
  if (!result.ok()) return Fail("probe", result.status());
  const nlohmann::json j = {{"greedy", result->greedy},     {"vocab", result->vocab},
                            {"load_seconds", result->load_seconds}, {"weights", result->weights},
                            {"artifact", result->artifact},  {"pid", static_cast<int>(::getpid())}};
  Status st = WriteFileAtomic(out + ".json", j.dump());
  if (st.ok() && !result->teacher_logits.empty())
    st = WriteNpyF32(out + ".npy", {static_cast<int64_t>(req.teacher.size()), result->vocab}, result->teacher_logits.data());
  if (!st.ok()) return Fail("probe", st);
  return 0;
}

}  // namespace

Result<ProbeResult> RunProbe(const std::string& model_path, WeightType quant, int threads, int tp,
                             const ProbeRequest& req) {
  ProbeResult out;
  ModelOptions options;
  options.threads = threads;
  options.load.quant = quant;
  out.artifact = IsPackFile(model_path);
  G4_RETURN_IF_ERROR(RunTensorParallel(tp, [&](Communicator* comm) -> Status {
    // Every rank runs every call (the collectives pair up); rank 0 records the answers.
    const bool output_rank = IsOutputRank(comm);
    const Stopwatch load_timer;
    G4_ASSIGN_OR_RETURN(auto model, LoadModel(model_path, options.OnRanks(comm)));
    const ModelPlan& plan = model->plan();
    if (output_rank) {
      out.load_seconds = load_timer.Seconds();
      out.weights = LoadedFormats(model->weights());
      out.vocab = plan.vocab;
    }
    for (const auto& prompt : req.greedy) {
      KvCache cache(plan, static_cast<int>(prompt.size()) + req.n_new, req.chunk);
      GenerateOptions gen;
      gen.max_new_tokens = req.n_new;
      gen.ignore_eos = true;
      gen.prefill_chunk = req.chunk;
      G4_ASSIGN_OR_RETURN(GenerateResult r, Generate(*model, cache, prompt, gen));
      if (output_rank) out.greedy.push_back(r.tokens);
    }
    if (!req.teacher.empty()) {
      KvCache cache(plan, static_cast<int>(req.teacher.size()), req.chunk);
      Activations act;
      G4_ASSIGN_OR_RETURN(std::vector<float> logits,
                          Prefill(*model, cache, req.teacher, req.chunk, /*all_rows=*/true, act));
      if (output_rank) {
        ApplySoftcapInPlace(logits.data(), static_cast<int>(logits.size()),
                            static_cast<float>(plan.softcap));
        out.teacher_logits = std::move(logits);
      }
    }
    return OkStatus();
  }));
  return out;
}

Result<ProbeResult> RunProbeChild(const std::string& model_path, const std::string& quant,
                                  int threads, int tp, const ProbeRequest& req, int* child_pid) {
  const std::string exe = ThisBinaryPath();
  if (exe.empty()) return Status::Error("cannot find the g4 binary (/proc/self/exe)");
  std::string dir_template = std::filesystem::temp_directory_path().string() + "/g4-validate-XXXXXX";
  if (!::mkdtemp(dir_template.data())) return Status::Errorf("mkdtemp failed: ", std::strerror(errno));
  const std::string dir = dir_template;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};
  G4_RETURN_IF_ERROR(WriteFileAtomic(dir + "/requests.json", RequestToJson(req).dump()));
  std::vector<std::string> args = {exe,          "probe",
                                   "--model",    model_path,
                                   "--quant",    quant,
                                   "--requests", dir + "/requests.json",
                                   "--out",      dir + "/out",
                                   "--threads",  std::to_string(threads),
                                   "--tp",       std::to_string(tp)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (int err = ::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ); err != 0)
    return Status::Errorf("cannot start ", exe, ": ", std::strerror(err));
  *child_pid = pid;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    return Status::Errorf("the probe process (", exe, " probe) died with signal ", WTERMSIG(status));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return Status::Errorf("the probe process failed to load or run ", model_path, " (its message is above)");
  G4_ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir + "/out.json"));
  ProbeResult out;
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return Status::Error("the probe wrote invalid JSON");
  out.greedy = j.value("greedy", std::vector<std::vector<int>>{});
  out.vocab = j.value("vocab", 0);
  out.load_seconds = j.value("load_seconds", 0.0);
  out.weights = j.value("weights", std::string());
  out.artifact = j.value("artifact", false);
  if (!req.teacher.empty()) {
    G4_ASSIGN_OR_RETURN(NpyF32 npy, ReadNpyF32(dir + "/out.npy"));
    out.teacher_logits = std::move(npy.data);
  }
  return out;
}

G4_COMMAND("probe", "(internal, used by validate) load a model as the server does and answer requests",
           RunProbeCommand);

}  // namespace g4::cli
