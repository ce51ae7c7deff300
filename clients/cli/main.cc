// lockstep: the command-line client. `lockstep help` lists the commands.
#include <cstdio>
#include <string>

#include "absl/strings/str_format.h"
#include "clients/cli/commands.h"

namespace lockstep::cli {

namespace {

void Usage(FILE* out) {
  absl::FPrintF(out,
                "usage: lockstep COMMAND [ARGS]\n\n"
                "  train SPEC [--json] [--data DIR] [--threads N]\n"
                "      train a job spec (YAML or JSON) in this process\n"
                "  cluster up [--workers N] [--threads T] [--dir DIR] [--port P] [--detach]\n"
                "      start a local cluster (coordinator + N CPU workers); Ctrl-C stops it\n"
                "  cluster down [--dir DIR]\n"
                "      stop a detached local cluster\n"
                "  submit SPEC [--wait] [--workers N] [--request-id ID] [--json]\n"
                "  list [--state STATE] [--json]\n"
                "  status JOB [--json]\n"
                "  watch JOB [--json]\n"
                "  logs JOB [-f] [--json]\n"
                "      a job's events and its servers' log lines; -f follows until it ends\n"
                "  cancel JOB [--json]\n"
                "  workers [--json]\n"
                "  checkpoint JOB [--step S] -o FILE\n"
                "      download a job's state (safetensors, Flax names): its final checkpoint,\n"
                "      else its newest snapshot, or the kept snapshot of step S\n"
                "  health [HOST:PORT] [--server_name NAME]\n"
                "      exit 0 if the server's gRPC health service is SERVING\n"
                "  certs [--out DIR] [--hosts NAME,...] [--users NAME,...] [--k8s-secrets FILE]\n"
                "      make a cluster's CA, certificates and tokens (for compose, Kubernetes)\n\n"
                "Job commands talk to --coordinator HOST:PORT, else $LOCKSTEP_COORDINATOR, else\n"
                "the local cluster started by `lockstep cluster up`, over TLS with the bearer\n"
                "token and CA of --credentials DIR (else $LOCKSTEP_CREDENTIALS, else the local\n"
                "cluster's), or --tls_ca FILE and --token_file FILE; --insecure for plaintext.\n");
}

}  // namespace
}  // namespace lockstep::cli

int main(int argc, char** argv) {
  using namespace lockstep::cli;
  if (argc < 2) {
    Usage(stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "cluster") {
    Args args(argc, argv, 3);
    return ClusterCommand(argc > 2 ? argv[2] : "", args);
  }
  Args args(argc, argv, 2);
  if (cmd == "train") return TrainCommand(argc, argv);
  if (cmd == "submit") return SubmitCommand(args);
  if (cmd == "list") return ListCommand(args);
  if (cmd == "status") return StatusCommand(args);
  if (cmd == "watch") return WatchCommand(args);
  if (cmd == "logs") return LogsCommand(args);
  if (cmd == "cancel") return CancelCommand(args);
  if (cmd == "workers") return WorkersCommand(args);
  if (cmd == "checkpoint") return CheckpointCommand(args);
  if (cmd == "health") return HealthCommand(args);
  if (cmd == "certs") return CertsCommand(args);
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    Usage(stdout);
    return 0;
  }
  absl::FPrintF(stderr, "error: unknown command %s\n", cmd);
  Usage(stderr);
  return 2;
}
