// g4 serve: the OpenAI-compatible HTTP server (cpp-httplib) over the continuous-batching
// Scheduler. HTTP threads parse and validate requests, tokenize, enqueue and wait (or stream SSE);
// the engine thread does all model work. See docs/server.md for routes and fields.
//
// The server knows the model only through runtime/serving_engine.h: the front end (g4 serve)
// checks the model's config, resolves the context, and passes a factory that loads the engine.
#pragma once

#include <string>

#include "base/status.h"
#include "runtime/serving_engine.h"

namespace g4 {

struct ServerOptions {
  std::string model_dir;   // shown in the log; names the model when model_name is ""
  std::string model_name;  // "" -> the directory's name
  std::string host = "127.0.0.1";
  int port = 8080;
  int context = 0;  // tokens per slot, resolved by the front end against the model's maximum (>= 2)
  int parallel = 4;
  int max_queue = 64;
  int http_threads = 0;  // 0 -> parallel + max_queue + 16
  std::string api_key;
  double timeout_seconds = 600;  // per request, unless it asks for less
  double grace_seconds = 30;     // SIGTERM: time for in-flight requests to finish
  size_t max_body_bytes = 8 << 20;
  // Whole-body deadline: httplib's read timeout is per recv, so without it a client trickling
  // one byte per second holds an HTTP thread for as long as it likes (slowloris). 408 after it.
  double body_timeout_seconds = 30;
  int prefill_chunk = 64;
  int max_batch_rows = 256;
  bool prefix_reuse = true;
  // /v1/responses kept for previous_response_id and GET (least recently used dropped; 0: none).
  int stored_responses = 512;
  bool log_requests = true;
  // Other processes load together with this one (mpirun): a stop while loading lets the load
  // finish so that every rank can be told to stop, instead of exiting at once.
  bool finish_load_before_exit = false;
};

// The flags the server alone owns (--parallel, --port); the front end checks them before it
// reads the model, RunServer again.
Status CheckServerOptions(const ServerOptions& options);

// Listens, loads the engine with `load_engine` on a loader thread (answering "loading" until
// then), serves, and runs until SIGTERM/SIGINT (then drains) or a fatal error. Returns the
// process exit code.
int RunServer(const ServerOptions& options, const ServingEngineFactory& load_engine);

}  // namespace g4
