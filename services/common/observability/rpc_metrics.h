// RPC errors by method and code, counted where statuses leave a server: a gRPC server
// interceptor (StartServer installs it), so that no handler has to remember to, except on
// the two streams that carry a message per step (kSelfCounted), which count their own.
//
//   lockstep_rpc_errors_total{method="lockstep.v1.JobService/SubmitJob",code="NOT_FOUND"}
//   lockstep_rpc_cancelled_total{method="lockstep.v1.JobService/WatchJob"}
//
// A call its client ended (cancelled it, closed the stream, went away, or let its deadline
// pass) before the server answered is no error of the server's: `lockstep watch JOB | head`
// closes its stream after a few lines. It is counted in lockstep_rpc_cancelled_total, not
// in lockstep_rpc_errors_total, whatever status the handler then finished with.
//
// `method` takes the names of Lockstep's services' methods and the health service's;
// any other name a client sends is counted as "other", so that callers cannot grow the
// label set.
#ifndef LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_RPC_METRICS_H_
#define LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_RPC_METRICS_H_

#include <grpcpp/support/server_interceptor.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/common/observability/metrics.h"

namespace lockstep {

// Thread-safe. The registry must outlive it.
class RpcMetrics {
 public:
  explicit RpcMetrics(prometheus::Registry& registry);

  // The streams that carry a message per training step, which the interceptor leaves
  // alone (an intercepted stream pays an extra trip through gRPC's core per message,
  // which a small job's steps/s shows): their handlers call CountStatus.
  static constexpr char kStepsMethod[] = "/lockstep.v1.Worker/Steps";
  static constexpr char kWatchJobMethod[] = "/lockstep.v1.JobService/WatchJob";
  static constexpr const char* kSelfCounted[] = {kStepsMethod, kWatchJobMethod};

  // Counts one call of `method` ("/package.Service/Method", as gRPC names it) that ended
  // with `code` (OK is not counted).
  void CountStatus(const std::string& method, grpc::StatusCode code);
  // Counts one call of `method` that its client ended before the server answered.
  void CountClientCancelled(const std::string& method);
  // CountStatus on `rpc` when it is not null; returns `status`, for Finish.
  static grpc::Status Counted(RpcMetrics* rpc, const char* method, grpc::Status status) {
    if (rpc != nullptr) rpc->CountStatus(method, status.error_code());
    return status;
  }
  // CountClientCancelled on `rpc` when it is not null; returns `status`, for Finish.
  static grpc::Status ClientCancelled(RpcMetrics* rpc, const char* method, grpc::Status status) {
    if (rpc != nullptr) rpc->CountClientCancelled(method);
    return status;
  }
  // An interceptor factory for grpc::ServerBuilder, counting into this. Outlives nothing:
  // the RpcMetrics must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

  // The label value for `method`: without the leading '/', or "other".
  std::string MethodLabel(const std::string& method) const;

 private:
  const std::set<std::string> known_;  // "package.Service/Method"
  prometheus::Family<prometheus::Counter>& errors_;
  prometheus::Family<prometheus::Counter>& cancelled_;
};

// A server's --metrics_listen: with `address` empty, nothing (null); else serves
// `collectables`, the process_* metrics and lockstep_build_info (process_metrics.h) there
// (its port written to `port_file`), logs where (warning when the
// address is not loopback: plain HTTP without authentication), and adds `rpc`'s
// interceptor to *interceptors for the gRPC server. MetricsServer::Start's errors.
absl::StatusOr<std::unique_ptr<MetricsServer>> ServeMetrics(
    const std::string& address, const std::string& port_file,
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables, RpcMetrics& rpc,
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>*
        interceptors);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_RPC_METRICS_H_
