// The HTTP transport under the routes (cpp-httplib): worker pool, limits and timeouts, the API-key
// check before routing, OpenAI-shaped error bodies for what httplib itself rejects (404, 413,
// exceptions), request bodies read against a whole-body deadline, and the socket helpers that let
// a waiting handler notice its client went away.
#pragma once

#include <httplib.h>

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/server.h"

namespace g4 {

void SendJson(httplib::Response& res, int status, const nlohmann::json& body);
void SendError(httplib::Response& res, const ApiError& error);

// The metrics label of a request path: one of the routes, or "other".
std::string RouteLabel(const std::string& path);
// "Authorization: Bearer KEY" check, in constant time.
bool BearerMatches(const std::string& header, const std::string& key);

// The socket of this request's connection, found by its address pair (cpp-httplib 0.11 does not
// expose it). -1 if not found.
int FindConnectionSocket(const httplib::Request& req);
// True once the peer has closed (or reset) the connection. Pipelined bytes count as alive.
bool PeerClosed(int fd);

// Worker threads, body size limit, keep-alive and socket timeouts, the API key (every route but
// the health checks), and error bodies for what httplib answers itself. `metrics` and `svr` must
// outlive the server's run.
void ConfigureTransport(httplib::Server& svr, const ServerOptions& options, Metrics& metrics);

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
// A POST handler that first reads the whole body (at most options.max_body_bytes, within
// options.body_timeout_seconds, else 413/408 and the connection closed), then calls `fn` with
// the complete request.
httplib::Server::HandlerWithContentReader WithBody(const ServerOptions& options, Metrics& metrics,
                                                   Handler fn);

}  // namespace g4
