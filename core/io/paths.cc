// Containment of paths, for services that confine the files a request names to folders (the
// coordinator's checkpoint folder, a worker's data roots). Contract: paths.h.
#include "core/io/paths.h"

namespace lockstep {

bool IsWithin(const std::filesystem::path& path, const std::filesystem::path& folder) {
  auto p = path.begin();
  for (auto f = folder.begin(); f != folder.end(); ++f, ++p) {
    if (f->empty() && std::next(f) == folder.end()) break;  // a trailing "/" in `folder`
    if (p == path.end() || *p != *f) return false;
  }
  return true;
}

std::filesystem::path ResolvePath(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  fs::path p = path;
  for (int links = 0; links < 40; ++links) {  // as the kernel's ELOOP limit
    std::error_code ec;
    const fs::path r = fs::weakly_canonical(p, ec);
    if (ec) return {};
    // weakly_canonical followed the links of the part that exists; a dangling one may
    // remain where that part ends.
    fs::path prefix;
    bool followed = false;
    for (auto it = r.begin(); it != r.end() && !followed; ++it) {
      prefix /= *it;
      if (!fs::is_symlink(fs::symlink_status(prefix, ec))) continue;
      const fs::path target = fs::read_symlink(prefix, ec);
      if (ec) return {};
      fs::path rest;
      for (auto r_it = std::next(it); r_it != r.end(); ++r_it) rest /= *r_it;
      p = target.is_absolute() ? target : prefix.parent_path() / target;
      if (!rest.empty()) p /= rest;
      followed = true;
    }
    if (!followed) return r;
  }
  return {};
}

}  // namespace lockstep
