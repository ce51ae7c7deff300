// The job's audit, the coordinator's side (JobSpec.audit, docs/audit.md): which steps are audited
// and by whom (AuditPlan), and what the answers say (JudgeAudit). Contract: audit.h.
#include "services/coordinator/jobs/audit.h"

#include <cstring>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace {

// SplitMix64's finalizer: the plan's RNG, a pure function of (seed, step, draw).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One answer as compared: the gradients' digest, the loss's bits and the BatchNorm
// contributions' digest (0 without).
using Answer = std::tuple<uint64_t, uint32_t, uint64_t>;

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

}  // namespace

AuditPlan::AuditPlan(const v1::JobSpec& spec, std::vector<uint32_t> threads, bool shared_statistics)
    : every_(shared_statistics ? 0 : spec.audit().every_steps()),
      // Its own stream: the seed mixed with a constant, apart from the data order and keys.
      seed_(Mix(static_cast<uint64_t>(spec.seed()) ^ 0x6175646974ull /* "audit" */)),
      threads_(std::move(threads)) {}

std::optional<AuditPick> AuditPlan::Pick(int64_t step, bool snapshot) const {
  const int n = static_cast<int>(threads_.size());
  if (every_ == 0 || n < 2 || !(snapshot || (static_cast<uint64_t>(step) + 1) % every_ == 0)) {
    return std::nullopt;
  }
  const uint64_t r = Mix(seed_ ^ Mix(static_cast<uint64_t>(step)));
  AuditPick pick;
  pick.audited = static_cast<int>(r % n);
  std::vector<int> peers;  // ranks that compute that shard with the same bits
  for (int c = 0; c < n; ++c) {
    if (c != pick.audited && threads_[c] == threads_[pick.audited]) peers.push_back(c);
  }
  if (peers.empty()) return std::nullopt;
  uint64_t draw = Mix(r);
  for (int k = 0; k < 2 && !peers.empty(); ++k, draw = Mix(draw)) {
    const size_t i = draw % peers.size();
    pick.checkers.push_back(peers[i]);
    peers.erase(peers.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return pick;
}

AuditVerdict JudgeAudit(const AuditPick& pick, const std::vector<StepResult>& got,
                        const std::vector<std::string>& ids) {
  std::vector<std::pair<int, Answer>> answers;
  const StepResult& a = got[pick.audited];
  // With logical replicas the audited shard is the worker's first replica: its own loss.
  const float fed_loss = a.replica_losses.empty() ? a.loss : a.replica_losses[0];
  answers.push_back({pick.audited, {a.grad_digest, Bits(fed_loss), a.stats_digest}});
  for (int c : pick.checkers) {
    // One that did not recompute agrees with nobody: a value no digest pairs with a loss of
    // its own bits here (the loss's bits flipped).
    const StepResult& g = got[c];
    answers.push_back({c, g.audited
                              ? Answer{g.audit_digest, Bits(g.audit_loss), g.audit_stats_digest}
                              : Answer{~a.grad_digest, ~Bits(fed_loss), a.stats_digest}});
  }
  std::map<Answer, std::vector<int>> votes;
  for (const auto& [rank, answer] : answers) votes[answer].push_back(rank);
  std::vector<std::string> parts;
  for (const auto& [rank, answer] : answers) {
    const auto& [digest, loss, stats] = answer;
    parts.push_back(absl::StrCat(
        absl::StrFormat("%s %s digest %016x loss %08x", ids[rank],
                        rank == pick.audited ? "fed" : "recomputed", digest, loss),
        // A BatchNorm model's (on logical replicas): its statistics contributions'.
        a.stats_digest != 0 || stats != 0 ? absl::StrFormat(" statistics %016x", stats) : ""));
  }
  AuditVerdict v;
  v.detail = absl::StrCat("shard of rank ", pick.audited, ": ", absl::StrJoin(parts, ", "));
  if (votes.size() == 1) {
    v.passed = true;
    return v;
  }
  for (const auto& [answer, ranks] : votes) {
    if (ranks.size() * 2 > answers.size()) {  // a majority: the others lied
      for (const auto& [other, others_ranks] : votes) {
        if (other != answer)
          v.liars.insert(v.liars.end(), others_ranks.begin(), others_ranks.end());
      }
      return v;
    }
  }
  for (const auto& [rank, answer] : answers) v.suspects.push_back(rank);
  return v;
}

}  // namespace lockstep
