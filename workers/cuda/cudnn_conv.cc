// CudnnConvs (cudnn_conv.h) on cudnn-frontend's graph API. The only file that includes
// cuDNN's headers; frontend errors (error_t, and exceptions, which it may throw) become
// absl::Status here.
#include "workers/cuda/cudnn_conv.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <exception>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "workers/cuda/conv_layout.cuh"
#include "workers/cuda/cuda_status.h"

namespace lockstep {
namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// What a plan computes.
enum class Op { kForward, kForwardBias, kForwardRelu, kForwardBiasRelu, kData, kFilter };

// A built graph, its tensors by role (a, b: the inputs; out: the output; bias) and its
// own workspace (never freed while the plan lives: captured CUDA graphs hold its address).
struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  TensorPtr a, b, bias, out;
  void* workspace = nullptr;
  ~Plan() {
    if (workspace != nullptr) cudaFree(workspace);
  }
};

using PlanKey = std::tuple<int, int, int, int, int, int, int, int, int, int, int, int, int, int>;
PlanKey KeyOf(const ConvGeometry& g, Op op) {
  return {g.b,          g.h,
          g.w,          g.c,
          g.f,          g.kh,
          g.kw,         g.stride_h,
          g.stride_w,   g.pad_top,
          g.pad_bottom, g.pad_left,
          g.pad_right,  static_cast<int>(op)};
}

// Dims in cuDNN's (n, c, h, w) order of a packed NHWC tensor, and their strides.
std::vector<int64_t> NhwcStrides(const std::vector<int64_t>& d) {
  return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
}

absl::Status Fe(fe::error_t e, const char* what) {
  if (e.is_good()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cuDNN ", what, ": ", e.get_message()));
}

// The numerical notes no plan may carry: nondeterministic engines (atomics), reduced
// precision, and the transforms whose rounding differs from a direct sum's (FFT,
// Winograd); TF32 tensor cores unless asked for.
std::vector<fe::NumericalNote_t> BarredNotes(bool tf32) {
  std::vector<fe::NumericalNote_t> notes = {fe::NumericalNote_t::NONDETERMINISTIC,
                                            fe::NumericalNote_t::DOWN_CONVERT_INPUTS,
                                            fe::NumericalNote_t::REDUCED_PRECISION_REDUCTION,
                                            fe::NumericalNote_t::FFT,
                                            fe::NumericalNote_t::WINOGRAD,
                                            fe::NumericalNote_t::WINOGRAD_TILE_4x4,
                                            fe::NumericalNote_t::WINOGRAD_TILE_6x6,
                                            fe::NumericalNote_t::WINOGRAD_TILE_13x13};
  if (!tf32) notes.push_back(fe::NumericalNote_t::TENSOR_CORE);
  return notes;
}

}  // namespace

struct CudnnConvs::Impl {
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  bool tf32 = false;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
  std::map<PlanKey, std::string> refused;  // geometries cuDNN did not take, and why

  ~Impl() {
    plans.clear();
    if (handle != nullptr) cudnnDestroy(handle);
  }

  absl::StatusOr<std::unique_ptr<Plan>> Build(const ConvGeometry& g, Op op) const;
  // The cached plan for (g, op), built if needed; an error when cuDNN does not take it.
  absl::StatusOr<Plan*> Get(const ConvGeometry& g, Op op);
  absl::Status Run(const Plan& p, std::unordered_map<int64_t, void*>& pack) const;
};

absl::StatusOr<std::unique_ptr<Plan>> CudnnConvs::Impl::Build(const ConvGeometry& g, Op op) const {
  auto p = std::make_unique<Plan>();
  p->graph = std::make_shared<fe::graph::Graph>();
  fe::graph::Graph& graph = *p->graph;
  graph.set_io_data_type(fe::DataType_t::FLOAT)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::vector<int64_t> xd = {g.b, g.c, g.h, g.w}, wd = {g.f, g.c, g.kh, g.kw},
                             yd = {g.b, g.f, g.oh(), g.ow()};
  auto tensor = [&](const char* name, const std::vector<int64_t>& d) {
    return graph.tensor(fe::graph::Tensor_attributes()
                            .set_name(name)
                            .set_dim(d)
                            .set_stride(NhwcStrides(d))
                            .set_data_type(fe::DataType_t::FLOAT));
  };
  const std::vector<int64_t> pre = {g.pad_top, g.pad_left}, post = {g.pad_bottom, g.pad_right},
                             stride = {g.stride_h, g.stride_w}, dilation = {1, 1};
  std::vector<int64_t> out_dims;
  switch (op) {
    case Op::kForward:
    case Op::kForwardBias:
    case Op::kForwardRelu:
    case Op::kForwardBiasRelu: {
      p->a = tensor("x", xd);
      p->b = tensor("w", wd);
      p->out = graph.conv_fprop(p->a, p->b,
                                fe::graph::Conv_fprop_attributes()
                                    .set_pre_padding(pre)
                                    .set_post_padding(post)
                                    .set_stride(stride)
                                    .set_dilation(dilation)
                                    .set_compute_data_type(fe::DataType_t::FLOAT));
      if (op == Op::kForwardBias || op == Op::kForwardBiasRelu) {
        p->bias = tensor("bias", {1, g.f, 1, 1});
        p->out = graph.pointwise(p->out, p->bias,
                                 fe::graph::Pointwise_attributes()
                                     .set_mode(fe::PointwiseMode_t::ADD)
                                     .set_compute_data_type(fe::DataType_t::FLOAT));
      }
      if (op == Op::kForwardRelu || op == Op::kForwardBiasRelu) {
        p->out = graph.pointwise(p->out, fe::graph::Pointwise_attributes()
                                             .set_mode(fe::PointwiseMode_t::RELU_FWD)
                                             .set_compute_data_type(fe::DataType_t::FLOAT));
      }
      out_dims = yd;
      break;
    }
    case Op::kData:
      p->a = tensor("dy", yd);
      p->b = tensor("w", wd);
      p->out = graph.conv_dgrad(p->a, p->b,
                                fe::graph::Conv_dgrad_attributes()
                                    .set_pre_padding(pre)
                                    .set_post_padding(post)
                                    .set_stride(stride)
                                    .set_dilation(dilation)
                                    .set_compute_data_type(fe::DataType_t::FLOAT));
      out_dims = xd;
      break;
    case Op::kFilter:
      p->a = tensor("dy", yd);
      p->b = tensor("x", xd);
      p->out = graph.conv_wgrad(p->a, p->b,
                                fe::graph::Conv_wgrad_attributes()
                                    .set_pre_padding(pre)
                                    .set_post_padding(post)
                                    .set_stride(stride)
                                    .set_dilation(dilation)
                                    .set_compute_data_type(fe::DataType_t::FLOAT));
      out_dims = wd;
      break;
  }
  p->out->set_output(true)
      .set_dim(out_dims)
      .set_stride(NhwcStrides(out_dims))
      .set_data_type(fe::DataType_t::FLOAT);
  RETURN_IF_ERROR(Fe(graph.validate(), "validate"));
  RETURN_IF_ERROR(Fe(graph.build_operation_graph(handle), "build_operation_graph"));
  RETURN_IF_ERROR(Fe(graph.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans"));
  graph.deselect_numeric_notes(BarredNotes(tf32));
  RETURN_IF_ERROR(Fe(graph.check_support(), "check_support"));
  RETURN_IF_ERROR(Fe(graph.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans"));
  int64_t bytes = 0;
  RETURN_IF_ERROR(Fe(graph.get_workspace_size(bytes), "get_workspace_size"));
  if (bytes > 0) CUDA_RETURN_IF_ERROR(cudaMalloc(&p->workspace, bytes));
  return p;
}

absl::StatusOr<Plan*> CudnnConvs::Impl::Get(const ConvGeometry& g, Op op) {
  const PlanKey key = KeyOf(g, op);
  if (auto it = plans.find(key); it != plans.end()) return it->second.get();
  if (auto it = refused.find(key); it != refused.end()) {
    return absl::UnimplementedError(it->second);
  }
  // Building allocates: never inside a CUDA graph capture (which would fail it; the step
  // then runs eagerly and builds the plan there).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    return absl::FailedPreconditionError("cuDNN: a convolution plan built during a graph capture");
  }
  absl::StatusOr<std::unique_ptr<Plan>> built;
  try {
    built = Build(g, op);
  } catch (const std::exception& e) {
    built = absl::InternalError(absl::StrCat("cuDNN: ", e.what()));
  }
  if (!built.ok()) {
    refused[key] = std::string(built.status().message());
    return absl::UnimplementedError(built.status().message());
  }
  Plan* plan = built->get();
  plans[key] = std::move(built).value();
  return plan;
}

absl::Status CudnnConvs::Impl::Run(const Plan& p, std::unordered_map<int64_t, void*>& pack) const {
  try {
    return Fe(p.graph->execute(handle, pack, p.workspace), "execute");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("cuDNN execute: ", e.what()));
  }
}

CudnnConvs::CudnnConvs(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnConvs::~CudnnConvs() = default;

absl::StatusOr<std::unique_ptr<CudnnConvs>> CudnnConvs::Create(cudaStream_t stream, bool tf32) {
  auto impl = std::make_unique<Impl>();
  impl->stream = stream;
  impl->tf32 = tf32;
  const cudnnStatus_t status = cudnnCreate(&impl->handle);
  if (status != CUDNN_STATUS_SUCCESS) {
    impl->handle = nullptr;
    return absl::FailedPreconditionError(
        absl::StrCat("cuDNN: cudnnCreate: ", cudnnGetErrorString(status)));
  }
  if (const cudnnStatus_t s = cudnnSetStream(impl->handle, stream); s != CUDNN_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("cuDNN: cudnnSetStream: ", cudnnGetErrorString(s)));
  }
  return std::unique_ptr<CudnnConvs>(new CudnnConvs(std::move(impl)));
}

void CudnnConvs::set_tf32(bool tf32) { impl_->tf32 = tf32; }

std::string CudnnConvs::version() const {
  const size_t v = cudnnGetVersion();  // major * 10000 + minor * 100 + patch
  return absl::StrCat(v / 10000, ".", v / 100 % 100, ".", v % 100);
}

size_t CudnnConvs::ScratchBytes(const ConvGeometry& g) {
  return size_t(g.kh) * g.kw * g.c * g.f * sizeof(float);
}

bool CudnnConvs::Supports(const ConvGeometry& g, std::string* why) {
  for (Op op : {Op::kForward, Op::kData, Op::kFilter}) {
    absl::StatusOr<Plan*> plan = impl_->Get(g, op);
    if (!plan.ok()) {
      if (why != nullptr) *why = std::string(plan.status().message());
      return false;
    }
  }
  return true;
}

absl::Status CudnnConvs::Forward(const ConvGeometry& g, const float* x, const float* w,
                                 const float* bias, bool relu, float* y, void* scratch,
                                 Backend& backend) {
  float* krsc = static_cast<float*>(scratch);
  CUDA_RETURN_IF_ERROR(cuda::HwioToKrsc(g.kh, g.kw, g.c, g.f, w, krsc, impl_->stream));
  // The fused graph where an engine takes it; else the convolution, then the backend's
  // bias and ReLU kernels.
  const Op fused = bias != nullptr ? (relu ? Op::kForwardBiasRelu : Op::kForwardBias)
                                   : (relu ? Op::kForwardRelu : Op::kForward);
  absl::StatusOr<Plan*> plan = impl_->Get(g, fused);
  const bool unfused = !plan.ok();
  if (unfused) plan = impl_->Get(g, Op::kForward);
  if (!plan.ok()) return plan.status();
  const Plan& p = **plan;
  std::unordered_map<int64_t, void*> pack = {
      {p.a->get_uid(), const_cast<float*>(x)}, {p.b->get_uid(), krsc}, {p.out->get_uid(), y}};
  if (p.bias != nullptr) pack[p.bias->get_uid()] = const_cast<float*>(bias);
  RETURN_IF_ERROR(impl_->Run(p, pack));
  if (!unfused) return absl::OkStatus();
  const int rows = g.b * g.oh() * g.ow();
  if (bias != nullptr) RETURN_IF_ERROR(backend.BiasAdd(rows, g.f, bias, y));
  if (relu) RETURN_IF_ERROR(backend.Relu(size_t(rows) * g.f, y));
  return absl::OkStatus();
}

absl::Status CudnnConvs::BackwardData(const ConvGeometry& g, const float* w, const float* dy,
                                      float* dx, void* scratch) {
  float* krsc = static_cast<float*>(scratch);
  CUDA_RETURN_IF_ERROR(cuda::HwioToKrsc(g.kh, g.kw, g.c, g.f, w, krsc, impl_->stream));
  ASSIGN_OR_RETURN(Plan * p, impl_->Get(g, Op::kData));
  std::unordered_map<int64_t, void*> pack = {
      {p->a->get_uid(), const_cast<float*>(dy)}, {p->b->get_uid(), krsc}, {p->out->get_uid(), dx}};
  return impl_->Run(*p, pack);
}

absl::Status CudnnConvs::BackwardFilter(const ConvGeometry& g, const float* x, const float* dy,
                                        float* dw, void* scratch) {
  float* krsc = static_cast<float*>(scratch);
  ASSIGN_OR_RETURN(Plan * p, impl_->Get(g, Op::kFilter));
  std::unordered_map<int64_t, void*> pack = {{p->a->get_uid(), const_cast<float*>(dy)},
                                             {p->b->get_uid(), const_cast<float*>(x)},
                                             {p->out->get_uid(), krsc}};
  RETURN_IF_ERROR(impl_->Run(*p, pack));
  CUDA_RETURN_IF_ERROR(cuda::KrscToHwio(g.kh, g.kw, g.c, g.f, krsc, dw, impl_->stream));
  return absl::OkStatus();
}

}  // namespace lockstep
