// Owned memory for what the hot loops stream every token (weights, the KV cache): 64-byte
// aligned for the SIMD tiles, and on 2 MiB transparent huge pages when large, so the TLB does
// not miss every 4 KiB. Where THP is "madvise" (as on the dev VMs) only an madvise'd range gets
// huge pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace g4 {

inline constexpr size_t kStreamedAlign = 64;
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Frees with the aligned delete[] matching the allocation (ASan reports a
// new-delete-type-mismatch otherwise, and it is undefined behaviour).
struct AlignedDelete {
  size_t align = kStreamedAlign;
  void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(align)); }
};
using StreamedBuffer = std::unique_ptr<uint8_t[], AlignedDelete>;

// `bytes` uninitialized bytes (at least one), 2 MiB aligned and madvise'd for huge pages from
// 2 MiB up. Touch them after this call, so the first faults take huge pages.
StreamedBuffer AllocateStreamed(size_t bytes);

}  // namespace g4
