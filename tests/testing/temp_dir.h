#pragma once

// TempDir: a fresh directory under /tmp for one test, removed with everything in it when the
// object goes.

#include <string>

namespace cubed::testing {

// Not copyable. path() is empty when the directory could not be made (the test's first use of
// it then fails). Any thread; the destructor ignores errors.
class TempDir {
 public:
  // `prefix` names the directory: /tmp/PREFIX-XXXXXX.
  explicit TempDir(const std::string& prefix = "cubed-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace cubed::testing
