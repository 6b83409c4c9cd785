// Small helpers shared by the subcommands.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace g4::cli {

// "2,105,2364" -> {2, 105, 2364}; rejects anything else with a message.
Result<std::vector<int>> ParseIdList(const std::string& text);
std::string JoinIds(const std::vector<int>& ids);
// Prints "g4 <command>: <message>" to stderr and returns exit code 1.
int Fail(const char* command, const Status& status);

}  // namespace g4::cli
