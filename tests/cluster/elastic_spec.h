// The elastic tests' and benchmark's job (docs/elastic.md): a BatchNorm convnet with dropout
// on 4 logical replicas, global batch 16, one thread per worker, as spec YAML without its
// steps, workers and evaluation (each user adds its own). Used by elastic_testing.h,
// bench/elastic_bench.cc and clients/cli/cli_elastic_test.cc.
#ifndef LOCKSTEP_TESTS_CLUSTER_ELASTIC_SPEC_H_
#define LOCKSTEP_TESTS_CLUSTER_ELASTIC_SPEC_H_

namespace lockstep::testing {

inline constexpr char kElasticSpecYaml[] = R"(model:
  layers:
    - conv: {features: 8, kernel_size: [3, 3]}
    - batch_norm: {}
    - relu
    - avg_pool: {window_shape: [2, 2], strides: [2, 2]}
    - flatten
    - dense: {features: 32}
    - dropout: {rate: 0.3}
    - dense: {features: 10}
optimizer: {kind: sgd, learning_rate: 0.1, momentum: 0.9}
global_batch_size: 16
seed: 3
replicas: 4
threads: 1
)";

}  // namespace lockstep::testing

#endif  // LOCKSTEP_TESTS_CLUSTER_ELASTIC_SPEC_H_
