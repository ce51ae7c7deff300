// The imagefolder format's ExampleSource (torchvision's ImageFolder convention).
// Contract: image_folder_source.h.
#include "core/data/image_folder_source.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/data_file.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

constexpr int kMaxFolderDepth = 32;
constexpr uint64_t kMaxImageFileBytes = uint64_t{256} << 20;

struct FolderEntries {
  std::vector<std::string> files, folders;     // names
  std::vector<bool> file_links, folder_links;  // which are symbolic links
};

// The entries of `dir` (symbolic links followed; dangling ones left out, as os.walk does).
absl::Status ListFolder(const std::string& dir, const std::string& shown, FolderEntries* out) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(shown, ": ", errno == ENOENT ? "no such folder" : std::strerror(errno)));
  }
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    unsigned char type = e->d_type;
    bool link = type == DT_LNK;
    if (type == DT_LNK || type == DT_UNKNOWN) {
      struct stat st;
      if (::stat((dir + "/" + name).c_str(), &st) != 0) continue;
      type = S_ISDIR(st.st_mode) ? DT_DIR : (S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN);
      if (!link && ::lstat((dir + "/" + name).c_str(), &st) == 0) link = S_ISLNK(st.st_mode);
    }
    if (type == DT_DIR) {
      out->folders.push_back(name);
      out->folder_links.push_back(link);
    }
    if (type == DT_REG) {
      out->files.push_back(name);
      out->file_links.push_back(link);
    }
  }
  ::closedir(d);
  return absl::OkStatus();
}

enum class FileKind { kImage, kForeignImage, kOther };

FileKind KindOf(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const char* ext : {".jpg", ".jpeg", ".png"}) {
    if (absl::EndsWith(lower, ext)) return FileKind::kImage;
  }
  for (const char* ext : {".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp"}) {
    if (absl::EndsWith(lower, ext)) return FileKind::kForeignImage;
  }
  return FileKind::kOther;
}

class ImageFolderSource final : public ExampleSource {
 public:
  ImageFolderSource(std::string root, std::string shown, std::string field)
      : root_(std::move(root)), shown_(std::move(shown)), field_(std::move(field)) {}

  // Every image of class `label`, in folder `rel` (relative to the root) and below it.
  absl::Status AddClass(const std::string& rel, int label, const DataRoots* roots) {
    if (roots != nullptr) {
      RETURN_IF_ERROR(roots->Resolve(field_, absl::StrCat(shown_, "/", rel)).status());
    }
    std::vector<std::pair<std::string, std::vector<std::string>>> folders;  // os.walk's
    RETURN_IF_ERROR(Walk(rel, 0, roots, &folders));
    std::sort(folders.begin(), folders.end());
    const size_t before = labels_.size();
    for (auto& [folder, files] : folders) {
      std::sort(files.begin(), files.end());
      for (const std::string& f : files) {
        names_ += folder;
        names_ += '/';
        names_ += f;
        ends_.push_back(names_.size());
        labels_.push_back(label);
      }
    }
    if (labels_.size() == before) {
      return absl::InvalidArgumentError(absl::StrCat(
          field_, ": ", shown_, "/", rel, ": no .jpg, .jpeg or .png files (class ", label, ")"));
    }
    return absl::OkStatus();
  }

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  std::optional<Dims> stored_shape() const override { return std::nullopt; }
  MaxLabel max_label() const override {
    return labels_.empty() ? MaxLabel{} : MaxLabel{labels_.back(), size() - 1};
  }

  absl::Status Read(int64_t index, StoredExample* out) const override {
    if (index < 0 || index >= size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field_, ": ", shown_, ": image ", index, " is not in [0, ", size(), ")"));
    }
    const std::string rel = Name(index);
    ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f,
                     RandomAccessFile::Open(absl::StrCat(root_, "/", rel), Where(index)));
    if (f->size() > kMaxImageFileBytes) {
      return absl::InvalidArgumentError(absl::StrCat(Where(index), ": ", f->size(),
                                                     " bytes, over the ", kMaxImageFileBytes,
                                                     " an image file may have"));
    }
    RETURN_IF_ERROR(f->Read(0, f->size(), &out->bytes));
    out->kind = StoredExample::Kind::kEncoded;
    out->label = labels_[index];
    return absl::OkStatus();
  }

  std::string Where(int64_t index) const override {
    if (index < 0 || index >= size()) return absl::StrCat(field_, ": ", shown_, ": image ", index);
    return absl::StrCat(field_, ": ", shown_, "/", Name(index));
  }

 private:
  std::string Name(int64_t i) const {
    const size_t start = i == 0 ? 0 : ends_[i - 1];
    return names_.substr(start, ends_[i] - start);
  }

  absl::Status Walk(const std::string& rel, int depth, const DataRoots* roots,
                    std::vector<std::pair<std::string, std::vector<std::string>>>* out) {
    const std::string shown = absl::StrCat(shown_, "/", rel);
    if (depth > kMaxFolderDepth) {
      return absl::InvalidArgumentError(absl::StrCat(field_, ": ", shown, ": folders nested over ",
                                                     kMaxFolderDepth, " deep (a link loop?)"));
    }
    const std::string dir = absl::StrCat(root_, "/", rel);
    FolderEntries entries;
    RETURN_IF_ERROR(ListFolder(dir, absl::StrCat(field_, ": ", shown), &entries));
    std::vector<std::string> images;
    for (size_t i = 0; i < entries.files.size(); ++i) {
      const std::string& f = entries.files[i];
      switch (KindOf(f)) {
        case FileKind::kImage:
          // The root is resolved inside the data roots; what lies below it stays there
          // unless a link leads out: those are checked.
          if (roots != nullptr && entries.file_links[i]) {
            RETURN_IF_ERROR(roots->Resolve(field_, shown + "/" + f).status());
          }
          images.push_back(f);
          break;
        case FileKind::kForeignImage:
          return absl::InvalidArgumentError(absl::StrCat(
              field_, ": ", shown, "/", f,
              ": only JPEG and PNG images are read (convert it, or move it out of the folder)"));
        case FileKind::kOther:
          break;
      }
    }
    out->emplace_back(rel, std::move(images));
    for (size_t i = 0; i < entries.folders.size(); ++i) {
      if (roots != nullptr && entries.folder_links[i]) {
        RETURN_IF_ERROR(roots->Resolve(field_, shown + "/" + entries.folders[i]).status());
      }
      RETURN_IF_ERROR(Walk(absl::StrCat(rel, "/", entries.folders[i]), depth + 1, roots, out));
    }
    return absl::OkStatus();
  }

  const std::string root_, shown_, field_;
  std::string names_;         // every image's path below the root, one after the other
  std::vector<size_t> ends_;  // where each ends in names_
  std::vector<int32_t> labels_;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> ListImageFolderClasses(const std::string& root,
                                                                const std::string& field,
                                                                const std::string& shown) {
  FolderEntries entries;
  RETURN_IF_ERROR(ListFolder(root, absl::StrCat(field, ": ", shown), &entries));
  if (entries.folders.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", shown, ": no class folders (an image folder holds one folder per class)"));
  }
  std::sort(entries.folders.begin(), entries.folders.end());
  return entries.folders;
}

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenImageFolderSource(const v1::DatasetSpec& spec,
                                                                     Split split,
                                                                     const SourceOptions& options) {
  const bool train = split == Split::kTrain;
  const std::string& shown = train ? spec.train_path() : spec.test_path();
  const std::string field = train ? "dataset.train_path" : "dataset.test_path";
  std::string root = shown;
  if (options.roots != nullptr) {
    ASSIGN_OR_RETURN(root, options.roots->Resolve(field, shown));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> classes, ListImageFolderClasses(root, field, shown));
  if (!train) {
    std::string train_root = spec.train_path();
    if (options.roots != nullptr) {
      ASSIGN_OR_RETURN(train_root, options.roots->Resolve("dataset.train_path", spec.train_path()));
    }
    ASSIGN_OR_RETURN(std::vector<std::string> train_classes,
                     ListImageFolderClasses(train_root, "dataset.train_path", spec.train_path()));
    if (classes != train_classes) {
      std::vector<std::string> only_test, only_train;
      std::set_difference(classes.begin(), classes.end(), train_classes.begin(),
                          train_classes.end(), std::back_inserter(only_test));
      std::set_difference(train_classes.begin(), train_classes.end(), classes.begin(),
                          classes.end(), std::back_inserter(only_train));
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", shown,
                       ": its classes differ from dataset.train_path's, so labels would "
                       "not match (only here: '",
                       absl::StrJoin(only_test, "', '"), "'; only in training: '",
                       absl::StrJoin(only_train, "', '"), "')"));
    }
  }
  auto source = std::make_unique<ImageFolderSource>(root, shown, field);
  for (size_t c = 0; c < classes.size(); ++c) {
    RETURN_IF_ERROR(source->AddClass(classes[c], static_cast<int>(c), options.roots));
  }
  return source;
}

}  // namespace lockstep
