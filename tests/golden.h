// Helpers for the tests that read the golden files tools/reference/make_golden.py wrote
// (tests/golden/): the model a file records, its params as one flat vector, its data.
#ifndef LOCKSTEP_TESTS_GOLDEN_H_
#define LOCKSTEP_TESTS_GOLDEN_H_

#include <algorithm>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/io/safetensors.h"
#include "core/model.h"
#include "core/spec/spec.h"
#include "core/testing.h"

namespace lockstep::testing {

// The ModelSpec in a golden file's "model" metadata (JSON).
inline v1::ModelSpec GoldenModelSpec(const std::string& json) {
  auto spec = ParseSpec("{\"model\": " + json + "}", "golden metadata");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? spec->model() : v1::ModelSpec();
}

// The file's F32 tensors called prefix + name for each of m's params, in layout order;
// a tensor that is missing or of another shape fails the test (and is left zero).
inline std::vector<float> GoldenParams(const SafeTensors& st, const Model& m,
                                       const std::string& prefix) {
  std::vector<float> flat(m.layout().total());
  for (const ParamEntry& e : m.layout().entries()) {
    const std::string name = prefix + e.name;
    auto it = st.tensors().find(name);
    EXPECT_NE(it, st.tensors().end()) << name;
    if (it == st.tensors().end()) continue;
    EXPECT_EQ(it->second.shape, e.shape) << name;
    auto v = st.F32(name);
    EXPECT_TRUE(v.ok()) << name << ": " << v.status();
    if (!v.ok() || v->size() != e.size) continue;
    std::copy(v->begin(), v->end(), flat.begin() + e.offset);
  }
  return flat;
}

// The Fashion-MNIST-shaped examples in the file's `prefix`.images and `prefix`.labels.
inline Dataset GoldenDataset(const SafeTensors& st, const std::string& prefix) {
  Dataset d;
  d.images = *st.F32(prefix + ".images");
  d.labels = *st.I32(prefix + ".labels");
  d.size = static_cast<int64_t>(d.labels.size());
  d.row = 784;
  return d;
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_TESTS_GOLDEN_H_
