// Fuzzes the GBNF parser and the recogniser (src/grammar/): any bytes as a `grammar` request field
// must parse or give an error (never crash, hang or exhaust the stack); a grammar that parses is
// run over the bytes after the first NUL (or a fixed probe), with undo and copies checked against
// a fresh recogniser. Limits on the automaton stop grammars whose parse stacks multiply.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "grammar/gbnf_parser.h"
#include "grammar/recognizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string_view text = all.substr(0, nul);
  const std::string_view input = nul == std::string_view::npos ? std::string_view("{\"a\":[1,2]} abc") : all.substr(nul + 1);
  g4::grammar::GbnfLimits limits;
  limits.max_elements = 1 << 16;  // the fuzzer's memory, not the server's
  auto g = g4::grammar::ParseGbnf(text, limits);
  if (!g.ok()) {
    if (g.status().message().empty()) std::abort();
    return 0;
  }
  g4::grammar::AutomatonLimits automaton_limits;  // the fuzzer's time (30 s an input), not the server's
  automaton_limits.max_step_frames = 1 << 14;
  automaton_limits.max_nodes = 1 << 18;
  auto automaton = std::make_shared<g4::grammar::Automaton>(std::move(g).value(), automaton_limits);
  g4::grammar::Recognizer r(automaton);
  size_t accepted = 0;
  for (char c : input.substr(0, 256)) {
    if (!r.Accept(static_cast<uint8_t>(c))) break;
    ++accepted;
  }
  g4::grammar::Recognizer again(automaton);
  if (!again.AcceptAll(input.substr(0, accepted)) || again.state() != r.state()) std::abort();
  const bool complete = r.IsComplete();
  r.Undo(accepted);
  if (r.state() != automaton->start()) std::abort();
  if (again.IsComplete() != complete) std::abort();
  return 0;
}
