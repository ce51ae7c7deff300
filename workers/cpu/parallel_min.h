// ParallelFor: an elementwise loop split across the CPU backend's OpenMP threads, on one
// thread below kParallelMin elements.
#ifndef LOCKSTEP_WORKERS_CPU_PARALLEL_MIN_H_
#define LOCKSTEP_WORKERS_CPU_PARALLEL_MIN_H_

#include <omp.h>

#include <cstddef>

namespace lockstep::cpu {

// Elementwise loops below this many elements run on one thread: fork/join would cost more.
inline constexpr size_t kParallelMin = size_t{1} << 15;

// Runs f(begin, end) over [0, n) split evenly across `threads` OpenMP threads (one call
// below kParallelMin).
template <typename F>
void ParallelFor(int threads, size_t n, F f) {
  if (n <= kParallelMin) {
    f(size_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    f(n * t / nt, n * (t + 1) / nt);
  }
}

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_PARALLEL_MIN_H_
