// lockstep: the command-line client. `lockstep --help` lists the commands, `lockstep
// COMMAND --help` their options.
#include <cstdio>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "clients/cli/args.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"

int main(int argc, char** argv) {
  using namespace lockstep::cli;
  std::unique_ptr<CLI::App> app =
      NewApp("Lockstep: data-parallel training as a service", "lockstep");
  QuietGrpcLogs();
  Commands commands;
  AddTrainCommand(*app, commands);
  AddClusterCommands(*app, commands);
  AddJobCommands(*app, commands);
  AddLogsCommand(*app, commands);
  AddHealthCommand(*app, commands);
  AddCertsCommand(*app, commands);
  AddCompletionCommand(*app, commands);
  // `lockstep help [COMMAND...]` is `lockstep [COMMAND...] --help` (rewritten below); the
  // subcommand is here to be listed.
  app->add_subcommand("help", "print this help, or a command's: help submit, help cluster up");
  // After the subcommands, which would inherit it.
  app->footer(
      "Job commands talk to --coordinator HOST:PORT, else $LOCKSTEP_COORDINATOR, else the\n"
      "local cluster started by `lockstep cluster up` in --dir DIR (else $LOCKSTEP_CLUSTER_DIR,\n"
      "else ./.lockstep-cluster; with --insecure 127.0.0.1:7070 when that holds none), over TLS "
      "with the\n"
      "bearer token and CA of --credentials DIR (else $LOCKSTEP_CREDENTIALS, else the local\n"
      "cluster's), or --tls-ca FILE and --token-file FILE; --insecure for plaintext. These\n"
      "options may come anywhere on the line: lockstep --dir D list is lockstep list --dir D.\n"
      "Options are spelled with dashes (--data-root); the older --data_root still works.\n"
      "Exit codes: 0 success, 1 a failed call or a job that did not succeed, 2 bad usage.");
  std::vector<char*> args(argv, argv + argc);
  if (args.size() > 1 && std::string_view(args[1]) == "help") {
    static char kHelp[] = "--help";
    args.erase(args.begin() + 1);
    if (args.size() > 1 &&
        app->get_subcommands([&](const CLI::App* c) { return c->check_name(args[1]); }).empty()) {
      absl::FPrintF(stderr, "error: no command %s; `lockstep help` lists them\n", args[1]);
      return kUsageExitCode;
    }
    args.push_back(kHelp);
  }
  if (std::optional<int> exit_code = Parse(*app, static_cast<int>(args.size()), args.data())) {
    return *exit_code;
  }
  for (const Command& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  // No command to run: none given, or a group (`cluster`) without its subcommand. (Not
  // require_subcommand: it would report an unknown command as a missing one.)
  // help() is the deepest command's given.
  absl::FPrintF(stderr, "error: a subcommand is required\n%s", app->help());
  return kUsageExitCode;
}
