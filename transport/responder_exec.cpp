// The responder's execute steps (rxe execute, read_reply, atomic_reply): a request that passed
// every check of responder.cpp is carried out here, and the READ responses and atomic ACKs it
// owes go out in the QP's turn, in PSN order, under the tx budget.
#include <algorithm>

#include "transport/hca.hpp"
#include "transport/psn.hpp"

namespace hcaemu::transport {

namespace {

uint8_t nak(pkt::NakCode code) { return pkt::aeth_syndrome(pkt::AethType::nak, uint8_t(code)); }

}  // namespace

// SEND (rxe send_data_in): the payload into the receive WQE after the bytes placed so far; the
// Last completes the WQE. A message longer than the WQE completes it with a local length error
// and is an invalid request. SEND with Invalidate: a peer may invalidate only type 2 memory
// windows and fast-registered MRs (IBTA), and hcaemu has neither, so it fails as rxe's
// rxe_invalidate_mr does for an MR of the user type: the WQE completes with REM_INV_REQ_ERR and
// the QP goes to ERR (rxe: class J). hcaemu NAKs it Invalid Request as well, where rxe sends only
// the ACK asked for: the requester must not believe the key dead.
Hca::RespResult Hca::resp_execute_send(QpCtx& c, const pkt::Packet& p) {
    QpObj& q = *c.qp;
    const pkt::OpcodeInfo& oi = *p.op;
    const uint32_t psn = p.h.bth.psn, plen = p.payload_len;
    if (oi.is_first()) c.recv_off = 0;
    if (c.recv_off + plen > c.rwqe.length) {
        counters().add(Counter::resp_local_length_error);
        resp_complete(c, WcStatus::loc_len_err, WcOpcode::recv, 0, nullptr);
        return RespResult::invalid_request;
    }
    if (plen) {
        if (dev_.dma().scatter(q.pd, c.rsges.data(), c.rwqe.num_sge, c.recv_off, p.payload()) != MrError::ok) {
            resp_complete(c, WcStatus::loc_prot_err, WcOpcode::recv, 0, nullptr);
            return RespResult::operational_error;
        }
        trace_dma_sges(TraceKind::dma_write, q.qpn, psn, c.rsges.data(), c.rwqe.num_sge, c.recv_off, plen);
    }
    c.recv_off += plen;
    if (oi.has(pkt::Ext::ieth)) {
        resp_complete(c, WcStatus::rem_inv_req_err, WcOpcode::recv, 0, nullptr);
        return RespResult::invalid_request;
    }
    c.epsn = psn_next(psn);
    c.done_psn = psn;
    if (oi.is_last()) {
        c.in_msg = QpCtx::InMsg::none;
        c.msn = (c.msn + 1) & kPsnMask;
        resp_complete(c, WcStatus::success, WcOpcode::recv, uint32_t(c.recv_off), &p);
    } else {
        c.in_msg = QpCtx::InMsg::send;
    }
    c.done_msn = c.msn;
    return RespResult::next;
}

// RDMA WRITE (rxe write_data_in): the payload at the address the RETH named, advanced packet by
// packet; a WRITE with immediate completes the receive WQE at its Last.
Hca::RespResult Hca::resp_execute_write(QpCtx& c, const pkt::Packet& p) {
    QpObj& q = *c.qp;
    const pkt::OpcodeInfo& oi = *p.op;
    const uint32_t psn = p.h.bth.psn, plen = p.payload_len;
    if (oi.is_first()) {
        c.write_va = p.h.reth.va;
        c.write_rkey = p.h.reth.rkey;
        c.write_left = c.write_len = p.h.reth.dma_len;
        counters().add(Counter::rx_write_requests);
    }
    if (plen) {
        if (dev_.dma().remote_write(q.pd, c.write_rkey, c.write_va, p.payload()) != MrError::ok)
            return RespResult::access_error;
        trace_dma(TraceKind::dma_write, q.qpn, psn, c.write_va, c.write_rkey, plen);
    }
    c.write_va += plen;
    c.write_left -= plen;
    c.epsn = psn_next(psn);
    c.done_psn = psn;
    if (oi.is_last()) {
        c.in_msg = QpCtx::InMsg::none;
        c.msn = (c.msn + 1) & kPsnMask;
        if (oi.has(pkt::Ext::immdt)) resp_complete(c, WcStatus::success, WcOpcode::recv_rdma_with_imm, c.write_len, &p);
    } else {
        c.in_msg = QpCtx::InMsg::write;
    }
    c.done_msn = c.msn;
    return RespResult::next;
}

// RDMA READ: a responder resource records it and the MSN counts it now (C9-148, as rxe); its
// responses take the PSNs after it and go out in their turn.
Hca::RespResult Hca::resp_execute_read(QpCtx& c, const pkt::Packet& p) {
    counters().add(Counter::rx_read_requests);
    const pkt::Reth& reth = p.h.reth;
    RespResource& r = resp_new_resource(c, p, false, reth.va, reth.rkey, reth.dma_len);
    c.epsn = psn_add(p.h.bth.psn, r.npsn);
    return RespResult::next;
}

// Atomic (IBTA 9.4; rxe atomic_reply): executed once, at once; the original value is kept in a
// responder resource, so that a duplicate is answered from there, and its ATOMIC ACKNOWLEDGE goes
// out in its turn.
Hca::RespResult Hca::resp_execute_atomic(QpCtx& c, const pkt::Packet& p) {
    QpObj& q = *c.qp;
    const pkt::AtomicEth& ae = p.h.atomic;
    counters().add(Counter::rx_atomic_requests);
    const bool cas = p.op->kind == pkt::Kind::cmp_swap;
    const AtomicOp aop = cas ? AtomicOp::cmp_swap : AtomicOp::fetch_add;
    const uint64_t cmp_add = cas ? ae.compare : ae.swap_add;
    uint64_t orig = 0;
    if (dev_.dma().atomic(q.pd, ae.rkey, ae.va, aop, cmp_add, ae.swap_add, orig) != MrError::ok)
        return RespResult::access_error;
    if (tracing()) {
        // The value now in memory: swapped only if it equalled the compare value.
        const uint64_t now_val = !cas ? orig + cmp_add : orig == cmp_add ? ae.swap_add : orig;
        trace(TraceEvent{.kind = TraceKind::atomic_done, .qpn = q.qpn, .psn = p.h.bth.psn, .addr = ae.va, .key = ae.rkey,
                         .remote = true, .bytes = 8, .old_value = orig, .new_value = now_val});
    }
    RespResource& r = resp_new_resource(c, p, true, ae.va, ae.rkey, 8);
    r.orig = orig;
    c.epsn = psn_next(p.h.bth.psn);
    return RespResult::next;
}

// The next responder resource (the oldest, reused: rxe's ring of max_dest_rd_atomic), counted in
// the MSN, its responses queued behind those already due. An ACK owed for earlier PSNs goes
// out before them.
RespResource& Hca::resp_new_resource(QpCtx& c, const pkt::Packet& p, bool atomic, uint64_t va, uint32_t rkey,
                                     uint32_t len) {
    RespResource& r = c.res[c.res_next];
    c.res_next = uint32_t((c.res_next + 1) % c.res.size());
    r = RespResource{};
    r.valid = true;
    r.atomic = atomic;
    r.first_psn = r.next_psn = p.h.bth.psn;
    r.npsn = atomic ? 1 : uint32_t(msg_packets(len, c.mtu));  // <= 2^23: resp_check_length
    r.va = va;
    r.rkey = rkey;
    r.length = len;
    c.msn = (c.msn + 1) & kPsnMask;
    r.msn = c.msn;
    r.sending = true;
    ++c.res_pending;
    if (c.ack.due) {
        r.before = c.ack;
        c.ack.due = false;
    }
    schedule(c);
    return r;
}

bool Hca::resp_send_responses(QpCtx& c, uint32_t budget) {
    QpObj& q = *c.qp;
    if (q.type != QpType::rc || q.state() == QpState::err) return true;
    // Oldest first: the ring's next slot holds the oldest resource.
    const size_t n = c.res.size();
    for (size_t k = 0; k < n && c.res_pending; ++k) {
        RespResource& r = c.res[(c.res_next + k) % n];
        if (r.valid && r.sending && !resp_send_resource(c, r, budget)) return false;
        if (q.state() == QpState::err) return true;
    }
    if (c.res_pending == 0 && c.ack.due && (budget == 0 || resp_send_ack(c, c.ack) != Tx::ok)) return false;
    return true;
}

// One resource's responses due, as far as the budget and buffers allow: the ACK or NAK owed
// before them, then its ATOMIC ACKNOWLEDGE or its READ responses from next_psn (re-read from
// memory, so a replay sends what memory holds now).
bool Hca::resp_send_resource(QpCtx& c, RespResource& r, uint32_t& budget) {
    QpObj& q = *c.qp;
    if (r.before.due) {
        if (budget == 0 || resp_send_ack(c, r.before) != Tx::ok) return false;
        --budget;
    }
    using namespace pkt::op;
    while (r.sending) {
        if (budget == 0) return false;
        pkt::Headers h = tmpl(c);
        // First, Last, Only and the atomic ACK carry an AETH; Middle does not (IBTA 9.2 table 38).
        h.aeth = {pkt::aeth_syndrome(pkt::AethType::ack, pkt::kAethCreditInvalid), r.msn};
        h.bth.psn = r.next_psn;
        uint32_t plen = 0;
        bool last = true;
        if (r.atomic) {
            h.bth.opcode = atomic_acknowledge;
            h.atomic_ack.orig = r.orig;
        } else {
            const uint32_t idx = uint32_t(psn_diff(r.next_psn, r.first_psn));
            const bool first = idx == 0;
            last = idx + 1 == r.npsn;
            plen = std::min(c.mtu, r.length - r.next_off);
            h.bth.opcode = r.npsn == 1 ? read_response_only : first ? read_response_first
                                                           : last ? read_response_last : read_response_middle;
        }
        const uint64_t va = r.va + r.next_off;
        const Tx t = send(h, plen, [&](std::span<uint8_t> out, uint32_t* crc) {
            if (dev_.dma().remote_read(q.pd, r.rkey, va, out, crc) != MrError::ok) return false;
            trace_dma(TraceKind::dma_read, q.qpn, h.bth.psn, va, r.rkey, uint32_t(out.size()));
            return true;
        }, &c.ftmpl);
        if (t == Tx::no_buffer) return false;
        if (t == Tx::dma_error) {  // the MR went away or changed since the request: access error
            r.sending = false;
            --c.res_pending;
            counters().add(Counter::resp_remote_access_errors);
            send_ack(c, nak(pkt::NakCode::remote_access_error), r.next_psn, r.msn);
            dev_.qp_to_error(&q, EventType::qp_access_err);
            return true;
        }
        --budget;
        r.next_off += plen;
        if (!last) {
            r.next_psn = psn_next(r.next_psn);
        } else if (r.replays) {  // duplicates asked meanwhile: answered again
            --r.replays;
            r.next_psn = r.replay_psn;
            r.next_off = uint32_t(psn_diff(r.replay_psn, r.first_psn)) * c.mtu;
        } else {
            r.sending = false;
            --c.res_pending;
        }
    }
    return true;
}

}  // namespace hcaemu::transport
