// Lockstep's input pipeline alone: an ExampleSource and an ImageTransform (decode, the
// recipe's steps, scaling and normalization) on T threads, each with its own scratch, as
// a worker's decode threads run them; prints one JSON line per round with images/s (wall
// clock) and images per CPU second (user + system, every thread: what a loaded machine's
// other work does not change).
// bench/data/run drives it beside tf.data, the PyTorch DataLoader and grain on the same
// files (bench/results/data.md).
//
//   data_bench --format=tfrecord --path=DIR --name=NAME --recipe=imagenet --threads=2
//   data_bench --format=imagefolder --path=ROOT --recipe=small --images=20000
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/example_source.h"
#include "core/data/image_transform.h"
#include "core/rng/threefry.h"
#include "google/protobuf/util/json_util.h"

namespace lockstep {
namespace {

// CPU seconds (user + system) of every thread of the process so far.
double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// The recipes, as specs: ImageNet's training crop and CIFAR's.
constexpr char kImageNet[] = R"({"preprocess": [{"random_resized_crop": {"size": 224}},
  {"horizontal_flip": {}}], "normalize": {"mean": [0.485, 0.456, 0.406],
  "std": [0.229, 0.224, 0.225]}})";
constexpr char kSmall[] = R"({"preprocess": [{"random_crop": {"size": 32, "padding": 4}},
  {"horizontal_flip": {}}], "normalize": {"mean": [0.4914, 0.4822, 0.4465],
  "std": [0.2470, 0.2435, 0.2616]}})";

int Main(int argc, char** argv) {
  std::map<std::string, std::string> flags = {
      {"format", "tfrecord"}, {"recipe", "imagenet"}, {"threads", "1"}, {"images", "0"},
      {"rounds", "1"},        {"name", ""},           {"path", ""}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos || !flags.count(a.substr(2, eq - 2))) {
      std::fprintf(stderr, "data_bench: unknown argument %s\n", a.c_str());
      return 2;
    }
    flags[a.substr(2, eq - 2)] = a.substr(eq + 1);
  }
  const bool imagenet = flags["recipe"] == "imagenet";
  v1::DatasetSpec spec;
  if (!google::protobuf::util::JsonStringToMessage(imagenet ? kImageNet : kSmall, &spec).ok()) {
    return 1;
  }
  spec.set_format(flags["format"]);
  if (spec.format() == "tfrecord") {
    spec.set_path(flags["path"]);
    spec.set_name(flags["name"]);
    spec.set_train_split("train");
    spec.set_image_key("image");
    spec.set_label_key("label");
  } else {
    spec.set_train_path(flags["path"]);
  }
  const Dims shape = imagenet ? Dims{224, 224, 3} : Dims{32, 32, 3};
  auto source = OpenExampleSource(spec, Split::kTrain, {});
  auto transform = ImageTransform::Create(spec, Split::kTrain, shape);
  if (!source.ok() || !transform.ok()) {
    std::fprintf(stderr, "data_bench: %s\n",
                 (!source.ok() ? source.status() : transform.status()).ToString().c_str());
    return 1;
  }
  const int threads = std::max(1, std::stoi(flags["threads"]));
  const int64_t n = std::stoll(flags["images"]) > 0
                        ? std::min<int64_t>(std::stoll(flags["images"]), (*source)->size())
                        : (*source)->size();
  const rng::Key epoch_key = rng::FoldIn(rng::PRNGKey(0), 1);
  for (int round = 0; round < std::stoi(flags["rounds"]); ++round) {
    std::atomic<int64_t> next{0};
    std::atomic<bool> failed{false};
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = CpuSeconds();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        auto scratch = (*transform)->NewScratch();
        StoredExample stored;
        std::vector<float> out(shape.size());
        int64_t label = 0;
        // Work in runs of 16 examples, as a pipeline hands out a step's shard.
        for (int64_t i; (i = next.fetch_add(16)) < n;) {
          for (int64_t j = i; j < std::min(n, i + 16); ++j) {
            const absl::Status s =
                ReadAndTransform(**source, **transform, j, rng::FoldIn(epoch_key, j), scratch.get(),
                                 &stored, out.data(), &label);
            if (!s.ok()) {
              std::fprintf(stderr, "data_bench: %s\n", s.ToString().c_str());
              failed = true;
              return;
            }
          }
        }
      });
    }
    for (std::thread& t : pool) t.join();
    if (failed) return 1;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu = CpuSeconds() - cpu_start;
    std::printf(
        "{\"peer\": \"lockstep-%s\", \"recipe\": \"%s\", \"threads\": %d, \"round\": %d, "
        "\"images\": %lld, \"seconds\": %.4f, \"cpu_seconds\": %.4f, \"images_per_s\": %.1f, "
        "\"images_per_cpu_s\": %.1f}\n",
        spec.format().c_str(), flags["recipe"].c_str(), threads, round, static_cast<long long>(n),
        seconds, cpu, n / seconds, n / cpu);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) { return lockstep::Main(argc, argv); }
