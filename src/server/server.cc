// The server's lifecycle: options, signals, listening, the loader thread (loading -> ready or
// failed), the signal thread (draining), and shutdown. Transport, routes, the exchange of one
// request and the OpenAI objects are in their own files.
#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "server/http_transport.h"
#include "server/log.h"
#include "server/routes.h"
#include "server/server_state.h"

namespace g4 {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Clock::time_point After(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string NewIdSalt() {
  std::random_device rd;
  char salt[16];
  std::snprintf(salt, sizeof salt, "%06x-", rd() & 0xffffff);
  return salt;
}

std::string ModelName(const ServerOptions& options) {
  if (!options.model_name.empty()) return options.model_name;
  std::string dir = options.model_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir.substr(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/') + 1);
}

// Every thread started after this blocks SIGTERM/SIGINT; one thread waits for them (Drain).
sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return signals;
}

// Binds; port 0 takes a free port (tests), and the log line says which. <= 0 on failure.
int Bind(httplib::Server& svr, const ServerOptions& options) {
  if (options.port == 0) return svr.bind_to_any_port(options.host);
  return svr.bind_to_port(options.host, options.port) ? options.port : -1;
}

SchedulerOptions SchedulerOptionsOf(const ServerOptions& options) {
  SchedulerOptions so;
  so.parallel = options.parallel;
  so.context = options.context;
  so.max_queue = options.max_queue;
  so.prefill_chunk = options.prefill_chunk;
  so.max_batch_rows = options.max_batch_rows;
  so.prefix_reuse = options.prefix_reuse;
  return so;
}

// The loader thread: loads the engine, publishes it and turns ready (unless a drain began), or
// fails (phase kFailed). Returns the exit code so far.
int LoadEngine(ServerState& s, const ServingEngineFactory& load_engine) {
  const auto t0 = Clock::now();
  // Tests hold the loading phase open to observe it (G4_SERVE_LOAD_DELAY_MS).
  if (const char* delay = std::getenv("G4_SERVE_LOAD_DELAY_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
  auto engine = load_engine(SchedulerOptionsOf(s.options));
  if (!engine.ok()) {
    ServerLog("cannot load the model: " + engine.status().message());
    s.phase.store(Phase::kFailed);
    return 1;
  }
  s.owned_engine = std::move(*engine);
  const EngineInfo& info = s.owned_engine->info();
  s.limits.vocab = info.vocab;
  s.limits.defaults = info.generation;
  s.limits.suppress_tokens = info.suppress_tokens;
  s.limits.max_timeout_seconds = std::max(1.0, s.options.timeout_seconds);
  s.engine.store(s.owned_engine.get());
  Phase expected = Phase::kLoading;
  if (s.phase.compare_exchange_strong(expected, Phase::kReady)) {
    const SchedulerStats stats = s.owned_engine->scheduler().stats();
    ServerLog(Str("ready in ", Since(t0), " s: ", info.n_layers, " layers, vocab ", info.vocab, ", KV caches ",
                  stats.kv_bytes >> 20, " MiB"));
  }
  return 0;
}

// The signal thread: waits for SIGTERM/SIGINT, then drains: no new requests, in-flight ones get
// the grace period, what is left after it is cancelled (its clients get a final chunk), and the
// HTTP threads get a moment to write their last bytes. Woken with SIGTERM by RunServer after a
// failed load, it only returns.
void Drain(ServerState& s, sigset_t signals, const std::atomic<bool>& loader_done, httplib::Server& svr) {
  int sig = 0;
  sigwait(&signals, &sig);
  if (s.phase.load() == Phase::kFailed) return;
  ServerLog(Str("signal ", sig, ": draining (grace ", s.options.grace_seconds, " s)"));
  s.phase.store(Phase::kDraining);
  const auto deadline = After(s.options.grace_seconds);
  auto flush_until = deadline;
  if (ServingEngine* engine = loader_done.load() ? s.engine.load() : nullptr) {
    Scheduler& scheduler = engine->scheduler();
    scheduler.StopAccepting();
    if (!scheduler.WaitIdle(deadline)) {
      ServerLog("grace period over; cancelling what is left");
      scheduler.Stop();
      flush_until = After(5);
    }
  }
  while (s.in_flight.load() > 0 && Clock::now() < flush_until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  svr.stop();
}

}  // namespace

Status CheckServerOptions(const ServerOptions& options) {
  if (options.parallel < 1 || options.parallel > 256)
    return Status::Errorf("--parallel must be in [1, 256], got ", options.parallel);
  if (options.port < 0 || options.port > 65535)
    return Status::Errorf("--port must be in [0, 65535], got ", options.port);
  return OkStatus();
}

int RunServer(const ServerOptions& options, const ServingEngineFactory& load_engine) {
  Status valid = CheckServerOptions(options);
  if (valid.ok() && options.context < 2)
    valid = Status::Errorf("the context per slot must be at least 2 tokens, got ", options.context);
  if (!valid.ok()) {
    std::fprintf(stderr, "g4 serve: %s\n", valid.message().c_str());
    return 2;
  }
  ServerState s;
  s.options = options;
  s.id_salt = NewIdSalt();
  s.model_name = ModelName(options);
  s.responses.set_capacity(static_cast<size_t>(options.stored_responses));
  const sigset_t signals = BlockStopSignals();

  httplib::Server svr;
  ConfigureTransport(svr, options, s.metrics);
  RegisterRoutes(svr, s);
  const int port = Bind(svr, options);
  if (port <= 0) {
    std::fprintf(stderr, "g4 serve: cannot listen on %s:%d: %s\n", options.host.c_str(), options.port,
                 std::strerror(errno));
    return 1;
  }
  ServerLog(Str("listening on http://", options.host, ":", port, " (model ", s.model_name, " loading from ",
                options.model_dir, "; ctx ", options.context, " x ", options.parallel, " slots)"));

  std::atomic<bool> loader_done{false};
  std::atomic<int> exit_code{0};
  std::thread loader([&] {
    const int rc = LoadEngine(s, load_engine);
    exit_code.store(rc);
    loader_done.store(true);  // before the stop: RunServer then knows the load is over
    if (rc != 0) svr.stop();
  });
  std::thread signal_thread([&] { Drain(s, signals, loader_done, svr); });

  svr.listen_after_bind();
  // Wake the signal thread if it is still waiting (failed load).
  if (s.phase.load() == Phase::kFailed) pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  if (!loader_done.load()) {
    if (!options.finish_load_before_exit) {
      // Stopped while still loading: nothing is in flight, and a load cannot be interrupted.
      ServerLog("stopped while loading");
      std::fflush(stderr);
      std::_Exit(0);
    }
    ServerLog("stopped while loading; letting every rank finish loading so that all stop together");
  }
  loader.join();
  if (s.owned_engine) s.owned_engine->Shutdown();
  ServerLog(exit_code.load() == 0 ? "stopped" : "exiting after an error");
  return exit_code.load();
}

}  // namespace g4
