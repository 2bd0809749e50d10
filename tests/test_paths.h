// Where this build's `geodesic` binary and the checkout it was built from
// are, for tests that run the binary or read the examples and scripts.
//
// Only tests/CMakeLists.txt's generated test_paths.cc holds the two paths,
// so no other test's compile command names the build or source directory,
// and ccache can give a fresh clone the objects another clone compiled.
#pragma once

#include <string>

namespace geodesic::testing {

// The absolute path of build/cli/geodesic.
const char* GeodesicBinary();
// The absolute path of the source tree's root.
const char* SourceDir();
// SourceDir() + "/" + relative.
inline std::string SourcePath(const std::string& relative) { return std::string(SourceDir()) + "/" + relative; }

}  // namespace geodesic::testing
