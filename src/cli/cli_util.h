// Small helpers shared by the subcommands.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/kv_format.h"

namespace g4::cli {

// "2,105,2364" -> {2, 105, 2364}; rejects anything else with a message.
Result<std::vector<int>> ParseIdList(const std::string& text);
std::string JoinIds(const std::vector<int>& ids);
// Prints "g4 <command>: <message>" to stderr and returns exit code 1.
int Fail(const char* command, const Status& status);

// --kv-type (run, logits, bench, serve, inspect): the KV cache's element format, and its help.
inline constexpr const char* kKvTypeHelp =
    "KV cache format: f32 (exact), bf16 (half the memory), q8 (int8 blocks of 32 with a float "
    "scale, 0.28x the memory)";
// The format a validated --kv-type value names (f32 for anything else).
inline KvType KvTypeOf(const std::string& name) {
  KvType type = KvType::kF32;
  ParseKvType(name, &type);
  return type;
}

}  // namespace g4::cli
