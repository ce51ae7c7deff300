// DataRoots: the folders datasets may be read from (a worker's --data_root). A dataset
// path is accepted only inside one of them, both as written (absolute, "." and ".."
// removed) and as resolved (symlinks followed): "/etc", "/proc/self", "../.." and a link
// out of a root are refused.
//
// No existence oracle: every refusal reads the same whether or not the file exists. The
// lexical check comes first and touches no file; the resolved check only follows what
// exists inside a root, and no message shows a resolved path.
//
// Thread safety: immutable.
#ifndef LOCKSTEP_CORE_DATA_DATA_ROOTS_H_
#define LOCKSTEP_CORE_DATA_DATA_ROOTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

// Debian's dataset packages (dataset-fashion-mnist, ...), the English text of Debian's
// fortunes package, and a folder for users' data (a volume mounted at /data).
inline constexpr char kDefaultDataRoots[] = "/usr/share/datasets,/usr/share/games/fortunes,/data";

class DataRoots {
 public:
  // No roots: any path is accepted (`lockstep train` reads the user's own files).
  DataRoots() = default;
  // A comma-separated list of absolute folders; INVALID_ARGUMENT naming a relative one,
  // or an empty list.
  static absl::StatusOr<DataRoots> Parse(absl::string_view list);

  bool empty() const { return roots_.empty(); }
  const std::vector<std::string>& roots() const { return roots_; }

  // Without touching the file system: INVALID_ARGUMENT "FIELD: PATH is outside the data
  // roots (ROOTS)" unless `path` is absolute and, "." and ".." removed, inside a root.
  // For the coordinator, which cannot see the workers' files.
  absl::Status CheckLexically(const std::string& field, const std::string& path) const;

  // CheckLexically, then the path with symlinks followed (as far as it exists) must be
  // inside a root (resolved alike): the same INVALID_ARGUMENT otherwise. Returns the
  // path to read, resolved (`path` as given when there are no roots).
  absl::StatusOr<std::string> Resolve(const std::string& field, const std::string& path) const;

 private:
  absl::Status Outside(const std::string& field, const std::string& path) const;

  std::vector<std::string> roots_;  // absolute, lexically normal
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_DATA_ROOTS_H_
