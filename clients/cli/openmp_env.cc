// How the OpenMP threads of the programs the CLI starts wait at their barriers. Contract:
// openmp_env.h.
#include "clients/cli/openmp_env.h"

#include <cstdlib>

namespace lockstep::cli {
namespace {

bool UserChose() {
  return std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr;
}

}  // namespace

void BoundOpenMpSpinning() {
  if (!UserChose()) setenv("GOMP_SPINCOUNT", "10000", /*overwrite=*/0);
}

void SleepOpenMpWaits() {
  if (!UserChose()) setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0);
}

}  // namespace lockstep::cli
