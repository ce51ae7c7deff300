// EnrolledWorkers: the identities enrollment issued and whether each may take work.
// Contract: enrolled_workers.h.
#include "services/coordinator/workers/enrolled_workers.h"

#include <fnmatch.h>

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "services/common/security/auth.h"
#include "services/common/security/private_files.h"

namespace lockstep {
namespace {

constexpr const char* kStatusNames[] = {"pending", "approved", "auto"};

}  // namespace

absl::StatusOr<EnrolledWorkers> EnrolledWorkers::Load(const std::string& path) {
  EnrolledWorkers e;
  e.path_ = path;
  std::ifstream in(path);
  std::string line;
  for (int n = 1; in && std::getline(in, line); ++n) {
    const std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (f.empty()) continue;
    const auto* status = std::find(std::begin(kStatusNames), std::end(kStatusNames),
                                   f.size() == 3 ? f[1] : std::string());
    if (f.size() != 3 || !ValidWorkerName(f[0]) || status == std::end(kStatusNames)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", n, ": expected IDENTITY pending|approved|auto NAME, got \"", line, "\""));
    }
    e.by_identity_[f[0]] = {f[0], f[2], static_cast<Status>(status - std::begin(kStatusNames))};
  }
  return e;
}

absl::Status EnrolledWorkers::Write(const std::map<std::string, Entry>& entries) const {
  if (path_.empty()) return absl::OkStatus();
  std::string text;
  for (const auto& [identity, e] : entries) {
    absl::StrAppend(&text, identity, " ", kStatusNames[static_cast<int>(e.status)], " ", e.name,
                    "\n");
  }
  return WritePrivate(path_, text);
}

absl::StatusOr<EnrolledWorkers::Entry> EnrolledWorkers::Add(const std::string& identity,
                                                            const std::string& name,
                                                            const ApprovalPolicy& policy) {
  const int autos =
      static_cast<int>(std::count_if(by_identity_.begin(), by_identity_.end(), [](const auto& kv) {
        return kv.second.status == Status::kAuto;
      }));
  const bool covered = !policy.auto_approve.empty() && autos < policy.auto_approve_max &&
                       fnmatch(policy.auto_approve.c_str(), name.c_str(), 0) == 0;
  Entry entry{identity, name.empty() ? "-" : name, covered ? Status::kAuto : Status::kPending};
  std::map<std::string, Entry> next = by_identity_;
  next[identity] = entry;
  if (absl::Status st = Write(next); !st.ok()) return st;
  by_identity_ = std::move(next);
  return entry;
}

absl::Status EnrolledWorkers::Approve(const std::string& identity) {
  auto it = by_identity_.find(identity);
  if (it == by_identity_.end()) {
    return absl::NotFoundError(
        absl::StrCat("enrollment issued no identity ", identity, " (it needs no approval)"));
  }
  if (it->second.status != Status::kPending) return absl::OkStatus();
  std::map<std::string, Entry> next = by_identity_;
  next[identity].status = Status::kApproved;
  if (absl::Status st = Write(next); !st.ok()) return st;
  by_identity_ = std::move(next);
  return absl::OkStatus();
}

bool EnrolledWorkers::Pending(const std::string& identity) const {
  auto it = by_identity_.find(identity);
  return it != by_identity_.end() && it->second.status == Status::kPending;
}

std::vector<EnrolledWorkers::Entry> EnrolledWorkers::entries() const {
  std::vector<Entry> out;
  for (const auto& [identity, e] : by_identity_) out.push_back(e);
  return out;
}

}  // namespace lockstep
