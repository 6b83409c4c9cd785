// Subcommand table. Each src/cli/<name>.cc registers itself with a static G4_COMMAND, so adding a
// subcommand touches one file. A command gets the arguments after its name and returns the
// process exit code.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cli/default_paths.h"  // DefaultModelPath(), the --model every command falls back to

namespace g4::cli {

using CommandFn = std::function<int(int argc, char** argv)>;

struct Command {
  std::string summary;
  CommandFn run;
};

std::map<std::string, Command>& Commands();

struct CommandRegistrar {
  CommandRegistrar(const std::string& name, const std::string& summary, CommandFn fn) {
    Commands()[name] = Command{summary, std::move(fn)};
  }
};

}  // namespace g4::cli

#define G4_COMMAND(name, summary, fn) \
  static ::g4::cli::CommandRegistrar g4_command_registrar_##fn(name, summary, fn)
