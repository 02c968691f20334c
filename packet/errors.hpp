// Typed errors of the packet layer. Each has a stable name, used by counters and messages.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace hcaemu::pkt {

// In the order parse() checks them: an error implies every earlier stage was decoded (see
// decoded_*() below).
enum class ParseError : uint8_t {
    ok,
    truncated_eth,       // shorter than the Ethernet header (and its 802.1Q tag)
    not_ip,              // EtherType neither IPv4 nor IPv6 (ARP, LLDP, a second VLAN tag, ...)
    truncated_ip,        // shorter than the IP header
    bad_ip_version,      // version field does not match the EtherType
    bad_ihl,             // IPv4 IHL other than 5: options are not accepted
    bad_ip_length,       // IP length field shorter than its headers or longer than the frame
    bad_ipv4_checksum,
    ip_fragment,         // MF set or fragment offset non-zero: RoCE v2 is never fragmented
    not_udp,             // IPv4 protocol / IPv6 next header is not UDP
    bad_udp_length,      // UDP length too small or not equal to what the IP length leaves
    not_roce_port,       // UDP destination port is not 4791
    bad_udp_checksum,    // non-zero and wrong (zero is accepted: RoCE v2 senders use it)
    truncated_bth,
    bad_tver,            // BTH TVer not 0 (IBTA 9.2)
    unknown_opcode,      // not an RC, UC or UD opcode, nor the CNP
    truncated_headers,   // too short for the opcode's extension headers and the ICRC
    unexpected_payload,  // bytes after the headers of an opcode that carries no payload
    bad_pad_count,       // BTH PadCnt larger than the payload
    bad_icrc,
    count,
};
constexpr size_t kParseErrorCount = size_t(ParseError::count);

inline constexpr std::array<const char*, kParseErrorCount> kParseErrorName = {
    "ok", "truncated_eth", "not_ip", "truncated_ip", "bad_ip_version", "bad_ihl",
    "bad_ip_length", "bad_ipv4_checksum", "ip_fragment", "not_udp", "bad_udp_length",
    "not_roce_port", "bad_udp_checksum", "truncated_bth", "bad_tver", "unknown_opcode",
    "truncated_headers", "unexpected_payload", "bad_pad_count", "bad_icrc",
};
// Which parts of a Packet hold decoded fields after parse() returned `e`.
constexpr bool decoded_ip(ParseError e) { return e == ParseError::ok || e >= ParseError::bad_ip_length; }
constexpr bool decoded_udp(ParseError e) { return e == ParseError::ok || e >= ParseError::bad_udp_length; }
constexpr bool decoded_bth(ParseError e) { return e == ParseError::ok || e >= ParseError::bad_tver; }
constexpr bool decoded_opcode(ParseError e) { return e == ParseError::ok || e >= ParseError::truncated_headers; }
constexpr bool decoded_all(ParseError e) { return e == ParseError::ok || e == ParseError::bad_icrc; }

inline const char* name(ParseError e) { return size_t(e) < kParseErrorCount ? kParseErrorName[size_t(e)] : "?"; }

enum class BuildError : uint8_t {
    ok,
    unknown_opcode,      // the opcode has no table entry
    payload_not_allowed, // a payload given to an opcode that carries none
    frame_too_long,      // the IP or UDP length field would overflow 16 bits
    buffer_too_small,
    count,
};
inline constexpr std::array<const char*, size_t(BuildError::count)> kBuildErrorName = {
    "ok", "unknown_opcode", "payload_not_allowed", "frame_too_long", "buffer_too_small",
};
inline const char* name(BuildError e) { return size_t(e) < kBuildErrorName.size() ? kBuildErrorName[size_t(e)] : "?"; }

}  // namespace hcaemu::pkt
