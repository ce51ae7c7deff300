// StepExecutor's graph capture: the device part of a step recorded once as a backend
// graph and replayed (see StepExecutor::Create's use_graphs), with the eager fallback.
#include "absl/base/internal/raw_logging.h"
#include "core/status_macros.h"
#include "core/step.h"
#include "core/step_workspace.h"

namespace lockstep {

absl::StatusOr<bool> StepExecutor::ReplayGraph(Workspace& ws, const DeviceDataset& data) {
  if (!use_graphs_) return false;
  if (!warmed_up_) {  // the first step: eager, so that lazy setup happens before capture
    warmed_up_ = true;
    return false;
  }
  if (graph_ == nullptr || graph_data_ != &data) {
    graph_.reset();
    absl::Status body_status;
    auto graph = backend_->Capture([&] { return body_status = DeviceStep(ws, data, true); });
    // The body's own error (the collective's) is the step's: running it again would not help.
    RETURN_IF_ERROR(body_status);
    if (!graph.ok()) {
      // No graphs here (UNIMPLEMENTED), or the capture failed. Nothing captured has run, so
      // this step and every later one run eagerly.
      use_graphs_ = false;
      if (!absl::IsUnimplemented(graph.status())) {
        graph_fallback_ = graph.status();
        ABSL_RAW_LOG(WARNING, "%s: graph capture failed, running eagerly: %s",
                     backend_->Name().c_str(), graph_fallback_.ToString().c_str());
      }
      return false;
    }
    graph_ = std::move(graph).value();
    graph_data_ = &data;
  }
  timings_ = {};  // a replay is one launch: no split to measure
  RETURN_IF_ERROR(graph_->Launch());
  return true;
}

}  // namespace lockstep
