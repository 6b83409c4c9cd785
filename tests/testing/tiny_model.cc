#include "testing/tiny_model.h"

#include <memory>

#include "model/loader.h"
#include "testing/checkpoints.h"

namespace g4 {

Model* TinyTestModel() {
  static std::unique_ptr<Model> model;
  if (model) return model.get();
  const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
  if (dir.empty()) return nullptr;  // TinyCheckpoint recorded why
  auto loaded = LoadModel(dir, {.threads = 1});
  EXPECT_TRUE(loaded.ok()) << loaded.status().message();
  if (loaded.ok()) model = std::move(loaded).value();
  return model.get();
}

}  // namespace g4
