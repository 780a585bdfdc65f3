// Reading a whole file through a read-only mapping (safetensors checkpoints). Files are written by
// files::write_bytes (ridge/core/files.hpp): a reader sees either the old file or the whole new one.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace ridge::model::detail {

// Maps a regular file read-only. The path is stat'ed before it is opened (opening a FIFO would
// block until a writer appears) and opened with O_NONBLOCK in case it was swapped for one in between.
// `size_problem(bytes)` returns why the size is unacceptable ("" when it is fine) and runs before mapping.
// Every failure throws ridge::Error "<what>: <why>".
struct ReadMapping {
  void* data = nullptr;
  size_t bytes = 0;
};
ReadMapping map_regular_file(const std::string& path, const std::string& what,
                             const std::function<std::string(size_t)>& size_problem);

}  // namespace ridge::model::detail
