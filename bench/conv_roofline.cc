// The CPU backend's layers against the machine's sgemm peak (bench/results/roofline.md):
// for each convolution and dense layer of the Flax MNIST CNN, the MLP and the BatchNorm
// convnet at batch 128 and each pass (forward, backward-data, backward-weights), GFLOP/s
// and % of peak, the former path (im2col + OpenBLAS: CpuKernels::kOpenBlas) against the
// current one (oneDNN), through the Backend interface exactly as StepExecutor calls it;
// the BatchNorm convnet's BatchNorm layers' passes (memory-bound: their GB/s); and, with
// --spec, each whole training step against its floor.
//
//   conv_roofline [--threads 1,2] [--reps N] [--spec FILE ...] [--steps S] [--spec-rounds R]
//                 [--bf16 1]
//
// The peak is the best of a square sgemm (1024^3) on OpenBLAS and on oneDNN (dnnl_sgemm) on
// the same threads. Each time is the best of --reps runs (load from elsewhere only slows
// a run down; old and new alternate run by run). Prints Markdown tables.
//
// A step's floor: its arithmetic (3x the forward pass's, Model::ForwardFlopsPerSample, times
// the global batch) at the sgemm peak, the time no implementation on these cores can beat;
// the step itself is `lockstep train`'s (RunLocalJob) on the spec (its epochs replaced by
// --steps steps, no evaluation) at each thread count, best of --spec-rounds runs.
//
// --bf16 1: mixed precision instead. The peak is a square GEMM (1024^3) of bfloat16 operands
// summed in float32, as the CPU backend runs its matmuls (Backend::GemmBf16: oneDNN, AMX
// or avx512_bf16); each spec's step runs with model.dtype: bfloat16 and without `replicas`
// (one replica of the whole batch, as bench/cpu/run trains it) against its floor at that
// peak. No layer tables.
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
#include "core/model.h"
#include "core/spec/spec.h"
#include "services/standalone/local_job.h"
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

// A BatchNorm layer's passes on x (rows, cols) as StepExecutor::BatchNormForward and
// BatchNormBackward run them in training (one replica): forward = moments, variance,
// apply; backward-data = the reduce (with the scale's and bias's gradients) and the
// input's gradient. No backward-weights pass: its gradients come with the reduce.
std::unique_ptr<Layer> BatchNormLayer(Backend& be, int rows, int cols) {
  auto l = std::make_unique<Layer>();
  const size_t n = size_t(rows) * cols;
  l->x = Random(n, 11), l->dy = Random(n, 12), l->w = Random(cols, 13), l->bias = Random(cols, 14);
  l->y.resize(n), l->dx.resize(n), l->dw.resize(cols), l->db.resize(cols);
  // moments (2 cols), var (cols), sums (2 cols), the partials.
  l->scratch = *be.Allocate((5 * size_t(cols) + BatchNormPartials(cols)) * sizeof(float));
  Layer* p = l.get();
  float* f = l->scratch.as<float>();
  float *moments = f, *var = f + 2 * cols, *sums = f + 3 * cols, *partials = f + 5 * cols;
  constexpr float kEps = 1e-5f;
  l->forward = [&be, rows, cols, p, moments, var, partials] {
    OrDie(be.BatchNormMoments(rows, cols, p->x.data(), partials, moments));
    OrDie(be.BatchNormVariance(cols, moments, var));
    OrDie(be.BatchNormApply(rows, cols, kEps, p->x.data(), moments, var, p->w.data(),
                            p->bias.data(), p->y.data()));
  };
  l->backward_data = [&be, rows, cols, p, moments, var, sums, partials] {
    OrDie(be.BatchNormBackwardReduce(rows, cols, kEps, p->x.data(), p->dy.data(), moments, var,
                                     partials, sums, p->dw.data(), p->db.data()));
    OrDie(be.BatchNormBackwardApply(rows, cols, kEps, 1, p->x.data(), p->dy.data(), moments, var,
                                    p->w.data(), sums, p->dx.data()));
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
      if (!(new_l.*(passes[i].second))) continue;  // a layer without the pass
      for (int k = 0; k < 2; ++k) {
        Layer& l = k == 0 ? old_l : new_l;
        const double t = Seconds(l.*(passes[i].second));
        if (r >= 0) best[i][k] = std::min(best[i][k], t);
      }
    }
  }
  for (int i = 0; i < 3; ++i) {
    if (new_l.*(passes[i].second)) {
      rows->push_back({name, passes[i].first, flop, best[i][0], best[i][1]});
    }
  }
}

void BatchNormRows(Backend& old_be, Backend& new_be, int b, int reps);
void StepFloors(const std::vector<std::string>& specs, int threads, double peak, int steps,
                int rounds, bool bf16 = false);

// The bfloat16 GEMM peak (see the top of the file) on `threads` threads, GFLOP/s.
double Bf16Peak(int threads, int reps) {
  constexpr int n = 1024;
  std::vector<Bf16> a(size_t(n) * n), b(size_t(n) * n);
  const std::vector<float> ra = Random(a.size(), 1), rb = Random(b.size(), 2);
  for (size_t i = 0; i < a.size(); ++i) a[i].bits = Bf16Bits(ra[i]), b[i].bits = Bf16Bits(rb[i]);
  std::vector<float> c(size_t(n) * n);
  auto be = NewCpuBackend(threads);
  OrDie(be->Bf16Support());
  return 2.0 * n * n * n /
         BestSeconds(
             3 * reps,
             [&] {
               OrDie(be->GemmBf16(false, false, n, n, n, 1.0f, a.data(), b.data(), 0.0f, c.data()));
             }) /
         1e9;
}

void RunBf16(int threads, int reps, const std::vector<std::string>& specs, int steps, int rounds) {
  const double peak = Bf16Peak(threads, reps);
  std::printf("\n### %d thread%s, bfloat16\n\n", threads, threads == 1 ? "" : "s");
  std::printf("bf16 GEMM peak (1024^3, float32 sums, best of %d): oneDNN %.1f GFLOP/s.\n", 3 * reps,
              peak);
  StepFloors(specs, threads, peak, steps, rounds, true);
}

void Run(int threads, int reps, const std::vector<std::string>& specs, int steps, int rounds) {
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
  BatchNormRows(*old_be, *new_be, b, reps);
  if (!specs.empty()) StepFloors(specs, threads, top, steps, rounds);
}

// The BatchNorm convnet's (examples/bn-convnet.yaml) BatchNorm layers: memory-bound, so
// their rate is the bytes they must move at least (forward: x read twice, y written;
// backward: x and dy read twice, dx written), not FLOPs. Both backends run the same code.
void BatchNormRows(Backend& old_be, Backend& new_be, int b, int reps) {
  struct Bn {
    const char* name;
    int rows, cols;
  };
  std::printf(
      "\nBatchNorm layers of the BN convnet (both backends run the same BatchNorm code):\n\n"
      "| layer | pass | MB moved | old ms | new ms | new GB/s |\n|---|---|--:|--:|--:|--:|\n");
  double total = 0;
  for (const Bn& n : {Bn{"batch_norm 28x28x32", b * 28 * 28, 32},
                      Bn{"batch_norm 14x14x64", b * 14 * 14, 64}, Bn{"batch_norm 128", b, 128}}) {
    auto o = BatchNormLayer(old_be, n.rows, n.cols), w = BatchNormLayer(new_be, n.rows, n.cols);
    std::vector<Row> rows;
    AddRows(n.name, 0, *o, *w, reps, &rows);
    for (const Row& r : rows) {
      const double mb = (r.pass == "forward" ? 3.0 : 5.0) * n.rows * n.cols * sizeof(float) / 1e6;
      total += r.new_s;
      std::printf("| %s | %s | %.1f | %.3f | %.3f | %.1f |\n", n.name, r.pass.c_str(), mb,
                  r.old_s * 1e3, r.new_s * 1e3, mb / 1e3 / r.new_s);
    }
  }
  std::printf("\nThe BN convnet's BatchNorm passes in all: %.2f ms per step.\n", total * 1e3);
}

// Each spec's whole training step against its floor (see the top of the file).
void StepFloors(const std::vector<std::string>& specs, int threads, double peak, int steps,
                int rounds, bool bf16) {
  std::printf(
      "\nWhole steps (`lockstep train`, %d steps, best of %d runs) against their floor "
      "(3x the forward pass's FLOPs at %.1f GFLOP/s):\n\n"
      "| spec | GFLOP per step | floor ms | step ms | floor / step |\n|---|--:|--:|--:|--:|\n",
      steps, rounds, peak);
  for (const std::string& file : specs) {
    absl::StatusOr<v1::JobSpec> spec = LoadSpecFile(file);
    OrDie(spec.status());
    spec->clear_epochs();
    spec->set_steps(steps);
    spec->clear_eval();
    spec->clear_checkpoint_path();
    spec->set_workers(1);
    spec->set_threads(threads);
    if (bf16) {
      spec->mutable_model()->set_dtype("bfloat16");
      spec->clear_replicas();
      spec->clear_min_workers();
    }
    absl::StatusOr<v1::JobSpec> valid = Validate(*spec);
    OrDie(valid.status());
    absl::StatusOr<TrainSetup> setup = SetupFromSpec(*valid);
    OrDie(setup.status());
    const double flop = 3.0 * setup->model.ForwardFlopsPerSample() * valid->global_batch_size();
    double best = 0;  // samples/s
    for (int r = 0; r < rounds; ++r) {
      NullJobSink sink;
      absl::StatusOr<JobOutcome> out = RunLocalJob(*valid, &sink);
      OrDie(out.status());
      best = std::max(best, out->samples_per_sec);
    }
    const double step_ms = 1e3 * valid->global_batch_size() / best;
    const double floor_ms = 1e3 * flop / (peak * 1e9);
    std::printf("| %s | %.3f | %.2f | %.2f | %.0f%% |\n", file.c_str(), flop / 1e9, floor_ms,
                step_ms, 100 * floor_ms / step_ms);
  }
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  std::vector<std::string> specs;
  int reps = 20, steps = 100, rounds = 3;
  bool bf16 = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 == argc) {
      std::fprintf(stderr, "conv_roofline: %s needs a value\n", flag.c_str());
      return 2;
    }
    const std::string value = argv[i + 1];
    if (flag == "--threads") {
      threads.clear();
      std::stringstream list(value);
      for (std::string t; std::getline(list, t, ',');)
        threads.push_back(std::max(1, std::atoi(t.c_str())));
    } else if (flag == "--reps") {
      reps = std::atoi(value.c_str());
    } else if (flag == "--spec") {
      specs.push_back(value);
    } else if (flag == "--steps") {
      steps = std::max(1, std::atoi(value.c_str()));
    } else if (flag == "--bf16") {
      bf16 = value != "0";
    } else if (flag == "--spec-rounds") {
      rounds = std::max(1, std::atoi(value.c_str()));
    } else {
      std::fprintf(stderr, "conv_roofline: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  for (const int t : threads) {
    if (bf16) {
      lockstep::RunBf16(t, std::max(1, reps), specs, steps, rounds);
    } else {
      lockstep::Run(t, std::max(1, reps), specs, steps, rounds);
    }
  }
  return 0;
}
