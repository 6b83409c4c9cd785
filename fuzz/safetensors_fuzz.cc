// Fuzzes the safetensors reader (8-byte length, JSON header, offsets into the data section):
// any input must give a file whose every tensor lies inside the mapping, or an error.
#include <cstdint>
#include <cstdlib>

#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g4::fuzz::MemFile file(data, size);
  auto st = g4::SafetensorsFile::Open(file.path());
  if (!st.ok()) {
    if (st.status().message().empty()) std::abort();  // every error must say something
    return 0;
  }
  const g4::MappedFile& map = (*st)->mapped();
  for (const g4::TensorView& t : (*st)->tensors()) {
    // The accepted view must lie inside the file and match dtype x shape.
    if (t.data < map.data() || t.bytes > map.size() ||
        static_cast<size_t>(t.data - map.data()) > map.size() - t.bytes)
      std::abort();
    if (static_cast<uint64_t>(t.numel()) * g4::DTypeSize(t.dtype) != t.bytes) std::abort();
    if (t.numel() > 0) {
      volatile double first = t.ValueAt(0), last = t.ValueAt(t.numel() - 1);
      (void)first;
      (void)last;
    }
    if ((*st)->Find(t.name) == nullptr) std::abort();
  }
  return 0;
}
