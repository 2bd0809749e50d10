// Where this binary was built from and into: for what it runs from the
// checkout (deploy/netns/netns.sh, bench/*.py and bench/ddp_netns.sh) and
// the helper built beside it (deploy/geodesic-nfq-delay).
//
// The paths live in one unit that CMake generates (common/CMakeLists.txt),
// so that no other unit's compile command names the clone and ccache can
// give a fresh clone the objects another clone compiled.
#pragma once

#include <string>

namespace geodesic {

// The checkout's root, absolute.
const char* SourceDir();
// The CMake build directory, absolute.
const char* BuildDir();
// SourceDir() + "/" + relative.
inline std::string SourcePath(const std::string& relative) { return std::string(SourceDir()) + "/" + relative; }

}  // namespace geodesic
