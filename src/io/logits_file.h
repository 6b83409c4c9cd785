// The per-position distributions `g4 perplexity --save-logits` writes and `--kl-base` reads back:
// for every scored position, the target token's log-probability, the K most likely tokens with
// their log-probabilities, and the log of the mass left to all other tokens. That is 12 + 8K bytes
// per position (2,060 for `g4 perplexity`'s default K = 256) instead of 2 * vocab (512 KiB at Gemma's 262,144).
//
// Layout (little-endian):
//   header (48 bytes): magic "G4TOPKL1", u32 version (1), u32 k, u32 vocab, u32 ctx, u32 stride,
//     u32 flags (bit 0: --chat), u64 positions, u64 tokens_hash (FNV-1a of every window's ids)
//   then `positions` records: i32 target, f32 target_logprob, f32 log_rest,
//     k x (i32 id, f32 logprob), most likely first (ties: lower id first)
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace g4 {

struct LogitsFileHeader {
  uint32_t k = 0;
  uint32_t vocab = 0;
  uint32_t ctx = 0;
  uint32_t stride = 0;
  uint32_t flags = 0;  // kLogitsFileChat
  uint64_t positions = 0;
  uint64_t tokens_hash = 0;
};
inline constexpr uint32_t kLogitsFileChat = 1;

struct TopKRecord {
  int target = 0;
  float target_logprob = 0;
  float log_rest = 0;  // log of 1 - the top-K's probability; -inf when they hold it all
  std::vector<int> ids;         // k ids, most likely first
  std::vector<float> logprobs;  // their log-probabilities
};

// Bytes per record for a given k.
inline size_t LogitsRecordBytes(uint32_t k) { return 12 + 8 * static_cast<size_t>(k); }

class LogitsFileWriter {
 public:
  // Creates `path` and writes the header; `positions` in it is patched by Finish.
  static Result<std::unique_ptr<LogitsFileWriter>> Create(const std::string& path, const LogitsFileHeader& header);
  Status Append(const TopKRecord& record);
  // Writes the final position count and closes; an error if any write failed.
  Status Finish();
  ~LogitsFileWriter();

 private:
  LogitsFileWriter() = default;
  std::string path_;
  std::FILE* file_ = nullptr;
  LogitsFileHeader header_;
  uint64_t written_ = 0;
  std::vector<unsigned char> buffer_;
};

// Reads a whole file; errors name the file and what is wrong (magic, version, a size that does
// not match the header, ids outside the vocabulary).
struct LogitsFile {
  LogitsFileHeader header;
  std::vector<TopKRecord> records;
};
Result<LogitsFile> ReadLogitsFile(const std::string& path);

}  // namespace g4
