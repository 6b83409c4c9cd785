#include "io/npy.h"

#include <cstring>

#include "base/mapped_file.h"

namespace g4 {

Status WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
    if (i + 1 < shape.size()) dict += " ";
    n *= shape[i];
  }
  dict += "), }";
  // Header (magic 6 + version 2 + len 2 + dict) padded with spaces to a multiple of 64, then \n.
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(dict.size());
  out.append(reinterpret_cast<const char*>(&len), 2);
  out += dict;
  out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n) * sizeof(float));
  return WriteFileAtomic(path, out);
}

Result<NpyF32> ReadNpyF32(const std::string& path) {
  G4_ASSIGN_OR_RETURN(std::string s, ReadFileToString(path));
  if (s.size() < 10 || s.compare(0, 6, "\x93NUMPY") != 0) return Status::Errorf(path, ": not a .npy file");
  const uint16_t len = static_cast<uint16_t>(static_cast<uint8_t>(s[8]) | (static_cast<uint8_t>(s[9]) << 8));
  if (10u + len > s.size()) return Status::Errorf(path, ": truncated header");
  std::string dict = s.substr(10, len);
  if (dict.find("'<f4'") == std::string::npos) return Status::Errorf(path, ": not float32");
  NpyF32 out;
  auto open = dict.find("'shape': (");
  if (open == std::string::npos) return Status::Errorf(path, ": no shape");
  size_t p = open + 10;
  int64_t n = 1;
  while (p < dict.size() && dict[p] != ')') {
    if (isdigit(static_cast<unsigned char>(dict[p]))) {
      int64_t v = 0;
      while (p < dict.size() && isdigit(static_cast<unsigned char>(dict[p]))) v = v * 10 + (dict[p++] - '0');
      out.shape.push_back(v);
      n *= v;
    } else {
      ++p;
    }
  }
  if (10u + len + static_cast<size_t>(n) * 4 != s.size()) return Status::Errorf(path, ": data size does not match shape");
  out.data.resize(n);
  std::memcpy(out.data.data(), s.data() + 10 + len, n * 4);
  return out;
}

}  // namespace g4
