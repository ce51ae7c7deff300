// NumPy's .npy format (numpy.lib.format, versions 1.0, 2.0 and 3.0): a magic string, a header that
// is a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': ...}, then the array's
// bytes. Contract: npy.h.
#include "core/data/npy.h"

#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
// numpy.load refuses headers longer than 10,000 bytes by default; this leaves room for
// many-dimensional shapes and still bounds what an untrusted length makes us read.
constexpr uint64_t kMaxHeaderBytes = 1 << 16;
constexpr int64_t kMaxDims = 32;  // numpy's NPY_MAXDIMS (64 since numpy 2) allows more

absl::Status InvalidNpy(const std::string& what, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", msg));
}

// A cursor over the header text: the Python literal numpy writes with repr().
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : text_(text) {}

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool ConsumeWord(absl::string_view w) {
    SkipSpace();
    if (text_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == text_.size();
  }
  // A quoted string without escapes (numpy's keys and dtype strings have none).
  std::optional<std::string> String() {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) return std::nullopt;
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == absl::string_view::npos) return std::nullopt;
    std::string s(text_.substr(pos_, end - pos_));
    if (s.find('\\') != std::string::npos) return std::nullopt;
    pos_ = end + 1;
    return s;
  }
  // A non-negative integer of at most 18 digits (an optional Python 2 'L' after it).
  std::optional<int64_t> Int() {
    SkipSpace();
    int64_t v = 0;
    size_t digits = 0;
    while (pos_ < text_.size() && absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_]))) {
      if (++digits > 18) return std::nullopt;
      v = v * 10 + (text_[pos_++] - '0');
    }
    if (digits == 0) return std::nullopt;
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
    return v;
  }
  // (), (N,), (N, M), (N, M,)
  std::optional<std::vector<int64_t>> Tuple() {
    if (!Consume('(')) return std::nullopt;
    std::vector<int64_t> dims;
    while (!Consume(')')) {
      std::optional<int64_t> d = Int();
      if (!d || static_cast<int64_t>(dims.size()) >= kMaxDims) return std::nullopt;
      dims.push_back(*d);
      if (Consume(')')) {
        if (dims.size() == 1) return std::nullopt;  // (N) is an int, not a tuple
        break;
      }
      if (!Consume(',')) return std::nullopt;
    }
    return dims;
  }
  size_t pos() const { return pos_; }

 private:
  absl::string_view text_;
  size_t pos_ = 0;
};

struct Header {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<int64_t>> shape;
};

absl::Status ParseHeader(absl::string_view text, const std::string& what, Header* h) {
  const std::string bad = "the .npy header is not the dict numpy writes";
  HeaderParser p(text);
  if (!p.Consume('{')) return InvalidNpy(what, bad);
  while (!p.Consume('}')) {
    std::optional<std::string> key = p.String();
    if (!key || !p.Consume(':')) return InvalidNpy(what, bad);
    if (*key == "descr" && !h->descr) {
      h->descr = p.String();
      if (!h->descr) {
        return InvalidNpy(what,
                          "a structured or other compound dtype is not supported (want a "
                          "plain one: uint8, float32, int64...)");
      }
    } else if (*key == "fortran_order" && !h->fortran_order) {
      if (p.ConsumeWord("True")) {
        h->fortran_order = true;
      } else if (p.ConsumeWord("False")) {
        h->fortran_order = false;
      } else {
        return InvalidNpy(what, bad);
      }
    } else if (*key == "shape" && !h->shape) {
      h->shape = p.Tuple();
      if (!h->shape) return InvalidNpy(what, absl::StrCat(bad, " (shape)"));
    } else {
      return InvalidNpy(what, absl::StrCat(bad, " (key '", *key, "' unknown or repeated)"));
    }
    if (p.Consume('}')) break;
    if (!p.Consume(',')) return InvalidNpy(what, bad);
  }
  if (!p.AtEnd()) return InvalidNpy(what, absl::StrCat(bad, " (text after the dict)"));
  if (!h->descr || !h->fortran_order || !h->shape) {
    return InvalidNpy(what, absl::StrCat(bad, " (descr, fortran_order or shape missing)"));
  }
  return absl::OkStatus();
}

// "<f4" and the like: a byte order, a kind letter, an item size.
absl::Status ParseDescr(const std::string& descr, const std::string& what, NpyArray* a) {
  const auto unsupported = [&] {
    return InvalidNpy(what, absl::StrCat("dtype '", descr,
                                         "' is not supported (want a plain number type: uint8, "
                                         "float32, int64...)"));
  };
  if (descr.size() < 3 || descr.size() > 4) return unsupported();
  const char order = descr[0], kind = descr[1];
  if (order != '<' && order != '>' && order != '|' && order != '=') return unsupported();
  if (!absl::ascii_isalpha(static_cast<unsigned char>(kind))) return unsupported();
  int size = 0;
  for (size_t i = 2; i < descr.size(); ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(descr[i]))) return unsupported();
    size = size * 10 + (descr[i] - '0');
  }
  if (size != 1 && size != 2 && size != 4 && size != 8 && size != 16) return unsupported();
  if (order == '|' && size != 1) return unsupported();
  const bool known = ((kind == 'u' || kind == 'i') && size <= 8) || (kind == 'b' && size == 1) ||
                     (kind == 'f' && size >= 2) || (kind == 'c' && size >= 8);
  if (!known) return unsupported();
  a->descr = descr;
  a->kind = kind;
  a->item_size = size;
  a->big_endian = order == '>' && size > 1;
  return absl::OkStatus();
}

uint64_t LoadLe(const char* p, int n, bool big_endian) {
  uint64_t v = 0;
  for (int b = 0; b < n; ++b) {
    const int at = big_endian ? b : n - 1 - b;
    v = (v << 8) | static_cast<uint8_t>(p[at]);
  }
  return v;
}

}  // namespace

int64_t NpyArray::count() const {
  // A zero anywhere first: the other dimensions may be huge (ParseNpy bounds the product
  // of those of a non-empty array only).
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string NpyArray::DtypeName() const {
  std::string name;
  switch (kind) {
    case 'u':
      name = absl::StrCat("uint", 8 * item_size);
      break;
    case 'i':
      name = absl::StrCat("int", 8 * item_size);
      break;
    case 'f':
      name = absl::StrCat("float", 8 * item_size);
      break;
    case 'c':
      name = absl::StrCat("complex", 8 * item_size);
      break;
    case 'b':
      return "bool";
    default:
      return descr;
  }
  return big_endian ? absl::StrCat(name, " (big-endian)") : name;
}

std::string NpyArray::ShapeString() const {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), shape.size() == 1 ? ",)" : ")");
}

int64_t NpyArray::IntAt(int64_t i) const {
  const uint64_t v = LoadLe(data.data() + i * item_size, item_size, big_endian);
  if (kind == 'u') return v > uint64_t{INT64_MAX} ? INT64_MAX : static_cast<int64_t>(v);
  const int shift = 64 - 8 * item_size;  // sign-extend from the item's width
  return static_cast<int64_t>(v << shift) >> shift;
}

float NpyArray::Float32At(int64_t i) const {
  const uint32_t bits = static_cast<uint32_t>(LoadLe(data.data() + i * 4, 4, big_endian));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

absl::StatusOr<NpyArray> ParseNpy(std::string bytes, const std::string& what, uint64_t max_bytes) {
  if (bytes.size() < kMagicSize + 4 || std::memcmp(bytes.data(), kMagic, kMagicSize) != 0) {
    return InvalidNpy(what, "not a .npy array (no \\x93NUMPY magic)");
  }
  const int major = static_cast<uint8_t>(bytes[6]);
  if (major < 1 || major > 3) {
    return InvalidNpy(what, absl::StrCat(".npy format version ", major, ".",
                                         static_cast<uint8_t>(bytes[7]), " is not supported"));
  }
  const size_t len_size = major == 1 ? 2 : 4;
  const size_t prefix = kMagicSize + 2 + len_size;
  if (bytes.size() < prefix) return absl::DataLossError(absl::StrCat(what, ": truncated header"));
  const uint64_t header_len = LoadLe(bytes.data() + kMagicSize + 2, static_cast<int>(len_size),
                                     /*big_endian=*/false);
  if (header_len > kMaxHeaderBytes) {
    return InvalidNpy(what, absl::StrCat("a .npy header of ", header_len, " bytes (the limit is ",
                                         kMaxHeaderBytes, ")"));
  }
  if (bytes.size() - prefix < header_len) {
    return absl::DataLossError(absl::StrCat(what, ": truncated: its .npy header says ", header_len,
                                            " bytes, ", bytes.size() - prefix, " follow"));
  }
  Header h;
  RETURN_IF_ERROR(ParseHeader(absl::string_view(bytes).substr(prefix, header_len), what, &h));
  NpyArray a;
  RETURN_IF_ERROR(ParseDescr(*h.descr, what, &a));
  if (*h.fortran_order) {
    return InvalidNpy(what, "fortran_order is True: save a C-ordered array (np.ascontiguousarray)");
  }
  a.shape = *std::move(h.shape);
  uint64_t total = a.item_size;
  bool empty = false;
  for (int64_t d : a.shape) empty |= d == 0;
  for (int64_t d : a.shape) {
    if (empty) break;
    // Both at most max_bytes (< 2^63) before multiplying: no overflow.
    if (static_cast<uint64_t>(d) > max_bytes || total > max_bytes / static_cast<uint64_t>(d)) {
      return InvalidNpy(what, absl::StrCat("shape ", a.ShapeString(), " of ", a.DtypeName(),
                                           " holds more than ", max_bytes, " bytes (the limit)"));
    }
    total *= static_cast<uint64_t>(d);
  }
  if (empty) total = 0;
  const uint64_t have = bytes.size() - prefix - header_len;
  if (have != total) {
    return absl::DataLossError(absl::StrCat(
        what, ": shape ", a.ShapeString(), " of ", a.DtypeName(), " needs ", total,
        " bytes after the header, ", have < total ? "only " : "but ", have, " follow"));
  }
  bytes.erase(0, prefix + header_len);
  a.data = std::move(bytes);
  return a;
}

}  // namespace lockstep
