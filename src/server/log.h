// The server's log: one line per event on stderr ("g4 serve: ..."), whole lines even when HTTP
// threads, the engine thread and the loader write at once.
#pragma once

#include <string>

namespace g4 {

void ServerLog(const std::string& line);

}  // namespace g4
