// SCAFFOLDING on branch `stream` only, never merged to main: lets the streaming half link
// until the data-io branch's sources and transform land (then this file goes).
#include "core/data/example_source.h"
#include "core/data/image_transform.h"

namespace lockstep {

bool IsStreamedFormat(const std::string&) { return false; }

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenExampleSource(const v1::DatasetSpec&, Split,
                                                                 const SourceOptions&) {
  return absl::UnimplementedError("streamed sources land with the data-io branch");
}

absl::StatusOr<std::unique_ptr<ImageTransform>> ImageTransform::Create(const v1::DatasetSpec&,
                                                                       Dims) {
  return absl::UnimplementedError("the image transform lands with the data-io branch");
}

}  // namespace lockstep
