// tokenizer.json read into a typed description of what g4 supports: a BPE model, added tokens,
// literal Replace normalizers, an optional literal Split pre-tokenizer and Gemma's decoder. Every
// JSON-level check lives here (types, missing fields, settings g4 does not implement); the
// Tokenizer builds its tables from the result and checks what needs them (duplicate ids, merges
// naming unknown pieces).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace g4 {

struct TokenizerJson {
  // model: {"type": "BPE", ...}.
  struct Model {
    std::vector<std::pair<std::string_view, int32_t>> vocab;  // piece -> id, in file order
    // merges in rank order (position in the file), as (left, right) pieces.
    std::vector<std::pair<std::string_view, std::string_view>> merges;
    std::optional<std::string_view> unk_token;
    bool byte_fallback = false;
    bool fuse_unk = false;
    bool ignore_merges = false;
  };
  struct AddedToken {
    int32_t id = 0;
    std::string_view content;
    bool special = false;
    bool normalized = false;  // matched after normalizing, else on the raw text
  };
  // decoder: Replace steps, then optionally ByteFallback, then optionally Fuse.
  struct Decoder {
    std::vector<std::pair<std::string, std::string>> replacements;  // (from, to), in order
    bool byte_fallback = false;
  };

  Model model;
  std::vector<AddedToken> added_tokens;  // in file order
  // normalizer: literal replacements applied in order (Gemma: " " -> "▁").
  std::vector<std::pair<std::string, std::string>> normalizer_replacements;
  // pre_tokenizer: Split on this literal, merged with the previous piece ("" = none).
  std::string split_after;
  Decoder decoder;
  // Largest id in model.vocab and added_tokens.
  int32_t max_id = -1;

  // The parsed document: the string_views above point into it.
  std::shared_ptr<const void> storage;
};

// Parses tokenizer.json text; `padded_json` must carry simdjson's padding (SIMDJSON_PADDING bytes
// readable past `size`). Errors say what is wrong without naming the file (callers add that).
Result<TokenizerJson> ParseTokenizerJson(const char* padded_json, size_t size);

}  // namespace g4
