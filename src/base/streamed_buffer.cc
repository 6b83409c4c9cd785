#include "base/streamed_buffer.h"

#include <sys/mman.h>

#include <algorithm>

namespace g4 {

StreamedBuffer AllocateStreamed(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : kStreamedAlign;
  StreamedBuffer p(new (std::align_val_t(align)) uint8_t[bytes], AlignedDelete{align});
  if (align == kHugePageBytes)
    madvise(p.get(), bytes, MADV_HUGEPAGE);  // a hint: failure is harmless
  return p;
}

}  // namespace g4
