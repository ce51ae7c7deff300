// KvTable: the Rendezvous service's store. Bounded (keys and bytes) so that a
// misbehaving client cannot exhaust the coordinator; a job's keys are dropped when it
// ends. Thread-safe.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_KV_TABLE_H_
#define LOCKSTEP_SERVICES_COORDINATOR_KV_TABLE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep {

class KvTable {
 public:
  KvTable(size_t max_keys = 100000, size_t max_bytes = 64 << 20)
      : max_keys_(max_keys), max_bytes_(max_bytes) {}

  // RESOURCE_EXHAUSTED when over the limits.
  absl::Status Set(const std::string& key, const std::string& value);
  // NOT_FOUND naming the key.
  absl::StatusOr<std::string> Get(const std::string& key);
  // Values of all keys once set; DEADLINE_EXCEEDED naming the missing keys.
  absl::StatusOr<std::vector<std::string>> Wait(const std::vector<std::string>& keys,
                                                absl::Duration timeout);
  void ErasePrefix(const std::string& prefix);

 private:
  const size_t max_keys_, max_bytes_;
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_KV_TABLE_H_
