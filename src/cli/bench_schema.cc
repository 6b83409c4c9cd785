// g4 bench --json-schema: what constrained decoding costs. The same prompt is decoded greedily
// without and with the output held to a JSON schema (or any JSON object), and with --spec also
// speculatively under the same constraint, alternately, --reps times; then the constrained output
// is replayed through a fresh constraint (a new request: the automaton and the mask cache cold)
// to time the masks alone, per token.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "base/stopwatch.h"
#include "cli/bench.h"
#include "cli/cli_util.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "grammar/vocabulary_trie.h"
#include "model/kv_cache.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"

namespace g4::cli {

Result<std::string> BenchSchemaGbnf(const std::string& arg) {
  if (arg == "json_object") return grammar::JsonObjectGbnf();
  std::ifstream in(arg, std::ios::binary);
  if (!in) return Status::Errorf("--json-schema: cannot read '", arg, "'");
  std::stringstream text;
  text << in.rdbuf();
  auto gbnf = grammar::JsonSchemaTextToGbnf(text.str());
  if (!gbnf.ok()) return Status::Errorf("--json-schema '", arg, "': ", gbnf.status().message());
  return gbnf;
}

Result<nlohmann::json> BenchSchema(const BenchFlags& f, Model& model, SpecSetup* spec,
                                   const std::vector<int>& ids) {
  const int V = model.plan().vocab;
  G4_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, LoadModelTokenizer(f.model_dir));
  G4_ASSIGN_OR_RETURN(grammar::Grammar parsed, grammar::ParseGbnf(f.json_schema_gbnf));
  const Stopwatch trie_timer;
  // The server's vocabulary trie, so the masks cost what they cost there.
  const auto trie = grammar::BuildVocabularyTrie(
      V, [&](int id) { return tok->InRange(id) ? tok->TokenBytes(id) : std::string(); },
      [&](int id) { return tok->IsSpecial(id); }, Gemma4StopTokenIds(*tok));
  const double trie_s = trie_timer.Seconds();

  const int ctx = std::max(1, f.contexts.front());
  // A speculative pass runs draft_max + 1 rows of one call and may reach that far past the end.
  const int draft_max = spec ? spec->options.draft_max : 0;
  KvCache cache(model.plan(), ctx + f.decode_tokens + draft_max + 2,
                spec ? std::max(f.chunk, draft_max + 1) : f.chunk, KvTypeOf(f.kv_type));
  const std::vector<int> prompt(ids.begin(), ids.begin() + ctx);
  GenerateOptions gen;
  gen.max_new_tokens = f.decode_tokens;
  gen.ignore_eos = true;
  gen.prefill_chunk = cache.max_chunk();

  // Decode tok/s after the first token; an output of one token (`{}` is one token) has no decode
  // steps to time, but is reported.
  auto tok_s = [](const GenerateResult& r) {
    return r.tokens.size() > 1 ? (r.tokens.size() - 1) / std::max(1e-9, r.decode_seconds) : 0.0;
  };
  // A fresh automaton per run, as a new request gets: its warm-up is part of the cost.
  auto constrained_run = [&](Drafter* drafter) -> Result<GenerateResult> {
    grammar::TokenConstraint constraint(trie, std::make_shared<grammar::Automaton>(parsed));
    GenerateOptions held = gen;
    held.constraint = &constraint;
    cache.Reset();
    if (!drafter) return Generate(model, cache, prompt, held);
    drafter->Reset();
    return GenerateSpeculative(model, cache, prompt, held, *drafter, spec->options);
  };
  // Plain, constrained and (with --spec) constrained speculative decode take turns, the order
  // reversed every other round, so a drifting machine favours none.
  std::vector<double> plain_tps, constrained_tps, spec_tps;
  auto best = [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
  };
  GenerateResult constrained_out, spec_out;
  bool spec_identical = true;
  for (int r = 0; r < f.reps; ++r) {
    for (int k = 0; k < 3; ++k) {
      const int which = r % 2 ? 2 - k : k;
      if (which == 0) {
        cache.Reset();
        G4_ASSIGN_OR_RETURN(GenerateResult plain, Generate(model, cache, prompt, gen));
        plain_tps.push_back(tok_s(plain));
      } else if (which == 1) {
        G4_ASSIGN_OR_RETURN(GenerateResult out, constrained_run(nullptr));
        if (constrained_tps.empty() || tok_s(out) > best(constrained_tps)) constrained_out = out;
        constrained_tps.push_back(tok_s(out));
      } else if (spec) {
        G4_ASSIGN_OR_RETURN(GenerateResult out, constrained_run(spec->drafter.get()));
        // Round 0 ran constrained decode first: greedy output must be its, token for token.
        spec_identical = spec_identical && out.tokens == constrained_out.tokens;
        if (spec_tps.empty() || tok_s(out) > best(spec_tps)) spec_out = out;
        spec_tps.push_back(tok_s(out));
      }
    }
  }
  const double plain_best = best(plain_tps), constrained_best = best(constrained_tps);

  // The masks alone: the constrained output replayed through a cold constraint.
  grammar::TokenConstraint replay(trie, std::make_shared<grammar::Automaton>(parsed));
  const Stopwatch mask_timer;
  size_t replayed = 0;
  for (int token : constrained_out.tokens) {
    replay.Mask();
    if (!replay.Accept(token)) break;
    ++replayed;
  }
  const double mask_ms = replayed ? mask_timer.Seconds() * 1e3 / replayed : 0.0;
  std::string text;
  for (int token : constrained_out.tokens)
    if (!trie->IsEnd(token)) text += trie->bytes(token);

  nlohmann::json j;
  j["json_schema"] = f.json_schema;
  j["context"] = ctx;
  j["trie_build_s"] = trie_s;
  j["plain_decode_tok_s"] = plain_best;
  j["plain_decode_tok_s_median"] = Median(plain_tps);
  j["constrained_decode_tok_s"] = constrained_best;
  j["constrained_decode_tok_s_median"] = Median(constrained_tps);
  j["constrained_tokens"] = constrained_out.tokens.size();
  j["constrained_finish_reason"] = constrained_out.finish_reason;
  j["slowdown"] = plain_best > 0 && constrained_best > 0 ? 1.0 - constrained_best / plain_best : 0.0;
  j["mask_ms_per_token"] = mask_ms;
  j["mask_share_of_plain_step"] = plain_best > 0 ? mask_ms / (1e3 / plain_best) : 0.0;
  j["output_is_complete"] = replay.IsComplete();
  j["output"] = text;
  if (spec) {
    const double spec_best = best(spec_tps);
    nlohmann::json s = SpecJson(spec_out);
    s["spec"] = f.spec.spec;
    s["draft_max"] = draft_max;
    s["decode_tok_s"] = spec_best;
    s["decode_tok_s_median"] = Median(spec_tps);
    s["speedup_vs_constrained"] = constrained_best > 0 ? spec_best / constrained_best : 0.0;
    s["speedup_vs_constrained_median"] =
        Median(constrained_tps) > 0 ? Median(spec_tps) / Median(constrained_tps) : 0.0;
    s["finish_reason"] = spec_out.finish_reason;
    s["greedy_output_identical"] = spec_identical;
    j["speculative"] = s;
  }
  return j;
}

void PrintSchemaTable(const nlohmann::json& j) {
  std::printf("  constrained decoding (%s, after %d tokens of context)\n",
              j["json_schema"].get<std::string>().c_str(), j["context"].get<int>());
  std::printf("    %-34s %10.2f tok/s\n", "plain decode", j["plain_decode_tok_s"].get<double>());
  std::printf("    %-34s %10.2f tok/s (%.1f%% slower; %zu tokens, %s)\n", "constrained decode",
              j["constrained_decode_tok_s"].get<double>(), 100 * j["slowdown"].get<double>(),
              j["constrained_tokens"].get<size_t>(), j["constrained_finish_reason"].get<std::string>().c_str());
  if (j.contains("speculative")) {
    const nlohmann::json& s = j["speculative"];
    const std::string label = "constrained speculative (" + s["spec"].get<std::string>() + ")";
    std::printf("    %-34s %10.2f tok/s (%.2fx constrained; %.0f%% of drafts kept, %.2f per pass)%s\n",
                label.c_str(),
                s["decode_tok_s"].get<double>(), s["speedup_vs_constrained"].get<double>(),
                100 * s["acceptance_rate"].get<double>(), s["tokens_per_target_pass"].get<double>(),
                s["greedy_output_identical"].get<bool>() ? "" : "  OUTPUT DIFFERS");
  }
  std::printf("    %-34s %10.3f ms (%.1f%% of a plain step)\n", "mask per token, cold",
              j["mask_ms_per_token"].get<double>(), 100 * j["mask_share_of_plain_step"].get<double>());
  std::printf("    %-34s %10.2f s\n", "vocabulary trie built in", j["trie_build_s"].get<double>());
}

}  // namespace g4::cli
