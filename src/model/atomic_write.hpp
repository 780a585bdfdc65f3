// Reading and writing whole files safely. Writes go through files::write_bytes (core): a reader sees
// either the old file or the whole new one, never a part, and no temporary outlives the write.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>

namespace ridge::model::detail {

// Writes the concatenation of `pieces` to `path`. `what` starts every error message (e.g.
// "safetensors write 'x.safetensors'"). On failure `path` is untouched.
void write_atomically(const std::string& path, const std::string& what,
                      std::span<const std::span<const std::byte>> pieces);


// The read-side twin: maps a regular file read-only. The path is stat'ed before it is opened (opening a
// FIFO would block until a writer appears) and opened with O_NONBLOCK in case it was swapped for one in
// between. `size_problem(bytes)` returns why the size is unacceptable ("" when it is fine) and runs
// before mapping. Every failure throws ridge::Error "<what>: <why>".
struct ReadMapping {
  void* data = nullptr;
  size_t bytes = 0;
};
ReadMapping map_regular_file(const std::string& path, const std::string& what,
                             const std::function<std::string(size_t)>& size_problem);

}  // namespace ridge::model::detail
