// The requester: takes send WQEs in order, splits each message into packets of the path MTU,
// numbers them with PSNs and sends them; restarts from a PSN for Go-Back-N (IBTA 9.7).
#include <algorithm>
#include <cstring>

#include "transport/hca.hpp"
#include "transport/psn.hpp"

namespace hcaemu::transport {

namespace {

// The opcode of a SEND or WRITE packet from its position in the message (IBTA 9.2 table 38).
uint8_t data_opcode(QpType t, const SendWqe& w, bool first, bool last) {
    using namespace pkt::op;
    if (t == QpType::ud) return uint8_t(ud | (w.opcode == WrOpcode::send_with_imm ? send_only_imm : send_only));
    const uint8_t base = t == QpType::uc ? uc : rc;
    switch (w.opcode) {
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm: {
        const bool imm = w.opcode == WrOpcode::rdma_write_with_imm;
        if (first && last) return uint8_t(base | (imm ? write_only_imm : write_only));
        if (first) return uint8_t(base | write_first);
        if (last) return uint8_t(base | (imm ? write_last_imm : write_last));
        return uint8_t(base | write_middle);
    }
    default: {
        const bool imm = w.opcode == WrOpcode::send_with_imm, inv = w.opcode == WrOpcode::send_with_inv;
        if (first && last) return uint8_t(base | (imm ? send_only_imm : inv ? send_only_inv : send_only));
        if (first) return uint8_t(base | send_first);
        if (last) return uint8_t(base | (imm ? send_last_imm : inv ? send_last_inv : send_last));
        return uint8_t(base | send_middle);
    }
    }
}

}  // namespace

void Hca::req_restart(QpCtx& c, uint32_t psn) {
    QpObj& q = *c.qp;
    // Find the outstanding WQE whose PSN range holds `psn` and resume there (Go-Back-N).
    for (uint64_t n = q.sq.head; n < c.next_wqe || (n == c.next_wqe && c.next_off); ++n) {
        if (n >= q.sq.tail) break;
        const WqeTrack& t = c.track[q.sq.index(n)];
        if (!t.started) break;
        const int32_t d = psn_diff(psn, t.first_psn);
        if (d < 0 || uint32_t(d) >= t.npsn) continue;
        const SendWqe& w = q.sq.at(n);
        c.next_wqe = n;
        c.next_off = is_atomic(w.opcode) ? 0 : std::min(uint32_t(d) * c.mtu, w.length);
        c.psn = psn;
        if (psn_before(psn, c.una)) c.una = psn;
        c.since_ackreq = 0;
        c.restarted = true;
        c.restart_psn = psn;
        counters().add(Counter::completer_retry_err);
        trace(TraceKind::retransmit, q.qpn, psn);
        schedule(c);
        return;
    }
}

void Hca::req_local_error(QpCtx& c, uint64_t n, WcStatus status) {
    // Completions leave in posting order (IBTA 10.8.3): WQEs sent before this one complete (or
    // fail) first, then this one with its error; the later ones are flushed.
    if (n == c.qp->sq.head) {
        fatal(c, status, wc_opcode_for(c.qp->sq.at(n).opcode));
        return;
    }
    c.failed_wqe = n;
    c.failed_status = status;
}

void Hca::req_run(QpCtx& c) {
    QpObj& q = *c.qp;
    // SQD drains: the message in progress and retransmissions go on, no new WQE starts (IBTA ch. 10).
    const bool draining = q.state() == QpState::sqd;
    if ((q.state() != QpState::rts && !draining) || c.rnr_wait) return;
    const bool rc = q.type == QpType::rc;
    uint32_t budget = cfg_.tx_budget;
    bool sent_oldest = false;  // the oldest unacknowledged PSN went out (again) in this call
    while (c.next_wqe < q.sq.tail) {
        if (budget == 0) {
            schedule(c);
            break;
        }
        if (rc && psn_diff(c.psn, c.una) >= int32_t(cfg_.max_inflight_psn)) break;  // window full: wait for ACKs
        const uint64_t n = c.next_wqe;
        SendWqe& w = q.sq.at(n);
        WqeTrack& t = c.track[q.sq.index(n)];
        const bool rd = is_rd_atomic(w.opcode);
        if (n == c.failed_wqe) {  // a local error waits for the WQEs before it to complete
            if (n == q.sq.head) {
                fatal(c, c.failed_status, wc_opcode_for(w.opcode));
                return;
            }
            break;
        }
        if (!t.started && draining) break;
        if (!t.started) {
            // Initiator depth: at most max_rd_atomic READ/atomic requests outstanding (IBTA 9.7);
            // a fenced WQE waits for every earlier one of them. With a depth of 0 (set in SQD after
            // the WQE was posted) it could never go: a local QP operation error, not a hang.
            if (rd && q.attr.max_rd_atomic == 0) {
                req_local_error(c, n, WcStatus::loc_qp_op_err);
                break;
            }
            if (rd && c.rd_atomic_out >= q.attr.max_rd_atomic) break;
            if ((w.send_flags & send_flag::fence) && c.rd_atomic_out) break;
            t.first_psn = c.psn;
            t.npsn = is_atomic(w.opcode) ? 1 : uint32_t(msg_packets(w.length, c.mtu));
            t.read_rcvd = 0;
            t.started = true;
            if (rd) ++c.rd_atomic_out;
            c.next_off = 0;
            if (tracing())
                trace(TraceEvent{.kind = TraceKind::wqe_fetched, .qpn = q.qpn, .psn = t.first_psn, .wqe = &w, .count = t.npsn});
        }

        // RC and UC start from the QP's template (a copy, not a zeroing and then a copy).
        pkt::Headers h = q.type == QpType::ud ? pkt::Headers{} : tmpl(c);
        if (q.type == QpType::ud) {
            if (w.ah && !w.ah->dmac_valid && resolve(w.ah->attr.dgid, w.ah->dmac)) w.ah->dmac_valid = true;
            if (!w.ah || !headers_for(q, w.ah->attr, w.remote_qpn, h, w.ah->dmac_valid ? &w.ah->dmac : nullptr)) {
                req_local_error(c, n, WcStatus::loc_qp_op_err);
                break;
            }
            // A Q_Key with its high bit set means "use the QP's own" (IBTA ch. 10, Q_Keys).
            h.deth = {(w.remote_qkey & 0x80000000u) ? q.attr.qkey : w.remote_qkey, 0, q.qpn};
        }
        h.bth.psn = c.psn;
        uint32_t plen = 0;
        uint32_t npsn = 1;  // PSNs this packet takes
        bool last = true;
        if (w.opcode == WrOpcode::rdma_read) {
            const uint32_t off = c.next_off;
            h.bth.opcode = pkt::op::read_request;
            h.reth = {w.remote_addr + off, w.rkey, w.length - off};
            npsn = t.npsn - uint32_t(psn_diff(c.psn, t.first_psn));  // the responses still to come
            h.bth.ack_req = true;
        } else if (is_atomic(w.opcode)) {
            h.bth.opcode = w.opcode == WrOpcode::atomic_cmp_and_swp ? pkt::op::cmp_swap : pkt::op::fetch_add;
            const bool cas = w.opcode == WrOpcode::atomic_cmp_and_swp;
            h.atomic = {w.remote_addr, w.rkey, cas ? w.swap : w.compare_add, cas ? w.compare_add : 0};
            h.bth.ack_req = true;
        } else {
            const uint32_t off = c.next_off;
            plen = std::min(c.mtu, w.length - off);
            const bool first = off == 0;
            last = off + plen == w.length;
            h.bth.opcode = data_opcode(q.type, w, first, last);
            const pkt::OpcodeInfo& oi = pkt::opcode_info(h.bth.opcode);
            if (oi.has(pkt::Ext::reth)) h.reth = {w.remote_addr, w.rkey, w.length};
            if (oi.has(pkt::Ext::immdt)) h.imm = w.imm_data;
            if (oi.has(pkt::Ext::ieth)) h.ieth_rkey = w.imm_data;
            // SE only on the last packet of a SEND or of an RDMA WRITE with immediate: a plain
            // WRITE consumes no receive WQE, so there is no completion to solicit (IBTA 9.2 BTH
            // SE; rxe's init_req_packet).
            h.bth.se = last && (w.send_flags & send_flag::solicited) && w.opcode != WrOpcode::rdma_write;
            // AckReq on the last packet and every ackreq_interval packets of a long message (IBTA
            // 9.7), and on the last one of this QP's turn (its budget, its window or the port's
            // queue full): unacknowledged packets must not wait a whole round of the other QPs,
            // which with 1000 QPs lasts as long as the ACK timeout.
            const bool turn_ends = budget == 1 || psn_diff(psn_add(c.psn, 1), c.una) >= int32_t(cfg_.max_inflight_psn) ||
                                   tx_filling();
            h.bth.ack_req = rc && (last || c.since_ackreq + 1 >= cfg_.ackreq_interval || turn_ends);
        }

        if (c.dcqcn.on && !dcqcn_admit(*this, c, plen)) break;  // DCQCN's rate limiter: wait for its timer
        const uint32_t off = c.next_off;
        const Tx r = send(h, plen, [&](std::span<uint8_t> out, uint32_t* crc) {
            if (w.is_inline) {
                const uint8_t* src = q.send_inline(n) + off;
                if (crc) *crc = pkt::crc32_copy(*crc, out.data(), src, out.size());
                else std::memcpy(out.data(), src, out.size());
                return true;
            }
            if (dev_.dma().gather(q.pd, q.send_sges(n), w.num_sge, off, out, crc) != MrError::ok) return false;
            trace_dma_sges(TraceKind::dma_read, q.qpn, h.bth.psn, q.send_sges(n), w.num_sge, off, uint32_t(out.size()));
            return true;
        }, q.type == QpType::ud ? nullptr : &c.ftmpl);
        if (r == Tx::no_buffer) {
            schedule(c);  // the port's pool is empty: continue next turn
            break;
        }
        if (r == Tx::dma_error || r == Tx::build_error) {
            // SGEs that fail the MR check: local protection error; a packet the port cannot take:
            // local QP operation error (as rxe: EFAULT from the copy, else LOC_QP_OP_ERR).
            req_local_error(c, n, r == Tx::dma_error ? WcStatus::loc_prot_err : WcStatus::loc_qp_op_err);
            break;
        }
        --budget;
        sent_oldest |= h.bth.psn == c.una;
        c.since_ackreq = h.bth.ack_req ? 0 : c.since_ackreq + 1;
        c.psn = psn_add(c.psn, npsn);
        if (w.opcode == WrOpcode::rdma_read || is_atomic(w.opcode) || last) {
            ++c.next_wqe;
            c.next_off = 0;
            if (!rc) {
                // UC and UD complete when the last packet leaves: nothing will acknowledge it.
                c.una = c.psn;
                retire(c, WcStatus::success, wc_opcode_for(w.opcode), w.length);
            }
        } else {
            c.next_off += plen;
        }
    }
    if (q.state() != QpState::rts && q.state() != QpState::sqd) return;  // a local error ended it
    // The ACK timer runs from the transmission: a retransmission that waited for its turn behind
    // other QPs' packets restarts it (the timeout armed at the restart is the bound if it never goes).
    if (rc && c.una != c.psn && (sent_oldest || !timers_.armed(c.ack_timer)) && q.attr.timeout)
        timers_.arm(c.ack_timer, now() + ack_timeout_ns(q.attr.timeout));
}

}  // namespace hcaemu::transport
