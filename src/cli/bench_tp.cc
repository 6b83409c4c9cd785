// g4 bench-tp: prefill and decode speed at several tensor-parallel rank counts, with the time
// each rank spends in collectives per token (waiting for slower peers included). One sequence;
// greedy; the numbers are rank 0's.
//
//   g4 bench-tp --model DIR --tp 1,2 --prompt 128 -n 32            # in-process ranks
//   mpirun -np 2 g4 bench-tp --model DIR --tp 2                    # one rank per process
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <ctime>

#include "base/stopwatch.h"
#include "cli/cli_util.h"
#include "cli/command.h"
#include "cli/tensor_parallel_command.h"
#include "kernels/ops.h"
#include "model/forward.h"
#include "model/loader.h"
#include "model/random_prompt.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"

namespace g4::cli {
namespace {

// CPU time of the calling thread: with one thread per rank, the rank's own work (plus its barrier
// spinning), which on a shared machine says more than wall time about how the work split.
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int RunBenchTp(int argc, char** argv) {
  CLI::App app{"Tensor-parallel prefill/decode benchmark (communication time per token)", "g4 bench-tp"};
  std::string model_dir = DefaultModelPath(), tp_text = "1,2", lm_head = "split";
  int prompt_len = 128, n = 32, threads = 1, chunk = 64, reps = 1;
  app.add_option("--model", model_dir, "model directory (Hugging Face layout)");
  app.add_option("--tp", tp_text, "comma-separated rank counts to run");
  app.add_option("--prompt", prompt_len, "prefill tokens");
  app.add_option("-n", n, "decode tokens");
  app.add_option("--threads", threads, "threads per rank");
  app.add_option("--chunk", chunk, "prefill chunk size");
  app.add_option("--reps", reps, "repetitions (the best is reported)");
  app.add_option("--lm-head", lm_head, "split (by vocabulary, gathered) or rank0");
  CLI11_PARSE(app, argc, argv);
  auto tps = ParseIdList(tp_text);
  if (!tps.ok()) return Fail("bench-tp", tps.status());
  if (lm_head != "split" && lm_head != "rank0")
    return Fail("bench-tp", Status::Error("--lm-head must be split or rank0"));
  RankPlanOptions rank_options;
  rank_options.lm_head = lm_head == "split" ? LmHeadPlacement::kSplitVocab : LmHeadPlacement::kRank0;
  if (IsOutputProcess())
    std::printf("| tp | threads/rank | prefill tok/s | prefill comm ms/token | decode tok/s | decode ms/token | "
                "decode comm ms/token | rank 0 CPU ms/token | collectives/token |\n"
                "|---|---|---|---|---|---|---|---|---|\n");
  for (int tp : *tps) {
    const int rc = RunTensorParallelCommand("bench-tp", tp, [&](Communicator* comm) -> Status {
      ModelOptions options;
      options.threads = threads;
      G4_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(model_dir, options.OnRanks(comm, rank_options.lm_head)));
      const ModelPlan& plan = model->plan();
      const std::vector<int> prompt = RandomPromptIds(prompt_len, plan.vocab, 1);
      double best_prefill = 1e30, best_decode = 1e30, prefill_comm = 0, decode_comm = 0, decode_cpu = 0;
      int64_t decode_calls = 0;
      for (int rep = 0; rep < reps; ++rep) {
        KvCache cache(plan, prompt_len + n + 1, chunk);
        Activations act;
        CommStats c0 = comm ? comm->stats() : CommStats{};
        Stopwatch prefill_timer;
        G4_ASSIGN_OR_RETURN(std::vector<float> logits, Prefill(*model, cache, prompt, chunk, false, act));
        const double prefill = prefill_timer.Seconds();
        CommStats c1 = comm ? comm->stats() : CommStats{};
        int token = static_cast<int>(ArgMax(logits.data(), plan.vocab));
        Stopwatch decode_timer;
        const double cpu1 = ThreadCpuSeconds();
        for (int i = 0; i < n; ++i) {
          std::vector<BatchRow> rows{BatchRow{token, cache.n_past(), &cache, true}};
          G4_RETURN_IF_ERROR(model->Forward(rows, act, logits.data()));
          token = static_cast<int>(ArgMax(logits.data(), plan.vocab));
        }
        const double decode = decode_timer.Seconds(), cpu = ThreadCpuSeconds() - cpu1;
        CommStats c2 = comm ? comm->stats() : CommStats{};
        if (prefill < best_prefill) {
          best_prefill = prefill;
          prefill_comm = c1.seconds - c0.seconds;
        }
        if (decode < best_decode) {
          best_decode = decode;
          decode_comm = c2.seconds - c1.seconds;
          decode_calls = c2.calls - c1.calls;
          decode_cpu = cpu;
        }
      }
      if (!IsOutputRank(comm)) return OkStatus();
      std::printf("| %d | %d | %.1f | %.3f | %.2f | %.1f | %.3f | %.1f | %.0f |\n", comm ? comm->size() : 1,
                  threads, prompt_len / best_prefill, prefill_comm * 1e3 / prompt_len, n / best_decode,
                  best_decode * 1e3 / n, decode_comm * 1e3 / n, decode_cpu * 1e3 / n,
                  static_cast<double>(decode_calls) / n);
      std::fflush(stdout);
      return OkStatus();
    });
    if (rc != 0) return rc;
  }
  return 0;
}

}  // namespace

G4_COMMAND("bench-tp", "tensor-parallel prefill/decode benchmark with communication time per token", RunBenchTp);

}  // namespace g4::cli
