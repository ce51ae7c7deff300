#include "services/coordinator/witness.h"

#include <algorithm>

namespace lockstep {

void AddWitnessMark(std::vector<v1::SnapshotMark>& marks, int64_t step, uint64_t param_checksum,
                    int64_t unix_ms) {
  const auto from = std::find_if(marks.begin(), marks.end(),
                                 [step](const v1::SnapshotMark& m) { return m.step() >= step; });
  marks.erase(from, marks.end());
  v1::SnapshotMark& m = marks.emplace_back();
  m.set_step(step);
  m.set_param_checksum(param_checksum);
  m.set_unix_ms(unix_ms);
  if (marks.size() > kMaxWitnessMarks) {
    marks.erase(marks.begin(), marks.begin() + (marks.size() - kMaxWitnessMarks));
  }
}

}  // namespace lockstep
