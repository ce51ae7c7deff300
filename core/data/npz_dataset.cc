// LoadNpzDataset (dataset.h): a split from a .npz file's image and label arrays.
#include <sys/stat.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/data/dataset.h"
#include "core/data/npz.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

// `st` with its message prefixed by the spec field; a missing array is the spec's
// mistake (INVALID_ARGUMENT), as is a file that cannot be opened (FAILED_PRECONDITION).
absl::Status InField(const std::string& field, const absl::Status& st, bool opening = false) {
  absl::StatusCode code = st.code();
  if (code == absl::StatusCode::kNotFound) {
    code = opening ? absl::StatusCode::kFailedPrecondition : absl::StatusCode::kInvalidArgument;
  }
  return absl::Status(code, absl::StrCat(field, ": ", st.message()));
}

absl::Status InvalidArray(const std::string& field, const std::string& what,
                          const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what, ": ", msg));
}

absl::Status ConvertImages(const NpyArray& a, const std::string& field, const std::string& what,
                           Dataset* ds) {
  const int64_t n = a.count();
  ds->images.resize(static_cast<size_t>(n));
  if (a.kind == 'u' && a.item_size == 1) {
    const auto* p = reinterpret_cast<const uint8_t*>(a.data.data());
    for (int64_t i = 0; i < n; ++i) ds->images[i] = static_cast<float>(p[i]) / 255.0f;
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < n; ++i) {
    const float x = a.Float32At(i);
    if (!std::isfinite(x)) {
      const Dims s = ds->shape;
      const int64_t pixel = i % ds->row;
      return InvalidArray(
          field, what,
          absl::StrCat("image ", i / ds->row, " has ", x, " at [", pixel / (s.w * s.c), ", ",
                       pixel / s.c % s.w, ", ", pixel % s.c, "] (h, w, c): images must be finite"));
    }
    ds->images[i] = x;
  }
  return absl::OkStatus();
}

absl::Status ConvertLabels(const NpyArray& a, const std::string& field, const std::string& what,
                           Dataset* ds) {
  ds->labels.resize(static_cast<size_t>(ds->size));
  for (int64_t i = 0; i < ds->size; ++i) {
    const int64_t v = a.IntAt(i);
    if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
      return InvalidArray(field, what,
                          absl::StrCat("label ", v, " at index ", i,
                                       v < 0 ? " is negative" : " does not fit an int32",
                                       " (labels are class indices in [0, classes))"));
    }
    ds->labels[i] = static_cast<int32_t>(v);
    if (ds->labels[i] > ds->labels[ds->max_label_index]) ds->max_label_index = i;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Dataset> LoadNpzDataset(const std::string& path, const std::string& field,
                                       const std::string& image_key, const std::string& label_key,
                                       uint64_t max_bytes, const DataRoots& roots) {
  // Before anything else: a path outside the roots is not even looked at.
  ASSIGN_OR_RETURN(const std::string file, roots.Resolve(field, path));
  struct stat st;
  if (::stat(file.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(field, ": ", path, ": no such file"));
  }
  absl::StatusOr<std::unique_ptr<NpzFile>> npz = NpzFile::Open(file, max_bytes);
  if (!npz.ok()) return InField(field, npz.status(), /*opening=*/true);
  absl::StatusOr<NpyArray> images = (*npz)->Read(image_key);
  if (!images.ok()) return InField(field, images.status());
  absl::StatusOr<NpyArray> labels = (*npz)->Read(label_key);
  if (!labels.ok()) return InField(field, labels.status());

  const std::string images_from = absl::StrCat(file, ": array '", image_key, "'");
  const std::string labels_from = absl::StrCat(file, ": array '", label_key, "'");
  if (images->shape.size() != 4) {
    return InvalidArray(
        field, images_from,
        absl::StrCat("shape ", images->ShapeString(), " is not [N, H, W, C]",
                     images->shape.size() == 3 ? " (add a channel axis: x[..., None])" : ""));
  }
  if (!((images->kind == 'u' && images->item_size == 1) ||
        (images->kind == 'f' && images->item_size == 4))) {
    return InvalidArray(
        field, images_from,
        absl::StrCat("dtype ", images->DtypeName(),
                     ": images must be uint8 (scaled by 1/255) or float32 (taken as "
                     "they are); convert with .astype(np.float32)"));
  }
  for (int d = 0; d < 4; ++d) {
    if (images->shape[d] == 0 || (d > 0 && images->shape[d] > std::numeric_limits<int>::max())) {
      return InvalidArray(
          field, images_from,
          absl::StrCat("shape ", images->ShapeString(), ": ",
                       d == 0 ? "no images" : "an empty or oversized image dimension"));
    }
  }
  if (labels->shape.size() != 1) {
    return InvalidArray(
        field, labels_from,
        absl::StrCat("shape ", labels->ShapeString(), " is not [N]",
                     labels->shape.size() == 2 ? " (flatten it: y.reshape(-1))" : ""));
  }
  if (labels->kind != 'i' && labels->kind != 'u') {
    return InvalidArray(field, labels_from,
                        absl::StrCat("dtype ", labels->DtypeName(),
                                     ": labels must be integers (int8 to int64, uint8 to uint64), "
                                     "class indices in [0, classes)"));
  }
  if (labels->shape[0] != images->shape[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", file, ": ", images->shape[0], " images in '", image_key, "' but ",
                     labels->shape[0], " labels in '", label_key, "'"));
  }
  Dataset ds;
  ds.size = images->shape[0];
  ds.shape = {static_cast<int>(images->shape[1]), static_cast<int>(images->shape[2]),
              static_cast<int>(images->shape[3])};
  ds.row = ds.shape.size();
  ds.field = field;
  ds.images_from = images_from;
  ds.labels_from = labels_from;
  RETURN_IF_ERROR(ConvertImages(*images, field, images_from, &ds));
  images->data = std::string();  // the raw bytes are no longer needed
  RETURN_IF_ERROR(ConvertLabels(*labels, field, labels_from, &ds));
  return ds;
}

}  // namespace lockstep
