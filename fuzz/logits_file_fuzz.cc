// Fuzzes the `g4 perplexity --kl-base` reader (src/io/logits_file.h): any input must give a file
// whose records match the header (count, k ids each, ids inside the vocabulary), or an error that
// says something.
#include <cstdint>
#include <cstdlib>

#include "fuzz_util.h"
#include "io/logits_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g4::fuzz::MemFile file(data, size);
  auto f = g4::ReadLogitsFile(file.path());
  if (!f.ok()) {
    if (f.status().message().empty()) std::abort();
    return 0;
  }
  if (f->records.size() != f->header.positions) std::abort();
  for (const g4::TopKRecord& r : f->records) {
    if (r.ids.size() != f->header.k || r.logprobs.size() != f->header.k) std::abort();
    if (r.target < 0 || static_cast<uint32_t>(r.target) >= f->header.vocab) std::abort();
    for (int id : r.ids)
      if (id < 0 || static_cast<uint32_t>(id) >= f->header.vocab) std::abort();
  }
  return 0;
}
