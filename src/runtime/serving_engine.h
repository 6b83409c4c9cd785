// What a server needs from a loaded model, and nothing more: the scheduler to submit to, the
// tokenizer, the chat template's features, the few facts about the model that requests are
// checked against, a health check, and an orderly shutdown. The server (src/server) sees only
// this interface; the front end (g4 serve) implements it over whatever loads and keeps the model
// alive (one process, or a tensor-parallel rank group), and hands RunServer a factory for it.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"
#include "runtime/scheduler.h"

namespace g4 {

// Declared here so that runtime does not depend on the tokenizer; the server includes both.
class Tokenizer;
class ChatTemplate;

struct EngineInfo {
  int vocab = 0;
  int n_layers = 0;
  int max_position_embeddings = 0;
  std::vector<int> eos_token_ids;    // end a sequence (unless a request ignores eos)
  std::vector<int> suppress_tokens;  // never sampled
  GenerationDefaults generation;     // the checkpoint's generation_config
};

class ServingEngine {
 public:
  virtual ~ServingEngine() = default;

  virtual Scheduler& scheduler() = 0;
  virtual const EngineInfo& info() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  // The checkpoint's chat template (tokenizer/chat_template.h), parsed once at load.
  virtual const ChatTemplate& chat_template() const = 0;
  // Not OK once a mapped checkpoint file was replaced or rewritten on disk: serving on would read
  // a stale or vanishing mapping (one stat per shard; called per request).
  virtual Status CheckUnchanged() const = 0;
  // Stops the scheduler (cancels what is left), then whatever runs beside it (tensor-parallel
  // followers). Idempotent; implementations call it from their destructor too.
  virtual void Shutdown() = 0;
};

// Loads the model and starts a scheduler with these options. Called once, on the server's
// loader thread, while the HTTP server already answers /health with "loading".
using ServingEngineFactory =
    std::function<Result<std::unique_ptr<ServingEngine>>(const SchedulerOptions& options)>;

}  // namespace g4
