// bfloat16 GEMMs through oneDNN's matmul primitive for the CPU backend.
// Contract: dnnl_matmul.h.
#include "workers/cpu/dnnl_matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lockstep::cpu {

// One product shape: what a primitive is created for.
struct MatmulShape {
  bool ta, tb;
  int m, n, k, lda, ldb, ldc, count;
  int64_t stride_a, stride_b, stride_c;
  float alpha, beta;
  int heads;
  int64_t head_a, head_b, head_c;
  bool operator==(const MatmulShape&) const = default;
};

namespace {

using dnnl::memory;
using dt = memory::data_type;

std::string Describe(const MatmulShape& s) {
  return absl::StrFormat("%s%s m=%d n=%d k=%d lda=%d ldb=%d ldc=%d count=%d heads=%d",
                         s.ta ? "T" : "N", s.tb ? "T" : "N", s.m, s.n, s.k, s.lda, s.ldb, s.ldc,
                         s.count, s.heads);
}

// op(x) of rows x cols stored row-major with leading dimension ld (transposed: x is
// cols x rows), batch stride `stride` when count > 1, head stride `head` when heads > 1.
memory::desc Operand(dt type, int count, int heads, int rows, int cols, bool trans, int ld,
                     int64_t stride, int64_t head) {
  const memory::dim r = trans ? 1 : ld, c = trans ? ld : 1;
  if (heads > 1) return memory::desc({count, heads, rows, cols}, type, {stride, head, r, c});
  if (count == 1) return memory::desc({rows, cols}, type, {r, c});
  return memory::desc({count, rows, cols}, type, {stride, r, c});
}

absl::Status Failed(const MatmulShape& s, dnnl_status_t status, const std::string& what) {
  const std::string message = absl::StrCat("dnnl_matmul: bf16 matmul (", Describe(s), "): ", what);
  return status == dnnl_out_of_memory ? absl::ResourceExhaustedError(message)
                                      : absl::InternalError(message);
}

}  // namespace

absl::Status Bf16Isa() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const auto has = [&](dnnl_cpu_isa_t want) { return (isa & want) == want; };
  if (has(dnnl_cpu_isa_avx512_core_bf16)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "model.dtype: bfloat16 needs a CPU with avx512_bf16 or AMX (amx_bf16) for oneDNN's bfloat16 "
      "matmuls and convolutions; this CPU has neither (oneDNN's ISA here: ",
      has(dnnl_cpu_isa_avx512_core) ? "avx512_core"
      : has(dnnl_cpu_isa_avx2)      ? "avx2"
                                    : "older than avx2",
      "). Use model.dtype: float32 on this worker"));
}

struct DnnlMatmul::Impl {
  struct Entry {
    MatmulShape shape;
    std::optional<dnnl::matmul> primitive;  // none: oneDNN refused the shape
    memory::desc a, b, c, scratchpad;
    std::string impl;
    std::string error;
  };

  explicit Impl(int threads)
      : threads(threads), engine(dnnl::engine::kind::cpu, 0), stream(engine) {}

  void SetThreads() const {
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  }

  Entry& Get(const MatmulShape& s) {
    for (Entry& e : entries) {
      if (e.shape == s) return e;
    }
    entries.push_back(Build(s));
    return entries.back();
  }

  Entry Build(const MatmulShape& s) {
    SetThreads();
    Entry e{s};
    e.a = Operand(dt::bf16, s.count, s.heads, s.m, s.k, s.ta, s.lda, s.stride_a, s.head_a);
    e.b = Operand(dt::bf16, s.count, s.heads, s.k, s.n, s.tb, s.ldb, s.stride_b, s.head_b);
    e.c = Operand(dt::f32, s.count, s.heads, s.m, s.n, false, s.ldc, s.stride_c, s.head_c);
    try {
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      if (s.alpha != 1.0f) {
#if DNNL_VERSION_MAJOR >= 3
        throw dnnl::error(dnnl_unimplemented, "alpha != 1 (oneDNN 3 takes scales as arguments)");
#else
        attr.set_output_scales(0, {s.alpha});
#endif
      }
      if (s.beta != 0.0f) {
        dnnl::post_ops ops;
        ops.append_sum(s.beta);
        attr.set_post_ops(ops);
      }
#if DNNL_VERSION_MAJOR >= 3
      dnnl::matmul::primitive_desc pd(engine, e.a, e.b, e.c, attr);
#else
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a, e.b, e.c), attr, engine);
#endif
      e.impl = pd.impl_info_str();
      e.scratchpad = pd.scratchpad_desc();
      e.primitive = dnnl::matmul(pd);
    } catch (const dnnl::error& err) {
      e.error = err.what();
    }
    return e;
  }

  // The scratchpad every primitive shares, grown to the largest one's (allocated by
  // oneDNN per call otherwise: fresh pages every step).
  void* Scratchpad(size_t bytes) {
    if (bytes > scratchpad_bytes) {
      constexpr size_t kAlign = 64;
      scratchpad.reset(
          static_cast<char*>(std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign)));
      scratchpad_bytes = scratchpad ? bytes : 0;
    }
    return scratchpad.get();
  }

  int threads;
  dnnl::engine engine;
  dnnl::stream stream;
  std::deque<Entry> entries;  // stable addresses
  std::unique_ptr<char, decltype(&std::free)> scratchpad{nullptr, &std::free};
  size_t scratchpad_bytes = 0;
};

DnnlMatmul::DnnlMatmul(int threads) : impl_(std::make_unique<Impl>(std::max(1, threads))) {}
DnnlMatmul::~DnnlMatmul() = default;

absl::Status DnnlMatmul::Run(bool ta, bool tb, int m, int n, int k, float alpha, const Bf16* a,
                             int lda, int64_t stride_a, const Bf16* b, int ldb, int64_t stride_b,
                             float beta, float* c, int ldc, int64_t stride_c, int count, int heads,
                             int64_t head_a, int64_t head_b, int64_t head_c) {
  if (m == 0 || n == 0 || count == 0 || heads == 0) return absl::OkStatus();
  const MatmulShape s{ta,       tb,       m,        n,     k,    lda,   ldb,    ldc,    count,
                      stride_a, stride_b, stride_c, alpha, beta, heads, head_a, head_b, head_c};
  Impl& im = *impl_;
  Impl::Entry& e = im.Get(s);
  if (!e.primitive) return Failed(s, dnnl_unimplemented, "oneDNN refused the shape: " + e.error);
  im.SetThreads();
  void* scratchpad = im.Scratchpad(e.scratchpad.get_size());
  if (scratchpad == nullptr && e.scratchpad.get_size() > 0) {
    return Failed(s, dnnl_out_of_memory, "out of memory for its scratchpad");
  }
  try {
    auto mem = [&](const memory::desc& md, const void* p) {
      return memory(md, im.engine, const_cast<void*>(p));
    };
    e.primitive->execute(im.stream, {{DNNL_ARG_SRC, mem(e.a, a)},
                                     {DNNL_ARG_WEIGHTS, mem(e.b, b)},
                                     {DNNL_ARG_DST, mem(e.c, c)},
                                     {DNNL_ARG_SCRATCHPAD, mem(e.scratchpad, scratchpad)}});
    im.stream.wait();
  } catch (const dnnl::error& err) {
    return Failed(s, err.status, err.what());
  }
  return absl::OkStatus();
}

std::string DnnlMatmul::Implementation(bool ta, bool tb, int m, int n, int k, int lda,
                                       int64_t stride_a, int ldb, int64_t stride_b, int ldc,
                                       int64_t stride_c, int count, int heads, int64_t head_a,
                                       int64_t head_b, int64_t head_c) {
  const MatmulShape s{ta,       tb,       m,        n,    k,    lda,   ldb,    ldc,    count,
                      stride_a, stride_b, stride_c, 1.0f, 0.0f, heads, head_a, head_b, head_c};
  return impl_->Get(s).impl;
}

}  // namespace lockstep::cpu
