// Small file helpers shared by every process. Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace geodesic {

// Writes `contents` to `path` atomically: a temporary file in the same
// directory, fsync (if `durable`), rename. Readers see the old file or the
// new one, never a mix; with `durable`, a crash leaves one of them intact.
// Progress files that are rewritten every few seconds skip the fsync.
// `mode` is the new file's permission bits (0600 for secrets: the file is
// created with them, so no other user can open it in between).
Status WriteFileAtomic(const std::string& path, const std::string& contents, bool durable = true, int mode = 0644);
// Whether `path` names a file WriteFileAtomic is still writing (its
// temporary, renamed to the final name when complete): readers of a
// directory others write into skip these.
bool IsAtomicWriteTemporary(const std::string& path);

StatusOr<std::string> ReadFile(const std::string& path);

// Reads `path` only if it is a regular file (after symlinks) of at most
// `max_bytes`: a FIFO, a device such as /dev/zero or an oversized file is
// refused with the reason before anything is read, and the read never
// blocks on an open or runs past the size the file had when opened. For
// files a process trusts to be its own but that others could replace
// (checkpoints, saved state in a run directory).
StatusOr<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes);

// Creates `path` and its parents (like mkdir -p).
Status MakeDirs(const std::string& path);

}  // namespace geodesic
