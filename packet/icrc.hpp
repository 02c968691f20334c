// CRC32 (IEEE 802.3, reflected) and the RoCE v2 invariant CRC (IBTA Annex A17).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace hcaemu::pkt {

// CRC32 implementations. All use zlib's convention: crc32(crc32(0, a), b) == crc32(0, a||b).
enum class CrcImpl : uint8_t {
    bitwise,       // one bit at a time: the reference
    slice8,        // portable table-driven slice-by-8: the fallback
    isal_dispatch, // ISA-L's crc32_gzip_refl, which picks its kernel from the CPU itself
    isal_base,     // ISA-L's portable C version
    isal_by8,      // ISA-L, PCLMULQDQ (SSE)
    isal_by16_10,  // ISA-L, VPCLMULQDQ (AVX-512)
    count,
};
constexpr size_t kCrcImplCount = size_t(CrcImpl::count);
extern const std::array<const char*, kCrcImplCount> kCrcImplName;

using CrcFn = uint32_t (*)(uint32_t crc, const uint8_t* data, size_t len);

bool crc_impl_available(CrcImpl impl);  // the CPU and the linked ISA-L support it
CrcFn crc_impl_fn(CrcImpl impl);        // nullptr when not available
CrcImpl crc_impl();                     // the active one: the fastest available, chosen at start
void set_crc_impl(CrcImpl impl);        // tests and benchmarks only; returns silently if unavailable

uint32_t crc32(uint32_t crc, const uint8_t* data, size_t len);  // with the active implementation

// ICRC of a RoCE v2 packet. `l3` points at the IP header; `len` counts the bytes from there up to,
// not including, the ICRC (IP + UDP + BTH + extension headers + payload + pad). The variant fields
// are masked to ones: IPv4 TOS, TTL and header checksum or IPv6 traffic class, flow label and hop
// limit; the UDP checksum; BTH byte 4 (FECN, BECN, resv6). 8 bytes of ones stand in for the LRH.
// Requires len >= IP header + 8 + 12. The result is stored little-endian after the payload.
uint32_t icrc(const uint8_t* l3, size_t len, bool ipv6);

}  // namespace hcaemu::pkt
