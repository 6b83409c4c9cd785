#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "testing/checkpoints.h"

namespace g4 {
namespace {

// Removed when the test process exits (tests/testing/checkpoints.h).
std::string TempDir() {
  return TestTempDir(Str("safetensors_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
}

TensorToWrite Tensor(const std::string& name, std::vector<int64_t> shape) {
  TensorToWrite t{name, DType::kF32, shape, {}};
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.5f;
  t.data.resize(n * 4);
  std::memcpy(t.data.data(), v.data(), n * 4);
  return t;
}

void WriteRaw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  uint64_t len = header.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header;
  out << std::string(data_bytes, '\0');
}

TEST(Safetensors, RoundTripSingleFile) {
  std::string dir = TempDir();
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", {Tensor("a", {2, 3}), Tensor("b", {4})}).ok());
  auto store = TensorStore::OpenDir(dir);
  ASSERT_TRUE(store.ok()) << store.status().message();
  const TensorView* a = (*store)->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->ValueAt(5), 2.5);
  EXPECT_EQ((*store)->Find("b")->ValueAt(3), 1.5);
  EXPECT_EQ((*store)->Find("c"), nullptr);
}

TEST(Safetensors, ShardedIndex) {
  std::string dir = TempDir();
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors", {Tensor("a", {2})}).ok());
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors", {Tensor("b", {3})}).ok());
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})";
  auto store = TensorStore::OpenDir(dir);
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_EQ((*store)->Find("b")->ValueAt(2), 1.0);

  // A missing shard is named.
  std::remove((dir + "/model-00002-of-00002.safetensors").c_str());
  store = TensorStore::OpenDir(dir);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("model-00002-of-00002.safetensors"), std::string::npos);
}

TEST(Safetensors, TruncatedFileIsAnError) {
  std::string dir = TempDir();
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", {Tensor("weight", {64, 64})}).ok());
  ASSERT_EQ(::truncate((dir + "/model.safetensors").c_str(), 2000), 0);
  auto f = SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("weight"), std::string::npos);
  EXPECT_NE(f.status().message().find("truncated"), std::string::npos);
}

TEST(Safetensors, LyingHeadersAreErrors) {
  std::string dir = TempDir();
  const std::string p = dir + "/x.safetensors";
  struct Case {
    std::string header;
    size_t data;
    const char* expect;
  } cases[] = {
      {R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}})", 16, "need 16"},
      {R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 64]}})", 16, "past the data section"},
      {R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}})", 16, "reversed"},
      {R"({"t": {"dtype": "Q9", "shape": [4], "data_offsets": [0, 16]}})", 16, "unsupported dtype"},
      {R"({"t": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", 16, "non-integer or negative"},
      {R"({"t": {"dtype": "F32"}})", 16, "malformed"},
      {R"([1, 2, 3])", 0, "not a JSON object"},
      {R"({"t": )", 0, "not a JSON object"},
  };
  for (const auto& c : cases) {
    WriteRaw(p, c.header, c.data);
    auto f = SafetensorsFile::Open(p);
    ASSERT_FALSE(f.ok()) << c.header;
    EXPECT_NE(f.status().message().find(c.expect), std::string::npos) << f.status().message();
  }
  // Header length past the end of the file.
  {
    std::ofstream out(p, std::ios::binary);
    uint64_t len = 1 << 30;
    out.write(reinterpret_cast<const char*>(&len), 8);
  }
  auto f = SafetensorsFile::Open(p);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("exceeds the file size"), std::string::npos);
  EXPECT_FALSE(SafetensorsFile::Open(dir + "/absent.safetensors").ok());
  EXPECT_FALSE(TensorStore::OpenDir(dir + "/nowhere").ok());
}

}  // namespace
}  // namespace g4
