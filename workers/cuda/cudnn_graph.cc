// BuildPlans (cudnn_graph.h).
#include "workers/cuda/cudnn_graph.h"

#include <cuda_runtime.h>

#include "core/status_macros.h"
#include "workers/cuda/cuda_status.h"

namespace lockstep::cudnn {

absl::Status BuildPlans(fe::graph::Graph& graph, cudnnHandle_t handle,
                        const std::vector<fe::NumericalNote_t>& barred, absl::string_view who,
                        void** workspace) {
  RETURN_IF_ERROR(Check(graph.validate(), who, "validate"));
  RETURN_IF_ERROR(Check(graph.build_operation_graph(handle), who, "build_operation_graph"));
  RETURN_IF_ERROR(
      Check(graph.create_execution_plans({fe::HeurMode_t::A}), who, "create_execution_plans"));
  graph.deselect_numeric_notes(barred);
  RETURN_IF_ERROR(Check(graph.check_support(), who, "check_support"));
  RETURN_IF_ERROR(
      Check(graph.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), who, "build_plans"));
  int64_t bytes = 0;
  RETURN_IF_ERROR(Check(graph.get_workspace_size(bytes), who, "get_workspace_size"));
  if (bytes > 0) CUDA_RETURN_IF_ERROR(cudaMalloc(workspace, bytes));
  return absl::OkStatus();
}

}  // namespace lockstep::cudnn
