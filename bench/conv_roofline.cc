// The CPU backend's convolution and dense layers against the machine's sgemm peak
// (bench/results/roofline.md): for each layer of the Flax MNIST CNN at batch 128 and each
// pass (forward, backward-data, backward-weights), GFLOP/s and % of peak, the former path
// (im2col + OpenBLAS: CpuKernels::kOpenBlas) against the current one (oneDNN), through
// the Backend interface exactly as StepExecutor calls it.
//
//   conv_roofline [--threads 1,2] [--reps N]
//
// The peak is the best of a square sgemm (1024^3) on OpenBLAS and on oneDNN (dnnl_sgemm) on
// the same threads. Each time is the best of --reps runs (load from elsewhere only slows
// a run down; old and new alternate run by run). Prints a Markdown table.
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

double Seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double BestSeconds(int reps, const std::function<void()>& f) {
  f();  // warm-up: primitives built, pages touched
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// A kernel's Status: a failure ends the benchmark (its timings would mean nothing).
void OrDie(const absl::Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "conv_roofline: %s\n", status.ToString().c_str());
  std::exit(1);
}

std::vector<float> Random(size_t n, int seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

struct Peak {
  double openblas, onednn;
};

// A square sgemm's GFLOP/s on `threads` threads, on each library's own threading.
Peak SgemmPeak(int threads, int reps) {
  constexpr int n = 1024;
  const auto a = Random(size_t(n) * n, 1), b = Random(size_t(n) * n, 2);
  std::vector<float> c(size_t(n) * n);
  const double flop = 2.0 * n * n * n;
  omp_set_num_threads(threads);  // both read the calling thread's OpenMP ICV
  Peak p;
  reps *= 3;  // short runs: more of them
  p.openblas = flop /
               BestSeconds(reps,
                           [&] {
                             cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f,
                                         a.data(), n, b.data(), n, 0.0f, c.data(), n);
                           }) /
               1e9;
  p.onednn = flop /
             BestSeconds(reps,
                         [&] {
                           dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                                      c.data(), n);
                         }) /
             1e9;
  return p;
}

struct Row {
  std::string layer, pass;
  double flop, old_s, new_s;
};

// A layer's three passes on one backend, with their inputs and outputs.
struct Layer {
  std::vector<float> x, w, bias, dy, y, dx, dw, db;
  Buffer scratch;
  std::function<void()> forward, backward_data, backward_weights;
};

// A conv layer's passes as StepExecutor runs them (backward-weights reads what the forward
// left in the scratch: the old path's patches).
std::unique_ptr<Layer> ConvLayer(Backend& be, const ConvGeometry& g) {
  auto l = std::make_unique<Layer>();
  const size_t nx = size_t(g.b) * g.h * g.w * g.c, ny = size_t(g.b) * g.oh() * g.ow() * g.f,
               nw = size_t(g.kh) * g.kw * g.c * g.f;
  l->x = Random(nx, 3), l->w = Random(nw, 4), l->bias = Random(g.f, 5), l->dy = Random(ny, 6);
  l->y.resize(ny), l->dx.resize(nx), l->dw.resize(nw), l->db.resize(g.f);
  const size_t bytes = be.ConvScratchBytes(g);
  if (bytes > 0) l->scratch = *be.Allocate(bytes);
  Layer* p = l.get();
  void* s = bytes > 0 ? l->scratch.as<void>() : nullptr;
  l->forward = [&be, g, p, s] {
    OrDie(be.ConvForward(g, p->x.data(), p->w.data(), p->bias.data(), p->y.data(), s));
  };
  l->backward_weights = [&be, g, p, s] {
    OrDie(be.ConvBackwardWeights(g, p->x.data(), p->dy.data(), p->dw.data(), p->db.data(), s));
  };
  l->backward_data = [&be, g, p, s] {
    OrDie(be.ConvBackwardData(g, p->w.data(), p->dy.data(), p->dx.data(), s));
  };
  return l;
}

// A dense layer's: x (b, in) @ w (in, out) + bias; the kernel's and bias's gradients; the
// input's gradient.
std::unique_ptr<Layer> DenseLayer(Backend& be, int b, int in, int out) {
  auto l = std::make_unique<Layer>();
  l->x = Random(size_t(b) * in, 7), l->w = Random(size_t(in) * out, 8), l->bias = Random(out, 9);
  l->dy = Random(size_t(b) * out, 10);
  l->y.resize(size_t(b) * out), l->dx.resize(size_t(b) * in), l->dw.resize(l->w.size());
  l->db.resize(out);
  Layer* p = l.get();
  l->forward = [&be, b, in, out, p] {
    OrDie(be.Gemm(false, false, b, out, in, 1.0f, p->x.data(), p->w.data(), 0.0f, p->y.data()));
    OrDie(be.BiasAdd(b, out, p->bias.data(), p->y.data()));
  };
  l->backward_weights = [&be, b, in, out, p] {
    OrDie(be.Gemm(true, false, in, out, b, 1.0f, p->x.data(), p->dy.data(), 0.0f, p->dw.data()));
    OrDie(be.BiasGrad(b, out, p->dy.data(), p->db.data()));
  };
  l->backward_data = [&be, b, in, out, p] {
    OrDie(be.Gemm(false, true, b, in, out, 1.0f, p->dy.data(), p->w.data(), 0.0f, p->dx.data()));
  };
  return l;
}

// The best of `reps` runs of each pass on each backend, old and new alternated run by
// run so that load from elsewhere hits both alike.
void AddRows(const std::string& name, double flop, Layer& old_l, Layer& new_l, int reps,
             std::vector<Row>* rows) {
  const std::pair<const char*, std::function<void()> Layer::*> passes[] = {
      {"forward", &Layer::forward},
      {"backward-data", &Layer::backward_data},
      {"backward-weights", &Layer::backward_weights}};
  // Forward first in each round: backward-weights reads the forward's scratch.
  double best[3][2];
  for (auto& b : best) b[0] = b[1] = 1e30;
  for (int r = -1; r < reps; ++r) {  // round -1: warm-up
    for (int i : {0, 2, 1}) {
      for (int k = 0; k < 2; ++k) {
        Layer& l = k == 0 ? old_l : new_l;
        const double t = Seconds(l.*(passes[i].second));
        if (r >= 0) best[i][k] = std::min(best[i][k], t);
      }
    }
  }
  for (int i = 0; i < 3; ++i)
    rows->push_back({name, passes[i].first, flop, best[i][0], best[i][1]});
}

void Run(int threads, int reps) {
  const Peak peak = SgemmPeak(threads, reps);
  const double top = std::max(peak.openblas, peak.onednn);
  std::printf("\n### %d thread%s\n\n", threads, threads == 1 ? "" : "s");
  std::printf(
      "sgemm peak (1024^3, best of %d): OpenBLAS %.1f GFLOP/s, oneDNN %.1f GFLOP/s; "
      "%% of peak below is of %.1f.\n\n",
      3 * reps, peak.openblas, peak.onednn, top);
  auto old_be = NewCpuBackend(threads, CpuKernels::kOpenBlas);
  auto new_be = NewCpuBackend(threads, CpuKernels::kOneDnn);
  constexpr int b = 128;
  std::vector<Row> rows;
  struct Conv {
    const char* name;
    ConvGeometry g;
  };
  const Conv convs[] = {{"conv1 28x28x1->32 3x3", {b, 28, 28, 1, 32, 3, 3, 1, 1, 1, 1, 1, 1}},
                        {"conv2 14x14x32->64 3x3", {b, 14, 14, 32, 64, 3, 3, 1, 1, 1, 1, 1, 1}}};
  for (const Conv& c : convs) {
    const ConvGeometry& g = c.g;
    const double flop = 2.0 * g.b * g.oh() * g.ow() * g.f * g.kh * g.kw * g.c;
    auto o = ConvLayer(*old_be, g), n = ConvLayer(*new_be, g);
    AddRows(c.name, flop, *o, *n, reps, &rows);
  }
  struct Dense {
    const char* name;
    int in, out;
  };
  // The CNN's dense layers, then the MLP's (784-512-512-10; not in the CNN's total below):
  // the shapes behind the CPU backend's choice of GEMM library (kOneDnnGemmMinN).
  for (const Dense d :
       {Dense{"dense 3136->256", 3136, 256}, Dense{"dense 256->10", 256, 10},
        Dense{"mlp dense 784->512", 784, 512}, Dense{"mlp dense 512->512", 512, 512},
        Dense{"mlp dense 512->10", 512, 10}}) {
    const double flop = 2.0 * b * d.in * d.out;
    auto o = DenseLayer(*old_be, b, d.in, d.out), n = DenseLayer(*new_be, b, d.in, d.out);
    AddRows(d.name, flop, *o, *n, reps, &rows);
  }
  std::printf(
      "| layer | pass | MFLOP | old ms | old GFLOP/s | old %% peak | new ms | "
      "new GFLOP/s | new %% peak | speedup |\n");
  std::printf("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n");
  double old_total = 0, new_total = 0;
  for (const Row& r : rows) {
    // The first layer's input gradient is never computed in training.
    const bool unused = r.layer.rfind("conv1", 0) == 0 && r.pass == "backward-data";
    if (!unused && r.layer.rfind("mlp", 0) != 0) old_total += r.old_s, new_total += r.new_s;
    const double og = r.flop / r.old_s / 1e9, ng = r.flop / r.new_s / 1e9;
    std::printf("| %s | %s%s | %.0f | %.3f | %.1f | %.0f%% | %.3f | %.1f | %.0f%% | %.2fx |\n",
                r.layer.c_str(), r.pass.c_str(), unused ? " (unused)" : "", r.flop / 1e6,
                r.old_s * 1e3, og, 100 * og / top, r.new_s * 1e3, ng, 100 * ng / top,
                r.old_s / r.new_s);
  }
  std::printf(
      "\nAll passes a CNN training step runs (conv1's backward-data excluded): old %.2f ms, "
      "new %.2f ms (%.2fx).\n",
      old_total * 1e3, new_total * 1e3, old_total / new_total);
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") {
      threads.clear();
      std::stringstream list(argv[i + 1]);
      for (std::string t; std::getline(list, t, ',');)
        threads.push_back(std::max(1, std::atoi(t.c_str())));
    } else if (flag == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "conv_roofline: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  for (const int t : threads) lockstep::Run(t, std::max(1, reps));
  return 0;
}
