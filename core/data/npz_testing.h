// Writing .npy and .npz bytes in tests, the way numpy does and in the ways it does not:
// STORED or DEFLATED entries, zip64 extra fields in the local and central headers, a
// zip64 end record, data descriptors; and Fashion-MNIST's IDX files as .npz.
#ifndef LOCKSTEP_CORE_DATA_NPZ_TESTING_H_
#define LOCKSTEP_CORE_DATA_NPZ_TESTING_H_

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/idx.h"

namespace lockstep::testing {

// A version 1.0 .npy of `data` (raw bytes, C order) with the header numpy writes.
inline std::string NpyBytes(const std::string& descr, const std::vector<int64_t>& shape,
                            const std::string& data, bool fortran_order = false) {
  std::string dims = absl::StrJoin(shape, ", ");
  if (shape.size() == 1) dims += ",";
  std::string header =
      absl::StrCat("{'descr': '", descr, "', 'fortran_order': ", fortran_order ? "True" : "False",
                   ", 'shape': (", dims, "), }");
  // Padded with spaces and a newline so that the data starts 64-byte aligned.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

// The raw bytes of `values` as `T`, little-endian (the host's order), or big-endian.
template <typename T>
std::string RawBytes(const std::vector<T>& values, bool big_endian = false) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  if (big_endian) {
    for (size_t i = 0; i < out.size(); i += sizeof(T)) {
      for (size_t a = i, b = i + sizeof(T) - 1; a < b; ++a, --b) std::swap(out[a], out[b]);
    }
  }
  return out;
}

struct ZipEntryOptions {
  bool deflate = false;          // np.savez_compressed
  bool zip64_local = true;       // numpy's force_zip64: 0xffffffff sizes in the local header
  bool zip64_central = false;    // sizes and offset in a zip64 extra in the central header
  bool data_descriptor = false;  // sizes after the data (flag bit 3), zeros in the header
};

class ZipWriter {
 public:
  void Add(const std::string& name, const std::string& bytes, ZipEntryOptions o = {}) {
    std::string data = o.deflate ? Deflate(bytes) : bytes;
    const uint32_t crc =
        crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size()));
    const uint64_t offset = out_.size();
    const uint16_t flags = o.data_descriptor ? 8 : 0, method = o.deflate ? 8 : 0;
    Put(&out_, 0x04034b50, 4);
    Put(&out_, 45, 2);
    Put(&out_, flags, 2);
    Put(&out_, method, 2);
    Put(&out_, 0, 4);  // time, date
    Put(&out_, o.data_descriptor ? 0 : crc, 4);
    const bool saturate_local = o.zip64_local && !o.data_descriptor;
    Put(&out_, o.data_descriptor ? 0 : saturate_local ? 0xffffffff : data.size(), 4);
    Put(&out_, o.data_descriptor ? 0 : saturate_local ? 0xffffffff : bytes.size(), 4);
    Put(&out_, name.size(), 2);
    Put(&out_, saturate_local ? 20 : 0, 2);
    out_ += name;
    if (saturate_local) {
      Put(&out_, 1, 2);
      Put(&out_, 16, 2);
      Put(&out_, bytes.size(), 8);
      Put(&out_, data.size(), 8);
    }
    out_ += data;
    if (o.data_descriptor) {
      Put(&out_, 0x08074b50, 4);
      Put(&out_, crc, 4);
      Put(&out_, data.size(), 4);
      Put(&out_, bytes.size(), 4);
    }
    std::string& c = central_;
    Put(&c, 0x02014b50, 4);
    Put(&c, 45, 2);
    Put(&c, 45, 2);
    Put(&c, flags, 2);
    Put(&c, method, 2);
    Put(&c, 0, 4);
    Put(&c, crc, 4);
    Put(&c, o.zip64_central ? 0xffffffff : data.size(), 4);
    Put(&c, o.zip64_central ? 0xffffffff : bytes.size(), 4);
    Put(&c, name.size(), 2);
    Put(&c, o.zip64_central ? 28 : 0, 2);
    Put(&c, 0, 2);  // comment
    Put(&c, 0, 2);  // disk
    Put(&c, 0, 2);  // internal attributes
    Put(&c, 0, 4);  // external attributes
    Put(&c, o.zip64_central ? 0xffffffff : offset, 4);
    c += name;
    if (o.zip64_central) {
      Put(&c, 1, 2);
      Put(&c, 24, 2);
      Put(&c, bytes.size(), 8);
      Put(&c, data.size(), 8);
      Put(&c, offset, 8);
    }
    ++count_;
  }

  // The archive: the entries, the central directory, a zip64 end record and locator if
  // asked, and the end record.
  std::string Finish(bool zip64_end = false, const std::string& comment = "") const {
    std::string out = out_;
    const uint64_t cd_offset = out.size();
    out += central_;
    if (zip64_end) {
      const uint64_t z64 = out.size();
      Put(&out, 0x06064b50, 4);
      Put(&out, 44, 8);
      Put(&out, 45, 2);
      Put(&out, 45, 2);
      Put(&out, 0, 4);
      Put(&out, 0, 4);
      Put(&out, count_, 8);
      Put(&out, count_, 8);
      Put(&out, central_.size(), 8);
      Put(&out, cd_offset, 8);
      Put(&out, 0x07064b50, 4);
      Put(&out, 0, 4);
      Put(&out, z64, 8);
      Put(&out, 1, 4);
    }
    Put(&out, 0x06054b50, 4);
    Put(&out, 0, 4);
    Put(&out, zip64_end ? 0xffff : count_, 2);
    Put(&out, zip64_end ? 0xffff : count_, 2);
    Put(&out, zip64_end ? 0xffffffff : central_.size(), 4);
    Put(&out, zip64_end ? 0xffffffff : cd_offset, 4);
    Put(&out, comment.size(), 2);
    return out + comment;
  }

 private:
  static void Put(std::string* s, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  static std::string Deflate(const std::string& in) {
    z_stream zs{};
    deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    std::string out(deflateBound(&zs, in.size()), '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = static_cast<uInt>(in.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    deflate(&zs, Z_FINISH);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    return out;
  }
  std::string out_, central_;
  uint64_t count_ = 0;
};

// An .npz of an image and a label array, as np.savez (or savez_compressed) writes it.
inline std::string NpzBytes(const std::string& image_npy, const std::string& label_npy,
                            bool compressed = false, const std::string& image_key = "image",
                            const std::string& label_key = "label") {
  ZipWriter z;
  z.Add(image_key + ".npy", image_npy, {.deflate = compressed});
  z.Add(label_key + ".npy", label_npy, {.deflate = compressed});
  return z.Finish();
}

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The IDX files PREFIX-images-idx3-ubyte.gz and PREFIX-labels-idx1-ubyte.gz (e.g.
// Fashion-MNIST's, kDefaultDatasetPath + "/train") written as one .npz at `path`: uint8
// images [N, 28, 28, 1], int64 labels; DEFLATED as np.savez_compressed writes it, else
// STORED as np.savez does. ReadIdx's error.
inline absl::Status WriteIdxAsNpz(const std::string& prefix, const std::string& path,
                                  bool compressed) {
  absl::StatusOr<IdxArray> images = ReadIdx(prefix + "-images-idx3-ubyte.gz", 3);
  if (!images.ok()) return images.status();
  absl::StatusOr<IdxArray> labels = ReadIdx(prefix + "-labels-idx1-ubyte.gz", 1);
  if (!labels.ok()) return labels.status();
  const int64_t n = images->dims[0];
  const std::vector<int64_t> wide(labels->data.begin(), labels->data.end());
  WriteFile(path, NpzBytes(NpyBytes("|u1", {n, 28, 28, 1},
                                    std::string(images->data.begin(), images->data.end())),
                           NpyBytes("<i8", {n}, RawBytes(wide)), compressed));
  return absl::OkStatus();
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_CORE_DATA_NPZ_TESTING_H_
