// The artifact container: checksums, refusal of damaged / foreign / truncated files, and atomic
// writes that leave nothing behind on failure.
#include "io/pack.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/hash.h"
#include "testing/checkpoints.h"

namespace g4 {
namespace {

TEST(Xxh64, PublishedTestVectors) {
  EXPECT_EQ(Xxh64("", 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(Xxh64("a", 1), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(Xxh64("abc", 3), 0x44BC2CF5AD770999ULL);
  const std::string s = "Nobody inspects the spammish repetition";  // > 32 bytes: the striped path
  EXPECT_EQ(Xxh64(s.data(), s.size()), 0xFBCEA83C8A378BF1ULL);
  std::string bytes;  // 768 bytes: stripes, then an 8-byte tail path
  for (int rep = 0; rep < 3; ++rep)
    for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  EXPECT_EQ(Xxh64(bytes.data(), bytes.size()), 0x8E03C838C596036FULL);  // libxxhash 0.8.1
}

TEST(Xxh64, ChunkedChecksumCoversEveryByte) {
  std::vector<uint8_t> data(kChecksumChunkBytes * 2 + 123, 7);
  const uint64_t a = ChunkedChecksum(data.data(), data.size());
  data[kChecksumChunkBytes + 5] ^= 1;
  EXPECT_NE(a, ChunkedChecksum(data.data(), data.size()));
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  return out;
}

std::string WriteSample(const std::string& dir) {
  const std::string path = dir + "/sample.g4";
  auto w = PackWriter::Create(path);
  EXPECT_TRUE(w.ok()) << w.status().message();
  std::vector<float> big(100000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f;
  EXPECT_TRUE((*w)->AddText("file/hello.txt", "hello").ok());
  EXPECT_TRUE((*w)->Add("big", big.data(), big.size() * 4, {{"kind", "vector"}}).ok());
  EXPECT_TRUE((*w)->Add("empty", nullptr, 0).ok());
  EXPECT_TRUE((*w)->Commit({{"quant", "bf16"}}).ok());
  return path;
}

TEST(Pack, RoundTripAndAlignment) {
  const std::string dir = TestTempDir("pack_roundtrip");
  const std::string path = WriteSample(dir);
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"sample.g4"});  // no temporary left
  EXPECT_TRUE(IsPackFile(path));
  EXPECT_FALSE(IsPackFile(dir));
  auto pack = PackFile::Open(path);
  ASSERT_TRUE(pack.ok()) << pack.status().message();
  EXPECT_EQ((*pack)->format_version(), kPackFormatVersion);
  EXPECT_EQ((*pack)->meta()["quant"], "bf16");
  ASSERT_EQ((*pack)->sections().size(), 3u);
  const PackSection* big = (*pack)->Find("big");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->offset % kPackAlignment, 0u);
  EXPECT_EQ(big->meta["kind"], "vector");
  float v;
  std::memcpy(&v, big->data + 4 * 1000, 4);
  EXPECT_EQ(v, 500.0f);
  ThreadPool pool(2);
  EXPECT_TRUE((*pack)->VerifyAll(&pool).ok());
  auto text = ReadModelTextFile(path, "hello.txt");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "hello");
}

// Resident bytes of this process's mappings that overlap [begin, end), from /proc/self/smaps.
size_t ResidentBytesIn(uintptr_t begin, uintptr_t end) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  size_t kib = 0;
  while (std::getline(smaps, line)) {
    unsigned long a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &a, &b) == 2 && line.find(':') > line.find(' ')) {
      inside = a < end && b > begin;
      continue;
    }
    size_t v = 0;
    if (inside && std::sscanf(line.c_str(), "Rss: %zu kB", &v) == 1) kib += v;
  }
  return kib * 1024;
}

// Verifying reads every byte; it must not leave the whole file resident in the process (the
// PLE table of a packed E4B is 5.6 GB, read one row per token): peak RSS was the file's size.
TEST(Pack, VerifyLeavesTheFileUnmappedFromThisProcess) {
  const std::string dir = TestTempDir("pack_verify_rss");
  const std::string path = dir + "/big.g4";
  {
    auto w = PackWriter::Create(path);
    ASSERT_TRUE(w.ok()) << w.status().message();
    std::vector<uint8_t> big(3 * kChecksumChunkBytes + 12345);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131 + (i >> 13));
    ASSERT_TRUE((*w)->Add("big", big.data(), big.size(), {{"kind", "vector"}}).ok());
    ASSERT_TRUE((*w)->Commit({{"quant", "bf16"}}).ok());
  }
  auto pack = PackFile::Open(path);
  ASSERT_TRUE(pack.ok()) << pack.status().message();
  const PackSection* big = (*pack)->Find("big");
  ASSERT_NE(big, nullptr);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(big->data), end = begin + big->bytes;
  ThreadPool pool(2);
  ASSERT_TRUE((*pack)->VerifyAll(&pool).ok());
  EXPECT_LT(ResidentBytesIn(begin, end), big->bytes / 8);
  // The bytes are still there: they fault back in from the file.
  EXPECT_EQ(big->data[big->bytes - 1],
            static_cast<uint8_t>((big->bytes - 1) * 131 + ((big->bytes - 1) >> 13)));
  EXPECT_TRUE((*pack)->VerifyAll(&pool).ok());
}

TEST(Pack, RefusesTruncatedFile) {
  const std::string dir = TestTempDir("pack_truncated");
  const std::string path = WriteSample(dir);
  ASSERT_EQ(::truncate(path.c_str(), std::filesystem::file_size(path) - 10), 0);
  auto pack = PackFile::Open(path);
  ASSERT_FALSE(pack.ok());
  EXPECT_NE(pack.status().message().find("truncated"), std::string::npos)
      << pack.status().message();
}

void PatchBytes(const std::string& path, uint64_t offset, const void* bytes, size_t n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
}

TEST(Pack, RefusesOtherFormatVersion) {
  const std::string dir = TestTempDir("pack_version");
  const std::string path = WriteSample(dir);
  const uint32_t version = kPackFormatVersion + 1;
  PatchBytes(path, 8, &version, 4);
  auto pack = PackFile::Open(path);
  ASSERT_FALSE(pack.ok());
  EXPECT_NE(pack.status().message().find("format version " + std::to_string(version)),
            std::string::npos)
      << pack.status().message();
}

TEST(Pack, ChecksumMismatchNamesTheSection) {
  const std::string dir = TestTempDir("pack_checksum");
  const std::string path = WriteSample(dir);
  uint64_t offset;
  {
    auto pack = PackFile::Open(path);
    ASSERT_TRUE(pack.ok());
    offset = (*pack)->Find("big")->offset + 777;
  }
  const uint8_t junk = 0x5A;
  PatchBytes(path, offset, &junk, 1);
  auto pack = PackFile::Open(path);  // header and table are intact: opens
  ASSERT_TRUE(pack.ok());
  Status st = (*pack)->VerifyAll(nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("checksum mismatch in section big"), std::string::npos)
      << st.message();
  // After a deliberate edit the checksums can be rewritten (tests of the numerical checks).
  ASSERT_TRUE(RewritePackChecksums(path).ok());
  auto fixed = PackFile::Open(path);
  ASSERT_TRUE(fixed.ok());
  EXPECT_TRUE((*fixed)->VerifyAll(nullptr).ok());
}

TEST(Pack, DamagedTableOrHeaderIsRefused) {
  const std::string dir = TestTempDir("pack_table");
  const std::string path = WriteSample(dir);
  const uint8_t junk = '#';
  PatchBytes(path, std::filesystem::file_size(path) - 5, &junk, 1);
  auto pack = PackFile::Open(path);
  ASSERT_FALSE(pack.ok());
  EXPECT_NE(pack.status().message().find("table is damaged"), std::string::npos)
      << pack.status().message();
  PatchBytes(path, 0, "NOTPACK!", 8);
  pack = PackFile::Open(path);
  ASSERT_FALSE(pack.ok());
  EXPECT_NE(pack.status().message().find("not a g4 packed artifact"), std::string::npos);
}

TEST(Pack, FailedWriteLeavesNoFile) {
  const std::string dir = TestTempDir("pack_fail");
  std::vector<uint8_t> data(1 << 20, 1);
  {
    auto w = PackWriter::Create(dir + "/out.g4", {.fail_after_bytes = 300000});
    ASSERT_TRUE(w.ok());
    Status st = (*w)->Add("a", data.data(), data.size());
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("No space left"), std::string::npos) << st.message();
    EXPECT_FALSE((*w)->Commit({}).ok());
  }
  {
    auto w = PackWriter::Create(dir + "/abandoned.g4");  // destroyed without Commit
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Add("a", data.data(), data.size()).ok());
  }
  EXPECT_TRUE(Entries(dir).empty()) << Entries(dir)[0];
}

}  // namespace
}  // namespace g4
