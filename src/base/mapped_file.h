// Read-only memory map of a whole file. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace g4 {

class MappedFile {
 public:
  static Result<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // The file's inode and modification time at open, to detect a file replaced while mapped.
  uint64_t inode() const { return inode_; }
  int64_t mtime_ns() const { return mtime_ns_; }
  // Hint that the mapped range will be read at random (the PLE table): no read-ahead.
  void AdviseRandom() const;
  // Hint that [p, p + n), inside this mapping, is about to be read whole: the kernel starts
  // reading it in large requests now. For a file larger than the page cache, where page faults
  // one read-ahead window at a time run at a small fraction of the disk's rate.
  static void AdviseWillNeed(const void* p, size_t n);

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  uint64_t inode_ = 0;
  int64_t mtime_ns_ = 0;
};

// Copies n bytes out of a file mapping, surviving the file being truncated or rewritten under
// the mapping (reading a page past the file's new end raises SIGBUS): returns false instead of
// letting the signal kill the process. For the one table the engine leaves mapped (PLE); a
// SIGBUS outside such a copy still goes to the previous handler (or kills the process).
bool CopyFromMapping(void* dst, const void* src, size_t n);

// Whether `file` on disk is still the file that was mapped: same inode, size and mtime. A file
// replaced (rename over it) or rewritten in place (cp over it, truncate) fails this check;
// the error names the file and says what changed.
Status CheckFileUnchanged(const MappedFile& file);

// Reads a whole (small) file into a string.
Result<std::string> ReadFileToString(const std::string& path);
// Writes via a temporary file and rename, so a failure never leaves a partial file behind.
Status WriteFileAtomic(const std::string& path, const std::string& contents);
bool FileExists(const std::string& path);

}  // namespace g4
