// Prints the float64 reference logits for a checkpoint and token ids, one row per position; used
// by tools/reference_crosscheck.py. Build (after make g4core):
//   g++ -std=c++20 -O2 -Isrc tools/reference_dump.cc build/libg4core.a -o build/reference_dump
//   -lpthread
#include <cstdio>

#include "reference/reference.h"
using namespace g4;
int main(int argc, char** argv) {
  auto m = reference::ReferenceModel::Load(argv[1]);
  if (!m.ok()) {
    fprintf(stderr, "%s\n", m.status().message().c_str());
    return 1;
  }
  std::vector<int> ids;
  for (int i = 2; i < argc; ++i) ids.push_back(atoi(argv[i]));
  auto l = (*m)->Logits<double>(ids);
  for (auto& row : *l) {
    for (double v : row) printf("%.17g ", v);
    printf("\n");
  }
}
