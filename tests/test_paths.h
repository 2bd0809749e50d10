// Where this build's `geodesic` binary and the checkout it was built from
// are, for tests that run the binary or read the examples and scripts
// (from common/build_paths.h: no test's compile command names the clone,
// so ccache can give a fresh clone the objects another clone compiled).
#pragma once

#include <string>

#include "common/build_paths.h"

namespace geodesic::testing {

using ::geodesic::SourceDir;
using ::geodesic::SourcePath;

// The absolute path of build/cli/geodesic.
inline const char* GeodesicBinary() {
  static const std::string path = std::string(BuildDir()) + "/cli/geodesic";
  return path.c_str();
}

}  // namespace geodesic::testing
