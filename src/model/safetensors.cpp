#include "ridge/model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <utility>

#include "model/map_file.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/files.hpp"
#include "ridge/core/format.hpp"
#include "core/check.hpp"
#include "core/json.hpp"

namespace ridge::model {
namespace {

using json = nlohmann::json;

struct DtypeName {
  const char* name;
  DType dtype;
};
constexpr DtypeName kDtypes[] = {
    {"F64", DType::f64},          {"F32", DType::f32},          {"BF16", DType::bf16}, {"F16", DType::fp16},
    {"F8_E4M3", DType::fp8_e4m3}, {"F8_E5M2", DType::fp8_e5m2}, {"I8", DType::i8},     {"I32", DType::i32}};

bool lookup_dtype(const std::string& s, DType* out) {
  for (const auto& d : kDtypes)
    if (s == d.name) {
      *out = d.dtype;
      return true;
    }
  return false;
}

// numel and bytes of a shape, or false when either overflows (or a dimension is negative).
bool shape_size(const std::vector<int64_t>& shape, size_t elem, int64_t* numel, size_t* bytes) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  }
  size_t b = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(n), elem, &b)) return false;
  *numel = n;
  *bytes = b;
  return true;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

template <typename Out>
std::vector<Out> convert(const SafetensorsFile::Entry& e) {
  const int64_t n = e.numel();
  std::vector<Out> out(static_cast<size_t>(n));
  // The data may sit at any byte offset, so every element is read with memcpy.
  auto load = [&](auto tag, int64_t i) {
    decltype(tag) v;
    std::memcpy(&v, e.data + static_cast<size_t>(i) * sizeof(v), sizeof(v));
    return v;
  };
  for (int64_t i = 0; i < n; ++i) {
    Out v{};
    switch (e.dtype) {
      case DType::f64:
        v = static_cast<Out>(load(double{}, i));
        break;
      case DType::f32:
        v = static_cast<Out>(load(float{}, i));
        break;
      case DType::bf16:
        v = static_cast<Out>(to_float(load(bf16{}, i)));
        break;
      case DType::fp16:
        v = static_cast<Out>(to_float(load(fp16{}, i)));
        break;
      case DType::fp8_e4m3:
        v = static_cast<Out>(to_float(load(fp8_e4m3{}, i)));
        break;
      case DType::fp8_e5m2:
        v = static_cast<Out>(to_float(load(fp8_e5m2{}, i)));
        break;
      case DType::i8:
        v = static_cast<Out>(load(int8_t{}, i));
        break;
      case DType::i32:
        v = static_cast<Out>(load(int32_t{}, i));
        break;
    }
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  for (const auto& d : kDtypes)
    if (d.dtype == t) return d.name;
  return "?";
}

int64_t SafetensorsFile::Entry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated at load: never overflows
  return n;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept {
  *this = std::move(o);
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    entries_ = std::move(o.entries_);
    order_ = std::move(o.order_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  unmap();
}

void SafetensorsFile::unmap() {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

SafetensorsFile SafetensorsFile::load(const std::string& path) {
  auto bad = [&](const std::string& what) -> Error {
    return Error(fmt::format("safetensors file '{}': {}", path, what));
  };
  const auto map =
      detail::map_regular_file(path, fmt::format("safetensors file '{}'", path), [](size_t bytes) {
        return bytes < 8 ? fmt::format("{} bytes is shorter than the 8-byte header length", bytes)
                         : std::string();
      });
  void* m = map.data;
  const size_t size = map.bytes;

  SafetensorsFile f;
  f.path_ = path;
  f.map_ = m;
  f.map_bytes_ = size;
  const auto* base = static_cast<const std::byte*>(m);

  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);  // little-endian, as x86-64
  if (header_len > size - 8)
    throw bad(fmt::format("the header length {} runs past the end of the file ({} bytes)", header_len, size));
  const char* hbegin = reinterpret_cast<const char*>(base + 8);
  const char* hend = hbegin + header_len;
  const std::byte* data = base + 8 + header_len;
  const size_t data_bytes = size - 8 - header_len;

  // Parsing with a callback that refuses nesting deeper than the format has (so a hostile header of a
  // million brackets costs nothing) and repeated tensor names (which JSON would silently collapse).
  json header;
  std::set<std::string> seen;
  try {
    header = json::parse(hbegin, hend, [&](int depth, json::parse_event_t ev, json& parsed) {
      if (depth > 3) throw bad("the header nests deeper than the format allows");
      if (ev == json::parse_event_t::key && depth == 1) {
        const std::string key = parsed.get<std::string>();
        if (!seen.insert(key).second) throw bad(fmt::format("the name '{}' appears twice", key));
      }
      return true;
    });
  } catch (const json::exception& e) {
    throw bad(fmt::format("the header is not valid JSON ({})", e.what()));
  }
  if (!header.is_object()) throw bad("the header is not a JSON object");

  struct Range {
    size_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw bad("__metadata__ is not an object");
      for (auto m2 = v.begin(); m2 != v.end(); ++m2) {
        if (!m2.value().is_string())
          throw bad(fmt::format("__metadata__ value of '{}' is not a string", m2.key()));
        f.metadata_[m2.key()] = m2.value().get<std::string>();
      }
      continue;
    }
    auto tbad = [&](const std::string& what) { return bad(fmt::format("tensor '{}': {}", name, what)); };
    if (!v.is_object()) throw tbad("its entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) throw tbad("no string 'dtype'");
    if (!v.contains("shape") || !v["shape"].is_array()) throw tbad("no array 'shape'");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      throw tbad("no 'data_offsets' [begin, end]");
    Entry e{};
    const std::string dt = v["dtype"].get<std::string>();
    if (!lookup_dtype(dt, &e.dtype))
      throw tbad(
          fmt::format("unknown dtype '{}' (ridge reads F64, F32, BF16, F16, F8_E4M3, F8_E5M2, I8, I32)", dt));
    for (const json& d : v["shape"]) {
      if (!d.is_number_integer()) throw tbad("a dimension of its shape is not an integer");
      if (d.is_number_unsigned()) {
        if (d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
          throw tbad("a dimension of its shape overflows");
      } else if (d.get<int64_t>() < 0) {
        throw tbad(fmt::format("negative dimension {} in its shape", d.get<int64_t>()));
      }
      e.shape.push_back(d.get<int64_t>());
    }
    int64_t numel = 0;
    size_t bytes = 0;
    if (!shape_size(e.shape, dtype_size(e.dtype), &numel, &bytes))
      throw tbad(fmt::format("the element count of shape {} overflows", shape_text(e.shape)));
    size_t off[2];
    for (int i = 0; i < 2; ++i) {
      const json& o = v["data_offsets"][static_cast<size_t>(i)];
      if (!o.is_number_integer() || (!o.is_number_unsigned() && o.get<int64_t>() < 0))
        throw tbad("data_offsets are not non-negative integers");
      off[i] = static_cast<size_t>(o.get<uint64_t>());
    }
    if (off[0] > off[1])
      throw tbad(fmt::format("data_offsets [{}, {}] end before they begin", off[0], off[1]));
    if (off[1] > data_bytes)
      throw tbad(
          fmt::format("data_offsets [{}, {}] lie outside the {} bytes of data", off[0], off[1], data_bytes));
    if (off[1] - off[0] != bytes)
      throw tbad(fmt::format("data_offsets [{}, {}] hold {} bytes but {} {} needs {}", off[0], off[1],
                             off[1] - off[0], dt, shape_text(e.shape), bytes));
    e.data = data + off[0];
    e.bytes = bytes;
    auto [pos, inserted] = f.entries_.emplace(name, std::move(e));
    (void)inserted;  // names are unique: checked while parsing
    ranges.push_back({off[0], off[1], &pos->first});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Sorted by start, the ranges are disjoint when each starts at or after the end of the last non-empty
  // one before it (empty tensors occupy no bytes and overlap nothing).
  const Range* last = nullptr;
  for (const Range& r : ranges) {
    if (r.begin == r.end) continue;
    if (last && r.begin < last->end)
      throw bad(fmt::format("tensors '{}' and '{}' overlap in the data", *last->name, *r.name));
    last = &r;
  }
  for (const Range& r : ranges) f.order_.push_back(*r.name);
  return f;
}

bool SafetensorsFile::contains(const std::string& name) const {
  return entries_.count(name) != 0;
}

std::vector<std::string> SafetensorsFile::names() const {
  return order_;
}

const SafetensorsFile::Entry& SafetensorsFile::at(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail("safetensors file '{}': no tensor named '{}'", path_, name);
  return it->second;
}

std::vector<float> SafetensorsFile::to_f32(const std::string& name) const {
  return convert<float>(at(name));
}

std::vector<double> SafetensorsFile::to_f64(const std::string& name) const {
  return convert<double>(at(name));
}

// The checks every add() makes; the tensor's size in bytes.
size_t SafetensorsWriter::checked_bytes(const std::string& name, DType dtype,
                                        const std::vector<int64_t>& shape) const {
  check(!name.empty(), "SafetensorsWriter::add: name is empty");
  check(name != "__metadata__", "SafetensorsWriter::add: name '__metadata__' is reserved by the format");
  for (const Item& it : items_)
    check(it.name != name, "SafetensorsWriter::add: name '{}' was already added", name);
  for (int64_t d : shape)
    check(d >= 0, "SafetensorsWriter::add: shape {} of '{}' has a negative dimension", shape_text(shape),
          name);
  int64_t numel = 0;
  size_t bytes = 0;
  check(shape_size(shape, dtype_size(dtype), &numel, &bytes),
        "SafetensorsWriter::add: the element count of shape {} of '{}' overflows", shape_text(shape), name);
  return bytes;
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            const void* data) {
  const size_t bytes = checked_bytes(name, dtype, shape);
  check(data != nullptr || bytes == 0, "SafetensorsWriter::add: data of '{}' is null", name);
  items_.push_back({name, dtype, std::move(shape), data, bytes, {}});
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape, Fill fill) {
  const size_t bytes = checked_bytes(name, dtype, shape);
  check(static_cast<bool>(fill), "SafetensorsWriter::add: the fill of '{}' is empty", name);
  items_.push_back({name, dtype, std::move(shape), nullptr, bytes, std::move(fill)});
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

void SafetensorsWriter::write(const std::string& path) const {
  // ordered_json keeps the tensors in the order they were added, which is also their order in the data.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata_) m[k] = v;
    header["__metadata__"] = m;
  }
  size_t offset = 0;
  for (const Item& it : items_) {
    header[it.name] = {{"dtype", safetensors_dtype_name(it.dtype)},
                       {"shape", it.shape},
                       {"data_offsets", {offset, offset + it.bytes}}};
    offset += it.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const uint64_t len = text.size();
  files::write_streamed(
      path,
      [&](const files::ByteSink& sink) {
        sink({reinterpret_cast<const std::byte*>(&len), 8});
        sink({reinterpret_cast<const std::byte*>(text.data()), text.size()});
        std::vector<std::byte> filled;
        for (const Item& it : items_) {
          if (!it.fill) {
            sink({static_cast<const std::byte*>(it.data), it.bytes});
            continue;
          }
          filled.assign(it.bytes, std::byte{0});
          it.fill(filled);
          sink(filled);
        }
      },
      fmt::format("safetensors write '{}'", path));
}

}  // namespace ridge::model
