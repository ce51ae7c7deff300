// What the worker-side tests share, kept for the whole test process so that the dataset
// loads once: a DatasetCache holding Fashion-MNIST and a 1-thread CPU BackendSource.
#ifndef LOCKSTEP_SERVICES_WORKER_TESTING_H_
#define LOCKSTEP_SERVICES_WORKER_TESTING_H_

#include "core/testing.h"
#include "workers/backend_factory.h"
#include "workers/dataset_cache.h"

namespace lockstep::testing {

inline DatasetCache& TestDatasets() {
  static DatasetCache* cache = [] {
    auto* c = new DatasetCache();
    EXPECT_TRUE(c->GetIdx(kDefaultDatasetPath).ok());
    return c;
  }();
  return *cache;
}

inline const BackendSource& TestBackends() {
  static const BackendSource* backends = BackendSource::Create("cpu", 1)->release();
  return *backends;
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_SERVICES_WORKER_TESTING_H_
