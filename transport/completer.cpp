// The completer: handles the responses to this QP's requests (ACK, NAK, RNR NAK, READ response
// data, ATOMIC Acknowledge), retires WQEs strictly in order into the send CQ, and drives
// retransmission: the local ACK timeout, sequence-error NAKs, RNR waits and implied NAKs (IBTA 9.7).
#include <algorithm>
#include <cstring>

#include "transport/hca.hpp"
#include "transport/psn.hpp"

namespace hcaemu::transport {

namespace {

// Progress was made: the retry counters start over and the ACK timer restarts or stops.
void progress(Hca& hca, QpCtx& c) {
    // Until the first response to a restart arrives, responses from before it may still be on
    // the wire: gaps they imply are not new losses.
    if (c.restarted && psn_after(c.una, c.restart_psn)) c.restarted = false;
    c.retry_left = c.qp->attr.retry_cnt;
    c.rnr_left = c.qp->attr.rnr_retry;
    hca.timers().cancel(c.ack_timer);
    if (c.una != c.psn && c.qp->attr.timeout)
        hca.timers().arm(c.ack_timer, hca.now() + ack_timeout_ns(c.qp->attr.timeout));
    if (c.next_wqe < c.qp->sq.tail) hca.schedule(c);  // the window moved: more may go out
    hca.check_drained(c);
}

// Retires every WQE whose PSNs all lie before `psn`: a response with PSN p acknowledges every
// request before p (IBTA 9.7). A READ or atomic among them whose responses never came is an
// implied NAK: its responses were lost, so the requester asks again from the first missing one
// (IBTA 9.7). Returns false in that case.
bool retire_before(Hca& hca, QpCtx& c, uint32_t psn) {
    QpObj& q = *c.qp;
    while (q.sq.head < c.next_wqe) {
        const SendWqe& w = q.sq.at(q.sq.head);
        WqeTrack& t = c.track[q.sq.index(q.sq.head)];
        const uint32_t last = psn_add(t.first_psn, t.npsn - 1);
        if (!psn_before(last, psn)) break;
        if (w.opcode == WrOpcode::rdma_read || is_atomic(w.opcode)) {
            const uint32_t got = w.opcode == WrOpcode::rdma_read ? uint32_t(mtu_packets(t.read_rcvd, c.mtu)) : 0;
            const uint32_t need = psn_add(t.first_psn, got);
            if (!c.restarted) {  // once per gap
                hca.counters().add(Counter::implied_nak_seq_err);
                hca.req_restart(c, need);
            }
            c.una = need;
            return false;
        }
        t.started = false;
        hca.retire(c, WcStatus::success, wc_opcode_for(w.opcode), w.length);
    }
    if (psn_after(psn, c.una)) {
        // A READ at the head is acknowledged only as far as its responses came.
        c.una = psn;
        if (q.sq.head < c.next_wqe && q.sq.at(q.sq.head).opcode == WrOpcode::rdma_read) {
            const WqeTrack& t = c.track[q.sq.index(q.sq.head)];
            const uint32_t need = psn_add(t.first_psn, uint32_t(mtu_packets(t.read_rcvd, c.mtu)));
            if (psn_before(need, psn)) c.una = need;
        }
    }
    return true;
}

// One retry of retry_cnt for a timeout or a sequence error (IBTA 9.7: the transport retry
// counter). False when none is left: the head WQE then completed with RETRY_EXC_ERR.
bool spend_retry(Hca& hca, QpCtx& c, WcOpcode op) {
    if (c.retry_left == 0) {
        hca.counters().add(Counter::retry_exceeded_err);
        hca.fatal(c, WcStatus::retry_exc_err, op);
        return false;
    }
    --c.retry_left;
    return true;
}

}  // namespace

void Hca::comp_handle(QpCtx& c, const pkt::Packet& p) {
    QpObj& q = *c.qp;
    if (q.type != QpType::rc || c.una == c.psn) return;  // nothing outstanding: stale
    const uint32_t psn = p.h.bth.psn;
    // Responses before the oldest unacknowledged PSN, or beyond anything sent, are stale.
    if (psn_before(psn, c.una) || !psn_before(psn, c.psn)) return;
    const pkt::OpcodeInfo& oi = *p.op;
    if (oi.kind == pkt::Kind::ack) {
        const pkt::Aeth& a = p.h.aeth;
        switch (a.type()) {
        case pkt::AethType::ack:
            // Everything up to and including psn is acknowledged.
            if (tracing()) trace(TraceEvent{.kind = TraceKind::ack_received, .qpn = q.qpn, .psn = psn, .count = a.msn});
            if (retire_before(*this, c, psn_next(psn))) progress(*this, c);
            return;
        case pkt::AethType::rnr_nak: {
            // Receiver not ready: requests before psn arrived; wait the timer, resend from psn.
            const uint32_t old_una = c.una;
            if (!retire_before(*this, c, psn)) return;
            if (psn_after(c.una, old_una)) progress(*this, c);  // counters count failures in a row
            counters().add(Counter::rcvd_rnr_err);
            counters().add(Counter::rnr_nak_retry_err);
            if (c.rnr_left == 0) {
                counters().add(Counter::retry_rnr_exceeded_err);
                fatal(c, WcStatus::rnr_retry_exc_err, wc_opcode_for(q.sq.at(q.sq.head).opcode));
                return;
            }
            if (c.rnr_left != 7) --c.rnr_left;  // 7 means retry for ever (IBTA 9.7)
            timers_.cancel(c.ack_timer);
            c.rnr_wait = true;  // nothing goes out until the timer fires
            req_restart(c, psn);
            timers_.arm(c.rnr_timer, now() + rnr_timer_ns(a.value()));
            trace(TraceKind::rnr_wait, q.qpn, psn);
            return;
        }
        case pkt::AethType::nak: {
            const uint32_t old_una = c.una;
            if (!retire_before(*this, c, psn)) return;
            if (psn_after(c.una, old_una)) progress(*this, c);
            const auto code = pkt::NakCode(a.value());
            if (code == pkt::NakCode::psn_seq_error) {
                // The responder expected psn: resend from there (Go-Back-N); costs a retry.
                counters().add(Counter::packet_seq_err);
                if (!spend_retry(*this, c, wc_opcode_for(q.sq.at(q.sq.head).opcode))) return;
                req_restart(c, psn);
                return;
            }
            WcStatus st = WcStatus::rem_op_err;
            if (code == pkt::NakCode::invalid_request) {
                st = WcStatus::rem_inv_req_err;
                counters().add(Counter::req_remote_invalid_request);
            } else if (code == pkt::NakCode::remote_access_error) {
                st = WcStatus::rem_access_err;
                counters().add(Counter::req_remote_access_errors);
            }
            fatal(c, st, wc_opcode_for(q.sq.at(q.sq.head).opcode));
            return;
        }
        default: return;  // reserved syndrome: ignored
        }
    }

    // READ response or ATOMIC Acknowledge: first retire what lies before it.
    if (!retire_before(*this, c, psn)) return;
    if (q.sq.empty() || !c.track[q.sq.index(q.sq.head)].started) return;
    const SendWqe& w = q.sq.at(q.sq.head);
    WqeTrack& t = c.track[q.sq.index(q.sq.head)];
    const uint64_t n = q.sq.head;
    // The AETH of a READ response First, Last or Only and of an ATOMIC Acknowledge is an ACK: a
    // responder NAKs with an Acknowledge packet, never with response data (IBTA 9.7.5.2; rxe's
    // check_ack completes such a response in error).
    if (oi.has(pkt::Ext::aeth) && p.h.aeth.type() != pkt::AethType::ack) {
        fatal(c, WcStatus::bad_resp_err, wc_opcode_for(w.opcode));
        return;
    }
    if (oi.kind == pkt::Kind::atomic_ack) {
        if (!is_atomic(w.opcode) || psn != t.first_psn) {
            fatal(c, WcStatus::bad_resp_err, wc_opcode_for(w.opcode));
            return;
        }
        uint8_t orig[8];
        std::memcpy(orig, &p.h.atomic_ack.orig, 8);  // host order, as the responder read it
        if (dev_.dma().scatter(q.pd, q.send_sges(n), w.num_sge, 0, orig) != MrError::ok) {
            fatal(c, WcStatus::loc_prot_err, wc_opcode_for(w.opcode));
            return;
        }
        if (tracing()) {
            TraceEvent ev{.kind = TraceKind::dma_write, .qpn = q.qpn, .psn = psn, .bytes = 8, .count = 1,
                          .old_value = p.h.atomic_ack.orig};
            if (w.num_sge) {  // where the 8 bytes start
                ev.addr = q.send_sges(n)[0].addr;
                ev.key = q.send_sges(n)[0].lkey;
            }
            trace(ev);
        }
        --c.rd_atomic_out;
        c.una = psn_next(psn);
        t.started = false;
        retire(c, WcStatus::success, wc_opcode_for(w.opcode), 8);
        progress(*this, c);
        return;
    }
    if (oi.kind != pkt::Kind::rdma_read_response || w.opcode != WrOpcode::rdma_read) {
        fatal(c, WcStatus::bad_resp_err, wc_opcode_for(w.opcode));
        return;
    }
    // The next READ response must be exactly the next PSN of this READ (IBTA 9.7).
    const uint32_t want = psn_add(t.first_psn, uint32_t(mtu_packets(t.read_rcvd, c.mtu)));
    if (psn != want) {
        // A gap: responses were lost; ask again from the first missing, once per gap.
        if (psn_after(psn, want) && !c.restarted) {
            counters().add(Counter::implied_nak_seq_err);
            if (!spend_retry(*this, c, WcOpcode::rdma_read)) return;
            req_restart(c, want);
        }
        return;
    }
    const uint32_t remaining = w.length - t.read_rcvd;
    const bool last = oi.is_last();
    const uint32_t plen = p.payload_len;
    // First and Middle carry exactly one MTU; Last and Only carry the rest (IBTA 9.7).
    if ((last && plen != remaining) || (!last && (plen != c.mtu || plen >= remaining))) {
        fatal(c, WcStatus::bad_resp_err, WcOpcode::rdma_read);
        return;
    }
    if (plen && dev_.dma().scatter(q.pd, q.send_sges(n), w.num_sge, t.read_rcvd, p.payload()) != MrError::ok) {
        fatal(c, WcStatus::loc_prot_err, WcOpcode::rdma_read);
        return;
    }
    if (plen) trace_dma_sges(TraceKind::dma_write, q.qpn, psn, q.send_sges(n), w.num_sge, t.read_rcvd, plen);
    t.read_rcvd += plen;
    c.una = psn_next(psn);
    if (last) {
        --c.rd_atomic_out;
        t.started = false;
        retire(c, WcStatus::success, WcOpcode::rdma_read, w.length);
    }
    progress(*this, c);
    schedule(c);  // a READ slot freed may let the next WQE go
}

void Hca::comp_ack_timeout(QpCtx& c) {
    QpObj& q = *c.qp;
    if (q.state() != QpState::rts && q.state() != QpState::sqd) return;
    if (c.una == c.psn) return;  // everything was acknowledged meanwhile
    counters().add(Counter::local_ack_timeout_err);
    trace(TraceKind::ack_timeout, q.qpn, c.una);
    if (!spend_retry(*this, c, wc_opcode_for(q.sq.at(q.sq.head).opcode))) return;
    req_restart(c, c.una);
    timers_.arm(c.ack_timer, now() + ack_timeout_ns(q.attr.timeout));
}

void Hca::comp_rnr_done(QpCtx& c) {
    c.rnr_wait = false;
    if (c.qp->state() == QpState::rts || c.qp->state() == QpState::sqd) schedule(c);
}

void Hca::check_drained(QpCtx& c) {
    // SQD: drained once nothing started is unacknowledged; the event is asked for at RTS -> SQD.
    QpObj& q = *c.qp;
    if (q.state() != QpState::sqd || c.drained_sent || c.una != c.psn || c.next_off) return;
    c.drained_sent = true;
    if (q.attr.en_sqd_async_notify) dev_.raise(EventType::sq_drained, q.qpn);
}

}  // namespace hcaemu::transport
