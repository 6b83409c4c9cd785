// Fuzzes model.safetensors.index.json handling (TensorStore::OpenDir): the input is the index,
// next to two small real shards (and a directory and a non-safetensors file, so that shard
// names may point at those too). Shard names must never escape the model directory.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "base/mapped_file.h"
#include "io/safetensors.h"

namespace {

std::string MakeDir() {
  namespace fs = std::filesystem;
  const char* shm = "/dev/shm";
  fs::path base = fs::exists(shm) ? fs::path(shm) : fs::temp_directory_path();
  fs::path dir = base / ("g4_index_fuzz." + std::to_string(::getpid()));
  fs::create_directories(dir / "subdir");
  auto tensor = [](const char* name, int n) {
    g4::TensorToWrite t{name, g4::DType::kF32, {n}, std::vector<uint8_t>(4 * n, 1)};
    return t;
  };
  if (!g4::WriteSafetensors((dir / "a.safetensors").string(), {tensor("x", 2), tensor("y", 3)}).ok() ||
      !g4::WriteSafetensors((dir / "b.safetensors").string(), {tensor("z", 1)}).ok() ||
      !g4::WriteFileAtomic((dir / "junk.bin").string(), "not a safetensors file").ok())
    std::abort();
  // Outside the model directory: an index naming ../outside.safetensors must not reach it.
  static const fs::path outside = base / ("g4_index_fuzz_outside." + std::to_string(::getpid()));
  if (!g4::WriteSafetensors(outside.string(), {tensor("w", 1)}).ok()) std::abort();
  static const fs::path to_remove = dir;
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(to_remove, ec);
    fs::remove(outside, ec);
  });
  return dir.string();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = MakeDir();
  if (!g4::WriteFileAtomic(dir + "/model.safetensors.index.json",
                           std::string(reinterpret_cast<const char*>(data), size))
           .ok())
    std::abort();
  auto store = g4::TensorStore::OpenDir(dir);
  if (!store.ok()) return 0;
  for (const std::string& name : (*store)->Names()) {
    const g4::TensorView* t = (*store)->Find(name);
    if (t == nullptr || name == "w") std::abort();  // "w" lives outside the directory
    for (const auto& f : (*store)->files())
      if (f->path().find("outside") != std::string::npos) std::abort();
  }
  return 0;
}
