// LtDense (cublaslt_dense.h) on cuBLASLt. Row-major y = x . w is column-major
// y^T = w^T . x^T: cuBLASLt's A is w as an (out, in) column-major matrix, B is x as
// (in, rows), D is y as (out, rows), and the bias epilogue adds bias[i] to row i of D (an
// output feature), as BiasAdd does, before the ReLU.
#include "workers/cuda/cublaslt_dense.h"

#include <cublasLt.h>

#include <map>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "workers/cuda/cuda_status.h"

namespace lockstep {

struct LtDense::Impl {
  // The chosen operation for one shape: its descriptors and algorithm.
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;  // what the algorithm uses of the shared workspace
    ~Plan() {
      if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
      if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
      if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
      if (op != nullptr) cublasLtMatmulDescDestroy(op);
    }
  };
  // rows, out, in, with a bias, with a ReLU, TF32.
  using Key = std::tuple<int, int, int, bool, bool, bool>;

  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<Key, std::unique_ptr<Plan>> plans;
  std::map<Key, std::string> refused;  // shapes with no algorithm, and why

  ~Impl() {
    plans.clear();
    if (handle != nullptr) cublasLtDestroy(handle);
  }

  absl::StatusOr<std::unique_ptr<Plan>> Build(const Key& key) const;
  absl::StatusOr<const Plan*> Get(const Key& key);
};

absl::StatusOr<std::unique_ptr<LtDense::Impl::Plan>> LtDense::Impl::Build(const Key& key) const {
  const auto [rows, out, in, bias, relu, tf32] = key;
  auto p = std::make_unique<Plan>();
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(
      &p->op, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasLtEpilogue_t epilogue =
      bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
           : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                        &epilogue, sizeof(epilogue)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, out, in, out));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, in, rows, in));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_32F, out, rows, out));
  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&preference));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status =
      cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace_bytes, sizeof(workspace_bytes));
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulAlgoGetHeuristic(handle, p->op, p->a, p->b, p->d, p->d, preference, 1,
                                            &result, &found);
  }
  cublasLtMatmulPreferenceDestroy(preference);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
    return absl::UnimplementedError(
        absl::StrCat("cuBLASLt: no algorithm for a dense layer of ", rows, " x ", in, " -> ", out));
  }
  CUBLAS_RETURN_IF_ERROR(status);
  p->algo = result.algo;
  p->workspace = result.workspaceSize;
  return p;
}

absl::StatusOr<const LtDense::Impl::Plan*> LtDense::Impl::Get(const Key& key) {
  if (auto it = plans.find(key); it != plans.end()) return it->second.get();
  if (auto it = refused.find(key); it != refused.end()) {
    return absl::UnimplementedError(it->second);
  }
  absl::StatusOr<std::unique_ptr<Plan>> built = Build(key);
  if (absl::IsUnimplemented(built.status())) {
    refused[key] = std::string(built.status().message());
  }
  if (!built.ok()) return built.status();
  const Plan* plan = built->get();
  plans[key] = std::move(built).value();
  return plan;
}

LtDense::LtDense(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LtDense::~LtDense() = default;

absl::StatusOr<std::unique_ptr<LtDense>> LtDense::Create(void* workspace, size_t workspace_bytes) {
  auto impl = std::make_unique<Impl>();
  impl->workspace = workspace;
  impl->workspace_bytes = workspace_bytes;
  if (const cublasStatus_t s = cublasLtCreate(&impl->handle); s != CUBLAS_STATUS_SUCCESS) {
    impl->handle = nullptr;
    return absl::FailedPreconditionError(
        absl::StrCat("cuBLASLt: cublasLtCreate: ", cublasGetStatusString(s)));
  }
  return std::unique_ptr<LtDense>(new LtDense(std::move(impl)));
}

absl::Status LtDense::Forward(int rows, int out, int in, const float* x, const float* w,
                              const float* bias, bool relu, float* y, bool tf32,
                              cudaStream_t stream) {
  if (rows == 0 || out == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const Impl::Plan* p, impl_->Get({rows, out, in, bias != nullptr, relu, tf32}));
  if (bias != nullptr) {
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                          &bias, sizeof(bias)));
  }
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(impl_->handle, p->op, &one, w, p->a, x, p->b, &zero, y,
                                        p->d, y, p->d, &p->algo, impl_->workspace, p->workspace,
                                        stream));
  return absl::OkStatus();
}

}  // namespace lockstep
