// GlooStore: Gloo's rendezvous::Store interface over a lockstep::Store, so that Gloo's
// connectFullMesh can rendezvous through the coordinator (or a MemoryStore). GlooCollective
// no longer uses Gloo; this (library lockstep_gloo_store, Gloo's public API only) connects
// raw Gloo, the peer bench/gloo_allreduce_bench compares with. Namespacing per job is left
// to gloo::rendezvous::PrefixStore layered on top.
#ifndef LOCKSTEP_WORKERS_GLOO_GLOO_STORE_H_
#define LOCKSTEP_WORKERS_GLOO_GLOO_STORE_H_

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/store.h"
#include "gloo/rendezvous/store.h"

namespace lockstep::gloo_internal {

// Gloo's Store contract is exceptions, so every method throws StoreError (gloo_status.h)
// carrying the lockstep::Store's status; a key that does not appear by `deadline` is
// DEADLINE_EXCEEDED. The deadline alone bounds every wait, whatever timeout Gloo passes
// (its context timeout).
// Values are Gloo's bytes, unchanged. Thread-safe; `store` must outlive the adapter.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(lockstep::Store* store, absl::Time deadline);

  void set(const std::string& key, const std::vector<char>& data) override;
  // The value of `key`, waiting for it until the deadline.
  std::vector<char> get(const std::string& key) override;
  // Returns once every key is set, waiting until the deadline (see above for `timeout`).
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  // The value of `key`, waiting until the deadline; cached once seen.
  std::string Fetch(const std::string& key);

  lockstep::Store* const store_;
  const absl::Time deadline_;
  absl::Mutex mu_;
  // Values already fetched: wait() then get() costs one store round trip, not two.
  std::map<std::string, std::string> fetched_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep::gloo_internal

#endif  // LOCKSTEP_WORKERS_GLOO_GLOO_STORE_H_
