// Every file ridge writes goes through here, so nothing the user had is lost: a regular file is
// replaced only once the new text is complete (written beside it and renamed over it), a failed
// run leaves the old file as it was, a symlink is written through to its target, and a device or
// FIFO (/dev/null, /dev/stdout) is written directly, never replaced by a regular file.
#pragma once

#include <string>
#include <vector>

namespace ridge::files {

// Checks before a run that `path` can be written later, without touching it: not a folder, its
// folder exists and is writable (no folder is created). ridge::Error naming `what` otherwise.
void check_writable(const std::string& path, const std::string& what);

// Writes `text` to `path` as the header says. ridge::Error naming `what` when it cannot; the old
// file, if any, is then intact.
void write_text(const std::string& path, const std::string& text, const std::string& what);

// Whether `a` and `b` name one file: the same inode when both exist (links, "./x", "dir/../x"),
// else the same normalised absolute path.
bool same_file(const std::string& a, const std::string& b);

// ridge::Error naming `what` when `output` is one of `inputs` (writing it would destroy an input).
void check_not_an_input(const std::string& output, const std::vector<std::string>& inputs,
                        const std::string& what);

}  // namespace ridge::files
