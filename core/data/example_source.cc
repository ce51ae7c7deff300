// ExampleSource: random access to one split of a streamed dataset, and which formats
// stream. Contract: example_source.h.
#include "core/data/example_source.h"

#include "absl/strings/str_cat.h"
#include "core/data/image_folder_source.h"
#include "core/data/record_source.h"
#include "core/data/tfrecord_source.h"

namespace lockstep {

bool IsStreamedFormat(const std::string& format) {
  return format == "tfrecord" || format == "imagefolder" || format == "records";
}

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenExampleSource(const v1::DatasetSpec& spec,
                                                                 Split split,
                                                                 const SourceOptions& options) {
  if (!IsStreamedFormat(spec.format())) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.format: format \"", spec.format(),
                     "\" is held in memory (LoadDatasets), not streamed"));
  }
  const bool train = split == Split::kTrain;
  if (spec.format() == "records") {
    return OpenRecordSource(train ? spec.train_path() : spec.test_path(),
                            train ? "dataset.train_path" : "dataset.test_path", options.roots);
  }
  if (spec.format() == "tfrecord") {
    return OpenTfRecordSource(spec, train ? spec.train_split() : spec.test_split(), options);
  }
  return OpenImageFolderSource(spec, split, options);
}

}  // namespace lockstep
