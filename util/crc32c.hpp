// CRC-32C (Castagnoli, polynomial 0x1EDC6F41): the tcp data plane's frame
// checksum (net/tcp) and TFRecord's record checksum (TensorBoard event
// files, models/tensorboard). Moved here from net/tcp/wire.cpp so that
// models/ can use it without including net/ (a higher layer).
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe::util {

// CRC-32C of `bytes` bytes, continuing from `crc` (0 to start), with SSE4.2
// where the CPU has it. crc32c("123456789") == 0xE3069283.
std::uint32_t crc32c(const void* data, std::size_t bytes, std::uint32_t crc = 0);

}  // namespace troupe::util
