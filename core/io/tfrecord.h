// TFRecord framing, the container of TensorBoard's event files and of TFDS's dataset
// shards: each record is its length (uint64, little-endian), the masked CRC32C of those 8
// bytes, the data, and the masked CRC32C of the data. CRC32C (Castagnoli) is computed
// here, with the SSE4.2 crc32 instruction where the CPU has it (much faster than the
// table: a dataset reader checks every record) and a table otherwise: the system's zlib
// has only CRC32 and Debian's abseil predates absl/crc.
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

// A record's first 12 bytes: its data length, once the masked CRC32C that follows it
// matches; nothing when it does not (a corrupt or misaligned record).
inline constexpr size_t kTfRecordHeaderBytes = 12, kTfRecordFooterBytes = 4;
bool ParseTfRecordHeader(std::string_view header12, uint64_t* length);
// Whether `footer4` is the masked CRC32C of `data`.
bool TfRecordDataCrcMatches(std::string_view data, std::string_view footer4);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_IO_TFRECORD_H_
