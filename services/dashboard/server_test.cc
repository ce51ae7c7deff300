// DashboardServer on loopback: the pages and the API over real HTTP, its security headers,
// and HTTPS with the cluster's certificate (credentials.h).
#include "services/dashboard/server.h"

#include <stdlib.h>

#include <filesystem>

#include "core/testing.h"
#include "services/common/observability/http_testing.h"
#include "services/common/security/credentials.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

class DashboardServerTest : public ::testing::Test {
 protected:
  DashboardServerTest() {
    std::string templ = "/tmp/dashboard_server_test.XXXXXX";
    EXPECT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  ~DashboardServerTest() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
  Guard guard_ = Guard::Open();
  // No JobManager is reached by these requests (pages, and routes refused before it).
  DashboardApi api_{nullptr, nullptr, &guard_};
};

TEST_F(DashboardServerTest, ServesThePagesFromTheBinary) {
  ASSERT_OK_AND_ASSIGN(auto server, DashboardServer::Start("127.0.0.1:0", &api_, {}));
  EXPECT_FALSE(server->tls());
  ASSERT_OK_AND_ASSIGN(const std::string index, testing::HttpGet(server->port(), "/"));
  EXPECT_THAT(index, HasSubstr("<title>Lockstep</title>"));
  EXPECT_THAT(index, HasSubstr("src=\"/app.js\""));
  ASSERT_OK_AND_ASSIGN(const std::string app, testing::HttpGet(server->port(), "/app.js"));
  EXPECT_THAT(app, HasSubstr("sessionStorage"));
  EXPECT_THAT(testing::HttpGet(server->port(), "/nothing.js"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("404")));
  EXPECT_THAT(testing::HttpGet(server->port(), "/api/v1/nothing"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("NOT_FOUND")));
}

TEST_F(DashboardServerTest, AnswersCarryTheContentSecurityPolicy) {
  ASSERT_OK_AND_ASSIGN(auto server, DashboardServer::Start("127.0.0.1:0", &api_, {}));
  const HttpReply page = server->Answer({"GET", "/", {}, "", "127.0.0.1:1"});
  EXPECT_EQ(page.code, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  const HttpReply post = server->Answer({"POST", "/app.js", {}, "", "127.0.0.1:1"});
  EXPECT_EQ(post.code, 405);
  const HttpReply api = server->Answer({"GET", "/api/v1/jobs/1/cancel", {}, "", "127.0.0.1:1"});
  EXPECT_EQ(api.code, 405);
  EXPECT_THAT(api.headers, ::testing::Contains(::testing::Pair("Cache-Control", "no-store")));
}

// A page of another site posting to the dashboard (a cancel needs no token with
// --insecure), and a name an attacker's DNS points at 127.0.0.1, are refused.
TEST_F(DashboardServerTest, RefusesOtherOriginsPostsAndDnsNamesWithoutTls) {
  ASSERT_OK_AND_ASSIGN(auto server, DashboardServer::Start("127.0.0.1:0", &api_, {}));
  for (const char* host : {"127.0.0.1:8443", "localhost:8443", "[::1]:8443", "10.1.2.3:8443"}) {
    EXPECT_EQ(server->Answer({"GET", "/", {}, "", host}).code, 200) << host;
  }
  HttpReply r = server->Answer({"GET", "/", {}, "", "rebound.example.com:8443"});
  EXPECT_EQ(r.code, 403);
  EXPECT_THAT(r.body, HasSubstr("an IP address or localhost"));
  r = server->Answer(
      {"POST", "/api/v1/jobs/1/cancel", {}, "", "127.0.0.1:8443", "http://evil.example.com"});
  EXPECT_EQ(r.code, 403);
  EXPECT_THAT(r.body, HasSubstr("not this site"));
  // Its own pages' POST (and curl's, which sends no Origin) reach the API (which takes GET
  // there: no JobManager is reached).
  r = server->Answer({"POST", "/api/v1/whoami", {}, "", "127.0.0.1:8443", "http://127.0.0.1:8443"});
  EXPECT_EQ(r.code, 405) << r.body;
  EXPECT_EQ(server->Answer({"POST", "/api/v1/whoami", {}, "", "127.0.0.1:8443"}).code, 405);
}

TEST_F(DashboardServerTest, HttpsWithTheCoordinatorsCertificate) {
  ASSERT_OK(MakeCredentials({dir_, {}, {}, {}}));
  const TlsFiles files = CoordinatorTls(dir_);
  DashboardServerOptions options;
  options.cert_file = files.cert;
  options.key_file = files.key;
  options.port_file = dir_ + "/dashboard.port";
  ASSERT_OK_AND_ASSIGN(auto server, DashboardServer::Start("127.0.0.1:0", &api_, options));
  EXPECT_TRUE(server->tls());
  // Plain HTTP gets no HTTP answer from a TLS server.
  EXPECT_THAT(testing::HttpGet(server->port(), "/"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no HTTP answer")));
  EXPECT_TRUE(std::filesystem::exists(options.port_file));
}

TEST_F(DashboardServerTest, RefusesHalfAPairOrAnUnreadableFile) {
  DashboardServerOptions options;
  options.cert_file = dir_ + "/cert.pem";
  EXPECT_THAT(DashboardServer::Start("127.0.0.1:0", &api_, options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("both")));
  options.key_file = dir_ + "/key.pem";
  EXPECT_THAT(DashboardServer::Start("127.0.0.1:0", &api_, options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(dir_ + "/cert.pem")));
  EXPECT_THAT(DashboardServer::Start("127.0.0.1", &api_, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not host:port")));
}

}  // namespace
}  // namespace lockstep
