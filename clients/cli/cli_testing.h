// The CLI tests' shared pieces: running the `lockstep` binary as a user does, in a folder
// of the test's own (cli_test.cc, cli_cluster_test.cc).
#ifndef LOCKSTEP_CLIENTS_CLI_CLI_TESTING_H_
#define LOCKSTEP_CLIENTS_CLI_CLI_TESTING_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/data/npz_testing.h"

namespace lockstep::cli_testing {

namespace fs = std::filesystem;

inline const std::string kCli = std::string(LOCKSTEP_BINARY_DIR) + "/clients/lockstep";

inline std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Result {
  int exit_code;
  std::string out, err;
};

// A folder of its own per test, removed after.
class CliTest : public ::testing::Test {
 protected:
  CliTest()
      : dir_(fs::temp_directory_path() /
             absl::StrCat("lockstep-cli-", getpid(), "-", absl::ToUnixMicros(absl::Now()))) {
    fs::create_directories(dir_);
  }
  ~CliTest() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // `env lockstep ARGS` through the shell, with no local cluster unless `env` names one,
  // in the folder `cwd` when given.
  Result Run(const std::string& args, const std::string& env = "", const fs::path& cwd = {}) {
    const std::string out = (dir_ / "out").string(), err = (dir_ / "err").string();
    const std::string cmd =
        absl::StrCat(cwd.empty() ? "" : "cd " + cwd.string() + " && ",
                     "env -u LOCKSTEP_COORDINATOR -u LOCKSTEP_CREDENTIALS -u LOCKSTEP_INSECURE ",
                     "LOCKSTEP_CLUSTER_DIR=", (dir_ / "no-cluster").string(), " ", env, " ", kCli,
                     " ", args, " >", out, " 2>", err, " </dev/null");
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(out), ReadFile(err)};
  }

  const fs::path dir_;
};

// stderr's lines.
inline int Lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace lockstep::cli_testing

#endif  // LOCKSTEP_CLIENTS_CLI_CLI_TESTING_H_
