#include "packet/build.hpp"

#include <algorithm>
#include <cstring>

#include "packet/bytes.hpp"
#include "packet/icrc.hpp"
#include "packet/parse.hpp"

namespace hcaemu::pkt {

namespace {

// The extension headers the opcode carries, at x (just after the BTH).
void write_ext(const OpcodeInfo& oi, const Headers& h, uint8_t* x) {
    if (oi.has(Ext::deth)) {
        uint8_t* p = x + oi.ext_off[size_t(Ext::deth)];
        store_be32(p, h.deth.qkey);
        p[4] = h.deth.resv8;
        store_be24(p + 5, h.deth.src_qp & 0xFFFFFF);
    }
    if (oi.has(Ext::feth)) store_be32(x + oi.ext_off[size_t(Ext::feth)], h.feth.raw);
    if (oi.has(Ext::reth)) {
        uint8_t* p = x + oi.ext_off[size_t(Ext::reth)];
        store_be64(p, h.reth.va);
        store_be32(p + 8, h.reth.rkey);
        store_be32(p + 12, h.reth.dma_len);
    }
    if (oi.has(Ext::atomic_eth)) {
        uint8_t* p = x + oi.ext_off[size_t(Ext::atomic_eth)];
        store_be64(p, h.atomic.va);
        store_be32(p + 8, h.atomic.rkey);
        store_be64(p + 12, h.atomic.swap_add);
        store_be64(p + 20, h.atomic.compare);
    }
    if (oi.has(Ext::aeth)) {
        uint8_t* p = x + oi.ext_off[size_t(Ext::aeth)];
        p[0] = h.aeth.syndrome;
        store_be24(p + 1, h.aeth.msn & 0xFFFFFF);
    }
    if (oi.has(Ext::atomic_ack_eth)) store_be64(x + oi.ext_off[size_t(Ext::atomic_ack_eth)], h.atomic_ack.orig);
    if (oi.has(Ext::immdt)) store_be32(x + oi.ext_off[size_t(Ext::immdt)], h.imm);
    if (oi.has(Ext::ieth)) store_be32(x + oi.ext_off[size_t(Ext::ieth)], h.ieth_rkey);
    if (oi.has(Ext::cnp)) std::memcpy(x + oi.ext_off[size_t(Ext::cnp)], h.cnp_reserved.data(), kCnpLen);
}

}  // namespace

size_t header_len(const OpcodeInfo& op, bool vlan, bool ipv6) {
    return kEthLen + (vlan ? kVlanLen : 0) + (ipv6 ? kIpv6Len : kIpv4Len) + kUdpLen + kBthLen + op.ext_len;
}

size_t frame_len(const OpcodeInfo& op, bool vlan, bool ipv6, uint32_t payload_len) {
    return header_len(op, vlan, ipv6) + payload_len + pad_for(payload_len) + kIcrcLen;
}

BuildError build_headers(const Headers& h, uint32_t payload_len, std::span<uint8_t> out, size_t& hdr_len) {
    const OpcodeInfo& oi = opcode_info(h.bth.opcode);
    if (!oi.valid()) return BuildError::unknown_opcode;
    if (!oi.payload && payload_len != 0) return BuildError::payload_not_allowed;
    const uint8_t pad = pad_for(payload_len);
    const size_t l4_len = kUdpLen + kBthLen + oi.ext_len + size_t(payload_len) + pad + kIcrcLen;
    const size_t ip_len = h.ipv6 ? l4_len : kIpv4Len + l4_len;  // IPv6 counts the payload only
    if (ip_len > 0xFFFF) return BuildError::frame_too_long;
    const size_t hl = header_len(oi, h.eth.vlan, h.ipv6);
    if (out.size() < std::max(hl + payload_len + pad + kIcrcLen, kMinFrameLen)) return BuildError::buffer_too_small;

    uint8_t* f = out.data();
    std::memcpy(f, h.eth.dst.data(), 6);
    std::memcpy(f + 6, h.eth.src.data(), 6);
    size_t off = 12;
    if (h.eth.vlan) {
        store_be16(f + 12, kEthTypeVlan);
        store_be16(f + 14, h.eth.vlan_tci);
        off += kVlanLen;
    }
    store_be16(f + off, h.ipv6 ? kEthTypeIpv6 : kEthTypeIpv4);
    off += 2;

    uint8_t* ip = f + off;
    if (h.ipv6) {
        store_be32(ip, 6u << 28 | uint32_t(h.ip6.traffic_class) << 20 | (h.ip6.flow_label & 0xFFFFF));
        store_be16(ip + 4, uint16_t(ip_len));
        ip[6] = kIpProtoUdp;
        ip[7] = h.ip6.hop_limit;
        std::memcpy(ip + 8, h.ip6.src.data(), 16);
        std::memcpy(ip + 24, h.ip6.dst.data(), 16);
        off += kIpv6Len;
    } else {
        ip[0] = 0x45;
        ip[1] = h.ip4.tos;
        store_be16(ip + 2, uint16_t(ip_len));
        store_be16(ip + 4, h.ip4.id);
        store_be16(ip + 6, h.ip4.frag);
        ip[8] = h.ip4.ttl;
        ip[9] = kIpProtoUdp;
        store_be16(ip + 10, 0);
        store_be32(ip + 12, h.ip4.src);
        store_be32(ip + 16, h.ip4.dst);
        store_be16(ip + 10, ipv4_header_checksum(ip));
        off += kIpv4Len;
    }

    uint8_t* udp = f + off;
    store_be16(udp, h.udp.sport);
    store_be16(udp + 2, h.udp.dport);
    store_be16(udp + 4, uint16_t(l4_len));
    store_be16(udp + 6, 0);
    off += kUdpLen;

    const Bth& bth = h.bth;
    uint8_t* b = f + off;
    b[0] = bth.opcode;
    b[1] = uint8_t((bth.se ? 0x80 : 0) | (bth.mig ? 0x40 : 0) | pad << 4 | (bth.tver & 0xF));
    store_be16(b + 2, bth.pkey);
    b[4] = uint8_t((bth.fecn ? 0x80 : 0) | (bth.becn ? 0x40 : 0) | (bth.resv6 & 0x3F));
    store_be24(b + 5, bth.dest_qp & 0xFFFFFF);
    b[8] = uint8_t((bth.ack_req ? 0x80 : 0) | (bth.resv7 & 0x7F));
    store_be24(b + 9, bth.psn & 0xFFFFFF);
    off += kBthLen;

    write_ext(oi, h, f + off);
    hdr_len = hl;
    return BuildError::ok;
}

bool make_template(const Headers& h, FrameTemplate& t) {
    t = FrameTemplate{};
    Headers g = h;
    g.bth.opcode = op::rc | op::acknowledge;  // any opcode: its BTH fields are written per packet
    g.ip4.id = 0;
    std::array<uint8_t, FrameTemplate::kMaxLen + kAethLen + kIcrcLen + kMinFrameLen> buf{};
    size_t hl = 0;
    if (build_headers(g, 0, buf, hl) != BuildError::ok) return false;
    t.l3 = uint8_t(kEthLen + (h.eth.vlan ? kVlanLen : 0));
    t.ipv6 = h.ipv6;
    t.bth = uint8_t(t.l3 + (h.ipv6 ? kIpv6Len : kIpv4Len) + kUdpLen);
    std::memcpy(t.bytes.data(), buf.data(), t.bth + kBthLen);
    uint8_t* ip = t.bytes.data() + t.l3;
    if (!h.ipv6) {
        store_be16(ip + 2, 0);
        store_be16(ip + 10, 0);
        for (size_t i = 0; i < kIpv4Len; i += 2) t.ip4_sum += load_be16(ip + i);
    }
    icrc_flow_init(t.icrc, ip, h.ipv6);
    t.valid = true;
    return true;
}

BuildError build_headers_tmpl(const FrameTemplate& t, const Headers& h, uint32_t payload_len,
                              std::span<uint8_t> out, size_t& hdr_len) {
    const OpcodeInfo& oi = opcode_info(h.bth.opcode);
    if (!oi.valid()) return BuildError::unknown_opcode;
    if (!oi.payload && payload_len != 0) return BuildError::payload_not_allowed;
    const uint8_t pad = pad_for(payload_len);
    const size_t l4_len = kUdpLen + kBthLen + oi.ext_len + size_t(payload_len) + pad + kIcrcLen;
    const size_t ip_len = t.ipv6 ? l4_len : kIpv4Len + l4_len;
    if (ip_len > 0xFFFF) return BuildError::frame_too_long;
    const size_t hl = t.bth + kBthLen + oi.ext_len;
    if (out.size() < std::max(hl + payload_len + pad + kIcrcLen, kMinFrameLen)) return BuildError::buffer_too_small;
    uint8_t* f = out.data();
    std::memcpy(f, t.bytes.data(), t.bth + kBthLen);
    uint8_t* ip = f + t.l3;
    if (t.ipv6) {
        store_be16(ip + 4, uint16_t(ip_len));
    } else {
        store_be16(ip + 2, uint16_t(ip_len));
        store_be16(ip + 4, h.ip4.id);
        uint32_t sum = t.ip4_sum + uint32_t(ip_len) + h.ip4.id;  // RFC 1071: the fixed words' sum plus these
        sum = (sum & 0xFFFF) + (sum >> 16);
        sum = (sum & 0xFFFF) + (sum >> 16);
        store_be16(ip + 10, uint16_t(~sum));
    }
    store_be16(f + t.bth - kUdpLen + 4, uint16_t(l4_len));
    uint8_t* b = f + t.bth;
    b[0] = h.bth.opcode;
    b[1] = uint8_t((b[1] & 0x4F) | (h.bth.se ? 0x80 : 0) | pad << 4);  // MigReq and TVer stay
    b[8] = uint8_t((b[8] & 0x7F) | (h.bth.ack_req ? 0x80 : 0));
    store_be24(b + 9, h.bth.psn & 0xFFFFFF);
    write_ext(oi, h, b + kBthLen);
    hdr_len = hl;
    return BuildError::ok;
}

size_t build_finish(std::span<uint8_t> out, size_t hdr_len, uint32_t payload_len, bool ipv6,
                    const BuildOptions& opt, const IcrcFlow* flow, const uint32_t* icrc_so_far) {
    uint8_t* f = out.data();
    const size_t l3 = load_be16(f + 12) == kEthTypeVlan ? kEthLen + kVlanLen : kEthLen;
    const uint8_t pad = pad_for(payload_len);
    size_t end = hdr_len + payload_len;
    std::memset(f + end, 0, pad);
    end += pad;
    // The ICRC masks the UDP checksum: order free.
    store_le32(f + end, icrc_so_far ? (pad ? crc32(*icrc_so_far, f + end - pad, pad) : *icrc_so_far)
                        : flow      ? icrc_flow(*flow, f + l3, end - l3)
                                    : icrc(f + l3, end - l3, ipv6));
    end += kIcrcLen;
    if (opt.udp_checksum == UdpCsum::compute || (opt.udp_checksum == UdpCsum::standard && ipv6)) {
        uint8_t* udp = f + l3 + (ipv6 ? kIpv6Len : kIpv4Len);  // covers the ICRC: computed last
        store_be16(udp + 6, 0);
        const uint16_t c = udp_checksum(f + l3, ipv6);
        store_be16(udp + 6, c == 0 ? 0xFFFF : c);  // RFC 768: a computed 0 is sent as all ones
    }
    if (opt.pad_to_min && end < kMinFrameLen) {
        std::memset(f + end, 0, kMinFrameLen - end);
        end = kMinFrameLen;
    }
    return end;
}

BuildError build(const Headers& h, std::span<const uint8_t> payload, std::span<uint8_t> out,
                 size_t& len, const BuildOptions& opt) {
    size_t hl = 0;
    if (payload.size() > 0xFFFF) return BuildError::frame_too_long;
    const BuildError e = build_headers(h, uint32_t(payload.size()), out, hl);
    if (e != BuildError::ok) return e;
    if (!payload.empty()) std::memcpy(out.data() + hl, payload.data(), payload.size());
    len = build_finish(out, hl, uint32_t(payload.size()), h.ipv6, opt);
    return BuildError::ok;
}

}  // namespace hcaemu::pkt
