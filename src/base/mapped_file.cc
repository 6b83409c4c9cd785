#include "base/mapped_file.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

namespace g4 {

Result<MappedFile> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Errorf(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::Errorf(path, ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Errorf(path, ": not a regular file");
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  file.inode_ = static_cast<uint64_t>(st.st_ino);
  file.mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (file.size_ > 0) {
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return Status::Errorf(path, ": mmap failed: ", std::strerror(err));
    }
    file.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = other.data_;
    size_ = other.size_;
    path_ = std::move(other.path_);
    inode_ = other.inode_;
    mtime_ns_ = other.mtime_ns_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::AdviseRandom() const {
  if (data_) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_RANDOM);
}

void MappedFile::AdviseWillNeed(const void* p, size_t n) {
  if (!p || n == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);  // advice: errors ignored
}

namespace {

// The jump target of the CopyFromMapping running on this thread, if any.
// volatile + signal fences: the stores around the memcpy must not be merged or dropped (the
// compiler sees no reader of it but the signal handler).
thread_local sigjmp_buf* volatile t_copy_guard = nullptr;
struct sigaction g_previous_sigbus;

void OnSigbus(int sig, siginfo_t* info, void* context) {
  if (t_copy_guard != nullptr) siglongjmp(*t_copy_guard, 1);
  // Not a guarded copy: hand the fault to whoever handled SIGBUS before (a sanitizer, or the
  // default action). Returning re-runs the faulting instruction under that disposition.
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) && g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
    return;
  }
  ::sigaction(SIGBUS, &g_previous_sigbus, nullptr);
}

}  // namespace

bool CopyFromMapping(void* dst, const void* src, size_t n) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
  sigjmp_buf env;
  if (sigsetjmp(env, /*savemask=*/1) != 0) {
    t_copy_guard = nullptr;
    return false;
  }
  t_copy_guard = &env;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_copy_guard = nullptr;
  return true;
}

Status CheckFileUnchanged(const MappedFile& file) {
  struct stat st {};
  if (::stat(file.path().c_str(), &st) != 0)
    return Status::Errorf(file.path(), ": mapped checkpoint file is gone (", std::strerror(errno),
                          "); restart to load the model again");
  const int64_t mtime_ns =
      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (static_cast<uint64_t>(st.st_ino) != file.inode())
    return Status::Errorf(file.path(), ": mapped checkpoint file was replaced on disk (inode ",
                          file.inode(), " -> ", st.st_ino, "); restart to load the new one");
  if (static_cast<size_t>(st.st_size) != file.size() || mtime_ns != file.mtime_ns())
    return Status::Errorf(file.path(), ": mapped checkpoint file was modified on disk (size ",
                          file.size(), " -> ", st.st_size,
                          "); refusing to read it; restart to load the model again");
  return OkStatus();
}

Result<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Errorf(path, ": cannot open: ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::Errorf(path, ": read error");
  return ss.str();
}

Status WriteFileAtomic(const std::string& path, const std::string& contents) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::Errorf(tmp, ": cannot create: ", std::strerror(errno));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return Status::Errorf(tmp, ": write failed (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    return Status::Errorf(path, ": rename failed: ", std::strerror(err));
  }
  return OkStatus();
}

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace g4
