#include "tokenizer/tokenizer.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/mapped_file.h"
#include "io/pack.h"
#include "tokenizer/tokenizer_json.h"

namespace g4 {
namespace {

constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFFu;
constexpr const char kReplacementChar[] = "\xEF\xBF\xBD";  // U+FFFD

uint64_t HashBytes(std::string_view s) {
  // 8 bytes at a time, multiply-xorshift: pieces are short, this only needs to spread them.
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xC2B2AE3D27D4EB4Full);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  return h;
}

size_t TableCapacity(size_t n) {
  size_t capacity = 16;
  while (capacity < n * 2) capacity <<= 1;
  return capacity;
}

// Decodes one UTF-8 sequence at s[i]; returns its length (1 for an invalid byte, with
// *cp = kInvalidCodePoint). Strict: no overlongs, surrogates or values past U+10FFFF.
size_t NextCodePoint(std::string_view s, size_t i, uint32_t* cp) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  size_t left = s.size() - i;
  unsigned char c = p[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  *cp = kInvalidCodePoint;
  auto cont = [&](size_t k) { return k < left && (p[k] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) {
    if (!cont(1)) return 1;
    *cp = ((c & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    return 2;
  }
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 1;
    uint32_t v = ((c & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    if (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF)) return 1;
    *cp = v;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 1;
    uint32_t v =
        ((c & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
    if (v < 0x10000 || v > 0x10FFFF) return 1;
    *cp = v;
    return 4;
  }
  return 1;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// HF's ByteFallback decoder test: a 6-byte token "<0x..>" whose middle two bytes parse as a u8 in
// base 16 (Rust's from_str_radix, which also takes a leading '+': "<0x+A>" is byte 10).
int ByteTokenValue(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  char a = token[3], b = token[4];
  if (a == '+') return HexDigit(b);
  int hi = HexDigit(a), lo = HexDigit(b);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

std::string ReplaceAll(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  size_t pos = 0;
  while (true) {
    size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Hash tables. Both store only ids; keys are compared against the owning Tokenizer's arrays.

struct Tokenizer::PieceTable {
  // A slot keeps 32 bits of the hash next to the id, so a probe rarely touches a piece string.
  struct Slot {
    uint32_t tag;
    int32_t id;  // -1 = empty
  };
  std::vector<Slot> slots;
  uint64_t mask = 0;
  void Init(size_t n) {
    slots.assign(TableCapacity(n), Slot{0, -1});
    mask = slots.size() - 1;
  }
  // Returns the slot where `piece` is or would go.
  size_t Probe(std::string_view piece, const std::vector<std::string>& pieces) const {
    return Probe(piece, HashBytes(piece), pieces);
  }
  size_t Probe(std::string_view piece, uint64_t h, const std::vector<std::string>& pieces) const {
    uint32_t tag = static_cast<uint32_t>(h >> 32);
    size_t i = h & mask;
    while (slots[i].id >= 0 && (slots[i].tag != tag || pieces[slots[i].id] != piece))
      i = (i + 1) & mask;
    return i;
  }
  static uint32_t Tag(std::string_view piece) {
    return static_cast<uint32_t>(HashBytes(piece) >> 32);
  }
};

struct Tokenizer::MergeTable {
  struct Slot {
    uint64_t key;  // left << 32 | right; ~0 = empty
    Merge merge;
  };
  std::vector<Slot> slots;
  uint64_t mask = 0;
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t Key(int left, int right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  static size_t Hash(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> 20; }
  void Init(size_t n) {
    slots.assign(TableCapacity(n), Slot{kEmpty, {0, 0}});
    mask = slots.size() - 1;
  }
  // HF collects merges into a map, so a repeated pair keeps its last rank: so does this.
  void Put(int left, int right, Merge merge) {
    uint64_t key = Key(left, right);
    size_t i = Hash(key) & mask;
    while (slots[i].key != kEmpty && slots[i].key != key) i = (i + 1) & mask;
    slots[i] = Slot{key, merge};
  }
  const Merge* Find(int left, int right) const {
    uint64_t key = Key(left, right);
    size_t i = Hash(key) & mask;
    while (true) {
      const Slot& slot = slots[i];
      if (slot.key == key) return &slot.merge;
      if (slot.key == kEmpty) return nullptr;
      i = (i + 1) & mask;
    }
  }
};

struct Tokenizer::AddedTrie {
  struct Node {
    int32_t id = -1;  // token ending here
    uint32_t first_edge = 0;
    uint32_t n_edges = 0;
  };
  std::vector<Node> nodes;
  std::vector<std::pair<uint8_t, int32_t>> edges;  // per node, sorted by byte
  int32_t root_child[256];
  size_t count = 0;
  // Built from (content, id) pairs.
  void Build(std::vector<std::pair<std::string, int>> tokens) {
    std::sort(tokens.begin(), tokens.end());
    // Insert in sorted order so that each node's children are created in byte order; then a
    // node's edges are contiguous if we lay nodes out breadth-first. Simpler: build a pointer
    // trie first, then flatten.
    std::vector<std::vector<std::pair<uint8_t, int32_t>>> children(1);
    std::vector<int32_t> ids(1, -1);
    for (const auto& [content, id] : tokens) {
      if (content.empty()) continue;
      int32_t node = 0;
      for (unsigned char c : content) {
        auto& kids = children[node];
        int32_t next = -1;
        for (auto& [byte, child] : kids)
          if (byte == c) next = child;
        if (next < 0) {
          next = static_cast<int32_t>(children.size());
          children[node].emplace_back(c, next);  // `kids` may dangle after the push below
          children.emplace_back();
          ids.push_back(-1);
        }
        node = next;
      }
      ids[node] = id;
      ++count;
    }
    nodes.assign(children.size(), Node{});
    edges.clear();
    for (size_t n = 0; n < children.size(); ++n) {
      auto& kids = children[n];
      std::sort(kids.begin(), kids.end());
      nodes[n].id = ids[n];
      nodes[n].first_edge = static_cast<uint32_t>(edges.size());
      nodes[n].n_edges = static_cast<uint32_t>(kids.size());
      edges.insert(edges.end(), kids.begin(), kids.end());
    }
    std::fill(std::begin(root_child), std::end(root_child), -1);
    for (auto& [byte, child] : children[0]) root_child[byte] = child;
  }
  // Longest token starting at text[pos]: returns its length (0 if none) and sets *id.
  size_t LongestMatch(std::string_view text, size_t pos, int* id) const {
    int32_t node = root_child[static_cast<unsigned char>(text[pos])];
    size_t best = 0;
    size_t i = pos + 1;
    while (node >= 0) {
      const Node& n = nodes[node];
      if (n.id >= 0) {
        best = i - pos;
        *id = n.id;
      }
      if (i >= text.size()) break;
      unsigned char c = text[i];
      int32_t next = -1;
      for (uint32_t e = n.first_edge; e < n.first_edge + n.n_edges; ++e) {
        if (edges[e].first == c) {
          next = edges[e].second;
          break;
        }
        if (edges[e].first > c) break;
      }
      node = next;
      ++i;
    }
    return best;
  }
  bool CanStart(unsigned char c) const { return root_child[c] >= 0; }
};

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

// ---------------------------------------------------------------------------------------------
// Loading: tokenizer_json.cc reads the file into a TokenizerJson; the tables are built from it.

Result<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  if (!FileExists(path))
    return Status::Errorf("tokenizer ", path,
                          ": file not found (a model directory needs tokenizer.json)");
  simdjson::padded_string json;
  if (auto error = simdjson::padded_string::load(path).get(json); error != simdjson::SUCCESS)
    return Status::Errorf("tokenizer ", path, ": cannot read: ", simdjson::error_message(error));
  if (json.size() == 0) return Status::Errorf("tokenizer ", path, ": file is empty");
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  tokenizer->path_ = path;
  Status status = tokenizer->Parse(json.data(), json.size());
  if (!status.ok()) return status.WithContext(Str("tokenizer ", path));
  return tokenizer;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view text, const std::string& source) {
  if (text.empty()) return Status::Errorf("tokenizer ", source, ": file is empty");
  simdjson::padded_string json(text.data(), text.size());
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  tokenizer->path_ = source;
  Status status = tokenizer->Parse(json.data(), json.size());
  if (!status.ok()) return status.WithContext(Str("tokenizer ", source));
  return tokenizer;
}

Status Tokenizer::Parse(const char* padded_json, size_t size) {
  G4_ASSIGN_OR_RETURN(const TokenizerJson json, ParseTokenizerJson(padded_json, size));
  byte_fallback_ = json.model.byte_fallback;
  fuse_unk_ = json.model.fuse_unk;
  ignore_merges_ = json.model.ignore_merges;
  replacements_ = json.normalizer_replacements;
  split_after_ = json.split_after;
  const size_t n = static_cast<size_t>(json.max_id) + 1;
  G4_RETURN_IF_ERROR(BuildVocab(json.model, n));
  BuildCharIds();  // before the added tokens: only model pieces are BPE symbols
  if (json.model.unk_token) unk_id_ = ModelPieceId(*json.model.unk_token);
  G4_RETURN_IF_ERROR(BuildMerges(json.model));
  BuildAddedTokens(json.added_tokens);
  BuildDecoder(json.decoder);
  if (auto it = added_.find("<bos>"); it != added_.end())
    bos_id_ = it->second;
  else
    bos_id_ = ModelPieceId("<bos>");
  if (auto it = added_.find("<eos>"); it != added_.end())
    eos_id_ = it->second;
  else
    eos_id_ = ModelPieceId("<eos>");
  return OkStatus();
}

// Ids 0..n-1; ids may be sparse, and added tokens can extend past the vocab.
Status Tokenizer::BuildVocab(const TokenizerJson::Model& model, size_t n) {
  model_pieces_.assign(n, std::string());
  has_piece_.assign(n, 0);
  special_.assign(n, 0);
  piece_table_ = std::make_unique<PieceTable>();
  piece_table_->Init(model.vocab.size());
  for (const auto& [piece, id] : model.vocab) {
    if (has_piece_[id]) return Status::Errorf("model.vocab: id ", id, " is used twice");
    model_pieces_[id] = std::string(piece);
    has_piece_[id] = 1;
    size_t slot = piece_table_->Probe(piece, model_pieces_);
    if (piece_table_->slots[slot].id >= 0)
      return Status::Errorf("model.vocab: piece \"", piece, "\" appears twice");
    piece_table_->slots[slot] = PieceTable::Slot{PieceTable::Tag(piece), id};
  }
  pieces_ = model_pieces_;
  return OkStatus();
}

// Single code points, for the first step of BPE, and the <0xXX> byte tokens.
void Tokenizer::BuildCharIds() {
  bmp_char_id_.assign(0x10000, -1);
  for (size_t id = 0; id < model_pieces_.size(); ++id) {
    if (!has_piece_[id] || model_pieces_[id].empty()) continue;
    uint32_t cp;
    size_t len = NextCodePoint(model_pieces_[id], 0, &cp);
    if (cp == kInvalidCodePoint || len != model_pieces_[id].size()) continue;
    if (cp < 0x10000)
      bmp_char_id_[cp] = static_cast<int32_t>(id);
    else
      astral_char_id_[cp] = static_cast<int32_t>(id);
  }
  for (int b = 0; b < 256; ++b) {
    static const char kHex[] = "0123456789ABCDEF";
    std::string piece = Str("<0x", kHex[b >> 4], kHex[b & 15], ">");
    byte_id_[b] = ModelPieceId(piece);
  }
  if (byte_fallback_) {
    for (int b = 0; b < 256; ++b)
      if (byte_id_[b] < 0) {
        byte_fallback_ = false;  // HF falls back to <unk> when a byte token is missing
        break;
      }
  }
}

// Merge rank = position in the file. 1.5 million random lookups dominate loading; done in
// batches with prefetches so that the cache misses overlap instead of queueing one after another.
Status Tokenizer::BuildMerges(const TokenizerJson::Model& model) {
  const auto& pairs = model.merges;
  merges_ = std::make_unique<MergeTable>();
  merges_->Init(pairs.size());
  constexpr size_t kBatch = 32;
  std::string joined[kBatch];
  std::string_view keys[3 * kBatch];
  uint64_t hashes[3 * kBatch];
  int ids[3 * kBatch];
  const PieceTable& table = *piece_table_;
  for (size_t base = 0; base < pairs.size(); base += kBatch) {
    size_t n = std::min(kBatch, pairs.size() - base);
    for (size_t k = 0; k < n; ++k) {
      const auto& [left, right] = pairs[base + k];
      joined[k].assign(left);
      joined[k].append(right);
      keys[3 * k] = left;
      keys[3 * k + 1] = right;
      keys[3 * k + 2] = joined[k];
    }
    for (size_t j = 0; j < 3 * n; ++j) {
      hashes[j] = HashBytes(keys[j]);
      __builtin_prefetch(&table.slots[hashes[j] & table.mask]);
    }
    for (size_t j = 0; j < 3 * n; ++j) {
      int32_t id = table.slots[hashes[j] & table.mask].id;
      if (id >= 0) __builtin_prefetch(&model_pieces_[id]);
    }
    for (size_t j = 0; j < 3 * n; ++j)
      ids[j] = table.slots[table.Probe(keys[j], hashes[j], model_pieces_)].id;
    for (size_t k = 0; k < n; ++k) {
      if (ids[3 * k] < 0 || ids[3 * k + 1] < 0 || ids[3 * k + 2] < 0)
        return Status::Errorf("model.merges[", base + k, "] (\"", pairs[base + k].first, "\", \"",
                              pairs[base + k].second, "\") names a piece missing from the vocab");
      __builtin_prefetch(
          &merges_->slots[MergeTable::Hash(MergeTable::Key(ids[3 * k], ids[3 * k + 1])) &
                          merges_->mask]);
    }
    for (size_t k = 0; k < n; ++k)
      merges_->Put(ids[3 * k], ids[3 * k + 1],
                   Merge{static_cast<int32_t>(base + k), ids[3 * k + 2]});
  }
  return OkStatus();
}

// Added tokens: their content wins over the model piece of the same id; matched before BPE,
// on the raw text or (normalized:true) after normalizing.
void Tokenizer::BuildAddedTokens(const std::vector<TokenizerJson::AddedToken>& tokens) {
  std::vector<std::pair<std::string, int>> raw_tokens, normalized_tokens;
  for (const TokenizerJson::AddedToken& token : tokens) {
    pieces_[token.id] = std::string(token.content);
    has_piece_[token.id] = 1;
    special_[token.id] = token.special;
    added_[std::string(token.content)] = token.id;
    (token.normalized ? normalized_tokens : raw_tokens)
        .emplace_back(std::string(token.content), token.id);
  }
  added_raw_ = std::make_unique<AddedTrie>();
  added_raw_->Build(std::move(raw_tokens));
  added_normalized_ = std::make_unique<AddedTrie>();
  added_normalized_->Build(std::move(normalized_tokens));
}

// Per id: its decoded text and, with a ByteFallback step, the byte a <0xXX> token stands for.
void Tokenizer::BuildDecoder(const TokenizerJson::Decoder& decoder) {
  const size_t n = pieces_.size();
  decoded_.resize(n);
  for (size_t id = 0; id < n; ++id) {
    std::string text = pieces_[id];
    for (const auto& [from, to] : decoder.replacements)
      if (!from.empty()) text = ReplaceAll(text, from, to);
    decoded_[id] = std::move(text);
  }
  byte_value_.assign(n, -1);
  if (decoder.byte_fallback)
    for (size_t id = 0; id < n; ++id)
      byte_value_[id] = static_cast<int16_t>(ByteTokenValue(decoded_[id]));
}

int Tokenizer::ModelPieceId(std::string_view piece) const {
  return piece_table_->slots[piece_table_->Probe(piece, model_pieces_)].id;
}

int Tokenizer::CharId(uint32_t code_point) const {
  if (code_point < 0x10000) return bmp_char_id_[code_point];
  if (code_point == kInvalidCodePoint) return -1;
  auto it = astral_char_id_.find(code_point);
  return it == astral_char_id_.end() ? -1 : it->second;
}

// ---------------------------------------------------------------------------------------------
// Encoding

std::vector<int> Tokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_bos && bos_id_ >= 0) ids.push_back(bos_id_);
  size_t segment_start = 0, pos = 0;
  const AddedTrie& trie = *added_raw_;
  while (pos < text.size()) {
    if (trie.CanStart(static_cast<unsigned char>(text[pos]))) {
      int id = -1;
      size_t len = trie.LongestMatch(text, pos, &id);
      if (len > 0) {
        EncodeSegment(text.substr(segment_start, pos - segment_start), &ids);
        ids.push_back(id);
        pos += len;
        segment_start = pos;
        continue;
      }
    }
    ++pos;
  }
  EncodeSegment(text.substr(segment_start), &ids);
  return ids;
}

void Tokenizer::EncodeSegment(std::string_view segment, std::vector<int>* out) const {
  if (segment.empty()) return;
  std::string normalized(segment);
  for (const auto& [from, to] : replacements_) normalized = ReplaceAll(normalized, from, to);

  // Tokens marked normalized:true are matched on the normalized text (none in Gemma's file).
  auto pre_tokenize_and_bpe = [&](std::string_view part) {
    if (split_after_.empty()) {
      Bpe(part, out);
      return;
    }
    size_t start = 0;
    while (start < part.size()) {
      size_t hit = part.find(split_after_, start);
      size_t end = hit == std::string_view::npos ? part.size() : hit + split_after_.size();
      Bpe(part.substr(start, end - start), out);
      start = end;
    }
  };
  const AddedTrie& trie = *added_normalized_;
  if (trie.count == 0) {
    pre_tokenize_and_bpe(normalized);
    return;
  }
  std::string_view text = normalized;
  size_t part_start = 0, pos = 0;
  while (pos < text.size()) {
    int id = -1;
    size_t len = trie.CanStart(static_cast<unsigned char>(text[pos]))
                     ? trie.LongestMatch(text, pos, &id)
                     : 0;
    if (len > 0) {
      pre_tokenize_and_bpe(text.substr(part_start, pos - part_start));
      out->push_back(id);
      pos += len;
      part_start = pos;
    } else {
      ++pos;
    }
  }
  pre_tokenize_and_bpe(text.substr(part_start));
}

namespace {

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t alive;
};

struct QueuedMerge {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  int32_t left_id;  // the pair when queued, to detect a stale entry
  int32_t right_id;
};

// Heap order: lowest rank first, then leftmost, as HF's BinaryHeap of Merge orders them.
struct LaterMerge {
  bool operator()(const QueuedMerge& a, const QueuedMerge& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

void Tokenizer::Bpe(std::string_view word, std::vector<int>* out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    int whole = ModelPieceId(word);
    if (whole >= 0) {
      out->push_back(whole);
      return;
    }
  }
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<QueuedMerge> heap;
  symbols.clear();
  heap.clear();
  auto add = [&](int id) {
    int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, index - 1, index + 1, 1});
  };
  // Characters -> symbols (HF BPE::merge_word): vocab piece, else bytes, else <unk> (fused).
  bool last_was_unk = false;
  for (size_t i = 0; i < word.size();) {
    uint32_t cp;
    size_t len = NextCodePoint(word, i, &cp);
    int id = CharId(cp);
    if (id >= 0) {
      add(id);
      last_was_unk = false;
    } else if (byte_fallback_) {
      for (size_t k = 0; k < len; ++k) add(byte_id_[static_cast<unsigned char>(word[i + k])]);
      last_was_unk = false;
    } else if (unk_id_ >= 0) {
      if (!(fuse_unk_ && last_was_unk)) add(unk_id_);
      last_was_unk = true;
    }
    i += len;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  const MergeTable& merges = *merges_;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* m = merges.Find(symbols[i].id, symbols[i + 1].id))
      heap.push_back(QueuedMerge{m->rank, static_cast<int32_t>(i), m->new_id, symbols[i].id,
                                 symbols[i + 1].id});
  }
  std::make_heap(heap.begin(), heap.end(), LaterMerge());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), LaterMerge());
    QueuedMerge top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // Stale entry: the pair at this position changed since it was queued. HF looks the current
    // pair up and compares new ids; within one word that is the same as comparing the pair (the
    // pair at a position only ever covers a longer span, so an equal merged piece means an equal
    // split), and this saves a hash lookup.
    if (left.id != top.left_id || right.id != top.right_id) continue;
    left.id = top.new_id;
    right.alive = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const Merge* m = merges.Find(symbols[left.prev].id, left.id)) {
        heap.push_back(QueuedMerge{m->rank, left.prev, m->new_id, symbols[left.prev].id, left.id});
        std::push_heap(heap.begin(), heap.end(), LaterMerge());
      }
    }
    if (left.next >= 0) {
      if (const Merge* m = merges.Find(left.id, symbols[left.next].id)) {
        heap.push_back(QueuedMerge{m->rank, top.pos, m->new_id, left.id, symbols[left.next].id});
        std::push_heap(heap.begin(), heap.end(), LaterMerge());
      }
    }
  }
  for (const Symbol& s : symbols)
    if (s.alive) out->push_back(s.id);
}

// ---------------------------------------------------------------------------------------------
// Decoding and lookups

bool IsValidUtf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    uint32_t cp;
    i += NextCodePoint(bytes, i, &cp);
    if (cp == kInvalidCodePoint) return false;
  }
  return true;
}

void AppendByteRun(std::string_view bytes, std::string* out) {
  if (IsValidUtf8(bytes)) {
    out->append(bytes);
  } else {
    for (size_t i = 0; i < bytes.size(); ++i) out->append(kReplacementChar);
  }
}

std::string Tokenizer::Decode(const std::vector<int>& ids, bool skip_special) const {
  std::string out, run;
  for (int id : ids) {
    if (!InRange(id) || (skip_special && special_[id])) continue;
    if (byte_value_[id] >= 0) {
      run.push_back(static_cast<char>(byte_value_[id]));
      continue;
    }
    if (!run.empty()) {
      AppendByteRun(run, &out);
      run.clear();
    }
    out.append(decoded_[id]);
  }
  if (!run.empty()) AppendByteRun(run, &out);
  return out;
}

std::string_view Tokenizer::Piece(int id) const {
  return InRange(id) ? std::string_view(pieces_[id]) : std::string_view();
}

std::string_view Tokenizer::DecodedPiece(int id) const {
  return InRange(id) ? std::string_view(decoded_[id]) : std::string_view();
}

std::optional<int> Tokenizer::Find(std::string_view piece) const {
  if (auto it = added_.find(std::string(piece)); it != added_.end()) return it->second;
  int id = ModelPieceId(piece);
  if (id >= 0) return id;
  return std::nullopt;
}

bool Tokenizer::IsSpecial(int id) const { return InRange(id) && special_[id]; }

std::string IncrementalDecoder::Add(int id) {
  if (!tokenizer_.InRange(id) || (skip_special_ && tokenizer_.IsSpecial(id))) return {};
  int byte = tokenizer_.ByteValue(id);
  if (byte >= 0) {
    pending_bytes_.push_back(static_cast<char>(byte));
    return {};
  }
  std::string out = Flush();
  out.append(tokenizer_.DecodedPiece(id));
  return out;
}

std::string IncrementalDecoder::Flush() {
  std::string out;
  if (!pending_bytes_.empty()) AppendByteRun(pending_bytes_, &out);
  pending_bytes_.clear();
  return out;
}

// ---------------------------------------------------------------------------------------------

Status CheckGemma4Tokenizer(const Tokenizer& tokenizer) {
  const std::string& path = tokenizer.path();
  if (tokenizer.Piece(105) == "<start_of_turn>" || tokenizer.Piece(106) == "<end_of_turn>")
    return Status::Errorf("tokenizer ", path, " is a Gemma-3 tokenizer.json (id 105 is \"",
                          tokenizer.Piece(105), "\", 106 is \"", tokenizer.Piece(106),
                          "\"); a Gemma-4 model needs <|turn>/<turn|> there");
  struct Expected {
    int id;
    const char* piece;
  };
  for (Expected e : {Expected{0, "<pad>"}, Expected{1, "<eos>"}, Expected{2, "<bos>"},
                     Expected{105, "<|turn>"}, Expected{106, "<turn|>"}}) {
    if (tokenizer.Piece(e.id) != e.piece)
      return Status::Errorf("tokenizer ", path, ": id ", e.id, " is \"", tokenizer.Piece(e.id),
                            "\", expected \"", e.piece, "\" (not a Gemma-4 tokenizer.json?)");
    if (!tokenizer.IsSpecial(e.id))
      return Status::Errorf("tokenizer ", path, ": \"", e.piece, "\" (id ", e.id,
                            ") is not marked special, so prompts would not parse it");
  }
  std::vector<int> ids = tokenizer.Encode("hello world");
  if (ids.empty())
    return Status::Errorf("tokenizer ", path, ": \"hello world\" encodes to nothing");
  for (int id : ids)
    if (id == tokenizer.unk_id() || tokenizer.Piece(id) == "<unk>")
      return Status::Errorf("tokenizer ", path,
                            ": \"hello world\" encodes to <unk>; the vocabulary is broken");
  return OkStatus();
}

std::vector<int> Gemma4StopTokenIds(const Tokenizer& tokenizer) {
  std::vector<int> ids;
  for (const char* piece : {"<eos>", "<turn|>", "<|tool_response>"})
    if (auto id = tokenizer.Find(piece)) ids.push_back(*id);
  return ids;
}

Result<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& model_dir) {
  if (IsPackFile(model_dir)) {
    const std::string source = model_dir + ":tokenizer.json";
    auto text = ReadModelTextFile(model_dir, "tokenizer.json");
    if (!text.ok()) return text.status();
    auto tokenizer = Tokenizer::FromJson(*text, source);
    if (!tokenizer.ok()) return tokenizer.status();
    Status check = CheckGemma4Tokenizer(**tokenizer);
    if (!check.ok()) return check.WithContext(source);
    return tokenizer;
  }
  const std::string path = model_dir + "/tokenizer.json";
  if (!FileExists(path))
    return Status::Errorf(path, " is missing: without the checkpoint's tokenizer every prompt "
                          "would be garbage; copy the tokenizer.json that came with the model");
  auto tokenizer = Tokenizer::Load(path);
  if (!tokenizer.ok()) return tokenizer.status();
  Status check = CheckGemma4Tokenizer(**tokenizer);
  if (!check.ok()) return check.WithContext(path);
  return tokenizer;
}

}  // namespace g4
