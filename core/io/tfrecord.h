// TFRecord framing, the container of TensorBoard's event files: each record is its
// length (uint64, little-endian), the masked CRC32C of those 8 bytes, the data, and the
// masked CRC32C of the data. CRC32C (Castagnoli) is computed here with a table: the
// system's zlib has only CRC32 and Debian's abseil predates absl/crc.
//
// Thread safety: pure functions.
#ifndef LOCKSTEP_CORE_IO_TFRECORD_H_
#define LOCKSTEP_CORE_IO_TFRECORD_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace lockstep {

// CRC-32C of `data` (reflected polynomial 0x82F63B78, as in iSCSI and TFRecord).
uint32_t Crc32c(std::string_view data);

// The CRC as TFRecord stores it: rotated right by 15 bits, plus 0xa282ead8.
uint32_t MaskCrc32c(uint32_t crc);

// `data` framed as one record, ready to append to a file.
std::string FrameTfRecord(std::string_view data);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_IO_TFRECORD_H_
