#include "tokenizer/tokenizer_json.h"

#include <simdjson.h>

#include <algorithm>

namespace g4 {
namespace {

using simdjson::dom::element;

constexpr int64_t kMaxId = 1 << 26;

// Reads {"String": "x"} (a literal pattern). Regex patterns are not supported.
Result<std::string> LiteralPattern(element pattern, const std::string& where) {
  std::string_view literal;
  if (pattern["String"].get(literal) != simdjson::SUCCESS)
    return Status::Errorf(where, ": only literal {\"String\": ...} patterns are supported");
  return std::string(literal);
}

// Reads an optional field: leaves *out alone when it is missing or of another type.
template <class Json, class T>
bool TryGet(Json json, T* out) {
  return json.get(*out) == simdjson::SUCCESS;
}

// The same through a temporary, for fields whose default must survive a failed read.
template <class Json, class T>
void ReadIfPresent(Json json, T* out) {
  T value;
  if (json.get(value) == simdjson::SUCCESS) *out = value;
}

bool IsNullOrMissing(simdjson::simdjson_result<element> value) {
  return value.error() != simdjson::SUCCESS || value.value_unsafe().is_null();
}

// A section that is one step or {"type": "Sequence", `list_key`: [steps]}.
Result<std::vector<element>> Steps(element section, const char* list_key, const char* what) {
  std::string_view type;
  TryGet(section["type"], &type);
  std::vector<element> steps;
  if (type != "Sequence") {
    steps.push_back(section);
    return steps;
  }
  simdjson::dom::array list;
  if (section[list_key].get(list) != simdjson::SUCCESS)
    return Status::Errorf(what, ": Sequence without ", list_key);
  for (element step : list) steps.push_back(step);
  return steps;
}

// model.vocab: {"piece": id, ...}; ids may be sparse.
Status ParseVocab(simdjson::dom::object vocab, TokenizerJson* out) {
  if (vocab.size() == 0) return Status::Error("model.vocab is empty");
  out->model.vocab.reserve(vocab.size());
  for (auto field : vocab) {
    int64_t id;
    if (field.value.get(id) != simdjson::SUCCESS || id < 0 || id > kMaxId)
      return Status::Errorf("model.vocab[\"", field.key, "\"] is not a valid id");
    out->model.vocab.emplace_back(field.key, static_cast<int32_t>(id));
    out->max_id = std::max(out->max_id, static_cast<int32_t>(id));
  }
  return OkStatus();
}

// model.merges: [["a", "b"], ...] or ["a b", ...]; rank = position.
Status ParseMerges(simdjson::dom::array merges, TokenizerJson* out) {
  auto& pairs = out->model.merges;
  pairs.reserve(merges.size());
  for (element merge : merges) {
    std::string_view left, right;
    size_t rank = pairs.size();
    if (merge.is_array()) {
      simdjson::dom::array pair = merge.get_array().value_unsafe();
      if (pair.size() != 2 || pair.at(0).get(left) != simdjson::SUCCESS ||
          pair.at(1).get(right) != simdjson::SUCCESS)
        return Status::Errorf("model.merges[", rank, "] is not a pair of strings");
    } else {
      std::string_view both;
      if (merge.get(both) != simdjson::SUCCESS)
        return Status::Errorf("model.merges[", rank, "] is neither a pair nor a string");
      size_t space = both.find(' ');
      if (space == std::string_view::npos || both.find(' ', space + 1) != std::string_view::npos)
        return Status::Errorf("model.merges[", rank, "] \"", both, "\" is not two pieces");
      left = both.substr(0, space);
      right = both.substr(space + 1);
    }
    pairs.emplace_back(left, right);
  }
  return OkStatus();
}

// model: BPE only, deterministic (no dropout), no subword affixes.
Status ParseModel(element root, TokenizerJson* out) {
  element model;
  if (root["model"].get(model) != simdjson::SUCCESS || !model.is_object())
    return Status::Error("no \"model\" object");
  std::string_view type;
  if (model["type"].get(type) != simdjson::SUCCESS)
    return Status::Error("model.type is missing (g4 reads BPE tokenizers only)");
  if (type != "BPE")
    return Status::Errorf("model.type is \"", type, "\"; g4 reads BPE tokenizers only");
  simdjson::dom::object vocab;
  if (model["vocab"].get(vocab) != simdjson::SUCCESS)
    return Status::Error("model.vocab is missing");
  if (vocab.size() == 0) return Status::Error("model.vocab is empty");
  simdjson::dom::array merges;
  if (model["merges"].get(merges) != simdjson::SUCCESS)
    return Status::Error("model.merges is missing");

  ReadIfPresent(model["byte_fallback"], &out->model.byte_fallback);
  ReadIfPresent(model["fuse_unk"], &out->model.fuse_unk);
  ReadIfPresent(model["ignore_merges"], &out->model.ignore_merges);
  if (!IsNullOrMissing(model["dropout"])) {
    double dropout = 0;
    if (model["dropout"].get(dropout) != simdjson::SUCCESS || dropout != 0.0)
      return Status::Error("model.dropout is set; g4 encodes deterministically only");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    std::string_view affix;
    if (model[key].get(affix) == simdjson::SUCCESS && !affix.empty())
      return Status::Errorf("model.", key, " is \"", affix, "\"; not supported");
  }
  std::string_view unk_token;
  if (model["unk_token"].get(unk_token) == simdjson::SUCCESS) out->model.unk_token = unk_token;
  G4_RETURN_IF_ERROR(ParseVocab(vocab, out));
  return ParseMerges(merges, out);
}

// added_tokens: matched before BPE. lstrip/rstrip/single_word change matching in ways g4 does
// not implement, so they are refused rather than tokenized differently from HF.
Status ParseAddedTokens(element root, TokenizerJson* out) {
  simdjson::dom::array added_tokens;
  if (root["added_tokens"].get(added_tokens) != simdjson::SUCCESS) return OkStatus();
  for (element token : added_tokens) {
    int64_t id;
    if (token["id"].get(id) != simdjson::SUCCESS || id < 0 || id > kMaxId)
      return Status::Error("added_tokens: an entry has no valid id");
    out->max_id = std::max(out->max_id, static_cast<int32_t>(id));
  }
  for (element token : added_tokens) {
    TokenizerJson::AddedToken added;
    int64_t id = 0;
    TryGet(token["id"], &id);
    added.id = static_cast<int32_t>(id);
    if (token["content"].get(added.content) != simdjson::SUCCESS || added.content.empty())
      return Status::Errorf("added_tokens: id ", id, " has no content");
    for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
      bool value = false;
      if (token[flag].get(value) == simdjson::SUCCESS && value)
        return Status::Errorf("added_tokens: \"", added.content, "\" sets ", flag,
                              ", which g4 does not support");
    }
    TryGet(token["special"], &added.special);
    TryGet(token["normalized"], &added.normalized);
    out->added_tokens.push_back(added);
  }
  return OkStatus();
}

// normalizer: literal Replace steps, possibly in a Sequence.
Status ParseNormalizer(element root, TokenizerJson* out) {
  if (IsNullOrMissing(root["normalizer"])) return OkStatus();
  G4_ASSIGN_OR_RETURN(std::vector<element> steps,
                      Steps(root["normalizer"].value_unsafe(), "normalizers", "normalizer"));
  for (element step : steps) {
    std::string_view type;
    TryGet(step["type"], &type);
    if (type != "Replace")
      return Status::Errorf("normalizer \"", type,
                            "\" is not supported (g4 supports literal Replace)");
    element pattern;
    std::string_view content;
    if (step["pattern"].get(pattern) != simdjson::SUCCESS ||
        step["content"].get(content) != simdjson::SUCCESS)
      return Status::Error("normalizer: Replace without pattern/content");
    G4_ASSIGN_OR_RETURN(std::string from, LiteralPattern(pattern, "normalizer Replace"));
    if (from.empty()) return Status::Error("normalizer: Replace with an empty pattern");
    out->normalizer_replacements.emplace_back(std::move(from), std::string(content));
  }
  return OkStatus();
}

// pre_tokenizer: none, or a literal Split merged with the previous piece (Gemma's).
Status ParsePreTokenizer(element root, TokenizerJson* out) {
  if (IsNullOrMissing(root["pre_tokenizer"])) return OkStatus();
  element pre = root["pre_tokenizer"].value_unsafe();
  std::string_view type, behavior;
  TryGet(pre["type"], &type);
  TryGet(pre["behavior"], &behavior);
  bool invert = false;
  TryGet(pre["invert"], &invert);
  element pattern;
  if (type != "Split" || behavior != "MergedWithPrevious" || invert ||
      pre["pattern"].get(pattern) != simdjson::SUCCESS)
    return Status::Errorf("pre_tokenizer \"", type, "\" (", behavior,
                          ") is not supported (g4 supports a literal Split, MergedWithPrevious)");
  G4_ASSIGN_OR_RETURN(out->split_after, LiteralPattern(pattern, "pre_tokenizer Split"));
  return OkStatus();
}

// decoder: Replace steps, then ByteFallback, then Fuse (Gemma's). Anything else would decode
// differently, so it is an error, and so is no decoder at all.
Status ParseDecoder(element root, TokenizerJson* out) {
  if (IsNullOrMissing(root["decoder"]))
    return Status::Error("no decoder (g4 expects Gemma's Replace/ByteFallback/Fuse decoder)");
  G4_ASSIGN_OR_RETURN(std::vector<element> steps,
                      Steps(root["decoder"].value_unsafe(), "decoders", "decoder"));
  int stage = 0;  // 0: Replace*, 1: after ByteFallback, 2: after Fuse
  for (element step : steps) {
    std::string_view type;
    TryGet(step["type"], &type);
    if (type == "Replace" && stage == 0) {
      element pattern;
      std::string_view content;
      if (step["pattern"].get(pattern) != simdjson::SUCCESS ||
          step["content"].get(content) != simdjson::SUCCESS)
        return Status::Error("decoder: Replace without pattern/content");
      G4_ASSIGN_OR_RETURN(std::string from, LiteralPattern(pattern, "decoder Replace"));
      out->decoder.replacements.emplace_back(std::move(from), std::string(content));
    } else if (type == "ByteFallback" && stage == 0) {
      stage = 1;
    } else if (type == "Fuse" && stage <= 1) {
      stage = 2;
    } else {
      return Status::Errorf("decoder step \"", type,
                            "\" is not supported here (g4 supports "
                            "Replace*, ByteFallback, Fuse)");
    }
  }
  out->decoder.byte_fallback = stage >= 1;
  return OkStatus();
}

}  // namespace

Result<TokenizerJson> ParseTokenizerJson(const char* padded_json, size_t size) {
  auto parser = std::make_shared<simdjson::dom::parser>();
  element root;
  if (auto error = parser->parse(padded_json, size, /*realloc_if_needed=*/false).get(root);
      error != simdjson::SUCCESS)
    return Status::Errorf("not valid JSON: ", simdjson::error_message(error));
  if (!root.is_object()) return Status::Error("not a tokenizer.json (top level is not an object)");
  TokenizerJson out;
  out.storage = parser;
  G4_RETURN_IF_ERROR(ParseModel(root, &out));
  G4_RETURN_IF_ERROR(ParseAddedTokens(root, &out));
  G4_RETURN_IF_ERROR(ParseNormalizer(root, &out));
  G4_RETURN_IF_ERROR(ParsePreTokenizer(root, &out));
  G4_RETURN_IF_ERROR(ParseDecoder(root, &out));
  return out;
}

}  // namespace g4
