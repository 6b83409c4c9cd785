// 64-bit checksums for packed artifacts (io/pack.h). XXH64 (Yann Collet's xxHash, 64-bit
// variant), written here from its public specification so g4 needs no extra library; the test
// checks it against the published test vectors.
#pragma once

#include <cstddef>
#include <cstdint>

namespace g4 {

uint64_t Xxh64(const void* data, size_t bytes, uint64_t seed = 0);

// Checksum of a large buffer that several threads can verify at once: XXH64 over the
// little-endian XXH64s of its consecutive kChecksumChunkBytes chunks (the last may be shorter;
// an empty buffer has no chunks). Chunk i's hash is ChunkHash(data, bytes, i).
inline constexpr size_t kChecksumChunkBytes = size_t{16} << 20;
size_t ChecksumChunks(size_t bytes);
uint64_t ChunkHash(const void* data, size_t bytes, size_t chunk);
uint64_t CombineChunkHashes(const uint64_t* chunk_hashes, size_t n);
uint64_t ChunkedChecksum(const void* data, size_t bytes);

}  // namespace g4
