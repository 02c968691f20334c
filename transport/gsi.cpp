// QP1, the General Services Interface (IBTA 13.5) on RoCE v2: UD, Q_Key 0x80010000, on every port
// and for every GID of it. It takes one 256-byte MAD per UD SEND Only, checks the carriage and the
// common header, and hands the CM class to the CM agent. What no agent serves is answered as IBTA
// 13.4.7 says for a Get/Set (GetResp, Status "class or method not supported") or dropped; every
// case is counted.
#include <algorithm>

#include "transport/hca.hpp"

namespace hcaemu::transport {

namespace {

Gid src_gid(const pkt::Headers& h) { return h.ipv6 ? h.ip6.src : pkt::ipv4_mapped_gid(h.ip4.src); }
Gid dst_gid(const pkt::Headers& h) { return h.ipv6 ? h.ip6.dst : pkt::ipv4_mapped_gid(h.ip4.dst); }

}  // namespace

void Hca::gsi_receive(const pkt::Packet& p, uint32_t len) {
    Counters& cn = dev_.counters();
    const pkt::MadError ge = pkt::check_gsi(p);
    if (ge == pkt::MadError::bad_gsi_qkey) {  // IBTA 13.5, Q_Key check 10.2.4
        cn.add(Counter::qkey_violations);
        cn.add(Counter::gsi_drop_qkey);
        return;
    }
    if (ge != pkt::MadError::ok) {
        cn.add(Counter::gsi_drop_malformed);
        return;
    }
    // The P_Key must be one of the port's (IBTA 10.9.3); the response carries the request's.
    bool pkey_ok = false;
    for (uint32_t i = 0; dev_.pkey(i) != 0 && !pkey_ok; ++i) pkey_ok = pkey_match(p.h.bth.pkey, dev_.pkey(i));
    if (!pkey_ok) {
        cn.add(Counter::pkey_violations);
        return;
    }
    pkt::MadHdr mh;
    const auto mad = p.payload().first<pkt::kMadLen>();
    if (pkt::parse_mad_hdr(mad, mh) != pkt::MadError::ok) {  // BaseVersion not 1
        cn.add(Counter::gsi_drop_malformed);
        return;
    }
    cn.add(Counter::rcvd_pkts);
    cn.add(Counter::rcvd_bytes, len);
    const bool get_set = mh.method == pkt::mad_method::get || mh.method == pkt::mad_method::set;
    if (mh.mgmt_class == pkt::kMgmtClassCm && cm_fn_ && !get_set) {
        cn.add(Counter::gsi_rcvd_mads);
        GsiRecv r{.mad = mad, .sgid = src_gid(p.h), .dgid = dst_gid(p.h), .smac = p.h.eth.src,
                  .src_qp = p.h.deth.src_qp, .pkey = p.h.bth.pkey,
                  .traffic_class = p.h.ipv6 ? p.h.ip6.traffic_class : p.h.ip4.tos};
        cm_fn_(cm_ctx_, r);
        return;
    }
    if (!get_set) {  // a Send, Trap or response nobody takes: dropped (IBTA 13.4.6.2)
        cn.add(Counter::gsi_drop_unsupported);
        return;
    }
    // The CM class serves no Get/Set (Linux's CM registers for Send only): the method/attribute
    // combination is not supported; any other class is not served at all.
    gsi_answer_unsupported(p, mh.mgmt_class == pkt::kMgmtClassCm && cm_fn_ ? pkt::mad_status::unsupported_method_attr
                                                                            : pkt::mad_status::unsupported_method);
}

// IBTA 13.4.7: the request comes back as a GetResp (R bit set, same TID, class and attribute)
// with the Status code set.
void Hca::gsi_answer_unsupported(const pkt::Packet& p, uint16_t status) {
    std::array<uint8_t, pkt::kMadLen> m;
    std::copy_n(p.payload().data(), pkt::kMadLen, m.begin());
    m[3] = pkt::mad_method::get_resp;
    m[4] = uint8_t(status >> 8);
    m[5] = uint8_t(status);
    const GsiDest d{.sgid = dst_gid(p.h), .dgid = src_gid(p.h), .dest_qp = p.h.deth.src_qp, .pkey = p.h.bth.pkey,
                    .dmac = &p.h.eth.src};
    if (send_mad(d, m)) dev_.counters().add(Counter::gsi_unsupported_answered);
}

bool Hca::send_mad(const GsiDest& d, std::span<const uint8_t, pkt::kMadLen> mad) {
    pkt::Headers h;
    route_headers({d.sgid, d.dgid, d.traffic_class, 0, d.hop_limit, d.dmac}, h);
    h.udp.sport = pkt::udp_sport_for_qpn(pkt::kGsiQpn);
    h.bth.opcode = pkt::op::ud | pkt::op::send_only;
    h.bth.dest_qp = d.dest_qp;
    h.bth.pkey = d.pkey;
    h.bth.psn = gsi_psn_;
    gsi_psn_ = (gsi_psn_ + 1) & 0xFFFFFF;
    h.deth.qkey = pkt::kGsiQkey;  // IBTA 13.5
    h.deth.src_qp = pkt::kGsiQpn;
    const Tx t = send(h, uint32_t(pkt::kMadLen), [&](std::span<uint8_t> out) {
        std::copy(mad.begin(), mad.end(), out.begin());
        return true;
    });
    if (t != Tx::ok) {
        dev_.counters().add(Counter::gsi_tx_no_buffer);
        return false;
    }
    dev_.counters().add(Counter::gsi_sent_mads);
    tx_flush();  // a MAD leaves now, not at the next engine turn (the agent sends between turns)
    return true;
}

}  // namespace hcaemu::transport
