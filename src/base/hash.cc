#include "base/hash.h"

#include <cstring>
#include <vector>

namespace g4 {

namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t Read64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // little-endian hosts only (x86-64, aarch64)
  return v;
}
inline uint32_t Read32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t Round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = Rotl(acc, 31);
  return acc * kP1;
}
inline uint64_t MergeRound(uint64_t acc, uint64_t val) {
  acc ^= Round(0, val);
  return acc * kP1 + kP4;
}

}  // namespace

uint64_t Xxh64(const void* data, size_t bytes, uint64_t seed) {
  // Walks by counting the bytes left, never by comparing p + k with an end pointer: an empty
  // input may come with a null pointer (an empty vector's data()), and null + 8 is undefined.
  const uint8_t* p = static_cast<const uint8_t*>(data);
  size_t left = bytes;
  uint64_t h;
  if (left >= 32) {
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    do {
      v1 = Round(v1, Read64(p));
      v2 = Round(v2, Read64(p + 8));
      v3 = Round(v3, Read64(p + 16));
      v4 = Round(v4, Read64(p + 24));
      p += 32;
      left -= 32;
    } while (left >= 32);
    h = Rotl(v1, 1) + Rotl(v2, 7) + Rotl(v3, 12) + Rotl(v4, 18);
    h = MergeRound(h, v1);
    h = MergeRound(h, v2);
    h = MergeRound(h, v3);
    h = MergeRound(h, v4);
  } else {
    h = seed + kP5;
  }
  h += static_cast<uint64_t>(bytes);
  for (; left >= 8; left -= 8, p += 8) {
    h ^= Round(0, Read64(p));
    h = Rotl(h, 27) * kP1 + kP4;
  }
  if (left >= 4) {
    h ^= static_cast<uint64_t>(Read32(p)) * kP1;
    h = Rotl(h, 23) * kP2 + kP3;
    p += 4;
    left -= 4;
  }
  for (; left > 0; --left, ++p) {
    h ^= static_cast<uint64_t>(*p) * kP5;
    h = Rotl(h, 11) * kP1;
  }
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

size_t ChecksumChunks(size_t bytes) {
  return (bytes + kChecksumChunkBytes - 1) / kChecksumChunkBytes;
}

uint64_t ChunkHash(const void* data, size_t bytes, size_t chunk) {
  const size_t begin = chunk * kChecksumChunkBytes;
  const size_t n = bytes - begin < kChecksumChunkBytes ? bytes - begin : kChecksumChunkBytes;
  return Xxh64(static_cast<const uint8_t*>(data) + begin, n);
}

uint64_t CombineChunkHashes(const uint64_t* chunk_hashes, size_t n) {
  return Xxh64(chunk_hashes, n * sizeof(uint64_t));
}

uint64_t ChunkedChecksum(const void* data, size_t bytes) {
  std::vector<uint64_t> hashes(ChecksumChunks(bytes));
  for (size_t i = 0; i < hashes.size(); ++i) hashes[i] = ChunkHash(data, bytes, i);
  return CombineChunkHashes(hashes.data(), hashes.size());
}

}  // namespace g4
