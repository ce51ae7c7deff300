// The imagefolder format's ExampleSource, torchvision's ImageFolder convention: a root
// folder per split with one subfolder per class; classes are the subfolders sorted by
// name (label = position), and each class's images are its files with a .jpg, .jpeg or
// .png extension (any case), found in its subfolders too (symbolic links followed), in
// the order of Python's sorted(os.walk(class_folder)) with each folder's files sorted:
// the order and the labels torchvision's ImageFolder gives. Other files are ignored,
// except images of the other formats torchvision reads (.bmp, .ppm, .pgm, .tif, .tiff,
// .webp), which are refused rather than silently left out. The test split's classes must
// be the training split's.
//
// The list is made once, at Open (a folder of 1.28 M files: a few seconds, once per
// worker start); a read opens and reads one file.
//
// Thread safety: as ExampleSource.
#ifndef LOCKSTEP_CORE_DATA_IMAGE_FOLDER_SOURCE_H_
#define LOCKSTEP_CORE_DATA_IMAGE_FOLDER_SOURCE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/example_source.h"

namespace lockstep {

// The class folders of `root` sorted by name. FAILED_PRECONDITION for a root that cannot
// be listed, INVALID_ARGUMENT for one without subfolders; messages name `field` and `shown`.
absl::StatusOr<std::vector<std::string>> ListImageFolderClasses(const std::string& root,
                                                                const std::string& field,
                                                                const std::string& shown);

// Opens `split` of `spec` (validated). Errors name the field and the folder or file:
// FAILED_PRECONDITION for a missing root, INVALID_ARGUMENT for a root without class
// folders, an empty class, an image of a format Lockstep does not read, a path out of
// the data roots, test classes other than the training split's.
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenImageFolderSource(const v1::DatasetSpec& spec,
                                                                     Split split,
                                                                     const SourceOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_IMAGE_FOLDER_SOURCE_H_
