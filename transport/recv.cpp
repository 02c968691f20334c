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

}  // namespace

void Hca::receive(port::Frame& f) {
    pkt::Packet p;
    const pkt::ParseError e = pkt::parse({f.data, f.len}, p);
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
    QpCtx* c = ctx(p.h.bth.dest_qp);
    const QpState st = c ? c->qp->state() : QpState::reset;
    // Requests need RTR or later (SQE too: its receive side works on, IBTA 10.3.1); responses need
    // a send queue (RTS, SQD). CNPs are counted.
    const bool ok_state = p.op->request ? (st == QpState::rtr || st == QpState::rts || st == QpState::sqd ||
                                           st == QpState::sqe)
                                        : (st == QpState::rts || st == QpState::sqd);
    if (p.op->transport == pkt::Transport::cnp) {
        dev_.counters().add(Counter::rp_cnp_handled);
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
    dev_.counters().add(Counter::rcvd_pkts);
    dev_.counters().add(Counter::rcvd_bytes, f.len);
    if (p.op->request) resp_handle(*c, p);
    else comp_handle(*c, p);
}

}  // namespace hcaemu::transport
