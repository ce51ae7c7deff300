// Tests of Guard::Worker: a worker's own identity from its certificate's names, and the
// refusals of every other caller (the shared worker certificate included).
#include "services/common/auth.h"

#include "core/testing.h"
#include "services/common/net.h"

namespace lockstep::testing {
namespace {

using ::testing::_;
using ::testing::HasSubstr;

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
