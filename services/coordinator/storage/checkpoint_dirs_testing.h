// The fixture of tests of a coordinator's checkpoint and snapshot folders
// (CoordinatorOptions::checkpoint_dir and snapshot_dir): both under a scratch folder of the
// test's own, removed with everything in it when the test ends, and files made in them.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_STORAGE_CHECKPOINT_DIRS_TESTING_H_
#define LOCKSTEP_SERVICES_COORDINATOR_STORAGE_CHECKPOINT_DIRS_TESTING_H_

#include <filesystem>
#include <fstream>
#include <string>

#include "core/testing.h"
#include "gtest/gtest.h"

namespace lockstep::testing {

class CheckpointDirsTest : public ::testing::Test {
 protected:
  CheckpointDirsTest()
      : scratch_("lockstep-checkpoint-dirs"),
        root_(scratch_.path().string()),
        checkpoints_(root_ + "/checkpoints"),
        snapshots_(root_ + "/snapshots") {}
  // Writes `text` to `path`, making its folders.
  static void Touch(const std::string& path, const std::string& text = "x") {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  }

  const ScratchDir scratch_;
  const std::string root_;         // the scratch folder
  const std::string checkpoints_;  // not made: a test makes it where it needs it
  const std::string snapshots_;    // likewise
};

}  // namespace lockstep::testing

#endif  // LOCKSTEP_SERVICES_COORDINATOR_STORAGE_CHECKPOINT_DIRS_TESTING_H_
