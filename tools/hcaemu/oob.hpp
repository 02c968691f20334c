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
    bad_value,       // well-formed bytes, but not a value the message can hold
    count,
};
inline constexpr std::array<const char*, size_t(OobError::count)> kOobErrorName = {
    "ok", "bad_length", "no_terminator", "bad_separator", "bad_hex", "bad_value"};
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

// perftest -R (and -z): the same exchange as SENDs on an RC QP that rdma_cm connected, each message
// one SEND; the QP information then goes as perftest's struct pingpong_dest itself, 56 bytes with
// its integers big-endian (rdma_write_keys): lid, out_reads, qpn, psn, rkey (4 bytes each), 4 of
// padding, vaddr (8), the GID (16), srqn, gid_index (4 each). The receiver takes the first eight.
constexpr size_t kPerftestCmDestLen = 56;
std::array<uint8_t, kPerftestCmDestLen> format_cm(const PerftestQpInfo& q);
// bad_length, or bad_value: a LID above 16 bits, a QPN or PSN above 24, out_reads above 16.
OobError parse_cm(std::span<const uint8_t> msg, PerftestQpInfo& out);

// The rest of perftest's exchange, in the order the tools send it (each message goes both ways,
// the client first): the version, the system data, the MTU, then QP information (above, also used
// as a barrier), the BW results, and "done".

// 1. The version: 16 bytes, the text ("6.06") then NULs.
constexpr size_t kPerftestVersionLen = 16;
inline constexpr const char* kPerftestVersion = "6.06";  // what Debian 12's perftest 4.5-0.17 reports
std::array<uint8_t, kPerftestVersionLen> format_version(const char* v);
// Strict: 1..15 characters of digits and '.', then NULs only to the end. `out` gets the text.
OobError parse_version(std::span<const uint8_t> msg, char (&out)[kPerftestVersionLen]);

// 2. System data: two 4-byte big-endian ints, each a message of its own: the cycle buffer (the
// page size, 4096) and the cache line size (64). Both sides take the larger.
constexpr size_t kPerftestSysLen = 4;
std::array<uint8_t, kPerftestSysLen> format_sys(uint32_t v);
OobError parse_sys(std::span<const uint8_t> msg, uint32_t& out);  // bad_value: 0 or above 1 GiB

// 3. The MTU: the IBV_MTU_* number as one ASCII digit, then NUL ("3" = 1024 bytes).
constexpr size_t kPerftestMtuLen = 2;
std::array<uint8_t, kPerftestMtuLen> format_mtu(uint8_t ibv_mtu);
OobError parse_mtu(std::span<const uint8_t> msg, uint8_t& ibv_mtu);  // bad_value: not '1'..'5'

// 5. BW results: five 8-byte big-endian messages: size and iterations (u64), BW peak, BW average
// and message rate (IEEE 754 doubles). A one-sided test's server sends whatever its memory held,
// so the doubles are taken as they come (NaN included): only their length is checked.
constexpr size_t kPerftestResultLen = 8;
struct PerftestBwResult {
    uint64_t size = 0;
    uint64_t iters = 0;
    double bw_peak = 0;
    double bw_avg = 0;
    double msg_rate = 0;
};
std::array<uint8_t, kPerftestResultLen> format_u64(uint64_t v);
std::array<uint8_t, kPerftestResultLen> format_double(double v);
OobError parse_u64(std::span<const uint8_t> msg, uint64_t& out);
OobError parse_double(std::span<const uint8_t> msg, double& out);

// 6. "done" and its NUL, each side, after the last barrier.
constexpr size_t kPerftestDoneLen = 5;
std::array<uint8_t, kPerftestDoneLen> format_done();
OobError parse_done(std::span<const uint8_t> msg);  // bad_value: any other 5 bytes

}  // namespace hcaemu::tools::oob
