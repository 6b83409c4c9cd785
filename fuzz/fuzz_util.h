// Helpers shared by the libFuzzer targets: the parsers under test read paths, so the input is put
// in an anonymous in-memory file (memfd) and opened through /proc/self/fd, which exercises the
// real open/mmap path without touching the disk.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace g4::fuzz {

class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) {
    fd_ = ::memfd_create("g4fuzz", MFD_CLOEXEC);
    if (fd_ < 0) std::abort();  // the harness itself is broken, not the code under test
    for (size_t done = 0; done < size;) {
      ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// Splits the input at the first occurrence of `separator` (for targets taking two texts).
inline std::pair<std::string_view, std::string_view> SplitInput(std::string_view input,
                                                                std::string_view separator) {
  size_t at = input.find(separator);
  if (at == std::string_view::npos) return {input, {}};
  return {input.substr(0, at), input.substr(at + separator.size())};
}

// Consumes bytes from the front of the input as fuzzer-chosen knobs.
class Knobs {
 public:
  Knobs(const uint8_t*& data, size_t& size) : data_(data), size_(size) {}
  uint8_t Byte() {
    if (size_ == 0) return 0;
    uint8_t b = *data_;
    ++data_;
    --size_;
    return b;
  }

 private:
  const uint8_t*& data_;
  size_t& size_;
};

}  // namespace g4::fuzz
