// RandomDataset: n Fashion-MNIST-shaped examples (28x28x1 pixels uniform in [0, 1), labels
// uniform in [0, 10)) drawn from `seed`, for the tests and benchmarks that need data of
// that shape but not the real files.
#ifndef LOCKSTEP_CORE_DATA_RANDOM_DATASET_H_
#define LOCKSTEP_CORE_DATA_RANDOM_DATASET_H_

#include <cstdint>
#include <random>

#include "core/data/host_dataset.h"

namespace lockstep {

inline Dataset RandomDataset(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  Dataset d;
  d.size = n;
  d.row = 28 * 28;
  d.shape = {28, 28, 1};
  d.images.resize(static_cast<size_t>(n) * d.row);
  for (float& x : d.images) x = pixel(gen);
  for (int64_t i = 0; i < n; ++i) {
    d.labels.push_back(static_cast<int32_t>(gen() % 10));
    if (d.labels[i] > d.labels[d.max_label_index]) d.max_label_index = i;
  }
  return d;
}

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_RANDOM_DATASET_H_
