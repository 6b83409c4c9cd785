#include "server/http_transport.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>

#include "base/status.h"

namespace g4 {

using nlohmann::json;

void SendJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(DumpJson(body), "application/json");
}

void SendError(httplib::Response& res, const ApiError& e) { SendJson(res, e.status, e.ToJson()); }

std::string RouteLabel(const std::string& path) {
  static const char* kRoutes[] = {"/v1/chat/completions", "/v1/completions", "/generate", "/v1/models",
                                  "/health", "/v1/health", "/metrics", "/tokenize", "/detokenize",
                                  "/v1/responses"};
  for (const char* r : kRoutes)
    if (path == r) return r;
  return "other";
}

bool BearerMatches(const std::string& header, const std::string& key) {
  const std::string want = "Bearer " + key;
  if (header.size() != want.size()) return false;
  unsigned char diff = 0;  // constant time: do not leak the key through timing
  for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned char>(header[i] ^ want[i]);
  return diff == 0;
}

int FindConnectionSocket(const httplib::Request& req) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* entry = ::readdir(dir)) {
    const int fd = std::atoi(entry->d_name);
    if (fd <= 2) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof local, peer_len = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
    auto port_of = [](const sockaddr_storage& a) -> int {
      if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
      if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
      return -1;
    };
    if (port_of(local) == req.local_port && port_of(peer) == req.remote_port) {
      found = fd;
      break;
    }
  }
  ::closedir(dir);
  return found;
}

bool PeerClosed(int fd) {
  if (fd < 0) return false;
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;
  if (n == 0) return true;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

void ConfigureTransport(httplib::Server& svr, const ServerOptions& options, Metrics& metrics) {
  const int http_threads = options.http_threads > 0 ? options.http_threads
                                                    : std::max(32, options.parallel + options.max_queue + 16);
  svr.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
  svr.set_payload_max_length(options.max_body_bytes);
  svr.set_keep_alive_timeout(5);
  svr.set_read_timeout(30);
  svr.set_write_timeout(30);

  const std::string api_key = options.api_key;
  Metrics* m = &metrics;
  svr.set_pre_routing_handler([api_key, m](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/health" || req.path == "/v1/health" || api_key.empty())
      return httplib::Server::HandlerResponse::Unhandled;
    if (BearerMatches(req.get_header_value("Authorization"), api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    m->CountRequest(RouteLabel(req.path), 401);
    m->CountError("unauthorized");
    SendError(res, MakeApiError(401, "missing or wrong API key (send 'Authorization: Bearer <key>')",
                                "invalid_request_error", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  const size_t max_body = options.max_body_bytes;
  svr.set_error_handler(httplib::Server::HandlerWithResponse([max_body, m](const httplib::Request& req,
                                                                           httplib::Response& res) {
    if (!res.body.empty() || res.status == 499) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      e.message = Str("unknown route ", req.method, " ", req.path);
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message = Str("the request body is larger than ", max_body, " bytes");
      e.code = "payload_too_large";
    } else {
      e.message = Str("HTTP ", res.status);
    }
    m->CountRequest(RouteLabel(req.path), res.status);
    m->CountError(res.status == 404 ? "not_found" : res.status == 413 ? "payload_too_large" : "http");
    SendError(res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([m](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    m->CountError("internal");
    SendError(res, MakeApiError(500, "internal error", "server_error"));
  });
}

namespace {

// Answers a body that could not be read (too large, too late, broken) and closes the connection:
// the unread rest of the body must not be parsed as the next request, and a slow client must not
// keep the thread. httplib 0.11 keeps a keep-alive connection open unless the request itself said
// "Connection: close", so the answer is written to the socket here and the socket shut down;
// httplib's own write then fails and it closes.
void RefuseBody(const ServerOptions& options, Metrics& metrics, const httplib::Request& req,
                httplib::Response& res, bool late) {
  // httplib sets 413 when the body is over --max-body; otherwise late, or a broken read.
  const bool too_large = res.status == 413;
  const int status = too_large ? 413 : late ? 408 : 400;
  metrics.CountRequest(RouteLabel(req.path), status);
  metrics.CountError(too_large ? "payload_too_large" : late ? "body_timeout" : "body_read");
  res.set_header("Connection", "close");
  SendError(res, MakeApiError(status,
                              too_large ? Str("the request body is larger than ", options.max_body_bytes, " bytes")
                              : late    ? Str("the request body did not arrive within ",
                                              options.body_timeout_seconds, " s")
                                        : "the request body could not be read",
                              "invalid_request_error",
                              too_large ? "payload_too_large" : late ? "request_timeout" : ""));
  if (const int fd = FindConnectionSocket(req); fd >= 0) {
    const std::string reply =
        Str("HTTP/1.1 ", status,
            status == 408   ? " Request Timeout"
            : status == 413 ? " Payload Too Large"
                            : " Bad Request",
            "\r\nContent-Type: application/json\r\nContent-Length: ", res.body.size(),
            "\r\nConnection: close\r\n\r\n", res.body);
    (void)!::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_RDWR);
  }
}

}  // namespace

httplib::Server::HandlerWithContentReader WithBody(const ServerOptions& options, Metrics& metrics,
                                                   Handler fn) {
  using Clock = std::chrono::steady_clock;
  Metrics* m = &metrics;
  return [options, m, fn](const httplib::Request& req, httplib::Response& res,
                          const httplib::ContentReader& read) {
    // httplib's read timeout is per recv; this deadline is for the whole body (slowloris).
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(options.body_timeout_seconds));
    std::string body;
    bool late = false;
    const bool complete = read([&](const char* data, size_t n) {
      body.append(data, n);
      late = Clock::now() > deadline;
      return !late;
    });
    if (!complete) return RefuseBody(options, *m, req, res, late);
    httplib::Request full = req;
    full.body = std::move(body);
    fn(full, res);
  };
}

}  // namespace g4
