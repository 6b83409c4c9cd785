#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

#include "base/mapped_file.h"
#include "io/safetensors.h"
#include "testing/checkpoints.h"

namespace g4 {
namespace {

// The streaming writer (used for full-size synthetic checkpoints) produces the same file as the
// in-memory one, whatever the chunk size.
TEST(SafetensorsStreaming, SameBytesAsInMemoryWriterForAnyChunkSize) {
  std::vector<TensorToWrite> tensors;
  uint64_t seed = 1;  // unsigned: the LCG wraps (signed overflow is UB, and UBSan stops on it)
  for (const auto& [name, shape, dtype] :
       std::vector<std::tuple<std::string, std::vector<int64_t>, DType>>{
           {"a", {3, 5}, DType::kBF16}, {"b", {1}, DType::kF32}, {"c", {7, 9}, DType::kF16}}) {
    TensorToWrite t{name, dtype, shape, {}};
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    t.data.resize(static_cast<size_t>(n) * DTypeSize(dtype));
    for (auto& b : t.data) b = static_cast<uint8_t>((seed = seed * 1103515245 + 12345) >> 16);
    tensors.push_back(std::move(t));
  }
  const std::string dir = TestTempDir("streaming");
  ASSERT_TRUE(WriteSafetensors(dir + "/ref.safetensors", tensors, {{"format", "pt"}}).ok());
  auto expect = ReadFileToString(dir + "/ref.safetensors");
  ASSERT_TRUE(expect.ok());
  for (size_t chunk : {8u, 24u, 1u << 20}) {
    std::vector<TensorToWrite> specs;
    for (const auto& t : tensors) specs.push_back({t.name, t.dtype, t.shape, {}});
    const std::string path = dir + "/s" + std::to_string(chunk) + ".safetensors";
    Status st = WriteSafetensorsStreaming(
        path, specs,
        [&](size_t i, uint64_t offset, uint8_t* out, size_t bytes) {
          std::memcpy(out, tensors[i].data.data() + offset, bytes);
          return OkStatus();
        },
        {{"format", "pt"}}, chunk);
    ASSERT_TRUE(st.ok()) << st.message();
    auto got = ReadFileToString(path);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, *expect) << "chunk " << chunk;
  }
  // A failing fill leaves no file behind.
  std::vector<TensorToWrite> specs = {{"x", DType::kF32, {4}, {}}};
  Status st = WriteSafetensorsStreaming(
      dir + "/fail.safetensors", specs,
      [](size_t, uint64_t, uint8_t*, size_t) { return Status::Error("boom"); });
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(FileExists(dir + "/fail.safetensors"));
  EXPECT_FALSE(FileExists(dir + "/fail.safetensors.tmp"));
}

}  // namespace
}  // namespace g4
