// safetensors reader (zero-copy over mmap) and writer.
// Format: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data section; offsets are relative to the data section.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"

namespace g4 {

enum class DType { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool };

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);  // safetensors spelling: "BF16", "F32", ...
Result<DType> ParseDType(const std::string& name);
// Writes `value` as one little-endian element of F32, F16 or BF16 (rounded to nearest even).
void StoreFloatElement(DType dtype, float value, uint8_t* out);

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the mapped file
  size_t bytes = 0;
  const std::string* file = nullptr;  // path of the file holding it

  int64_t numel() const;
  std::string ShapeString() const;  // ShapeString(shape)
  // Element i converted to float (any float dtype); for sampling values in checks.
  double ValueAt(int64_t i) const;
};

// "[262144, 1536]", for messages.
std::string ShapeString(const std::vector<int64_t>& shape);

class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* Find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const MappedFile& mapped() const { return file_; }

 private:
  MappedFile file_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: model.safetensors, or the shards listed in
// model.safetensors.index.json (its weight_map is checked against the shards' headers).
class TensorStore {
 public:
  static Result<std::unique_ptr<TensorStore>> OpenDir(const std::string& dir);

  const TensorView* Find(const std::string& name) const;
  std::vector<std::string> Names() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // Fails if any mapped shard was replaced or modified on disk since it was opened (see
  // CheckFileUnchanged); the server asks before each request.
  Status CheckUnchanged() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> by_name_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // exactly numel * DTypeSize(dtype) bytes, little-endian
};

// Writes one safetensors file atomically (temporary file + rename).
Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

// Streaming writer for files too large to hold in memory (full-size synthetic checkpoints):
// the header is written first from `specs` (TensorToWrite::data left empty), then `fill` is called
// for each tensor in order with consecutive chunks of at most `chunk_bytes` bytes; it must fill
// `bytes` bytes of tensor `index` starting at byte `offset` of that tensor. Atomic like above.
using TensorChunkFn =
    std::function<Status(size_t index, uint64_t offset, uint8_t* out, size_t bytes)>;
Status WriteSafetensorsStreaming(const std::string& path, const std::vector<TensorToWrite>& specs,
                                 const TensorChunkFn& fill,
                                 const std::map<std::string, std::string>& metadata = {},
                                 size_t chunk_bytes = 8 << 20);

}  // namespace g4
