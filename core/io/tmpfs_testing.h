// A tiny tmpfs for tests of what a full disk does: mounted on a fresh folder for the
// test's life (root only: where mount is not permitted, the test skips, saying so), and
// filled to the last byte on demand.
#ifndef LOCKSTEP_CORE_IO_TMPFS_TESTING_H_
#define LOCKSTEP_CORE_IO_TMPFS_TESTING_H_

#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace lockstep::testing {

class TinyTmpfs {
 public:
  // Mounts a tmpfs of `bytes`; check mounted() (false: the reason is in error()).
  explicit TinyTmpfs(size_t bytes) {
    std::string templ = (std::filesystem::temp_directory_path() / "tiny_tmpfs.XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) {
      error_ = absl::StrCat("mkdtemp: ", std::strerror(errno));
      return;
    }
    dir_ = templ;
    const std::string options = absl::StrCat("size=", bytes, ",mode=0700");
    if (mount("tmpfs", dir_.c_str(), "tmpfs", 0, options.c_str()) != 0) {
      error_ = absl::StrCat("mount -t tmpfs on ", dir_, ": ", std::strerror(errno),
                            " (needs root, or CAP_SYS_ADMIN)");
      return;
    }
    mounted_ = true;
  }
  ~TinyTmpfs() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
    if (!dir_.empty()) rmdir(dir_.c_str());
  }

  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  const std::string& dir() const { return dir_; }

  // Fills what is left with a file of its own, so that the next write gets ENOSPC.
  void Fill() {
    std::ofstream f(Filler(), std::ios::binary | std::ios::trunc);
    const std::string chunk(4096, 'x');
    for (int i = 0; i < 1 << 20 && f.write(chunk.data(), chunk.size()); ++i) {
    }
    f.close();
    // Single bytes up to the very end (the last page's tail).
    std::ofstream tail(Filler() + ".tail", std::ios::binary | std::ios::trunc);
    for (int i = 0; i < 4096 && tail.put('x') && tail.flush(); ++i) {
    }
  }
  // Frees what Fill took.
  void Free() {
    std::error_code ec;
    std::filesystem::remove(Filler(), ec);
    std::filesystem::remove(Filler() + ".tail", ec);
  }

 private:
  std::string Filler() const { return dir_ + "/.filler"; }

  std::string dir_, error_;
  bool mounted_ = false;
};

// Skips the test when the tmpfs could not be mounted.
#define LOCKSTEP_SKIP_WITHOUT_TMPFS(fs) \
  if (!(fs).mounted()) GTEST_SKIP() << "no tiny tmpfs for this test: " << (fs).error()

}  // namespace lockstep::testing

#endif  // LOCKSTEP_CORE_IO_TMPFS_TESTING_H_
