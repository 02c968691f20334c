#include "packet/dissect.hpp"

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <string>
#include <utility>

#include "packet/bytes.hpp"
#include "packet/mad_dissect.hpp"

namespace hcaemu::pkt {

namespace {

__attribute__((format(printf, 2, 3))) void app(std::string& s, const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) s.append(buf, size_t(n) < sizeof buf ? size_t(n) : sizeof buf - 1);
}

std::string mac_str(const Mac& m) {
    char b[18];
    std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    return b;
}

std::string ip4_str(uint32_t a) {
    char b[16];
    std::snprintf(b, sizeof b, "%u.%u.%u.%u", a >> 24, (a >> 16) & 0xFF, (a >> 8) & 0xFF, a & 0xFF);
    return b;
}

// RFC 5952 text form (zero-run compression), as `ip -6` and tshark print it.
std::string ip6_str(const Ip6& a) {
    uint16_t w[8];
    for (int i = 0; i < 8; ++i) w[i] = load_be16(a.data() + 2 * i);
    int best = -1, best_len = 0;
    for (int i = 0; i < 8;) {
        int j = i;
        while (j < 8 && w[j] == 0) ++j;
        if (j - i > best_len && j - i >= 2) { best = i; best_len = j - i; }
        i = j == i ? i + 1 : j;
    }
    std::string s;
    for (int i = 0; i < 8; ++i) {
        if (i == best) {
            s += "::";
            i += best_len - 1;
            continue;
        }
        if (!s.empty() && s.back() != ':') s += ':';
        char b[6];
        std::snprintf(b, sizeof b, "%x", w[i]);
        s += b;
    }
    return s;
}

std::string src_str(const Headers& h) { return h.ipv6 ? ip6_str(h.ip6.src) : ip4_str(h.ip4.src); }
std::string dst_str(const Headers& h) { return h.ipv6 ? ip6_str(h.ip6.dst) : ip4_str(h.ip4.dst); }

std::string aeth_str(const Aeth& a, Lang lang) {
    char b[96];
    switch (a.type()) {
    case AethType::ack:
        if (a.value() == kAethCreditInvalid) return msg(Msg::dis_aeth_no_credit, lang);
        return msg(Msg::dis_aeth_credits, lang, {std::to_string(a.value()), std::to_string(kAethCredits[a.value()])});
    case AethType::rnr_nak: return msg(Msg::dis_aeth_rnr, lang, {std::to_string(a.value())});
    case AethType::nak: std::snprintf(b, sizeof b, "NAK (%s)", nak_code_name(a.value())); break;
    default: std::snprintf(b, sizeof b, "reserved (0x%02x)", a.syndrome); break;
    }
    return b;
}

void note(std::string& s, const DissectOptions& o, Msg m) {
    if (o.notes) app(s, "            . %s\n", text(m, o.lang));
}

void full(std::string& s, const Packet& p, ParseError e, uint64_t idx, double t, size_t flen,
          const DissectOptions& o) {
    const Headers& h = p.h;
    const Lang lg = o.lang;
    char tb[32];
    std::snprintf(tb, sizeof tb, "%.6f", t);
    s += msg(Msg::dis_frame, lg, {std::to_string(idx), std::to_string(flen), tb});
    if (decoded_opcode(e)) s += msg(Msg::dis_frame_opcode, lg, {p.op->name});
    if (e == ParseError::ok)
        s += text(Msg::dis_icrc_ok, lg);
    else if (e == ParseError::not_ip || e == ParseError::not_udp || e == ParseError::not_roce_port)
        s += msg(Msg::dis_not_roce, lg, {name(e)});
    else
        s += msg(Msg::dis_error, lg, {name(e)});
    s += '\n';
    if (e == ParseError::truncated_eth) return;
    app(s, "  Ethernet  dst %s  src %s", mac_str(h.eth.dst).c_str(), mac_str(h.eth.src).c_str());
    if (h.eth.vlan) app(s, "  802.1Q PCP %u DEI %u VID %u", h.eth.vlan_tci >> 13, (h.eth.vlan_tci >> 12) & 1, h.eth.vlan_tci & 0xFFF);
    app(s, "  type 0x%04x\n", h.eth.ethertype);
    if (!decoded_ip(e)) return;
    if (h.ipv6) {
        app(s, "  IPv6      %s -> %s  traffic class 0x%02x (DSCP %u, ECN %u)  flow label 0x%05x  hop limit %u  payload %u\n",
            src_str(h).c_str(), dst_str(h).c_str(), h.ip6.traffic_class, h.ip6.traffic_class >> 2,
            h.ip6.traffic_class & 3, h.ip6.flow_label, h.ip6.hop_limit, h.ip6.payload_len);
        note(s, o, Msg::dis_note_ip6);
    } else {
        app(s, "  IPv4      %s -> %s  TOS 0x%02x (DSCP %u, ECN %u)  ID 0x%04x  flags%s%s  TTL %u  length %u  checksum 0x%04x\n",
            src_str(h).c_str(), dst_str(h).c_str(), h.ip4.tos, h.ip4.tos >> 2, h.ip4.tos & 3, h.ip4.id,
            (h.ip4.frag & 0x4000) ? " DF" : "", (h.ip4.frag & 0x2000) ? " MF" : "", h.ip4.ttl,
            h.ip4.total_len, h.ip4.checksum);
        note(s, o, Msg::dis_note_ip4);
    }
    if (!decoded_udp(e)) return;
    app(s, "  UDP       sport %u -> dport %u  length %u  checksum 0x%04x%s\n", h.udp.sport, h.udp.dport,
        h.udp.length, h.udp.checksum, h.udp.checksum == 0 ? text(Msg::dis_udp_no_checksum, lg) : "");
    note(s, o, Msg::dis_note_udp);
    if (!decoded_bth(e)) return;
    const Bth& b = h.bth;
    app(s, "  BTH       OpCode 0x%02x (%s)  SE %u  M %u  PadCnt %u  TVer %u  P_Key 0x%04x  FECN %u  BECN %u  DestQP 0x%06x  AckReq %u  PSN %u (0x%06x)\n",
        b.opcode, decoded_opcode(e) ? p.op->name : "unknown", b.se, b.mig, b.pad_cnt, b.tver, b.pkey,
        b.fecn, b.becn, b.dest_qp, b.ack_req, b.psn, b.psn);
    note(s, o, Msg::dis_note_dest_qp);
    if (decoded_opcode(e) && !p.op->request && p.op->transport != Transport::cnp)
        note(s, o, Msg::dis_note_psn_response);
    else
        note(s, o, Msg::dis_note_psn_request);
    if (decoded_opcode(e) && o.notes) {
        const OpcodeInfo& oi = *p.op;
        std::string after = oi.exts ? "" : text(Msg::dis_none, lg);
        for (const auto& [x, nm] : {std::pair{Ext::deth, "DETH "}, {Ext::feth, "FETH "}, {Ext::reth, "RETH "},
                                    {Ext::atomic_eth, "AtomicETH "}, {Ext::aeth, "AETH "},
                                    {Ext::atomic_ack_eth, "AtomicAckETH "}, {Ext::immdt, "ImmDt "}, {Ext::ieth, "IETH "}})
            if (oi.has(x)) after += nm;
        if (oi.has(Ext::cnp)) after += text(Msg::dis_cnp_reserved, lg);
        s += "            . ";
        s += msg(Msg::dis_note_layout, lg, {kTransportName[size_t(oi.transport)],
                                            text(oi.request ? Msg::dis_request : Msg::dis_response, lg),
                                            kPositionName[size_t(oi.pos)], after});
        s += '\n';
    }
    if (b.ack_req) note(s, o, Msg::dis_note_ack_req);
    if (!decoded_all(e)) return;
    const OpcodeInfo& oi = *p.op;
    if (oi.has(Ext::deth)) {
        app(s, "  DETH      Q_Key 0x%08x  SrcQP 0x%06x\n", h.deth.qkey, h.deth.src_qp);
        note(s, o, Msg::dis_note_deth);
    }
    if (oi.has(Ext::feth)) app(s, "  FETH      selectivity %u  placement type %u\n", h.feth.selectivity(), h.feth.placement_type());
    if (oi.has(Ext::reth)) {
        app(s, "  RETH      VA 0x%016" PRIx64 "  R_Key 0x%08x  DMALen %u\n", h.reth.va, h.reth.rkey, h.reth.dma_len);
        note(s, o, Msg::dis_note_reth);
    }
    if (oi.has(Ext::atomic_eth)) {
        app(s, "  AtomicETH VA 0x%016" PRIx64 "  R_Key 0x%08x  %s 0x%016" PRIx64 "  Compare 0x%016" PRIx64 "\n",
            h.atomic.va, h.atomic.rkey, oi.kind == Kind::cmp_swap ? "Swap" : "Add", h.atomic.swap_add, h.atomic.compare);
        note(s, o, Msg::dis_note_atomic_eth);
    }
    if (oi.has(Ext::aeth)) {
        app(s, "  AETH      syndrome 0x%02x = %s  MSN %u\n", h.aeth.syndrome, aeth_str(h.aeth, lg).c_str(), h.aeth.msn);
        note(s, o, Msg::dis_note_aeth);
    }
    if (oi.has(Ext::atomic_ack_eth)) {
        app(s, "  AtomicAckETH original data 0x%016" PRIx64 "\n", h.atomic_ack.orig);
        note(s, o, Msg::dis_note_atomic_ack_eth);
    }
    if (oi.has(Ext::immdt)) {
        app(s, "  ImmDt     0x%08x\n", h.imm);
        note(s, o, Msg::dis_note_immdt);
    }
    if (oi.has(Ext::ieth)) {
        app(s, "  IETH      R_Key 0x%08x\n", h.ieth_rkey);
        note(s, o, Msg::dis_note_ieth);
    }
    if (oi.has(Ext::cnp)) {  // IBTA Annex A17.9.3: 16 reserved bytes, sent as zero
        std::string hex;
        for (uint8_t x : h.cnp_reserved) app(hex, "%02x", x);
        app(s, "  CNP       %s %s\n", text(Msg::dis_cnp_reserved, lg), hex.c_str());
        note(s, o, Msg::dis_note_cnp);
    }
    if (oi.payload) {
        s += msg(Msg::dis_payload, lg, {std::to_string(p.payload_len)});
        const auto pl = p.payload();
        const size_t n = pl.size() < o.payload_bytes ? pl.size() : o.payload_bytes;
        if (n) s += ':';
        for (size_t i = 0; i < n; ++i) app(s, " %02x", pl[i]);
        if (n < pl.size()) s += " ...";
        s += '\n';
        if (p.op->kind == Kind::rdma_read_response)
            note(s, o, Msg::dis_note_read_payload);
        else if (is_gsi_frame(p, e)) {  // a MAD: the GSI's receive WQE and its agent, not an MR
            if (check_gsi(p) == MadError::ok) note(s, o, Msg::mad_note_gmp_payload);  // else the GSI drops it
        } else
            note(s, o, Msg::dis_note_payload);
    }
    if (is_gsi_frame(p, e)) dissect_gmp(s, p, o);
    app(s, "  ICRC      0x%08x (%s)\n", p.icrc, text(e == ParseError::ok ? Msg::dis_ok : Msg::dis_bad, lg));
    note(s, o, Msg::dis_note_icrc);
}

void brief(std::string& s, const Packet& p, ParseError e, uint64_t idx, double t, size_t flen, bool prefix, Lang lang) {
    const Headers& h = p.h;
    if (prefix) app(s, "%6" PRIu64 " %11.6f ", idx, t);
    if (!decoded_udp(e)) {
        app(s, "%zu bytes, not RoCE v2 (%s)\n", flen, name(e));
        return;
    }
    app(s, "%s -> %s ", src_str(h).c_str(), dst_str(h).c_str());
    if (!decoded_opcode(e)) {
        app(s, "%zu bytes, ERROR %s\n", flen, name(e));
        return;
    }
    const Bth& b = h.bth;
    app(s, "%s QP=0x%06x PSN=%u", p.op->name, b.dest_qp, b.psn);
    if (b.ack_req) s += " AckReq";
    if (b.se) s += " SE";
    if (b.fecn) s += " FECN";
    if (b.becn) s += " BECN";
    if (decoded_all(e)) {
        const OpcodeInfo& oi = *p.op;
        if (oi.has(Ext::deth)) app(s, " QKey=0x%08x SrcQP=0x%06x", h.deth.qkey, h.deth.src_qp);
        if (oi.has(Ext::reth)) app(s, " VA=0x%" PRIx64 " RKey=0x%08x Len=%u", h.reth.va, h.reth.rkey, h.reth.dma_len);
        if (oi.has(Ext::atomic_eth)) app(s, " VA=0x%" PRIx64 " RKey=0x%08x SwapAdd=0x%" PRIx64 " Cmp=0x%" PRIx64, h.atomic.va, h.atomic.rkey, h.atomic.swap_add, h.atomic.compare);
        if (oi.has(Ext::aeth)) app(s, " %s MSN=%u", aeth_str(h.aeth, lang).c_str(), h.aeth.msn);
        if (oi.has(Ext::atomic_ack_eth)) app(s, " Orig=0x%" PRIx64, h.atomic_ack.orig);
        if (oi.has(Ext::immdt)) app(s, " Imm=0x%08x", h.imm);
        if (oi.has(Ext::ieth)) app(s, " InvRKey=0x%08x", h.ieth_rkey);
        if (oi.payload) app(s, " payload=%u", p.payload_len);
        if (is_gsi_frame(p, e)) dissect_gmp(s, p, DissectOptions{.format = DissectFormat::brief});
    }
    if (e != ParseError::ok) app(s, " ERROR %s", name(e));
    s += '\n';
}

void json(std::string& s, const Packet& p, ParseError e, uint64_t idx, double t, size_t flen) {
    const Headers& h = p.h;
    app(s, "{\"frame\":%" PRIu64 ",\"time\":%.9f,\"len\":%zu,\"status\":\"%s\"", idx, t, flen, name(e));
    if (e != ParseError::truncated_eth) {
        app(s, ",\"eth\":{\"dst\":\"%s\",\"src\":\"%s\",\"type\":%u", mac_str(h.eth.dst).c_str(), mac_str(h.eth.src).c_str(), h.eth.ethertype);
        if (h.eth.vlan) app(s, ",\"vlan_tci\":%u", h.eth.vlan_tci);
        s += '}';
    }
    if (decoded_ip(e)) {
        if (h.ipv6)
            app(s, ",\"ipv6\":{\"src\":\"%s\",\"dst\":\"%s\",\"traffic_class\":%u,\"flow_label\":%u,\"hop_limit\":%u,\"payload_len\":%u}",
                src_str(h).c_str(), dst_str(h).c_str(), h.ip6.traffic_class, h.ip6.flow_label, h.ip6.hop_limit, h.ip6.payload_len);
        else
            app(s, ",\"ipv4\":{\"src\":\"%s\",\"dst\":\"%s\",\"tos\":%u,\"id\":%u,\"frag\":%u,\"ttl\":%u,\"total_len\":%u,\"checksum\":%u}",
                src_str(h).c_str(), dst_str(h).c_str(), h.ip4.tos, h.ip4.id, h.ip4.frag, h.ip4.ttl, h.ip4.total_len, h.ip4.checksum);
    }
    if (decoded_udp(e))
        app(s, ",\"udp\":{\"sport\":%u,\"dport\":%u,\"length\":%u,\"checksum\":%u}", h.udp.sport, h.udp.dport, h.udp.length, h.udp.checksum);
    if (decoded_bth(e)) {
        const Bth& b = h.bth;
        app(s, ",\"bth\":{\"opcode\":%u,\"name\":\"%s\",\"se\":%u,\"mig\":%u,\"pad_cnt\":%u,\"tver\":%u,\"pkey\":%u,\"fecn\":%u,\"becn\":%u,\"dest_qp\":%u,\"ack_req\":%u,\"psn\":%u}",
            b.opcode, decoded_opcode(e) ? p.op->name : "unknown", b.se, b.mig, b.pad_cnt, b.tver, b.pkey, b.fecn, b.becn, b.dest_qp, b.ack_req, b.psn);
    }
    if (decoded_all(e)) {
        const OpcodeInfo& oi = *p.op;
        if (oi.has(Ext::deth)) app(s, ",\"deth\":{\"qkey\":%u,\"src_qp\":%u}", h.deth.qkey, h.deth.src_qp);
        if (oi.has(Ext::feth)) app(s, ",\"feth\":{\"selectivity\":%u,\"placement_type\":%u}", h.feth.selectivity(), h.feth.placement_type());
        if (oi.has(Ext::reth)) app(s, ",\"reth\":{\"va\":%" PRIu64 ",\"rkey\":%u,\"dma_len\":%u}", h.reth.va, h.reth.rkey, h.reth.dma_len);
        if (oi.has(Ext::atomic_eth)) app(s, ",\"atomic_eth\":{\"va\":%" PRIu64 ",\"rkey\":%u,\"swap_add\":%" PRIu64 ",\"compare\":%" PRIu64 "}", h.atomic.va, h.atomic.rkey, h.atomic.swap_add, h.atomic.compare);
        if (oi.has(Ext::aeth)) app(s, ",\"aeth\":{\"syndrome\":%u,\"type\":\"%s\",\"value\":%u,\"msn\":%u}", h.aeth.syndrome, aeth_type_name(h.aeth.type()), h.aeth.value(), h.aeth.msn);
        if (oi.has(Ext::atomic_ack_eth)) app(s, ",\"atomic_ack_eth\":{\"orig\":%" PRIu64 "}", h.atomic_ack.orig);
        if (oi.has(Ext::immdt)) app(s, ",\"imm\":%u", h.imm);
        if (oi.has(Ext::ieth)) app(s, ",\"ieth_rkey\":%u", h.ieth_rkey);
        if (oi.has(Ext::cnp)) {
            s += ",\"cnp\":{\"reserved\":\"";
            for (uint8_t x : h.cnp_reserved) app(s, "%02x", x);
            s += "\"}";
        }
        app(s, ",\"payload_len\":%u,\"icrc\":%u,\"icrc_ok\":%s", p.payload_len, p.icrc, e == ParseError::ok ? "true" : "false");
        if (is_gsi_frame(p, e)) dissect_gmp(s, p, DissectOptions{.format = DissectFormat::json});
    }
    s += "}\n";
}

}  // namespace

void dissect(std::string& out, const Packet& p, ParseError e, size_t frame_len, uint64_t index,
             double time_s, const DissectOptions& opt) {
    switch (opt.format) {
    case DissectFormat::full: full(out, p, e, index, time_s, frame_len, opt); break;
    case DissectFormat::brief: brief(out, p, e, index, time_s, frame_len, opt.brief_prefix, opt.lang); break;
    case DissectFormat::json: json(out, p, e, index, time_s, frame_len); break;
    }
}

void DissectSummary::add(const Packet& p, ParseError e) {
    ++frames;
    ++by_error[size_t(e)];
    if (e == ParseError::ok) {
        ++roce;
        ++icrc_ok;
    }
    if (decoded_opcode(e)) ++by_opcode[p.h.bth.opcode];
    if (is_gsi_frame(p, e)) {
        ++gmp;
        if (!check_gmp(p).ok()) ++gmp_bad;
    }
}

void DissectSummary::print(std::string& s, DissectFormat f, Lang lang) const {
    if (f == DissectFormat::json) {
        app(s, "{\"summary\":{\"frames\":%" PRIu64 ",\"roce_ok\":%" PRIu64 ",\"opcodes\":{", frames, roce);
        bool first = true;
        for (size_t i = 0; i < 256; ++i)
            if (by_opcode[i]) {
                app(s, "%s\"%s\":%" PRIu64, first ? "" : ",", kOpcodeTable[i].id, by_opcode[i]);
                first = false;
            }
        s += "},\"errors\":{";
        first = true;
        for (size_t i = 1; i < kParseErrorCount; ++i)
            if (by_error[i]) {
                app(s, "%s\"%s\":%" PRIu64, first ? "" : ",", kParseErrorName[i], by_error[i]);
                first = false;
            }
        app(s, "},\"gmp\":%" PRIu64 ",\"gmp_bad\":%" PRIu64 "}}\n", gmp, gmp_bad);
        return;
    }
    s += '\n';
    s += msg(Msg::dis_summary, lang, {std::to_string(frames), std::to_string(roce)});
    s += '\n';
    for (size_t i = 0; i < 256; ++i)
        if (by_opcode[i]) app(s, "  0x%02x %-36s %" PRIu64 "\n", unsigned(i), kOpcodeTable[i].name, by_opcode[i]);
    for (size_t i = 1; i < kParseErrorCount; ++i)
        if (by_error[i]) app(s, "  %s %-30s %" PRIu64 "\n", text(Msg::dis_summary_error, lang), kParseErrorName[i], by_error[i]);
    if (gmp) {
        s += msg(Msg::dis_summary_gmp, lang, {std::to_string(gmp), std::to_string(gmp_bad)});
        s += '\n';
    }
}

}  // namespace hcaemu::pkt
