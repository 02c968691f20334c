// Frame -> typed view, or a typed error. No allocation; the view points into the caller's frame.
#pragma once
#include <cstdint>
#include <span>

#include "packet/errors.hpp"
#include "packet/headers.hpp"
#include "packet/opcode.hpp"

namespace hcaemu::pkt {

struct Packet {
    Headers h;
    const OpcodeInfo* op = nullptr;
    const uint8_t* frame = nullptr;
    uint16_t l3_off = 0;       // IP header
    uint16_t l4_off = 0;       // UDP header
    uint16_t bth_off = 0;
    uint16_t payload_off = 0;  // first payload byte (after the extension headers)
    uint32_t payload_len = 0;  // without the pad bytes
    uint32_t len = 0;          // Ethernet header to ICRC inclusive; any Ethernet padding excluded
    uint32_t icrc = 0;         // as stored in the frame

    std::span<const uint8_t> payload() const { return {frame + payload_off, payload_len}; }
    uint16_t ext_off(Ext e) const { return uint16_t(bth_off + kBthLen + op->ext_off[size_t(e)]); }
};

struct ParseOptions {
    bool verify_icrc = true;
    bool verify_ip_checksum = true;
    bool verify_udp_checksum = true;  // only when the checksum field is non-zero
};

ParseError parse(std::span<const uint8_t> frame, Packet& out, const ParseOptions& opt = {});

// Internet checksum helpers (RFC 1071), shared with build.
uint16_t ipv4_header_checksum(const uint8_t* ip);             // over 20 bytes, checksum field as is
uint16_t udp_checksum(const uint8_t* l3, bool ipv6);          // pseudo header + UDP, field as is

}  // namespace hcaemu::pkt
