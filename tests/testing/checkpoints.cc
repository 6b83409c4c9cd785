#include "testing/checkpoints.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "base/half.h"
#include "base/mapped_file.h"
#include "io/safetensors.h"
#include "model/synth_assistant.h"
#include "testing/paths.h"

namespace g4 {

namespace fs = std::filesystem;

namespace {

std::string Env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// Removes this process's scratch directory at exit.
struct ProcessDir {
  std::string path;
  ProcessDir() {
#ifdef G4_BINARY_DIR
    const std::string base = Env("G4_BINARY_DIR", G4_BINARY_DIR);
#else
    const std::string base = Env("G4_BINARY_DIR", fs::temp_directory_path().string());
#endif
    path = base + "/testdata/" + std::to_string(::getpid());
    std::error_code ec;
    fs::create_directories(path, ec);
  }
  ~ProcessDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const std::string& ProcessScratch() {
  static ProcessDir dir;
  return dir.path;
}

std::string Key(const std::string& preset, const SynthOptions& o) {
  return Str(preset, "-s", o.seed, "-v", o.vocab, "-",
             o.config_form == SynthConfigForm::kFlat ? "flat" : "perlayer", "-n", o.shards, "-",
             DTypeName(o.dtype));
}

// Identifies what the generator would write today: the JSON files, every tensor's name, shape and
// first values, and the tokenizer file. A change to synth.cc changes it, so a stale cache entry
// is never reused.
std::string Fingerprint(const SynthSpec& spec, const SynthOptions& o) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto add = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 0x100000001b3ull;
  };
  auto add_str = [&](const std::string& s) { add(s.data(), s.size()); };
  add_str(SynthConfigJson(spec, o));
  add_str(SynthGenerationConfigJson(spec, o));
  for (const SynthTensor& t : SynthTensors(spec, o)) {
    add_str(t.name);
    add(t.shape.data(), t.shape.size() * sizeof(int64_t));
    for (uint64_t i = 0; i < 4 && i < static_cast<uint64_t>(t.numel()); ++i) {
      const float v = SynthValue(t, o.seed, i);
      add(&v, sizeof v);
    }
  }
  std::error_code ec;
  const auto size = fs::file_size(o.tokenizer, ec);
  add(&size, sizeof size);
  const auto mtime = fs::last_write_time(o.tokenizer, ec).time_since_epoch().count();
  add(&mtime, sizeof mtime);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string CacheRoot() {
#ifdef G4_BINARY_DIR
  return Env("G4_BINARY_DIR", G4_BINARY_DIR) + "/testdata/cache";
#else
  return Env("G4_BINARY_DIR", fs::temp_directory_path().string()) + "/testdata/cache";
#endif
}

}  // namespace

std::string TestTokenizerPath() { return AssetsDir() + "/tokenizer/gemma4.json"; }

std::string TestTempDir(const std::string& name) {
  const std::string dir = ProcessScratch() + "/" + name;
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  return dir;
}

std::string TinyAssistant(const std::string& preset, const std::string& tag) {
  auto spec = SynthAssistantPreset(preset + "-assistant", "tiny");
  if (!spec.ok()) {
    ADD_FAILURE() << "TinyAssistant: " << spec.status().message();
    return "";
  }
  const std::string dir = TestTempDir(preset + "-assistant-" + tag);
  Status st = WriteSynthAssistant(*spec, {.vocab = 512}, dir);
  if (!st.ok()) {
    ADD_FAILURE() << "TinyAssistant(" << preset << "): " << st.message();
    return "";
  }
  return dir;
}

std::string TinyCheckpoint(const std::string& preset, const SynthOptions& options) {
  static std::mutex mu;
  static std::map<std::string, std::string> cache;
  SynthOptions o = options;
  if (o.tokenizer.empty()) o.tokenizer = TestTokenizerPath();
  std::lock_guard<std::mutex> lock(mu);
  auto spec = SynthPreset(preset, "tiny");
  if (!spec.ok()) {
    ADD_FAILURE() << "TinyCheckpoint: " << spec.status().message();
    return "";
  }
  if (!FileExists(o.tokenizer)) {
    ADD_FAILURE() << "TinyCheckpoint: test tokenizer " << o.tokenizer
                  << " is missing (run the set-up script, or set G4_ASSETS)";
    return "";
  }
  const std::string key = Key(preset, o) + "-" + Fingerprint(*spec, o);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  // Shared between test processes: complete entries are immutable; a new one is written under a
  // private name and renamed into place, so concurrent writers cannot expose a partial one.
  const std::string dir = CacheRoot() + "/" + key;
  if (!FileExists(dir + "/.complete")) {
    const std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
    std::error_code ec;
    fs::remove_all(tmp, ec);
    Status st = WriteSynthCheckpoint(*spec, o, tmp);
    if (st.ok()) st = WriteFileAtomic(tmp + "/.complete", key + "\n");
    if (!st.ok()) {
      fs::remove_all(tmp, ec);
      ADD_FAILURE() << "TinyCheckpoint(" << preset << "): " << st.message();
      return "";
    }
    fs::rename(tmp, dir, ec);
    if (ec) {
      fs::remove_all(tmp, ec);  // another process got there first
    } else {
      // Drop entries of the same preset and options made by an older generator.
      const std::string prefix = Key(preset, o) + "-";
      for (const auto& e : fs::directory_iterator(CacheRoot(), ec)) {
        const std::string name = e.path().filename().string();
        if (name != key && name.rfind(prefix, 0) == 0 && name.size() == key.size())
          fs::remove_all(e.path(), ec);
      }
    }
    if (!FileExists(dir + "/.complete")) {
      ADD_FAILURE() << "TinyCheckpoint(" << preset << "): could not publish " << dir;
      return "";
    }
  }
  cache[key] = dir;
  return dir;
}

Status CopyCheckpoint(const std::string& src, const std::string& dst, const TensorEdit& edit) {
  std::error_code ec;
  fs::create_directories(dst, ec);
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json"}) {
    if (!FileExists(src + "/" + f)) continue;
    fs::copy_file(src + "/" + f, dst + "/" + f, fs::copy_options::overwrite_existing, ec);
    if (ec) return Status::Errorf("CopyCheckpoint: ", f, ": ", ec.message());
  }
  G4_ASSIGN_OR_RETURN(auto store, TensorStore::OpenDir(src));
  std::vector<TensorToWrite> out;
  for (const std::string& name : store->Names()) {
    const TensorView* t = store->Find(name);
    TensorToWrite w{name, t->dtype, t->shape, std::vector<uint8_t>(t->data, t->data + t->bytes)};
    const bool is_float =
        t->dtype == DType::kBF16 || t->dtype == DType::kF16 || t->dtype == DType::kF32;
    if (edit && is_float) {
      std::vector<float> values(static_cast<size_t>(t->numel()));
      for (int64_t i = 0; i < t->numel(); ++i) values[i] = static_cast<float>(t->ValueAt(i));
      if (edit(name, values)) {
        for (size_t i = 0; i < values.size(); ++i) {
          if (t->dtype == DType::kF32) {
            std::memcpy(w.data.data() + 4 * i, &values[i], 4);
          } else {
            const uint16_t h =
                t->dtype == DType::kBF16 ? F32ToBf16(values[i]) : F32ToF16(values[i]);
            std::memcpy(w.data.data() + 2 * i, &h, 2);
          }
        }
      }
    }
    out.push_back(std::move(w));
  }
  fs::remove(dst + "/model.safetensors.index.json", ec);
  return WriteSafetensors(dst + "/model.safetensors", out, {{"format", "pt"}});
}

Status RewriteCheckpoint(const std::string& src, const std::string& dst,
                         const std::function<bool(TensorToWrite&)>& edit) {
  G4_RETURN_IF_ERROR(CopyCheckpoint(src, dst));
  G4_ASSIGN_OR_RETURN(auto store, TensorStore::OpenDir(src));
  std::vector<TensorToWrite> out;
  for (const std::string& name : store->Names()) {
    const TensorView* t = store->Find(name);
    TensorToWrite w{name, t->dtype, t->shape, std::vector<uint8_t>(t->data, t->data + t->bytes)};
    if (edit(w)) out.push_back(std::move(w));
  }
  std::remove((dst + "/model.safetensors.index.json").c_str());
  return WriteSafetensors(dst + "/model.safetensors", out);
}

}  // namespace g4
