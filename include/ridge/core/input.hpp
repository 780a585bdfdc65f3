// Reading a user's input files safely. (Parsing JSON with messages in the user's words is in the
// private header src/core/json.hpp: the installed headers need only the standard library.)
// Every file a user names (a chip file, a snapshot, benchmark rows, a shapes or grid file, the probe
// cache) goes through read_input_file: a FIFO, device, socket or directory is refused before it is
// opened (so nothing blocks), and the size is capped (so /dev/zero or a huge file cannot eat memory).
#pragma once

#include <cstdint>
#include <string>

namespace ridge::input {

inline constexpr int64_t kMaxInputBytes = int64_t{256} << 20;  // 256 MiB
inline constexpr int kMaxJsonDepth = 256;

// The whole content of the regular file `path`. `what` names the argument in errors
// ("--hw", "chip file", "memory show"). Throws ridge::Error for a missing, unreadable or
// non-regular file, or one above max_bytes.
std::string read_input_file(const std::string& path, const std::string& what,
                            int64_t max_bytes = kMaxInputBytes);

}  // namespace ridge::input
