// Fuzzes the .npz reader (core/data/npz.h, npy.h) as a worker reads a user's dataset:
// the zip directory, every entry (STORED or DEFLATED, zip64 or not), each as a .npy, then
// the whole split as LoadNpzDataset makes it, under a 1 MiB limit so that sizes over it
// are errors rather than large allocations. The input is also parsed as a bare .npy.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/data/dataset.h"
#include "core/data/npy.h"
#include "core/data/npz.h"
#include "tests/fuzz/memory_file.h"

namespace {

constexpr uint64_t kMaxBytes = 1 << 20;

// What a reader accepts is what its header says.
void CheckArray(const lockstep::NpyArray& a) {
  uint64_t count = 1;
  for (int64_t d : a.shape) {
    if (d < 0) std::abort();
    count *= static_cast<uint64_t>(d);
  }
  if (a.item_size <= 0 || count * a.item_size != a.data.size() || a.data.size() > kMaxBytes) {
    std::abort();
  }
  if (a.kind == 'i' || a.kind == 'u') {
    for (int64_t i = 0; i < a.count(); ++i) (void)a.IntAt(i);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<lockstep::NpyArray> npy =
      lockstep::ParseNpy(std::string(reinterpret_cast<const char*>(data), size), "fuzz", kMaxBytes);
  if (npy.ok()) CheckArray(*npy);

  const std::string path = lockstep::fuzz::MemoryFile(data, size);
  absl::StatusOr<std::unique_ptr<lockstep::NpzFile>> npz = lockstep::NpzFile::Open(path, kMaxBytes);
  if (!npz.ok()) return 0;
  for (const std::string& key : (*npz)->keys()) {
    absl::StatusOr<lockstep::NpyArray> a = (*npz)->Read(key);
    if (a.ok()) CheckArray(*a);
  }
  absl::StatusOr<lockstep::Dataset> ds =
      lockstep::LoadNpzDataset(path, "dataset.train_path", "image", "label", kMaxBytes);
  if (!ds.ok()) return 0;
  if (ds->size <= 0 || ds->row != ds->shape.size() ||
      ds->images.size() != static_cast<size_t>(ds->size * ds->row) ||
      ds->labels.size() != static_cast<size_t>(ds->size) || ds->labels[ds->max_label_index] < 0) {
    std::abort();
  }
  for (float x : ds->images) {
    if (!std::isfinite(x)) std::abort();
  }
  for (int32_t l : ds->labels) {
    if (l < 0 || l > ds->labels[ds->max_label_index]) std::abort();
  }
  return 0;
}
