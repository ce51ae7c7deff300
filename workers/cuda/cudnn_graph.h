// What the cuDNN users of the CUDA backend (cudnn_conv.cc, cudnn_attention.cc) share:
// frontend errors as absl::Status, and a described graph built into plans with a
// workspace of its own. Internal to workers/cuda; includes cudnn-frontend.
#ifndef LOCKSTEP_WORKERS_CUDA_CUDNN_GRAPH_H_
#define LOCKSTEP_WORKERS_CUDA_CUDNN_GRAPH_H_

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace lockstep::cudnn {

namespace fe = cudnn_frontend;

// INTERNAL "<who> <what>: <the frontend's message>" unless `e` is good.
inline absl::Status Check(fe::error_t e, absl::string_view who, const char* what) {
  if (e.is_good()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(who, " ", what, ": ", e.get_message()));
}

// Validates `graph`, builds its plans by heuristics A without the engines that carry a
// note in `barred`, and allocates the workspace they need into *workspace (left null
// when they need none; the caller frees it). Frontend errors are Check's, named `who`.
absl::Status BuildPlans(fe::graph::Graph& graph, cudnnHandle_t handle,
                        const std::vector<fe::NumericalNote_t>& barred, absl::string_view who,
                        void** workspace);

}  // namespace lockstep::cudnn

#endif  // LOCKSTEP_WORKERS_CUDA_CUDNN_GRAPH_H_
