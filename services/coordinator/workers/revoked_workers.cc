// RevokedWorkers: the worker identities an admin revoked, kept in a file of the coordinator's state
// folder. Contract: revoked_workers.h.
#include "services/coordinator/workers/revoked_workers.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "services/common/security/auth.h"

namespace lockstep {

absl::StatusOr<RevokedWorkers> RevokedWorkers::Load(const std::string& path) {
  RevokedWorkers r;
  r.path_ = path;
  std::ifstream in(path);
  if (!in) return r;  // nothing revoked yet
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string identity(absl::StripAsciiWhitespace(line));
    if (identity.empty()) continue;
    if (!ValidWorkerName(identity)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", n, ": not a worker identity ([A-Za-z0-9._-], 1 to 64)"));
    }
    r.revoked_.insert(identity);
  }
  return r;
}

absl::Status RevokedWorkers::Add(const std::string& identity) {
  if (revoked_.contains(identity)) return absl::OkStatus();
  if (!path_.empty()) {
    std::string text;
    for (const std::string& i : revoked_) absl::StrAppend(&text, i, "\n");
    absl::StrAppend(&text, identity, "\n");
    const std::string tmp = path_ + ".tmp";
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return absl::PermissionDeniedError(absl::StrCat(tmp, ": ", std::strerror(errno)));
    const bool ok =
        write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
    const int err = errno;
    close(fd);
    if (!ok || rename(tmp.c_str(), path_.c_str()) != 0) {
      unlink(tmp.c_str());
      return absl::UnavailableError(absl::StrCat(path_, ": ", std::strerror(ok ? errno : err)));
    }
  }
  revoked_.insert(identity);
  return absl::OkStatus();
}

}  // namespace lockstep
