// DashboardServer on loopback: the pages and the API over real HTTP, its security headers,
// HTTPS with the cluster's certificate (credentials.h), and slow clients by the hundred.
#include "services/dashboard/server.h"

#include <stdlib.h>

#include <filesystem>

#include "core/testing.h"
#include "services/common/observability/http_testing.h"
#include "services/common/observability/slow_clients_testing.h"
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

// 300 TLS connections from one host (127.0.0.2) trickling their headers: at most its cap
// (64) get a handshake, and the dashboard keeps answering another host (127.0.0.1) while
// they are held, over HTTPS with Strict-Transport-Security. A body trickled in is cut at
// its deadline.
TEST_F(DashboardServerTest, TricklingTlsClientsDoNotStopTheDashboard) {
  ASSERT_OK(MakeCredentials({dir_, {}, {}, {}}));
  const TlsFiles files = CoordinatorTls(dir_);
  DashboardServerOptions options;
  options.cert_file = files.cert;
  options.key_file = files.key;
  options.limits.body_timeout = absl::Seconds(1);
  // The other deadlines far past the test: no slot frees by them, nothing else cuts the body.
  options.limits.header_timeout = absl::Minutes(5);
  options.limits.idle_timeout = absl::Minutes(5);
  ASSERT_OK_AND_ASSIGN(auto server, DashboardServer::Start("127.0.0.1:0", &api_, options));
  testing::SlowClients slow(server->port(), "127.0.0.2", 300, /*tls=*/true);
  EXPECT_LE(slow.TrickleUntilAtMost(64, absl::Seconds(5)), 64);
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK_AND_ASSIGN(const std::string page, testing::HttpsGet(server->port(), "/"));
    EXPECT_THAT(page, HasSubstr("<title>Lockstep</title>"));
    EXPECT_THAT(page, HasSubstr("Strict-Transport-Security: max-age=31536000"));
    EXPECT_GT(slow.Trickle(), 0);             // the ones admitted are still held, trickling
    absl::SleepFor(absl::Milliseconds(200));  // the clients' pace
  }

  const int fd = testing::ConnectFrom("127.0.0.1", server->port());
  testing::TlsClient tls;
  SSL* body = tls.Handshake(fd);
  ASSERT_NE(body, nullptr);
  const std::string post =
      "POST /api/v1/whoami HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n";
  ASSERT_EQ(SSL_write(body, post.data(), static_cast<int>(post.size())), post.size());
  const absl::Time start = absl::Now();
  bool cut = false;
  while (!cut && absl::Now() - start < absl::Minutes(1)) {
    pollfd p = {fd, POLLIN | POLLRDHUP, 0};
    // Closed (nothing is answered to half a request), or a write refused: cut.
    cut = SSL_write(body, "x", 1) != 1 || poll(&p, 1, 100) != 0;
  }
  EXPECT_TRUE(cut) << "a trickled body still open after a minute";
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(500));
  close(fd);
}

// Plain HTTP (--insecure) says nothing of HTTPS.
TEST_F(DashboardServerTest, NoStrictTransportSecurityWithoutTls) {
  ASSERT_OK_AND_ASSIGN(auto server, DashboardServer::Start("127.0.0.1:0", &api_, {}));
  const int fd = testing::ConnectFrom("127.0.0.1", server->port());
  const std::string request = "GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) response.append(buf, n);
  close(fd);
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_THAT(response, ::testing::Not(HasSubstr("Strict-Transport-Security")));
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
