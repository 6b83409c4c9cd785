#include "cli/cli_util.h"

#include <cstdio>

namespace g4::cli {

Result<std::vector<int>> ParseIdList(const std::string& text) {
  std::vector<int> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',')) ++i;
    if (i >= text.size()) break;
    size_t j = i;
    long long v = 0;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9' && v < (1LL << 40)) v = v * 10 + (text[j++] - '0');
    if (j == i || (j < text.size() && text[j] != ',' && text[j] != ' '))
      return Status::Errorf("bad token id list \"", text, "\" (expected e.g. 2,105,2364)");
    if (v > 2147483647) return Status::Errorf("token id ", v, " is too large");
    ids.push_back(static_cast<int>(v));
    i = j;
  }
  return ids;
}

std::string JoinIds(const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

int Fail(const char* command, const Status& status) {
  std::fprintf(stderr, "g4 %s: %s\n", command, status.message().c_str());
  return 1;
}

}  // namespace g4::cli
