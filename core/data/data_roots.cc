// DataRoots: the folders datasets may be read from (a worker's --data_root). Contract:
// data_roots.h.
#include "core/data/data_roots.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/io/paths.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

}  // namespace

absl::StatusOr<DataRoots> DataRoots::Parse(absl::string_view list) {
  DataRoots out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    const std::string root(absl::StripAsciiWhitespace(part));
    if (!fs::path(root).is_absolute()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data_root: \"", root, "\" is not an absolute folder"));
    }
    std::string normal = fs::path(root).lexically_normal().string();
    if (normal.size() > 1 && normal.back() == '/') normal.pop_back();
    out.roots_.push_back(std::move(normal));
  }
  if (out.roots_.empty()) return absl::InvalidArgumentError("data_root: no folder given");
  return out;
}

absl::Status DataRoots::Outside(const std::string& field, const std::string& path) const {
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": \"", path, "\" is outside the data roots (", absl::StrJoin(roots_, ", "), ")"));
}

absl::Status DataRoots::CheckLexically(const std::string& field, const std::string& path) const {
  if (roots_.empty()) return absl::OkStatus();
  const fs::path p(path);
  // Relative paths would be read from wherever a worker runs: not inside anything.
  if (!p.is_absolute()) return Outside(field, path);
  const fs::path normal = p.lexically_normal();  // "/a/../../etc" is "/etc"
  for (const std::string& root : roots_) {
    if (IsWithin(normal, root)) return absl::OkStatus();
  }
  return Outside(field, path);
}

absl::StatusOr<std::string> DataRoots::Resolve(const std::string& field,
                                               const std::string& path) const {
  if (roots_.empty()) return path;
  RETURN_IF_ERROR(CheckLexically(field, path));
  const fs::path normal = fs::path(path).lexically_normal();
  // Inside a root as written: what it resolves to concerns that root's contents only.
  const fs::path resolved = ResolvePath(normal);
  if (resolved.empty()) return Outside(field, path);
  for (const std::string& root : roots_) {
    const fs::path r = ResolvePath(root);
    if (!r.empty() && IsWithin(resolved, r)) return resolved.string();
  }
  return Outside(field, path);
}

}  // namespace lockstep
