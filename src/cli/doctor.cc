// g4 doctor: fast checks of a checkpoint, each a plain-language finding that names the cause.
// Every time the Inferentia2 port produced garbage (a field report of a hand port) the accelerator was
// innocent; the causes were a missing tokenizer, a mis-restored reload, the layer_scalar buffer
// and a version mismatch. All are cheaper to rule out here than to debug as "a device bug".
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "base/half.h"
#include "base/mapped_file.h"
#include "cli/cli_util.h"
#include "cli/command.h"
#include "io/pack.h"
#include "io/safetensors.h"
#include "model/arch/gemma4.h"
#include "model/architecture.h"
#include "model/tensor_table.h"
#include "model/forward.h"
#include "model/loader.h"
#include "model/random_prompt.h"
#include "reference/reference.h"
#include "runtime/generate.h"
#include "runtime/perplexity.h"
#include "runtime/sampler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace g4::cli {
namespace {

enum class Level { kOk, kWarn, kFail, kSkip };
const char* LevelName(Level l) {
  switch (l) {
    case Level::kOk: return "OK";
    case Level::kWarn: return "WARN";
    case Level::kFail: return "FAIL";
    case Level::kSkip: return "SKIP";
  }
  return "?";
}

struct Finding {
  Level level;
  std::string check;
  std::string message;
};

class Report {
 public:
  void Add(Level level, std::string check, std::string message) {
    findings_.push_back({level, std::move(check), std::move(message)});
    const Finding& f = findings_.back();
    std::printf("%-5s %-14s %s\n", LevelName(f.level), f.check.c_str(), f.message.c_str());
    std::fflush(stdout);
  }
  int Count(Level level) const {
    return static_cast<int>(std::count_if(findings_.begin(), findings_.end(), [&](const Finding& f) { return f.level == level; }));
  }
  const std::vector<Finding>& findings() const { return findings_; }

 private:
  std::vector<Finding> findings_;
};

std::string Gb(double bytes) { return Str(std::round(bytes / 1e7) / 100, " GB"); }

// /proc/meminfo fields in bytes (0 when absent).
std::map<std::string, double> ReadMeminfo() {
  std::map<std::string, double> out;
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (!key.empty() && key.back() == ':') key.pop_back();
    out[key] = kb * 1024;
  }
  return out;
}

// --- tokenizer ---------------------------------------------------------------------------------

void CheckTokenizer(const std::string& dir, const ModelPlan* plan, Report& r) {
  const std::string path = dir + "/tokenizer.json";
  if (!FileExists(path)) {
    r.Add(Level::kFail, "tokenizer", Str(path, " is missing. Without the checkpoint's tokenizer every prompt becomes "
                                               "garbage ids and the model 'faithfully' answers garbage (seed report "
                                               "§7); copy the tokenizer.json that came with the model"));
    return;
  }
  auto text = ReadFileToString(path);
  if (text.ok() && text->find_first_not_of(" \t\r\n") == std::string::npos) {
    r.Add(Level::kFail, "tokenizer", Str(path, " is empty (an interrupted download?); copy the tokenizer.json that "
                                               "came with the model"));
    return;
  }
  auto tok = Tokenizer::Load(path);
  if (!tok.ok()) {
    r.Add(Level::kFail, "tokenizer", Str("cannot be read: ", tok.status().message()));
    return;
  }
  Status check = CheckGemma4Tokenizer(**tok);
  if (!check.ok()) {
    r.Add(Level::kFail, "tokenizer", Str(path, ": ", check.message()));
    return;
  }
  const std::vector<int> hello = (*tok)->Encode("hello world");
  r.Add(Level::kOk, "tokenizer", Str("Gemma-4 tokenizer, ", (*tok)->vocab_size(), " ids; \"hello world\" -> [",
                                     JoinIds(hello), "]; <bos>=2 <eos>=1 <|turn>=105 <turn|>=106 as expected"));
  if (plan && (*tok)->vocab_size() > plan->vocab)
    r.Add(Level::kWarn, "tokenizer", Str("the tokenizer has ", (*tok)->vocab_size(), " ids but the model's vocabulary is ",
                                         plan->vocab, ": text prompts can produce ids the model has no row for (fine "
                                         "for a synthetic test checkpoint fed token ids, wrong for a real one)"));
}

// --- tensors -----------------------------------------------------------------------------------

std::string ListSome(const std::vector<std::string>& names, size_t n = 4) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < n; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > n) s += Str(" and ", names.size() - n, " more");
  return s;
}

// Whether element i is NaN or infinite.
bool NonFinite(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, t.data + i * 2, 2);
      return (h & 0x7F80) == 0x7F80;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, t.data + i * 2, 2);
      return (h & 0x7C00) == 0x7C00;
    }
    case DType::kF32: {
      float f;
      std::memcpy(&f, t.data + i * 4, 4);
      return !std::isfinite(f);
    }
    default:
      return false;
  }
}

// Returns the first non-finite element found in a sample of `t` (-1 if none): the whole tensor
// up to kWhole elements, else kBlocks evenly spaced runs of kBlock elements (first and last
// included), so a 10 GB checkpoint is sampled in well under a second.
int64_t FirstNonFinite(const TensorView& t, int64_t* sampled) {
  constexpr int64_t kWhole = 1 << 20, kBlocks = 64, kBlock = 4096;
  const int64_t n = t.numel();
  auto scan = [&](int64_t begin, int64_t end) -> int64_t {
    for (int64_t i = begin; i < end; ++i)
      if (NonFinite(t, i)) return i;
    return -1;
  };
  if (n <= kWhole) {
    *sampled += n;
    return scan(0, n);
  }
  for (int64_t b = 0; b < kBlocks; ++b) {
    const int64_t begin = (n - kBlock) * b / (kBlocks - 1);
    *sampled += kBlock;
    if (int64_t i = scan(begin, begin + kBlock); i >= 0) return i;
  }
  return -1;
}

// Returns false if the tensors are too broken for a forward pass.
bool CheckTensors(const std::string& dir, const ModelPlan& plan, Report& r) {
  auto store = TensorStore::OpenDir(dir);
  if (!store.ok()) {
    const std::string& m = store.status().message();
    const bool truncated = m.find("truncated") != std::string::npos || m.find("past the data section") != std::string::npos ||
                           m.find("exceeds the file size") != std::string::npos;
    r.Add(Level::kFail, "weights", truncated ? Str("a weight file is truncated (an interrupted download or copy): ", m,
                                                   "; download that shard again")
                                             : Str("cannot open the safetensors files: ", m));
    return false;
  }
  std::string prefix;
  for (const char* p : {"model.language_model.", "model.", ""})
    if ((*store)->Find(std::string(p) + "embed_tokens.weight")) {
      prefix = p;
      break;
    }
  if (!(*store)->Find(prefix + "embed_tokens.weight")) {
    r.Add(Level::kFail, "weights", "no embed_tokens.weight under model.language_model. or model.: not a Gemma-4 text checkpoint");
    return false;
  }
  // Every tensor the architecture's table lists for this plan (model/tensor_table.h).
  const std::vector<PlannedTensor> expected = PlanTensors(plan);
  std::vector<std::string> missing, wrong_shape, bad_dtype, missing_scalar;
  std::set<std::string> known;
  int64_t params = 0;
  for (const PlannedTensor& e : expected) {
    known.insert(prefix + e.name);
    const TensorView* t = (*store)->Find(prefix + e.name);
    const bool is_scalar = e.spec->kind == TensorKind::kScalar;
    if (!t) {
      if (e.used) (is_scalar ? missing_scalar : missing).push_back(prefix + e.name);
      continue;
    }
    params += t->numel();
    if (t->shape != e.shape)
      wrong_shape.push_back(Str(prefix, e.name, " is ", t->ShapeString(), ", config.json implies ", ShapeString(e.shape)));
    if (t->dtype != DType::kBF16 && t->dtype != DType::kF16 && t->dtype != DType::kF32)
      bad_dtype.push_back(Str(prefix, e.name, " (", DTypeName(t->dtype), ")"));
  }
  // Extra tensors in the text model (vision/audio towers are expected and ignored).
  std::vector<std::string> extra;
  for (const std::string& name : (*store)->Names())
    if (name.rfind(prefix, 0) == 0 && !known.count(name) && name.find("vision") == std::string::npos &&
        name.find("audio") == std::string::npos && (!prefix.empty() || name.find("layers.") == 0))
      extra.push_back(name);
  bool ok = true;
  if (!missing.empty()) {
    r.Add(Level::kFail, "weights", Str(missing.size(), " tensor(s) config.json requires are missing: ", ListSome(missing)));
    ok = false;
  }
  if (!wrong_shape.empty()) {
    r.Add(Level::kFail, "weights", Str(wrong_shape.size(), " tensor(s) have the wrong shape for this config (config.json "
                                       "and the weights disagree: a different model's config, or an edited tensor): ",
                                       ListSome(wrong_shape, 3)));
    ok = false;
  }
  if (!bad_dtype.empty()) {
    r.Add(Level::kFail, "weights", Str("non-float tensors: ", ListSome(bad_dtype)));
    ok = false;
  }
  if (ok)
    r.Add(Level::kOk, "weights", Str(expected.size(), " text tensors match the layer plan of config.json (prefix \"",
                                     prefix, "\", ", params, " parameters stored)"));
  if (!extra.empty())
    r.Add(Level::kWarn, "weights", Str(extra.size(), " text tensor(s) that config.json does not explain (ignored by g4; "
                                       "a config for a smaller model?): ", ListSome(extra)));

  // layer_scalar: a [1] buffer without ".weight"; param-only loaders drop it (seed report §4.6).
  if (!missing_scalar.empty()) {
    r.Add(Level::kFail, "layer_scalar", Str(missing_scalar.size(), " of ", plan.n_layers(), " layers have no layer_scalar (",
                                            ListSome(missing_scalar, 2), "). It is a buffer, not a parameter, so "
                                            "exports that keep only *.weight drop it; without it every layer "
                                            "over-scales and the output is garbage. Re-export with buffers"));
    ok = false;
  } else {
    int ones = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < plan.n_layers(); ++i) {
      const double v = (*store)->Find(prefix + LayerTensorName(i, "layer_scalar"))->ValueAt(0);
      ones += v == 1.0;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (ones == plan.n_layers())
      r.Add(Level::kWarn, "layer_scalar", Str("every layer_scalar is exactly 1.0, its default value; a trained checkpoint "
                                              "never has that (real values 0.005-0.92). The buffer was probably reset "
                                              "by a param-only save/restore: expect garbage output"));
    else
      r.Add(Level::kOk, "layer_scalar", Str("present on all ", plan.n_layers(), " layers, range [", lo, ", ", hi, "]"));
  }

  // NaN / Inf in a sample of every tensor (the towers included: a NaN anywhere means a bad file).
  std::vector<std::string> nonfinite;
  int64_t sampled = 0;
  int n_tensors = 0;
  for (const std::string& name : (*store)->Names()) {
    const TensorView* t = (*store)->Find(name);
    ++n_tensors;
    if (int64_t i = FirstNonFinite(*t, &sampled); i >= 0)
      nonfinite.push_back(Str(name, " (element ", i, " = ", t->ValueAt(i), ")"));
  }
  if (!nonfinite.empty()) {
    r.Add(Level::kFail, "nan/inf", Str(nonfinite.size(), " tensor(s) hold NaN or Inf: ", ListSome(nonfinite, 3),
                                       "; the weights are corrupt: download or convert them again"));
    ok = false;
  } else {
    r.Add(Level::kOk, "nan/inf", Str("no NaN/Inf in ", sampled, " sampled values of ", n_tensors, " tensors"));
  }
  return ok;
}

// --- chat template -----------------------------------------------------------------------------

void CheckChatTemplate(const std::string& dir, Report& r) {
  auto tmpl = ChatTemplate::Load(dir);
  if (!tmpl.ok()) {
    r.Add(Level::kFail, "chat template", tmpl.status().message());
    return;
  }
  const std::string& version = tmpl->version();
  if (tmpl->source() == ChatTemplateSource::kBuiltIn) {
    r.Add(Level::kWarn, "chat template",
          "none shipped (no chat_template.jinja, no tokenizer_config.json chat_template): g4 renders its built-in "
          "Gemma-4 format; if this model was trained on another, outputs differ");
  } else if (version == "gemma3") {
    r.Add(Level::kFail, "chat template", Str(tmpl->Describe(), ": a Gemma-3 template (<start_of_turn>), not Gemma-4's format"));
  } else if (version == "unknown/custom") {
    r.Add(Level::kWarn, "chat template", Str(tmpl->Describe(), ": not a known Gemma-4 version; g4 renders it as shipped"));
  } else {
    r.Add(Level::kOk, "chat template", Str(tmpl->Describe(), ", rendered as shipped"));
  }
}

// --- memory ------------------------------------------------------------------------------------

void CheckMemory(const ModelPlan& plan, WeightType quant, int ctx, Report& r) {
  if (plan.config.max_position_embeddings > 0 && ctx > plan.config.max_position_embeddings)
    r.Add(Level::kFail, "memory", Str("--ctx ", ctx, " exceeds the model's max_position_embeddings ",
                                      plan.config.max_position_embeddings));
  const ParameterCounts c = CountParameters(plan);
  const double per_param = quant == WeightType::kQ8 ? 34.0 / 32 : quant == WeightType::kQ4 ? 18.0 / 32 : 2.0;
  // Matrices in the asked format, the PLE table mapped as stored (bf16), unused shared K/V never loaded.
  int64_t unused = 0;
  for (const auto& l : plan.layers)
    if (!l.owns_kv()) unused += static_cast<int64_t>(l.kv_dim()) * plan.hidden * (l.k_eq_v ? 1 : 2) + l.head_dim;
  const double weights = (c.total - c.ple_table - unused) * per_param + c.ple_table * 2.0;
  double kv = 0;
  for (int owner : plan.kv_owners) {
    const LayerPlan& lp = plan.layers[owner];
    const int cap = lp.is_sliding() ? std::min(ctx, lp.window + 63) : ctx;
    kv += 2.0 * cap * lp.kv_dim() * sizeof(float);
  }
  const double activations = 64.0 * (plan.hidden * 8 + plan.max_mlp_width() * 2) * 4 + 2.0 * plan.vocab * 4;
  const double need = weights + kv + activations;
  auto mem = ReadMeminfo();
  const double available = mem["MemAvailable"], total = mem["MemTotal"];
  const std::string what = Str(c.total, " real parameters (", c.effective, " without the PLE table; plan from the real "
                               "count, not the \"effective\" headline): weights ", Gb(weights), " as ",
                               WeightTypeName(quant), " + KV cache ", Gb(kv), " at context ", ctx, " = ", Gb(need));
  if (need <= 0.9 * available)
    r.Add(Level::kOk, "memory", Str(what, "; fits in ", Gb(available), " available"));
  else if (need <= total)
    r.Add(Level::kWarn, "memory", Str(what, "; only ", Gb(available), " available now (", Gb(total),
                                      " total): other processes or the page cache must give way"));
  else
    r.Add(Level::kFail, "memory", Str(what, "; does not fit this machine's ", Gb(total), " of memory: use q8/q4, a "
                                      "smaller --ctx, or tensor parallelism across machines"));
}

// --- one forward against the reference -----------------------------------------------------------

void CheckForward(const std::string& dir, const ModelPlan& plan, WeightType quant, Report& r) {
  // The streaming float64 reference runs at any size: it reads the weights from the mapping, and
  // the 12-token prompt goes through in one pass over them (two: float64, then float32).
  auto ref = reference::ReferenceModel::Load(dir);
  if (!ref.ok()) {
    r.Add(Level::kFail, "forward", Str("the reference cannot load the checkpoint: ", ref.status().message()));
    return;
  }
  ModelOptions options;
  options.load.quant = quant;
  auto model = LoadModel(dir, options);
  if (!model.ok()) {
    r.Add(Level::kFail, "forward", Str("the engine cannot load the checkpoint: ", model.status().message()));
    return;
  }
  const std::vector<int> ids = RandomPromptIds(12, plan.vocab, 5);
  auto r64 = (*ref)->Logits<double>(ids);
  auto r32 = (*ref)->Logits<float>(ids);
  KvCache cache(plan, static_cast<int>(ids.size()), 16);
  Activations act;
  auto got = Prefill(**model, cache, ids, 16, true, act);
  if (!r64.ok() || !r32.ok() || !got.ok()) {
    r.Add(Level::kFail, "forward", "the forward pass failed: " +
                                       (!got.ok() ? got.status().message() : (!r64.ok() ? r64 : r32).status().message()));
    return;
  }
  ApplySoftcapInPlace(got->data(), static_cast<int>(got->size()), static_cast<float>(plan.softcap));
  double floor = 0, err = 0, kl = 0;
  bool finite = true;
  const int V = plan.vocab;
  for (size_t p = 0; p < ids.size(); ++p) {
    const auto& a = (*r64)[p];
    const float* b = got->data() + p * V;
    double ma = -INFINITY, mb = -INFINITY;
    for (int i = 0; i < V; ++i) {
      floor = std::max(floor, std::abs((*r32)[p][i] - a[i]));
      err = std::max(err, std::abs(b[i] - a[i]));
      finite = finite && std::isfinite(b[i]);
      ma = std::max(ma, a[i]);
      mb = std::max(mb, static_cast<double>(b[i]));
    }
    double sa = 0, sb = 0;
    for (int i = 0; i < V; ++i) sa += std::exp(a[i] - ma), sb += std::exp(b[i] - mb);
    for (int i = 0; i < V; ++i) {
      const double la = a[i] - ma - std::log(sa), lb = b[i] - mb - std::log(sb);
      kl += std::exp(la) * (la - lb);
    }
  }
  kl /= ids.size();
  const double tol = std::max(2e-3, 5 * floor);
  const std::string what = Str(ids.size(), "-token prompt, engine (", WeightTypeName(quant), ") vs float64 reference: max "
                               "|logit error| ", err, ", mean KL ", kl, " nats (float32 noise floor ", floor, ")");
  if (!finite)
    r.Add(Level::kFail, "forward", Str(what, ": the engine produced NaN/Inf"));
  else if (quant == WeightType::kBF16 && err > tol)
    r.Add(Level::kFail, "forward", Str(what, " > ", tol, ": the fast path disagrees with the reference on this checkpoint"));
  else if (quant != WeightType::kBF16 && kl > (quant == WeightType::kQ8 ? 0.12 : 2.5))
    r.Add(Level::kFail, "forward", Str(what, ": above the ", WeightTypeName(quant), " bound of docs/validate.md"));
  else
    r.Add(Level::kOk, "forward", what);
}

// --- perplexity inside the turn format ------------------------------------------------------------

// Plain English prose (written for this check), scored as the model's answer to "Continue the
// text." in its own chat template: what an instruction-tuned model is trained to do.
constexpr const char* kDoctorText =
    "Bread is one of the oldest prepared foods. Flour is mixed with water and a little salt, and "
    "yeast is added so that the dough rises. The dough is kneaded until it is smooth, left in a warm "
    "place for an hour or two, shaped into loaves and baked in a hot oven. When the bread is done, "
    "the crust is brown and the loaf sounds hollow when it is tapped on the bottom. Many families "
    "still bake their own bread at home, and every country has its own kinds of loaves.";

// Guessing uniformly is a perplexity of `vocab`: a model above it predicts worse than no model at
// all, which trained weights read through the right tokenizer and template never do (the KJV-trained
// default model reads this modern prose at ~11,800 of 262,144). An instruction-tuned Gemma-4 scores
// about 18 on prose inside its turns (field reports, issue 25): past 1B effective parameters a
// perplexity above 200 (10x that) is suspect as well.
void CheckChatPerplexity(const std::string& dir, const ModelPlan& plan, WeightType quant, Report& r) {
  auto tmpl = ChatTemplate::Load(dir);
  if (!tmpl.ok() || tmpl->source() == ChatTemplateSource::kBuiltIn) {
    r.Add(Level::kSkip, "perplexity", "no chat template shipped: the turn-format perplexity check needs the model's own");
    return;
  }
  auto tokenizer = LoadModelTokenizer(dir);
  if (!tokenizer.ok()) {
    r.Add(Level::kSkip, "perplexity", "not run: the tokenizer does not load");
    return;
  }
  ChatTemplateRequest request;
  request.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Continue the text."}}});
  auto prompt = tmpl->Render(request);
  if (!prompt.ok()) {
    r.Add(Level::kFail, "perplexity", Str("the chat template does not render a user turn: ", prompt.status().message()));
    return;
  }
  const std::vector<int> prefix = (*tokenizer)->Encode(*prompt), text = (*tokenizer)->Encode(kDoctorText);
  const int ctx = static_cast<int>(prefix.size() + text.size());
  auto windows = PlanPerplexityWindows(prefix, text, ctx, 0);
  ModelOptions options;
  options.load.quant = quant;
  auto model = windows.ok() ? LoadModel(dir, options) : Result<std::unique_ptr<Model>>(windows.status());
  if (!model.ok()) {
    r.Add(Level::kFail, "perplexity", Str("not run: ", model.status().message()));
    return;
  }
  PerplexityAccumulator acc;
  std::vector<double> lp;
  const Status scored = ScorePerplexityWindows(**model, *windows, 64, [&](const ScoredRow& row) {
    LogSoftmax(row.logits, plan.vocab, lp);
    acc.Add(lp[row.target]);
    return OkStatus();
  });
  if (!scored.ok()) {
    r.Add(Level::kFail, "perplexity", Str("the forward pass failed: ", scored.message()));
    return;
  }
  const double ppl = acc.Perplexity();
  const double params = static_cast<double>(CountParameters(plan).effective);
  const std::string what = Str("perplexity ", std::round(ppl * 10) / 10, " on ", acc.count(),
                               " tokens of plain English as the model's turn (", WeightTypeName(quant), ")");
  if (!std::isfinite(ppl) || ppl > plan.vocab)
    r.Add(Level::kFail, "perplexity", Str(what, ": worse than guessing uniformly among all ", plan.vocab, " tokens. The "
                                          "model does not read this text as language: check the tokenizer, the chat "
                                          "template, the weights and the --quant format"));
  else if (params >= 1e9 && ppl > 200)
    r.Add(Level::kWarn, "perplexity", Str(what, ": far above the ~18 instruction-tuned Gemma-4 models score on such text "
                                          "inside their turns; suspect the template, tokenizer or format"));
  else
    r.Add(Level::kOk, "perplexity", what);
}

int RunDoctor(int argc, char** argv) {
  CLI::App app{"Check a checkpoint in seconds: tokenizer, config vs tensors, layer_scalar, NaN/Inf, chat template, "
               "memory, one forward against the reference",
               "g4 doctor"};
  std::string model_dir = DefaultModelPath(), quant_text = "bf16";
  int ctx = 8192;
  bool no_perplexity = false;
  app.add_option("--model", model_dir, "model directory (Hugging Face layout) or packed artifact");
  app.add_flag("--no-perplexity", no_perplexity, "skip the perplexity check (one ~130-token prefill: seconds on "
               "small models, a minute or more for a full-size bf16 12B on few cores)");
  app.add_option("--ctx", ctx, "context length to plan memory for");
  app.add_option("--quant", quant_text, "weight format to plan for: bf16, q8, q4")->check(CLI::IsMember({"bf16", "q8", "q4"}));
  CLI11_PARSE(app, argc, argv);
  WeightType quant;
  ParseWeightType(quant_text, &quant);
  std::printf("g4 doctor: %s\n", model_dir.c_str());
  Report r;

  if (IsPackFile(model_dir)) {
    // An artifact: its checksums and plan check are the diagnosis (the loader runs them all). A
    // `g4 pack --tp N` artifact is loaded rank by rank, as `g4 run --tp N` would.
    int packed_tp = 1;
    LmHeadPlacement lm_head = LmHeadPlacement::kSplitVocab;
    if (auto pack = PackFile::Open(model_dir); pack.ok()) {
      packed_tp = std::max(1, MetaInt((*pack)->meta(), "tp", 1));
      if (MetaString((*pack)->meta(), "lm_head") == "rank0")
        lm_head = LmHeadPlacement::kRank0;
    }
    Status loaded;
    for (int rank = 0; rank < packed_tp && loaded.ok(); ++rank)
      loaded = LoadModel(model_dir, {.rank = rank, .tp = packed_tp, .lm_head = lm_head}).status();
    if (!loaded.ok())
      r.Add(Level::kFail, "artifact", loaded.message());
    else
      r.Add(Level::kOk, "artifact",
            Str("format version, size, every section checksum and the stored layer plan check out",
                packed_tp > 1 ? Str(" for each of its ", packed_tp, " ranks (run it with --tp ",
                                    packed_tp, ")")
                              : ""));
    auto tok = LoadModelTokenizer(model_dir);
    r.Add(tok.ok() ? Level::kOk : Level::kFail, "tokenizer", tok.ok() ? "the artifact's Gemma-4 tokenizer loads and passes "
                                                                        "its sanity checks" : tok.status().message());
  } else if (!FileExists(model_dir)) {
    r.Add(Level::kFail, "model", Str(model_dir, " does not exist"));
  } else {
    auto config = LoadModelConfig(model_dir);
    Result<ModelPlan> plan = Status::Error("no config");
    if (!config.ok()) {
      r.Add(Level::kFail, "config.json", config.status().message());
    } else {
      plan = PlanFromConfig(*config);
      if (!plan.ok())
        r.Add(Level::kFail, "config.json", plan.status().message());
      else
        r.Add(Level::kOk, "config.json", Str(config->model_type, " (", config->text_model_type, "): ", plan->n_layers(),
                                             " layers, hidden ", plan->hidden, ", vocab ", plan->vocab, ", ",
                                             plan->kv_owners.size(), " KV-owning layers"));
    }
    CheckTokenizer(model_dir, plan.ok() ? &*plan : nullptr, r);
    bool tensors_ok = false;
    if (plan.ok()) tensors_ok = CheckTensors(model_dir, *plan, r);
    CheckChatTemplate(model_dir, r);
    if (plan.ok()) CheckMemory(*plan, quant, ctx, r);
    if (plan.ok() && tensors_ok)
      CheckForward(model_dir, *plan, quant, r);
    else
      r.Add(Level::kSkip, "forward", "not run: fix the FAIL findings above first");
    if (no_perplexity)
      r.Add(Level::kSkip, "perplexity", "skipped (--no-perplexity)");
    else if (plan.ok() && tensors_ok)
      CheckChatPerplexity(model_dir, *plan, quant, r);
  }
  const int fails = r.Count(Level::kFail), warns = r.Count(Level::kWarn);
  std::printf("summary: %d FAIL, %d WARN, %d OK\n", fails, warns, r.Count(Level::kOk));
  return fails > 0 ? 1 : 0;
}

}  // namespace

G4_COMMAND("doctor", "check a checkpoint: tokenizer, tensors, layer_scalar, NaN/Inf, template, memory, one forward",
           RunDoctor);

}  // namespace g4::cli
