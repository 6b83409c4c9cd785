// Deadlines on HTTP connections, enforced from one watcher thread by shutting the socket down.
//
// cpp-httplib 0.11's read timeout applies to each recv, so a client that sends its request
// headers one byte per second never trips it and holds an HTTP thread for as long as it likes
// (slowloris). The server arms a deadline when it starts waiting for a request's headers and
// disarms it once the request has been read; a connection still armed at its deadline is shut
// down (both directions), which fails httplib's blocked read, so its thread closes the connection
// and moves on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace g4 {

class ConnectionDeadlines {
 public:
  using Clock = std::chrono::steady_clock;
  using Id = uint64_t;

  // `on_expired(phase)` runs on the watcher thread after a connection was shut down.
  explicit ConnectionDeadlines(std::function<void(const std::string& phase)> on_expired = nullptr);
  ~ConnectionDeadlines();  // stops the watcher; closes what is still registered
  ConnectionDeadlines(const ConnectionDeadlines&) = delete;
  ConnectionDeadlines& operator=(const ConnectionDeadlines&) = delete;

  // Registers socket `fd` (unarmed). The watcher keeps its own dup of the descriptor, so a
  // shutdown can never reach a descriptor number that the owner has closed and the kernel has
  // reused for another connection. -1 if the descriptor cannot be duplicated (then never armed).
  Id Add(int fd);
  // Arms (or re-arms) the deadline; `phase` names what the connection was waiting for.
  void Arm(Id id, Clock::time_point deadline, const std::string& phase);
  void Disarm(Id id);
  // Unregisters and closes the dup. Call before or after the owner closes its descriptor.
  void Remove(Id id);
  // True once this connection was shut down for a missed deadline.
  bool Expired(Id id) const;

 private:
  struct Entry {
    int fd = -1;  // our dup
    bool armed = false, expired = false;
    Clock::time_point deadline;
    std::string phase;
  };
  void Watch();

  std::function<void(const std::string&)> on_expired_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<Id, Entry> entries_;
  Id next_id_ = 1;
  bool stop_ = false;
  std::thread watcher_;
};

}  // namespace g4
