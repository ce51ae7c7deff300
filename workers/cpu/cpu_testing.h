// Helpers shared by the CPU backend's tests (cpu_backend_test, cpu_layers_test,
// dnnl_conv_test).
#ifndef LOCKSTEP_WORKERS_CPU_CPU_TESTING_H_
#define LOCKSTEP_WORKERS_CPU_CPU_TESTING_H_

#include <random>
#include <vector>

namespace lockstep::testing {

// n floats drawn from a standard normal distribution seeded with `seed`.
inline std::vector<float> RandomNormal(size_t n, int seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_WORKERS_CPU_CPU_TESTING_H_
