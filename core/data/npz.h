// NumPy's .npz files: a zip archive of .npy files, one per array (np.savez writes STORED
// entries, np.savez_compressed DEFLATED ones; numpy asks for zip64 extra fields on every
// entry). libzip reads the archive: zip64 records and extra fields, data descriptors,
// archive comments. Not supported: encryption, other compression methods, archives split
// over disks, and data before the archive (self-extracting files).
//
// Untrusted sizes are checked before anything is allocated: an entry's compressed size
// against the file's size, a STORED entry's size against its compressed size, a DEFLATED
// one against what deflate can expand its compressed bytes to (1032:1), and every entry
// against max_bytes. Every entry's CRC-32 is checked.
//
// Thread safety: an NpzFile's directory is immutable once open; Read may be called from
// several threads (their reads of the archive take turns).
#ifndef LOCKSTEP_CORE_DATA_NPZ_H_
#define LOCKSTEP_CORE_DATA_NPZ_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/data/npy.h"

struct zip;  // libzip's zip_t

namespace lockstep {

class NpzFile {
 public:
  // Opens `path` and reads its central directory. Errors name the file: NOT_FOUND when it
  // cannot be opened; INVALID_ARGUMENT when it is not a zip archive (a .npy, say) or uses
  // what is not supported, or two entries share a name; DATA_LOSS when it is truncated or
  // its directory is corrupt.
  static absl::StatusOr<std::unique_ptr<NpzFile>> Open(const std::string& path,
                                                       uint64_t max_bytes = uint64_t{1} << 31);
  ~NpzFile();
  NpzFile(const NpzFile&) = delete;
  NpzFile& operator=(const NpzFile&) = delete;

  const std::string& path() const { return path_; }
  // The arrays' names, in archive order: the entries' names with ".npy" removed (as
  // np.load's NpzFile.files).
  std::vector<std::string> keys() const;
  bool contains(const std::string& key) const { return Find(key) != nullptr; }

  // The array named `key` (np.load(path)[key]). Errors name the file and the array:
  // NOT_FOUND when there is none, listing the keys present; INVALID_ARGUMENT for an entry
  // over max_bytes or not a .npy numpy would load (ParseNpy); DATA_LOSS when its bytes are
  // truncated or corrupt (a bad deflate stream, a CRC-32 mismatch).
  absl::StatusOr<NpyArray> Read(const std::string& key) const;

 private:
  struct Entry {
    std::string name;  // as in the archive ("image.npy")
    uint64_t index = 0;
    uint16_t method = 0;
    uint64_t compressed = 0, uncompressed = 0;
  };
  NpzFile(std::string path, zip* archive, uint64_t max_bytes)
      : path_(std::move(path)), archive_(archive), max_bytes_(max_bytes) {}
  absl::Status ReadDirectory(uint64_t file_size);
  const Entry* Find(const std::string& key) const;
  absl::StatusOr<std::string> Contents(const Entry& e, const std::string& what) const;

  const std::string path_;
  zip* const archive_;        // libzip's, owned
  const uint64_t max_bytes_;  // an array's data at most
  std::vector<Entry> entries_;
  mutable absl::Mutex mu_;  // libzip's archive serves one read at a time
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_NPZ_H_
