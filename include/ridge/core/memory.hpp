// The one allocator every ridge buffer goes through, so the memory profiler (bench module) sees
// every byte: allocate/deallocate with a tag, and Buffer<T>, an owning aligned array.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace ridge::memory {

inline constexpr size_t kDefaultAlignment = 64;

// Aligned allocation (zero bytes allowed). `tag` names what the bytes are for; when null, the
// innermost open trace range on this thread names them. Throws std::bad_alloc when out of memory
// and ridge::Error for an absurd size.
void* allocate(size_t bytes, const char* tag = nullptr, size_t alignment = kDefaultAlignment);
void deallocate(void* p) noexcept;

}  // namespace ridge::memory

namespace ridge {

// Owning, aligned, uninitialised array of trivially copyable T.
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n, const char* tag = nullptr)
      : data_(static_cast<T*>(memory::allocate(n * sizeof(T), tag))), size_(n) {}
  ~Buffer() { memory::deallocate(data_); }
  Buffer(Buffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      memory::deallocate(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  std::span<T> span() { return {data_, size_}; }
  std::span<const T> span() const { return {data_, size_}; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ridge
