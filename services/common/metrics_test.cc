// Tests of the shared metrics parts: the lock-free histogram's buckets, ReadMetric, the
// HTTP listener on port 0 (its port file, the page it serves, the errors it reports) and
// RPC errors counted by the interceptor on a real gRPC server.
#include "services/common/metrics.h"

#include <prometheus/counter.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/testing.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "lockstep/v1/registry.grpc.pb.h"
#include "services/common/flags.h"
#include "services/common/http_testing.h"
#include "services/common/net.h"
#include "services/common/rpc_metrics.h"

namespace lockstep::testing {
namespace {

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
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(taken)));
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

}  // namespace
}  // namespace lockstep::testing
