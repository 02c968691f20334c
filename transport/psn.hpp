// PSN arithmetic and the transport's time constants. Header-only, constexpr, no state.
// PSNs are 24-bit and wrap: every comparison is modulo 2^24 over half the circle (IBTA 9.7.1).
#pragma once
#include <bit>
#include <cstdint>

namespace hcaemu::transport {

inline constexpr uint32_t kPsnMask = 0xFFFFFF;
inline constexpr uint32_t kPsnHalf = 1u << 23;  // 2^23: the duplicate region's size (9.7.5.1)

constexpr uint32_t psn_add(uint32_t psn, uint32_t n) { return (psn + n) & kPsnMask; }
constexpr uint32_t psn_sub(uint32_t psn, uint32_t n) { return (psn - n) & kPsnMask; }
constexpr uint32_t psn_next(uint32_t psn) { return psn_add(psn, 1); }

// Signed distance a - b on the 24-bit circle, in [-2^23, 2^23 - 1]: the 24-bit difference
// sign-extended (C++20: unsigned-to-signed is modular, >> of a negative is arithmetic).
constexpr int32_t psn_diff(uint32_t a, uint32_t b) {
    return int32_t(((a - b) & kPsnMask) << 8) >> 8;
}
constexpr bool psn_before(uint32_t a, uint32_t b) { return psn_diff(a, b) < 0; }
constexpr bool psn_after(uint32_t a, uint32_t b) { return psn_diff(a, b) > 0; }

// psn in [start, start + len) on the circle; len >= 2^24 holds every PSN.
constexpr bool psn_in_window(uint32_t psn, uint32_t start, uint32_t len) {
    return ((psn - start) & kPsnMask) < len;
}

// Packets that carry `bytes` bytes at `mtu` bytes a packet. 64-bit: no length near 2^32 wraps.
// The MTU is a power of two (mtu_bytes: 128 << the verbs enum): a shift, not a division.
constexpr uint64_t mtu_packets(uint64_t bytes, uint32_t mtu) { return (bytes + mtu - 1) >> std::countr_zero(mtu); }
// PSNs a message of `len` bytes takes: a zero-length message still takes one packet (IBTA 9.7.1).
constexpr uint64_t msg_packets(uint64_t len, uint32_t mtu) { return len == 0 ? 1 : mtu_packets(len, mtu); }

// The responder's PSN check against its expected PSN (IBTA 9.7): the ePSN itself is valid;
// the 2^23 PSNs before it (ePSN - 2^23 .. ePSN - 1) are duplicates; the 2^23 - 1 after it are
// invalid (out of sequence: NAK PSN sequence error).
enum class PsnClass : uint8_t { expected, duplicate, out_of_sequence };

constexpr PsnClass classify_psn(uint32_t psn, uint32_t epsn) {
    const int32_t d = psn_diff(psn, epsn);
    return d == 0 ? PsnClass::expected : d < 0 ? PsnClass::duplicate : PsnClass::out_of_sequence;
}

// RNR NAK timer field of the AETH (5 bits) to the time the requester waits before retrying
// (IBTA 9.7, encoding of the RNR NAK timer field). Code 0 is the longest, 655.36 ms.
constexpr uint64_t rnr_timer_ns(uint8_t code) {
    constexpr uint32_t kUs[32] = {
        655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
        480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
        20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
    };
    return uint64_t(kUs[code & 0x1F]) * 1000;
}

// Local ACK Timeout (5-bit QP attribute, IBTA ch. 11): the requester's transport timer runs
// 4.096 us * 2^timeout; 0 turns it off. Returns UINT64_MAX for "infinite": do not arm.
constexpr uint64_t ack_timeout_ns(uint8_t timeout) {
    const unsigned t = timeout & 0x1F;
    return t == 0 ? UINT64_MAX : uint64_t(4096) << t;
}

}  // namespace hcaemu::transport
