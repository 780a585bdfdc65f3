// Every file ridge writes goes through here, so nothing the user had is lost: a regular file is
// replaced only once the new bytes are complete (written to a temporary beside it, NAME.tmp.PID.N,
// fsynced and renamed over it), a failed run leaves the old file as it was, a symlink is written
// through to its target, and a device or FIFO (/dev/null, /dev/stdout) is written directly, never
// replaced by a regular file. A temporary never outlives its writer: it is removed when the write
// fails, when SIGINT, SIGTERM or SIGHUP ends the process mid-write, and (for one left by a process
// that was killed outright) by the next write to the same path. A set of files that is read as one (a
// tokenizer folder) is written as one: write_folder.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ridge::files {

// Checks before a run that `path` can be written later, without touching it: not a folder, its
// folder exists and is writable (no folder is created), and the path fits the file system's limits
// (check_name_fits). ridge::Error naming `what` otherwise.
void check_writable(const std::string& path, const std::string& what);

// Checks, without touching the file system, that `path` is one it can hold: at most PATH_MAX bytes,
// every folder name at most NAME_MAX, and the file's own name short enough to leave room for the
// temporary's suffix. ridge::Error naming `what` otherwise. check_writable calls it first; a caller
// that makes the folders itself calls it before that.
void check_name_fits(const std::string& path, const std::string& what);

// Writes the concatenation of `pieces` to `path` as the header says. ridge::Error naming `what`
// when it cannot; the old file, if any, is then intact and no temporary is left.
void write_bytes(const std::string& path, std::span<const std::span<const std::byte>> pieces,
                 const std::string& what);
void write_text(const std::string& path, const std::string& text, const std::string& what);
// The same for output made piece by piece (a file larger than memory): `produce` hands the bytes to
// its sink in order. An exception from `produce` (or a failed write) leaves the old file as it was and
// no temporary, and propagates.
using ByteSink = std::function<void(std::span<const std::byte>)>;
void write_streamed(const std::string& path, const std::function<void(const ByteSink&)>& produce,
                    const std::string& what);

// Whether `a` and `b` name one file: the same inode when both exist (links, "./x", "dir/../x"),
// else the same normalised absolute path (symlinks resolved as far as they exist).
bool same_file(const std::string& a, const std::string& b);

// ridge::Error naming `what` when `output` is one of `inputs` (writing it would destroy an input).
void check_not_an_input(const std::string& output, const std::vector<std::string>& inputs,
                        const std::string& what);

// Outputs and inputs of one command, each {argument, path} (empty paths are skipped): ridge::Error
// naming the output's argument when an output names an input or another output. Called before any
// work, so that a mistyped path costs nothing. `inputs` is every file the command reads (a tokenizer
// folder's files each, a checkpoint's recorded tokenizer's too); `may_share` lists {output argument,
// input argument} pairs that may name one file (a checkpoint saved over the one it resumed from).
using NamedPaths = std::vector<std::pair<std::string, std::string>>;
void check_distinct(const NamedPaths& outputs, const NamedPaths& inputs, const NamedPaths& may_share = {});

// Writes the files `contents` ({name, bytes}) as the folder `dir`, as one set: a reader of the folder
// (opening its files by name, one after the other) sees the old set or the new one, never a mix, and a
// failure at any point leaves the old set as it was. The new set is written whole into a temporary
// sibling NAME.tmp.PID.N (each file fsynced), then renamed to `dir` (a new folder) or exchanged with
// the old folder in one rename (renameat2 RENAME_EXCHANGE; where the file system lacks it, the old
// folder is renamed aside to NAME.old.PID.N first, where a crash between the two renames leaves it
// whole), whose set is then removed. Existing folder and file permissions are kept; a symlink to the
// folder survives and names the new one. The temporary is removed on failure and on SIGINT, SIGTERM
// or SIGHUP, and (left by a process killed outright) by the next write of the same folder.
// ridge::Error naming `what` when it cannot (check_folder_writable's refusals first).
void write_folder(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& contents,
                  const std::string& what);
// Checks before a run that write_folder can write `dir` with the files `names`, without touching it: a
// new folder in a writable folder, or an existing folder that holds nothing but files of that set
// (or their temporaries), none of them a folder or read-only, not read-only itself, not a mount point,
// the root or the current folder. ridge::Error naming `what` otherwise.
void check_folder_writable(const std::string& dir, const std::vector<std::string>& names,
                           const std::string& what);

// "N bytes, fnv1a H" of a regular file: the hash (ridge::fnv1a) of its whole contents up to 1 GiB, else
// of its first and last 512 MiB (a checkpoint's header and its last tensors) with its size; "" when it
// cannot be read. What MPI ranks compare to know they were given the same file.
std::string contents_id(const std::string& path);

// The temporaries of dead processes beside `path` (NAME.tmp.PID.N whose PID no longer runs):
// removed by every write; exposed for tests. Returns how many were removed.
int remove_stale_temporaries(const std::string& path);

}  // namespace ridge::files
