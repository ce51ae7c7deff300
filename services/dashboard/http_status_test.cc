#include "services/dashboard/http_status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace lockstep {
namespace {

using ::testing::Contains;
using ::testing::Pair;

TEST(HttpStatusTest, MapsEveryCodeAsGrpcGatewayDoes) {
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kOk), 200);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kFailedPrecondition), 400);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kOutOfRange), 400);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kAlreadyExists), 409);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kAborted), 409);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kCancelled), 499);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kUnimplemented), 501);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kInternal), 500);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kDataLoss), 500);
  EXPECT_EQ(HttpCodeOf(absl::StatusCode::kUnknown), 500);
}

TEST(HttpStatusTest, ErrorReplyNamesTheCodeAndWhy) {
  const HttpReply r = ErrorReply(absl::PermissionDeniedError("job 7 belongs to another user"));
  EXPECT_EQ(r.code, 403);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, R"({"code":"PERMISSION_DENIED","message":"job 7 belongs to another user"})");
  EXPECT_TRUE(r.headers.empty());
}

TEST(HttpStatusTest, UnauthenticatedAsksForABearerToken) {
  const HttpReply r = ErrorReply(absl::UnauthenticatedError("no token"));
  EXPECT_EQ(r.code, 401);
  EXPECT_THAT(r.headers, Contains(Pair("WWW-Authenticate", "Bearer")));
}

}  // namespace
}  // namespace lockstep
