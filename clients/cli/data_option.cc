// `lockstep train --data DIR`: where the spec's dataset is read from on this machine. Contract:
// data_option.h.
#include "clients/cli/data_option.h"

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace lockstep::cli {
namespace {

absl::Status Relocate(const std::string& dir, const std::string& field,
                      const std::string& default_name, std::string* path) {
  if (path->empty()) {
    *path = (std::filesystem::path(dir) / default_name).string();
    return absl::OkStatus();
  }
  if (std::filesystem::path(*path).is_absolute()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data ", dir, ": dataset.", field, " is absolute (", *path,
        "); --data reads an npz spec's relative paths from its folder: write it relative, "
        "or leave --data out"));
  }
  *path = (std::filesystem::path(dir) / *path).string();
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyDataFolder(const std::string& dir, v1::DatasetSpec* dataset) {
  const std::string& format = dataset->format();
  if (format.empty() || format == "idx") {
    dataset->set_path(dir);
    return absl::OkStatus();
  }
  if (format != "npz") {
    return absl::InvalidArgumentError(
        absl::StrCat("--data ", dir, ": dataset.format: \"", format, "\" is not idx or npz"));
  }
  if (absl::Status st = Relocate(dir, "train_path", "train.npz", dataset->mutable_train_path());
      !st.ok()) {
    return st;
  }
  return Relocate(dir, "test_path", "test.npz", dataset->mutable_test_path());
}

}  // namespace lockstep::cli
