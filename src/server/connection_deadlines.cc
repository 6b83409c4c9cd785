#include "server/connection_deadlines.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

namespace g4 {

ConnectionDeadlines::ConnectionDeadlines(std::function<void(const std::string&)> on_expired)
    : on_expired_(std::move(on_expired)), watcher_([this] { Watch(); }) {}

ConnectionDeadlines::~ConnectionDeadlines() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  watcher_.join();
  for (auto& [id, e] : entries_) ::close(e.fd);
}

ConnectionDeadlines::Id ConnectionDeadlines::Add(int fd) {
  const int dup_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return static_cast<Id>(-1);
  std::lock_guard<std::mutex> lock(mutex_);
  const Id id = next_id_++;
  entries_[id].fd = dup_fd;
  return id;
}

void ConnectionDeadlines::Arm(Id id, Clock::time_point deadline, const std::string& phase) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.expired) return;
    it->second.armed = true;
    it->second.deadline = deadline;
    it->second.phase = phase;
  }
  changed_.notify_all();
}

void ConnectionDeadlines::Disarm(Id id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(id);
  if (it != entries_.end()) it->second.armed = false;
}

void ConnectionDeadlines::Remove(Id id) {
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    fd = it->second.fd;
    entries_.erase(it);
  }
  ::close(fd);
}

bool ConnectionDeadlines::Expired(Id id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.expired;
}

void ConnectionDeadlines::Watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    const auto now = Clock::now();
    auto next = Clock::time_point::max();
    std::vector<std::string> expired;
    for (auto& [id, e] : entries_) {
      if (!e.armed) continue;
      if (e.deadline <= now) {
        // The dup keeps the socket open, so this reaches the right connection; the owner's
        // blocked read or write fails and it closes its descriptor as usual.
        ::shutdown(e.fd, SHUT_RDWR);
        e.armed = false;
        e.expired = true;
        expired.push_back(e.phase);
      } else if (e.deadline < next) {
        next = e.deadline;
      }
    }
    if (!expired.empty() && on_expired_) {
      lock.unlock();
      for (const auto& phase : expired) on_expired_(phase);
      lock.lock();
      continue;  // entries may have changed meanwhile
    }
    if (next == Clock::time_point::max()) {
      changed_.wait(lock);
    } else {
      changed_.wait_until(lock, next);
    }
  }
}

}  // namespace g4
