// QPs: creation, the state machine with its attribute masks, work request posting with
// validation, flush to ERR. The per-packet side of a QP lives in transport/.
#include <algorithm>
#include <cstring>

#include "hca_model/device.hpp"

namespace hcaemu {

namespace {


Status from_modify_error(ModifyError e) {
    switch (e) {
    case ModifyError::ok: return Status::ok;
    case ModifyError::bad_transition: return Status::bad_transition;
    case ModifyError::missing_attr: return Status::missing_attr;
    case ModifyError::attr_not_allowed:
    case ModifyError::unknown_attr: return Status::attr_not_allowed;
    default: return Status::invalid_argument;
    }
}

}  // namespace

Result<Qp> Device::create_qp(const Pd& pdh, QpInitAttr& init) {
    PdObj* p = pdh.device() == this ? pd(pdh.handle()) : nullptr;
    CqObj* scq = init.send_cq && init.send_cq->device() == this ? cq(init.send_cq->handle()) : nullptr;
    CqObj* rcq = init.recv_cq && init.recv_cq->device() == this ? cq(init.recv_cq->handle()) : nullptr;
    SrqObj* s = init.srq && init.srq->device() == this ? srq(init.srq->handle()) : nullptr;
    if (!p || !scq || !rcq || (init.srq && !s)) return Result<Qp>::error(Status::bad_handle);
    QpCap& c = init.cap;
    if (init.qp_type != QpType::rc && init.qp_type != QpType::uc && init.qp_type != QpType::ud)
        return Result<Qp>::error(Status::invalid_argument);
    if (c.max_send_wr < 1 || c.max_send_wr > attr_.max_qp_wr || c.max_send_sge > attr_.max_sge ||
        c.max_inline_data > attr_.max_inline_data)
        return Result<Qp>::error(Status::invalid_argument);
    if (!s && (c.max_recv_wr < 1 || c.max_recv_wr > attr_.max_qp_wr || c.max_recv_sge > attr_.max_sge))
        return Result<Qp>::error(Status::invalid_argument);
    if (s && s->pd != p) return Result<Qp>::error(Status::invalid_argument);
    auto o = std::make_unique<QpObj>();
    QpObj* q = o.get();
    const int64_t i = qps_.insert(std::move(o));
    if (i < 0) return Result<Qp>::error(Status::no_resources);
    q->qpn = uint32_t(i);
    q->handle = make_handle(qps_, uint32_t(i));
    q->type = init.qp_type;
    q->pd = p;
    q->send_cq = scq;
    q->recv_cq = rcq;
    q->srq = s;
    q->sq_sig_all = init.sq_sig_all;
    if (s) c.max_recv_wr = c.max_recv_sge = 0;
    c.max_send_sge = std::max(c.max_send_sge, 1u);
    if (!s) c.max_recv_sge = std::max(c.max_recv_sge, 1u);
    q->attr.cap = c;
    q->sq.reset(c.max_send_wr);
    q->sq_sges.resize(size_t(q->sq.storage()) * c.max_send_sge);
    q->sq_mrs.resize(size_t(q->sq.storage()) * c.max_send_sge);
    q->sq_inline.resize(size_t(q->sq.storage()) * c.max_inline_data);
    if (!s) {
        q->rq.reset(c.max_recv_wr);
        q->rq_sges.resize(size_t(q->rq.storage()) * c.max_recv_sge);
    }
    ++p->users;
    if (s) {
        ++s->users;
        s->qps.push_back(q);
    }
    scq->qps.push_back(q);
    if (rcq != scq) rcq->qps.push_back(q);
    return {Status::ok, Qp(this, q->handle)};
}

Status Device::destroy_qp(uint32_t h) {
    QpObj* q = qp(h);
    if (!q) return Status::bad_handle;
    if (listener_) listener_->qp_destroyed(*q);
    for (CqObj* c : {q->send_cq, q->recv_cq})
        c->qps.erase(std::remove(c->qps.begin(), c->qps.end(), q), c->qps.end());
    for (uint64_t n = q->sq.head; n < q->sq.tail; ++n) release(q, q->sq.at(n));
    --q->pd->users;
    if (SrqObj* s = q->srq) {
        --s->users;
        s->qps.erase(std::remove(s->qps.begin(), s->qps.end(), q), s->qps.end());
    }
    qps_.erase(h >> 8);
    return Status::ok;
}

Status Qp::destroy() {
    if (!dev_) return Status::bad_handle;
    const Status s = dev_->destroy_qp(h_);
    if (s == Status::ok || s == Status::bad_handle) dev_ = nullptr;
    return s;
}

uint32_t Qp::qpn() const { const QpObj* q = dev_ ? dev_->qp(h_) : nullptr; return q ? q->qpn : 0; }
QpState Qp::state() const { const QpObj* q = dev_ ? dev_->qp(h_) : nullptr; return q ? q->state() : QpState::err; }

Status Qp::query(QpAttr& a, QpInitAttr* init) const {
    const QpObj* q = dev_ ? dev_->qp(h_) : nullptr;
    if (!q) return Status::bad_handle;
    a = q->attr;
    a.cur_qp_state = q->state();
    a.sq_draining = q->state() == QpState::sqd && !q->sq.empty();
    if (init) {
        init->cap = q->attr.cap;
        init->qp_type = q->type;
        init->sq_sig_all = q->sq_sig_all;
    }
    return Status::ok;
}

Status Device::validate_attr(const QpObj& q, const QpAttr& a, uint32_t mask) const {
    using namespace qp_attr;
    if ((mask & cur_state) && a.cur_qp_state != q.state()) return Status::invalid_argument;
    if ((mask & access_flags) &&
        (a.qp_access_flags & ~(access::local_write | access::remote_write | access::remote_read | access::remote_atomic)))
        return Status::invalid_argument;
    if ((mask & pkey_index) && a.pkey_index >= attr_.max_pkeys) return Status::invalid_argument;
    if ((mask & port) && a.port_num != 1) return Status::invalid_argument;
    if ((mask & path_mtu) && (uint8_t(a.path_mtu) < 1 || uint8_t(a.path_mtu) > uint8_t(port_.max_mtu)))
        return Status::invalid_argument;
    if ((mask & timeout) && a.timeout > 31) return Status::invalid_argument;
    if ((mask & retry_cnt) && a.retry_cnt > 7) return Status::invalid_argument;
    if ((mask & rnr_retry) && a.rnr_retry > 7) return Status::invalid_argument;
    if ((mask & min_rnr_timer) && a.min_rnr_timer > 31) return Status::invalid_argument;
    if ((mask & max_qp_rd_atomic) && a.max_rd_atomic > attr_.max_qp_init_rd_atom) return Status::invalid_argument;
    if ((mask & max_dest_rd_atomic) && a.max_dest_rd_atomic > attr_.max_qp_rd_atom) return Status::invalid_argument;
    if ((mask & path_mig_state) && a.path_mig_state > 2) return Status::invalid_argument;
    if ((mask & alt_path) && (a.alt_port_num != 1 || a.alt_ah_attr.sgid_index >= gids_.size() ||
                              a.alt_pkey_index >= attr_.max_pkeys || a.alt_timeout > 31))
        return Status::invalid_argument;
    if ((mask & dest_qpn) && a.dest_qp_num > 0xFFFFFF) return Status::invalid_argument;
    if ((mask & av) && (a.ah_attr.port_num != 1 || a.ah_attr.sgid_index >= gids_.size() ||
                        !a.ah_attr.is_global || a.ah_attr.flow_label > 0xFFFFF))
        return Status::invalid_argument;
    return Status::ok;
}

ModifyResult Device::modify_qp(uint32_t h, const QpAttr& a, uint32_t mask) {
    QpObj* q = qp(h);
    if (!q) return {Status::bad_handle, 0};
    const QpState cur = q->state();
    const QpState next = mask & qp_attr::state ? a.qp_state : cur;
    if (uint8_t(next) >= kQpStateCount) return {Status::invalid_argument, qp_attr::state};
    const TransitionCheck t = check_qp_transition(q->type, cur, next, mask);
    if (t.err != ModifyError::ok) return {from_modify_error(t.err), t.bits};
    if (Status s = validate_attr(*q, a, mask); s != Status::ok) return {s, 0};

    // Every check passed: apply the attributes, then the state change.
    using namespace qp_attr;
    QpAttr& x = q->attr;
    if (mask & access_flags) x.qp_access_flags = a.qp_access_flags;
    if (mask & pkey_index) x.pkey_index = a.pkey_index;
    if (mask & port) x.port_num = a.port_num;
    if (mask & qkey) x.qkey = a.qkey;
    if (mask & av) x.ah_attr = a.ah_attr;
    if (mask & path_mtu) x.path_mtu = a.path_mtu;
    if (mask & timeout) x.timeout = a.timeout;
    if (mask & retry_cnt) x.retry_cnt = a.retry_cnt;
    if (mask & rnr_retry) x.rnr_retry = a.rnr_retry;
    if (mask & rq_psn) x.rq_psn = a.rq_psn & 0xFFFFFF;  // PSNs are 24 bits: masked, as drivers do
    if (mask & max_qp_rd_atomic) x.max_rd_atomic = a.max_rd_atomic;
    if (mask & min_rnr_timer) x.min_rnr_timer = a.min_rnr_timer;
    if (mask & sq_psn) x.sq_psn = a.sq_psn & 0xFFFFFF;
    if (mask & alt_path) {
        x.alt_ah_attr = a.alt_ah_attr;
        x.alt_pkey_index = a.alt_pkey_index;
        x.alt_port_num = a.alt_port_num;
        x.alt_timeout = a.alt_timeout;
    }
    if (mask & path_mig_state) x.path_mig_state = a.path_mig_state;
    if (mask & max_dest_rd_atomic) x.max_dest_rd_atomic = a.max_dest_rd_atomic;
    if (mask & dest_qpn) x.dest_qp_num = a.dest_qp_num;
    if (mask & en_sqd_async_notify) x.en_sqd_async_notify = a.en_sqd_async_notify;
    x.qp_state = next;
    if (next == QpState::reset && cur != QpState::reset) {
        // RESET discards every WQE without completions and forgets the connection (IBTA ch. 10, QP states).
        for (uint64_t n = q->sq.head; n < q->sq.tail; ++n) release(q, q->sq.at(n));
        q->sq.clear();
        q->rq.clear();
        // Its CQEs not yet polled go too, as providers clean the CQs at RESET (mlx5, mlx4): a QP
        // brought back from ERR must not find its old flush completions (rdma-core's test_mr).
        q->send_cq->purge(q->qpn);
        if (q->recv_cq != q->send_cq) q->recv_cq->purge(q->qpn);
        const QpCap kept = x.cap;  // not `cap`: clang -Wshadow (qp_attr::cap is in scope)
        x = QpAttr{};
        x.cap = kept;
    } else if (next == QpState::err && cur != QpState::err) {
        if (listener_) listener_->qp_error(*q);
        flush(q);
        if (q->srq) raise(EventType::qp_last_wqe_reached, q->qpn);  // IBTA ch. 11: Last WQE Reached
    } else if (next == QpState::sqd && cur == QpState::rts && x.en_sqd_async_notify && q->sq.empty()) {
        raise(EventType::sq_drained, q->qpn);  // nothing outstanding: drained at once
    }
    if (listener_) listener_->qp_modified(*q, cur);
    return {Status::ok, 0};
}

ModifyResult Qp::modify(const QpAttr& a, uint32_t mask) {
    return dev_ ? dev_->modify_qp(h_, a, mask) : ModifyResult{Status::bad_handle, 0};
}

void Device::release(QpObj*, SendWqe& w) {
    if (w.ah) w.ah->users.dec();
    w.ah = nullptr;
    if (w.pinned) {
        for (uint32_t i = 0; i < w.num_sge; ++i)
            w.pinned_mrs[i]->pins.dec();
        w.pinned = false;
    }
}

void Device::retire_send(QpObj* q, WcStatus status, WcOpcode opcode, uint32_t byte_len) {
    if (q->sq.empty()) return;
    SendWqe& w = q->sq.at(q->sq.head++);
    release(q, w);
    if (status != WcStatus::success) counters().add(Counter::req_cqe_error);
    if (w.signaled || status != WcStatus::success)
        complete_with(q->send_cq, false, [&](Wc& wc) {
            wc.wr_id = w.wr_id;
            wc.status = status;
            wc.opcode = opcode;
            wc.byte_len = byte_len;
            wc.qp_num = q->qpn;
        });
}

void Device::flush(QpObj* q, bool sq, bool rq) {
    // Error completions are reported for signaled and unsignaled WRs alike (IBTA ch. 10).
    while (sq && !q->sq.empty()) {
        SendWqe& w = q->sq.at(q->sq.head++);
        release(q, w);
        Wc wc;
        wc.wr_id = w.wr_id;
        wc.status = WcStatus::wr_flush_err;
        wc.opcode = wc_opcode_for(w.opcode);
        wc.qp_num = q->qpn;
        counters().add(Counter::req_cqe_flush_error);
        complete(q->send_cq, wc);
    }
    while (rq && !q->rq.empty()) {
        const RecvWqe& w = q->rq.at(q->rq.head++);
        Wc wc;
        wc.wr_id = w.wr_id;
        wc.status = WcStatus::wr_flush_err;
        wc.opcode = WcOpcode::recv;
        wc.qp_num = q->qpn;
        counters().add(Counter::resp_cqe_flush_error);
        complete(q->recv_cq, wc);
    }
}

void Device::to_error(QpObj* q, const EventType* event) {
    if (q->state() == QpState::err) return;
    q->attr.qp_state = QpState::err;
    if (event) raise(*event, q->qpn);
    if (listener_) listener_->qp_error(*q);
    flush(q);
    if (q->srq) raise(EventType::qp_last_wqe_reached, q->qpn);
}

void Device::qp_to_error(QpObj* q, EventType event) { to_error(q, &event); }

void Device::qp_to_error(QpObj* q) { to_error(q, nullptr); }

void Device::qp_to_sqe(QpObj* q) {
    if (q->type == QpType::rc) return qp_to_error(q);  // RC has no SQE: its errors go to ERR
    if (q->state() != QpState::rts && q->state() != QpState::sqd) return;
    q->attr.qp_state = QpState::sqe;
    flush(q, true, false);
}

// The SGE list's shape, checked when any WR is posted: its count within the QP's (or SRQ's) cap,
// and a list to read when the count says there is one.
Status Device::sge_list_status(const Sge* sgl, int n, uint32_t max_sge) {
    if (n < 0 || uint32_t(n) > max_sge) return Status::too_many_sge;
    if (n > 0 && !sgl) return Status::invalid_argument;
    return Status::ok;
}

// The bytes an SGE list (its shape checked) names, in 64 bits: 2^31 SGEs of 2^32 - 1 fit.
uint64_t Device::sge_total(const Sge* sgl, int n) {
    uint64_t len = 0;
    for (int i = 0; i < n; ++i) len += sgl[i].length;
    return len;
}

// One pass over a send WR's SGE list: its total length, each SGE copied to the WQE's slot
// (`dst`, not yet posted) and its MR found and checked (for READ and atomic responses, local
// write). Returns the first SGE's key error; the total is whole either way.
Status Device::check_send_sges(const PdObj* p, const Sge* sgl, int n, bool write, Sge* dst, MrObj** mrs,
                               uint64_t& len) const {
    Status keys = Status::ok;
    len = 0;
    for (int i = 0; i < n; ++i) {
        const Sge& s = sgl[i];
        len += s.length;
        dst[i] = s;
        MrObj* m = mr_by_key(s.lkey);
        if (keys == Status::ok && check_mr_access(m, p, s.addr, s.length, write ? access::local_write : 0) != MrError::ok)
            keys = Status::bad_lkey;
        mrs[i] = m;
    }
    return keys;
}

Status Device::validate_send(const QpObj& q, const SendWr& wr, Sge* sges, MrObj** mrs, uint64_t& len) const {
    if (!opcode_allowed(q.type, wr.opcode)) return Status::opcode_not_allowed;
    const bool atomic = is_atomic(wr.opcode);
    if (atomic && attr_.atomic_cap == AtomicCap::none) return Status::opcode_not_allowed;
    if (const Status s = sge_list_status(wr.sg_list, wr.num_sge, q.attr.cap.max_send_sge); s != Status::ok) return s;
    const bool inl = wr.send_flags & send_flag::inline_;
    Status keys = Status::ok;
    if (inl) len = sge_total(wr.sg_list, wr.num_sge);  // copied from process memory now: no lkeys (verbs)
    else keys = check_send_sges(q.pd, wr.sg_list, wr.num_sge, is_rd_atomic(wr.opcode), sges, mrs, len);
    if (len > port_.max_msg_sz) return Status::invalid_argument;
    if (inl) {
        if (wr.opcode == WrOpcode::rdma_read || atomic) return Status::invalid_argument;
        if (len > q.attr.cap.max_inline_data) return Status::inline_too_large;
    } else if (keys != Status::ok) {
        return keys;
    }
    // Initiator depth 0: no READ or atomic may ever be outstanding, so one would wait for ever
    // (rxe's requester never gets an rd_atomic credit for it): refused when posted.
    if (is_rd_atomic(wr.opcode) && q.attr.max_rd_atomic == 0) return Status::invalid_argument;
    if (atomic) {
        if (len != 8) return Status::invalid_argument;  // one 8-byte result (IBTA 9.4: atomic operations)
        if (wr.atomic.remote_addr & 7) return Status::misaligned;
    }
    if (q.type == QpType::ud) {
        const AhObj* a = wr.ud.ah && wr.ud.ah->device() == this ? ah(wr.ud.ah->handle()) : nullptr;
        if (!a || a->pd != q.pd) return Status::no_ah;
        if (len > mtu_bytes(port_.active_mtu)) return Status::invalid_argument;  // UD: one packet
    }
    return Status::ok;
}

Status Device::post_send(uint32_t h, const SendWr* wr, const SendWr** bad_wr) {
    QpObj* q = qp(h);
    if (bad_wr) *bad_wr = wr;
    if (!q) return Status::bad_handle;
    const QpState st = q->state();
    // Sends are taken in RTS and SQD (queued until RTS); in SQE and ERR they are flushed.
    if (st == QpState::reset || st == QpState::init || st == QpState::rtr) return Status::bad_qp_state;
    for (; wr; wr = wr->next) {
        if (bad_wr) *bad_wr = wr;
        if (q->sq.full()) return Status::queue_full;
        const uint64_t n = q->sq.tail;
        const size_t slot = q->sq.index(n);
        MrObj** mrs = &q->sq_mrs[slot * q->attr.cap.max_send_sge];
        Sge* sges = &q->sq_sges[slot * q->attr.cap.max_send_sge];
        uint64_t len = 0;
        if (Status s = validate_send(*q, *wr, sges, mrs, len); s != Status::ok) return s;
        SendWqe& w = q->sq.at(n);
        w = SendWqe{};
        w.wr_id = wr->wr_id;
        w.opcode = wr->opcode;
        w.send_flags = wr->send_flags;
        w.signaled = q->sq_sig_all || (wr->send_flags & send_flag::signaled);
        w.is_inline = wr->send_flags & send_flag::inline_;
        w.imm_data = wr->opcode == WrOpcode::send_with_inv ? wr->invalidate_rkey : wr->imm_data;
        const bool atomic = is_atomic(wr->opcode);
        w.remote_addr = atomic ? wr->atomic.remote_addr : wr->rdma.remote_addr;
        w.rkey = atomic ? wr->atomic.rkey : wr->rdma.rkey;
        w.compare_add = wr->atomic.compare_add;
        w.swap = wr->atomic.swap;
        if (q->type == QpType::ud) {
            w.ah = ah(wr->ud.ah->handle());
            w.ah->users.inc();
            w.remote_qpn = wr->ud.remote_qpn;
            w.remote_qkey = wr->ud.remote_qkey;
        }
        if (w.is_inline) {
            uint8_t* dst = &q->sq_inline[slot * q->attr.cap.max_inline_data];
            for (int i = 0, at = 0; i < wr->num_sge; at += int(wr->sg_list[i].length), ++i)
                std::memcpy(dst + at, reinterpret_cast<const void*>(uintptr_t(wr->sg_list[i].addr)), wr->sg_list[i].length);
        } else {
            // The MRs stay pinned until the WQE retires: a retransmission gathers from them again.
            for (int i = 0; i < wr->num_sge; ++i) mrs[i]->pins.inc();  // found, checked, SGEs copied: validate_send
            w.num_sge = uint32_t(wr->num_sge);
            w.pinned = true;
            w.pinned_mrs = mrs;
        }
        w.length = uint32_t(len);  // <= max_msg_sz (2^31)
        ++q->sq.tail;
    }
    if (bad_wr) *bad_wr = nullptr;
    if (st == QpState::err || st == QpState::sqe) flush(q, true, false);  // SQE: receives go on
    else if (listener_) listener_->sq_doorbell(*q);
    return Status::ok;
}

Status Qp::post_send(const SendWr* wr, const SendWr** bad_wr) {
    if (!dev_) return Status::bad_handle;
    return dev_->post_send(h_, wr, bad_wr);
}

Status Device::post_recv(uint32_t h, const RecvWr* wr, const RecvWr** bad_wr) {
    QpObj* q = qp(h);
    if (bad_wr) *bad_wr = wr;
    if (!q) return Status::bad_handle;
    if (q->srq) return Status::invalid_argument;  // receives go to the SRQ
    if (q->state() == QpState::reset) return Status::bad_qp_state;
    for (; wr; wr = wr->next) {
        if (bad_wr) *bad_wr = wr;
        if (q->rq.full()) return Status::queue_full;
        const uint64_t n = q->rq.tail;
        const uint32_t cap = q->attr.cap.max_recv_sge;
        if (const Status s = fill_recv(q->rq.at(n), *wr, &q->rq_sges[q->rq.index(n) * cap], cap); s != Status::ok)
            return s;
        ++q->rq.tail;
    }
    if (bad_wr) *bad_wr = nullptr;
    if (q->state() == QpState::err) flush(q);
    else if (listener_) listener_->rq_doorbell(*q);
    return Status::ok;
}

// A receive's keys are neither checked nor pinned when it is posted (as rxe's post_recv): the
// DMA engine checks each access when a message lands, and a bad or deregistered L_Key fails the
// WQE then, a local protection error the responder NAKs as Remote Operational Error. So
// ibv_dereg_mr with receives posted on the MR succeeds, as on rxe. Only the list's shape and its
// total length are checked at post.
// fill_recv: a receive WR into its ring slot, not yet posted (the caller advances the tail on
// ok), its SGE list's shape and total length (within the port's max_msg_sz, as rxe's post_recv:
// invalid_argument) checked in the same pass.
Status Device::fill_recv(RecvWqe& w, const RecvWr& wr, Sge* dst, uint32_t max_sge) const {
    if (const Status s = sge_list_status(wr.sg_list, wr.num_sge, max_sge); s != Status::ok) return s;
    uint64_t len = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
        dst[i] = wr.sg_list[i];
        len += wr.sg_list[i].length;
    }
    if (len > port_.max_msg_sz) return Status::invalid_argument;
    w.wr_id = wr.wr_id;
    w.num_sge = uint32_t(wr.num_sge);
    w.length = uint32_t(len);
    return Status::ok;
}

Status Qp::post_recv(const RecvWr* wr, const RecvWr** bad_wr) {
    if (!dev_) return Status::bad_handle;
    return dev_->post_recv(h_, wr, bad_wr);
}

Status Device::post_srq_recv(uint32_t h, const RecvWr* wr, const RecvWr** bad_wr) {
    SrqObj* s = srq(h);
    if (bad_wr) *bad_wr = wr;
    if (!s) return Status::bad_handle;
    for (; wr; wr = wr->next) {
        if (bad_wr) *bad_wr = wr;
        if (s->rq.full()) return Status::queue_full;
        const uint64_t n = s->rq.tail;
        const uint32_t cap = s->attr.max_sge;
        if (const Status st = fill_recv(s->rq.at(n), *wr, &s->sges[s->rq.index(n) * cap], cap); st != Status::ok)
            return st;
        ++s->rq.tail;
    }
    if (bad_wr) *bad_wr = nullptr;
    if (listener_)
        for (QpObj* q : s->qps) listener_->rq_doorbell(*q);
    return Status::ok;
}

Status Srq::post_recv(const RecvWr* wr, const RecvWr** bad_wr) {
    if (!dev_) return Status::bad_handle;
    return dev_->post_srq_recv(h_, wr, bad_wr);
}

bool Device::take_recv(QpObj* q, RecvWqe& wqe, std::span<Sge> sges) {
    if (rq_fill_ && (q->srq ? q->srq->rq.empty() : q->rq.empty())) rq_fill_(rq_fill_ctx_, *q);
    if (SrqObj* s = q->srq) {
        if (s->rq.empty()) return false;
        const uint64_t n = s->rq.head++;
        wqe = s->rq.at(n);
        const Sge* src = &s->sges[s->rq.index(n) * s->attr.max_sge];
        wqe.num_sge = uint32_t(std::min<size_t>(wqe.num_sge, sges.size()));
        std::copy(src, src + wqe.num_sge, sges.begin());
        // The limit event fires once when the SRQ falls below the armed limit (IBTA ch. 10: SRQ limit).
        if (s->attr.srq_limit && s->rq.count() < s->attr.srq_limit) {
            s->attr.srq_limit = 0;
            raise(EventType::srq_limit_reached, s->handle);
        }
        return true;
    }
    if (q->rq.empty()) return false;
    const uint64_t n = q->rq.head++;
    wqe = q->rq.at(n);
    const Sge* src = q->recv_sges(n);
    wqe.num_sge = uint32_t(std::min<size_t>(wqe.num_sge, sges.size()));
    std::copy(src, src + wqe.num_sge, sges.begin());
    return true;
}

}  // namespace hcaemu
