#include "core/backend.h"

namespace lockstep {

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    Reset();
    data_ = o.data_;
    bytes_ = o.bytes_;
    free_ = std::move(o.free_);
    o.data_ = nullptr;
    o.bytes_ = 0;
    o.free_ = nullptr;
  }
  return *this;
}

void Buffer::Reset() {
  if (data_ != nullptr && free_) free_(data_);
  data_ = nullptr;
  bytes_ = 0;
  free_ = nullptr;
}

}  // namespace lockstep
