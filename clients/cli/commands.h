// The `lockstep` CLI's subcommands. Each Add*Command adds its subcommand (with its
// options, bound to variables that its runner owns) to the program's parser, and appends
// to `out` how to run it once the command line has been parsed into it.
#ifndef LOCKSTEP_CLIENTS_CLI_COMMANDS_H_
#define LOCKSTEP_CLIENTS_CLI_COMMANDS_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

#include "clients/cli/args.h"

namespace lockstep::cli {

// A subcommand's parser, and its body: returns the exit code.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};
using Commands = std::vector<Command>;

// `train`: replaces this process with lockstep-train, passing the arguments after `train`.
void AddTrainCommand(CLI::App& app, Commands& out);
// submit, list, status, watch, cancel, workers, checkpoint: the JobService.
void AddJobCommands(CLI::App& app, Commands& out);
// `logs JOB [-f]`: a job's events and its servers' log lines (WatchJob, WatchLogs).
void AddLogsCommand(CLI::App& app, Commands& out);
void AddHealthCommand(CLI::App& app, Commands& out);
// `workers revoke ID` under the `workers` command (before it in `out`: both are parsed).
void AddWorkersRevokeCommand(CLI::App& workers, Commands& out);
void AddCertsCommand(CLI::App& app, Commands& out);
// `completion bash|zsh`: a completion script made from `app` (add it last).
void AddCompletionCommand(CLI::App& app, Commands& out);
// `cluster up`, and under it the commands on a running cluster.
void AddClusterCommands(CLI::App& app, Commands& out);
// `cluster down`, `cluster add-worker`, `cluster data-root add` under `cluster`.
void AddRunningClusterCommands(CLI::App& cluster, Commands& out);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_COMMANDS_H_
