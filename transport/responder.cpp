// The responder: takes the requests addressed to this QP and answers them (IBTA 9.7.5), one named
// step each, in the order Linux rxe's responder takes them:
//   resp_check_psn        the PSN against the expected one (RC: duplicate or out of sequence)
//   resp_duplicate        a duplicate is answered from what was done, never executed again
//   resp_check_op_seq     First/Only start a message, Middle/Last continue one of the same kind
//   resp_check_op_valid   the opcode is supported and the QP's access flags allow it
//   resp_check_resources  a receive WQE for a SEND, a responder resource for a READ or atomic
//   resp_check_length     packet and message lengths, PadCnt
//   resp_check_rkey       the R_Key and the whole range it names
//   resp_execute_*        SEND, WRITE, READ, atomic (responder_exec.cpp)
//   resp_acknowledge      the ACK owed, coalesced, sent in PSN order
// A failed step ends in resp_error (NAK, QP to ERR, or the UC message dropped). UD requests take
// their own path (resp_ud). READ responses and atomic ACKs go out in the QP's turn
// (resp_send_responses, responder_exec.cpp).
#include <cstring>

#include "transport/hca.hpp"
#include "transport/psn.hpp"

namespace hcaemu::transport {

namespace {

using pkt::Kind;

uint8_t nak(pkt::NakCode code) { return pkt::aeth_syndrome(pkt::AethType::nak, uint8_t(code)); }

bool is_rd_atomic(Kind k) { return k == Kind::rdma_read_request || k == Kind::cmp_swap || k == Kind::fetch_add; }

// The message a SEND or WRITE packet belongs to, as QpCtx::in_msg tells the one in progress.
QpCtx::InMsg msg_kind(Kind k) {
    return k == Kind::send ? QpCtx::InMsg::send : k == Kind::rdma_write ? QpCtx::InMsg::write : QpCtx::InMsg::none;
}

Gid source_gid(const pkt::Headers& h) { return h.ipv6 ? h.ip6.src : pkt::ipv4_mapped_gid(h.ip4.src); }

}  // namespace

void Hca::resp_handle(QpCtx& c, const pkt::Packet& p) {
    if (c.qp->type == QpType::ud) return resp_ud(c, p);
    RespResult r = resp_check_psn(c, p);
    if (r == RespResult::duplicate) return resp_duplicate(c, p);
    if (r == RespResult::next) r = resp_check_op_seq(c, p);
    if (r == RespResult::next) r = resp_check_op_valid(c, p);
    if (r == RespResult::next) r = resp_check_resources(c, p);
    if (r == RespResult::next) r = resp_check_length(c, p);
    if (r == RespResult::next) r = resp_check_rkey(c, p);
    if (r == RespResult::next) {
        switch (p.op->kind) {
        case Kind::send: r = resp_execute_send(c, p); break;
        case Kind::rdma_write: r = resp_execute_write(c, p); break;
        case Kind::rdma_read_request: r = resp_execute_read(c, p); break;
        default: r = resp_execute_atomic(c, p); break;  // resp_check_op_valid let nothing else through
        }
    }
    if (r == RespResult::next) resp_acknowledge(c, p);
    else if (r != RespResult::done) resp_error(c, p, r);
}

// PSN (IBTA 9.7.5.1; rxe check_psn). RC: the expected PSN is executed, the 2^23 before it are
// duplicates, the rest out of sequence: one NAK per sequence error, then silence until the
// expected PSN comes. UC has neither duplicates nor NAKs: a gap drops the message in progress,
// and any First or Only starts afresh, whatever its PSN.
Hca::RespResult Hca::resp_check_psn(QpCtx& c, const pkt::Packet& p) {
    const uint32_t psn = p.h.bth.psn;
    if (c.qp->type == QpType::uc) {
        if (!c.uc_dropping && psn == c.epsn) return RespResult::next;
        if (c.in_msg != QpCtx::InMsg::none) counters().add(Counter::uc_dropped_messages);
        c.in_msg = QpCtx::InMsg::none;
        c.uc_dropping = !p.op->is_first();
        return c.uc_dropping ? RespResult::done : RespResult::next;
    }
    switch (classify_psn(psn, c.epsn)) {
    case PsnClass::expected:
        c.nak_sent = false;
        return RespResult::next;
    case PsnClass::duplicate:
        counters().add(Counter::duplicate_request);
        trace(TraceKind::duplicate, c.qp->qpn, psn);
        return RespResult::duplicate;
    case PsnClass::out_of_sequence: break;
    }
    counters().add(Counter::out_of_sequence);
    trace(TraceKind::out_of_sequence, c.qp->qpn, psn);
    if (c.nak_sent) return RespResult::done;
    c.nak_sent = true;
    return RespResult::out_of_sequence;
}

// Duplicate (C9-105; rxe duplicate_request): answered, never executed again. A SEND or WRITE is
// acknowledged with the last SEND or WRITE packet executed (rxe's ack_psn), never with a READ's
// or an atomic's PSN, which would tell the requester that READ or atomic completed without its
// data. A READ or atomic is answered from its responder resource: its responses queued again,
// from the PSN asked. One too old for the resources kept is dropped (rxe: class D).
void Hca::resp_duplicate(QpCtx& c, const pkt::Packet& p) {
    const uint32_t psn = p.h.bth.psn;
    if (!is_rd_atomic(p.op->kind)) {
        resp_owe_ack(c, c.done_psn, c.done_msn);
        return;
    }
    const bool atomic = p.op->kind != Kind::rdma_read_request;
    for (RespResource& r : c.res) {
        if (!r.valid || r.atomic != atomic) continue;
        const int32_t d = psn_diff(psn, r.first_psn);
        if (d < 0 || uint32_t(d) >= r.npsn) continue;
        if (r.sending && (atomic || !psn_before(psn, r.next_psn))) {
            // The responses due reach that PSN: each duplicate is still answered, after them (as
            // rxe, which sends a READ's responses before it looks at the next request).
            if (r.replays++ == 0 || psn_before(psn, r.replay_psn)) r.replay_psn = psn;
            return;
        }
        if (!atomic) {
            r.next_psn = psn;  // re-read from memory, from the PSN asked
            r.next_off = uint32_t(d) * c.mtu;
        }
        if (!r.sending) {
            r.sending = true;
            ++c.res_pending;
        }
        schedule(c);
        return;
    }
}

// Opcode sequence (rxe check_op_seq): First and Only start a message, Middle and Last continue
// one of the same kind, and a READ or atomic never interrupts one.
Hca::RespResult Hca::resp_check_op_seq(QpCtx& c, const pkt::Packet& p) {
    const bool ok = p.op->is_first() ? c.in_msg == QpCtx::InMsg::none : c.in_msg == msg_kind(p.op->kind);
    return ok ? RespResult::next : RespResult::invalid_request;
}

// Opcode valid (rxe check_op_valid): an opcode this HCA supports, allowed by the QP's access
// flags. FLUSH and ATOMIC WRITE (IBTA 1.5) are not advertised: invalid requests.
Hca::RespResult Hca::resp_check_op_valid(QpCtx& c, const pkt::Packet& p) {
    uint32_t need = 0;
    switch (p.op->kind) {
    case Kind::send: return RespResult::next;
    case Kind::rdma_write:
        if (!p.op->is_first()) return RespResult::next;  // checked once, at the First
        need = access::remote_write;
        break;
    case Kind::rdma_read_request: need = access::remote_read; break;
    case Kind::cmp_swap:
    case Kind::fetch_add: need = access::remote_atomic; break;
    default: return RespResult::invalid_request;
    }
    return (c.qp->attr.qp_access_flags & need) ? RespResult::next : RespResult::access_error;
}

// Resources (rxe check_resource): a READ or atomic needs a responder resource (none when
// max_dest_rd_atomic is 0: an invalid request, as rxe); a SEND and a WRITE with immediate need a
// receive WQE, else RNR NAK (the requester retries after min_rnr_timer).
Hca::RespResult Hca::resp_check_resources(QpCtx& c, const pkt::Packet& p) {
    const pkt::OpcodeInfo& oi = *p.op;
    if (is_rd_atomic(oi.kind)) {
        if (c.res.empty()) return RespResult::invalid_request;
        // The oldest resource is reused. If its responses are still due, the requester outran
        // max_dest_rd_atomic: the request is dropped, as by a full queue, and comes back by retry.
        if (c.res[c.res_next].sending) {
            counters().add(Counter::resp_resources_busy);
            return RespResult::done;
        }
        return RespResult::next;
    }
    const bool needs_wqe = oi.kind == Kind::send ? oi.is_first() : oi.has(pkt::Ext::immdt);
    if (!needs_wqe || c.have_wqe) return RespResult::next;
    if (!dev_.take_recv(c.qp, c.rwqe, c.rsges)) {
        counters().add(Counter::out_of_buffer);
        return RespResult::rnr;
    }
    c.have_wqe = true;
    if (tracing())
        trace(TraceEvent{.kind = TraceKind::recv_wqe_taken, .qpn = c.qp->qpn, .psn = p.h.bth.psn, .wr_id = c.rwqe.wr_id});
    return RespResult::next;
}

// Length (rxe check_length, check_rkey; IBTA 9.7.5.1): First and Middle carry exactly one path
// MTU, Last 1 to PMTU bytes, Only at most one PMTU; PadCnt fills the payload to a multiple of 4
// bytes and only a message's last packet has any. A message stays within the port's max_msg_sz
// (a RETH's DMA length, a SEND's bytes so far) and a READ's responses within half the PSN space;
// a WRITE's packets add up to its DMA length.
Hca::RespResult Hca::resp_check_length(QpCtx& c, const pkt::Packet& p) {
    const pkt::OpcodeInfo& oi = *p.op;
    const uint32_t plen = p.payload_len, pad = p.h.bth.pad_cnt;
    const bool first = oi.is_first(), last = oi.is_last();
    const bool size_ok = first && last ? plen <= c.mtu : !last ? plen == c.mtu : plen != 0 && plen <= c.mtu;
    const bool pad_ok = ((plen + pad) & 3) == 0 && (last || pad == 0);
    if (!size_ok || !pad_ok) return RespResult::invalid_request;
    bool ok = true;
    switch (oi.kind) {
    case Kind::send: ok = (first ? 0 : c.recv_off) + plen <= max_msg_sz_; break;
    case Kind::rdma_write: {
        const uint32_t left = first ? p.h.reth.dma_len : c.write_left;
        ok = (!first || p.h.reth.dma_len <= max_msg_sz_) && (last ? plen == left : plen < left);
        break;
    }
    case Kind::rdma_read_request:
        ok = p.h.reth.dma_len <= max_msg_sz_ && msg_packets(p.h.reth.dma_len, c.mtu) <= kPsnHalf;
        break;
    default: break;
    }
    return ok ? RespResult::next : RespResult::invalid_request;
}

// R_Key (rxe check_rkey): the MR the R_Key names, in the QP's PD, allows the access over the
// whole range, checked once at a WRITE's first packet; a zero-length WRITE or READ touches no
// memory and needs no valid R_Key. An unaligned atomic is an invalid request (IBTA 9.4).
Hca::RespResult Hca::resp_check_rkey(QpCtx& c, const pkt::Packet& p) {
    const pkt::Reth& reth = p.h.reth;
    const pkt::AtomicEth& ae = p.h.atomic;
    MrError e = MrError::ok;
    switch (p.op->kind) {
    case Kind::rdma_write:
        if (p.op->is_first() && reth.dma_len)
            e = check_mr_access(dev_.mr_by_key(reth.rkey), c.qp->pd, reth.va, reth.dma_len, access::remote_write);
        break;
    case Kind::rdma_read_request:
        if (reth.dma_len)
            e = check_mr_access(dev_.mr_by_key(reth.rkey), c.qp->pd, reth.va, reth.dma_len, access::remote_read);
        break;
    case Kind::cmp_swap:
    case Kind::fetch_add: e = check_mr_access(dev_.mr_by_key(ae.rkey), c.qp->pd, ae.va, 8, access::remote_atomic); break;
    default: break;
    }
    return e == MrError::ok           ? RespResult::next
           : e == MrError::misaligned ? RespResult::invalid_request
                                      : RespResult::access_error;
}

// Acknowledge (rxe acknowledge): a SEND or WRITE packet with AckReq is acknowledged, coalesced to
// one ACK a burst, in PSN order; READ responses and atomic ACKs were queued by their execute step.
void Hca::resp_acknowledge(QpCtx& c, const pkt::Packet& p) {
    if (c.qp->type == QpType::rc && p.h.bth.ack_req && !is_rd_atomic(p.op->kind))
        resp_owe_ack(c, p.h.bth.psn, c.msn);
}

// Errors (rxe's error states, IBTA 9.9 classes). RC: a NAK, and for every class but B (PSN
// sequence, RNR) the QP goes to ERR. UC: no NAK, the message is dropped and the QP lives on.
void Hca::resp_error(QpCtx& c, const pkt::Packet& p, RespResult r) {
    QpObj& q = *c.qp;
    const uint32_t psn = p.h.bth.psn;
    const bool rc = q.type == QpType::rc;
    pkt::NakCode code = pkt::NakCode::invalid_request;
    EventType event = EventType::qp_req_err;
    switch (r) {
    case RespResult::out_of_sequence:
        resp_nak(c, nak(pkt::NakCode::psn_seq_error), c.epsn);
        trace(TraceKind::nak_sent, q.qpn, c.epsn);
        return;
    case RespResult::rnr:
        if (rc) {
            counters().add(Counter::send_rnr_err);
            resp_nak(c, pkt::aeth_syndrome(pkt::AethType::rnr_nak, q.attr.min_rnr_timer), psn);
            trace(TraceKind::rnr_nak_sent, q.qpn, psn);
            return;
        }
        counters().add(Counter::uc_dropped_messages);
        break;
    case RespResult::access_error:
        counters().add(Counter::resp_remote_access_errors);
        code = pkt::NakCode::remote_access_error;
        event = EventType::qp_access_err;
        break;
    case RespResult::operational_error:
        counters().add(Counter::resp_invalid_request);
        code = pkt::NakCode::remote_op_error;
        break;
    default: counters().add(Counter::resp_invalid_request); break;
    }
    if (!rc) {
        c.in_msg = QpCtx::InMsg::none;
        c.uc_dropping = true;
        return;
    }
    resp_nak(c, nak(code), psn);
    trace(TraceKind::nak_sent, q.qpn, psn);
    dev_.qp_to_error(&q, event);
}

// The ACK owed for `psn` (coalesced: the newest PSN that asked, one a burst). A NAK owed already
// stays: the requester goes back to its PSN, and the duplicates are acknowledged then.
void Hca::resp_owe_ack(QpCtx& c, uint32_t psn, uint32_t msn) {
    if (c.ack.due && c.ack.nak) return;
    if (!c.ack_listed) {
        c.ack_listed = true;
        acks_.push_back(c.qp->qpn);
    }
    c.ack = PendingAck{.due = true, .psn = psn, .msn = msn};
}

// A NAK or RNR NAK for `psn`. With no response due it goes now, after the ACK owed (responses
// leave in PSN order); behind responses it waits for them, replacing the ACK owed, which it
// implies.
void Hca::resp_nak(QpCtx& c, uint8_t syndrome, uint32_t psn) {
    if (c.res_pending == 0) {
        if (c.ack.due && resp_send_ack(c, c.ack) != Tx::ok) c.ack.due = false;
        send_ack(c, syndrome, psn, c.msn);
        return;
    }
    if (!c.ack_listed) {
        c.ack_listed = true;
        acks_.push_back(c.qp->qpn);
    }
    c.ack = PendingAck{.due = true, .nak = true, .syndrome = syndrome, .psn = psn, .msn = c.msn};
}

Hca::Tx Hca::resp_send_ack(QpCtx& c, PendingAck& a) {
    // An ACK carries the receive WQEs posted as credits; with an SRQ there are none to tell.
    const QpObj& q = *c.qp;
    const uint8_t syndrome =
        a.nak ? a.syndrome
              : pkt::aeth_syndrome(pkt::AethType::ack, q.srq ? pkt::kAethCreditInvalid : pkt::aeth_credit_code(q.rq.count()));
    const Tx t = send_ack(c, syndrome, a.psn, a.msn);
    if (t == Tx::ok) a.due = false;
    return t;
}

// Completes the receive WQE the responder holds (rxe do_complete).
void Hca::resp_complete(QpCtx& c, WcStatus st, WcOpcode op, uint32_t byte_len, const pkt::Packet* p) {
    c.have_wqe = false;
    if (st != WcStatus::success) counters().add(Counter::resp_cqe_error);
    counters().add(Counter::rdma_recvs);
    dev_.complete_with(c.qp->recv_cq, p && p->h.bth.se, [&](Wc& wc) {
        wc.wr_id = c.rwqe.wr_id;
        wc.status = st;
        wc.opcode = op;
        wc.byte_len = byte_len;
        wc.qp_num = c.qp->qpn;
        if (p && p->op->has(pkt::Ext::immdt)) {
            wc.imm_data = p->h.imm;
            wc.wc_flags |= wc_flag::with_imm;
        }
        trace_wc(c.qp->qpn, wc);
    });
}

// UD: one packet a message, the Q_Key checked (IBTA ch. 10, Q_Keys: a mismatch drops the
// packet), no acknowledgement; the first 40 bytes of the buffer receive the GRH (for IPv4, the IP
// header in its last 20).
void Hca::resp_ud(QpCtx& c, const pkt::Packet& p) {
    QpObj& q = *c.qp;
    const uint32_t psn = p.h.bth.psn;
    if (p.h.deth.qkey != q.attr.qkey) {
        counters().add(Counter::qkey_violations);
        return;
    }
    if (!dev_.take_recv(&q, c.rwqe, c.rsges)) {
        counters().add(Counter::out_of_buffer);  // UD drops when no receive WQE is posted
        return;
    }
    c.have_wqe = true;
    if (tracing()) trace(TraceEvent{.kind = TraceKind::recv_wqe_taken, .qpn = q.qpn, .psn = psn, .wr_id = c.rwqe.wr_id});
    uint8_t grh[40] = {};
    const uint8_t* ip = p.frame + p.l3_off;
    if (p.h.ipv6) std::memcpy(grh, ip, 40);
    else std::memcpy(grh + 20, ip, 20);
    const uint32_t total = 40 + p.payload_len;
    const uint32_t nsge = c.rwqe.num_sge;
    if (total > c.rwqe.length) {
        counters().add(Counter::resp_local_length_error);
        resp_complete(c, WcStatus::loc_len_err, WcOpcode::recv, 0, nullptr);
        return;
    }
    if (dev_.dma().scatter(q.pd, c.rsges.data(), nsge, 0, grh) != MrError::ok ||
        dev_.dma().scatter(q.pd, c.rsges.data(), nsge, 40, p.payload()) != MrError::ok) {
        resp_complete(c, WcStatus::loc_prot_err, WcOpcode::recv, 0, nullptr);
        return;
    }
    trace_dma_sges(TraceKind::dma_write, q.qpn, psn, c.rsges.data(), nsge, 0, total);
    c.have_wqe = false;
    counters().add(Counter::rdma_recvs);
    dev_.complete_with(q.recv_cq, p.h.bth.se, [&](Wc& wc) {
        wc.wr_id = c.rwqe.wr_id;
        wc.opcode = WcOpcode::recv;
        wc.byte_len = total;
        wc.qp_num = q.qpn;
        wc.src_qp = p.h.deth.src_qp;
        wc.wc_flags = wc_flag::grh;
        if (p.op->has(pkt::Ext::immdt)) {
            wc.imm_data = p.h.imm;
            wc.wc_flags |= wc_flag::with_imm;
        }
        wc.sgid = source_gid(p.h);
        trace_wc(q.qpn, wc);
    });
}

}  // namespace hcaemu::transport
