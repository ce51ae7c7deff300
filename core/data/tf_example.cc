// The image and label of a serialized tf.train.Example, read off the protobuf wire
// format. Contract: tf_example.h.
#include "core/data/tf_example.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace {

enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// A cursor over protobuf wire bytes; every read checks the bounds.
class Wire {
 public:
  explicit Wire(absl::string_view bytes) : b_(bytes) {}
  bool done() const { return pos_ == b_.size(); }

  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ == b_.size()) return false;
      const uint8_t byte = static_cast<uint8_t>(b_[pos_++]);
      *v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;  // more than 10 bytes
  }
  bool Tag(uint32_t* field, int* wire_type) {
    uint64_t t;
    if (!Varint(&t) || (t >> 3) == 0 || (t >> 3) > 0x1fffffff) return false;
    *field = static_cast<uint32_t>(t >> 3);
    *wire_type = static_cast<int>(t & 7);
    return true;
  }
  bool Bytes(absl::string_view* out) {
    uint64_t n;
    if (!Varint(&n) || n > b_.size() - pos_) return false;
    *out = b_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  // Past a field of `wire_type` whose tag was just read.
  bool Skip(int wire_type) {
    uint64_t v;
    absl::string_view s;
    switch (wire_type) {
      case kVarint:
        return Varint(&v);
      case kFixed64:
        return Advance(8);
      case kLengthDelimited:
        return Bytes(&s);
      case kFixed32:
        return Advance(4);
      default:
        return false;  // groups (3, 4) and reserved types
    }
  }

 private:
  bool Advance(size_t n) {
    if (n > b_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  absl::string_view b_;
  size_t pos_ = 0;
};

absl::Status Malformed(const char* where) {
  return absl::InvalidArgumentError(
      absl::StrCat("not a tf.train.Example (malformed protobuf wire format in ", where, ")"));
}

// The feature map's entries for the two keys (the last of each) and some keys present.
struct Found {
  std::optional<absl::string_view> image, label;
  std::vector<std::string> keys;  // at most a few, for messages
};

absl::Status ScanFeatures(absl::string_view features, absl::string_view image_key,
                          absl::string_view label_key, Found* found) {
  Wire w(features);
  while (!w.done()) {
    uint32_t field;
    int type;
    if (!w.Tag(&field, &type)) return Malformed("Features");
    if (field != 1 || type != kLengthDelimited) {
      if (!w.Skip(type)) return Malformed("Features");
      continue;
    }
    absl::string_view entry;
    if (!w.Bytes(&entry)) return Malformed("Features");
    absl::string_view key, value;  // a map entry: key = 1, value = 2, both optional
    Wire e(entry);
    while (!e.done()) {
      uint32_t f;
      int t;
      if (!e.Tag(&f, &t)) return Malformed("a feature map entry");
      if ((f == 1 || f == 2) && t == kLengthDelimited) {
        if (!e.Bytes(f == 1 ? &key : &value)) return Malformed("a feature map entry");
      } else if (!e.Skip(t)) {
        return Malformed("a feature map entry");
      }
    }
    if (key == image_key) found->image = value;
    if (key == label_key) found->label = value;
    if (found->keys.size() < 8) found->keys.emplace_back(key);
  }
  return absl::OkStatus();
}

// Which of Feature's oneof is set (the last seen wins), and its bytes.
absl::Status FeatureKind(absl::string_view feature, uint32_t* kind, absl::string_view* list) {
  Wire w(feature);
  *kind = 0;
  while (!w.done()) {
    uint32_t field;
    int type;
    if (!w.Tag(&field, &type)) return Malformed("a Feature");
    if (field >= 1 && field <= 3 && type == kLengthDelimited) {
      if (!w.Bytes(list)) return Malformed("a Feature");
      *kind = field;
    } else if (!w.Skip(type)) {
      return Malformed("a Feature");
    }
  }
  return absl::OkStatus();
}

const char* KindName(uint32_t kind) {
  switch (kind) {
    case 1:
      return "a bytes_list";
    case 2:
      return "a float_list";
    case 3:
      return "an int64_list";
    default:
      return "empty (no list set)";
  }
}

absl::Status WrongCount(absl::string_view key, const char* what, int64_t n) {
  return absl::InvalidArgumentError(
      absl::StrCat("feature '", key, "' holds ", n, " values, want ", what, " of one value"));
}

}  // namespace

absl::Status ParseImageExample(absl::string_view record, absl::string_view image_key,
                               absl::string_view label_key, absl::string_view* image,
                               int64_t* label) {
  Found found;
  Wire w(record);
  while (!w.done()) {
    uint32_t field;
    int type;
    if (!w.Tag(&field, &type)) return Malformed("Example");
    if (field == 1 && type == kLengthDelimited) {
      absl::string_view features;  // repeated occurrences merge: their entries add up
      if (!w.Bytes(&features)) return Malformed("Example");
      absl::Status s = ScanFeatures(features, image_key, label_key, &found);
      if (!s.ok()) return s;
    } else if (!w.Skip(type)) {
      return Malformed("Example");
    }
  }
  for (const auto& [key, value] :
       {std::pair(image_key, found.image), std::pair(label_key, found.label)}) {
    if (!value) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no feature '", key, "' (it has ",
          found.keys.empty() ? "none" : absl::StrCat("'", absl::StrJoin(found.keys, "', '"), "'"),
          ")"));
    }
  }
  uint32_t kind;
  absl::string_view list;
  absl::Status s = FeatureKind(*found.image, &kind, &list);
  if (!s.ok()) return s;
  if (kind != 1) {
    return absl::InvalidArgumentError(absl::StrCat("feature '", image_key, "' is ", KindName(kind),
                                                   ", want a bytes_list of one encoded image"));
  }
  int64_t n = 0;
  for (Wire l(list); !l.done();) {
    uint32_t field;
    int type;
    if (!l.Tag(&field, &type)) return Malformed("a BytesList");
    if (field == 1 && type == kLengthDelimited) {
      if (!l.Bytes(image)) return Malformed("a BytesList");
      ++n;
    } else if (!l.Skip(type)) {
      return Malformed("a BytesList");
    }
  }
  if (n != 1) return WrongCount(image_key, "a bytes_list", n);
  s = FeatureKind(*found.label, &kind, &list);
  if (!s.ok()) return s;
  if (kind != 3) {
    return absl::InvalidArgumentError(absl::StrCat("feature '", label_key, "' is ", KindName(kind),
                                                   ", want an int64_list of one label"));
  }
  n = 0;
  for (Wire l(list); !l.done();) {
    uint32_t field;
    int type;
    if (!l.Tag(&field, &type)) return Malformed("an Int64List");
    uint64_t v;
    if (field == 1 && type == kVarint) {
      if (!l.Varint(&v)) return Malformed("an Int64List");
      *label = static_cast<int64_t>(v);
      ++n;
    } else if (field == 1 && type == kLengthDelimited) {  // packed
      absl::string_view packed;
      if (!l.Bytes(&packed)) return Malformed("an Int64List");
      for (Wire p(packed); !p.done(); ++n) {
        if (!p.Varint(&v)) return Malformed("an Int64List");
        *label = static_cast<int64_t>(v);
      }
    } else if (!l.Skip(type)) {
      return Malformed("an Int64List");
    }
  }
  if (n != 1) return WrongCount(label_key, "an int64_list", n);
  return absl::OkStatus();
}

namespace {

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutBytes(uint32_t field, absl::string_view bytes, std::string* out) {
  PutVarint(field << 3 | kLengthDelimited, out);
  PutVarint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

std::string MapEntry(absl::string_view key, const std::string& feature) {
  std::string e;
  PutBytes(1, key, &e);
  PutBytes(2, feature, &e);
  return e;
}

}  // namespace

std::string ImageExampleBytes(absl::string_view image_key, absl::string_view image,
                              absl::string_view label_key, int64_t label) {
  std::string bytes_list, image_feature, packed, int64_list, label_feature, features, example;
  PutBytes(1, image, &bytes_list);
  PutBytes(1, bytes_list, &image_feature);
  PutVarint(static_cast<uint64_t>(label), &packed);
  PutBytes(1, packed, &int64_list);
  PutBytes(3, int64_list, &label_feature);
  // The map's entries in key order.
  const bool image_first = image_key < label_key;
  PutBytes(
      1, MapEntry(image_first ? image_key : label_key, image_first ? image_feature : label_feature),
      &features);
  PutBytes(
      1, MapEntry(image_first ? label_key : image_key, image_first ? label_feature : image_feature),
      &features);
  PutBytes(1, features, &example);
  return example;
}

}  // namespace lockstep
