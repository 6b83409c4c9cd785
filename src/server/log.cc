#include "server/log.h"

#include <cstdio>
#include <mutex>

namespace g4 {

void ServerLog(const std::string& line) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "g4 serve: %s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace g4
