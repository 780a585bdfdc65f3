// Editing a safetensors file's header in tests: the header as JSON (tensor order kept) and the data
// section as it was, joined back with the header padded to 8 bytes as ridge's writer pads it, so an
// edit that changes nothing gives the same bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace ridge::test {

using ojson = nlohmann::ordered_json;

struct SafetensorsParts {
  ojson header;
  std::string data;
};

inline SafetensorsParts split_safetensors(const std::string& bytes) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return {ojson::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

inline std::string join_safetensors(const ojson& header, const std::string& data) {
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + text + data;
}

// The file with its header edited.
inline std::string edit_header(const std::string& bytes, const std::function<void(ojson&)>& edit) {
  SafetensorsParts p = split_safetensors(bytes);
  edit(p.header);
  return join_safetensors(p.header, p.data);
}

// The file with the JSON inside one '__metadata__' string ("state" or "config") edited.
inline std::string edit_meta(const std::string& bytes, const std::string& which,
                             const std::function<void(ojson&)>& edit) {
  return edit_header(bytes, [&](ojson& h) {
    ojson j = ojson::parse(h["__metadata__"][which].get<std::string>());
    edit(j);
    h["__metadata__"][which] = j.dump();
  });
}

}  // namespace ridge::test
