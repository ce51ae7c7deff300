// Argument handling shared by the CLI's programs (`lockstep`, `lockstep-train`), and how
// they report an error.
#ifndef LOCKSTEP_CLIENTS_CLI_ARGS_H_
#define LOCKSTEP_CLIENTS_CLI_ARGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lockstep::cli {

// Arguments after the subcommand: `--name value`, `--name=value`, `--flag`, positionals;
// a one-letter name is `-n value` (a flag `-f`).
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

// The value `text` of option --`name` as a number; InvalidArgument naming the option and
// the value otherwise (for Fail: exit code 2).
absl::StatusOr<int> ParseInt(const std::string& name, const std::string& text);
absl::StatusOr<double> ParseDouble(const std::string& name, const std::string& text);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_ARGS_H_
