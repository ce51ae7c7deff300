// `lockstep train --data DIR`: where the spec's dataset is read from on this machine.
#ifndef LOCKSTEP_CLIENTS_CLI_DATA_OPTION_H_
#define LOCKSTEP_CLIENTS_CLI_DATA_OPTION_H_

#include <string>

#include "absl/status/status.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep::cli {

// What --help says --data does.
inline constexpr char kDataOptionHelp[] =
    "the dataset's folder: idx (default format): replaces dataset.path; npz: "
    "dataset.train_path and test_path are read relative to it (train.npz and test.npz "
    "when the spec has none)";

// Points `dataset` at the folder `dir`. idx (format "" or "idx"): dataset.path = dir.
// npz: each of train_path and test_path becomes dir/PATH, or dir/train.npz and
// dir/test.npz when empty. INVALID_ARGUMENT naming --data and the field for an absolute
// npz path (it could not be relative to dir) or another format.
absl::Status ApplyDataFolder(const std::string& dir, v1::DatasetSpec* dataset);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_DATA_OPTION_H_
