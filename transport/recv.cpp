// Receive dispatch: parse and check each frame with the packet layer, find its QP by DestQP in the
// QP table, and hand requests to the responder and responses to the completer. Bad frames are
// counted by their parse error and dropped here.
#include "transport/hca.hpp"

namespace hcaemu::transport {

namespace {

// The packet came from the connection's peer to this end: its IP source is the template's
// destination and its destination the template's source, in the same IP version.
bool from_peer(const pkt::Headers& t, const pkt::Headers& h) {
    if (h.ipv6 != t.ipv6) return false;
    if (h.ipv6) return h.ip6.src == t.ip6.dst && h.ip6.dst == t.ip6.src;
    return h.ip4.src == t.ip4.dst && h.ip4.dst == t.ip4.src;
}

constexpr pkt::ParseOptions kNoIcrc{.verify_icrc = false};  // checked below, once the QP is known

// How a packet's ICRC was checked: without a QP, or with one from its learnt header, or in full.
enum class IcrcPath : uint8_t { no_qp, from_flow, full };

// The ICRC check parse() leaves out (its last check, so the errors keep their order). A packet
// that repeats the header its QP last learnt is checked from there.
pkt::ParseError check_icrc(const pkt::Packet& p, const QpCtx* c, IcrcPath& path) {
    const uint8_t* l3 = p.frame + p.l3_off;
    const size_t n = p.len - pkt::kIcrcLen - p.l3_off;
    uint32_t v;
    if (c && c->rx_flow.valid && c->rx_flow.ipv6 == p.h.ipv6 && pkt::icrc_flow_matches(c->rx_flow, l3)) {
        v = pkt::icrc_flow(c->rx_flow, l3, n);
        path = IcrcPath::from_flow;
    } else {
        v = pkt::icrc(l3, n, p.h.ipv6);
        path = c ? IcrcPath::full : IcrcPath::no_qp;
    }
    return v == p.icrc ? pkt::ParseError::ok : pkt::ParseError::bad_icrc;
}

// Learnt from a packet that passed every check and was checked in full (its header not the learnt
// one). RC and UC: at once. UD takes any source: it keeps a sender's header until kUdRelearn
// packets in a row did not match it, so that senders taking turns do not relearn at each packet
// and a sender that left is replaced.
constexpr uint8_t kUdRelearn = 16;
void learn_flow(QpCtx& c, const pkt::Packet& p, IcrcPath path) {
    if (path == IcrcPath::from_flow) {
        c.rx_flow_misses = 0;
        return;
    }
    if (c.qp->type == QpType::ud && c.rx_flow.valid && ++c.rx_flow_misses < kUdRelearn) return;
    c.rx_flow_misses = 0;
    pkt::icrc_flow_init(c.rx_flow, p.frame + p.l3_off, p.h.ipv6);
}

}  // namespace

void Hca::receive(port::Frame& f) {
    pkt::Packet p;
    pkt::ParseError e = pkt::parse({f.data, f.len}, p, kNoIcrc);
    QpCtx* c = nullptr;
    IcrcPath icrc_path = IcrcPath::no_qp;
    if (e == pkt::ParseError::ok) {
        c = ctx(p.h.bth.dest_qp);
        e = check_icrc(p, c, icrc_path);
        if (icrc_path == IcrcPath::from_flow) dev_.counters().add(Counter::rx_icrc_flow);
    }
    if (e != pkt::ParseError::ok) {
        dev_.counters().rx_error(e);
        if (trace_fn_) trace_fn_(trace_ctx_, TraceEvent{.kind = TraceKind::rx_error, .frame = f.data, .len = f.len, .error = e});
        return;
    }
    if (trace_fn_) trace_fn_(trace_ctx_, TraceEvent{.kind = TraceKind::rx, .qpn = p.h.bth.dest_qp, .psn = p.h.bth.psn, .frame = f.data, .len = f.len});
    if (p.h.bth.dest_qp == pkt::kGsiQpn) {  // QP1, the GSI: gsi.cpp
        gsi_receive(p, f.len);
        return;
    }
    const QpState st = c ? c->qp->state() : QpState::reset;
    // Requests need RTR or later (SQE too: its receive side works on, IBTA 10.3.1); responses need
    // a send queue (RTS, SQD). CNPs go to DCQCN.
    const bool ok_state = p.op->request ? (st == QpState::rtr || st == QpState::rts || st == QpState::sqd ||
                                           st == QpState::sqe)
                                        : (st == QpState::rts || st == QpState::sqd);
    if (p.op->transport == pkt::Transport::cnp) {  // IBTA A17.9.3: to DCQCN's reaction point
        dcqcn_cnp(*this, c, c && c->qp->type != QpType::ud && from_peer(c->tmpl, p.h));
        return;
    }
    if (!c || !ok_state || uint8_t(p.op->transport) != uint8_t(c->qp->type) - uint8_t(QpType::rc)) {
        dev_.counters().add(Counter::rx_drop_no_qp);
        return;
    }
    // RC and UC: only the QP's peer, to the QP's own address (rxe's check_addr: the source is the
    // path's destination GID, the destination its source GID), so that no other host that guesses
    // a QPN and PSN can inject into the connection. UD takes any source.
    if (c->qp->type != QpType::ud && !from_peer(c->tmpl, p.h)) {
        dev_.counters().add(Counter::rx_drop_addr);
        return;
    }
    if (!pkey_match(p.h.bth.pkey, c->pkey)) {  // IBTA 10.9.3
        dev_.counters().add(Counter::pkey_violations);
        return;
    }
    learn_flow(*c, p, icrc_path);
    dev_.counters().add(Counter::rcvd_pkts);
    dev_.counters().add(Counter::rcvd_bytes, f.len);
    // ECN CE (RFC 3168 5: both bits set) makes DCQCN's notification point answer; the packet goes on.
    if (((p.h.ipv6 ? p.h.ip6.traffic_class : p.h.ip4.tos) & 3) == 3) dcqcn_ce_marked(*this, *c);
    if (p.op->request) resp_handle(*c, p);
    else comp_handle(*c, p);
}

}  // namespace hcaemu::transport
