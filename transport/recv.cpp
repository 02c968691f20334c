// Receive dispatch: parse and check each frame with the packet layer, find its QP by DestQP in the
// QP table, and hand requests to the responder and responses to the completer. Bad frames are
// counted by their parse error and dropped here.
#include "transport/hca.hpp"

namespace hcaemu::transport {

void Hca::receive(port::Frame& f) {
    pkt::Packet p;
    const pkt::ParseError e = pkt::parse({f.data, f.len}, p);
    if (e != pkt::ParseError::ok) {
        dev_.counters().rx_error(e);
        if (trace_fn_) trace_fn_(trace_ctx_, TraceEvent{.kind = TraceKind::rx_error, .frame = f.data, .len = f.len, .error = e});
        return;
    }
    if (trace_fn_) trace_fn_(trace_ctx_, TraceEvent{.kind = TraceKind::rx, .qpn = p.h.bth.dest_qp, .psn = p.h.bth.psn, .frame = f.data, .len = f.len});
    QpCtx* c = ctx(p.h.bth.dest_qp);
    const QpState st = c ? c->qp->state() : QpState::reset;
    // Requests need RTR or later; responses need a send queue (RTS, SQD). CNPs are counted.
    const bool ok_state = p.op->request ? (st == QpState::rtr || st == QpState::rts || st == QpState::sqd)
                                        : (st == QpState::rts || st == QpState::sqd);
    if (p.op->transport == pkt::Transport::cnp) {
        dev_.counters().add(Counter::rp_cnp_handled);
        return;
    }
    if (!c || !ok_state || p.h.bth.pkey != 0xFFFF ||
        uint8_t(p.op->transport) != uint8_t(c->qp->type) - uint8_t(QpType::rc)) {
        dev_.counters().add(Counter::rx_drop_no_qp);
        return;
    }
    dev_.counters().add(Counter::rcvd_pkts);
    dev_.counters().add(Counter::rcvd_bytes, f.len);
    if (p.op->request) resp_handle(*c, p);
    else comp_handle(*c, p);
}

}  // namespace hcaemu::transport
