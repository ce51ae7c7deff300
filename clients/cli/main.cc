// lockstep: the command-line client. `lockstep help` lists the commands.
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "clients/cli/commands.h"

namespace lockstep::cli {

Args::Args(int argc, char** argv, int start) {
  for (int i = start; i < argc; ++i) args_.emplace_back(argv[i]);
  used_.assign(args_.size(), false);
}

bool Args::Flag(const std::string& name) {
  for (size_t i = 0; i < args_.size(); ++i) {
    if (!used_[i] && args_[i] == "--" + name) return used_[i] = true;
  }
  return false;
}

std::string Args::Value(const std::string& name, const std::string& fallback) {
  const std::string opt = "--" + name;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (used_[i]) continue;
    if (args_[i] == opt && i + 1 < args_.size()) {
      used_[i] = used_[i + 1] = true;
      return args_[i + 1];
    }
    if (args_[i].rfind(opt + "=", 0) == 0) {
      used_[i] = true;
      return args_[i].substr(opt.size() + 1);
    }
  }
  return fallback;
}

std::vector<std::string> Args::Positional() {
  std::vector<std::string> out;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (!used_[i] && args_[i].rfind("--", 0) != 0) {
      used_[i] = true;
      out.push_back(args_[i]);
    }
  }
  return out;
}

bool Args::Done() {
  for (size_t i = 0; i < args_.size(); ++i) {
    if (!used_[i]) {
      absl::FPrintF(stderr, "error: unknown option %s\n", args_[i]);
      return false;
    }
  }
  return true;
}

int Fail(const absl::Status& status) {
  absl::FPrintF(stderr, "error: %s: %s\n", absl::StatusCodeToString(status.code()),
                status.message());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

absl::StatusOr<int> ParseInt(const std::string& name, const std::string& text) {
  int v;
  if (!absl::SimpleAtoi(text, &v)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s: \"%s\" is not an integer", name, text));
  }
  return v;
}

absl::StatusOr<double> ParseDouble(const std::string& name, const std::string& text) {
  double v;
  if (!absl::SimpleAtod(text, &v)) {
    return absl::InvalidArgumentError(absl::StrFormat("--%s: \"%s\" is not a number", name, text));
  }
  return v;
}

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
                "  cancel JOB [--json]\n"
                "  workers [--json]\n"
                "  health [HOST:PORT]     exit 0 if the server's gRPC health service is SERVING\n\n"
                "Job commands talk to --coordinator HOST:PORT, else $LOCKSTEP_COORDINATOR, else\n"
                "the local cluster started by `lockstep cluster up`.\n");
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
  if (cmd == "train") return TrainCommand(args);
  if (cmd == "submit") return SubmitCommand(args);
  if (cmd == "list") return ListCommand(args);
  if (cmd == "status") return StatusCommand(args);
  if (cmd == "watch") return WatchCommand(args);
  if (cmd == "cancel") return CancelCommand(args);
  if (cmd == "workers") return WorkersCommand(args);
  if (cmd == "health") return HealthCommand(args);
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    Usage(stdout);
    return 0;
  }
  absl::FPrintF(stderr, "error: unknown command %s\n", cmd);
  Usage(stderr);
  return 2;
}
