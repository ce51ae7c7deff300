#ifndef LOCKSTEP_WORKERS_CPU_PARALLEL_MIN_H_
#define LOCKSTEP_WORKERS_CPU_PARALLEL_MIN_H_

#include <cstddef>

namespace lockstep::cpu {

// Elementwise loops below this many elements run on one thread: fork/join would cost more.
inline constexpr size_t kParallelMin = size_t{1} << 15;

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_PARALLEL_MIN_H_
