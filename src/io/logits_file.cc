#include "io/logits_file.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

namespace g4 {
namespace {

constexpr char kMagic[8] = {'G', '4', 'T', 'O', 'P', 'K', 'L', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 48;

template <class T>
void Put(std::vector<unsigned char>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));  // the host is little-endian (x86-64), as the format
}

template <class T>
T Get(const unsigned char*& p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  p += sizeof(T);
  return v;
}

std::vector<unsigned char> HeaderBytes(const LogitsFileHeader& h) {
  std::vector<unsigned char> out(kMagic, kMagic + 8);
  Put(out, kVersion);
  Put(out, h.k);
  Put(out, h.vocab);
  Put(out, h.ctx);
  Put(out, h.stride);
  Put(out, h.flags);
  Put(out, h.positions);
  Put(out, h.tokens_hash);
  return out;
}

}  // namespace

Result<std::unique_ptr<LogitsFileWriter>> LogitsFileWriter::Create(const std::string& path,
                                                                   const LogitsFileHeader& header) {
  std::unique_ptr<LogitsFileWriter> w(new LogitsFileWriter());
  w->path_ = path;
  w->header_ = header;
  w->file_ = std::fopen(path.c_str(), "wb");
  if (!w->file_) return Status::Errorf("cannot create ", path, ": ", std::strerror(errno));
  const auto bytes = HeaderBytes(header);
  if (std::fwrite(bytes.data(), 1, bytes.size(), w->file_) != bytes.size())
    return Status::Errorf("cannot write ", path, ": ", std::strerror(errno));
  return w;
}

Status LogitsFileWriter::Append(const TopKRecord& r) {
  if (r.ids.size() != header_.k || r.logprobs.size() != header_.k)
    return Status::Errorf("internal: a record of ", r.ids.size(), " ids for k = ", header_.k);
  buffer_.clear();
  Put(buffer_, static_cast<int32_t>(r.target));
  Put(buffer_, r.target_logprob);
  Put(buffer_, r.log_rest);
  for (uint32_t i = 0; i < header_.k; ++i) {
    Put(buffer_, static_cast<int32_t>(r.ids[i]));
    Put(buffer_, r.logprobs[i]);
  }
  if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size())
    return Status::Errorf("cannot write ", path_, ": ", std::strerror(errno));
  ++written_;
  return OkStatus();
}

Status LogitsFileWriter::Finish() {
  header_.positions = written_;
  const auto bytes = HeaderBytes(header_);
  bool ok = std::fseek(file_, 0, SEEK_SET) == 0 &&
            std::fwrite(bytes.data(), 1, bytes.size(), file_) == bytes.size();
  ok = (std::fclose(file_) == 0) && ok;
  file_ = nullptr;
  if (!ok) return Status::Errorf("cannot finish ", path_, ": ", std::strerror(errno));
  return OkStatus();
}

LogitsFileWriter::~LogitsFileWriter() {
  if (file_) std::fclose(file_);
}

Result<LogitsFile> ReadLogitsFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Errorf("cannot open ", path, ": ", std::strerror(errno));
  const std::vector<unsigned char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < kHeaderBytes || std::memcmp(data.data(), kMagic, 8) != 0)
    return Status::Errorf(path, " is not a g4 perplexity logits file (no G4TOPKL1 header)");
  const unsigned char* p = data.data() + 8;
  const uint32_t version = Get<uint32_t>(p);
  if (version != kVersion)
    return Status::Errorf(path, ": logits file version ", version, ", this g4 reads version ", kVersion);
  LogitsFile f;
  f.header.k = Get<uint32_t>(p);
  f.header.vocab = Get<uint32_t>(p);
  f.header.ctx = Get<uint32_t>(p);
  f.header.stride = Get<uint32_t>(p);
  f.header.flags = Get<uint32_t>(p);
  f.header.positions = Get<uint64_t>(p);
  f.header.tokens_hash = Get<uint64_t>(p);
  const LogitsFileHeader& h = f.header;
  if (h.k == 0 || h.k > h.vocab)
    return Status::Errorf(path, ": k = ", h.k, " is not in [1, vocab = ", h.vocab, "]");
  const size_t record = LogitsRecordBytes(h.k);
  if (h.positions > (data.size() - kHeaderBytes) / record ||
      data.size() != kHeaderBytes + h.positions * record)
    return Status::Errorf(path, ": ", data.size(), " bytes, but the header promises ", h.positions,
                          " records of ", record, " bytes after ", kHeaderBytes, " (truncated or damaged)");
  f.records.resize(h.positions);
  for (uint64_t i = 0; i < h.positions; ++i) {
    TopKRecord& r = f.records[i];
    r.target = Get<int32_t>(p);
    r.target_logprob = Get<float>(p);
    r.log_rest = Get<float>(p);
    r.ids.resize(h.k);
    r.logprobs.resize(h.k);
    for (uint32_t j = 0; j < h.k; ++j) {
      r.ids[j] = Get<int32_t>(p);
      r.logprobs[j] = Get<float>(p);
    }
    bool ids_ok = r.target >= 0 && static_cast<uint32_t>(r.target) < h.vocab;
    for (int id : r.ids) ids_ok = ids_ok && id >= 0 && static_cast<uint32_t>(id) < h.vocab;
    if (!ids_ok) return Status::Errorf(path, ": record ", i, " holds a token id outside the vocabulary of ", h.vocab);
  }
  return f;
}

}  // namespace g4
