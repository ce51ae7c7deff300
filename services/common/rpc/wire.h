// The Worker API's protos <-> the plain commands and results (core/commands.h): the one
// place that knows both, used by the worker's service and the coordinator's gRPC client.
// Also how a TrainState travels as StateChunks (Prepare and FetchState alike).
#ifndef LOCKSTEP_SERVICES_COMMON_RPC_WIRE_H_
#define LOCKSTEP_SERVICES_COMMON_RPC_WIRE_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "core/commands.h"
#include "core/train_state.h"
#include "lockstep/v1/worker.pb.h"

namespace lockstep {

// Bytes of state per chunk.
inline constexpr size_t kStateChunkBytes = 1 << 20;

v1::PrepareHeader ToProto(const JobAssignment& job);
JobAssignment FromProto(const v1::PrepareHeader& header);

v1::StateHeader ToProto(const StateHeader& header);
StateHeader FromProto(const v1::StateHeader& header);

v1::PrepareResponse ToProto(const PrepareResult& result);
PrepareResult FromProto(const v1::PrepareResponse& response);

v1::StepRequest ToProto(const std::string& job_id, const StepCommand& command);
// The command's indices point into `request`, which must outlive it; its logical
// replicas' keys into `keys` (filled here), which must outlive it too.
StepCommand FromProto(const v1::StepRequest& request, std::vector<rng::Key>* keys);

v1::StepResponse ToProto(const StepResult& result);
StepResult FromProto(const v1::StepResponse& response);

v1::EvaluateResponse ToProto(const EvalSums& sums);
EvalSums FromProto(const v1::EvaluateResponse& response);

// Sends `bytes` (the state `header` describes) as chunks of at most kStateChunkBytes, the
// header in the first, through `write`; stops at the first write that returns false.
bool WriteStateChunks(const StateHeader& header, std::string_view bytes,
                      const std::function<bool(const v1::StateChunk&)>& write);
// How many chunks WriteStateChunks sends for `bytes` (at least one), and the i-th of them,
// for a writer that sends one at a time (the coordinator's asynchronous Prepare).
size_t StateChunkCount(std::string_view bytes);
v1::StateChunk StateChunkAt(const StateHeader& header, std::string_view bytes, size_t i);

// The receiving end of WriteStateChunks (the coordinator's FetchState): a TrainState
// rebuilt from the chunks in the order they arrive. Not thread-safe.
class StateChunkAssembler {
 public:
  // DATA_LOSS when the first chunk carries no header, a later one does, the header
  // describes more than `max_bytes`, or the data run past the size it announces.
  absl::Status Add(const v1::StateChunk& chunk, uint64_t max_bytes = uint64_t{1} << 40);
  // DATA_LOSS unless a header and every byte it announced arrived.
  absl::StatusOr<TrainState> Finish() &&;

 private:
  std::optional<StateAssembler> state_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_RPC_WIRE_H_
