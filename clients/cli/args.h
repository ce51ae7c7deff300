// Argument handling shared by the CLI's programs (`lockstep`, `lockstep-train`), on CLI11,
// and how they report an error. Exit codes: 0 success (and --help, --version), 1 a failed
// call or a job that did not succeed, 2 bad usage or an invalid argument.
#ifndef LOCKSTEP_CLIENTS_CLI_ARGS_H_
#define LOCKSTEP_CLIENTS_CLI_ARGS_H_

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace lockstep::cli {

// The exit code of bad usage: an unknown option, a missing argument, a malformed value.
inline constexpr int kUsageExitCode = 2;

// What --version prints: the project's version and `git describe` at configure time.
std::string Version();

// A program's parser: `name` (as the usage line shows it), --help and --version.
std::unique_ptr<CLI::App> NewApp(const std::string& description, const std::string& name);

// Parses the command line into `app` and its subcommands, normalized first
// (NormalizeArgs, its notes printed to stderr). nullopt when the program should go on;
// otherwise its exit code: 0 after printing --help or --version (to stdout), 2 after
// printing a usage error (to stderr) with "did you mean ...?" for a mistyped command or
// option, and where to find the usage.
std::optional<int> Parse(CLI::App& app, int argc, char** argv);

// The arguments (without the program's name) as `app` parses them, as kubectl takes them:
// options given before the subcommand they belong to move after it (`lockstep --dir D
// list` is `lockstep list --dir D`), and an option spelled with underscores (--data_root,
// --token_file) is its dashed spelling, with a deprecation note in `notes`. Nothing after
// "--" or in a prefix command's arguments (`train`: its own program's) changes.
std::vector<std::string> NormalizeArgs(const CLI::App& app, const std::vector<std::string>& args,
                                       std::vector<std::string>* notes);

// For an option's check(): a number >= `min`; otherwise the error says "--NAME: must be
// a number >= MIN, not \"TEXT\"".
CLI::Validator AtLeast(double min);

// For an option's check(): a duration such as "90s", "5m", "1h30m" (absl::ParseDuration)
// or a number of seconds, > 0.
CLI::Validator DurationArg();
// The duration DurationArg accepted.
absl::Duration ParseDurationArg(const std::string& text);

// Prints "error: <code>: <message>" (the message Printable) and returns the CLI's exit
// code for it: 2 for INVALID_ARGUMENT, 1 otherwise.
int Fail(const absl::Status& status);

// Fail() for a file the command line named (a spec): one that cannot be read is bad usage,
// exit 2, as a malformed one is.
int FailArgumentFile(const absl::Status& status);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_ARGS_H_
