// Token datasets for sequence models: windows of context + 1 tokens, the targets the inputs shifted
// by one. Contract: token_dataset.h.
#include "core/data/token_dataset.h"

#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/npz.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

absl::Status Invalid(const std::string& field, const std::string& from, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", from, ": ", msg));
}

// Fills the inputs and targets of window w from tokens[0, context].
void AddWindow(const int32_t* tokens, int context, int64_t w, Dataset* ds) {
  float* in = ds->images.data() + w * context;
  int32_t* target = ds->labels.data() + w * context;
  for (int t = 0; t < context; ++t) {
    in[t] = static_cast<float>(tokens[t]);
    target[t] = tokens[t + 1];
    if (tokens[t] > ds->max_token) ds->max_token = tokens[t];
    if (target[t] > ds->labels[ds->max_label_index]) ds->max_label_index = w * context + t;
  }
}

Dataset Empty(int64_t windows, int context, const std::string& field, const std::string& from) {
  Dataset ds;
  ds.size = windows;
  ds.row = context;
  ds.label_row = context;
  ds.shape = {1, 1, context, /*flat=*/true};
  ds.field = field;
  ds.images_from = ds.labels_from = from;
  ds.images.resize(static_cast<size_t>(windows) * context);
  ds.labels.resize(static_cast<size_t>(windows) * context);
  return ds;
}

// Where the first token outside [0, kMaxTokens) is, or -1.
template <typename Get>
int64_t FirstBadToken(int64_t n, Get get) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = get(i);
    if (v < 0 || v >= kMaxTokens) return i;
  }
  return -1;
}

std::string BadTokenText(int64_t value) {
  return absl::StrCat("token ", value, " is not in [0, ", kMaxTokens, ")");
}

}  // namespace

absl::StatusOr<Dataset> WindowTokens(std::span<const int32_t> stream, int context,
                                     const std::string& field, const std::string& from) {
  if (context < 1) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.context: ", context, " is not >= 1"));
  }
  const int64_t n = static_cast<int64_t>(stream.size());
  if (n < int64_t{context} + 1) {
    return Invalid(field, from,
                   absl::StrCat(n, " tokens: fewer than one window of dataset.context + 1 = ",
                                int64_t{context} + 1));
  }
  const int64_t bad = FirstBadToken(n, [&](int64_t i) { return stream[i]; });
  if (bad >= 0) {
    return Invalid(field, from, absl::StrCat(BadTokenText(stream[bad]), " at offset ", bad));
  }
  const int64_t windows = (n - 1) / context;
  Dataset ds = Empty(windows, context, field, from);
  for (int64_t w = 0; w < windows; ++w) AddWindow(stream.data() + w * context, context, w, &ds);
  return ds;
}

absl::StatusOr<Dataset> LoadTextDataset(const std::string& path, const std::string& field,
                                        int context, uint64_t max_bytes, const DataRoots& roots) {
  ASSIGN_OR_RETURN(const std::string file, roots.Resolve(field, path));
  struct stat st;
  if (::stat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": ", path, ": no such file (a text file, read as bytes)"));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return Invalid(field, file, absl::StrCat(st.st_size, " bytes: over the limit of ", max_bytes));
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::FailedPreconditionError(absl::StrCat(field, ": ", file, ": cannot read"));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    return absl::FailedPreconditionError(absl::StrCat(field, ": ", file, ": read error"));
  }
  std::vector<int32_t> tokens(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) tokens[i] = static_cast<unsigned char>(bytes[i]);
  return WindowTokens(tokens, context, field, file);
}

absl::StatusOr<Dataset> LoadTokenNpzDataset(const std::string& path, const std::string& field,
                                            const std::string& key, int context, uint64_t max_bytes,
                                            const DataRoots& roots) {
  ASSIGN_OR_RETURN(const std::string file, roots.Resolve(field, path));
  struct stat st;
  if (::stat(file.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(field, ": ", path, ": no such file"));
  }
  absl::StatusOr<std::unique_ptr<NpzFile>> npz = NpzFile::Open(file, max_bytes);
  if (!npz.ok()) {
    const absl::StatusCode code = npz.status().code() == absl::StatusCode::kNotFound
                                      ? absl::StatusCode::kFailedPrecondition
                                      : npz.status().code();
    return absl::Status(code, absl::StrCat(field, ": ", npz.status().message()));
  }
  absl::StatusOr<NpyArray> a = (*npz)->Read(key);
  if (!a.ok()) {
    const absl::StatusCode code = a.status().code() == absl::StatusCode::kNotFound
                                      ? absl::StatusCode::kInvalidArgument
                                      : a.status().code();
    return absl::Status(code, absl::StrCat(field, ": ", a.status().message()));
  }
  const std::string from = absl::StrCat(file, ": array '", key, "'");
  if (a->kind != 'i' && a->kind != 'u') {
    return Invalid(field, from,
                   absl::StrCat("dtype ", a->DtypeName(),
                                ": tokens must be integers (int32; any int or uint dtype)"));
  }
  const int64_t n = a->count();
  const int64_t bad = FirstBadToken(n, [&](int64_t i) { return a->IntAt(i); });
  if (a->shape.size() == 1) {
    if (bad >= 0) {
      return Invalid(field, from, absl::StrCat(BadTokenText(a->IntAt(bad)), " at offset ", bad));
    }
    std::vector<int32_t> stream(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) stream[i] = static_cast<int32_t>(a->IntAt(i));
    return WindowTokens(stream, context, field, from);
  }
  if (a->shape.size() != 2 || a->shape[1] != int64_t{context} + 1 || a->shape[0] == 0) {
    return Invalid(field, from,
                   absl::StrCat("shape ", a->ShapeString(),
                                " is neither a stream [n] nor sequences [N, dataset.context + 1] = "
                                "[N, ",
                                int64_t{context} + 1, "]"));
  }
  if (bad >= 0) {
    return Invalid(field, from,
                   absl::StrCat(BadTokenText(a->IntAt(bad)), " at [", bad / (context + 1), ", ",
                                bad % (context + 1), "]"));
  }
  Dataset ds = Empty(a->shape[0], context, field, from);
  std::vector<int32_t> row(context + 1);
  for (int64_t w = 0; w < ds.size; ++w) {
    for (int t = 0; t <= context; ++t)
      row[t] = static_cast<int32_t>(a->IntAt(w * (context + 1) + t));
    AddWindow(row.data(), context, w, &ds);
  }
  return ds;
}

}  // namespace lockstep
