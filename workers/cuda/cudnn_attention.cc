// CudnnAttention (cudnn_attention.h) on cudnn-frontend's SDPA nodes. cuDNN's SDPA tensors
// are [b, H, T, D] by dimension; Lockstep's [b, T, H, D] buffers are that with strides
// (T * H * D, D, H * D, 1). Frontend errors (and exceptions) become absl::Status here.
#include "workers/cuda/cudnn_attention.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <exception>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "workers/cuda/cuda_status.h"
#include "workers/cuda/cudnn_graph.h"

namespace lockstep {
namespace {

namespace fe = cudnn_frontend;

constexpr char kWho[] = "cuDNN SDPA";  // its errors begin so

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// A built graph (forward or backward), its tensors and its own workspace (never freed
// while the plan lives: captured CUDA graphs hold its address).
struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  TensorPtr q, k, v, o, stats, d_o, dq, dk, dv;
  void* workspace = nullptr;
  ~Plan() {
    if (workspace != nullptr) cudaFree(workspace);
  }
};

// b, t, h, d, causal, backward.
using PlanKey = std::tuple<int, int, int, int, bool, bool>;

}  // namespace

struct CudnnAttention::Impl {
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
  std::map<PlanKey, std::string> refused;  // shapes cuDNN did not take, and why

  ~Impl() {
    plans.clear();
    if (handle != nullptr) cudnnDestroy(handle);
  }

  absl::StatusOr<std::unique_ptr<Plan>> Build(const AttentionShape& s, bool backward) const;
  absl::StatusOr<Plan*> Get(const AttentionShape& s, bool backward);
  absl::Status Run(const Plan& p, std::unordered_map<int64_t, void*>& pack) const {
    try {
      return cudnn::Check(p.graph->execute(handle, pack, p.workspace), kWho, "execute");
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("cuDNN SDPA execute: ", e.what()));
    }
  }
};

absl::StatusOr<std::unique_ptr<Plan>> CudnnAttention::Impl::Build(const AttentionShape& s,
                                                                  bool backward) const {
  auto p = std::make_unique<Plan>();
  p->graph = std::make_shared<fe::graph::Graph>();
  fe::graph::Graph& graph = *p->graph;
  graph.set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t b = s.b, t = s.t, h = s.h, d = s.d;
  const std::vector<int64_t> dims = {b, h, t, d}, strides = {t * h * d, d, h * d, 1},
                             stats_dims = {b, h, t, 1}, stats_strides = {h * t, t, 1, 1};
  auto tensor = [&](const char* name) {
    return graph.tensor(
        fe::graph::Tensor_attributes().set_name(name).set_dim(dims).set_stride(strides));
  };
  auto output = [&](const TensorPtr& x) {
    x->set_output(true).set_dim(dims).set_stride(strides).set_data_type(fe::DataType_t::BFLOAT16);
  };
  p->q = tensor("q");
  p->k = tensor("k");
  p->v = tensor("v");
  if (!backward) {
    auto [o, stats] = graph.sdpa(p->q, p->k, p->v,
                                 fe::graph::SDPA_attributes()
                                     .set_name("sdpa")
                                     .set_generate_stats(true)
                                     .set_attn_scale(1.0f)
                                     .set_causal_mask(s.causal));
    p->o = o;
    p->stats = stats;
    output(p->o);
    p->stats->set_output(true)
        .set_dim(stats_dims)
        .set_stride(stats_strides)
        .set_data_type(fe::DataType_t::FLOAT);
  } else {
    p->o = tensor("o");
    p->d_o = tensor("do");
    p->stats = graph.tensor(fe::graph::Tensor_attributes()
                                .set_name("stats")
                                .set_dim(stats_dims)
                                .set_stride(stats_strides)
                                .set_data_type(fe::DataType_t::FLOAT));
    auto [dq, dk, dv] = graph.sdpa_backward(p->q, p->k, p->v, p->o, p->d_o, p->stats,
                                            fe::graph::SDPA_backward_attributes()
                                                .set_name("sdpa_backward")
                                                .set_attn_scale(1.0f)
                                                .set_causal_mask(s.causal)
                                                .set_deterministic_algorithm(true));
    p->dq = dq;
    p->dk = dk;
    p->dv = dv;
    output(p->dq);
    output(p->dk);
    output(p->dv);
  }
  RETURN_IF_ERROR(cudnn::BuildPlans(graph, handle, {fe::NumericalNote_t::NONDETERMINISTIC}, kWho,
                                    &p->workspace));
  return p;
}

absl::StatusOr<Plan*> CudnnAttention::Impl::Get(const AttentionShape& s, bool backward) {
  const PlanKey key = {s.b, s.t, s.h, s.d, s.causal, backward};
  if (auto it = plans.find(key); it != plans.end()) return it->second.get();
  if (auto it = refused.find(key); it != refused.end()) {
    return absl::UnimplementedError(it->second);
  }
  // Building allocates: never inside a CUDA graph capture.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    return absl::FailedPreconditionError("cuDNN: an SDPA plan built during a graph capture");
  }
  absl::StatusOr<std::unique_ptr<Plan>> built;
  try {
    built = Build(s, backward);
  } catch (const std::exception& e) {
    built = absl::InternalError(absl::StrCat("cuDNN SDPA: ", e.what()));
  }
  if (!built.ok()) {
    refused[key] = std::string(built.status().message());
    return absl::UnimplementedError(built.status().message());
  }
  Plan* plan = built->get();
  plans[key] = std::move(built).value();
  return plan;
}

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;

absl::StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(cudaStream_t stream) {
  auto impl = std::make_unique<Impl>();
  impl->stream = stream;
  if (const cudnnStatus_t s = cudnnCreate(&impl->handle); s != CUDNN_STATUS_SUCCESS) {
    impl->handle = nullptr;
    return absl::FailedPreconditionError(
        absl::StrCat("cuDNN: cudnnCreate: ", cudnnGetErrorString(s)));
  }
  if (const cudnnStatus_t s = cudnnSetStream(impl->handle, stream); s != CUDNN_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("cuDNN: cudnnSetStream: ", cudnnGetErrorString(s)));
  }
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(std::move(impl)));
}

bool CudnnAttention::Supports(const AttentionShape& s, std::string* why) {
  for (bool backward : {false, true}) {
    absl::StatusOr<Plan*> plan = impl_->Get(s, backward);
    if (!plan.ok()) {
      if (why != nullptr) *why = std::string(plan.status().message());
      return false;
    }
  }
  return true;
}

absl::Status CudnnAttention::Forward(const AttentionShape& s, const Bf16* q, const Bf16* k,
                                     const Bf16* v, Bf16* o, float* stats) {
  ASSIGN_OR_RETURN(Plan * p, impl_->Get(s, false));
  std::unordered_map<int64_t, void*> pack = {{p->q->get_uid(), const_cast<Bf16*>(q)},
                                             {p->k->get_uid(), const_cast<Bf16*>(k)},
                                             {p->v->get_uid(), const_cast<Bf16*>(v)},
                                             {p->o->get_uid(), o},
                                             {p->stats->get_uid(), stats}};
  return impl_->Run(*p, pack);
}

absl::Status CudnnAttention::Backward(const AttentionShape& s, const Bf16* q, const Bf16* k,
                                      const Bf16* v, const Bf16* o, const Bf16* d_o,
                                      const float* stats, Bf16* dq, Bf16* dk, Bf16* dv) {
  ASSIGN_OR_RETURN(Plan * p, impl_->Get(s, true));
  std::unordered_map<int64_t, void*> pack = {{p->q->get_uid(), const_cast<Bf16*>(q)},
                                             {p->k->get_uid(), const_cast<Bf16*>(k)},
                                             {p->v->get_uid(), const_cast<Bf16*>(v)},
                                             {p->o->get_uid(), const_cast<Bf16*>(o)},
                                             {p->d_o->get_uid(), const_cast<Bf16*>(d_o)},
                                             {p->stats->get_uid(), const_cast<float*>(stats)},
                                             {p->dq->get_uid(), dq},
                                             {p->dk->get_uid(), dk},
                                             {p->dv->get_uid(), dv}};
  return impl_->Run(*p, pack);
}

}  // namespace lockstep
