// Small file helpers shared by every process. Thread-safe (no shared state).
#pragma once

#include <string>

#include "common/status.h"

namespace geodesic {

// Writes `contents` to `path` atomically: a temporary file in the same
// directory, fsync, rename. Readers see the old file or the new one, never a
// mix; a crash leaves the old one.
Status WriteFileAtomic(const std::string& path, const std::string& contents);

StatusOr<std::string> ReadFile(const std::string& path);

// Creates `path` and its parents (like mkdir -p).
Status MakeDirs(const std::string& path);

}  // namespace geodesic
