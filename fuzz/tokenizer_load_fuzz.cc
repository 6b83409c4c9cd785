// Fuzzes tokenizer.json loading (Tokenizer::Load, simdjson): a tokenizer that loads must then
// encode and decode without fault, since every request goes through it.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g4::fuzz::MemFile file(data, size);
  auto tok = g4::Tokenizer::Load(file.path());
  if (!tok.ok()) {
    if (tok.status().message().empty()) std::abort();
    return 0;
  }
  const g4::Tokenizer& t = **tok;
  (void)g4::CheckGemma4Tokenizer(t);
  for (const char* text : {"hello world", "a  b\n\t<bos><|turn>\xff\xfe", "", "\xe2\x96\x81x"}) {
    std::vector<int> ids = t.Encode(text, /*add_bos=*/true);
    for (int id : ids)
      if (id != t.bos_id() && !t.InRange(id)) std::abort();  // Encode only emits real ids
    std::string all = t.Decode(ids);
    g4::IncrementalDecoder dec(t);
    std::string streamed;
    for (int id : ids) streamed += dec.Add(id);
    streamed += dec.Flush();
    if (streamed != all) std::abort();
  }
  std::vector<int> every;
  for (int id = -1; id <= t.vocab_size() && id < 4096; ++id) every.push_back(id);
  (void)t.Decode(every, /*skip_special=*/true);
  return 0;
}
