// The server's routes: generation (/v1/chat/completions, /v1/completions, /generate),
// /tokenize, /detokenize, /v1/models, /health, /metrics. See docs/server.md.
#pragma once

#include <httplib.h>

#include "server/server_state.h"

namespace g4 {

// Registers every route on `svr`; `s` must outlive it.
void RegisterRoutes(httplib::Server& svr, ServerState& s);

}  // namespace g4
