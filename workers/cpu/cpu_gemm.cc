// The CPU backend's GEMMs: a single-threaded sgemm over a fixed grid of blocks, so that the bits
// depend only on the thread count. Contract: cpu_gemm.h.
#include "workers/cpu/cpu_gemm.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace lockstep::cpu {
namespace {

// GEMMs of at most this many multiply-adds (m * n * k) run on the calling thread alone, as
// OpenBLAS itself would run them (64^3 is microseconds: less than a fork/join).
constexpr int64_t kGemmParallelMin = 1 << 18;

// Products whose c has fewer columns than this (the 10-class layer's forward and kernel
// gradient) run on OpenBLAS; wider ones on oneDNN's sgemm, the faster for the MLP's and
// the CNN's dense layers on an AVX-512 core, while OpenBLAS is the faster for the narrow
// ones (bench/results/roofline.md).
constexpr int kOneDnnGemmMinN = 32;

// Row-major c = alpha * op(a) * op(b) + beta * c with explicit leading dimensions, so that
// a block of c can be computed on its own; single-threaded (see Gemm), on oneDNN or
// OpenBLAS. oneDNN's sgemm runs on one thread where the caller's OpenMP ICV is 1 or it is
// inside an active parallel region, as OpenBLAS does.
// Returns oneDNN's status (OpenBLAS's sgemm reports nothing).
dnnl_status_t Sgemm(bool onednn, bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (onednn) {
    return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
  return dnnl_success;
}

absl::Status SgemmStatus(dnnl_status_t status, int m, int n, int k) {
  if (status == dnnl_success) return absl::OkStatus();
  const std::string message = absl::StrCat("cpu: dnnl_sgemm (", m, " x ", n, " x ", k,
                                           ") failed: oneDNN status ", static_cast<int>(status));
  return status == dnnl_out_of_memory ? absl::ResourceExhaustedError(message)
                                      : absl::InternalError(message);
}

// The blocks Gemm splits an m x n product into, one per thread: rows x cols = threads,
// chosen so that the blocks read op(a) and op(b) the fewest times over (each of op(a)'s
// rows `cols` times, each of op(b)'s columns `rows` times).
struct GemmGrid {
  int rows, cols;
};

GemmGrid GridFor(int m, int n, int threads) {
  GemmGrid best{1, threads};
  int64_t best_reads = std::numeric_limits<int64_t>::max();
  for (int rows = 1; rows <= threads; ++rows) {
    if (threads % rows != 0) continue;
    const int64_t reads = int64_t{threads / rows} * m + int64_t{rows} * n;
    if (reads < best_reads) best = {rows, threads / rows}, best_reads = reads;
  }
  return best;
}

// The start of part i of [0, n) cut into `parts` near-equal parts.
int PartStart(int n, int parts, int i) { return static_cast<int>(int64_t{n} * i / parts); }

}  // namespace

absl::Status Gemm(int threads, bool onednn_wide, bool ta, bool tb, int m, int n, int k, float alpha,
                  const float* a, const float* b, float beta, float* c) {
  // The library (oneDNN or OpenBLAS) depends on the product's shape only: see
  // kOneDnnGemmMinN. The threads are ours; OpenBLAS only ever runs single-threaded, so that
  // nothing process-wide is read or written. Its OpenMP build (0.3.21) sizes a product's team
  // (m*n*k > 2^18) from the CALLING thread's omp_get_max_threads() and copies that into
  // its global count, unless the ICV is 1 or the caller is inside an active parallel
  // region: then it runs on the caller alone and touches no global. So a product for one
  // thread is called with this thread's ICV at 1; a larger one is split into a grid of
  // `threads` blocks of c, each a single-threaded sgemm inside our own team. On 2 cores
  // this beats OpenBLAS's threading (bench/results/cpu-throughput.md). The blocks depend
  // only on `threads`, and so do the bits.
  const int lda = ta ? m : k, ldb = tb ? k : n;
  const bool onednn = onednn_wide && n >= kOneDnnGemmMinN;
  if (threads == 1 || int64_t{m} * n * k <= kGemmParallelMin) {
    if (omp_get_max_threads() != 1) omp_set_num_threads(1);  // this thread's ICV only
    return SgemmStatus(Sgemm(onednn, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, n), m, n, k);
  }
  const GemmGrid grid = GridFor(m, n, threads);
  dnnl_status_t failed = dnnl_success;  // a block's failure, if any
#pragma omp parallel num_threads(threads)
  for (int blk = omp_get_thread_num(); blk < threads; blk += omp_get_num_threads()) {
    const int i = blk / grid.cols, j = blk % grid.cols;
    const int r0 = PartStart(m, grid.rows, i), r1 = PartStart(m, grid.rows, i + 1);
    const int c0 = PartStart(n, grid.cols, j), c1 = PartStart(n, grid.cols, j + 1);
    if (r1 == r0 || c1 == c0) continue;
    const dnnl_status_t status = Sgemm(onednn, ta, tb, r1 - r0, c1 - c0, k, alpha,
                                       a + (ta ? r0 : static_cast<size_t>(r0) * lda), lda,
                                       b + (tb ? static_cast<size_t>(c0) * ldb : c0), ldb, beta,
                                       c + static_cast<size_t>(r0) * n + c0, n);
    if (status != dnnl_success) {
#pragma omp critical(lockstep_cpu_gemm_status)
      failed = status;
    }
  }
  return SgemmStatus(failed, m, n, k);
}

}  // namespace lockstep::cpu
