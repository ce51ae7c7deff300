#include "core/data/dataset.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "core/data/idx.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

constexpr int kClasses = 10;

absl::StatusOr<std::string> Find(const std::string& dir, const std::string& base,
                                 const DataRoots& roots) {
  struct stat st;
  for (const std::string& path :
       {absl::StrCat(dir, "/", base, ".gz"), absl::StrCat(dir, "/", base)}) {
    // Within roots a link counts as there even when dangling: Resolve then refuses a
    // link out of them alike whether or not its target exists.
    if ((roots.empty() ? ::stat : ::lstat)(path.c_str(), &st) == 0) {
      return roots.Resolve("dataset.path", path);
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("dataset: ", dir, "/", base, "[.gz]: no such file"));
}

}  // namespace

absl::StatusOr<Dataset> LoadIdxDataset(const std::string& dir, Split split, uint64_t max_bytes,
                                       const DataRoots& roots) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  ASSIGN_OR_RETURN(std::string image_path, Find(dir, prefix + "-images-idx3-ubyte", roots));
  ASSIGN_OR_RETURN(std::string label_path, Find(dir, prefix + "-labels-idx1-ubyte", roots));
  ASSIGN_OR_RETURN(IdxArray images, ReadIdx(image_path, 3, max_bytes));
  ASSIGN_OR_RETURN(IdxArray labels, ReadIdx(label_path, 1, max_bytes));
  if (images.dims[0] != labels.dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat(image_path, " has ", images.dims[0],
                                                   " images but ", label_path, " has ",
                                                   labels.dims[0], " labels"));
  }
  Dataset ds;
  ds.size = images.dims[0];
  ds.row = images.dims[1] * images.dims[2];
  ds.height = static_cast<int>(images.dims[1]);
  ds.width = static_cast<int>(images.dims[2]);
  ds.channels = 1;
  if (images.dims[1] != 28 || images.dims[2] != 28) {
    return absl::InvalidArgumentError(absl::StrCat(image_path, ": images are ", images.dims[1], "x",
                                                   images.dims[2], ", expected 28x28"));
  }
  ds.images.resize(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) {
    ds.images[i] = static_cast<float>(images.data[i]) / 255.0f;
  }
  ds.labels.resize(ds.size);
  for (int64_t i = 0; i < ds.size; ++i) {
    if (labels.data[i] >= kClasses) {
      return absl::InvalidArgumentError(absl::StrCat(label_path, ": label ", int{labels.data[i]},
                                                     " at index ", i, " is not in [0, 10)"));
    }
    ds.labels[i] = labels.data[i];
  }
  return ds;
}

}  // namespace lockstep
