// RPC errors by method and code, counted where statuses leave a server (a gRPC server interceptor).
// Contract: rpc_metrics.h.
#include "services/common/observability/rpc_metrics.h"

#include <google/protobuf/descriptor.h>
#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lockstep/v1/job.grpc.pb.h"
#include "lockstep/v1/registry.grpc.pb.h"
#include "lockstep/v1/worker.grpc.pb.h"
#include "services/common/observability/process_metrics.h"
#include "services/common/rpc/net.h"

namespace lockstep {
namespace {

std::set<std::string> KnownMethods() {
  std::set<std::string> out = {"grpc.health.v1.Health/Check", "grpc.health.v1.Health/Watch"};
  // Through a message of each file: that links the file's descriptors in, so that its
  // services are known even where nothing else of it is used.
  for (const google::protobuf::FileDescriptor* file :
       {v1::Job::descriptor()->file(), v1::RegisterRequest::descriptor()->file(),
        v1::StateHeader::descriptor()->file()}) {
    for (int i = 0; i < file->service_count(); ++i) {
      const google::protobuf::ServiceDescriptor* s = file->service(i);
      for (int m = 0; m < s->method_count(); ++m) {
        out.insert(absl::StrCat(s->full_name(), "/", s->method(m)->name()));
      }
    }
  }
  return out;
}

class StatusCounter final : public grpc::experimental::Interceptor {
 public:
  StatusCounter(RpcMetrics* metrics, std::string method, grpc::ServerContextBase* ctx)
      : metrics_(metrics), method_(std::move(method)), ctx_(ctx) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status st = methods->GetSendStatus();
      // The client ended the call (cancelled it, or its deadline passed) before this
      // answer: whatever the handler answered, the client is not waiting for it.
      if (ctx_ != nullptr && ctx_->IsCancelled()) {
        metrics_->CountClientCancelled(method_);
      } else if (!st.ok()) {
        metrics_->CountStatus(method_, st.error_code());
      }
    }
    methods->Proceed();
  }

 private:
  RpcMetrics* metrics_;
  const std::string method_;
  grpc::ServerContextBase* const ctx_;  // the call's; outlives this interceptor
};

class StatusCounterFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit StatusCounterFactory(RpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const std::string method = info->method() == nullptr ? "" : info->method();
    // The per-step streams count their statuses themselves (RpcMetrics::kSelfCounted).
    for (const char* m : RpcMetrics::kSelfCounted) {
      if (method == m) return nullptr;
    }
    return new StatusCounter(metrics_, method, info->server_context());
  }

 private:
  RpcMetrics* metrics_;
};

}  // namespace

RpcMetrics::RpcMetrics(prometheus::Registry& registry)
    : known_(KnownMethods()),
      errors_(prometheus::BuildCounter()
                  .Name("lockstep_rpc_errors_total")
                  .Help("RPCs this server answered with a status other than OK, by method and "
                        "code (calls their clients ended are not counted here)")
                  .Register(registry)),
      cancelled_(prometheus::BuildCounter()
                     .Name("lockstep_rpc_cancelled_total")
                     .Help("RPCs their clients ended (cancelled, closed, or past the client's "
                           "deadline) before this server answered, by method; not errors")
                     .Register(registry)) {}

std::string RpcMetrics::MethodLabel(const std::string& method) const {
  const std::string name = method.empty() || method[0] != '/' ? method : method.substr(1);
  return known_.count(name) ? name : "other";
}

void RpcMetrics::CountStatus(const std::string& method, grpc::StatusCode code) {
  if (code == grpc::StatusCode::OK) return;
  const std::string code_name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  errors_
      .Add({{"method", MethodLabel(method)}, {"code", code_name.empty() ? "UNKNOWN" : code_name}})
      .Increment();
}

void RpcMetrics::CountClientCancelled(const std::string& method) {
  cancelled_.Add({{"method", MethodLabel(method)}}).Increment();
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcMetrics::InterceptorFactory() {
  return std::make_unique<StatusCounterFactory>(this);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> ServeMetrics(
    const std::string& address, const std::string& port_file,
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables, RpcMetrics& rpc,
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>*
        interceptors) {
  if (address.empty()) return nullptr;
  std::vector<std::shared_ptr<prometheus::Collectable>> what = collectables;
  what.push_back(std::make_shared<ProcessCollector>());
  what.push_back(std::make_shared<BuildInfoCollector>());
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start(address, std::move(what), port_file);
  if (!server.ok()) return server.status();
  interceptors->push_back(rpc.InterceptorFactory());
  spdlog::info("metrics on http://{}:{}/metrics", HostOf(address), (*server)->port());
  if (!IsLoopback(address)) {
    spdlog::warn(
        "metrics on {} are plain HTTP without authentication: keep the port on a private "
        "network (job ids and progress, no job data)",
        address);
  }
  return server;
}

}  // namespace lockstep
