// Small file helpers shared by every process. Thread-safe (no shared state).
#pragma once

#include <string>

#include "common/status.h"

namespace geodesic {

// Writes `contents` to `path` atomically: a temporary file in the same
// directory, fsync (if `durable`), rename. Readers see the old file or the
// new one, never a mix; with `durable`, a crash leaves one of them intact.
// Progress files that are rewritten every few seconds skip the fsync.
Status WriteFileAtomic(const std::string& path, const std::string& contents, bool durable = true);

StatusOr<std::string> ReadFile(const std::string& path);

// Creates `path` and its parents (like mkdir -p).
Status MakeDirs(const std::string& path);

}  // namespace geodesic
