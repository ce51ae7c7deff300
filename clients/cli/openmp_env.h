// How the OpenMP threads of the programs the CLI starts wait at their barriers. libgomp
// reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it loads, so a program cannot
// choose for itself: the CLI sets them (where the user has not) in its own environment
// before it starts lockstep-train or a local cluster's servers, which inherit them.
// Measured in bench/results/cpu-throughput.md ("Wait policy"): libgomp's default spin is
// fastest alone but much slower beside one other busy process; sleeping at once (passive)
// holds up under contention but costs on an idle machine; 10,000 rounds costs little
// alone and keeps most of passive's gain.
#ifndef LOCKSTEP_CLIENTS_CLI_OPENMP_ENV_H_
#define LOCKSTEP_CLIENTS_CLI_OPENMP_ENV_H_

namespace lockstep::cli {

// For one trainer that may share the host (`lockstep train`): GOMP_SPINCOUNT=10000 unless
// OMP_WAIT_POLICY or GOMP_SPINCOUNT is set already.
void BoundOpenMpSpinning();

// For several servers sharing the host's cores (`lockstep cluster up`):
// OMP_WAIT_POLICY=passive unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set already.
void SleepOpenMpWaits();

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_OPENMP_ENV_H_
