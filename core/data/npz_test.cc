#include "core/data/npz.h"

#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>

#include "core/data/npz_testing.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::NpyBytes;
using testing::RawBytes;
using testing::StatusIs;
using testing::ZipEntryOptions;
using testing::ZipWriter;
namespace fs = std::filesystem;

std::string Fixture(const std::string& name) {
  return testing::SourcePath("core/data/testdata/" + name);
}

class NpzTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (memfd_ >= 0) close(memfd_);
  }
  std::string Write(const std::string& name, const std::string& bytes) {
    return dir_.Write(name, bytes);
  }
  // The same in memory (a memfd named `name`, read through /proc/self/fd): the loops
  // over every truncation and every flipped byte write a thousand files.
  std::string InMemory(const std::string& name, const std::string& bytes) {
    if (memfd_ < 0) memfd_ = memfd_create(name.c_str(), 0);
    EXPECT_EQ(ftruncate(memfd_, 0), 0);
    EXPECT_EQ(pwrite(memfd_, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    return "/proc/self/fd/" + std::to_string(memfd_);
  }
  // An archive of "a" (float32 [2, 2]) and "b" (int64 [3]) written with `o`.
  static std::string Archive(ZipEntryOptions o, bool zip64_end = false,
                             const std::string& comment = "") {
    ZipWriter z;
    z.Add("a.npy", NpyBytes("<f4", {2, 2}, RawBytes<float>({1, 2, 3, 4})), o);
    z.Add("b.npy", NpyBytes("<i8", {3}, RawBytes<int64_t>({7, 8, 9})), o);
    return z.Finish(zip64_end, comment);
  }
  testing::ScratchDir dir_{"npz_test"};
  int memfd_ = -1;
};

TEST_F(NpzTest, ReadsNumpysSavez) {
  ASSERT_OK_AND_ASSIGN(auto npz, NpzFile::Open(Fixture("savez.npz")));
  EXPECT_THAT(npz->keys(), ElementsAre("image", "label"));
  ASSERT_OK_AND_ASSIGN(NpyArray image, npz->Read("image"));
  EXPECT_EQ(image.shape, (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_EQ(image.descr, "|u1");
  for (int i = 0; i < 24; ++i) EXPECT_EQ(static_cast<uint8_t>(image.data[i]), i * 11 % 256);
  ASSERT_OK_AND_ASSIGN(NpyArray label, npz->Read("label.npy"));  // np.load takes both names
  EXPECT_EQ(label.DtypeName(), "int16 (big-endian)");
  EXPECT_EQ(label.IntAt(1), 9);
  EXPECT_EQ(label.IntAt(3), 7);
}

TEST_F(NpzTest, ReadsNumpysSavezCompressed) {
  ASSERT_OK_AND_ASSIGN(auto npz, NpzFile::Open(Fixture("savez_compressed.npz")));
  EXPECT_THAT(npz->keys(), ElementsAre("x", "y"));
  ASSERT_OK_AND_ASSIGN(NpyArray x, npz->Read("x"));
  EXPECT_EQ(x.shape, (std::vector<int64_t>{4, 3, 2, 3}));
  for (int i = 0; i < 72; ++i) EXPECT_EQ(x.Float32At(i), i * 0.5f - 3);
  ASSERT_OK_AND_ASSIGN(NpyArray y, npz->Read("y"));
  EXPECT_EQ(y.IntAt(3), 4);
}

TEST_F(NpzTest, FortranOrderIsRefusedNamingTheArray) {
  ASSERT_OK_AND_ASSIGN(auto npz, NpzFile::Open(Fixture("fortran.npz")));
  EXPECT_THAT(npz->Read("image"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("fortran.npz: array 'image'"), HasSubstr("fortran_order"))));
  EXPECT_OK(npz->Read("label"));
}

TEST_F(NpzTest, EveryZipLayoutReadsTheSame) {
  const std::vector<std::pair<std::string, std::string>> layouts = {
      {"stored, zip64 local", Archive({})},
      {"stored, plain", Archive({.zip64_local = false})},
      {"deflated", Archive({.deflate = true})},
      {"zip64 central and end records", Archive({.zip64_central = true}, true)},
      {"deflated zip64 everywhere", Archive({.deflate = true, .zip64_central = true}, true)},
      {"data descriptors", Archive({.deflate = true, .data_descriptor = true})},
      {"archive comment", Archive({}, false, "a comment PK\x05\x06 with a fake signature")},
  };
  for (const auto& [name, bytes] : layouts) {
    SCOPED_TRACE(name);
    ASSERT_OK_AND_ASSIGN(auto npz, NpzFile::Open(Write("a.npz", bytes)));
    EXPECT_THAT(npz->keys(), ElementsAre("a", "b"));
    ASSERT_OK_AND_ASSIGN(NpyArray a, npz->Read("a"));
    EXPECT_EQ(a.Float32At(3), 4.0f);
    ASSERT_OK_AND_ASSIGN(NpyArray b, npz->Read("b"));
    EXPECT_EQ(b.IntAt(2), 9);
  }
}

TEST_F(NpzTest, AMissingArrayIsNamedWithTheKeysPresent) {
  ASSERT_OK_AND_ASSIGN(auto npz, NpzFile::Open(Write("a.npz", Archive({}))));
  EXPECT_THAT(npz->Read("image"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("a.npz: no array 'image'"), HasSubstr("'a', 'b'"))));
  EXPECT_FALSE(npz->contains("image"));
}

TEST_F(NpzTest, WhatIsNotAnNpzIsNamed) {
  EXPECT_THAT(NpzFile::Open((dir_.path() / "none.npz").string()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("none.npz")));
  EXPECT_THAT(NpzFile::Open(dir_.path().string()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
  EXPECT_THAT(NpzFile::Open(Write("e.npz", "")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("e.npz: not a .npz")));
  EXPECT_THAT(NpzFile::Open(Write("t.npz", "just text")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t.npz: not a .npz")));
  EXPECT_THAT(
      NpzFile::Open(Write("x.npy", NpyBytes("|u1", {1}, "a"))),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x.npy: a .npy file, not a .npz")));
}

TEST_F(NpzTest, EveryTruncationIsAnErrorNamingTheFile) {
  for (bool deflate : {false, true}) {
    const std::string full = Archive({.deflate = deflate});
    for (size_t n = 0; n < full.size(); ++n) {
      const std::string path = InMemory("cut.npz", full.substr(0, n));
      absl::Status st = NpzFile::Open(path).status();
      if (st.ok()) {  // the end record survived: then an array must be unreadable
        auto npz = NpzFile::Open(path);
        st = npz.value()->Read("a").status();
        if (st.ok()) st = npz.value()->Read("b").status();
      }
      EXPECT_TRUE(absl::IsDataLoss(st) || absl::IsInvalidArgument(st))
          << n << " of " << full.size() << " bytes: " << st;
      EXPECT_THAT(std::string(st.message()), HasSubstr(path));
    }
  }
}

TEST_F(NpzTest, EveryFlippedByteIsReadCorrectlyOrRefused) {
  for (bool deflate : {false, true}) {
    const std::string full = Archive({.deflate = deflate});
    for (size_t i = 0; i < full.size(); ++i) {
      std::string bytes = full;
      bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
      const std::string path = InMemory("flip.npz", bytes);
      auto npz = NpzFile::Open(path);
      if (!npz.ok()) {
        EXPECT_THAT(std::string(npz.status().message()), HasSubstr(path)) << i;
        continue;
      }
      // Whatever is read is what was written: the CRC-32 catches changed data.
      for (const std::string key : {"a", "b"}) {
        absl::StatusOr<NpyArray> a = npz.value()->Read(key);
        if (!a.ok()) {
          EXPECT_THAT(std::string(a.status().message()), HasSubstr(path)) << i;
        } else if (key == "a") {
          EXPECT_EQ(a->Float32At(3), 4.0f) << i;
        } else {
          EXPECT_EQ(a->IntAt(2), 9) << i;
        }
      }
    }
  }
}

// The offset of the first central directory header in `zip`.
size_t Central(const std::string& zip) { return zip.find("PK\x01\x02"); }
void Put16(std::string* s, size_t at, uint16_t v) {
  (*s)[at] = static_cast<char>(v & 0xff);
  (*s)[at + 1] = static_cast<char>(v >> 8);
}
void Put32(std::string* s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*s)[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

TEST_F(NpzTest, UnsupportedZipFeaturesAreNamed) {
  std::string bzip2 = Archive({.zip64_local = false});
  Put16(&bzip2, Central(bzip2) + 10, 12);
  EXPECT_THAT(NpzFile::Open(Write("m.npz", bzip2)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("m.npz: entry 'a.npy'"), HasSubstr("method 12"))));
  std::string encrypted = Archive({});
  Put16(&encrypted, Central(encrypted) + 8, 1);
  EXPECT_THAT(NpzFile::Open(Write("c.npz", encrypted)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("encrypted")));
  ZipWriter twice;
  twice.Add("a.npy", NpyBytes("|u1", {1}, "x"));
  twice.Add("a.npy", NpyBytes("|u1", {1}, "y"));
  EXPECT_THAT(NpzFile::Open(Write("d.npz", twice.Finish())),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("two entries are named")));
  std::string prefixed = "#!/bin/sh\n" + Archive({});  // a self-extracting archive
  EXPECT_THAT(NpzFile::Open(Write("p.npz", prefixed)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("p.npz: corrupt zip archive")));
}

TEST_F(NpzTest, UntrustedSizesAreCheckedBeforeAllocating) {
  // A deflated entry claiming 4 GiB from a few dozen bytes.
  std::string bomb = Archive({.deflate = true, .zip64_local = false});
  Put32(&bomb, Central(bomb) + 24, 0xfffffff0u);
  ASSERT_OK_AND_ASSIGN(auto npz, NpzFile::Open(Write("bomb.npz", bomb), uint64_t{1} << 40));
  EXPECT_THAT(npz->Read("a"), StatusIs(absl::StatusCode::kDataLoss,
                                       HasSubstr("deflated bytes cannot hold the 4294967280")));
  // Over max_bytes: an entry refused before reading it, an array by its header.
  ZipWriter big;
  big.Add("a.npy", NpyBytes("|u1", {100000}, std::string(100000, 'x')));
  ASSERT_OK_AND_ASSIGN(auto small, NpzFile::Open(Write("big.npz", big.Finish()), 4));
  EXPECT_THAT(small->Read("a"), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("big.npz: array 'a': 100128 bytes, more than "
                                                   "the limit of 4")));
  ASSERT_OK_AND_ASSIGN(auto header, NpzFile::Open(Write("small.npz", Archive({})), 4));
  EXPECT_THAT(header->Read("a"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shape (2, 2) of float32 holds more than 4 bytes (the limit)")));
  // A stored entry larger than the file.
  std::string stored = Archive({.zip64_local = false});
  Put32(&stored, Central(stored) + 20, 1 << 30);
  Put32(&stored, Central(stored) + 24, 1 << 30);
  EXPECT_THAT(NpzFile::Open(Write("s.npz", stored)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("outside the archive's data")));
  // An end record claiming more entries than the directory can hold.
  std::string many = Archive({});
  Put16(&many, many.size() - 12, 60000);
  Put16(&many, many.size() - 14, 60000);
  EXPECT_THAT(NpzFile::Open(Write("n.npz", many)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("n.npz: corrupt zip archive")));
}

TEST_F(NpzTest, ChangedDataFailsItsCrc) {
  std::string bytes = Archive({});
  const size_t at = bytes.find("\x00\x00\x80\x40", 0, 4);  // the float 4.0f in "a"
  ASSERT_NE(at, std::string::npos);
  bytes[at + 3] = 0x41;
  ASSERT_OK_AND_ASSIGN(auto npz, NpzFile::Open(Write("crc.npz", bytes)));
  EXPECT_THAT(npz->Read("a"), StatusIs(absl::StatusCode::kDataLoss,
                                       AllOf(HasSubstr("crc.npz: array 'a'"), HasSubstr("CRC"))));
}

}  // namespace
}  // namespace lockstep
