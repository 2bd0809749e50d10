// A fresh directory under /tmp for one test, removed with everything in it
// when the object goes out of scope, whether the test passed or not
// (kept when GEODESIC_KEEP_TEST_DIRS is set, to read the logs of a run).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace geodesic::testing {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix = "gd-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty() && !::getenv("GEODESIC_KEEP_TEST_DIRS")) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // Empty if the directory could not be made.
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace geodesic::testing
