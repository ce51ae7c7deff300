// lockstep-worker: holds a job's replica, computes shard gradients (OpenBLAS on the CPU,
// cuBLAS and CUDA kernels on a GPU), all-reduces them with its peers (Gloo over TCP, or
// NCCL), applies the update and reports its local loss. Registers with
// the coordinator and serves the Worker service. Every flag has an environment
// equivalent (LOCKSTEP_<FLAG>); see deploy/CONFIGURATION.md. SIGTERM (a pod evicted, a
// node drained) while it runs a job: it leaves at the job's next step boundary (the
// coordinator releases it, docs/elastic.md), at most --leave_timeout_s; SIGINT, a second
// signal, or SIGTERM while idle: it exits at once.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/data/data_roots.h"
#include "services/common/flags.h"
#include "services/common/observability/job_log.h"
#include "services/common/observability/metrics.h"
#include "services/common/observability/rpc_metrics.h"
#include "services/common/observability/server_flags.h"
#include "services/common/rpc/listen_socket.h"
#include "services/common/rpc/net.h"
#include "services/common/security/auth.h"
#include "services/common/security/private_files.h"
#include "services/common/security/server_security.h"
#include "services/worker/collectives.h"
#include "services/worker/enroll.h"
#include "services/worker/job_slot.h"
#include "services/worker/registration.h"
#include "services/worker/service.h"
#include "services/worker/worker_metrics.h"
#include "workers/backend_factory.h"
#include "workers/cpu/cpu_backend.h"

ABSL_FLAG(std::string, coordinator, "", "coordinator address host:port (required)");
ABSL_FLAG(std::string, listen, "0.0.0.0:0", "host:port to serve on (port 0: pick one)");
ABSL_FLAG(std::string, advertise_host, "",
          "address the coordinator and peers use to reach this worker (default: this host's "
          "address on the route to the coordinator)");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda:K");
ABSL_FLAG(int, threads, 0, "CPU threads for compute (0: all cores)");
ABSL_FLAG(std::string, name, "", "a name shown in listings (default: the hostname)");
ABSL_FLAG(std::string, port_file, "", "write the port actually bound here");
ABSL_FLAG(std::string, bootstrap_token_file, "",
          "enroll with this bootstrap token when no --tls_cert is given: the coordinator signs "
          "this worker's own key into a certificate naming it (kept in --identity_dir)");
ABSL_FLAG(std::string, identity_dir, "lockstep-identity",
          "where an enrolled worker keeps its key and certificate (mode 0700)");
ABSL_DECLARE_FLAG(std::string, tls_ca);  // services/common/security/server_security.cc
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_FLAG(std::string, data_root, lockstep::kDefaultDataRoots,
          "comma-separated folders jobs may read datasets from (symlinks resolved)");
ABSL_FLAG(int, leave_timeout_s, 25,
          "on SIGTERM while it runs a job, how long the worker waits for the coordinator to "
          "release it at the job's next step boundary before it exits anyway (keep it below "
          "Kubernetes' terminationGracePeriodSeconds)");

namespace lockstep {
namespace {

// SIGTERM while `slot` holds a job: tells the coordinator (`registration`) that this worker
// leaves, and waits until it was released, the coordinator is gone, --leave_timeout_s passed
// or another signal came.
void Leave(JobSlot& slot, Registration& registration) {
  const absl::Duration limit = absl::Seconds(absl::GetFlag(FLAGS_leave_timeout_s));
  spdlog::info(
      "SIGTERM: leaving at the job's next step boundary (at most {}; another signal "
      "exits now)",
      absl::FormatDuration(limit));
  registration.Leave();
  const absl::Time end = absl::Now() + limit;
  const int again = WaitForShutdownSignal(
      [&] {
        return !slot.holds_job() || registration.gone() || absl::Now() >= end ||
               !slot.device_error().ok();
      },
      absl::Milliseconds(100));
  if (again != 0) {
    spdlog::info("a second signal: exiting now");
  } else if (!slot.holds_job()) {
    spdlog::info("released by the coordinator: exiting");
  } else if (absl::Now() >= end) {
    spdlog::warn("not released within --leave_timeout_s {}: exiting", absl::FormatDuration(limit));
  } else {
    spdlog::warn(
        "the coordinator cannot release this worker (gone, or the device failed): exiting");
  }
}

int Main() {
  if (absl::Status st = ApplyLogFormatFlag(); !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 2;
  }
  const MetricsFlags metrics_flags = GetMetricsFlags();
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty()) {
    spdlog::error("--coordinator (or LOCKSTEP_COORDINATOR) is required");
    return 2;
  }
  const std::string listen = absl::GetFlag(FLAGS_listen);
  if (absl::Status st =
          CheckPortsFree({{"--listen", listen}, {"--metrics_listen", metrics_flags.listen}});
      !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 1;
  }
  std::string name = absl::GetFlag(FLAGS_name);
  if (name.empty()) {
    char h[256] = {};
    gethostname(h, sizeof(h) - 1);
    name = h;
  }
  if (!absl::GetFlag(FLAGS_bootstrap_token_file).empty() && absl::GetFlag(FLAGS_tls_cert).empty()) {
    // A SIGTERM while the coordinator is awaited ends the wait (the signals are blocked
    // here and received by this watcher; it looks every second whether enrolling ended).
    CancelToken stop;
    std::atomic<bool> enrolling{true};
    std::thread watcher([&] {
      if (WaitForShutdownSignal([&] { return !enrolling.load(); })) {
        stop.Cancel(absl::CancelledError("stopped by a signal while enrolling"));
      }
    });
    EnrollOptions enroll{coordinator, absl::GetFlag(FLAGS_tls_ca),
                         absl::GetFlag(FLAGS_bootstrap_token_file),
                         absl::GetFlag(FLAGS_identity_dir), name};
    enroll.cancel = &stop;
    absl::StatusOr<TlsFiles> files = EnsureEnrolled(enroll);
    enrolling = false;
    watcher.join();
    if (stop.cancelled()) {
      spdlog::info("{}", std::string(stop.status().message()));
      return 0;
    }
    if (!files.ok()) {
      spdlog::error("{}", files.status().ToString());
      return 1;
    }
    absl::SetFlag(&FLAGS_tls_cert, files->cert);
    absl::SetFlag(&FLAGS_tls_key, files->key);
  }
  absl::StatusOr<Transport> transport = ServerTransport({listen, coordinator});
  if (!transport.ok()) {
    spdlog::error("{}", std::string(transport.status().message()));
    return 2;
  }
  // Only the coordinator's certificate opens this worker's service (TLS); nobody is
  // checked in plaintext.
  const Guard guard = transport->secure() ? Guard::Tls(TokenTable()) : Guard::Open();
  std::string host = absl::GetFlag(FLAGS_advertise_host);
  if (host.empty()) {
    auto local = LocalAddressFor(coordinator);
    if (!local.ok()) {
      spdlog::error("cannot tell this worker's address: {}", local.status().ToString());
      return 1;
    }
    host = *local;
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  const int threads =
      absl::GetFlag(FLAGS_threads) > 0 ? absl::GetFlag(FLAGS_threads) : DefaultCpuThreads();
  auto backends = BackendSource::Create(device, threads);
  if (!backends.ok()) {
    // A GPU worker without a usable device or driver refuses to start, saying why.
    spdlog::error("--device {}: {}", device, backends.status().ToString());
    return 1;
  }
  auto channel = MakeChannel(coordinator, *transport, kCoordinatorIdentity);
  auto collectives = NewCollectiveFactory(channel, host);
  absl::StatusOr<DataRoots> roots = DataRoots::Parse(absl::GetFlag(FLAGS_data_root));
  if (!roots.ok()) {
    spdlog::error("--{}", std::string(roots.status().message()));
    return 1;
  }
  DatasetCache datasets(2, *std::move(roots));
  auto registry = std::make_shared<prometheus::Registry>();
  WorkerMetrics metrics(registry);
  RpcMetrics rpc_metrics(*registry);
  JobSlot slot(backends->get(), &datasets, collectives.get(), &metrics);
  WorkerServiceImpl service(&slot, &guard, metrics_flags.on() ? &rpc_metrics : nullptr);

  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  absl::StatusOr<std::unique_ptr<MetricsServer>> metrics_server =
      ServeMetrics(metrics_flags.listen, metrics_flags.port_file, metrics.collectables(),
                   rpc_metrics, &interceptors);
  if (!metrics_server.ok()) {
    spdlog::error("--metrics_listen: {}", metrics_server.status().ToString());
    return 1;
  }
  absl::StatusOr<Serving> serving = StartServer(
      listen, *transport, {&service}, absl::GetFlag(FLAGS_port_file), std::move(interceptors));
  if (!serving.ok()) {
    spdlog::error("{}", serving.status().ToString());
    return 1;
  }
  const int port = serving->port;
  v1::RegisterRequest reg;
  reg.set_address(
      absl::StrCat(host.find(':') != std::string::npos ? "[" + host + "]" : host, ":", port));
  reg.set_device(device);
  reg.set_name(name);
  reg.set_threads(threads);
  spdlog::info("lockstep-worker {} serving on {} (device {}, {} threads); coordinator {}", name,
               reg.address(), device, threads, coordinator);
  Registration registration(channel, reg, &metrics);
  // Lines about jobs go to the coordinator with the next heartbeat (until `registration`
  // goes: the guard is destroyed first).
  SetLogTap([&registration, name](const v1::LogLine& line) {
    v1::LogLine shipped = line;
    shipped.set_source(name);
    registration.Ship(std::move(shipped));
  });
  struct TapGuard {
    ~TapGuard() { SetLogTap(nullptr); }
  } tap_guard;
  // A device left unusable (CUDA errors are sticky) ends the process, so that the
  // supervisor (compose, Kubernetes, `cluster up`'s user) starts a fresh worker.
  const int signalled = WaitForShutdownSignal([&] {
    absl::Status st = slot.device_error();
    if (!st.ok()) spdlog::error("{} is unusable, exiting: {}", device, st.ToString());
    return !st.ok();
  });
  if (signalled == SIGTERM && slot.holds_job()) Leave(slot, registration);
  spdlog::info("shutting down");
  serving->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return signalled != 0 ? 0 : 3;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);  // a peer gone mid-write is an error to report, not a death
  lockstep::SetPrivateUmask();
  lockstep::BlockShutdownSignals();
  lockstep::ParseFlagsWithEnv(argc, argv);  // every flag, and its LOCKSTEP_* variable
  return lockstep::Main();
}
