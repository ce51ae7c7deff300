// The worker's CollectiveFactory (job_slot.h): a job's data plane bootstrapped through the
// coordinator's Rendezvous under the job's prefix: NCCL for a CUDA backend, GlooCollective
// (TCP or shared memory) otherwise. Contract: collectives.h.
#include "services/worker/collectives.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "services/common/observability/job_log.h"
#include "services/common/rpc/rendezvous_store.h"
#include "workers/gloo/gloo_collective.h"
#ifdef LOCKSTEP_HAVE_NCCL
#include "workers/nccl/nccl_collective.h"
#endif

namespace lockstep {
namespace {

// The job a rendezvous prefix ("jobs/JOB/ATTEMPT-SECRET/") is for; its secret is not logged.
std::string JobOf(const std::string& prefix) {
  std::vector<std::string> parts = absl::StrSplit(prefix, '/');
  return parts.size() > 1 && parts[0] == "jobs" ? parts[1] : "";
}

class Factory final : public CollectiveFactory {
 public:
  Factory(std::shared_ptr<grpc::Channel> coordinator, std::string host)
      : coordinator_(std::move(coordinator)), host_(std::move(host)) {}

  absl::StatusOr<std::unique_ptr<Collective>> Create(int rank, int size, const std::string& prefix,
                                                     absl::Duration timeout, Backend* backend,
                                                     const CancelToken& cancel) override {
    RendezvousStore store(coordinator_, prefix, cancel);
    if (backend->Name().rfind("cuda", 0) == 0) {
#ifdef LOCKSTEP_HAVE_NCCL
      NcclCollectiveOptions options;
      options.timeout = timeout;
      return NewNcclCollective(rank, size, &store, backend, options);
#else
      return absl::FailedPreconditionError("this worker was built without NCCL");
#endif
    }
    GlooOptions options;
    options.hostname = host_;
    options.connect_timeout = timeout;
    // A failed attempt is retried in place (not a recovery of the job): say so in its log.
    options.on_retry = [about = JobContext{JobOf(prefix), "", rank}](int attempt,
                                                                     const absl::Status& why) {
      LogJob(spdlog::level::warn, about,
             absl::StrCat("collective bootstrap attempt ", attempt + 1,
                          " failed; retrying in place: ", why.message()));
    };
    absl::StatusOr<std::unique_ptr<Collective>> collective =
        GlooCollective::Create(rank, size, &store, options);
    if (collective.ok()) {
      LogJob(spdlog::level::info, JobContext{JobOf(prefix), "", rank},
             absl::StrCat("collective: rank ", rank, " of ", size, " over ",
                          (*collective)->Name() == "gloo-shm" ? "shared memory" : "TCP"));
    }
    return collective;
  }

 private:
  std::shared_ptr<grpc::Channel> coordinator_;
  std::string host_;
};

}  // namespace

std::unique_ptr<CollectiveFactory> NewCollectiveFactory(std::shared_ptr<grpc::Channel> coordinator,
                                                        std::string host) {
  return std::make_unique<Factory>(std::move(coordinator), std::move(host));
}

}  // namespace lockstep
