// 12-factor settings: every flag --name of a Lockstep server can also come from the
// environment variable LOCKSTEP_NAME (upper case); a flag on the command line wins.
//
// Two flag libraries, on purpose: the servers' settings are absl flags (gRPC's C++
// examples' convention; one global registry, which ParseFlagsWithEnv turns into
// environment variables and deploy/CONFIGURATION.md lists), while the `lockstep` CLI
// (clients/cli) uses CLI11 for what absl's flags do not have: subcommands, each with its own
// options, positional arguments and --help, and the completion scripts made from them.
#ifndef LOCKSTEP_SERVICES_COMMON_FLAGS_H_
#define LOCKSTEP_SERVICES_COMMON_FLAGS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace lockstep {

// Parses argv with absl flags after inserting --name=value for each flag of this program
// whose LOCKSTEP_NAME environment variable is set: every flag in absl's registry that the
// program's own sources define (absl's own, such as --flagfile, are left out), so that no
// list of them is kept by hand. Returns the positional arguments.
std::vector<char*> ParseFlagsWithEnv(int argc, char** argv);
// The environment variable of flag `name`: LOCKSTEP_ and the name in upper case.
std::string FlagEnvName(const std::string& name);
// The flags ParseFlagsWithEnv reads from the environment, by name.
std::vector<std::string> EnvFlagNames();

// Writes the port a server bound to `path` (for --port_file); nothing when path is empty.
void WritePortFile(const std::string& path, int port);
// The port a server wrote to `path`, waiting up to `timeout` for it; "" if none came.
std::string ReadPortFile(const std::string& path, absl::Duration timeout);

// Blocks SIGINT and SIGTERM for this thread and threads it starts later: call first in
// main, so that WaitForShutdownSignal receives them.
void BlockShutdownSignals();
// Blocks until SIGINT or SIGTERM (returns the signal's number), or until `give_up`, asked
// every `poll`, says so (returns 0).
int WaitForShutdownSignal(const std::function<bool()>& give_up = nullptr,
                          absl::Duration poll = absl::Seconds(1));

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_FLAGS_H_
