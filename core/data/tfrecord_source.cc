// The tfrecord format's ExampleSource: TFDS's shards of one split.
// Contract: tfrecord_source.h.
#include "core/data/tfrecord_source.h"

#include <dirent.h>
#include <errno.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/data/data_file.h"
#include "core/data/tf_example.h"
#include "core/data/tfrecord_index.h"
#include "core/io/tfrecord.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

bool AllDigits(absl::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}

class TfRecordSource final : public ExampleSource {
 public:
  struct Shard {
    std::unique_ptr<RandomAccessFile> file;
    TfRecordIndex index;
  };

  TfRecordSource(std::vector<Shard> shards, std::string image_key)
      : shards_(std::move(shards)), image_key_(std::move(image_key)) {
    int64_t total = 0;
    for (const Shard& s : shards_) {
      for (size_t r = 0; r < s.index.labels.size(); ++r) {
        if (s.index.labels[r] > max_.label)
          max_ = {s.index.labels[r], total + static_cast<int64_t>(r)};
      }
      total += static_cast<int64_t>(s.index.offsets.size());
      ends_.push_back(total);
    }
  }

  int64_t size() const override { return ends_.empty() ? 0 : ends_.back(); }
  std::optional<Dims> stored_shape() const override { return std::nullopt; }
  MaxLabel max_label() const override { return max_; }

  absl::Status Read(int64_t index, StoredExample* out) const override {
    if (index < 0 || index >= size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("example ", index, " is not in [0, ", size(), ")"));
    }
    const auto [shard, r] = Locate(index);
    const uint64_t offset = shard->index.offsets[r], length = shard->index.lengths[r];
    std::string& buf = out->bytes;
    absl::Status read =
        shard->file->Read(offset, kTfRecordHeaderBytes + length + kTfRecordFooterBytes, &buf);
    if (!read.ok()) return Fail(shard, r, absl::StatusCode::kFailedPrecondition, read.message());
    uint64_t stored_length = 0;
    if (!ParseTfRecordHeader(buf, &stored_length) || stored_length != length) {
      return Fail(shard, r, absl::StatusCode::kDataLoss,
                  "length CRC mismatch or a length other than indexed (corrupt)");
    }
    const absl::string_view data = absl::string_view(buf).substr(kTfRecordHeaderBytes, length);
    if (!TfRecordDataCrcMatches(StdView(data),
                                std::string_view(buf).substr(kTfRecordHeaderBytes + length))) {
      return Fail(shard, r, absl::StatusCode::kDataLoss, "data CRC mismatch (corrupt data)");
    }
    absl::string_view image;
    int64_t label = 0;
    absl::Status parsed =
        ParseImageExample(data, image_key_, shard->index.label_key, &image, &label);
    if (!parsed.ok()) return Fail(shard, r, absl::StatusCode::kInvalidArgument, parsed.message());
    if (label != shard->index.labels[r]) {
      return Fail(shard, r, absl::StatusCode::kDataLoss,
                  absl::StrCat("label ", label, ", its index says ", shard->index.labels[r]));
    }
    out->kind = StoredExample::Kind::kEncoded;
    out->label = label;
    // The image's bytes lie inside buf: move them to its front.
    const size_t from = image.data() - buf.data(), n = image.size();
    std::memmove(buf.data(), buf.data() + from, n);
    buf.resize(n);
    return absl::OkStatus();
  }

  std::string Where(int64_t index) const override {
    if (index < 0 || index >= size()) return absl::StrCat("example ", index);
    const auto [shard, r] = Locate(index);
    return absl::StrCat(shard->file->name(), ": record ", r);
  }

 private:
  std::pair<const Shard*, size_t> Locate(int64_t index) const {
    const size_t s = std::upper_bound(ends_.begin(), ends_.end(), index) - ends_.begin();
    const int64_t first = s == 0 ? 0 : ends_[s - 1];
    return {&shards_[s], static_cast<size_t>(index - first)};
  }

  // The error of record r; a shard changed since it was opened is FAILED_PRECONDITION
  // whatever the symptom.
  absl::Status Fail(const Shard* shard, size_t r, absl::StatusCode code,
                    absl::string_view why) const {
    if (shard->file->Changed()) {
      code = absl::StatusCode::kFailedPrecondition;
      return absl::Status(code,
                          absl::StrCat(shard->file->name(), ": record ", r,
                                       ": the shard changed since it was opened (", why, ")"));
    }
    return absl::Status(code, absl::StrCat(shard->file->name(), ": record ", r, ": ", why));
  }

  const std::vector<Shard> shards_;
  const std::string image_key_;
  std::vector<int64_t> ends_;  // ends_[s]: examples in shards [0, s]
  MaxLabel max_;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> FindTfRecordShards(const std::string& dir,
                                                            const std::string& shown_dir,
                                                            const std::string& name,
                                                            const std::string& split) {
  const std::string prefix = absl::StrCat(name, "-", split, ".tfrecord");
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("dataset.path: ", shown_dir, ": ",
                     errno == ENOENT ? "no such folder" : std::strerror(errno)));
  }
  bool single = false;
  std::map<int64_t, std::string> numbered;  // shard number -> file name
  std::map<int64_t, std::string> totals;    // "-of-N" -> a file saying it
  int width = 0;
  absl::Status bad;
  while (dirent* e = ::readdir(d)) {
    const std::string file = e->d_name;
    if (!absl::StartsWith(file, prefix)) continue;
    const absl::string_view rest = absl::string_view(file).substr(prefix.size());
    if (rest.empty()) {
      single = true;
      continue;
    }
    // "-00003-of-00016"
    const size_t of = rest.find("-of-");
    if (rest[0] != '-' || of == absl::string_view::npos) continue;
    const absl::string_view number = rest.substr(1, of - 1), total = rest.substr(of + 4);
    int64_t i = 0, n = 0;
    if (!AllDigits(number) || !AllDigits(total) || !absl::SimpleAtoi(number, &i) ||
        !absl::SimpleAtoi(total, &n) || n > 1'000'000) {
      continue;
    }
    numbered[i] = file;
    totals[n] = file;
    width = static_cast<int>(number.size());
  }
  ::closedir(d);
  const std::string pattern = absl::StrCat(shown_dir, "/", prefix);
  if (numbered.empty() && !single) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.path: ", shown_dir,
                                                   " holds no shards of ", prefix,
                                                   "-NNNNN-of-NNNNN (nor ", prefix, ")"));
  }
  if (single && !numbered.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.path: both ", pattern, " and ",
                                                   numbered.begin()->second,
                                                   ": one split in two layouts"));
  }
  if (single) return std::vector<std::string>{prefix};
  if (totals.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset.path: ", shown_dir, "/", totals.begin()->second, " and ", totals.rbegin()->second,
        " belong to sets of ", totals.begin()->first, " and ", totals.rbegin()->first, " shards"));
  }
  const int64_t n = totals.begin()->first;
  std::vector<std::string> shards;
  for (int64_t i = 0; i < n; ++i) {
    auto it = numbered.find(i);
    if (it == numbered.end()) {
      const std::string num = absl::StrCat(i), tot = absl::StrCat(n);
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset.path: ", pattern, "-", std::string(std::max<int>(0, width - num.size()), '0'),
          num, "-of-", std::string(std::max<int>(0, width - tot.size()), '0'), tot, ": missing (",
          numbered.size(), " of ", n, " shards found)"));
    }
    shards.push_back(it->second);
  }
  if (static_cast<int64_t>(numbered.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.path: ", shown_dir, "/",
                                                   numbered.rbegin()->second,
                                                   ": a shard number past the set's ", n));
  }
  return shards;
}

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTfRecordSource(const v1::DatasetSpec& spec,
                                                                  const std::string& split,
                                                                  const SourceOptions& options) {
  std::string dir = spec.path();
  if (options.roots != nullptr) {
    ASSIGN_OR_RETURN(dir, options.roots->Resolve("dataset.path", spec.path()));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> files,
                   FindTfRecordShards(dir, spec.path(), spec.name(), split));
  std::vector<TfRecordSource::Shard> shards;
  int64_t total = 0;
  for (const std::string& file : files) {
    const std::string path = absl::StrCat(spec.path(), "/", file);
    ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f,
                     OpenDataFile(path, "dataset.path", options.roots));
    ASSIGN_OR_RETURN(
        TfRecordIndex index,
        LoadOrBuildTfRecordIndex(*f, spec.image_key(), spec.label_key(), options.cache_dir));
    total += static_cast<int64_t>(index.offsets.size());
    shards.push_back({std::move(f), std::move(index)});
  }
  if (total == 0) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.path: ", spec.path(), "/",
                                                   files.front(), ": no records in split ", split));
  }
  return std::make_unique<TfRecordSource>(std::move(shards), spec.image_key());
}

}  // namespace lockstep
