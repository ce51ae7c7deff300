#include "services/worker/collectives.h"

#include "services/common/rendezvous_store.h"
#include "workers/gloo/gloo_collective.h"
#ifdef LOCKSTEP_HAVE_NCCL
#include "workers/nccl/nccl_collective.h"
#endif

namespace lockstep {
namespace {

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
    return GlooCollective::Create(rank, size, &store, options);
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
