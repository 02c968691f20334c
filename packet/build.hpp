// Field structs -> frame bytes in a caller's buffer: lengths, IPv4 checksum, pad, ICRC.
// Two steps for the data path (headers, then the DMA engine puts the payload in place, then
// build_finish), one call (build) when the payload is already in a buffer.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "packet/errors.hpp"
#include "packet/headers.hpp"
#include "packet/icrc.hpp"
#include "packet/opcode.hpp"

namespace hcaemu::pkt {

enum class UdpCsum : uint8_t {
    standard,  // 0 over IPv4 as RoCE v2 senders do (IBTA Annex A17, RoCE v2); computed over IPv6 (RFC 8200 8.1)
    zero,      // always 0 (RFC 6935 allows it over IPv6 for tunnels)
    compute,   // always computed
};

struct BuildOptions {
    UdpCsum udp_checksum = UdpCsum::standard;
    bool pad_to_min = true;     // pad frames shorter than 60 bytes with zeros, as Ethernet requires
};

// Bytes from the Ethernet header to the first payload byte for this opcode.
size_t header_len(const OpcodeInfo& op, bool vlan, bool ipv6);
// Bytes a frame adds around `payload_len` payload bytes: headers, pad and ICRC (no min-size pad).
size_t frame_len(const OpcodeInfo& op, bool vlan, bool ipv6, uint32_t payload_len);

// Writes every header for `h` (opcode from h.bth.opcode, pad from payload_len; h.ip4.total_len,
// h.udp.length, checksums and h.bth.pad_cnt are ignored). On ok, `hdr_len` is where the payload
// goes. The ICRC is not yet valid.
BuildError build_headers(const Headers& h, uint32_t payload_len, std::span<uint8_t> out, size_t& hdr_len);

// A connected QP's headers as bytes, made once (at RTR, on a path or P_Key change, when the
// peer's MAC is resolved): Ethernet (and VLAN tag), IP, UDP and BTH as build_headers writes them.
// build_headers_tmpl copies them and writes only what changes per packet.
struct FrameTemplate {
    static constexpr size_t kMaxLen = kEthLen + kVlanLen + kIpv6Len + kUdpLen + kBthLen;
    std::array<uint8_t, kMaxLen> bytes{};
    uint8_t l3 = 0;        // offset of the IP header
    uint8_t bth = 0;       // offset of the BTH
    bool ipv6 = false;
    bool valid = false;    // make_template succeeded
    uint32_t ip4_sum = 0;  // IPv4: the header's 16-bit words summed with length, ID and checksum 0
    IcrcFlow icrc;         // the ICRC of the template's packets from their fixed header
};
// The template of `h`'s Ethernet, IP and UDP headers and its BTH's fixed fields (P_Key, QPN,
// MigReq, TVer, FECN, BECN, reserved bits). False (t.valid false) if they cannot be built.
bool make_template(const Headers& h, FrameTemplate& t);
// The same bytes as build_headers(h, ...) when `h` agrees with the headers `t` was made from
// in every field but these, which are taken from `h`: the BTH's opcode, SE, AckReq and PSN, the
// IPv4 ID and the extension headers. Lengths, pad count and the IPv4 checksum are computed.
BuildError build_headers_tmpl(const FrameTemplate& t, const Headers& h, uint32_t payload_len,
                              std::span<uint8_t> out, size_t& hdr_len);

// With the payload at out[hdr_len, hdr_len + payload_len): writes pad bytes, the UDP checksum if
// asked, the ICRC and any minimum-size padding. Returns the frame length. With `flow` (the
// FrameTemplate's that build_headers_tmpl built the headers from), the ICRC is computed from it;
// with `icrc_so_far` (the ICRC's running value through the payload: icrc_flow over the headers,
// then crc32_copy as the payload was placed), only the pad bytes are added to it.
size_t build_finish(std::span<uint8_t> out, size_t hdr_len, uint32_t payload_len, bool ipv6,
                    const BuildOptions& opt = {}, const IcrcFlow* flow = nullptr, const uint32_t* icrc_so_far = nullptr);

// Both steps, copying `payload` into place.
BuildError build(const Headers& h, std::span<const uint8_t> payload, std::span<uint8_t> out,
                 size_t& len, const BuildOptions& opt = {});

constexpr uint8_t pad_for(uint32_t payload_len) { return uint8_t((4 - (payload_len & 3)) & 3); }

}  // namespace hcaemu::pkt
