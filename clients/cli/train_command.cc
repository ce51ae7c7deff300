// `lockstep train SPEC`: runs lockstep-train, the single-process trainer, in place of this
// process (same arguments, output and exit status). The trainer is a program of its own
// so that the CLI, a gRPC client, links no compute backend (OpenBLAS, OpenMP, CUDA).
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "clients/cli/client.h"
#include "clients/cli/commands.h"

namespace lockstep::cli {

int TrainCommand(int argc, char** argv) {
  absl::StatusOr<std::string> trainer = FindBinary("lockstep-train");
  if (!trainer.ok()) return Fail(trainer.status());
  std::vector<char*> args = {trainer->data()};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);  // after "lockstep train"
  args.push_back(nullptr);
  execv(trainer->c_str(), args.data());
  return Fail(absl::InternalError(absl::StrCat("cannot run ", *trainer, ": ", strerror(errno))));
}

}  // namespace lockstep::cli
