#include "packet/parse.hpp"

#include <bit>

#include "packet/bytes.hpp"
#include "packet/icrc.hpp"

namespace hcaemu::pkt {

namespace {

uint32_t inet_sum(const uint8_t* p, size_t n, uint32_t sum) {
    for (; n >= 2; p += 2, n -= 2) sum += load_be16(p);
    if (n) sum += uint32_t(p[0]) << 8;
    return sum;
}

uint16_t inet_fold(uint32_t sum) {
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    return uint16_t(~sum);
}

}  // namespace

// Five 32-bit words in native order, folded: the one's complement sum is the same in either byte
// order, swapped (RFC 1071 2(B)), so one swap at the end stands for one per 16-bit word.
uint16_t ipv4_header_checksum(const uint8_t* ip) {
    uint64_t sum = 0;
    for (size_t i = 0; i < kIpv4Len; i += 4) {
        uint32_t w;
        std::memcpy(&w, ip + i, 4);
        sum += w;
    }
    sum = (sum & 0xFFFFFFFF) + (sum >> 32);  // at most 33 bits
    sum = (sum & 0xFFFFFFFF) + (sum >> 32);  // 32
    const uint16_t r = inet_fold(uint32_t(sum));  // in the words' memory order
    return std::endian::native == std::endian::big ? r : uint16_t(r << 8 | r >> 8);
}

uint16_t udp_checksum(const uint8_t* l3, bool ipv6) {
    // RFC 768 / RFC 8200 8.1 pseudo header: addresses, protocol, UDP length.
    const uint8_t* udp = l3 + (ipv6 ? kIpv6Len : kIpv4Len);
    const uint16_t ulen = load_be16(udp + 4);
    uint32_t sum = ipv6 ? inet_sum(l3 + 8, 32, 0) : inet_sum(l3 + 12, 8, 0);
    sum += kIpProtoUdp + ulen;
    return inet_fold(inet_sum(udp, ulen, sum));
}

ParseError parse(std::span<const uint8_t> frame, Packet& out, const ParseOptions& opt) {
    const uint8_t* f = frame.data();
    const size_t n = frame.size();
    Headers& h = out.h;
    out.frame = f;

    // Ethernet II, optionally one 802.1Q tag.
    if (n < kEthLen) return ParseError::truncated_eth;
    std::memcpy(h.eth.dst.data(), f, 6);
    std::memcpy(h.eth.src.data(), f + 6, 6);
    size_t off = 12;
    uint16_t type = load_be16(f + off);
    h.eth.vlan = type == kEthTypeVlan;
    if (h.eth.vlan) {
        if (n < kEthLen + kVlanLen) return ParseError::truncated_eth;
        h.eth.vlan_tci = load_be16(f + 14);
        type = load_be16(f + 16);
        off += kVlanLen;
    } else {
        h.eth.vlan_tci = 0;
    }
    h.eth.ethertype = type;
    off += 2;
    out.l3_off = uint16_t(off);

    // IP. `end` is where the IP packet ends; bytes after it are Ethernet padding.
    const uint8_t* ip = f + off;
    size_t end;
    if (type == kEthTypeIpv4) {
        h.ipv6 = false;
        if (n < off + kIpv4Len) return ParseError::truncated_ip;
        if ((ip[0] >> 4) != 4) return ParseError::bad_ip_version;
        if ((ip[0] & 0xF) != 5) return ParseError::bad_ihl;
        Ipv4Hdr& v4 = h.ip4;
        v4.tos = ip[1];
        v4.total_len = load_be16(ip + 2);
        v4.id = load_be16(ip + 4);
        v4.frag = load_be16(ip + 6);
        v4.ttl = ip[8];
        v4.checksum = load_be16(ip + 10);
        v4.src = load_be32(ip + 12);
        v4.dst = load_be32(ip + 16);
        if (v4.total_len < kIpv4Len || off + v4.total_len > n) return ParseError::bad_ip_length;
        if (opt.verify_ip_checksum && ipv4_header_checksum(ip) != 0) return ParseError::bad_ipv4_checksum;
        if (v4.frag & 0x3FFF) return ParseError::ip_fragment;  // MF or an offset
        if (ip[9] != kIpProtoUdp) return ParseError::not_udp;
        end = off + v4.total_len;
        off += kIpv4Len;
    } else if (type == kEthTypeIpv6) {
        h.ipv6 = true;
        if (n < off + kIpv6Len) return ParseError::truncated_ip;
        if ((ip[0] >> 4) != 6) return ParseError::bad_ip_version;
        Ipv6Hdr& v6 = h.ip6;
        const uint32_t w = load_be32(ip);
        v6.traffic_class = uint8_t(w >> 20);
        v6.flow_label = w & 0xFFFFF;
        v6.payload_len = load_be16(ip + 4);
        v6.hop_limit = ip[7];
        std::memcpy(v6.src.data(), ip + 8, 16);
        std::memcpy(v6.dst.data(), ip + 24, 16);
        if (off + kIpv6Len + v6.payload_len > n) return ParseError::bad_ip_length;
        if (ip[6] != kIpProtoUdp) return ParseError::not_udp;  // extension headers not accepted
        end = off + kIpv6Len + v6.payload_len;
        off += kIpv6Len;
    } else {
        return ParseError::not_ip;
    }

    // UDP.
    out.l4_off = uint16_t(off);
    if (end < off + kUdpLen) return ParseError::bad_ip_length;
    const uint8_t* udp = f + off;
    h.udp.sport = load_be16(udp);
    h.udp.dport = load_be16(udp + 2);
    h.udp.length = load_be16(udp + 4);
    h.udp.checksum = load_be16(udp + 6);
    if (h.udp.length != end - off) return ParseError::bad_udp_length;
    if (h.udp.dport != kRoceV2Port) return ParseError::not_roce_port;
    if (opt.verify_udp_checksum && h.udp.checksum != 0 && udp_checksum(ip, h.ipv6) != 0)
        return ParseError::bad_udp_checksum;
    off += kUdpLen;

    // BTH, IBTA 9.2.
    out.bth_off = uint16_t(off);
    if (end < off + kBthLen) return ParseError::truncated_bth;
    const uint8_t* b = f + off;
    Bth& bth = h.bth;
    bth.opcode = b[0];
    bth.se = b[1] & 0x80;
    bth.mig = b[1] & 0x40;
    bth.pad_cnt = (b[1] >> 4) & 3;
    bth.tver = b[1] & 0xF;
    bth.pkey = load_be16(b + 2);
    bth.fecn = b[4] & 0x80;
    bth.becn = b[4] & 0x40;
    bth.resv6 = b[4] & 0x3F;
    bth.dest_qp = load_be24(b + 5);
    bth.ack_req = b[8] & 0x80;
    bth.resv7 = b[8] & 0x7F;
    bth.psn = load_be24(b + 9);
    if (bth.tver != 0) return ParseError::bad_tver;
    const OpcodeInfo& oi = opcode_info(bth.opcode);
    if (!oi.valid()) return ParseError::unknown_opcode;
    out.op = &oi;
    off += kBthLen;

    // Extension headers in table order, then payload, pad and ICRC.
    if (end < off + oi.ext_len + kIcrcLen) return ParseError::truncated_headers;
    const size_t data_len = end - off - oi.ext_len - kIcrcLen;  // payload + pad
    if (!oi.payload && data_len != 0) return ParseError::unexpected_payload;
    if (bth.pad_cnt > data_len) return ParseError::bad_pad_count;
    const uint8_t* x = f + off;
    if (oi.exts) {
        if (oi.has(Ext::deth)) {
            const uint8_t* p = x + oi.ext_off[size_t(Ext::deth)];
            h.deth.qkey = load_be32(p);
            h.deth.resv8 = p[4];
            h.deth.src_qp = load_be24(p + 5);
        }
        if (oi.has(Ext::feth)) h.feth.raw = load_be32(x + oi.ext_off[size_t(Ext::feth)]);
        if (oi.has(Ext::reth)) {
            const uint8_t* p = x + oi.ext_off[size_t(Ext::reth)];
            h.reth.va = load_be64(p);
            h.reth.rkey = load_be32(p + 8);
            h.reth.dma_len = load_be32(p + 12);
        }
        if (oi.has(Ext::atomic_eth)) {
            const uint8_t* p = x + oi.ext_off[size_t(Ext::atomic_eth)];
            h.atomic.va = load_be64(p);
            h.atomic.rkey = load_be32(p + 8);
            h.atomic.swap_add = load_be64(p + 12);
            h.atomic.compare = load_be64(p + 20);
        }
        if (oi.has(Ext::aeth)) {
            const uint8_t* p = x + oi.ext_off[size_t(Ext::aeth)];
            h.aeth.syndrome = p[0];
            h.aeth.msn = load_be24(p + 1);
        }
        if (oi.has(Ext::atomic_ack_eth)) h.atomic_ack.orig = load_be64(x + oi.ext_off[size_t(Ext::atomic_ack_eth)]);
        if (oi.has(Ext::immdt)) h.imm = load_be32(x + oi.ext_off[size_t(Ext::immdt)]);
        if (oi.has(Ext::ieth)) h.ieth_rkey = load_be32(x + oi.ext_off[size_t(Ext::ieth)]);
        if (oi.has(Ext::cnp)) std::memcpy(h.cnp_reserved.data(), x + oi.ext_off[size_t(Ext::cnp)], kCnpLen);
    }
    off += oi.ext_len;
    out.payload_off = uint16_t(off);
    out.payload_len = uint32_t(data_len - bth.pad_cnt);
    out.len = uint32_t(end);
    out.icrc = load_le32(f + end - kIcrcLen);

    if (opt.verify_icrc && icrc(ip, end - kIcrcLen - out.l3_off, h.ipv6) != out.icrc)
        return ParseError::bad_icrc;
    return ParseError::ok;
}

}  // namespace hcaemu::pkt
