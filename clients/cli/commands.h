// The `lockstep` CLI's subcommands and their shared argument handling.
#ifndef LOCKSTEP_CLIENTS_CLI_COMMANDS_H_
#define LOCKSTEP_CLIENTS_CLI_COMMANDS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace lockstep::cli {

// Arguments after the subcommand: `--name value`, `--name=value`, `--flag`, positionals.
class Args {
 public:
  Args(int argc, char** argv, int start);
  bool Flag(const std::string& name);
  std::string Value(const std::string& name, const std::string& fallback);
  std::vector<std::string> Positional();
  // False (after printing what) if any option was not consumed.
  bool Done();

 private:
  std::vector<std::string> args_;
  std::vector<bool> used_;
};

// Prints "error: <code>: <message>" and returns the CLI's exit code for it.
int Fail(const absl::Status& status);

int TrainCommand(Args& args);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_COMMANDS_H_
