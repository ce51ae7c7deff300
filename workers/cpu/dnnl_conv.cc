// Convolutions through oneDNN's primitives for the CPU backend, on NHWC activations and HWIO
// kernels. Contract: dnnl_conv.h.
#include "workers/cpu/dnnl_conv.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace lockstep::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

constexpr size_t kAlign = 64;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// "b=.. h=.. w=.. c=.. f=.. KHxKW": a geometry as errors name it.
std::string Describe(const ConvGeometry& g) {
  return absl::StrFormat("b=%d h=%d w=%d c=%d f=%d %dx%d", g.b, g.h, g.w, g.c, g.f, g.kh, g.kw);
}

// A primitive's failure as a Status: RESOURCE_EXHAUSTED for out of memory, else INTERNAL.
absl::Status PrimitiveError(const char* primitive, const ConvGeometry& g, dnnl_status_t status,
                            const std::string& what) {
  const std::string message =
      absl::StrCat("dnnl_conv: ", primitive, " (", Describe(g), ") failed: ", what);
  return status == dnnl_out_of_memory ? absl::ResourceExhaustedError(message)
                                      : absl::InternalError(message);
}

bool SameGeometry(const ConvGeometry& a, const ConvGeometry& b) {
  return a.b == b.b && a.h == b.h && a.w == b.w && a.c == b.c && a.f == b.f && a.kh == b.kh &&
         a.kw == b.kw && a.stride_h == b.stride_h && a.stride_w == b.stride_w &&
         a.pad_top == b.pad_top && a.pad_bottom == b.pad_bottom && a.pad_left == b.pad_left &&
         a.pad_right == b.pad_right;
}

}  // namespace

// A kernel in the user's HWIO layout and in the layout a primitive wants, with the
// reorder between them when they differ. (Entry's member: outside the anonymous namespace.)
struct KernelLayout {
  memory::desc want;
  std::optional<dnnl::reorder> reorder;  // HWIO -> want (or want -> HWIO for gradients)
  size_t offset = 0;                     // of the reordered copy in the shared buffer
};

// One geometry's primitives. The shared buffer holds, in order:
// the largest of the three scratchpads, then the forward's and backward-data's kernels
// and the weights' gradient in their blocked layouts, then f floats of bias (zeros for a
// bias-less forward; a discarded gradient when dbias is null).
struct Entry {
  ConvGeometry g;
  bool ok = false;
  memory::desc src, dst, hwio, bias;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  memory::desc scratchpad_fwd, scratchpad_data, scratchpad_weights;
  KernelLayout w_fwd, w_data, dw;
  size_t bias_offset = 0, bytes = 0;
};

struct DnnlConv::Impl {
  explicit Impl(int threads)
      : threads(threads), engine(dnnl::engine::kind::cpu, 0), stream(engine) {}
  ~Impl() { std::free(buffer); }

  int threads;
  dnnl::engine engine;
  dnnl::stream stream;
  std::vector<std::unique_ptr<Entry>> entries;  // stable addresses
  char* buffer = nullptr;
  size_t buffer_bytes = 0;
  FaultForTesting fault;

  void SetThreads() const {
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  }

  Entry& Get(const ConvGeometry& g) {
    for (const std::unique_ptr<Entry>& e : entries) {
      if (SameGeometry(e->g, g)) return *e;
    }
    entries.push_back(std::make_unique<Entry>(Build(g)));
    return *entries.back();
  }

  // Grows the shared buffer to e's bytes.
  absl::Status Reserve(const Entry& e, const char* primitive) {
    if (e.bytes <= buffer_bytes) return absl::OkStatus();
    std::free(buffer);
    buffer_bytes = 0;
    buffer = static_cast<char*>(std::aligned_alloc(kAlign, AlignUp(e.bytes)));
    if (buffer == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("dnnl_conv: ", primitive, " (",
                                                       Describe(e.g), "): out of memory for ",
                                                       e.bytes, " bytes of scratchpad"));
    }
    buffer_bytes = e.bytes;
    return absl::OkStatus();
  }

  // Runs the test hook (if any) for `primitive`: throws its failure as oneDNN would.
  void Inject(const char* primitive) const {
    if (!fault) return;
    const dnnl_status_t status = fault(primitive);
    if (status != dnnl_success) throw dnnl::error(status, "fault injected for testing");
  }

  Entry Build(const ConvGeometry& g) {
    SetThreads();
    Entry e;
    e.g = g;
    using dt = memory::data_type;
    const memory::dims strides{g.stride_h, g.stride_w}, pad_l{g.pad_top, g.pad_left},
        pad_r{g.pad_bottom, g.pad_right};
    e.src = memory::desc({g.b, g.c, g.h, g.w}, dt::f32, Tag::nhwc);
    e.dst = memory::desc({g.b, g.f, g.oh(), g.ow()}, dt::f32, Tag::nhwc);
    e.hwio = memory::desc({g.f, g.c, g.kh, g.kw}, dt::f32, Tag::hwio);
    e.bias = memory::desc({g.f}, dt::f32, Tag::x);
    const memory::desc any_w({g.f, g.c, g.kh, g.kw}, dt::f32, Tag::any);
    try {
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const auto algo = dnnl::algorithm::convolution_direct;
      const memory::desc& data_w = threads == 1 ? e.hwio : any_w;
      // Backward-data on one thread: the kernel as it is (HWIO), which gets oneDNN's
      // im2col + GEMM implementation, faster than its blocked JIT one there (the CNN's
      // conv2); on more threads the JIT one, which scales where the other did not
      // (bench/results/roofline.md).
#if DNNL_VERSION_MAJOR >= 3  // primitive descriptors take the operation's parameters
      dnnl::convolution_forward::primitive_desc fwd(engine, dnnl::prop_kind::forward_training, algo,
                                                    e.src, any_w, e.bias, e.dst, strides, pad_l,
                                                    pad_r, attr);
      dnnl::convolution_backward_data::primitive_desc data(engine, algo, e.src, data_w, e.dst,
                                                           strides, pad_l, pad_r, fwd, attr);
      dnnl::convolution_backward_weights::primitive_desc weights(
          engine, algo, e.src, any_w, e.bias, e.dst, strides, pad_l, pad_r, fwd, attr);
#else  // 2.x (Debian 12): through operation descriptors
      dnnl::convolution_forward::primitive_desc fwd(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, e.src, any_w,
                                          e.bias, e.dst, strides, pad_l, pad_r),
          attr, engine);
      dnnl::convolution_backward_data::primitive_desc data(
          dnnl::convolution_backward_data::desc(algo, e.src, data_w, e.dst, strides, pad_l, pad_r),
          attr, engine, fwd);
      dnnl::convolution_backward_weights::primitive_desc weights(
          dnnl::convolution_backward_weights::desc(algo, e.src, any_w, e.bias, e.dst, strides,
                                                   pad_l, pad_r),
          attr, engine, fwd);
#endif
      e.fwd = dnnl::convolution_forward(fwd);
      e.bwd_data = dnnl::convolution_backward_data(data);
      e.bwd_weights = dnnl::convolution_backward_weights(weights);
      e.scratchpad_fwd = fwd.scratchpad_desc();
      e.scratchpad_data = data.scratchpad_desc();
      e.scratchpad_weights = weights.scratchpad_desc();
      size_t at = AlignUp(std::max({e.scratchpad_fwd.get_size(), e.scratchpad_data.get_size(),
                                    e.scratchpad_weights.get_size()}));
      auto kernel = [&](const memory::desc& want, bool to_user) {
        KernelLayout k;
        k.want = want;
        if (want != e.hwio) {
          k.reorder =
              to_user ? dnnl::reorder(dnnl::reorder::primitive_desc(engine, want, engine, e.hwio))
                      : dnnl::reorder(dnnl::reorder::primitive_desc(engine, e.hwio, engine, want));
          k.offset = at;
          at += AlignUp(want.get_size());
        }
        return k;
      };
      e.w_fwd = kernel(fwd.weights_desc(), false);
      e.w_data = kernel(data.weights_desc(), false);
      e.dw = kernel(weights.diff_weights_desc(), true);
      e.bias_offset = at;
      e.bytes = at + AlignUp(static_cast<size_t>(g.f) * sizeof(float));
      e.ok = true;
    } catch (const dnnl::error& err) {
      ABSL_RAW_LOG(WARNING, "dnnl_conv: no oneDNN convolution for %s: %s", Describe(g).c_str(),
                   err.what());
    }
    return e;
  }

  memory Mem(const memory::desc& md, const void* p) {
    return memory(md, engine, const_cast<void*>(p));
  }

  // The kernel in k's layout: w itself, or its reordered copy in the buffer.
  memory KernelIn(const Entry& e, const KernelLayout& k, const float* w) {
    if (!k.reorder) return Mem(e.hwio, w);
    memory src = Mem(e.hwio, w), dst = Mem(k.want, buffer + k.offset);
    k.reorder->execute(stream, src, dst);
    return dst;
  }

  // The entry for g, with the buffer it needs; `primitive` names it in errors.
  absl::StatusOr<Entry*> Ready(const ConvGeometry& g, const char* primitive) {
    SetThreads();
    Entry& e = Get(g);
    if (!e.ok) {
      return absl::InternalError(
          absl::StrCat("dnnl_conv: ", primitive, " (", Describe(g),
                       "): a geometry oneDNN refused (Supports() is false)"));
    }
    RETURN_IF_ERROR(Reserve(e, primitive));
    return &e;
  }
};

DnnlConv::DnnlConv(int threads) : impl_(std::make_unique<Impl>(std::max(1, threads))) {}
DnnlConv::~DnnlConv() = default;

bool DnnlConv::Supports(const ConvGeometry& g) { return impl_->Get(g).ok; }

void DnnlConv::set_fault_for_testing(FaultForTesting fault) { impl_->fault = std::move(fault); }

absl::Status DnnlConv::Forward(const ConvGeometry& g, const float* x, const float* w,
                               const float* bias, float* y) {
  constexpr const char* kPrimitive = "convolution_forward";
  Impl& m = *impl_;
  ASSIGN_OR_RETURN(Entry * entry, m.Ready(g, kPrimitive));
  Entry& e = *entry;
  try {
    m.Inject(kPrimitive);
    float* zeros = reinterpret_cast<float*>(m.buffer + e.bias_offset);
    if (bias == nullptr) std::fill(zeros, zeros + g.f, 0.0f);
    e.fwd.execute(m.stream, {{DNNL_ARG_SRC, m.Mem(e.src, x)},
                             {DNNL_ARG_WEIGHTS, m.KernelIn(e, e.w_fwd, w)},
                             {DNNL_ARG_BIAS, m.Mem(e.bias, bias != nullptr ? bias : zeros)},
                             {DNNL_ARG_DST, m.Mem(e.dst, y)},
                             {DNNL_ARG_SCRATCHPAD, m.Mem(e.scratchpad_fwd, m.buffer)}});
    m.stream.wait();
  } catch (const dnnl::error& err) {
    return PrimitiveError(kPrimitive, g, err.status, err.what());
  }
  return absl::OkStatus();
}

absl::Status DnnlConv::BackwardWeights(const ConvGeometry& g, const float* x, const float* dy,
                                       float* dw, float* dbias) {
  constexpr const char* kPrimitive = "convolution_backward_weights";
  Impl& m = *impl_;
  ASSIGN_OR_RETURN(Entry * entry, m.Ready(g, kPrimitive));
  Entry& e = *entry;
  try {
    m.Inject(kPrimitive);
    memory user_dw = m.Mem(e.hwio, dw);
    memory blocked = e.dw.reorder ? m.Mem(e.dw.want, m.buffer + e.dw.offset) : user_dw;
    float* db = dbias != nullptr ? dbias : reinterpret_cast<float*>(m.buffer + e.bias_offset);
    e.bwd_weights.execute(m.stream, {{DNNL_ARG_SRC, m.Mem(e.src, x)},
                                     {DNNL_ARG_DIFF_DST, m.Mem(e.dst, dy)},
                                     {DNNL_ARG_DIFF_WEIGHTS, blocked},
                                     {DNNL_ARG_DIFF_BIAS, m.Mem(e.bias, db)},
                                     {DNNL_ARG_SCRATCHPAD, m.Mem(e.scratchpad_weights, m.buffer)}});
    if (e.dw.reorder) e.dw.reorder->execute(m.stream, blocked, user_dw);
    m.stream.wait();
  } catch (const dnnl::error& err) {
    return PrimitiveError(kPrimitive, g, err.status, err.what());
  }
  return absl::OkStatus();
}

absl::Status DnnlConv::BackwardData(const ConvGeometry& g, const float* w, const float* dy,
                                    float* dx) {
  constexpr const char* kPrimitive = "convolution_backward_data";
  Impl& m = *impl_;
  ASSIGN_OR_RETURN(Entry * entry, m.Ready(g, kPrimitive));
  Entry& e = *entry;
  try {
    m.Inject(kPrimitive);
    e.bwd_data.execute(m.stream, {{DNNL_ARG_DIFF_DST, m.Mem(e.dst, dy)},
                                  {DNNL_ARG_WEIGHTS, m.KernelIn(e, e.w_data, w)},
                                  {DNNL_ARG_DIFF_SRC, m.Mem(e.src, dx)},
                                  {DNNL_ARG_SCRATCHPAD, m.Mem(e.scratchpad_data, m.buffer)}});
    m.stream.wait();
  } catch (const dnnl::error& err) {
    return PrimitiveError(kPrimitive, g, err.status, err.what());
  }
  return absl::OkStatus();
}

}  // namespace lockstep::cpu
