// Header field structs for RoCE v2 frames: Ethernet, IPv4/IPv6, UDP, BTH and the IBA extension
// headers. The same structs describe a parsed frame and a frame to build (see parse.hpp, build.hpp).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace hcaemu::pkt {

constexpr uint16_t kRoceV2Port = 4791;  // IBTA Annex A17 (IANA's RoCEv2 port)
constexpr uint16_t kEthTypeIpv4 = 0x0800;
constexpr uint16_t kEthTypeIpv6 = 0x86DD;
constexpr uint16_t kEthTypeVlan = 0x8100;
constexpr uint16_t kEthTypeArp = 0x0806;
constexpr uint8_t kIpProtoUdp = 17;

constexpr size_t kEthLen = 14;
constexpr size_t kVlanLen = 4;
constexpr size_t kIpv4Len = 20;  // options are rejected
constexpr size_t kIpv6Len = 40;  // extension headers are rejected
constexpr size_t kUdpLen = 8;
constexpr size_t kBthLen = 12;   // IBTA 9.2
constexpr size_t kRethLen = 16;  // IBTA 9.3.3
constexpr size_t kAethLen = 4;   // IBTA 9.3.5
constexpr size_t kAtomicEthLen = 28;     // IBTA 9.3.4
constexpr size_t kAtomicAckEthLen = 8;   // IBTA 9.3.6
constexpr size_t kImmDtLen = 4;  // IBTA 9.3.7
constexpr size_t kIethLen = 4;   // IBTA 9.3.8
constexpr size_t kDethLen = 8;   // IBTA 9.3.2
constexpr size_t kFethLen = 4;   // IBTA 1.5 FLUSH extended transport header
constexpr size_t kCnpLen = 16;   // IBTA Annex A17: 16 reserved bytes after the BTH
constexpr size_t kIcrcLen = 4;
constexpr size_t kMinFrameLen = 60;  // Ethernet minimum without FCS; shorter frames are padded

using Mac = std::array<uint8_t, 6>;
using Ip6 = std::array<uint8_t, 16>;  // also a RoCE v2 GID

struct EthHdr {
    Mac dst{};
    Mac src{};
    bool vlan = false;       // one 802.1Q tag present
    uint16_t vlan_tci = 0;   // PCP(3) DEI(1) VID(12)
    uint16_t ethertype = 0;  // the inner type (after the tag, if any)
    bool operator==(const EthHdr&) const = default;
};

struct Ipv4Hdr {
    uint8_t tos = 0;            // DSCP(6) ECN(2)
    uint16_t total_len = 0;     // parse only; build computes it
    uint16_t id = 0;
    uint16_t frag = 0x4000;     // flags(3) fragment offset(13); DF set, as Linux rxe sends
    uint8_t ttl = 64;
    uint16_t checksum = 0;      // parse only; build computes it
    uint32_t src = 0;           // host order
    uint32_t dst = 0;
    bool operator==(const Ipv4Hdr&) const = default;
};

struct Ipv6Hdr {
    uint8_t traffic_class = 0;
    uint32_t flow_label = 0;    // 20 bits
    uint16_t payload_len = 0;   // parse only
    uint8_t hop_limit = 64;
    Ip6 src{};
    Ip6 dst{};
    bool operator==(const Ipv6Hdr&) const = default;
};

struct UdpHdr {
    uint16_t sport = 0xC000;
    uint16_t dport = kRoceV2Port;
    uint16_t length = 0;        // parse only
    uint16_t checksum = 0;      // RoCE v2 senders put 0 (IBTA Annex A17, RoCE v2); see BuildOptions
    bool operator==(const UdpHdr&) const = default;
};

// Base Transport Header, IBTA 9.2. Byte 4 carries FECN/BECN in RoCE v2 (IBTA A17.9.1).
struct Bth {
    uint8_t opcode = 0;
    bool se = false;            // solicited event
    bool mig = false;           // MigReq
    uint8_t pad_cnt = 0;        // parse only; build derives it from the payload length
    uint8_t tver = 0;           // must be 0 (IBTA 9.2: transport header version)
    uint16_t pkey = 0xFFFF;
    bool fecn = false;
    bool becn = false;
    uint8_t resv6 = 0;
    uint32_t dest_qp = 0;       // 24 bits
    bool ack_req = false;
    uint8_t resv7 = 0;
    uint32_t psn = 0;           // 24 bits
    bool operator==(const Bth&) const = default;
};

struct Reth {                   // RDMA Extended Transport Header, IBTA 9.3.3
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint32_t dma_len = 0;
    bool operator==(const Reth&) const = default;
};

// AETH syndrome, IBTA 9.3.5: bit 7 reserved, bits 6:5 type, bits 4:0 value.
enum class AethType : uint8_t { ack = 0, rnr_nak = 1, reserved = 2, nak = 3 };
enum class NakCode : uint8_t {   // IBTA 9.3.5
    psn_seq_error = 0, invalid_request = 1, remote_access_error = 2, remote_op_error = 3,
    invalid_rd_request = 4,
};
constexpr uint8_t kAethCreditInvalid = 0x1F;  // "no credit information", as rxe sends

struct Aeth {
    uint8_t syndrome = 0;
    uint32_t msn = 0;           // 24 bits
    AethType type() const { return AethType((syndrome >> 5) & 3); }
    uint8_t value() const { return syndrome & 0x1F; }  // credits, RNR timer, or NAK code
    bool operator==(const Aeth&) const = default;
};
constexpr uint8_t aeth_syndrome(AethType t, uint8_t value) { return uint8_t((uint8_t(t) << 5) | (value & 0x1F)); }

// End-to-end credits in an ACK's AETH (IBTA 9.7, end-to-end credits): a 5-bit code for the receive WQEs the
// responder has posted, on a roughly logarithmic scale; 31 means "no credit information".
inline constexpr uint32_t kAethCredits[31] = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256,
                                              384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192,
                                              12288, 16384, 24576, 32768};
// The largest code whose credit count does not exceed `wqes`.
constexpr uint8_t aeth_credit_code(uint32_t wqes) {
    uint8_t c = 0;
    while (c < 30 && kAethCredits[c + 1] <= wqes) ++c;
    return c;
}
const char* aeth_type_name(AethType t);
const char* nak_code_name(uint8_t code);  // "reserved" for unknown codes

struct AtomicEth {              // IBTA 9.3.4
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint64_t swap_add = 0;
    uint64_t compare = 0;
    bool operator==(const AtomicEth&) const = default;
};

struct AtomicAckEth {           // IBTA 9.3.6
    uint64_t orig = 0;
    bool operator==(const AtomicAckEth&) const = default;
};

struct Deth {                   // IBTA 9.3.2
    uint32_t qkey = 0;
    uint8_t resv8 = 0;
    uint32_t src_qp = 0;        // 24 bits
    bool operator==(const Deth&) const = default;
};

struct Feth {                   // IBTA 1.5 FLUSH: selectivity level bits 5:4, placement type bits 3:0
    uint32_t raw = 0;
    uint8_t placement_type() const { return uint8_t(raw & 0xF); }
    uint8_t selectivity() const { return uint8_t((raw >> 4) & 0x3); }
    bool operator==(const Feth&) const = default;
};

// Every header of one RoCE v2 frame. Only the extension headers that the opcode's table entry lists
// are meaningful (opcode.hpp).
struct Headers {
    EthHdr eth;
    bool ipv6 = false;
    Ipv4Hdr ip4;
    Ipv6Hdr ip6;
    UdpHdr udp;
    Bth bth;
    Deth deth;
    Feth feth;
    Reth reth;
    AtomicEth atomic;
    Aeth aeth;
    AtomicAckEth atomic_ack;
    uint32_t imm = 0;           // ImmDt, as a host-order number (wire is big-endian)
    uint32_t ieth_rkey = 0;     // IETH: the R_Key to invalidate
    std::array<uint8_t, kCnpLen> cnp_reserved{};
    bool operator==(const Headers&) const = default;
};

// RoCE v2 GIDs of IPv4 addresses are IPv4-mapped IPv6 addresses, ::ffff:a.b.c.d (IBTA Annex A17).
constexpr Ip6 ipv4_mapped_gid(uint32_t a) {
    return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, uint8_t(a >> 24), uint8_t(a >> 16), uint8_t(a >> 8), uint8_t(a)};
}
constexpr bool is_ipv4_mapped(const Ip6& g) {
    for (int i = 0; i < 10; ++i)
        if (g[size_t(i)]) return false;
    return g[10] == 0xff && g[11] == 0xff;
}
// fe80::/10 (RFC 4291 2.5.6): GID 0 of a RoCE port, derived from its MAC.
constexpr bool is_link_local(const Ip6& a) { return a[0] == 0xfe && (a[1] & 0xc0) == 0x80; }
constexpr uint32_t ipv4_of_mapped(const Ip6& g) {
    return uint32_t(g[12]) << 24 | uint32_t(g[13]) << 16 | uint32_t(g[14]) << 8 | g[15];
}

// UDP source port of a QP's traffic, as Linux chooses it: the port spreads QPs over ECMP paths and
// stays fixed per connection. At creation: 0xC000 | a 14-bit multiplicative hash of the QPN
// (hash_32 with the 32-bit golden ratio).
constexpr uint16_t udp_sport_for_qpn(uint32_t qpn) {
    return uint16_t(0xC000 | ((uint32_t(qpn * 0x61C88647u) >> (32 - 14)) & 0x3FFF));
}

// The IPv6-style flow label of a connection when the AH gives none: a hash of both QPNs, the same
// in both directions (Linux rdma_calc_flow_label).
constexpr uint32_t flow_label_for_qps(uint32_t lqpn, uint32_t rqpn) {
    uint64_t v = uint64_t(lqpn) * rqpn;
    v ^= v >> 20;
    v ^= v >> 40;
    return uint32_t(v & 0xFFFFF);
}

// Once connected (modify to RTR with an address vector): the port folds the 20-bit flow label into
// 14 bits, so both ends of an RC connection use the same source port (Linux rdma_get_udp_sport).
constexpr uint16_t udp_sport_for_flow(uint32_t flow_label, uint32_t lqpn, uint32_t rqpn) {
    const uint32_t fl = flow_label ? flow_label & 0xFFFFF : flow_label_for_qps(lqpn, rqpn);
    return uint16_t(0xC000 | ((fl & 0x3FFF) ^ (fl >> 14)));
}

}  // namespace hcaemu::pkt
