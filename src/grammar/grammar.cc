#include "grammar/grammar.h"

#include <algorithm>

namespace g4::grammar {

int GrammarBuilder::AddRule(const std::string& name) {
  g_.rule_names.push_back(name);
  alts_.emplace_back();
  return g_.rules() - 1;
}

int GrammarBuilder::FindRule(const std::string& name) const {
  for (int i = 0; i < g_.rules(); ++i)
    if (g_.rule_names[i] == name) return i;
  return -1;
}

void GrammarBuilder::AddAlternative(int rule, const std::vector<Element>& elements) {
  alts_[rule].push_back(elements);
}

Element GrammarBuilder::Bytes(const ByteSet& set) {
  for (size_t i = 0; i < g_.sets.size(); ++i)
    if (g_.sets[i] == set) return {Element::kBytes, static_cast<int>(i)};
  g_.sets.push_back(set);
  return {Element::kBytes, static_cast<int>(g_.sets.size() - 1)};
}

namespace {

int Utf8Encode(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) { out[0] = cp; return 1; }
  if (cp < 0x800) { out[0] = 0xC0 | (cp >> 6); out[1] = 0x80 | (cp & 63); return 2; }
  if (cp < 0x10000) {
    out[0] = 0xE0 | (cp >> 12); out[1] = 0x80 | ((cp >> 6) & 63); out[2] = 0x80 | (cp & 63);
    return 3;
  }
  out[0] = 0xF0 | (cp >> 18); out[1] = 0x80 | ((cp >> 12) & 63);
  out[2] = 0x80 | ((cp >> 6) & 63); out[3] = 0x80 | (cp & 63);
  return 4;
}

// Splits [lo, hi] into pieces whose UTF-8 encodings are a product of byte ranges (the classic
// split: same encoded length, then aligned on continuation-byte boundaries).
void SplitUtf8(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<int, int>>>* out) {
  if (lo > hi) return;
  static const uint32_t kLimits[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t limit : kLimits)
    if (lo <= limit && hi > limit) {
      SplitUtf8(lo, limit, out);
      SplitUtf8(limit + 1, hi, out);
      return;
    }
  if (hi >= 0x80)
    for (int i = 1; i < 4; ++i) {
      const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
      if ((lo & ~m) != (hi & ~m)) {
        if ((lo & m) != 0) {
          SplitUtf8(lo, lo | m, out);
          SplitUtf8((lo | m) + 1, hi, out);
          return;
        }
        if ((hi & m) != m) {
          SplitUtf8(lo, (hi & ~m) - 1, out);
          SplitUtf8(hi & ~m, hi, out);
          return;
        }
      }
    }
  uint8_t a[4], b[4];
  const int n = Utf8Encode(lo, a);
  Utf8Encode(hi, b);
  std::vector<std::pair<int, int>> seq;
  for (int i = 0; i < n; ++i) seq.emplace_back(a[i], b[i]);
  out->push_back(seq);
}

}  // namespace

Element GrammarBuilder::CodePoints(const std::vector<std::pair<uint32_t, uint32_t>>& ranges,
                                   const std::string& hint) {
  ByteSet ascii;
  bool any_ascii = false;
  std::vector<std::vector<std::pair<int, int>>> multi;
  for (auto [lo, hi] : ranges) {
    if (lo > hi) std::swap(lo, hi);
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    // Surrogates are not characters; UTF-8 never encodes them.
    std::vector<std::pair<uint32_t, uint32_t>> parts;
    if (lo < 0xD800 && hi >= 0xD800) {
      parts.emplace_back(lo, 0xD7FF);
      if (hi > 0xDFFF) parts.emplace_back(0xE000, hi);
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) parts.emplace_back(0xE000, hi);
    } else {
      parts.emplace_back(lo, hi);
    }
    for (auto [plo, phi] : parts) {
      if (plo < 0x80) {
        ascii.AddRange(plo, std::min<uint32_t>(phi, 0x7F));
        any_ascii = true;
        plo = 0x80;
      }
      SplitUtf8(plo, phi, &multi);
    }
  }
  if (multi.empty()) return Bytes(ascii);
  const int rule = AddRule(hint);
  if (any_ascii) AddAlternative(rule, {Bytes(ascii)});
  for (const auto& seq : multi) {
    std::vector<Element> alt;
    for (auto [lo, hi] : seq) {
      ByteSet s;
      s.AddRange(lo, hi);
      alt.push_back(Bytes(s));
    }
    AddAlternative(rule, alt);
  }
  return Ref(rule);
}

Result<Grammar> GrammarBuilder::Finish(const std::string& root_name) {
  const int n = g_.rules();
  for (int r = 0; r < n; ++r)
    if (alts_[r].empty()) return Status::Errorf("rule '", g_.rule_names[r], "' has no alternatives");
  g_.root = FindRule(root_name);
  if (g_.root < 0) return Status::Errorf("no rule named '", root_name, "'");
  // Nullable rules (those that can match the empty string), to a fixed point.
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const auto& alt : alts_[r]) {
        bool all = true;
        for (const Element& e : alt)
          if (e.kind == Element::kBytes || !nullable[e.value]) { all = false; break; }
        if (all) { nullable[r] = changed = true; break; }
      }
    }
  }
  // Productive rules (those that match at least one string), to a fixed point. A root that
  // matches nothing (`root ::= root`, `root ::= [^\x00-\xff]`) would leave constrained decoding
  // with no allowed token at all, so it is an error here rather than a stall later.
  std::vector<char> productive(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < n; ++r) {
      if (productive[r]) continue;
      for (const auto& alt : alts_[r]) {
        bool all = true;
        for (const Element& e : alt) {
          const bool ok = e.kind == Element::kBytes ? g_.sets[e.value] != ByteSet{} : productive[e.value] != 0;
          if (!ok) { all = false; break; }
        }
        if (all) { productive[r] = changed = true; break; }
      }
    }
  }
  if (!productive[g_.root])
    return Status::Errorf("rule '", g_.rule_names[g_.root], "' matches no string (every alternative needs a rule that never ends or an empty character class)");
  // Left edges: r -> s when s can be entered before r has consumed anything. An edge in tail
  // position (the alternative's last element) pushes no frame, so a cycle of tail edges only
  // revisits the same frame (the recogniser's expansion stops there: `(x?)*` is fine); a cycle
  // through any other edge pushes a frame per round and would never end.
  struct Edge { int to; bool tail; };
  std::vector<std::vector<Edge>> left(n);
  for (int r = 0; r < n; ++r)
    for (const auto& alt : alts_[r])
      for (size_t i = 0; i < alt.size(); ++i) {
        const Element& e = alt[i];
        if (e.kind == Element::kBytes) break;
        left[r].push_back({e.value, i + 1 == alt.size()});
        if (!nullable[e.value]) break;
      }
  // Strongly connected components (iterative Tarjan), then any non-tail edge inside one is an error.
  std::vector<int> index(n, -1), low(n, 0), comp(n, -1), stack;
  std::vector<char> on_stack(n, 0);
  int next_index = 0, comps = 0;
  for (int root = 0; root < n; ++root) {
    if (index[root] >= 0) continue;
    std::vector<std::pair<int, size_t>> work = {{root, 0}};
    index[root] = low[root] = next_index++;
    stack.push_back(root);
    on_stack[root] = 1;
    while (!work.empty()) {
      auto& [v, k] = work.back();
      if (k < left[v].size()) {
        const int w = left[v][k++].to;
        if (index[w] < 0) {
          index[w] = low[w] = next_index++;
          stack.push_back(w);
          on_stack[w] = 1;
          work.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        int w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = 0;
          comp[w] = comps;
        } while (w != v);
        ++comps;
      }
      const int done = v;
      work.pop_back();
      if (!work.empty()) low[work.back().first] = std::min(low[work.back().first], low[done]);
    }
  }
  for (int r = 0; r < n; ++r)
    for (const Edge& e : left[r])
      if (!e.tail && comp[e.to] == comp[r])
        return Status::Errorf("rule '", g_.rule_names[r],
                              "' is left-recursive (it can reach itself without consuming input)");
  g_.rule_alternatives.assign(n, {});
  g_.elements.clear();
  for (int r = 0; r < n; ++r)
    for (const auto& alt : alts_[r]) {
      g_.rule_alternatives[r].push_back(static_cast<int>(g_.elements.size()));
      g_.elements.insert(g_.elements.end(), alt.begin(), alt.end());
      g_.elements.push_back({Element::kEnd, 0});
    }
  return g_;
}

std::string ToGbnf(const Grammar& g) {
  std::string out;
  char buf[8];
  for (int r = 0; r < g.rules(); ++r) {
    out += g.rule_names[r] + " ::=";
    for (size_t a = 0; a < g.rule_alternatives[r].size(); ++a) {
      if (a) out += " |";
      for (int i = g.rule_alternatives[r][a]; g.elements[i].kind != Element::kEnd; ++i) {
        const Element& e = g.elements[i];
        if (e.kind == Element::kRule) {
          out += " " + g.rule_names[e.value];
          continue;
        }
        out += " [";
        const ByteSet& s = g.sets[e.value];
        for (int b = 0; b < 256; ++b) {
          if (!s.Has(b)) continue;
          int hi = b;
          while (hi + 1 < 256 && s.Has(hi + 1)) ++hi;
          snprintf(buf, sizeof buf, "\\x%02X", b);
          out += buf;
          if (hi > b) {
            snprintf(buf, sizeof buf, "-\\x%02X", hi);
            out += buf;
          }
          b = hi;
        }
        out += "]";
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace g4::grammar
