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

// Copy and CRC32 in one pass (crc32_copy): the carry-less folds run between the copy's loads.
enum class CrcCopyImpl : uint8_t {
    separate,  // memcpy, then crc32(): the fallback
    vpclmul,   // VPCLMULQDQ (AVX-512), four 64-byte registers
    count,
};
constexpr size_t kCrcCopyImplCount = size_t(CrcCopyImpl::count);
extern const std::array<const char*, kCrcCopyImplCount> kCrcCopyImplName;
using CrcCopyFn = uint32_t (*)(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t n);
CrcCopyFn crc_copy_impl_fn(CrcCopyImpl impl);  // nullptr when the CPU lacks it
CrcCopyImpl crc_copy_impl();                   // the active one: the fastest available, chosen at start
void set_crc_copy_impl(CrcCopyImpl impl);      // tests and benchmarks only; ignores unavailable ones
// Copies n bytes from src to dst (not overlapping) and returns crc32(crc, src, n), in one pass over
// the bytes (below 64 bytes: memcpy, then crc32).
uint32_t crc32_copy(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t n);

// ICRC of a RoCE v2 packet. `l3` points at the IP header; `len` counts the bytes from there up to,
// not including, the ICRC (IP + UDP + BTH + extension headers + payload + pad). The variant fields
// are masked to ones: IPv4 TOS, TTL and header checksum or IPv6 traffic class, flow label and hop
// limit; the UDP checksum; BTH byte 4 (FECN, BECN, resv6). 8 bytes of ones stand in for the LRH.
// Requires len >= IP header + 8 + 12. The result is stored little-endian after the payload.
uint32_t icrc(const uint8_t* l3, size_t len, bool ipv6);

// The ICRC of one flow's packets from a header computed once. A connection repeats most of its
// header bytes in every packet: IP addresses, UDP ports, P_Key, destination QP. The CRC is linear,
// so the CRC register after the masked header is that of the flow's header with the per-packet
// bytes zero (`state`), xor a table look-up per per-packet byte: IP length and (v4) ID, UDP length,
// BTH opcode, flags byte, AckReq byte and PSN. Only the extension headers and payload then go
// through the CRC kernel: for an 8-byte SEND, 8 bytes instead of 56.
constexpr size_t kIcrcFlowMax = 60;  // IPv6 + UDP + BTH
struct IcrcFlow {
    std::array<uint8_t, kIcrcFlowMax> fixed{};  // the header (IP to BTH) with the per-packet and masked bytes zero
    uint32_t state = 0;                         // CRC register (not inverted) after 8 x 0xFF and the masked header
    bool ipv6 = false;
    bool valid = false;
};
// Learns the flow from one of its packets (`l3` at the IP header, whole headers there).
void icrc_flow_init(IcrcFlow& f, const uint8_t* l3, bool ipv6);
// The packet at `l3` (of f's IP version) carries the flow's fixed bytes; the masked ones may differ.
bool icrc_flow_matches(const IcrcFlow& f, const uint8_t* l3);
// icrc(l3, len, f.ipv6) for a packet that matches f; len >= the header. It is also the ICRC's
// running value after those bytes: crc32() or crc32_copy() from it over the packet's next bytes,
// in order, give the ICRC of the longer packet.
uint32_t icrc_flow(const IcrcFlow& f, const uint8_t* l3, size_t len);

}  // namespace hcaemu::pkt
