#include "io/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/half.h"

namespace g4 {

using json = nlohmann::json;

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: return 2;
    case DType::kI8: case DType::kU8: case DType::kBool: return 1;
  }
  return 1;
}

void StoreFloatElement(DType dtype, float value, uint8_t* out) {
  if (dtype == DType::kBF16) {
    const uint16_t h = F32ToBf16(value);
    std::memcpy(out, &h, 2);
  } else if (dtype == DType::kF16) {
    const uint16_t h = F32ToF16(value);
    std::memcpy(out, &h, 2);
  } else {
    std::memcpy(out, &value, 4);
  }
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF64: return "F64";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kI16: return "I16";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
  }
  return "?";
}

Result<DType> ParseDType(const std::string& name) {
  static const std::pair<const char*, DType> kTable[] = {
      {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16}, {"F64", DType::kF64},
      {"I64", DType::kI64}, {"I32", DType::kI32}, {"I16", DType::kI16},   {"I8", DType::kI8},
      {"U8", DType::kU8},   {"BOOL", DType::kBool}};
  for (const auto& [n, d] : kTable)
    if (name == n) return d;
  return Status::Errorf("unsupported dtype \"", name, "\"");
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::ShapeString() const { return g4::ShapeString(shape); }

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

double TensorView::ValueAt(int64_t i) const {
  const uint8_t* p = data + static_cast<size_t>(i) * DTypeSize(dtype);
  switch (dtype) {
    case DType::kF32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::kF64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::kBF16: { uint16_t v; std::memcpy(&v, p, 2); return Bf16ToF32(v); }
    case DType::kF16: { uint16_t v; std::memcpy(&v, p, 2); return F16ToF32(v); }
    case DType::kI64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DType::kI32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::kI16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::kI8: return static_cast<int8_t>(*p);
    case DType::kU8: case DType::kBool: return *p;
  }
  return 0;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  auto st = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  G4_ASSIGN_OR_RETURN(st->file_, MappedFile::Open(path));
  const size_t size = st->file_.size();
  if (size < 8)
    return Status::Errorf(path, ": truncated safetensors file (", size,
                          " bytes, need at least 8 for the header length)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, st->file_.data(), 8);
  if (header_len > size - 8)
    return Status::Errorf(path, ": header length ", header_len, " exceeds the file size ", size,
                          " (truncated or not a safetensors file)");
  const char* header = reinterpret_cast<const char*>(st->file_.data() + 8);
  json j = json::parse(header, header + header_len, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::Errorf(path, ": header is not a JSON object");
  const uint8_t* data_start = st->file_.data() + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (it->is_object())
        for (auto m = it->begin(); m != it->end(); ++m)
          if (m->is_string()) st->metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    const json& e = *it;
    auto where = [&] { return Str(path, ": tensor \"", name, "\""); };
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() ||
        !e.contains("shape") || !e["shape"].is_array() || !e.contains("data_offsets") ||
        !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
      return Status::Errorf(where(), ": malformed header entry (need dtype, shape, data_offsets)");
    TensorView t;
    t.name = name;
    auto dtype = ParseDType(e["dtype"].get<std::string>());
    if (!dtype.ok()) return dtype.status().WithContext(where());
    t.dtype = *dtype;
    uint64_t numel = 1;
    for (const json& d : e["shape"]) {
      if (!d.is_number_unsigned()) return Status::Errorf(where(), ": shape has a non-integer or negative dim");
      uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / dim)
        return Status::Errorf(where(), ": shape overflows");
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const json& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return Status::Errorf(where(), ": data_offsets are not non-negative integers");
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end)
      return Status::Errorf(where(), ": data_offsets [", begin, ", ", end, "] are reversed");
    if (end > data_size)
      return Status::Errorf(where(), ": data_offsets end ", end, " is past the data section (",
                            data_size, " bytes): file truncated or header corrupt");
    uint64_t expect = numel * DTypeSize(t.dtype);
    if (end - begin != expect)
      return Status::Errorf(where(), ": holds ", end - begin, " bytes but dtype ",
                            DTypeName(t.dtype), " and shape ", t.ShapeString(), " need ", expect);
    t.data = data_start + begin;
    t.bytes = static_cast<size_t>(expect);
    st->tensors_.push_back(std::move(t));
  }
  for (size_t i = 0; i < st->tensors_.size(); ++i) {
    st->tensors_[i].file = &st->file_.path();
    st->index_[st->tensors_[i].name] = i;
  }
  return st;
}

const TensorView* SafetensorsFile::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::unique_ptr<TensorStore>> TensorStore::OpenDir(const std::string& dir) {
  auto store = std::unique_ptr<TensorStore>(new TensorStore());
  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string single_path = dir + "/model.safetensors";
  if (FileExists(index_path)) {
    G4_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object())
      return Status::Errorf(index_path, ": not a valid index (need an object \"weight_map\")");
    std::map<std::string, SafetensorsFile*> shards;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string())
        return Status::Errorf(index_path, ": weight_map[\"", it.key(), "\"] is not a file name");
      std::string shard = it->get<std::string>();
      if (shard.find('/') != std::string::npos || shard == ".." || shard.empty())
        return Status::Errorf(index_path, ": shard name \"", shard, "\" is not a plain file name");
      if (!shards.count(shard)) {
        auto file = SafetensorsFile::Open(dir + "/" + shard);
        if (!file.ok()) return file.status().WithContext(Str(index_path, " lists shard ", shard));
        shards[shard] = file->get();
        store->files_.push_back(std::move(file).value());
      }
      const TensorView* t = shards[shard]->Find(it.key());
      if (!t)
        return Status::Errorf(index_path, ": tensor \"", it.key(), "\" is mapped to ", shard,
                              " but that shard does not contain it");
      store->by_name_[it.key()] = t;
    }
  } else if (FileExists(single_path)) {
    G4_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single_path));
    for (const auto& t : file->tensors()) store->by_name_[t.name] = &t;
    store->files_.push_back(std::move(file));
  } else {
    return Status::Errorf(dir, ": no model.safetensors or model.safetensors.index.json");
  }
  return store;
}

const TensorView* TensorStore::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Status TensorStore::CheckUnchanged() const {
  for (const auto& f : files_) G4_RETURN_IF_ERROR(CheckFileUnchanged(f->mapped()));
  return OkStatus();
}

std::vector<std::string> TensorStore::Names() const {
  std::vector<std::string> names;
  for (const auto& [n, t] : by_name_) names.push_back(n);
  return names;
}

Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    if (numel * DTypeSize(t.dtype) != t.data.size())
      return Status::Errorf("WriteSafetensors: tensor ", t.name, " has ", t.data.size(),
                            " bytes, shape needs ", numel * DTypeSize(t.dtype));
    header[t.name] = {{"dtype", DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h += ' ';  // align the data section to 8 bytes
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::Errorf(tmp, ": cannot create");
    uint64_t len = h.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const auto& t : tensors)
      out.write(reinterpret_cast<const char*>(t.data.data()),
                static_cast<std::streamsize>(t.data.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return Status::Errorf(tmp, ": write failed (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::Errorf(path, ": rename failed");
  }
  return OkStatus();
}

}  // namespace g4

namespace g4 {

Status WriteSafetensorsStreaming(const std::string& path, const std::vector<TensorToWrite>& specs,
                                 const TensorChunkFn& fill,
                                 const std::map<std::string, std::string>& metadata,
                                 size_t chunk_bytes) {
  json header = json::object();
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const auto& t : specs) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    const uint64_t bytes = numel * DTypeSize(t.dtype);
    header[t.name] = {{"dtype", DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    sizes.push_back(bytes);
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h += ' ';
  if (chunk_bytes < 8) chunk_bytes = 8;
  chunk_bytes -= chunk_bytes % 8;  // whole elements of every dtype in each chunk
  std::string tmp = path + ".tmp";
  std::FILE* out = std::fopen(tmp.c_str(), "wb");
  if (!out) return Status::Errorf(tmp, ": cannot create");
  auto fail = [&](Status s) {
    std::fclose(out);
    std::remove(tmp.c_str());
    return s;
  };
  uint64_t len = h.size();
  if (std::fwrite(&len, 8, 1, out) != 1 || std::fwrite(h.data(), 1, h.size(), out) != h.size())
    return fail(Status::Errorf(tmp, ": write failed (disk full?)"));
  const uint64_t buf_bytes = std::min<uint64_t>(chunk_bytes, std::max<uint64_t>(offset, 8));
  std::vector<uint8_t> buf(static_cast<size_t>(buf_bytes));
  for (size_t i = 0; i < specs.size(); ++i) {
    for (uint64_t done = 0; done < sizes[i];) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), sizes[i] - done));
      Status st = fill(i, done, buf.data(), n);
      if (!st.ok()) return fail(st.WithContext(Str(path, ": tensor ", specs[i].name)));
      if (std::fwrite(buf.data(), 1, n, out) != n)
        return fail(Status::Errorf(tmp, ": write failed (disk full?)"));
      done += n;
    }
  }
  if (std::fclose(out) != 0) {
    std::remove(tmp.c_str());
    return Status::Errorf(tmp, ": write failed (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::Errorf(path, ": rename failed");
  }
  return OkStatus();
}

}  // namespace g4
