// safetensors, the tensor file format PyTorch and Hugging Face use for weights: an 8-byte little-endian
// header length N, N bytes of JSON naming each tensor's dtype, shape and byte range, then the raw data.
// ridge reads and writes it for checkpoints and reference tensors, so PyTorch can read ridge's weights
// and ridge can load weights PyTorch wrote.
//
// Dtypes: the safetensors names F64, F32, BF16, F16, F8_E4M3, F8_E5M2, I8, I32 map to ridge::DType;
// a file holding any other dtype is refused with a message naming it. Data is little-endian, as the
// format defines (and as x86-64 is).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ridge/core/tensor.hpp"

namespace ridge::model {

// The safetensors spelling of a dtype ("F32", "BF16", ...).
const char* safetensors_dtype_name(DType t);

// A loaded file, mapped read-only. Every defect of a file (size, header, JSON, dtypes, shapes, offsets,
// names) raises ridge::Error "safetensors file 'PATH': WHAT" at load(), never later.
class SafetensorsFile {
 public:
  static SafetensorsFile load(const std::string& path);

  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;  // empty for a scalar
    const std::byte* data;       // inside the mapping; not aligned beyond 1 byte in general
    size_t bytes;
    int64_t numel() const;
  };

  bool contains(const std::string& name) const;
  std::vector<std::string> names() const;          // in the order of the tensors' data in the file
  const Entry& at(const std::string& name) const;  // throws naming the file and the tensor
  // The tensor's values converted to float / double (any supported dtype; integers convert as values).
  std::vector<float> to_f32(const std::string& name) const;
  std::vector<double> to_f64(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& o) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

 private:
  SafetensorsFile() = default;
  void unmap();

  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> metadata_;
};

// Collects tensors and writes them as one file. Tensors are written contiguously in the order they
// were added, after a header padded with spaces to a multiple of 8 bytes (as the Python writer does),
// so the file is readable by the Python `safetensors` package.
class SafetensorsWriter {
 public:
  // `data` (numel * dtype_size bytes) must stay valid until write(). Throws ridge::Error on an empty,
  // repeated or reserved name, a negative dimension, or a size that overflows.
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data);
  // A tensor whose bytes `fill` writes into the buffer it is handed (numel * dtype_size bytes) when write()
  // reaches it, in the order added: one such buffer at a time, so the file may hold more than the caller
  // keeps at once (a sharded model's whole expert stacks, gathered one by one).
  using Fill = std::function<void(std::span<std::byte>)>;
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, Fill fill);
  void set_metadata(const std::string& key, const std::string& value);
  // Atomic: writes a temporary file in the same directory, fsyncs it and renames it over `path`; on any
  // failure the temporary is removed and whatever was at `path` is left as it was.
  void write(const std::string& path) const;

 private:
  size_t checked_bytes(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const;
  struct Item {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;
    size_t bytes;
    Fill fill;  // or this, for data
  };
  std::vector<Item> items_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace ridge::model
