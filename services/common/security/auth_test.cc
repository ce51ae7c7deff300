// Tests of services/common/auth: the tokens file (today's three-field lines and the
// optional limit fields), and Guard::Worker (a worker's own identity from its
// certificate's names, and the refusals of every other caller, the shared worker
// certificate included).
#include "services/common/security/auth.h"

#include "core/testing.h"
#include "services/common/rpc/net.h"

namespace lockstep::testing {
namespace {

using ::testing::_;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kAlice[] = "alice-token-0123456789";
constexpr char kBob[] = "bob-token-0123456789ab";
constexpr char kRoot[] = "root-token-0123456789a";

TEST(TokenTable, ThreeFieldLinesParseAsBeforeWithNoLimits) {
  ASSERT_OK_AND_ASSIGN(TokenTable t,
                       TokenTable::Parse(absl::StrCat("# callers\n", kAlice, " alice user\n", kRoot,
                                                      " root admin  # the operator\n"),
                                         "tokens.txt"));
  EXPECT_EQ(t.size(), 2u);
  ASSERT_OK_AND_ASSIGN(Principal alice, t.Find(kAlice));
  EXPECT_EQ(alice.name, "alice");
  EXPECT_FALSE(alice.admin);
  ASSERT_EQ(t.callers().size(), 2u);
  EXPECT_FALSE(t.callers().at("alice").admin);
  EXPECT_FALSE(t.callers().at("alice").limits.any());
  EXPECT_TRUE(t.callers().at("root").admin);
}

TEST(TokenTable, LimitFieldsAfterTheRoleAreTheNamesOwnOverAllItsLines) {
  ASSERT_OK_AND_ASSIGN(
      TokenTable t,
      TokenTable::Parse(absl::StrCat(kAlice, " alice user max_queued_jobs=5 max_jobs_kept=0\n",
                                     kBob, " alice admin submits_per_minute=12\n", kRoot,
                                     " root admin max_running_jobs=2\n"),
                        "tokens.txt"));
  const Caller& alice = t.callers().at("alice");
  EXPECT_FALSE(alice.admin);  // one of her tokens is a user's
  EXPECT_EQ(alice.limits.max_queued_jobs, 5);
  EXPECT_EQ(alice.limits.max_jobs_kept, 0);
  EXPECT_EQ(alice.limits.submits_per_minute, 12);
  EXPECT_FALSE(alice.limits.max_running_jobs.has_value());
  EXPECT_TRUE(t.callers().at("root").admin);
  EXPECT_EQ(t.callers().at("root").limits.max_running_jobs, 2);
}

TEST(TokenTable, BadLimitFieldsAreInvalidArgumentNamingTheLine) {
  EXPECT_THAT(TokenTable::Parse(absl::StrCat(kAlice, " alice user max_queue=5\n"), "t.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("t.txt:1"), HasSubstr("max_queue=5"))));
  EXPECT_THAT(TokenTable::Parse(absl::StrCat(kAlice, " alice user max_queued_jobs=-1\n"), "t.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("max_queued_jobs"), HasSubstr("non-negative"))));
  EXPECT_THAT(TokenTable::Parse(absl::StrCat(kAlice, " alice user max_jobs_kept\n"), "t.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("KEY=VALUE")));
  EXPECT_THAT(TokenTable::Parse(absl::StrCat(kAlice, " alice user max_queued_jobs=5\n", kBob,
                                             " alice user max_queued_jobs=6\n"),
                                "t.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("t.txt:2"), HasSubstr("given as 5"))));
  EXPECT_THAT(TokenTable::Parse(absl::StrCat(kAlice, " alice\n"), "t.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("TOKEN NAME ROLE")));
}

TEST(GuardWorker, AWorkersOwnCertificateGivesItsName) {
  const Guard guard = Guard::Tls(TokenTable());
  EXPECT_EQ(
      guard.Worker({"lockstep-worker/worker-3", kWorkerIdentity}, {"lockstep-worker/worker-3"})
          .value_or(""),
      "worker-3");
}

TEST(GuardWorker, TheSharedWorkerCertificateNamesNoWorkerAndIsRefused) {
  const Guard guard = Guard::Tls(TokenTable());
  EXPECT_THAT(guard.Worker({kWorkerIdentity}, {kWorkerIdentity}),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("--workers")));
  // A CN with the prefix but no valid name after it is no identity either.
  EXPECT_THAT(guard.Worker({kWorkerIdentity}, {"lockstep-worker/"}),
              StatusIs(absl::StatusCode::kPermissionDenied, _));
  EXPECT_THAT(guard.Worker({kWorkerIdentity}, {"lockstep-worker/a b"}),
              StatusIs(absl::StatusCode::kPermissionDenied, _));
}

TEST(GuardWorker, OtherCallersAreRefusedAsPeerRefusesThem) {
  const Guard guard = Guard::Tls(TokenTable());
  // No certificate: a client with a token only.
  EXPECT_THAT(guard.Worker({}, {}), StatusIs(absl::StatusCode::kUnauthenticated, _));
  // The coordinator's certificate, even with a worker-like CN, lacks the worker's DNS name.
  EXPECT_THAT(guard.Worker({kCoordinatorIdentity, "lockstep-worker/x"}, {"lockstep-worker/x"}),
              StatusIs(absl::StatusCode::kPermissionDenied, _));
}

TEST(GuardWorker, PlaintextChecksNobody) {
  EXPECT_EQ(Guard::Open().Worker({}, {}).value_or("refused"), "");
}

}  // namespace
}  // namespace lockstep::testing
