// NumPy's .npy format (numpy.lib.format, versions 1.0, 2.0 and 3.0): a magic string, a
// header that is a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': ...},
// then the array's bytes. Parsed strictly: the header must hold exactly those three keys,
// the dtype must be a plain one ('<f4', '|u1', '>i8'...: no structured, object or string
// dtypes), and the bytes after the header must be exactly shape x itemsize.
//
// Thread safety: plain functions and values.
#ifndef LOCKSTEP_CORE_DATA_NPY_H_
#define LOCKSTEP_CORE_DATA_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

struct NpyArray {
  std::string descr;           // the dtype as written: "<f4", "|u1", ">i2"
  char kind = 0;               // numpy's dtype.kind: 'u', 'i', 'f', 'b', 'c', ...
  int item_size = 0;           // bytes per element
  bool big_endian = false;     // the elements' byte order ('>'); '<', '|' and '=' are little
  std::vector<int64_t> shape;  // () for a scalar
  std::string data;            // count() * item_size bytes, C order, as stored

  int64_t count() const;  // elements: the product of shape
  // numpy's own name for the dtype ("uint8", "float32", ">int16") and the shape as a
  // tuple ("(60000, 28, 28, 1)"), for messages.
  std::string DtypeName() const;
  std::string ShapeString() const;
  // Element i of an integer array ('i' or 'u', any size and byte order), widened. A u8
  // above INT64_MAX comes back as INT64_MAX. Requires kind 'i' or 'u' and i < count().
  int64_t IntAt(int64_t i) const;
  // Element i of a float32 array (kind 'f', 4 bytes, either byte order).
  float Float32At(int64_t i) const;
};

// Parses a whole .npy file's bytes (the header is removed from `bytes`, which becomes
// the array's data). `what` names it in errors ("FILE: array 'image'").
// INVALID_ARGUMENT: not a .npy (bad magic, unknown version), a header that is not the
// dict numpy writes, an unsupported dtype, fortran_order True, or an array of more than
// `max_bytes` bytes; DATA_LOSS: fewer or more bytes than the header's shape needs.
absl::StatusOr<NpyArray> ParseNpy(std::string bytes, const std::string& what,
                                  uint64_t max_bytes = uint64_t{1} << 31);

// Where a .npy file's array lies: after the header, data_bytes of it.
struct NpyLayout {
  uint64_t data_offset = 0;
  uint64_t data_bytes = 0;
};

// ParseNpy's first half, for a file read in place (memory-mapped or by offset): `head` is
// the file's first bytes, at least through the header; *out gets all but the data. The
// same errors as ParseNpy's for the header; DATA_LOSS when `head` ends inside it.
absl::StatusOr<NpyLayout> ParseNpyHeader(absl::string_view head, const std::string& what,
                                         uint64_t max_bytes, NpyArray* out);

// DATA_LOSS (ParseNpy's message) unless a file of `file_bytes` holds exactly the data the
// header promises after it.
absl::Status CheckNpyDataSize(const NpyArray& a, const NpyLayout& layout, uint64_t file_bytes,
                              const std::string& what);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_NPY_H_
