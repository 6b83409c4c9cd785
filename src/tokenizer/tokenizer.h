// Tokenizer: a Hugging Face tokenizer.json (BPE with byte fallback, as Gemma ships it), read in
// C++. Output must equal HF tokenizers' on every input (tools/tokenizer_diff.js checks that in
// ctest).
//
// Pipeline (docs/gemma4.md §6):
//   1. Added tokens (special or not) are cut out of the raw text first, leftmost-longest.
//   2. Each remaining segment is normalized (Gemma: " " -> "▁"; nothing else, no NFKC).
//   3. BPE over code points, lowest merge rank first (leftmost on ties); a code point missing from
//      the vocab becomes byte tokens <0xXX>.
// Decode: pieces joined, "▁" -> " ", runs of byte tokens -> UTF-8; a run that is not valid UTF-8
// becomes one U+FFFD per byte (HF's ByteFallback decoder).
//
// Thread safety: a loaded Tokenizer is immutable; Encode/Decode may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer_json.h"

namespace g4 {

class Tokenizer {
 public:
  // Reads tokenizer.json. Errors name the path and say what is wrong (missing, empty, not JSON,
  // not BPE, no vocab, an unsupported normalizer or pre-tokenizer, a merge naming unknown pieces).
  static Result<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  // The same from tokenizer.json text already in memory (a packed artifact's copy); `source`
  // names it in errors.
  static Result<std::unique_ptr<Tokenizer>> FromJson(std::string_view json, const std::string& source);

  // Special-token markers in `text` (e.g. "<bos>", "<|turn>") become their ids, as in HF with
  // add_special_tokens=false. No BOS is added unless add_bos. Invalid UTF-8 bytes are encoded
  // as byte tokens (HF itself only accepts valid UTF-8).
  std::vector<int> Encode(std::string_view text, bool add_bos = false) const;
  // Ids outside the vocabulary are dropped, as HF does. skip_special drops special added tokens.
  std::string Decode(const std::vector<int>& ids, bool skip_special = false) const;

  // The token's string as stored (an added token's content; "▁" not replaced). Empty if no such id.
  std::string_view Piece(int id) const;
  // The id of a vocab piece or added token, if any.
  std::optional<int> Find(std::string_view piece) const;
  bool IsSpecial(int id) const;
  // Largest id + 1 (added tokens included).
  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  int bos_id() const { return bos_id_; }  // -1 if absent
  int eos_id() const { return eos_id_; }  // -1 if absent
  int unk_id() const { return unk_id_; }  // -1 if absent
  const std::string& path() const { return path_; }

  // For IncrementalDecoder: the byte a byte-fallback token stands for (-1 if not one), and the
  // token's decoded text ("▁" -> " ") otherwise.
  int ByteValue(int id) const { return InRange(id) ? byte_value_[id] : -1; }
  std::string_view DecodedPiece(int id) const;
  // The bytes token `id` adds to decoded text (a byte token's byte, else its decoded piece);
  // what constrained decoding matches a token against. Empty if no such id.
  std::string TokenBytes(int id) const {
    const int b = ByteValue(id);
    return b >= 0 ? std::string(1, static_cast<char>(b)) : std::string(DecodedPiece(id));
  }
  bool InRange(int id) const { return id >= 0 && id < vocab_size() && has_piece_[id]; }

  // Implementation types (public so that the .cc's helpers can name them).
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  struct MergeTable;  // (left id, right id) -> Merge, open addressing
  struct PieceTable;  // model piece -> id, open addressing
  struct AddedTrie;   // added-token contents, byte trie for leftmost-longest matching

  ~Tokenizer();

 private:
  Tokenizer();
  // Parses tokenizer.json (simdjson-padded) and builds the tables from it, in this order.
  Status Parse(const char* padded_json, size_t size);
  Status BuildVocab(const TokenizerJson::Model& model, size_t n);  // ids 0..n-1
  void BuildCharIds();
  Status BuildMerges(const TokenizerJson::Model& model);
  void BuildAddedTokens(const std::vector<TokenizerJson::AddedToken>& tokens);
  void BuildDecoder(const TokenizerJson::Decoder& decoder);
  void EncodeSegment(std::string_view segment, std::vector<int>* out) const;
  void Bpe(std::string_view word, std::vector<int>* out) const;
  int ModelPieceId(std::string_view piece) const;  // -1 if absent
  int CharId(uint32_t code_point) const;           // single-code-point model piece, or -1

  std::string path_;
  std::vector<std::string> pieces_;        // id -> piece (added content wins)
  std::vector<std::string> model_pieces_;  // id -> model vocab piece
  std::vector<std::string> decoded_;       // id -> piece with "▁" -> " "
  std::vector<int16_t> byte_value_;        // id -> byte for <0xXX> tokens, else -1
  std::vector<uint8_t> has_piece_;
  std::vector<uint8_t> special_;
  std::unordered_map<std::string, int> added_;  // added-token content -> id
  std::unique_ptr<PieceTable> piece_table_;
  std::unique_ptr<MergeTable> merges_;
  std::unique_ptr<AddedTrie> added_raw_;  // normalized:false tokens: matched on raw text
  std::unique_ptr<AddedTrie>
      added_normalized_;              // normalized:true tokens: matched after normalizing
  std::vector<int32_t> bmp_char_id_;  // code point < 0x10000 -> model id or -1
  std::unordered_map<uint32_t, int32_t> astral_char_id_;
  int byte_id_[256];
  // Normalizer: literal replacements applied in order (Gemma: " " -> "▁").
  std::vector<std::pair<std::string, std::string>> replacements_;
  // Pre-tokenizer: Split on a literal, delimiter merged with the previous piece ("" = none).
  std::string split_after_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  int bos_id_ = -1;
  int eos_id_ = -1;
  int unk_id_ = -1;
};

// Streaming detokenizer: feed ids one at a time, get text that is safe to show now. The
// concatenation of all Add() results and Flush() equals Tokenizer::Decode(all ids) exactly. A run
// of byte-fallback tokens is held until it ends (a non-byte token or Flush), because HF turns a
// whole run into U+FFFDs if any part of it is invalid; so no chunk ever holds a broken character.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}
  std::string Add(int id);
  std::string Flush();
  void Reset() { pending_bytes_.clear(); }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_bytes_;
};

// Appends a run of bytes the way HF's ByteFallback decoder does: as is if valid UTF-8, else
// one U+FFFD per byte.
void AppendByteRun(std::string_view bytes, std::string* out);
// Strict UTF-8 validity (no overlongs, surrogates or code points past U+10FFFF), like Rust's.
bool IsValidUtf8(std::string_view bytes);

// Load-time and `g4 doctor` sanity checks for a Gemma-4 tokenizer: "hello world" must not encode
// to <unk>; ids 0/1/2/105/106 must be <pad>/<eos>/<bos>/<|turn>/<turn|>. A Gemma-3 tokenizer.json
// (<start_of_turn>/<end_of_turn> at 105/106) is named as such in the error.
Status CheckGemma4Tokenizer(const Tokenizer& tokenizer);

// Loads MODEL_DIR/tokenizer.json the way every front end does: a missing or empty file is an
// error at load (not garbage later), and so is a tokenizer that fails CheckGemma4Tokenizer.
// MODEL_DIR may also be a packed artifact (`g4 pack`): its verified copy of tokenizer.json.
Result<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& model_dir);

// The Gemma-4 instruction models' stop tokens that this tokenizer has: <eos> (1), <turn|> (106)
// and <|tool_response> (50, the model hands over to the tool). The engine should stop on the
// union of these and config.json / generation_config.json eos_token_id.
std::vector<int> Gemma4StopTokenIds(const Tokenizer& tokenizer);

}  // namespace g4
