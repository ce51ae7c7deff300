// Tests of the shared metrics parts: the lock-free histogram's buckets, ReadMetric, the
// HTTP listener on port 0 (its port file, the page it serves, the errors it reports, idle
// and surplus connections) and RPC errors counted by the interceptor on a real gRPC server,
// where calls their clients cancel are not errors; the process_* metrics and
// lockstep_build_info that every server's listener serves.
#include "services/common/observability/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/counter.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/synchronization/notification.h"
#include "core/testing.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "lockstep/v1/registry.grpc.pb.h"
#include "services/common/flags.h"
#include "services/common/observability/http_testing.h"
#include "services/common/observability/process_metrics.h"
#include "services/common/observability/rpc_metrics.h"
#include "services/common/observability/slow_clients_testing.h"
#include "services/common/rpc/listen_socket.h"
#include "services/common/rpc/net.h"

namespace lockstep::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(HistogramFamilyTest, BucketsAreCumulativeAndIncludeTheirUpperBound) {
  HistogramFamily h("lockstep_test_seconds", "help", {{{"phase", "a"}}, {{"phase", "b"}}},
                    {1.0, 2.0});
  for (double v : {0.5, 1.0, 1.5, 3.0}) h.at(0).Observe(v);
  const prometheus::ClientMetric::Histogram got = h.at(0).Snapshot();
  ASSERT_EQ(got.bucket.size(), 3u);
  EXPECT_EQ(got.bucket[0].cumulative_count, 2u);  // 0.5 and 1.0: le="1"
  EXPECT_EQ(got.bucket[1].cumulative_count, 3u);
  EXPECT_EQ(got.bucket[2].cumulative_count, 4u);
  EXPECT_TRUE(std::isinf(got.bucket[2].upper_bound));
  EXPECT_EQ(ReadMetric(h, "lockstep_test_seconds_count", {{"phase", "a"}}).value_or(-1), 4);
  EXPECT_EQ(ReadMetric(h, "lockstep_test_seconds_sum", {{"phase", "a"}}).value_or(-1), 6);
  EXPECT_EQ(ReadMetric(h, "lockstep_test_seconds_count", {{"phase", "b"}}).value_or(-1), 0);
  EXPECT_THAT(ReadMetric(h, "lockstep_test_seconds_count", {{"phase", "c"}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("phase=c")));
}

TEST(HistogramFamilyTest, ObservationsFromManyThreadsAreAllCounted) {
  HistogramFamily h("lockstep_test_seconds", "help", {{}}, DurationBuckets());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h] {
      for (int i = 0; i < 10000; ++i) h.at(0).Observe(0.001);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ReadMetric(h, "lockstep_test_seconds_count").value_or(-1), 40000);
  EXPECT_NEAR(ReadMetric(h, "lockstep_test_seconds_sum").value_or(-1), 40, 1e-6);
}

class MetricsServerTest : public ::testing::Test {
 protected:
  MetricsServerTest() {
    std::string templ = "/tmp/metrics_test.XXXXXX";
    EXPECT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  ~MetricsServerTest() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
};

TEST_F(MetricsServerTest, ServesTheSamplesOnPortZeroAndWritesTheBoundPort) {
  prometheus::BuildCounter()
      .Name("lockstep_test_things_total")
      .Help("things")
      .Register(*registry_)
      .Add({{"kind", "x"}})
      .Increment(3);
  auto histograms = std::make_shared<HistogramFamily>("lockstep_test_seconds", "help",
                                                      std::vector<prometheus::Labels>{{}},
                                                      std::vector<double>{1.0});
  histograms->at(0).Observe(0.5);
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<MetricsServer> server,
      MetricsServer::Start("127.0.0.1:0", {registry_, histograms}, dir_ + "/metrics.port"));
  ASSERT_GT(server->port(), 0);
  EXPECT_EQ(ReadPortFile(dir_ + "/metrics.port", absl::Seconds(1)), std::to_string(server->port()));
  ASSERT_OK_AND_ASSIGN(std::string page, HttpGet(server->port(), "/metrics"));
  EXPECT_THAT(page, HasSubstr("# TYPE lockstep_test_things_total counter"));
  EXPECT_THAT(page, HasSubstr("lockstep_test_things_total{kind=\"x\"} 3"));
  EXPECT_THAT(page, HasSubstr("lockstep_test_seconds_bucket{le=\"1\"} 1"));
  EXPECT_THAT(page, HasSubstr("lockstep_test_seconds_count 1"));
  EXPECT_EQ(page, server->Page());
  EXPECT_THAT(HttpGet(server->port(), "/"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("404")));
  ASSERT_OK_AND_ASSIGN(page, HttpGet(server->port(), "/metrics?again"));
  EXPECT_THAT(page, HasSubstr("lockstep_test_things_total{kind=\"x\"} 3"));
}

TEST_F(MetricsServerTest, AnAddressWithoutAPortIsInvalidAndATakenPortUnavailable) {
  EXPECT_THAT(MetricsServer::Start("127.0.0.1", {registry_}, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host:port")));
  EXPECT_THAT(MetricsServer::Start("no-such-host.invalid:0", {registry_}, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no-such-host.invalid")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MetricsServer> first,
                       MetricsServer::Start("127.0.0.1:0", {registry_}, ""));
  const std::string taken = "127.0.0.1:" + std::to_string(first->port());
  EXPECT_THAT(MetricsServer::Start(taken, {registry_}, ""),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr(taken),
                             HasSubstr(absl::StrCat("port ", first->port(), " is in use")))));
}

// A TCP connection to 127.0.0.1:port that sends `request` (maybe nothing, or half a
// request) and is left open; -1 when it cannot connect.
int Connect(int port, const std::string& request = "") {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(request.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

// How long until the server closes `fd` (a read returns 0 or fails); nullopt when it is
// still open after `limit`.
std::optional<absl::Duration> ClosedWithin(int fd, absl::Duration limit) {
  const absl::Time start = absl::Now();
  pollfd p = {fd, POLLIN, 0};
  while (true) {
    const int64_t left = absl::ToInt64Milliseconds(start + limit - absl::Now());
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) return std::nullopt;
    char buf[4096];
    if (read(fd, buf, sizeof(buf)) <= 0) return absl::Now() - start;
    // An answer was read (a kept-alive request): wait on for the close.
  }
}

// Whether the server has closed `fd` already (a read would return 0 or fail at once).
bool Closed(int fd) {
  pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  char buf[4096];
  return recv(fd, buf, sizeof(buf), MSG_PEEK) <= 0;
}

// The whole response to `request` sent on a fresh connection (read until the server closes).
std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port, request);
  std::string response;
  char buf[4096];
  pollfd p = {fd, POLLIN, 0};
  while (fd >= 0 && poll(&p, 1, 5000) > 0) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    response.append(buf, n);
  }
  if (fd >= 0) close(fd);
  return response;
}

TEST_F(MetricsServerTest, FiftyIdleConnectionsDoNotDelayAScrape) {
  // Deadlines far past the test: a scrape answered while they are all open did not wait
  // for one of them to be closed.
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<MetricsServer> server,
      MetricsServer::Start("127.0.0.1:0", {registry_}, "",
                           {.header_timeout = absl::Minutes(5), .idle_timeout = absl::Minutes(5)}));
  // Silent ones, and ones that sent half a request (a slow client), all held open.
  std::vector<int> idle;
  for (int i = 0; i < 50; ++i) {
    idle.push_back(Connect(server->port(), i % 2 == 0 ? "" : "GET /metr"));
    ASSERT_GE(idle.back(), 0);
  }
  // One at a time, each idle connection held the old listener until its timeout.
  ASSERT_OK_AND_ASSIGN(std::string page, HttpGet(server->port(), "/metrics"));
  EXPECT_EQ(page, server->Page());
  for (int fd : idle) {
    EXPECT_FALSE(Closed(fd));
    close(fd);
  }
}

TEST_F(MetricsServerTest, AnIdleConnectionIsClosedAfterTheIdleTimeout) {
  // The header's deadline far past the test: the idle timeout alone closes them.
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<MetricsServer> server,
      MetricsServer::Start("127.0.0.1:0", {registry_}, "",
                           {.header_timeout = absl::Minutes(5), .idle_timeout = absl::Seconds(1)}));
  const int silent = Connect(server->port());
  const int half = Connect(server->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n");
  // Kept alive after an answer, then silent.
  const int kept = Connect(server->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  for (int fd : {silent, half, kept}) {
    ASSERT_GE(fd, 0);
    EXPECT_TRUE(ClosedWithin(fd, absl::Minutes(1)).has_value()) << "still open after a minute";
    close(fd);
  }
}

TEST_F(MetricsServerTest, ConnectionsPastTheLimitWaitForAFreeOne) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MetricsServer> server,
                       MetricsServer::Start("127.0.0.1:0", {registry_}, "",
                                            {.header_timeout = absl::Minutes(5),
                                             .idle_timeout = absl::Seconds(1),
                                             .max_connections = 4}));
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(Connect(server->port()));
  // The fifth waits in the listen backlog until the idle ones time out (1 s), then is served.
  const absl::Time start = absl::Now();
  const std::string response = Exchange(server->port(), "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(900));
  int closed = 0;  // served in a slot an idle one left
  for (int fd : idle) {
    closed += Closed(fd) ? 1 : 0;
    close(fd);
  }
  EXPECT_GE(closed, 1);
}

// A client that keeps its connection busy, a header line every 100 ms, is still cut at the
// header's deadline: the idle timeout alone never fired for it.
TEST_F(MetricsServerTest, TricklingAHeaderIsCutAtItsDeadline) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<MetricsServer> server,
      MetricsServer::Start("127.0.0.1:0", {registry_}, "",
                           {.header_timeout = absl::Seconds(1), .idle_timeout = absl::Minutes(5)}));
  SlowClients slow(server->port(), "127.0.0.1", 5, /*tls=*/false);
  ASSERT_EQ(slow.Trickle(), 5);
  const absl::Time start = absl::Now();
  while (slow.Trickle() > 0 && absl::Now() - start < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(100));  // the client's pace, not a synchronization
  }
  EXPECT_EQ(slow.Trickle(), 0);  // cut: by the header's deadline, the only one due
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(500));
  // A client that sends its request whole is served as before.
  EXPECT_OK(HttpGet(server->port(), "/metrics"));
}

// 300 connections from one host (127.0.0.2) trickling their headers: the host gets at most
// its cap of connections (64), the rest are closed at once, and scrapes from another
// (127.0.0.1) are answered while those are held. Without the cap they took every slot.
TEST_F(MetricsServerTest, ThreeHundredTricklingClientsDoNotDelayAScrape) {
  // The header's deadline far past the test: no slot frees by it.
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<MetricsServer> server,
      MetricsServer::Start("127.0.0.1:0", {registry_}, "", {.header_timeout = absl::Minutes(5)}));
  SlowClients slow(server->port(), "127.0.0.2", 300, /*tls=*/false);
  EXPECT_LE(slow.TrickleUntilAtMost(64, absl::Seconds(5)), 64);
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK_AND_ASSIGN(std::string page, HttpGet(server->port(), "/metrics"));
    EXPECT_GT(slow.Trickle(), 0);             // the ones admitted are still held open, trickling
    absl::SleepFor(absl::Milliseconds(200));  // the clients' pace
  }
}

TEST_F(MetricsServerTest, OtherMethodsAre405AndHeadHasNoBody) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MetricsServer> server,
                       MetricsServer::Start("127.0.0.1:0", {registry_}, ""));
  EXPECT_THAT(Exchange(server->port(), "POST /metrics HTTP/1.0\r\nContent-Length: 2\r\n\r\nab"),
              HasSubstr(" 405 Method Not Allowed"));
  const std::string head = Exchange(server->port(), "HEAD /metrics HTTP/1.0\r\n\r\n");
  EXPECT_THAT(head, HasSubstr("200 OK"));
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "");
}

TEST_F(MetricsServerTest, TheListenerTakesItsPortAloneAndFreesItWhenGone) {
  std::unique_ptr<MetricsServer> server;
  ASSERT_OK_AND_ASSIGN(server, MetricsServer::Start("127.0.0.1:0", {registry_}, ""));
  const std::string address = absl::StrCat("127.0.0.1:", server->port());
  EXPECT_THAT(CheckPortFree("test", address),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("is in use")));
  server.reset();
  EXPECT_OK(CheckPortFree("test", address));
}

TEST(RpcMetricsTest, MethodsOutsideLockstepsServicesAreCountedAsOther) {
  auto registry = std::make_shared<prometheus::Registry>();
  RpcMetrics rpc(*registry);
  EXPECT_EQ(rpc.MethodLabel("/lockstep.v1.JobService/SubmitJob"),
            "lockstep.v1.JobService/SubmitJob");
  EXPECT_EQ(rpc.MethodLabel("/lockstep.v1.Worker/Steps"), "lockstep.v1.Worker/Steps");
  EXPECT_EQ(rpc.MethodLabel("/lockstep.v1.JobService/Anything"), "other");
  EXPECT_EQ(rpc.MethodLabel("/made.up/x"), "other");
  rpc.CountStatus("/made.up/y", grpc::StatusCode::NOT_FOUND);
  rpc.CountStatus("/made.up/z", grpc::StatusCode::NOT_FOUND);
  rpc.CountStatus("/lockstep.v1.JobService/SubmitJob", grpc::StatusCode::OK);
  EXPECT_EQ(ReadMetric(*registry, "lockstep_rpc_errors_total",
                       {{"method", "other"}, {"code", "NOT_FOUND"}})
                .value_or(-1),
            2);
  EXPECT_THAT(ReadMetric(*registry, "lockstep_rpc_errors_total",
                         {{"method", "lockstep.v1.JobService/SubmitJob"}, {"code", "OK"}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("SubmitJob")));
}

TEST(RpcMetricsTest, TheInterceptorCountsTheStatusesAServerAnswers) {
  auto registry = std::make_shared<prometheus::Registry>();
  RpcMetrics rpc(*registry);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(rpc.InterceptorFactory());
  v1::Rendezvous::Service unimplemented;  // every method answers UNIMPLEMENTED
  ASSERT_OK_AND_ASSIGN(Serving serving, StartServer("127.0.0.1:0", Transport::Plaintext(),
                                                    {&unimplemented}, "", std::move(interceptors)));
  auto channel =
      MakeChannel("127.0.0.1:" + std::to_string(serving.port), Transport::Plaintext(), "");
  auto health = grpc::health::v1::Health::NewStub(channel);
  for (const char* service : {"", "no-such-service", "nor-this-one"}) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    health->Check(&ctx, req, &resp).error_code();
  }
  grpc::ClientContext ctx;
  v1::GetResponse got;
  EXPECT_EQ(v1::Rendezvous::NewStub(channel)->Get(&ctx, v1::GetRequest(), &got).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  serving.server->Shutdown();
  EXPECT_EQ(ReadMetric(*registry, "lockstep_rpc_errors_total",
                       {{"method", "grpc.health.v1.Health/Check"}, {"code", "NOT_FOUND"}})
                .value_or(-1),
            2);
  EXPECT_EQ(ReadMetric(*registry, "lockstep_rpc_errors_total",
                       {{"method", "lockstep.v1.Rendezvous/Get"}, {"code", "UNIMPLEMENTED"}})
                .value_or(-1),
            1);
  EXPECT_THAT(ReadMetric(*registry, "lockstep_rpc_errors_total",
                         {{"method", "grpc.health.v1.Health/Check"}, {"code", "OK"}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("Health/Check")));
}

// A Rendezvous whose Get answers only when its client cancels it, CANCELLED, as a handler
// of a long call (a watch) does when its caller goes away.
class GetWaitsForItsCancel final : public v1::Rendezvous::CallbackService {
 public:
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext*, const v1::GetRequest*,
                                v1::GetResponse*) override {
    class Reactor final : public grpc::ServerUnaryReactor {
     public:
      void OnCancel() override { Finish(grpc::Status::CANCELLED); }
      void OnDone() override { delete this; }
    };
    auto* reactor = new Reactor;
    started.Notify();
    return reactor;
  }
  absl::Notification started;
};

TEST(RpcMetricsTest, ACallItsClientCancelsIsCountedAsCancelledNotAsAnError) {
  auto registry = std::make_shared<prometheus::Registry>();
  RpcMetrics rpc(*registry);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(rpc.InterceptorFactory());
  GetWaitsForItsCancel service;
  ASSERT_OK_AND_ASSIGN(Serving serving, StartServer("127.0.0.1:0", Transport::Plaintext(),
                                                    {&service}, "", std::move(interceptors)));
  auto stub = v1::Rendezvous::NewStub(
      MakeChannel("127.0.0.1:" + std::to_string(serving.port), Transport::Plaintext(), ""));
  grpc::ClientContext ctx;
  v1::GetRequest req;
  v1::GetResponse resp;
  absl::Notification done;
  grpc::Status status;
  stub->async()->Get(&ctx, &req, &resp, [&](grpc::Status st) {
    status = std::move(st);
    done.Notify();
  });
  service.started.WaitForNotification();
  ctx.TryCancel();  // `lockstep watch JOB | head`: the client goes away mid-call
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  serving.server->Shutdown();  // waits for the handler's end
  EXPECT_THAT(ReadMetric(*registry, "lockstep_rpc_errors_total",
                         {{"method", "lockstep.v1.Rendezvous/Get"}, {"code", "CANCELLED"}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("Rendezvous/Get")));
  EXPECT_EQ(ReadMetric(*registry, "lockstep_rpc_cancelled_total",
                       {{"method", "lockstep.v1.Rendezvous/Get"}})
                .value_or(-1),
            1);
}

TEST_F(MetricsServerTest, ProcessMetricsAreReadFromProc) {
  // A /proc with a command name holding spaces and parentheses, 250 + 50 ticks of CPU, a
  // start 1000 ticks after boot, 3 pages resident and 4 descriptors open.
  const std::string proc = dir_ + "/proc";
  std::filesystem::create_directories(proc + "/self/fd");
  std::ofstream(proc + "/self/stat")
      << "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 1000 "
         "123456789 3 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n";
  std::ofstream(proc + "/stat") << "cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n";
  for (const char* fd : {"0", "1", "2", "7"}) std::ofstream(proc + "/self/fd/" + fd) << "";
  const ProcessCollector fake(proc);
  const double tick = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  EXPECT_DOUBLE_EQ(ReadMetric(fake, "process_cpu_seconds_total").value_or(-1), 300 * tick);
  EXPECT_DOUBLE_EQ(ReadMetric(fake, "process_start_time_seconds").value_or(-1),
                   1700000000 + 1000 * tick);
  EXPECT_EQ(ReadMetric(fake, "process_resident_memory_bytes").value_or(-1),
            3 * sysconf(_SC_PAGESIZE));
  EXPECT_EQ(ReadMetric(fake, "process_virtual_memory_bytes").value_or(-1), 123456789);
  EXPECT_EQ(ReadMetric(fake, "process_open_fds").value_or(-1), 4);
  // A /proc it cannot read: the metrics are left out, nothing fails.
  EXPECT_THAT(ReadMetric(ProcessCollector(dir_ + "/none"), "process_open_fds"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("process_open_fds")));

  // This process, through the listener every server starts (ServeMetrics).
  RpcMetrics rpc(*registry_);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MetricsServer> server,
                       ServeMetrics("127.0.0.1:0", "", {registry_}, rpc, &interceptors));
  ASSERT_OK_AND_ASSIGN(const std::string page, HttpGet(server->port(), "/metrics"));
  EXPECT_THAT(page, HasSubstr("# TYPE process_cpu_seconds_total counter"));
  for (const char* name : {"process_resident_memory_bytes", "process_start_time_seconds",
                           "process_open_fds", "process_virtual_memory_bytes"}) {
    EXPECT_THAT(page, HasSubstr(absl::StrCat("# TYPE ", name, " gauge"))) << page;
  }
  const ProcessCollector self;
  EXPECT_GT(ReadMetric(self, "process_resident_memory_bytes").value_or(-1), 1 << 20);
  EXPECT_GE(ReadMetric(self, "process_open_fds").value_or(-1), 3);
  const double start = ReadMetric(self, "process_start_time_seconds").value_or(-1);
  EXPECT_LE(start, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) + 1);
  EXPECT_GT(start, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) - 3600);
}

TEST_F(MetricsServerTest, EveryServersListenerServesItsBuildInfo) {
  RpcMetrics rpc(*registry_);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MetricsServer> server,
                       ServeMetrics("127.0.0.1:0", "", {registry_}, rpc, &interceptors));
  ASSERT_OK_AND_ASSIGN(const std::string page, HttpGet(server->port(), "/metrics"));
  EXPECT_THAT(page, HasSubstr(absl::StrCat("lockstep_build_info{git=\"", BuildGitCommit(),
                                           "\",version=\"", BuildVersion(), "\"} 1")));
  // CMakeLists.txt's project(VERSION), and the commit where built in a git checkout.
  EXPECT_THAT(BuildVersion(), ::testing::MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
  EXPECT_THAT(BuildGitCommit(), ::testing::MatchesRegex("[0-9a-f]{12}|unknown"));
}

}  // namespace
}  // namespace lockstep::testing
