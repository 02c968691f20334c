// The out-of-band messages that ibv_rc_pingpong and perftest exchange over TCP before any RoCE
// traffic (../shared/captures/rxe/README.md records them as seen on the wire). Formatting gives
// the exact bytes the unmodified tools send; parsing is strict and returns a typed error for
// anything else, so that a hostile or confused peer is refused, never half-understood.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "packet/headers.hpp"

namespace hcaemu::tools::oob {

enum class OobError : uint8_t {
    ok,
    bad_length,      // not the message's fixed size
    no_terminator,   // the last byte is not NUL
    bad_separator,   // a ':' is missing or misplaced
    bad_hex,         // a field holds something other than lower- or upper-case hex digits
    count,
};
inline constexpr std::array<const char*, size_t(OobError::count)> kOobErrorName = {
    "ok", "bad_length", "no_terminator", "bad_separator", "bad_hex"};
inline const char* name(OobError e) { return size_t(e) < kOobErrorName.size() ? kOobErrorName[size_t(e)] : "?"; }

// ibv_rc_pingpong: "%04x:%06x:%06x:%s" + NUL = LID:QPN:PSN:GID, the GID as 32 hex characters of
// its 16 bytes: 52 bytes in all.
struct PingpongDest {
    uint16_t lid = 0;
    uint32_t qpn = 0;   // 24 bits
    uint32_t psn = 0;   // 24 bits
    pkt::Ip6 gid{};
    bool operator==(const PingpongDest&) const = default;
};
constexpr size_t kPingpongLen = 52;
std::array<uint8_t, kPingpongLen> format(const PingpongDest& d);
OobError parse(std::span<const uint8_t> msg, PingpongDest& out);

// perftest's QP information, 108 bytes, also its synchronisation barrier:
// "%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 x "%02x:" + "%08x:" + NUL
// = LID : out_reads : QPN : PSN : RKey : VAddr : GID bytes : SRQN.
struct PerftestQpInfo {
    uint16_t lid = 0;
    uint16_t out_reads = 0;
    uint32_t qpn = 0;    // 24 bits
    uint32_t psn = 0;    // 24 bits
    uint32_t rkey = 0;
    uint64_t vaddr = 0;
    pkt::Ip6 gid{};
    uint32_t srqn = 0;
    bool operator==(const PerftestQpInfo&) const = default;
};
constexpr size_t kPerftestQpInfoLen = 108;
std::array<uint8_t, kPerftestQpInfoLen> format(const PerftestQpInfo& q);
OobError parse(std::span<const uint8_t> msg, PerftestQpInfo& out);

}  // namespace hcaemu::tools::oob
