// Compares two `g4 logits` outputs (.npy [n, vocab], softcapped) position by position: top-1
// agreement and mean / max KL(a || b) of the next-token distributions, and the same over the
// second half of the positions (deep context). Used to measure what a compact KV cache costs
// against the f32 one (docs/performance.md). Build (after the g4core target):
//   g++ -std=c++20 -O2 -Isrc tools/logits_compare.cc build/libg4_io.a build/libg4_base.a \
//     -o build/logits_compare
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "io/npy.h"

using namespace g4;

namespace {

// log softmax of one row, in double.
std::vector<double> LogSoftmax(const float* x, int64_t n) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
  const double lse = m + std::log(s);
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] - lse;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: logits_compare A.npy B.npy  (KL(A || B), A the baseline)\n");
    return 2;
  }
  auto a = ReadNpyF32(argv[1]);
  auto b = ReadNpyF32(argv[2]);
  if (!a.ok() || !b.ok()) {
    std::fprintf(stderr, "%s\n", (a.ok() ? b.status() : a.status()).message().c_str());
    return 1;
  }
  if (a->shape != b->shape || a->shape.size() != 2) {
    std::fprintf(stderr, "shapes differ or are not [n, vocab]\n");
    return 1;
  }
  const int64_t n = a->shape[0], v = a->shape[1];
  struct Sums {
    int rows = 0, agree = 0;
    double kl = 0, max_kl = 0;
  } all, deep;
  for (int64_t r = 0; r < n; ++r) {
    const float* ra = a->data.data() + r * v;
    const float* rb = b->data.data() + r * v;
    const std::vector<double> la = LogSoftmax(ra, v), lb = LogSoftmax(rb, v);
    double kl = 0;
    for (int64_t i = 0; i < v; ++i) kl += std::exp(la[i]) * (la[i] - lb[i]);
    const bool agree = std::max_element(ra, ra + v) - ra == std::max_element(rb, rb + v) - rb;
    for (Sums* s : {&all, r >= n / 2 ? &deep : nullptr}) {
      if (!s) continue;
      s->rows++;
      s->agree += agree;
      s->kl += kl;
      s->max_kl = std::max(s->max_kl, kl);
    }
  }
  for (auto [name, s] : {std::pair{"all", all}, std::pair{"second half", deep}})
    std::printf("%-12s %4d positions: top-1 agreement %.4f, mean KL %.3e nats, max KL %.3e\n", name,
                s.rows, static_cast<double>(s.agree) / s.rows, s.kl / s.rows, s.max_kl);
  return 0;
}
