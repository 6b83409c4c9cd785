// g4 serve: the OpenAI-compatible server (server/server.h).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/command.h"
#include "cli/serve_engine.h"
#include "model/architecture.h"
#include "model/rank_plan.h"
#include "parallel/mpi_communicator.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tp_serve.h"
#include "server/log.h"
#include "server/server.h"

namespace g4::cli {
namespace {

// Flags and the model's config, checked before anything starts (front-door validation): resolves
// o->context against the model's maximum and refuses a --tp the model cannot be split over, with
// the reason, rather than after loading. Returns 0, or the exit code.
int CheckBeforeServing(const ServeModelOptions& model, ServerOptions* o) {
  if (Status st = CheckServerOptions(*o); !st.ok()) {
    std::fprintf(stderr, "g4 serve: %s\n", st.message().c_str());
    return 2;
  }
  auto config = LoadModelConfig(model.model_dir);
  if (!config.ok()) {
    std::fprintf(stderr, "g4 serve: %s\n", config.status().message().c_str());
    return 1;
  }
  const int model_max = config->max_position_embeddings > 0 ? config->max_position_embeddings : 4096;
  const int context = o->context > 0 ? o->context : std::min(4096, model_max);
  if (context < 2 || context > model_max) {
    std::fprintf(stderr, "g4 serve: --ctx must be in [2, %d] (the model's max_position_embeddings), got %d\n",
                 model_max, o->context);
    return 2;
  }
  o->context = context;
  if (model.tp > 1) {
    auto plan = PlanFromConfig(*config);
    Status st = plan.ok() ? CheckTensorParallel(*plan, model.tp) : plan.status();
    if (!st.ok()) {
      std::fprintf(stderr, "g4 serve: %s\n", st.message().c_str());
      return 2;
    }
  }
  return 0;
}

// Rank 0 (or the only process): checks, then serves with LoadServingEngine as the loader.
int Serve(const ServeModelOptions& model, ServerOptions o) {
  if (const int rc = CheckBeforeServing(model, &o); rc != 0) return rc;
  o.finish_load_before_exit = LaunchedByMpi();
  if (model.tp > 1)
    ServerLog(LaunchedByMpi() ? Str("tensor parallel over ", model.tp, " mpirun processes; this is rank 0 (pid ",
                                    ::getpid(), "), the others follow it")
                              : Str("tensor parallel over ", model.tp, " ranks (threads of this process)"));
  // The cache format is the engine's business: the server's options do not carry it.
  return RunServer(o, [model](SchedulerOptions so) {
    so.kv_type = KvTypeOf(model.kv_type);
    return LoadServingEngine(model, so);
  });
}

int RunServe(int argc, char** argv) {
  CLI::App app{"OpenAI-compatible HTTP server with continuous batching", "g4 serve"};
  ServerOptions o;
  ServeModelOptions m;
  m.model_dir = DefaultModelPath();
  bool no_prefix_reuse = false, quiet = false;
  app.add_option("--model", m.model_dir, "model directory (Hugging Face layout, with tokenizer.json)");
  app.add_option("--model-name", o.model_name, "model id reported by /v1/models (default: directory name)");
  app.add_option("--host", o.host, "address to bind (default 127.0.0.1: local only)");
  app.add_option("--port", o.port, "port (0 picks a free one)");
  app.add_option("--ctx", o.context, "context per slot in tokens (default min(4096, model max))");
  app.add_option("--parallel", o.parallel, "slots: sequences decoded together in one batch");
  app.add_option("--max-queue", o.max_queue, "requests that may wait for a slot; more get 429");
  app.add_option("--threads", m.threads,
                 "compute threads per rank (0 = all cores, shared among the ranks)");
  int tp = 0;
  app.add_option("--tp", tp,
                 "tensor-parallel ranks: threads in this process, or one per process under "
                 "mpirun, where rank 0 serves and the others follow (default: 1, or mpirun's -np)");
  app.add_option("--quant", m.quant, "weight format: bf16 (as shipped), q8, q4")
      ->check(CLI::IsMember({"bf16", "q8", "q4"}));
  app.add_option("--kv-type", m.kv_type, kKvTypeHelp)->check(CLI::IsMember({"f32", "bf16", "q8"}));
  app.add_option("--http-threads", o.http_threads, "HTTP worker threads (0 = parallel + max-queue + 16)");
  app.add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' (not for /health)");
  app.add_option("--timeout", o.timeout_seconds, "per-request time limit in seconds (finish_reason \"timeout\")");
  app.add_option("--grace", o.grace_seconds, "on SIGTERM, seconds to let in-flight requests finish");
  app.add_option("--max-body", o.max_body_bytes, "largest request body in bytes");
  app.add_option("--body-timeout", o.body_timeout_seconds,
                 "seconds a client may take to send a request body (then 408)");
  app.add_option("--prefill-chunk", o.prefill_chunk, "prompt tokens of one sequence per step");
  app.add_option("--batch-rows", o.max_batch_rows, "prompt tokens over all sequences per step");
  app.add_option("--responses-store", o.stored_responses,
                 "/v1/responses kept in memory for previous_response_id and GET (LRU; 0 = none)");
  app.add_flag("--no-prefix-reuse", no_prefix_reuse, "always prefill the whole prompt");
  app.add_flag("--quiet", quiet, "no per-request log lines");
  AddSpecOptions(app, m.spec);
  CLI11_PARSE(app, argc, argv);
  if (Status st = CheckSpecFlags(m.spec); !st.ok()) {
    std::fprintf(stderr, "g4 serve: %s\n", st.message().c_str());
    return 2;
  }
  o.model_dir = m.model_dir;
  o.prefix_reuse = !no_prefix_reuse;
  o.log_requests = !quiet;
  if (o.timeout_seconds <= 0 || o.grace_seconds < 0 || o.max_queue < 0 || o.prefill_chunk < 1 ||
      o.max_batch_rows < 1 || o.max_body_bytes < 1024 || o.body_timeout_seconds <= 0 || o.stored_responses < 0) {
    std::fprintf(stderr, "g4 serve: --timeout must be > 0, --grace, --max-queue and --responses-store >= 0, --prefill-chunk and "
                         "--batch-rows >= 1, --max-body >= 1024, --body-timeout > 0\n");
    return 2;
  }
  if (tp < 0) {
    std::fprintf(stderr, "g4 serve: --tp must be >= 1, got %d\n", tp);
    return 2;
  }
  if (!LaunchedByMpi()) {
    m.tp = std::max(1, tp);
    return Serve(m, o);
  }
  // Under mpirun SIGTERM/SIGINT are blocked before MPI starts its own threads, so that none of
  // them takes the default action: rank 0 waits for them (RunServer) to drain; a follower is
  // driven by rank 0, which tells it to stop, and mpirun forwards its own SIGTERM to every
  // rank, which must not end a follower under rank 0's feet.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // Every process parses the same flags; the world size is the rank count.
  auto world = MpiWorld();
  if (!world.ok() || (tp > 0 && tp != (*world)->size())) {
    if (IsOutputProcess())
      std::fprintf(stderr, "g4 serve: %s\n",
                   world.ok() ? Str("--tp ", tp, " but mpirun started ", (*world)->size(),
                                    " ranks: give --tp equal to mpirun -np (or leave --tp out)")
                                    .c_str()
                              : world.status().message().c_str());
    return 2;
  }
  m.tp = (*world)->size();
  if (!IsOutputProcess()) {
    ModelOptions mo;
    mo.threads = m.threads;
    return RunServeFollower(m.model_dir, mo, FollowerDraft(m.spec));
  }
  const int rc = Serve(m, o);
  // Followers may still wait for this rank in a collective (it failed before or while loading):
  // end the whole job rather than leave them waiting.
  if (rc != 0) AbortMpiWorld(rc);
  return rc;
}

}  // namespace

G4_COMMAND("serve", "OpenAI-compatible HTTP server (continuous batching, SSE, metrics)", RunServe);

}  // namespace g4::cli
