#include "io/pack.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "base/hash.h"

namespace g4 {

std::string MetaString(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int MetaInt(const nlohmann::json& j, const char* key, int fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    return v <= static_cast<uint64_t>(INT_MAX) ? static_cast<int>(v) : INT_MIN;
  }
  if (it->is_number_integer()) {
    const int64_t v = it->get<int64_t>();
    return v >= INT_MIN && v <= INT_MAX ? static_cast<int>(v) : INT_MIN;
  }
  return INT_MIN;
}

namespace {

struct Header {
  char magic[8];
  uint32_t format_version;
  uint32_t header_bytes;
  uint64_t table_offset;
  uint64_t table_bytes;
  uint64_t table_checksum;
  uint64_t file_bytes;
  uint64_t reserved;
  uint64_t header_checksum;
};
static_assert(sizeof(Header) == kPackHeaderBytes);

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

bool ParseHex(const std::string& s, uint64_t* v) {
  if (s.size() != 16) return false;
  char* end = nullptr;
  *v = std::strtoull(s.c_str(), &end, 16);
  return end == s.c_str() + 16;
}

uint64_t AlignUp(uint64_t v) { return (v + kPackAlignment - 1) / kPackAlignment * kPackAlignment; }

std::string DirOf(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Header MakeHeader(uint64_t table_offset, uint64_t table_bytes, uint64_t table_checksum,
                  uint64_t file_bytes) {
  Header h{};
  std::memcpy(h.magic, kPackMagic, 8);
  h.format_version = kPackFormatVersion;
  h.header_bytes = kPackHeaderBytes;
  h.table_offset = table_offset;
  h.table_bytes = table_bytes;
  h.table_checksum = table_checksum;
  h.file_bytes = file_bytes;
  h.header_checksum = Xxh64(&h, offsetof(Header, header_checksum));
  return h;
}

uint64_t ChecksumWithPool(const void* data, size_t bytes, ThreadPool* pool) {
  const size_t n = ChecksumChunks(bytes);
  if (!pool || n <= 1) return ChunkedChecksum(data, bytes);
  std::vector<uint64_t> hashes(n);
  pool->ParallelFor(static_cast<int64_t>(n),
                    [&](int64_t i, int) { hashes[i] = ChunkHash(data, bytes, i); });
  return CombineChunkHashes(hashes.data(), n);
}

Status WriteAll(int fd, uint64_t offset, const void* data, size_t bytes) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    ssize_t n = ::pwrite(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      // A full disk (ENOSPC, EDQUOT) and a file-size limit (EFBIG, with SIGXFSZ ignored) end
      // the same way: the caller discards the file; the message says which it was.
      if (err == ENOSPC || err == EDQUOT)
        return Status::Errorf(std::strerror(err), ": the disk is full");
      if (err == EFBIG)
        return Status::Errorf(std::strerror(err), ": the file-size limit (ulimit -f) was reached");
      return Status::Error(std::strerror(err));
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Writer

Result<std::unique_ptr<PackWriter>> PackWriter::Create(const std::string& path,
                                                       const PackWriteOptions& options) {
  std::unique_ptr<PackWriter> w(new PackWriter());
  w->path_ = path;
  w->options_ = options;
  // An unnamed file in the target directory: nothing is visible until Commit links it, so even
  // a killed process leaves nothing behind. Filesystems without O_TMPFILE get a named temporary.
  w->fd_ = ::open(DirOf(path).c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
  if (w->fd_ < 0) {
    w->temp_path_ = path + ".tmp." + std::to_string(::getpid());
    w->fd_ = ::open(w->temp_path_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644);
    if (w->fd_ < 0) {
      const int err = errno;
      return Status::Errorf(path, ": cannot create the artifact: ", std::strerror(err));
    }
  }
  return w;
}

PackWriter::~PackWriter() {
  if (!committed_) Discard();
}

void PackWriter::Discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) std::remove(temp_path_.c_str());
}

Status PackWriter::WriteAt(uint64_t offset, const void* data, size_t bytes) {
  if (fd_ < 0) return Status::Errorf(path_, ": writer already failed or committed");
  Status st;
  if (options_.fail_after_bytes > 0 && offset + bytes > options_.fail_after_bytes) {
    st = Status::Errorf(std::strerror(ENOSPC), ": the disk is full");
  } else {
    st = WriteAll(fd_, offset, data, bytes);
  }
  if (!st.ok()) {
    Discard();
    return Status::Errorf(path_, ": write failed (", st.message(), "); no file was left behind");
  }
  return OkStatus();
}

Status PackWriter::Add(const std::string& name, const void* data, size_t bytes,
                       nlohmann::json meta) {
  const uint64_t offset = AlignUp(end_);
  if (bytes > 0) G4_RETURN_IF_ERROR(WriteAt(offset, data, bytes));
  sections_.push_back({{"name", name},
                       {"offset", offset},
                       {"bytes", bytes},
                       {"checksum", Hex(ChecksumWithPool(data, bytes, options_.pool))},
                       {"meta", std::move(meta)}});
  end_ = offset + bytes;
  return OkStatus();
}

Status PackWriter::Commit(const nlohmann::json& meta) {
  const nlohmann::json table = {
      {"format_version", kPackFormatVersion}, {"meta", meta}, {"sections", sections_}};
  const std::string text = table.dump();
  const uint64_t table_offset = AlignUp(end_);
  G4_RETURN_IF_ERROR(WriteAt(table_offset, text.data(), text.size()));
  const uint64_t file_bytes = table_offset + text.size();
  const Header h =
      MakeHeader(table_offset, text.size(), Xxh64(text.data(), text.size()), file_bytes);
  G4_RETURN_IF_ERROR(WriteAt(0, &h, sizeof h));
  if (::fsync(fd_) != 0) {
    const int err = errno;
    Discard();
    return Status::Errorf(path_, ": fsync failed: ", std::strerror(err),
                          "; no file was left behind");
  }
  if (temp_path_.empty()) {
    // Link the unnamed file under a temporary name, then rename over PATH (linkat cannot replace).
    const std::string link_name = path_ + ".tmp." + std::to_string(::getpid());
    std::remove(link_name.c_str());
    const std::string proc = "/proc/self/fd/" + std::to_string(fd_);
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, link_name.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      const int err = errno;
      Discard();
      return Status::Errorf(path_, ": cannot link the written file: ", std::strerror(err));
    }
    temp_path_ = link_name;
  }
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    Discard();
    return Status::Errorf(path_, ": rename failed: ", std::strerror(err));
  }
  ::close(fd_);
  fd_ = -1;
  committed_ = true;
  return OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Reader

Result<std::unique_ptr<PackFile>> PackFile::Open(const std::string& path) {
  std::unique_ptr<PackFile> pack(new PackFile());
  G4_ASSIGN_OR_RETURN(pack->file_, MappedFile::Open(path));
  const uint8_t* base = pack->file_.data();
  const uint64_t size = pack->file_.size();
  if (size < 8 || std::memcmp(base, kPackMagic, 8) != 0)
    return Status::Errorf(path, ": not a g4 packed artifact (no G4PACK magic)");
  if (size < kPackHeaderBytes)
    return Status::Errorf(path, ": truncated: ", size, " bytes, shorter than the header");
  Header h;
  std::memcpy(&h, base, sizeof h);
  // The version is read before the checksum so that a newer layout is named as such.
  if (h.format_version != kPackFormatVersion)
    return Status::Errorf(path, ": written in g4 pack format version ", h.format_version,
                          ", this g4 reads version ", kPackFormatVersion,
                          " only; re-run `g4 pack` with this g4 (or use the g4 that wrote it)");
  if (h.header_checksum != Xxh64(&h, offsetof(Header, header_checksum)) ||
      h.header_bytes != kPackHeaderBytes)
    return Status::Errorf(
        path, ": the header is damaged (checksum mismatch); re-create the artifact with `g4 pack`");
  if (size < h.file_bytes)
    return Status::Errorf(path, ": truncated: ", size, " bytes on disk, the header says ",
                          h.file_bytes,
                          " (an interrupted copy or download?); copy it again or re-run `g4 pack`");
  if (size > h.file_bytes)
    return Status::Errorf(path, ": ", size - h.file_bytes,
                          " unexpected bytes after the end the header records (", h.file_bytes,
                          "); the file was modified or appended to");
  // Written so that no sum can wrap: every offset and length below comes from the file.
  if (h.table_offset < kPackHeaderBytes || h.table_offset > h.file_bytes ||
      h.table_bytes > h.file_bytes - h.table_offset)
    return Status::Errorf(path,
                          ": the section table lies outside the file; the header is inconsistent");
  const char* table_text = reinterpret_cast<const char*>(base + h.table_offset);
  if (Xxh64(table_text, h.table_bytes) != h.table_checksum)
    return Status::Errorf(
        path, ": the section table is damaged (checksum mismatch); re-create the artifact");
  nlohmann::json table =
      nlohmann::json::parse(table_text, table_text + h.table_bytes, nullptr, false);
  if (table.is_discarded() || !table.is_object() || !table.contains("sections") ||
      !table["sections"].is_array())
    return Status::Errorf(path, ": the section table is not valid JSON");
  pack->format_version_ = h.format_version;
  pack->meta_ = table.value("meta", nlohmann::json::object());
  if (!pack->meta_.is_object())
    return Status::Errorf(path, ": the artifact's meta is not a JSON object");
  for (const auto& s : table["sections"]) {
    PackSection section;
    try {
      section.name = s.at("name").get<std::string>();
      // Unsigned integers only: get<uint64_t> would wrap -1 and cast 1e300 (undefined behaviour).
      if (!s.at("offset").is_number_unsigned() || !s.at("bytes").is_number_unsigned())
        return Status::Errorf(path, ": section ", section.name,
                              ": offset and bytes must be unsigned integers");
      section.offset = s.at("offset").get<uint64_t>();
      section.bytes = s.at("bytes").get<uint64_t>();
      if (!ParseHex(s.at("checksum").get<std::string>(), &section.checksum))
        return Status::Errorf(path, ": section ", section.name, ": malformed checksum");
      section.meta = s.value("meta", nlohmann::json::object());
    } catch (const nlohmann::json::exception& e) {
      return Status::Errorf(path, ": malformed section table entry: ", e.what());
    }
    if (!section.meta.is_object())
      return Status::Errorf(path, ": section ", section.name, ": meta is not a JSON object");
    if (section.offset < kPackHeaderBytes || section.offset > h.table_offset ||
        section.bytes > h.table_offset - section.offset)
      return Status::Errorf(path, ": section ", section.name, " lies outside the data area");
    // The writer page-aligns every section and the kernels may rely on it for their loads.
    if (section.offset % kPackAlignment != 0)
      return Status::Errorf(path, ": section ", section.name, " at offset ", section.offset,
                            " is not aligned to ", kPackAlignment,
                            " bytes; the table is inconsistent");
    section.data = base + section.offset;
    pack->sections_.push_back(std::move(section));
  }
  return pack;
}

const PackSection* PackFile::Find(const std::string& name) const {
  for (const auto& s : sections_)
    if (s.name == name) return &s;
  return nullptr;
}

static Status ChecksumMismatch(const PackFile& pack, const PackSection& s, uint64_t got) {
  return Status::Errorf(pack.path(), ": checksum mismatch in section ", s.name, " (", s.bytes,
                        " bytes at offset ", s.offset, "): expected ", Hex(s.checksum),
                        ", computed ", Hex(got),
                        "; the artifact is damaged: copy it again or re-run `g4 pack`");
}

Status PackFile::Verify(const PackSection& s) const {
  const uint64_t got = ChunkedChecksum(s.data, s.bytes);
  return got == s.checksum ? OkStatus() : ChecksumMismatch(*this, s, got);
}

Status PackFile::VerifyAll(ThreadPool* pool) const {
  return VerifySections(pool, [](const PackSection&) { return true; });
}

Status PackFile::VerifySections(ThreadPool* pool,
                                const std::function<bool(const PackSection&)>& which) const {
  // One task per chunk of every section, so one huge section (the PLE table) uses every thread.
  struct Task {
    size_t section, chunk;
  };
  std::vector<Task> tasks;
  std::vector<std::vector<uint64_t>> hashes(sections_.size());
  std::vector<bool> chosen(sections_.size());
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (size_t i = 0; i < sections_.size(); ++i) {
    chosen[i] = which(sections_[i]);
    if (!chosen[i]) continue;
    hashes[i].resize(ChecksumChunks(sections_[i].bytes));
    for (size_t c = 0; c < hashes[i].size(); ++c) tasks.push_back({i, c});
    if (sections_[i].bytes > 0) {
      const uintptr_t begin = reinterpret_cast<uintptr_t>(sections_[i].data) / page * page;
      const uintptr_t end = reinterpret_cast<uintptr_t>(sections_[i].data) + sections_[i].bytes;
      ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
    }
  }
  auto run = [&](int64_t t, int) {
    const Task& task = tasks[t];
    const PackSection& s = sections_[task.section];
    hashes[task.section][task.chunk] = ChunkHash(s.data, s.bytes, task.chunk);
    // Unmap the chunk from this process once hashed: the page cache keeps it and what the
    // engine uses faults back in, but the peak RSS of a load is not the whole file (the PLE
    // table, most of it, is read one row per token). Sections start on pages of their own.
    const uintptr_t begin = reinterpret_cast<uintptr_t>(s.data) + task.chunk * kChecksumChunkBytes;
    const uintptr_t end =
        std::min(begin + kChecksumChunkBytes, reinterpret_cast<uintptr_t>(s.data) + s.bytes);
    ::madvise(reinterpret_cast<void*>(begin / page * page), end - begin / page * page,
              MADV_DONTNEED);
  };
  if (pool) {
    pool->ParallelFor(static_cast<int64_t>(tasks.size()), run);
  } else {
    for (size_t t = 0; t < tasks.size(); ++t) run(static_cast<int64_t>(t), 0);
  }
  for (size_t i = 0; i < sections_.size(); ++i) {
    if (!chosen[i]) continue;
    const uint64_t got = CombineChunkHashes(hashes[i].data(), hashes[i].size());
    if (got != sections_[i].checksum) return ChecksumMismatch(*this, sections_[i], got);
  }
  return OkStatus();
}

Result<std::string> PackFile::ReadText(const std::string& name) const {
  const PackSection* s = Find(name);
  if (!s) return Status::Errorf(path(), ": the artifact has no section ", name);
  G4_RETURN_IF_ERROR(Verify(*s));
  return std::string(reinterpret_cast<const char*>(s->data), s->bytes);
}

bool IsPackFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char magic[8] = {};
  const bool ok = std::fread(magic, 1, 8, f) == 8 && std::memcmp(magic, kPackMagic, 8) == 0;
  std::fclose(f);
  return ok;
}

Result<std::string> ReadModelTextFile(const std::string& model, const std::string& name) {
  if (!IsPackFile(model)) return ReadFileToString(model + "/" + name);
  G4_ASSIGN_OR_RETURN(auto pack, PackFile::Open(model));
  if (!pack->Find("file/" + name)) return Status::Errorf(model, ": the artifact holds no ", name);
  return pack->ReadText("file/" + name);
}

bool ModelHasFile(const std::string& model, const std::string& name) {
  if (!IsPackFile(model)) return FileExists(model + "/" + name);
  auto pack = PackFile::Open(model);
  return pack.ok() && (*pack)->Find("file/" + name) != nullptr;
}

Status RewritePackChecksums(const std::string& path) {
  nlohmann::json table;
  uint64_t table_offset = 0;
  {
    G4_ASSIGN_OR_RETURN(auto pack, PackFile::Open(path));  // header and table must be intact
    Header h;
    MappedFile raw;
    G4_ASSIGN_OR_RETURN(raw, MappedFile::Open(path));
    std::memcpy(&h, raw.data(), sizeof h);
    table_offset = h.table_offset;
    table = nlohmann::json::parse(raw.data() + h.table_offset,
                                  raw.data() + h.table_offset + h.table_bytes);
    for (auto& s : table["sections"]) {
      const uint64_t offset = s["offset"].get<uint64_t>(), bytes = s["bytes"].get<uint64_t>();
      s["checksum"] = Hex(ChunkedChecksum(raw.data() + offset, bytes));
    }
  }
  const std::string text = table.dump();
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Status::Errorf(path, ": cannot open for writing: ", std::strerror(errno));
  const uint64_t file_bytes = table_offset + text.size();
  const Header h =
      MakeHeader(table_offset, text.size(), Xxh64(text.data(), text.size()), file_bytes);
  Status st = WriteAll(fd, table_offset, text.data(), text.size());
  if (st.ok()) st = WriteAll(fd, 0, &h, sizeof h);
  if (st.ok() && ::ftruncate(fd, static_cast<off_t>(file_bytes)) != 0)
    st = Status::Error(std::strerror(errno));
  ::close(fd);
  return st.WithContext(path);
}

}  // namespace g4
