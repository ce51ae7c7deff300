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
#include "workers/cuda/cudnn_graph.h"

namespace lockstep {
namespace {

namespace fe = cudnn_frontend;

constexpr char kWho[] = "cuDNN";  // its errors begin so

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

// The geometry, the op, and whether its operands are bfloat16.
using PlanKey =
    std::tuple<int, int, int, int, int, int, int, int, int, int, int, int, int, int, bool>;
PlanKey KeyOf(const ConvGeometry& g, Op op, bool bf16) {
  return {g.b,          g.h,
          g.w,          g.c,
          g.f,          g.kh,
          g.kw,         g.stride_h,
          g.stride_w,   g.pad_top,
          g.pad_bottom, g.pad_left,
          g.pad_right,  static_cast<int>(op),
          bf16};
}

// Dims in cuDNN's (n, c, h, w) order of a packed NHWC tensor, and their strides.
std::vector<int64_t> NhwcStrides(const std::vector<int64_t>& d) {
  return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
}

// The numerical notes no plan may carry: nondeterministic engines (atomics), reduced
// precision, and the transforms whose rounding differs from a direct sum's (FFT,
// Winograd); for float32 operands, TF32 tensor cores unless asked for (bfloat16 operands
// run on tensor cores, whose products of bfloat16 values are exact in float32).
std::vector<fe::NumericalNote_t> BarredNotes(bool tf32, bool bf16) {
  std::vector<fe::NumericalNote_t> notes = {fe::NumericalNote_t::NONDETERMINISTIC,
                                            fe::NumericalNote_t::DOWN_CONVERT_INPUTS,
                                            fe::NumericalNote_t::REDUCED_PRECISION_REDUCTION,
                                            fe::NumericalNote_t::FFT,
                                            fe::NumericalNote_t::WINOGRAD,
                                            fe::NumericalNote_t::WINOGRAD_TILE_4x4,
                                            fe::NumericalNote_t::WINOGRAD_TILE_6x6,
                                            fe::NumericalNote_t::WINOGRAD_TILE_13x13};
  if (!tf32 && !bf16) notes.push_back(fe::NumericalNote_t::TENSOR_CORE);
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

  // The plan of (g, op): float32 operands, or (bf16) bfloat16 operands (the bias ops are
  // float32 only); the output is float32 either way: the convolution's own output, or
  // (identity) an identity pointwise op's after it, a graph more engines take for mixed
  // types.
  absl::StatusOr<std::unique_ptr<Plan>> Build(const ConvGeometry& g, Op op, bool bf16,
                                              bool identity) const;
  // The cached plan for (g, op, bf16), built if needed (bfloat16: the direct graph, else the
  // one with an identity op); an error when cuDNN does not take it.
  absl::StatusOr<Plan*> Get(const ConvGeometry& g, Op op, bool bf16 = false);
  absl::Status Run(const Plan& p, std::unordered_map<int64_t, void*>& pack) const;
};

absl::StatusOr<std::unique_ptr<Plan>> CudnnConvs::Impl::Build(const ConvGeometry& g, Op op,
                                                              bool bf16, bool identity) const {
  auto p = std::make_unique<Plan>();
  p->graph = std::make_shared<fe::graph::Graph>();
  fe::graph::Graph& graph = *p->graph;
  const fe::DataType_t operands = bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::FLOAT;
  graph.set_io_data_type(operands)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::vector<int64_t> xd = {g.b, g.c, g.h, g.w}, wd = {g.f, g.c, g.kh, g.kw},
                             yd = {g.b, g.f, g.oh(), g.ow()};
  auto tensor = [&](const char* name, const std::vector<int64_t>& d,
                    fe::DataType_t type = fe::DataType_t::FLOAT) {
    return graph.tensor(fe::graph::Tensor_attributes()
                            .set_name(name)
                            .set_dim(d)
                            .set_stride(NhwcStrides(d))
                            .set_data_type(type));
  };
  const std::vector<int64_t> pre = {g.pad_top, g.pad_left}, post = {g.pad_bottom, g.pad_right},
                             stride = {g.stride_h, g.stride_w}, dilation = {1, 1};
  std::vector<int64_t> out_dims;
  switch (op) {
    case Op::kForward:
    case Op::kForwardBias:
    case Op::kForwardRelu:
    case Op::kForwardBiasRelu: {
      p->a = tensor("x", xd, operands);
      p->b = tensor("w", wd, operands);
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
      p->a = tensor("dy", yd, operands);
      p->b = tensor("w", wd, operands);
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
      p->a = tensor("dy", yd, operands);
      p->b = tensor("x", xd, operands);
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
  if (identity) {
    p->out = graph.pointwise(p->out, fe::graph::Pointwise_attributes()
                                         .set_mode(fe::PointwiseMode_t::IDENTITY)
                                         .set_compute_data_type(fe::DataType_t::FLOAT));
  }
  p->out->set_output(true)
      .set_dim(out_dims)
      .set_stride(NhwcStrides(out_dims))
      .set_data_type(fe::DataType_t::FLOAT);
  RETURN_IF_ERROR(cudnn::BuildPlans(graph, handle, BarredNotes(tf32, bf16), kWho, &p->workspace));
  return p;
}

absl::StatusOr<Plan*> CudnnConvs::Impl::Get(const ConvGeometry& g, Op op, bool bf16) {
  const PlanKey key = KeyOf(g, op, bf16);
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
  for (bool identity : {false, true}) {
    if (identity && !bf16) break;
    try {
      built = Build(g, op, bf16, identity);
    } catch (const std::exception& e) {
      built = absl::InternalError(absl::StrCat("cuDNN: ", e.what()));
    }
    if (built.ok()) break;
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
    return cudnn::Check(p.graph->execute(handle, pack, p.workspace), kWho, "execute");
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

bool CudnnConvs::Supports(const ConvGeometry& g, bool bf16, std::string* why) {
  for (Op op : {Op::kForward, Op::kData, Op::kFilter}) {
    absl::StatusOr<Plan*> plan = impl_->Get(g, op, bf16);
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

// The bfloat16 convolutions: the kernel transposed to KRSC as a Bf16 array (the scratch's
// first half), float32 outputs; the kernel gradient through the scratch as float32 KRSC.
absl::Status CudnnConvs::ForwardBf16(const ConvGeometry& g, const Bf16* x, const Bf16* w, float* y,
                                     void* scratch) {
  Bf16* krsc = static_cast<Bf16*>(scratch);
  CUDA_RETURN_IF_ERROR(cuda::HwioToKrsc(g.kh, g.kw, g.c, g.f, w, krsc, impl_->stream));
  ASSIGN_OR_RETURN(Plan * p, impl_->Get(g, Op::kForward, true));
  std::unordered_map<int64_t, void*> pack = {
      {p->a->get_uid(), const_cast<Bf16*>(x)}, {p->b->get_uid(), krsc}, {p->out->get_uid(), y}};
  return impl_->Run(*p, pack);
}

absl::Status CudnnConvs::BackwardDataBf16(const ConvGeometry& g, const Bf16* w, const Bf16* dy,
                                          float* dx, void* scratch) {
  Bf16* krsc = static_cast<Bf16*>(scratch);
  CUDA_RETURN_IF_ERROR(cuda::HwioToKrsc(g.kh, g.kw, g.c, g.f, w, krsc, impl_->stream));
  ASSIGN_OR_RETURN(Plan * p, impl_->Get(g, Op::kData, true));
  std::unordered_map<int64_t, void*> pack = {
      {p->a->get_uid(), const_cast<Bf16*>(dy)}, {p->b->get_uid(), krsc}, {p->out->get_uid(), dx}};
  return impl_->Run(*p, pack);
}

absl::Status CudnnConvs::BackwardFilterBf16(const ConvGeometry& g, const Bf16* x, const Bf16* dy,
                                            float* dw, void* scratch) {
  float* krsc = static_cast<float*>(scratch);
  ASSIGN_OR_RETURN(Plan * p, impl_->Get(g, Op::kFilter, true));
  std::unordered_map<int64_t, void*> pack = {{p->a->get_uid(), const_cast<Bf16*>(dy)},
                                             {p->b->get_uid(), const_cast<Bf16*>(x)},
                                             {p->out->get_uid(), krsc}};
  RETURN_IF_ERROR(impl_->Run(*p, pack));
  CUDA_RETURN_IF_ERROR(cuda::KrscToHwio(g.kh, g.kw, g.c, g.f, krsc, dw, impl_->stream));
  return absl::OkStatus();
}

}  // namespace lockstep
