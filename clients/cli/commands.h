// The `lockstep` CLI's subcommands.
#ifndef LOCKSTEP_CLIENTS_CLI_COMMANDS_H_
#define LOCKSTEP_CLIENTS_CLI_COMMANDS_H_

#include <string>

#include "clients/cli/args.h"
#include "lockstep/v1/job.grpc.pb.h"

namespace lockstep::cli {

// Replaces this process with lockstep-train, passing the arguments after `train`.
int TrainCommand(int argc, char** argv);

// Options are read (Flag, Value) before positionals, so that option values are not
// taken for positionals.
int SubmitCommand(Args& args);
int ListCommand(Args& args);
int StatusCommand(Args& args);
int WatchCommand(Args& args);
int CancelCommand(Args& args);
int WorkersCommand(Args& args);
int CheckpointCommand(Args& args);
int LogsCommand(Args& args);
// `lockstep logs`'s work, from plain values: prints the job's events and its servers' log
// lines as they come (with `follow`, until the job ends; else what is kept now). The exit
// code: 0, or Fail's for the first stream's error.
int ShowJobLogs(v1::JobService::Stub& stub, const std::string& job_id, bool follow, bool json);
int HealthCommand(Args& args);
int CertsCommand(Args& args);
int ClusterCommand(const std::string& sub, Args& args);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_COMMANDS_H_
