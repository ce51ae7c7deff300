// Fuzzes the safetensors reader (core/io/safetensors.h) and, on what it accepts, the
// checkpoint loader on top of it (ReadStartingPoint, as a job's resume_from is read) for
// a small model: an MLP 784-2-10 with adam, whose tensors the seed corpus holds.
#include <cstdint>
#include <cstdlib>

#include "core/checkpoint.h"
#include "core/io/safetensors.h"
#include "core/model_spec.h"
#include "core/optimizer_spec.h"
#include "tests/fuzz/memory_file.h"

namespace lockstep {
namespace {

struct Setup {
  Model model;
  Optimizer optimizer;
};

const Setup& SmallMlp() {
  static const Setup* setup = [] {
    v1::ModelSpec m;
    m.set_kind("mlp");
    m.add_hidden(2);
    v1::OptimizerSpec o;
    o.set_kind("adam");
    o.set_learning_rate(0.001);
    return new Setup{ModelFromSpec(m).value(), OptimizerFromSpec(o).value()};
  }();
  return *setup;
}

// Each tensor's data is what its shape says (counted without overflow), and reads back
// as each type: the wrong ones are errors, the right one has the values its data holds.
void ReadAll(const SafeTensors& st) {
  for (const auto& [name, tensor] : st.tensors()) {
    const size_t bytes = tensor.data.size();
    unsigned __int128 count = 1;  // saturates past `bytes`
    bool empty = false;
    for (int64_t d : tensor.shape) {
      if (d < 0) std::abort();
      if (d == 0) empty = true;
      if (count <= bytes) count *= static_cast<uint64_t>(d);
    }
    if (empty) count = 0;
    if (tensor.dtype == "F32" && count * 4 != bytes) std::abort();
    auto check = [bytes](const auto& v, size_t element) {
      if (v.ok() && v->size() * element != bytes) std::abort();
    };
    check(st.F32(name), 4);
    check(st.I32(name), 4);
    check(st.U32(name), 4);
    check(st.U8(name), 1);
  }
}

}  // namespace
}  // namespace lockstep

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  const std::string path = fuzz::MemoryFile(data, size);
  absl::StatusOr<SafeTensors> st = SafeTensors::Read(path);
  if (!st.ok()) return 0;
  ReadAll(*st);
  const Setup& s = SmallMlp();
  absl::StatusOr<StartingPoint> start = ReadStartingPoint(path, s.model, s.optimizer);
  if (start.ok() && (start->state.params.size() != s.model.layout().total() ||
                     start->state.slots.size() != s.optimizer.slots().size())) {
    std::abort();
  }
  return 0;
}
