#include "services/coordinator/jobs/decision.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/testing.h"

namespace lockstep::testing {
namespace {

std::vector<PoolWorker> Named(int n, const std::string& prefix) {
  std::vector<PoolWorker> out(n);
  for (int i = 0; i < n; ++i) out[i].id = absl::StrCat(prefix, i);
  return out;
}

std::vector<std::string> Ids(int n, const std::string& prefix) {
  std::vector<std::string> out;
  for (const PoolWorker& w : Named(n, prefix)) out.push_back(w.id);
  return out;
}

// Every end an attempt of `workers` workers can have, in its variants: the failures by
// code, survivors, completion and audit; the resizes by leaving and joining.
std::vector<AttemptEnd> EveryEnd(int workers) {
  std::vector<AttemptEnd> ends = {Finished{}, Cancelled{absl::CancelledError("x")},
                                  Drained{absl::UnavailableError("x")},
                                  Suspended{absl::UnavailableError("x")}};
  for (int leaving = 0; leaving <= workers; ++leaving) {
    for (int joining = 0; joining <= 2; ++joining) {
      if (leaving + joining == 0) continue;
      ResizeAt r;
      r.step = 7;
      r.leaving = Ids(leaving, "w");
      r.joining = Named(joining, "new");
      ends.push_back(std::move(r));
    }
  }
  const absl::Status codes[] = {absl::UnavailableError("x"),     absl::DeadlineExceededError("x"),
                                absl::AbortedError("x"),         absl::DataLossError("x"),
                                absl::InvalidArgumentError("x"), absl::FailedPreconditionError("x"),
                                absl::InternalError("x"),        absl::ResourceExhaustedError("x")};
  for (const absl::Status& why : codes) {
    for (int lost = 0; lost <= workers; ++lost) {
      for (const int64_t completed : {int64_t{-1}, int64_t{0}, int64_t{5}}) {
        for (const bool audit : {false, true}) {
          for (const bool liar : {false, true}) {
            if (liar && !audit) continue;
            Failed f;
            f.why = why;
            f.lost = Ids(lost, "w");
            f.survivors = Named(workers - lost, "s");
            f.completed = completed;
            if (audit) f.audit_lost = Named(1, "a");
            if (liar) f.liars = f.audit_lost;
            ends.push_back(std::move(f));
          }
        }
      }
    }
  }
  return ends;
}

// What the docs promise, said again independently of the table's rules.
Action::Kind Expected(const JobFacts& job, const AttemptEnd& end, int free, const Policy& p,
                      bool* counted) {
  *counted = false;
  const int least = std::max(1, p.min_workers);
  if (std::holds_alternative<Cancelled>(end)) return Action::kCancel;
  if (std::holds_alternative<Drained>(end) || std::holds_alternative<Suspended>(end)) {
    return Action::kSuspend;
  }
  if (std::holds_alternative<Finished>(end)) return Action::kFinish;
  if (const auto* r = std::get_if<ResizeAt>(&end)) {
    if (!r->leaving.empty() && (!p.elastic || free < least)) return Action::kRecover;
    return Action::kResize;
  }
  const Failed& f = std::get<Failed>(end);
  if (p.elastic && p.recovers && f.completed >= 0 && f.audit_lost.empty() && !f.lost.empty() &&
      free >= least) {
    return Action::kShrink;
  }
  const absl::StatusCode c = f.why.code();
  const bool workers_fault =
      !f.lost.empty() || !f.audit_lost.empty() || c == absl::StatusCode::kUnavailable ||
      c == absl::StatusCode::kDeadlineExceeded || c == absl::StatusCode::kAborted;
  if (p.recovers && workers_fault && job.recoveries < p.max_restarts) {
    *counted = true;
    return Action::kRecover;
  }
  return Action::kFail;
}

TEST(DecisionTest, EveryCombinationOfInputsDecidesAsTheDocsSayAndEveryRuleDecidesSome) {
  std::set<int> rules_used;
  int64_t combinations = 0;
  for (int workers = 1; workers <= 4; ++workers) {
    const std::vector<AttemptEnd> ends = EveryEnd(workers);
    for (const AttemptEnd& end : ends) {
      for (const bool elastic : {false, true}) {
        for (const bool recovers : {false, true}) {
          for (int min = 0; min <= workers; ++min) {
            for (int recoveries = 0; recoveries <= 2; ++recoveries) {
              for (int max_restarts = 0; max_restarts <= 2; ++max_restarts) {
                const JobFacts job{workers, recoveries};
                const Policy policy{recovers, elastic, min, max_restarts};
                const int free = FreeWorkers(end, workers);
                const Action got = Next(job, end, free, policy);
                bool counted = false;
                const Action::Kind want = Expected(job, end, free, policy, &counted);
                ASSERT_EQ(got.kind, want)
                    << EndName(KindOf(end)) << " workers " << workers << " free " << free
                    << " elastic " << elastic << " recovers " << recovers << " min " << min
                    << " recoveries " << recoveries << "/" << max_restarts << ": rule " << got.rule;
                ASSERT_EQ(got.counted, counted) << "rule " << got.rule;
                ASSERT_GE(got.rule, 1);
                rules_used.insert(got.rule);
                ++combinations;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(combinations, 50000);
  // No rule is shadowed by those before it.
  EXPECT_EQ(rules_used.size(), DecisionTable().size());
}

TEST(DecisionTest, FreeWorkersAreTheSurvivorsOrTheNewMembership) {
  Failed f;
  f.survivors = Named(2, "s");
  f.lost = Ids(1, "w");
  EXPECT_EQ(FreeWorkers(f, 3), 2);
  ResizeAt r;
  r.leaving = Ids(1, "w");
  r.joining = Named(2, "n");
  EXPECT_EQ(FreeWorkers(r, 3), 4);
  EXPECT_EQ(FreeWorkers(Finished{}, 3), 3);
}

TEST(DecisionTest, AnElasticJobShrinksOnlyFromAStepItsSurvivorsHold) {
  const Policy policy{.recovers = true, .elastic = true, .min_workers = 2, .max_restarts = 3};
  Failed f;
  f.why = absl::UnavailableError("worker w2 is unreachable");
  f.lost = {"w2"};
  f.survivors = Named(2, "s");
  f.completed = 10;
  EXPECT_EQ(Next({3, 0}, f, 2, policy).kind, Action::kShrink);
  f.completed = -1;  // lost while preparing: from the snapshot
  const Action from_snapshot = Next({3, 0}, f, 2, policy);
  EXPECT_EQ(from_snapshot.kind, Action::kRecover);
  EXPECT_TRUE(from_snapshot.counted);
  f.completed = 10;
  EXPECT_EQ(Next({3, 3}, f, 1, policy).kind, Action::kFail);  // below min, no restarts left
}

TEST(DecisionTest, ALeavingWorkerOfAJobAtItsMinIsAPlannedRecoveryNotCounted) {
  ResizeAt r;
  r.step = 5;
  r.leaving = {"w1"};
  const Policy at_min{.recovers = true, .elastic = true, .min_workers = 3, .max_restarts = 0};
  const Action a = Next({3, 0}, r, FreeWorkers(r, 3), at_min);
  EXPECT_EQ(a.kind, Action::kRecover);
  EXPECT_FALSE(a.counted);
  const Policy room{.recovers = true, .elastic = true, .min_workers = 1, .max_restarts = 0};
  EXPECT_EQ(Next({3, 0}, r, FreeWorkers(r, 3), room).kind, Action::kResize);
}

TEST(DecisionTest, WhatNoRetryCanFixFailsAtOnce) {
  const Policy policy{.recovers = true, .elastic = false, .min_workers = 1, .max_restarts = 3};
  Failed f;
  f.why = absl::FailedPreconditionError("diverged at step 3: the loss is nan");
  f.survivors = Named(2, "s");
  f.completed = 3;
  EXPECT_EQ(Next({2, 0}, f, 2, policy).kind, Action::kFail);
  f.why = absl::DataLossError("audit of step 5 failed");
  f.audit_lost = Named(1, "liar");
  EXPECT_EQ(Next({2, 0}, f, 2, policy).kind, Action::kRecover);
}

// The section of `path` between its `name` markers; with LOCKSTEP_WRITE_DOCS=1 in the
// environment, rewritten to `want` first (how the docs are made from the table).
std::string Section(const std::string& path, const std::string& name, const std::string& want) {
  std::ifstream in(SourcePath(path));
  std::stringstream text;
  text << in.rdbuf();
  std::string all = text.str();
  const std::string begin = "<!-- " + name + " begin -->\n", end = "<!-- " + name + " end -->";
  const size_t from = all.find(begin);
  const size_t to = all.find(end);
  if (from == std::string::npos || to == std::string::npos || to < from) {
    ADD_FAILURE() << path << " has no section marked " << begin;
    return "";
  }
  const char* write = std::getenv("LOCKSTEP_WRITE_DOCS");
  if (write != nullptr && std::string(write) == "1") {
    all.replace(from + begin.size(), to - from - begin.size(), want);
    std::ofstream(SourcePath(path)) << all;
    return want;
  }
  return all.substr(from + begin.size(), to - from - begin.size());
}

TEST(DecisionTest, TheDocsStateMachineIsThisTable) {
  const std::string table = DecisionTableMarkdown(), summary = DecisionSummaryMarkdown();
  EXPECT_EQ(Section("docs/elastic.md", "decision-table", table), table)
      << "docs/elastic.md's table should read (LOCKSTEP_WRITE_DOCS=1 writes it):\n"
      << table;
  EXPECT_EQ(Section("README.md", "decision-summary", summary), summary)
      << "README.md's Faults list should read (LOCKSTEP_WRITE_DOCS=1 writes it):\n"
      << summary;
}

}  // namespace
}  // namespace lockstep::testing
