// Writes a file so that a reader sees either the old file or the whole new one, never a part: the bytes
// go to a new temporary file in the same directory (same filesystem, so rename is atomic), which is
// fsynced and then renamed over the target; the directory is fsynced so the rename survives a crash.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace ridge::model::detail {

// Writes the concatenation of `pieces` to `path`. `what` starts every error message (e.g.
// "safetensors write 'x.safetensors'"). On failure the temporary is removed and `path` is untouched.
void write_atomically(const std::string& path, const std::string& what,
                      std::span<const std::span<const std::byte>> pieces);

}  // namespace ridge::model::detail
