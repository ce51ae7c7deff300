// The records format's ExampleSource: a uint8 .npy of images read in place, and its
// labels. Contract: record_source.h.
#include "core/data/record_source.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/data_file.h"
#include "core/data/npy.h"
#include "core/data/streamed_spec.h"
#include "core/io/random_access_file.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

constexpr uint64_t kMaxRecordFileBytes = uint64_t{1} << 50;
constexpr uint64_t kMaxNpyHead = (1 << 16) + 12;  // magic, version, length, header
constexpr int64_t kMaxRecordSide = 1 << 16;

class RecordSource final : public ExampleSource {
 public:
  RecordSource(std::unique_ptr<RandomAccessFile> file, uint64_t data_offset, Dims shape,
               std::vector<int64_t> labels, MaxLabel max)
      : file_(std::move(file)),
        data_offset_(data_offset),
        shape_(shape),
        labels_(std::move(labels)),
        max_(max) {}

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  std::optional<Dims> stored_shape() const override { return shape_; }
  MaxLabel max_label() const override { return max_; }

  absl::Status Read(int64_t index, StoredExample* out) const override {
    if (index < 0 || index >= size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_->name(), ": image ", index, " is not in [0, ", size(), ")"));
    }
    const uint64_t row = static_cast<uint64_t>(shape_.size());
    out->kind = StoredExample::Kind::kRaw;
    out->shape = shape_;
    out->label = labels_[index];
    absl::Status s =
        file_->Read(data_offset_ + row * static_cast<uint64_t>(index), row, &out->bytes);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(s.message(), " (image ", index, ")"));
    return absl::OkStatus();
  }

  std::string Where(int64_t index) const override {
    return absl::StrCat(file_->name(), ": image ", index);
  }

 private:
  const std::unique_ptr<RandomAccessFile> file_;
  const uint64_t data_offset_;
  const Dims shape_;
  const std::vector<int64_t> labels_;
  const MaxLabel max_;
};

// The labels beside the images: [n] of an integer dtype, each >= 0.
absl::StatusOr<std::vector<int64_t>> ReadRecordLabels(const std::string& path,
                                                      const std::string& field, int64_t n,
                                                      const DataRoots* roots,
                                                      ExampleSource::MaxLabel* max) {
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, OpenDataFile(path, field, roots));
  const std::string what = absl::StrCat(field, ": ", path);
  const uint64_t limit = kMaxNpyHead + 8 * static_cast<uint64_t>(n);
  if (file->size() > limit) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", file->size(), " bytes, more than ",
                                                   n, " labels of up to 8 bytes take"));
  }
  std::string bytes;
  RETURN_IF_ERROR(file->Read(0, file->size(), &bytes));
  ASSIGN_OR_RETURN(NpyArray a, ParseNpy(std::move(bytes), what, limit));
  if (a.kind != 'i' && a.kind != 'u') {
    return absl::InvalidArgumentError(absl::StrCat(what, ": dtype ", a.DtypeName(),
                                                   ": labels must be integers (int64; any "
                                                   "int or uint dtype)"));
  }
  if (a.shape.size() != 1 || a.shape[0] != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape ", a.ShapeString(), ": want [", n, "], one label per image"));
  }
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) {
    labels[i] = a.IntAt(i);
    if (labels[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": label ", labels[i], " at index ", i,
                       " is negative (labels are class indices in [0, classes))"));
    }
    if (labels[i] > max->label) *max = {labels[i], i};
  }
  return labels;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenRecordSource(const std::string& path,
                                                                const std::string& field,
                                                                const DataRoots* roots) {
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, OpenDataFile(path, field, roots));
  const std::string what = absl::StrCat(field, ": ", path);
  std::string head;
  RETURN_IF_ERROR(file->Read(0, std::min(file->size(), kMaxNpyHead), &head));
  NpyArray a;
  ASSIGN_OR_RETURN(const NpyLayout layout, ParseNpyHeader(head, what, kMaxRecordFileBytes, &a));
  if (a.kind != 'u' || a.item_size != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": dtype ", a.DtypeName(), ": records are uint8 pixels (astype(np.uint8))"));
  }
  if (a.shape.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape ", a.ShapeString(), " is not [N, H, W, C]",
                     a.shape.size() == 3 ? " (add a channel axis: x[..., None])" : ""));
  }
  for (int d = 1; d < 4; ++d) {
    if (a.shape[d] < 1 || a.shape[d] > kMaxRecordSide) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": shape ", a.ShapeString(), ": H, W and C must be in [1, ", kMaxRecordSide, "]"));
    }
  }
  if (a.shape[0] == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape ", a.ShapeString(), ": no images"));
  }
  RETURN_IF_ERROR(CheckNpyDataSize(a, layout, file->size(), what));
  const Dims shape{static_cast<int>(a.shape[1]), static_cast<int>(a.shape[2]),
                   static_cast<int>(a.shape[3])};
  ExampleSource::MaxLabel max;
  ASSIGN_OR_RETURN(std::vector<int64_t> labels,
                   ReadRecordLabels(RecordLabelsPath(path), field, a.shape[0], roots, &max));
  return std::make_unique<RecordSource>(std::move(file), layout.data_offset, shape,
                                        std::move(labels), max);
}

}  // namespace lockstep
