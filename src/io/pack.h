// Packed model artifacts (`g4 pack`): one file that the server maps and uses in place, with a
// checksum per section so that a damaged or foreign file is refused instead of run.
//
// Layout (integers little-endian):
//   [0, 64)   header: magic "G4PACK\r\n", u32 format_version, u32 header_bytes (64),
//             u64 table_offset, u64 table_bytes, u64 table_checksum (XXH64 of the table),
//             u64 file_bytes, u64 reserved (0), u64 header_checksum (XXH64 of bytes [0, 56)).
//   sections  each at a multiple of kPackAlignment, in the order they were added.
//   table     JSON text: {"format_version": N, "meta": {...}, "sections": [{"name", "offset",
//             "bytes", "checksum": 16 hex digits (ChunkedChecksum, base/hash.h), "meta": {...}}]}.
// The magic's "\r\n" catches a text-mode copy. The header and table are checked at Open (cheap);
// section checksums are checked by Verify / VerifyAll (reads every byte, chunk-parallel).
// This file knows nothing about models: model/pack_layout.h decides what the sections hold.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "base/thread_pool.h"

namespace g4 {

inline constexpr char kPackMagic[8] = {'G', '4', 'P', 'A', 'C', 'K', '\r', '\n'};
// Bump on any change a reader of the previous version would misread (header, table keys, what a
// model section holds, a WeightType's byte layout). Readers refuse every other version.
inline constexpr uint32_t kPackFormatVersion = 1;
inline constexpr uint64_t kPackHeaderBytes = 64;
inline constexpr uint64_t kPackAlignment = 4096;  // page aligned: madvise per section, SIMD loads

struct PackWriteOptions {
  ThreadPool* pool = nullptr;  // hashes chunks in parallel when given
  // Test hook: writes fail with ENOSPC ("disk full") once this many bytes are written; 0 = never.
  uint64_t fail_after_bytes = 0;
};

// Writes an artifact section by section. The file is invisible until Commit (an O_TMPFILE
// linked into place, else a temporary name renamed over PATH): a failure at any point, a
// destroyed uncommitted writer, a full disk or a killed process never leave a partial file.
class PackWriter {
 public:
  static Result<std::unique_ptr<PackWriter>> Create(const std::string& path,
                                                    const PackWriteOptions& options = {});
  ~PackWriter();
  PackWriter(const PackWriter&) = delete;
  PackWriter& operator=(const PackWriter&) = delete;

  Status Add(const std::string& name, const void* data, size_t bytes,
             nlohmann::json meta = nlohmann::json::object());
  Status AddText(const std::string& name, const std::string& text,
                 nlohmann::json meta = nlohmann::json::object()) {
    return Add(name, text.data(), text.size(), std::move(meta));
  }
  // Writes the table and header, syncs and makes the file visible at PATH (replacing any file).
  Status Commit(const nlohmann::json& meta);
  uint64_t bytes_written() const { return end_; }

 private:
  PackWriter() = default;
  Status WriteAt(uint64_t offset, const void* data, size_t bytes);
  void Discard();

  std::string path_, temp_path_;  // temp_path_ empty when the file is an O_TMPFILE
  int fd_ = -1;
  PackWriteOptions options_;
  uint64_t end_ = kPackHeaderBytes;
  nlohmann::json sections_ = nlohmann::json::array();
  bool committed_ = false;
};

struct PackSection {
  std::string name;
  uint64_t offset = 0, bytes = 0, checksum = 0;
  nlohmann::json meta;
  const uint8_t* data = nullptr;  // into the mapping
};

// Artifact metadata fields, read defensively: an artifact is outside input, and json::value()
// throws on a type mismatch. MetaString: "" when absent or not a string. MetaInt: `fallback` when
// absent; INT_MIN when present but not an integer that fits an int.
std::string MetaString(const nlohmann::json& meta, const char* key);
int MetaInt(const nlohmann::json& meta, const char* key, int fallback);

class PackFile {
 public:
  // Maps PATH and checks magic, format version, size (truncation), header and table checksums.
  // Errors say which and what to do.
  static Result<std::unique_ptr<PackFile>> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  uint32_t format_version() const { return format_version_; }
  uint64_t file_bytes() const { return file_.size(); }
  const nlohmann::json& meta() const { return meta_; }
  const std::vector<PackSection>& sections() const { return sections_; }
  const PackSection* Find(const std::string& name) const;

  // Recomputes section checksums; errors name the section. VerifyAll splits big sections into
  // chunks across the pool's threads and faults every page in (the artifact is read once here).
  Status Verify(const PackSection& section) const;
  Status VerifyAll(ThreadPool* pool) const;
  // VerifyAll over the sections `which` accepts: a tensor-parallel rank checks (and faults in)
  // its own sections and the shared ones, not its peers'.
  Status VerifySections(ThreadPool* pool,
                        const std::function<bool(const PackSection&)>& which) const;
  // A text section, verified.
  Result<std::string> ReadText(const std::string& name) const;

 private:
  PackFile() = default;
  MappedFile file_;
  uint32_t format_version_ = 0;
  nlohmann::json meta_;
  std::vector<PackSection> sections_;
};

// True if PATH is a regular file that starts with the pack magic.
bool IsPackFile(const std::string& path);

// The checkpoint file NAME ("tokenizer.json", "chat_template.jinja", ...) of a model given as a
// Hugging Face directory (DIR/NAME) or as an artifact (its section "file/NAME", verified).
// Front ends read every small file through this so both forms load the same way.
Result<std::string> ReadModelTextFile(const std::string& model, const std::string& name);
bool ModelHasFile(const std::string& model, const std::string& name);

// Recomputes every section checksum and the table and header checksums of PATH in place. For
// tests that corrupt a weight on purpose and must get past the checksums to the numbers.
Status RewritePackChecksums(const std::string& path);

}  // namespace g4
