// The responder: takes the requests addressed to this QP, checks their PSN against the expected
// one, places SEND data into receive WQEs and RDMA WRITE data into MRs, answers READs and atomics
// from its resources, and acknowledges (IBTA 9.7.5). UC and UD requests come here too.
#include <algorithm>
#include <cstring>

#include "transport/hca.hpp"
#include "transport/psn.hpp"

namespace hcaemu::transport {

namespace {

using pkt::Kind;

uint8_t nak(pkt::NakCode code) { return pkt::aeth_syndrome(pkt::AethType::nak, uint8_t(code)); }

Gid source_gid(const pkt::Headers& h) { return h.ipv6 ? h.ip6.src : pkt::ipv4_mapped_gid(h.ip4.src); }

}  // namespace

namespace {

// Completes the receive WQE the responder holds.
void complete_recv(Hca& hca, QpCtx& c, WcStatus st, WcOpcode op, uint32_t byte_len, const pkt::Packet* p) {
    Wc wc;
    wc.wr_id = c.rwqe.wr_id;
    wc.status = st;
    wc.opcode = op;
    wc.byte_len = byte_len;
    wc.qp_num = c.qp->qpn;
    bool solicited = false;
    if (p) {
        const pkt::OpcodeInfo& oi = *p->op;
        if (oi.has(pkt::Ext::immdt)) {
            wc.imm_data = p->h.imm;
            wc.wc_flags |= wc_flag::with_imm;
        }
        if (oi.has(pkt::Ext::ieth)) {
            wc.imm_data = p->h.ieth_rkey;  // verbs reports the invalidated R_Key here
            wc.wc_flags |= wc_flag::with_inv;
        }
        solicited = p->h.bth.se;
    }
    c.have_wqe = false;
    if (st != WcStatus::success) hca.counters().add(Counter::resp_cqe_error);
    hca.counters().add(Counter::rdma_recvs);
    hca.trace_wc(c.qp->qpn, wc);
    hca.device().complete(c.qp->recv_cq, wc, solicited);
}

}  // namespace

void Hca::resp_handle(QpCtx& c, const pkt::Packet& p) {
    QpObj& q = *c.qp;
    const pkt::OpcodeInfo& oi = *p.op;
    const uint32_t psn = p.h.bth.psn;

    // ---- UD: one packet per message, Q_Key checked, no acknowledgement (IBTA ch. 9, UD).
    if (q.type == QpType::ud) {
        if (p.h.deth.qkey != q.attr.qkey) {  // IBTA ch. 10 (Q_Keys): a mismatch drops the packet
            counters().add(Counter::qkey_violations);
            return;
        }
        if (!dev_.take_recv(&q, c.rwqe, c.rsges)) {
            counters().add(Counter::out_of_buffer);  // UD drops when no receive WQE is posted
            return;
        }
        c.have_wqe = true;
        // The first 40 bytes of the buffer receive the GRH: for IPv4, the IP header in its last 20.
        uint8_t grh[40] = {};
        const uint8_t* ip = p.frame + p.l3_off;
        if (p.h.ipv6) std::memcpy(grh, ip, 40);
        else std::memcpy(grh + 20, ip, 20);
        const uint32_t total = 40 + p.payload_len;
        const uint32_t nsge = c.rwqe.num_sge;
        if (total > c.rwqe.length) {
            counters().add(Counter::resp_local_length_error);
            complete_recv(*this, c, WcStatus::loc_len_err, WcOpcode::recv, 0, nullptr);
            return;
        }
        if (dev_.dma().scatter(q.pd, c.rsges.data(), nsge, 0, grh) != MrError::ok ||
            dev_.dma().scatter(q.pd, c.rsges.data(), nsge, 40, p.payload()) != MrError::ok) {
            complete_recv(*this, c, WcStatus::loc_prot_err, WcOpcode::recv, 0, nullptr);
            return;
        }
        Wc wc;
        wc.wr_id = c.rwqe.wr_id;
        wc.opcode = WcOpcode::recv;
        wc.byte_len = total;
        wc.qp_num = q.qpn;
        wc.src_qp = p.h.deth.src_qp;
        wc.wc_flags = wc_flag::grh;
        if (oi.has(pkt::Ext::immdt)) {
            wc.imm_data = p.h.imm;
            wc.wc_flags |= wc_flag::with_imm;
        }
        wc.sgid = source_gid(p.h);
        c.have_wqe = false;
        counters().add(Counter::rdma_recvs);
        trace_wc(q.qpn, wc);
        dev_.complete(q.recv_cq, wc, p.h.bth.se);
        return;
    }

    const bool rc = q.type == QpType::rc;
    if (!rc) {
        // ---- UC: no ACKs; a gap drops the message in progress; a First or Only starts afresh.
        // A PSN before the expected one is a duplicate or a straggler: dropped, so that nothing
        // is delivered twice.
        if (classify_psn(psn, c.epsn) == PsnClass::duplicate) {
            counters().add(Counter::duplicate_request);
            return;
        }
        if (psn != c.epsn) {
            if (c.in_msg != QpCtx::InMsg::none) counters().add(Counter::uc_dropped_messages);
            c.in_msg = QpCtx::InMsg::none;
            c.recv_off = 0;
            c.uc_dropping = !oi.is_first();
            c.epsn = psn;
        }
        c.epsn = psn_next(psn);
        if (c.uc_dropping) {
            if (!oi.is_first()) return;
            c.uc_dropping = false;
        }
    } else {
        // Responses leave in PSN order. While READ responses wait for buffers, a new request
        // that needs a response is dropped unseen (as by a full receive queue): the requester's
        // retransmission brings it back.
        if (reads_pending(c)) {
            counters().add(Counter::rx_drop_no_qp);
            return;
        }
        // ---- RC: the PSN decides (IBTA 9.7).
        switch (classify_psn(psn, c.epsn)) {
        case PsnClass::out_of_sequence:
            // Packets were lost: one NAK per sequence error, then silence until epsn comes.
            counters().add(Counter::out_of_sequence);
            trace(TraceKind::out_of_sequence, q.qpn, psn);
            if (!c.nak_sent && send_ack(c, nak(pkt::NakCode::psn_seq_error), c.epsn) == Tx::ok) {
                c.nak_sent = true;
                c.ack_due = false;  // the NAK acknowledges everything before epsn
                trace(TraceKind::nak_sent, q.qpn, c.epsn);
            }
            return;
        case PsnClass::duplicate: {
            // C9-105: a duplicate is answered, never executed again.
            counters().add(Counter::duplicate_request);
            trace(TraceKind::duplicate, q.qpn, psn);
            if (oi.kind == Kind::rdma_read_request || oi.kind == Kind::cmp_swap || oi.kind == Kind::fetch_add) {
                for (RespResource& r : c.res) {
                    if (!r.valid) continue;
                    const int32_t d = psn_diff(psn, r.first_psn);
                    if (d < 0 || uint32_t(d) >= r.npsn) continue;
                    if (r.atomic) {
                        pkt::Headers h = tmpl(c);
                        h.bth.opcode = pkt::op::atomic_acknowledge;
                        h.bth.psn = r.first_psn;
                        h.aeth = {pkt::aeth_syndrome(pkt::AethType::ack, pkt::kAethCreditInvalid), r.msn};
                        h.atomic_ack.orig = r.orig;
                        send(h, 0, [](std::span<uint8_t>) { return true; });
                    } else if (!r.sending || psn_before(psn, r.next_psn)) {
                        // Replay the READ responses from the PSN asked (re-read from memory),
                        // unless the responses still being sent will reach that PSN anyway.
                        r.next_psn = psn;
                        r.next_off = uint32_t(d) * c.mtu;
                        r.sending = true;
                        if (!resp_send_reads(c, UINT32_MAX)) schedule(c);
                    }
                    return;
                }
                return;  // too old for the resources we keep: dropped
            }
            if (!c.ack_due) acks_.push_back(q.qpn);
            c.ack_due = true;
            c.ack_psn = psn_sub(c.epsn, 1);
            return;
        }
        case PsnClass::expected: c.nak_sent = false; break;
        }
    }

    // An invalid request ends the connection: NAK (RC) and the responder's QP goes to error.
    auto invalid = [&](pkt::NakCode code, Counter ctr) {
        counters().add(ctr);
        if (rc) {
            send_ack(c, nak(code), psn);
            trace(TraceKind::nak_sent, q.qpn, psn);
            dev_.qp_to_error(&q, code == pkt::NakCode::remote_access_error ? EventType::qp_access_err
                                                                           : EventType::qp_req_err);
        } else {
            c.in_msg = QpCtx::InMsg::none;
            c.uc_dropping = true;  // UC: the message is dropped, the QP lives on
        }
    };
    auto ack_if_asked = [&]() {
        if (rc && p.h.bth.ack_req) {
            if (!c.ack_due) acks_.push_back(q.qpn);
            c.ack_due = true;
            c.ack_psn = psn;
        }
    };
    const uint32_t plen = p.payload_len;

    switch (oi.kind) {
    case Kind::send: {
        // Opcode sequence (IBTA 9.7): First/Only start a message, Middle/Last continue one.
        if (oi.is_first() == (c.in_msg != QpCtx::InMsg::none) || (!oi.is_first() && c.in_msg != QpCtx::InMsg::send)) {
            invalid(pkt::NakCode::invalid_request, Counter::resp_invalid_request);
            return;
        }
        // First and Middle carry exactly one path MTU, Last and Only at most one (IBTA 9.7).
        if ((oi.is_last() ? plen > c.mtu : plen != c.mtu)) {
            invalid(pkt::NakCode::invalid_request, Counter::resp_invalid_request);
            return;
        }
        if (oi.is_first()) {
            if (!c.have_wqe && !dev_.take_recv(&q, c.rwqe, c.rsges)) {
                // No receive WQE: RNR NAK, the requester retries after min_rnr_timer (IBTA 9.7).
                counters().add(Counter::out_of_buffer);
                if (rc) {
                    counters().add(Counter::send_rnr_err);
                    send_ack(c, pkt::aeth_syndrome(pkt::AethType::rnr_nak, q.attr.min_rnr_timer), psn);
                    trace(TraceKind::rnr_nak_sent, q.qpn, psn);
                } else {
                    counters().add(Counter::uc_dropped_messages);
                    c.uc_dropping = true;
                }
                return;
            }
            c.have_wqe = true;
            c.recv_off = 0;
        }
        if (c.recv_off + plen > c.rwqe.length) {
            counters().add(Counter::resp_local_length_error);
            complete_recv(*this, c, WcStatus::loc_len_err, WcOpcode::recv, 0, nullptr);
            invalid(pkt::NakCode::invalid_request, Counter::resp_invalid_request);
            return;
        }
        if (plen && dev_.dma().scatter(q.pd, c.rsges.data(), c.rwqe.num_sge, c.recv_off, p.payload()) != MrError::ok) {
            complete_recv(*this, c, WcStatus::loc_prot_err, WcOpcode::recv, 0, nullptr);
            invalid(pkt::NakCode::remote_op_error, Counter::resp_invalid_request);
            return;
        }
        c.recv_off += plen;
        if (rc) c.epsn = psn_next(psn);
        if (oi.is_last()) {
            c.in_msg = QpCtx::InMsg::none;
            c.msn = (c.msn + 1) & 0xFFFFFF;
            complete_recv(*this, c, WcStatus::success, WcOpcode::recv, c.recv_off, &p);
        } else {
            c.in_msg = QpCtx::InMsg::send;
        }
        ack_if_asked();
        return;
    }
    case Kind::rdma_write: {
        if (oi.is_first() == (c.in_msg != QpCtx::InMsg::none) || (!oi.is_first() && c.in_msg != QpCtx::InMsg::write)) {
            invalid(pkt::NakCode::invalid_request, Counter::resp_invalid_request);
            return;
        }
        if (oi.is_first()) {
            // The whole range the RETH names is checked once, up front (IBTA 9.7); a
            // zero-length WRITE touches no memory and needs no valid R_Key.
            const pkt::Reth& r = p.h.reth;
            if (!(q.attr.qp_access_flags & access::remote_write) ||
                (r.dma_len && check_mr_access(dev_.mr_by_key(r.rkey), q.pd, r.va, r.dma_len, access::remote_write) != MrError::ok)) {
                invalid(pkt::NakCode::remote_access_error, Counter::resp_remote_access_errors);
                return;
            }
            c.write_va = r.va;
            c.write_rkey = r.rkey;
            c.write_left = c.write_len = r.dma_len;
            counters().add(Counter::rx_write_requests);
        }
        const bool size_ok = oi.is_last() ? plen == c.write_left : (plen == c.mtu && plen < c.write_left);
        if (!size_ok) {
            invalid(pkt::NakCode::invalid_request, Counter::resp_invalid_request);
            return;
        }
        const bool imm = oi.has(pkt::Ext::immdt);
        if (imm && !c.have_wqe) {
            // WRITE with immediate consumes a receive WQE: check before placing the data.
            if (!dev_.take_recv(&q, c.rwqe, c.rsges)) {
                counters().add(Counter::out_of_buffer);
                if (rc) {
                    counters().add(Counter::send_rnr_err);
                    send_ack(c, pkt::aeth_syndrome(pkt::AethType::rnr_nak, q.attr.min_rnr_timer), psn);
                    trace(TraceKind::rnr_nak_sent, q.qpn, psn);
                    if (!oi.is_first()) c.in_msg = QpCtx::InMsg::write;  // the retry continues it
                } else {
                    c.in_msg = QpCtx::InMsg::none;  // UC: this message is lost, the next one starts afresh
                    c.uc_dropping = true;
                    counters().add(Counter::uc_dropped_messages);
                }
                return;
            }
            c.have_wqe = true;
        }
        if (plen && dev_.dma().remote_write(q.pd, c.write_rkey, c.write_va, p.payload()) != MrError::ok) {
            invalid(pkt::NakCode::remote_access_error, Counter::resp_remote_access_errors);
            return;
        }
        c.write_va += plen;
        c.write_left -= plen;
        if (rc) c.epsn = psn_next(psn);
        if (oi.is_last()) {
            c.in_msg = QpCtx::InMsg::none;
            c.msn = (c.msn + 1) & 0xFFFFFF;
            if (imm) complete_recv(*this, c, WcStatus::success, WcOpcode::recv_rdma_with_imm, c.write_len, &p);
        } else {
            c.in_msg = QpCtx::InMsg::write;
        }
        ack_if_asked();
        return;
    }
    case Kind::rdma_read_request:
    case Kind::cmp_swap:
    case Kind::fetch_add: {
        if (!rc || c.in_msg != QpCtx::InMsg::none) {
            invalid(pkt::NakCode::invalid_request, Counter::resp_invalid_request);
            return;
        }
        const bool atomic = oi.kind != Kind::rdma_read_request;
        const uint64_t va = atomic ? p.h.atomic.va : p.h.reth.va;
        const uint32_t rkey = atomic ? p.h.atomic.rkey : p.h.reth.rkey;
        const uint32_t len = atomic ? 8 : p.h.reth.dma_len;
        const uint32_t need = atomic ? access::remote_atomic : access::remote_read;
        if (!(q.attr.qp_access_flags & need)) {
            invalid(pkt::NakCode::remote_access_error, Counter::resp_remote_access_errors);
            return;
        }
        if (len) {
            const MrError e = check_mr_access(dev_.mr_by_key(rkey), q.pd, va, len, need);
            if (e == MrError::misaligned) {  // an unaligned atomic is an invalid request (IBTA 9.4)
                invalid(pkt::NakCode::invalid_request, Counter::resp_invalid_request);
                return;
            }
            if (e != MrError::ok) {
                invalid(pkt::NakCode::remote_access_error, Counter::resp_remote_access_errors);
                return;
            }
        }
        // A resource for the request, the oldest reused (max_dest_rd_atomic of them).
        RespResource& r = c.res[c.res_next++ % c.res.size()];
        r = RespResource{};
        r.valid = true;
        r.atomic = atomic;
        r.first_psn = psn;
        r.npsn = atomic || len == 0 ? 1 : (len + c.mtu - 1) / c.mtu;
        r.va = va;
        r.rkey = rkey;
        r.length = len;
        c.msn = (c.msn + 1) & 0xFFFFFF;
        r.msn = c.msn;
        c.epsn = psn_add(psn, r.npsn);
        if (atomic) {
            counters().add(Counter::rx_atomic_requests);
            const AtomicOp aop = oi.kind == Kind::cmp_swap ? AtomicOp::cmp_swap : AtomicOp::fetch_add;
            const uint64_t cmp_add = oi.kind == Kind::cmp_swap ? p.h.atomic.compare : p.h.atomic.swap_add;
            if (dev_.dma().atomic(q.pd, rkey, va, aop, cmp_add, p.h.atomic.swap_add, r.orig) != MrError::ok) {
                invalid(pkt::NakCode::remote_access_error, Counter::resp_remote_access_errors);
                return;
            }
            pkt::Headers h = tmpl(c);
            h.bth.opcode = pkt::op::atomic_acknowledge;
            h.bth.psn = psn;
            h.aeth = {pkt::aeth_syndrome(pkt::AethType::ack, pkt::kAethCreditInvalid), r.msn};
            h.atomic_ack.orig = r.orig;
            send(h, 0, [](std::span<uint8_t>) { return true; });
            return;
        }
        counters().add(Counter::rx_read_requests);
        r.next_psn = psn;
        r.sending = true;
        // Sent now, in order with every other response, as far as buffers allow.
        if (!resp_send_reads(c, UINT32_MAX)) schedule(c);
        return;
    }
    default:
        // FLUSH and ATOMIC WRITE (IBTA 1.5) are outside this HCA's capabilities (it does not
        // advertise them): answered as invalid requests, as IBTA 9.7 asks for unsupported opcodes.
        invalid(pkt::NakCode::invalid_request, Counter::resp_invalid_request);
        return;
    }
}

bool Hca::reads_pending(const QpCtx& c) const {
    for (const RespResource& r : c.res)
        if (r.sending) return true;
    return false;
}

bool Hca::resp_send_reads(QpCtx& c, uint32_t budget) {
    QpObj& q = *c.qp;
    if (q.type != QpType::rc || q.state() == QpState::err) return true;
    // Oldest request first: the resource after the newest in the ring.
    for (size_t k = 0; k < c.res.size(); ++k) {
        RespResource& r = c.res[(c.res_next + k) % c.res.size()];
        while (r.valid && r.sending) {
            if (budget == 0) return false;
            const uint32_t idx = uint32_t(psn_diff(r.next_psn, r.first_psn));
            const bool first = idx == 0, last = idx + 1 == r.npsn;
            const uint32_t plen = std::min(c.mtu, r.length - r.next_off);
            pkt::Headers h = tmpl(c);
            using namespace pkt::op;
            h.bth.opcode = r.npsn == 1 ? read_response_only : first ? read_response_first
                                                         : last ? read_response_last : read_response_middle;
            h.bth.psn = r.next_psn;
            // First, Last and Only carry an AETH; Middle does not (IBTA 9.2 table 38).
            h.aeth = {pkt::aeth_syndrome(pkt::AethType::ack, pkt::kAethCreditInvalid), r.msn};
            const uint64_t va = r.va + r.next_off;
            const Tx t = send(h, plen, [&](std::span<uint8_t> out) {
                return dev_.dma().remote_read(q.pd, r.rkey, va, out) == MrError::ok;
            });
            if (t == Tx::no_buffer) return false;
            if (t == Tx::dma_error) {  // the MR went away or changed since the request: access error
                r.sending = false;
                counters().add(Counter::resp_remote_access_errors);
                send_ack(c, nak(pkt::NakCode::remote_access_error), r.next_psn);
                dev_.qp_to_error(&q, EventType::qp_access_err);
                return true;
            }
            --budget;
            r.next_off += plen;
            r.next_psn = psn_next(r.next_psn);
            if (last) r.sending = false;
        }
    }
    return true;
}

}  // namespace hcaemu::transport
