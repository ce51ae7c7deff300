// Store: the small key-value rendezvous that bootstraps a collective (Gloo's addresses,
// NCCL's unique id). In a cluster it is the coordinator's Rendezvous service, namespaced
// per job; in tests, MemoryStore.
#ifndef LOCKSTEP_CORE_STORE_H_
#define LOCKSTEP_CORE_STORE_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep {

class Store {
 public:
  virtual ~Store() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // The key's value once set; DEADLINE_EXCEEDED naming the key after `timeout`.
  virtual absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) = 0;
};

// An in-process Store. Thread-safe.
class MemoryStore final : public Store {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_STORE_H_
