// `lockstep train SPEC`: runs lockstep-train, the single-process trainer, in place of this
// process (same arguments, output and exit status). The trainer is a program of its own
// so that the CLI, a gRPC client, links no compute backend (OpenBLAS, OpenMP, CUDA); it
// parses the arguments, --help included.
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"
#include "clients/cli/openmp_env.h"

namespace lockstep::cli {

void AddTrainCommand(CLI::App& app, Commands& out) {
  CLI::App* sub = app.add_subcommand(
      "train", "train a job spec (YAML or JSON) in this process: `lockstep train --help`");
  sub->prefix_command();  // everything after `train` is lockstep-train's
  sub->set_help_flag();   // --help too
  out.push_back({sub, [sub] {
                   absl::StatusOr<std::string> trainer = FindBinary("lockstep-train");
                   if (!trainer.ok()) return Fail(trainer.status());
                   std::vector<std::string> rest = sub->remaining();
                   std::vector<char*> args = {trainer->data()};
                   for (std::string& a : rest) args.push_back(a.data());
                   args.push_back(nullptr);
                   BoundOpenMpSpinning();  // the trainer's libgomp reads it as it loads
                   execv(trainer->c_str(), args.data());
                   return Fail(absl::InternalError(
                       absl::StrCat("cannot run ", *trainer, ": ", strerror(errno))));
                 }});
}

}  // namespace lockstep::cli
