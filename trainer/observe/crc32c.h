// CRC-32C (Castagnoli, the iSCSI polynomial of RFC 3720), as TFRecord and TensorBoard
// event files use it to frame their records, and the mask TensorFlow applies to a CRC it
// stores next to the data the CRC covers (a CRC of data that holds CRCs is then not
// trivially related to them). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

namespace kubetrain::trainer::observe {

// The CRC-32C of `data`.
uint32_t Crc32c(std::string_view data);
// The CRC-32C of (what `crc` covers) followed by `data`; Crc32cExtend(0, d) == Crc32c(d).
uint32_t Crc32cExtend(uint32_t crc, std::string_view data);

// TensorFlow's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t MaskCrc(uint32_t crc);
uint32_t UnmaskCrc(uint32_t masked);

}  // namespace kubetrain::trainer::observe
