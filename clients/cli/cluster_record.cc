// What a local cluster's processes share through its folder: the record cluster.json and
// the signals that ask its supervisor. Contract: cluster_record.h.
#include "clients/cli/cluster_record.h"

#include <signal.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace lockstep::cli {

namespace fs = std::filesystem;

bool Runs(pid_t pid, std::initializer_list<std::string_view> names) {
  if (pid <= 0) return false;
  std::error_code ec;
  std::string exe = fs::read_symlink(absl::StrCat("/proc/", pid, "/exe"), ec).filename();
  if (ec) return false;
  // A binary rebuilt since the process started reads "NAME (deleted)".
  if (exe.ends_with(" (deleted)")) exe.resize(exe.size() - std::string_view(" (deleted)").size());
  for (std::string_view name : names) {
    if (exe == name) return true;
  }
  return false;
}

std::string AbsoluteFolder(const std::string& dir) {
  return fs::absolute(dir).lexically_normal().string();
}

absl::StatusOr<nlohmann::json> ReadRecord(const std::string& dir) {
  const fs::path path = fs::path(dir) / "cluster.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no cluster recorded in ", path.string()));
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(path.string(), ": ", e.what()));
  }
}

absl::StatusOr<nlohmann::json> AskSupervisor(const std::string& dir, int signal,
                                             const std::string& counter, absl::Duration limit) {
  absl::StatusOr<nlohmann::json> before = ReadRecord(dir);
  if (!before.ok()) return before.status();
  const pid_t supervisor = before->value("supervisor", pid_t{0});
  if (!Runs(supervisor, {"lockstep"})) {
    return absl::FailedPreconditionError(
        absl::StrCat("the supervisor of the cluster in ", dir, " (pid ", supervisor,
                     ") does not run: `lockstep cluster down`, then `cluster up` again"));
  }
  if (!before->contains(counter)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the cluster in ", dir, " was started by an older lockstep, which cannot do this: ",
        "`lockstep cluster down`, then `cluster up` again"));
  }
  const int count = before->value(counter, 0);
  kill(supervisor, signal);
  const absl::Time end = absl::Now() + limit;
  absl::StatusOr<nlohmann::json> after = before;
  // Rewritten by rename: a read sees the old record or the new one, whole.
  while (absl::Now() < end && (after = ReadRecord(dir)).ok() && after->value(counter, 0) == count) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (!after.ok()) return after.status();
  if (after->value(counter, 0) == count) {
    return absl::DeadlineExceededError(absl::StrCat("the supervisor did not answer within ",
                                                    absl::FormatDuration(limit), "; see ", dir,
                                                    "/logs/supervisor.log"));
  }
  return after;
}

}  // namespace lockstep::cli
