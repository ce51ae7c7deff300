// TFRecord framing, the container of TensorBoard's event files: each record is its length (uint64,
// little-endian), the masked CRC32C of those 8 bytes, the data, and the masked CRC32C of the data.
// Contract: tfrecord.h.
#include "core/io/tfrecord.h"

#include <array>
#include <cstring>

namespace lockstep {
namespace {

constexpr uint32_t kCastagnoli = 0x82F63B78;  // reflected
constexpr uint32_t kMaskDelta = 0xa282ead8;

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kCastagnoli : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

void AppendLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t Crc32cTable(std::string_view data) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char b : data) crc = kTable[(crc ^ b) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(std::string_view data) {
  const char* p = data.data();
  size_t n = data.size();
  uint64_t crc = 0xffffffffu;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    crc = __builtin_ia32_crc32di(crc, v);
  }
  uint32_t c = static_cast<uint32_t>(crc);
  for (; n > 0; --n, ++p) c = __builtin_ia32_crc32qi(c, static_cast<unsigned char>(*p));
  return c ^ 0xffffffffu;
}
#endif

uint32_t LoadLittleEndian32(std::string_view b) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[i]);
  return v;
}

}  // namespace

uint32_t Crc32c(std::string_view data) {
#if defined(__x86_64__)
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  if (sse42) return Crc32cSse42(data);
#endif
  return Crc32cTable(data);
}

bool ParseTfRecordHeader(std::string_view header, uint64_t* length) {
  if (header.size() < kTfRecordHeaderBytes) return false;
  if (MaskCrc32c(Crc32c(header.substr(0, 8))) != LoadLittleEndian32(header.substr(8, 4))) {
    return false;
  }
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(header[i]);
  *length = v;
  return true;
}

bool TfRecordDataCrcMatches(std::string_view data, std::string_view footer) {
  return footer.size() >= 4 && MaskCrc32c(Crc32c(data)) == LoadLittleEndian32(footer);
}

uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

std::string FrameTfRecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  AppendLittleEndian(data.size(), 8, &out);
  AppendLittleEndian(MaskCrc32c(Crc32c(out)), 4, &out);
  out.append(data);
  AppendLittleEndian(MaskCrc32c(Crc32c(data)), 4, &out);
  return out;
}

}  // namespace lockstep
