// TFRecord framing, the container of TensorBoard's event files: each record is its length (uint64,
// little-endian), the masked CRC32C of those 8 bytes, the data, and the masked CRC32C of the data.
// Contract: tfrecord.h.
#include "core/io/tfrecord.h"

#include <array>

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

}  // namespace

uint32_t Crc32c(std::string_view data) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char b : data) crc = kTable[(crc ^ b) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
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
