// lockstep-coordinator: owns jobs, train state and RNG; schedules jobs onto registered
// workers. Every flag has an environment equivalent (LOCKSTEP_<FLAG>); see
// deploy/CONFIGURATION.md.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <optional>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/synchronization/mutex.h"
#include "core/data/data_roots.h"
#include "core/spec/memory.h"
#include "services/common/flags.h"
#include "services/common/folder_lock.h"
#include "services/common/observability/job_log.h"
#include "services/common/observability/metrics.h"
#include "services/common/observability/rpc_metrics.h"
#include "services/common/observability/server_flags.h"
#include "services/common/rpc/listen_socket.h"
#include "services/common/rpc/net.h"
#include "services/common/security/auth.h"
#include "services/common/security/private_files.h"
#include "services/common/security/server_security.h"
#include "services/coordinator/api/service.h"
#include "services/coordinator/observability/coordinator_metrics.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/limit_flags.h"
#include "services/dashboard/server.h"
#include "services/standalone/coordinator_replica.h"
#include "workers/cpu/cpu_backend.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:7070", "host:port to serve on (port 0: pick one)");
ABSL_FLAG(std::string, state_dir, "lockstep-state",
          "where job records (jobs/), snapshots (snapshots/), checkpoints (checkpoints/) and "
          "TensorBoard event files (tensorboard/) are kept");
ABSL_FLAG(int, heartbeat_timeout_s, 5, "a worker silent this long is dropped (its job fails)");
ABSL_FLAG(int, step_timeout_s, 60, "a step not answered this long fails the job");
ABSL_FLAG(int, prepare_timeout_s, 180, "dataset loading and collective bootstrap limit");
ABSL_FLAG(int, collective_timeout_s, 30, "workers' all-reduce timeout");
ABSL_FLAG(int, steps_in_flight, 4, "step commands queued ahead per worker");
ABSL_FLAG(int, max_workers_per_job, 64, "jobs asking for more workers are rejected");
ABSL_FLAG(int64_t, max_params, 100000000, "models with more parameters are rejected");
ABSL_FLAG(int64_t, job_memory_budget_mb, lockstep::kDefaultJobMemoryBudgetMb,
          "jobs estimated to need more of the coordinator's memory are rejected (0: no limit)");
ABSL_FLAG(int64_t, worker_memory_budget_mb, lockstep::kDefaultWorkerMemoryBudgetMb,
          "jobs estimated to need more memory on each worker are rejected (0: no limit)");
ABSL_FLAG(int, max_watchers, 4096, "concurrent WatchJob streams (at most 1024 per job)");
ABSL_FLAG(int64_t, history_bytes, 4 << 20,
          "a running job's event log for WatchJob (finished jobs keep states, evaluations and "
          "--history_steps steps)");
ABSL_FLAG(int64_t, history_steps, 2000,
          "the steps a finished job keeps for WatchJob, on disk beside its record: every step "
          "up to this many, then every 2nd, 4th, ... (a power of two) and the last");
ABSL_DECLARE_FLAG(std::string, tls_ca);  // services/common/security/server_security.cc
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_FLAG(std::string, dashboard_listen, "",
          "host:port of the web dashboard and its JSON API (empty: off): HTTPS with --tls_cert "
          "and --tls_key, the job API's tokens; plain HTTP only with --insecure");
ABSL_FLAG(std::string, dashboard_port_file, "",
          "write the dashboard's port actually bound here (for --dashboard_listen :0)");
ABSL_FLAG(std::string, worker_ca_key, "",
          "the CA's key (ca-key.pem): with --bootstrap_token_file, new workers enroll (their "
          "own keys signed into certificates naming them)");
ABSL_FLAG(std::string, bootstrap_token_file, "",
          "bootstrap tokens (one a line) with which workers enroll (WorkerRegistry.Enroll)");
ABSL_FLAG(int, worker_cert_hours, 720, "how long an enrolled worker's certificate is valid");
ABSL_FLAG(std::string, enroll_auto_approve, "",
          "a glob on enrolling workers' names (e.g. lockstep-worker-*) approved without an "
          "admin, up to --enroll_auto_approve_max in all; others wait for `lockstep workers "
          "approve` (empty: every enrolled worker waits)");
ABSL_FLAG(int, enroll_auto_approve_max, 0,
          "how many enrolled workers --enroll_auto_approve approves in all (kept in the state "
          "folder across restarts)");
ABSL_FLAG(int, rendezvous_keys_per_job, 4096,
          "a job's rendezvous keys (collective bootstrap); more are RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, rendezvous_kb_per_job, 4096,
          "a job's rendezvous bytes, in KiB; more are RESOURCE_EXHAUSTED for that job only");
ABSL_FLAG(int, max_queued_jobs, 1000,
          "queued jobs in all, past which a submit is refused (per user: limit_flags.cc)");
ABSL_FLAG(std::string, tokens_file, "",
          "the job API's callers: lines TOKEN NAME ROLE (user or admin) [KEY=VALUE limits]; "
          "required with TLS");
ABSL_FLAG(std::string, port_file, "", "write the port actually bound here (for --listen :0)");
// Below Kubernetes' default terminationGracePeriodSeconds (30), which must exceed it.
ABSL_FLAG(int, drain_grace_s, 20,
          "on SIGTERM/SIGINT: running jobs snapshot and are recorded to continue, then the "
          "process exits within this many seconds");
// The workers' --data_root, checked here as written so that a dataset path outside it
// (/etc, /proc/self, ../..) is refused at submit, not after the job was scheduled. The
// coordinator cannot see the workers' files: each worker checks again, symlinks
// resolved, at Prepare. Keep it a superset of the workers' roots.
ABSL_FLAG(std::string, data_root, lockstep::kDefaultDataRoots,
          "comma-separated folders a dataset.path must lie in (the workers' --data_root); the "
          "coordinator's replica reads datasets from them (--audit_local_replica)");
ABSL_FLAG(bool, audit_local_replica, true,
          "a replay audit that no free worker can take (a one-worker CPU job, docs/audit.md) "
          "runs on the coordinator's own replica, one at a time at a lowered priority; it reads "
          "the job's dataset from --data_root as a worker does. false: such a replay is skipped");
ABSL_FLAG(int64_t, audit_local_replica_memory_mb, 512,
          "the most memory a replay on the coordinator's replica may take (the job's state, "
          "activations and dataset, estimated as for a worker); a job needing more is not "
          "replayed there");
ABSL_FLAG(int, audit_local_replica_max_threads, 0,
          "the most CPU threads a job may compute with for the coordinator's replica to replay "
          "it (a replay computes with the job's threads, for the same bits); 0: this machine's "
          "cores");

int main(int argc, char** argv) {
  using namespace lockstep;
  signal(SIGPIPE, SIG_IGN);  // a peer gone mid-write is an error to report, not a death
  SetPrivateUmask();         // the state folder holds every user's specs and weights
  // Debian builds abseil without NDEBUG, which leaves absl::Mutex's deadlock detection on:
  // a global graph updated on every lock, a large share of the coordinator's CPU with many
  // workers (bench/results/scale.md). Release builds of abseil turn it off; so do we here
  // (unit tests keep it).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  BlockShutdownSignals();
  ParseFlagsWithEnv(argc, argv);  // every flag, and its LOCKSTEP_* variable
  if (absl::Status st = ApplyLogFormatFlag(); !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 2;
  }
  const MetricsFlags metrics_flags = GetMetricsFlags();
  const std::string listen = absl::GetFlag(FLAGS_listen);
  const std::string dashboard_listen = absl::GetFlag(FLAGS_dashboard_listen);
  // A taken port ends the start here, before the job records are touched.
  if (absl::Status st = CheckPortsFree({{"--listen", listen},
                                        {"--metrics_listen", metrics_flags.listen},
                                        {"--dashboard_listen", dashboard_listen}});
      !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 1;
  }
  // The dashboard is exposed as the job API is: plaintext on it stays on loopback too.
  std::vector<std::string> exposed = {listen};
  if (!dashboard_listen.empty()) exposed.push_back(dashboard_listen);
  absl::StatusOr<Transport> transport = ServerTransport(exposed);
  if (!transport.ok()) {
    spdlog::error("{}", std::string(transport.status().message()));
    return 2;
  }
  Guard guard = Guard::Open();
  std::optional<TokenTable> callers;  // for their limits (ApplyLimitFlags); none if insecure
  if (transport->secure()) {
    if (absl::GetFlag(FLAGS_tokens_file).empty()) {
      spdlog::error("--tokens_file is required with TLS (`lockstep certs` makes one)");
      return 2;
    }
    absl::StatusOr<TokenTable> tokens = TokenTable::Load(absl::GetFlag(FLAGS_tokens_file));
    if (!tokens.ok()) {
      spdlog::error("{}", std::string(tokens.status().message()));
      return 2;
    }
    spdlog::info("TLS on; {} job API callers in {}", tokens->size(),
                 absl::GetFlag(FLAGS_tokens_file));
    callers = *tokens;
    guard = Guard::Tls(std::move(tokens).value());
  }
  CoordinatorOptions opts;
  opts.limits.max_workers = absl::GetFlag(FLAGS_max_workers_per_job);
  opts.limits.max_params = absl::GetFlag(FLAGS_max_params);
  opts.memory.coordinator_per_job =
      static_cast<uint64_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_job_memory_budget_mb))) << 20;
  opts.memory.worker =
      static_cast<uint64_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_worker_memory_budget_mb)))
      << 20;
  absl::StatusOr<DataRoots> roots = DataRoots::Parse(absl::GetFlag(FLAGS_data_root));
  if (!roots.ok()) {
    spdlog::error("--{}", std::string(roots.status().message()));
    return 1;
  }
  opts.limits.data_roots = *std::move(roots);
  opts.heartbeat_timeout = absl::Seconds(absl::GetFlag(FLAGS_heartbeat_timeout_s));
  opts.heartbeat_interval = opts.heartbeat_timeout / 5;
  opts.step_timeout = absl::Seconds(absl::GetFlag(FLAGS_step_timeout_s));
  opts.prepare_timeout = absl::Seconds(absl::GetFlag(FLAGS_prepare_timeout_s));
  opts.collective_timeout = absl::Seconds(absl::GetFlag(FLAGS_collective_timeout_s));
  opts.steps_in_flight = std::max(1, absl::GetFlag(FLAGS_steps_in_flight));
  opts.max_watchers = absl::GetFlag(FLAGS_max_watchers);
  opts.history_bytes =
      static_cast<size_t>(std::max<int64_t>(1, absl::GetFlag(FLAGS_history_bytes)));
  opts.history_steps = std::max<int64_t>(2, absl::GetFlag(FLAGS_history_steps));
  opts.max_queued_jobs = absl::GetFlag(FLAGS_max_queued_jobs);
  if (absl::Status st = ApplyLimitFlags(callers ? &*callers : nullptr, &opts); !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 2;
  }
  opts.checkpoint_dir = absl::GetFlag(FLAGS_state_dir) + "/checkpoints";
  opts.records_dir = absl::GetFlag(FLAGS_state_dir) + "/jobs";
  opts.snapshot_dir = absl::GetFlag(FLAGS_state_dir) + "/snapshots";
  opts.tensorboard_dir = absl::GetFlag(FLAGS_state_dir) + "/tensorboard";
  if (absl::Status st = MakeFolderPrivate("--state_dir", absl::GetFlag(FLAGS_state_dir));
      !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 1;
  }
  // Held until the process ends: nothing in the folder is touched before it is ours.
  absl::StatusOr<std::unique_ptr<FolderLock>> state_lock =
      FolderLock::Acquire("--state_dir", absl::GetFlag(FLAGS_state_dir));
  if (!state_lock.ok()) {
    spdlog::error("{}", std::string(state_lock.status().message()));
    return 1;
  }
  std::error_code ec;
  std::filesystem::create_directories(opts.checkpoint_dir, ec);
  if (ec) {
    spdlog::error("cannot create {}: {}", opts.checkpoint_dir, ec.message());
    return 1;
  }

  WorkerPool pool(opts.heartbeat_timeout);
  const std::string revoked_file = absl::GetFlag(FLAGS_state_dir) + "/revoked-workers";
  if (absl::Status st = pool.UseRevocationFile(revoked_file); !st.ok()) {
    spdlog::error("{}", st.ToString());
    return 1;
  }
  if (absl::Status st = pool.UseEnrollmentFile(
          absl::GetFlag(FLAGS_state_dir) + "/enrolled-workers",
          {absl::GetFlag(FLAGS_enroll_auto_approve), absl::GetFlag(FLAGS_enroll_auto_approve_max)});
      !st.ok()) {
    spdlog::error("{}", st.ToString());
    return 1;
  }
  KvTable kv(
      static_cast<size_t>(std::max(1, absl::GetFlag(FLAGS_rendezvous_keys_per_job))),
      static_cast<size_t>(std::max<int64_t>(1, absl::GetFlag(FLAGS_rendezvous_kb_per_job))) * 1024);
  auto factory = NewGrpcWorkerClientFactory(*transport);
  std::unique_ptr<CoordinatorReplica> replica;  // outlives `jobs`
  if (absl::GetFlag(FLAGS_audit_local_replica)) {
    // Streamed datasets' indexes go here when /data is read-only and holds none.
    const std::string index_dir = absl::GetFlag(FLAGS_state_dir) + "/dataset-index";
    std::filesystem::create_directories(index_dir, ec);
    const int max_threads = absl::GetFlag(FLAGS_audit_local_replica_max_threads);
    replica = std::make_unique<CoordinatorReplica>(
        opts.limits.data_roots, ec ? std::string() : index_dir,
        max_threads > 0 ? max_threads : DefaultCpuThreads(),
        static_cast<uint64_t>(
            std::max<int64_t>(0, absl::GetFlag(FLAGS_audit_local_replica_memory_mb)))
            << 20);
  }
  auto registry = std::make_shared<prometheus::Registry>();
  CoordinatorMetrics metrics(registry);
  RpcMetrics rpc_metrics(*registry);
  JobManager jobs(opts, &pool, &kv, factory.get(), &metrics);
  jobs.SetLocalReplica(replica.get());
  // Lines about a job go to its log (WatchLogs) while `jobs` lives: the guard goes first.
  SetLogTap([&jobs](const v1::LogLine& line) { jobs.AppendLog(line); });
  struct TapGuard {
    ~TapGuard() { SetLogTap(nullptr); }
  } tap_guard;
  // With metrics off, nobody counts the WatchJob streams' statuses either.
  JobServiceImpl job_service(&jobs, &pool, &guard, metrics_flags.on() ? &rpc_metrics : nullptr);
  std::unique_ptr<Enrollment> enrollment;
  if (!absl::GetFlag(FLAGS_worker_ca_key).empty() ||
      !absl::GetFlag(FLAGS_bootstrap_token_file).empty()) {
    if (!transport->secure() || absl::GetFlag(FLAGS_worker_ca_key).empty() ||
        absl::GetFlag(FLAGS_bootstrap_token_file).empty()) {
      spdlog::error("enrollment needs TLS, --worker_ca_key and --bootstrap_token_file together");
      return 2;
    }
    absl::StatusOr<std::unique_ptr<Enrollment>> loaded =
        Enrollment::Load(absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_worker_ca_key),
                         absl::GetFlag(FLAGS_bootstrap_token_file),
                         absl::Hours(std::max(1, absl::GetFlag(FLAGS_worker_cert_hours))));
    if (!loaded.ok()) {
      spdlog::error("enrollment: {}", loaded.status().ToString());
      return 2;
    }
    enrollment = *std::move(loaded);
  }
  WorkerRegistryImpl worker_registry(&pool, &jobs, opts.heartbeat_interval, &guard,
                                     enrollment.get());
  RendezvousImpl rendezvous(&kv, &guard);
  WorkerAdminImpl worker_admin(&pool, &jobs, &guard);

  // The records are reloaded before the server takes its first Submit.
  if (absl::Status st = jobs.Start(); !st.ok()) {
    spdlog::error("cannot reload the job records: {}", st.ToString());
    return 1;
  }
  // Metrics first: once the job API's port is written, both are there.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  absl::StatusOr<std::unique_ptr<MetricsServer>> metrics_server =
      ServeMetrics(metrics_flags.listen, metrics_flags.port_file, metrics.collectables(),
                   rpc_metrics, &interceptors);
  if (!metrics_server.ok()) {
    spdlog::error("--metrics_listen: {}", metrics_server.status().ToString());
    return 1;
  }
  // The dashboard before the job API's port file too: once that is written, all are up.
  DashboardApi dashboard_api(&jobs, &pool, &guard);
  std::unique_ptr<DashboardServer> dashboard;
  if (!dashboard_listen.empty()) {
    DashboardServerOptions dashboard_options;
    if (transport->secure()) {
      dashboard_options.cert_file = absl::GetFlag(FLAGS_tls_cert);
      dashboard_options.key_file = absl::GetFlag(FLAGS_tls_key);
    }
    dashboard_options.port_file = absl::GetFlag(FLAGS_dashboard_port_file);
    absl::StatusOr<std::unique_ptr<DashboardServer>> started =
        DashboardServer::Start(dashboard_listen, &dashboard_api, dashboard_options);
    if (!started.ok()) {
      spdlog::error("--dashboard_listen: {}", started.status().ToString());
      return 1;
    }
    dashboard = *std::move(started);
    spdlog::info("dashboard on port {} ({})", dashboard->port(),
                 dashboard->tls() ? "HTTPS" : "plain HTTP");
  }
  absl::StatusOr<Serving> serving =
      StartServer(listen, *transport, {&job_service, &worker_registry, &rendezvous, &worker_admin},
                  absl::GetFlag(FLAGS_port_file), std::move(interceptors));
  if (!serving.ok()) {
    spdlog::error("{}", serving.status().ToString());
    return 1;
  }
  spdlog::info("lockstep-coordinator serving on port {} (state in {})", serving->port,
               absl::GetFlag(FLAGS_state_dir));
  WaitForShutdownSignal();
  // A drain: nothing new starts, running jobs snapshot and are recorded to continue, the
  // watch streams end saying so; then the server stops. All within the grace period.
  const absl::Time signalled = absl::Now();
  const absl::Duration grace = absl::Seconds(std::max(1, absl::GetFlag(FLAGS_drain_grace_s)));
  const absl::Duration for_server = std::min(absl::Seconds(2), grace / 4);
  spdlog::info("stopping: draining within {}", absl::FormatDuration(grace));
  if (absl::Status st = jobs.Drain(signalled + grace - for_server); !st.ok()) {
    spdlog::warn("drain: {}", std::string(st.message()));
  }
  serving->server->Shutdown(absl::ToChronoTime(absl::Now() + for_server));
  spdlog::info("stopped {} after the signal", absl::FormatDuration(absl::Now() - signalled));
  return 0;
}
