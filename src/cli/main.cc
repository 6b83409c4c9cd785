// g4: one binary, a table of subcommands (see command.h).
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/command.h"

namespace g4::cli {

std::map<std::string, Command>& Commands() {
  static std::map<std::string, Command> commands;
  return commands;
}

}  // namespace g4::cli

static void PrintUsage() {
  std::printf("g4: Gemma-4 inference engine and OpenAI-compatible server\n\nusage: g4 <command> [options]\n\ncommands:\n");
  for (const auto& [name, cmd] : g4::cli::Commands())
    std::printf("  %-12s %s\n", name.c_str(), cmd.summary.c_str());
  std::printf("\nRun 'g4 <command> --help' for the options of one command.\n");
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    PrintUsage();
    return argc < 2 ? 2 : 0;
  }
  auto& commands = g4::cli::Commands();
  auto it = commands.find(argv[1]);
  if (it == commands.end()) {
    std::fprintf(stderr, "g4: unknown command '%s'\n\n", argv[1]);
    PrintUsage();
    return 2;
  }
  return it->second.run(argc - 1, argv + 1);
}
