// Fuzzes encode and (incremental) decode with the real Gemma-4 test tokenizer
// (assets/tokenizer/gemma4.json, loaded once; G4_FUZZ_TOKENIZER overrides the path).
// First byte selects the mode: even -> the rest is text to encode; odd -> the rest is a list of
// little-endian int32 ids (any value) to decode. Checks the documented invariants:
// IncrementalDecoder's pieces concatenate to Decode(ids), and valid UTF-8 without "▁" round-trips.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

namespace {

const g4::Tokenizer& Tok() {
  static const std::unique_ptr<g4::Tokenizer> tok = [] {
    const char* env = std::getenv("G4_FUZZ_TOKENIZER");
    std::string path = env ? env : G4_SOURCE_DIR "/assets/tokenizer/gemma4.json";
    auto t = g4::Tokenizer::Load(path);
    if (!t.ok()) {
      std::fprintf(stderr, "tokenizer_encode_fuzz: %s\n", t.status().message().c_str());
      std::abort();
    }
    return std::move(t).value();
  }();
  return *tok;
}

void CheckDecode(const g4::Tokenizer& t, const std::vector<int>& ids, bool skip_special) {
  std::string all = t.Decode(ids, skip_special);
  g4::IncrementalDecoder dec(t, skip_special);
  std::string streamed;
  for (int id : ids) {
    std::string piece = dec.Add(id);
    // Every piece handed to a client must be valid UTF-8 on its own (SSE chunks are JSON).
    if (!g4::IsValidUtf8(piece)) std::abort();
    streamed += piece;
  }
  streamed += dec.Flush();
  if (streamed != all) std::abort();
  if (!g4::IsValidUtf8(all)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const g4::Tokenizer& t = Tok();
  g4::fuzz::Knobs knobs(data, size);
  const uint8_t mode = knobs.Byte();
  if ((mode & 1) == 0) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    std::vector<int> ids = t.Encode(text, /*add_bos=*/(mode & 2) != 0);
    for (int id : ids)
      if (!t.InRange(id)) std::abort();
    CheckDecode(t, ids, (mode & 4) != 0);
    if ((mode & 6) == 0 && g4::IsValidUtf8(text) && text.find("\xe2\x96\x81") == std::string::npos &&
        t.Decode(ids) != text)
      std::abort();
  } else {
    std::vector<int> ids(size / 4);
    if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
    CheckDecode(t, ids, (mode & 2) != 0);
    for (int id : ids) (void)t.Piece(id), (void)t.IsSpecial(id), (void)t.ByteValue(id);
  }
  return 0;
}
