// Containment of paths, for services that confine the files a request names to folders
// (the coordinator's checkpoint folder, a worker's data roots).
#ifndef LOCKSTEP_CORE_IO_PATHS_H_
#define LOCKSTEP_CORE_IO_PATHS_H_

#include <filesystem>

namespace lockstep {

// Whether `path` is `folder` or lies below it, comparing whole components of both as
// given, without touching the file system: "/data/x" is within "/data", "/database" is
// not. Give both in the same form (absolute and lexically normal, or both resolved).
bool IsWithin(const std::filesystem::path& path, const std::filesystem::path& folder);

// `path` made absolute with every symbolic link in it followed, dangling ones too (as
// std::filesystem::weakly_canonical, which leaves a dangling link as it is): where
// opening or creating it would lead. Past what exists it is lexical. Empty when that
// cannot be told (a folder that cannot be read, a loop of links).
std::filesystem::path ResolvePath(const std::filesystem::path& path);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_IO_PATHS_H_
