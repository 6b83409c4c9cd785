// Constrained decoding: the cost per generated token of the grammar's token mask (and advancing
// the recogniser), over the real 262,144-token vocabulary, for several schema shapes. Each
// iteration replays one valid output (the tokenizer's encoding of a fixed JSON text) through a
// fresh constraint: a mask per token, then accepting the token, as the sampler does.
//   Cold: a fresh automaton per output (a new request: every first mask walks the trie).
//   Warm: the automaton's transitions kept, the mask cache fresh (a repeated schema's shape).
// The trie is built once (as the server does per tokenizer). G4_ASSETS as for the tests.
#include <benchmark/benchmark.h>

#include <memory>

#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "testing/paths.h"
#include "tokenizer/tokenizer.h"

namespace g4 {
namespace {

struct Shape {
  const char* name;
  const char* schema;  // "" : json_object
  const char* output;
};

const Shape kShapes[] = {
    {"flat_object",
     R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
        "email":{"type":"string","format":"email"},"active":{"type":"boolean"}},"required":["name","age","email","active"],
        "additionalProperties":false})",
     R"({"name":"Ada Lovelace","age":36,"email":"ada@analytical.org","active":true})"},
    {"array_of_objects",
     R"({"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{
        "sku":{"type":"string","maxLength":12},"qty":{"type":"integer"},"price":{"type":"number"}},
        "required":["sku","qty","price"],"additionalProperties":false}}},"required":["items"],"additionalProperties":false})",
     R"({"items":[{"sku":"A-100","qty":2,"price":9.99},{"sku":"B-220","qty":1,"price":120.5},{"sku":"C-7","qty":12,"price":0.25}]})"},
    {"enums_and_dates",
     R"({"type":"object","properties":{"status":{"enum":["pending","shipped","delivered","cancelled"]},
        "when":{"type":"string","format":"date-time"},"id":{"type":"string","format":"uuid"}},
        "required":["status","when","id"],"additionalProperties":false})",
     R"({"status":"shipped","when":"2024-05-17T09:30:00Z","id":"123e4567-e89b-12d3-a456-426614174000"})"},
    {"long_text",
     R"({"type":"object","properties":{"summary":{"type":"string"}},"required":["summary"],"additionalProperties":false})",
     R"({"summary":"The quick brown fox jumps over the lazy dog. Structured outputs keep the model inside the schema, token by token, while it writes free text in a string."})"},
    {"json_object", "",
     R"({"title":"Report","sections":[{"heading":"Intro","words":120},{"heading":"Method","words":340}],"draft":false})"},
};

struct Setup {
  std::unique_ptr<Tokenizer> tok;
  std::shared_ptr<const grammar::TokenTrie> trie;
};

const Setup& Shared() {
  static const Setup setup = [] {
    Setup s;
    auto tok = Tokenizer::Load(AssetsDir() + "/tokenizer/gemma4.json");
    if (!tok.ok()) return s;
    s.tok = std::move(tok).value();
    const int vocab = s.tok->vocab_size();
    std::vector<std::string> bytes(vocab);
    std::vector<char> eligible(vocab, 0);
    for (int id = 0; id < vocab; ++id) {
      bytes[id] = s.tok->TokenBytes(id);
      eligible[id] = s.tok->InRange(id) && !s.tok->IsSpecial(id);
    }
    s.trie = std::make_shared<grammar::TokenTrie>(bytes, eligible, std::vector<int>{s.tok->eos_id()});
    return s;
  }();
  return setup;
}

grammar::Grammar ShapeGrammar(const Shape& shape) {
  const std::string gbnf = shape.schema[0] ? *grammar::JsonSchemaTextToGbnf(shape.schema) : grammar::JsonObjectGbnf();
  return *grammar::ParseGbnf(gbnf);
}

void BM_MaskPerToken(benchmark::State& state, const Shape& shape, bool warm) {
  const Setup& s = Shared();
  if (!s.tok) return state.SkipWithError("no tokenizer (assets/tokenizer/gemma4.json)");
  const std::vector<int> tokens = s.tok->Encode(shape.output);
  const grammar::Grammar g = ShapeGrammar(shape);
  auto shared = std::make_shared<grammar::Automaton>(g);
  for (auto _ : state) {
    auto automaton = warm ? shared : std::make_shared<grammar::Automaton>(g);
    grammar::TokenConstraint c(s.trie, automaton);
    for (int t : tokens) {
      benchmark::DoNotOptimize(c.Mask());
      if (!c.Accept(t)) return state.SkipWithError("the output does not follow its own schema");
    }
    benchmark::DoNotOptimize(c.Mask());
    if (!c.IsComplete()) return state.SkipWithError("the output is not complete");
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(tokens.size() + 1));
  state.counters["tokens"] = static_cast<double>(tokens.size() + 1);
}

void BM_TrieBuild(benchmark::State& state) {
  const Setup& s = Shared();
  if (!s.tok) return state.SkipWithError("no tokenizer");
  const int vocab = s.tok->vocab_size();
  std::vector<std::string> bytes(vocab);
  for (int id = 0; id < vocab; ++id) bytes[id] = s.tok->TokenBytes(id);
  for (auto _ : state) benchmark::DoNotOptimize(grammar::TokenTrie(bytes, {}, {}));
}

int Register() {
  for (const Shape& shape : kShapes) {
    benchmark::RegisterBenchmark((std::string("BM_MaskPerToken/cold/") + shape.name).c_str(),
                                 [&shape](benchmark::State& st) { BM_MaskPerToken(st, shape, false); })
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("BM_MaskPerToken/warm/") + shape.name).c_str(),
                                 [&shape](benchmark::State& st) { BM_MaskPerToken(st, shape, true); })
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("BM_TrieBuild", BM_TrieBuild)->Unit(benchmark::kMillisecond)->Iterations(3);
  return 0;
}
const int registered = Register();

}  // namespace
}  // namespace g4
