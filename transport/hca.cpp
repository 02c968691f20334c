#include "transport/hca.hpp"

#include <algorithm>

#include "transport/hca_group.hpp"
#include "transport/psn.hpp"

namespace hcaemu::transport {

namespace {

void on_ack_timer(Timer* t, void* ctx) {
    (void)t;
    auto* c = static_cast<QpCtx*>(ctx);
    c->hca->comp_ack_timeout(*c);
}

void on_rnr_timer(Timer* t, void* ctx) {
    (void)t;
    auto* c = static_cast<QpCtx*>(ctx);
    c->hca->comp_rnr_done(*c);
}

}  // namespace

Hca::Hca(Device& dev, port::Port& port, const port::Clock& clock, const HcaConfig& cfg, const HcaGroup* group,
         uint32_t lcore)
    : dev_(dev), port_(port), clock_(clock), cfg_(cfg), group_(group), lcore_(lcore), timers_(clock) {
    ctx_.resize(size_t(dev.query_device().max_qp) + 2);
    run_.reserve(ctx_.size());  // every QP at most once (the scheduled flag): no allocation on the data path
    running_.reserve(ctx_.size());
    acks_.reserve(ctx_.size());
    if (!group_) dev_.set_listener(this);
    dev_.set_link_mtu(port.mtu());
    PortAttr pa;
    dev_.query_port(1, pa);
    max_msg_sz_ = pa.max_msg_sz;
    // QPs the device made before this Hca: contexts as their transitions would have made them.
    for (uint32_t i = 0; i < dev_.qp_table().capacity(); ++i)
        if (QpObj* q = dev_.qp_table().at(i); q && q->state() != QpState::reset && owns(*q)) make_ctx(*q);
}

bool Hca::owns(const QpObj& qp) const { return !group_ || group_->owner(qp.qpn) == lcore_; }

Hca::~Hca() {
    tx_flush();
    for (uint32_t i = 0; i < ntx_; ++i) port_.free(txq_[i]);  // the port is gone or stuck
    ntx_ = 0;
    if (!group_) dev_.set_listener(nullptr);
}

void Hca::set_neighbor(const Gid& ip, const pkt::Mac& mac) {
    for (auto& n : neighbors_)
        if (n.first == ip) {
            n.second = mac;
            return;
        }
    neighbors_.push_back({ip, mac});
}

// The static table first, then the port (NetPort: ARP/ND; a miss starts resolution there).
bool Hca::resolve(const Gid& ip, pkt::Mac& mac) {
    for (const auto& n : neighbors_)
        if (n.first == ip) {
            mac = n.second;
            return true;
        }
    return port_.neighbor(ip, mac);
}

const pkt::Headers& Hca::tmpl(QpCtx& c) {
    if (c.dmac_unresolved && resolve(c.qp->attr.ah_attr.dgid, c.tmpl.eth.dst)) {
        c.dmac_unresolved = false;
        set_tmpl(c);
    }
    return c.tmpl;
}

void Hca::set_tmpl(QpCtx& c) { pkt::make_template(c.tmpl, c.ftmpl); }

void Hca::route_headers(const Route& r, pkt::Headers& h) {
    h = pkt::Headers{};
    h.eth.src = port_.mac();
    if (r.dmac) h.eth.dst = *r.dmac;
    else if (!resolve(r.dgid, h.eth.dst)) h.eth.dst = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    // RoCE v2 over IPv4 when both GIDs are IPv4-mapped (IBTA Annex A17), else IPv6.
    h.ipv6 = !(pkt::is_ipv4_mapped(r.sgid) && pkt::is_ipv4_mapped(r.dgid));
    if (h.ipv6) {
        h.eth.ethertype = pkt::kEthTypeIpv6;
        h.ip6.src = r.sgid;
        h.ip6.dst = r.dgid;
        h.ip6.traffic_class = r.traffic_class;
        h.ip6.flow_label = r.flow_label;
        h.ip6.hop_limit = r.hop_limit;
    } else {
        h.eth.ethertype = pkt::kEthTypeIpv4;
        h.ip4.src = pkt::ipv4_of_mapped(r.sgid);
        h.ip4.dst = pkt::ipv4_of_mapped(r.dgid);
        h.ip4.tos = r.traffic_class;
        h.ip4.ttl = r.hop_limit;
    }
}

bool Hca::headers_for(const QpObj& qp, const AhAttr& av, uint32_t dest_qpn, pkt::Headers& h, const pkt::Mac* dmac) {
    GidEntry sgid;
    if (dev_.query_gid(1, av.sgid_index, sgid) != Status::ok) return false;
    route_headers({sgid.gid, av.dgid, av.traffic_class, av.flow_label, av.hop_limit, dmac}, h);
    h.udp.sport = qp.type == QpType::ud ? pkt::udp_sport_for_qpn(qp.qpn)
                                        : pkt::udp_sport_for_flow(av.flow_label, qp.qpn, dest_qpn);
    h.bth.dest_qp = dest_qpn;
    h.bth.pkey = dev_.pkey(qp.attr.pkey_index);  // the QP's partition (IBTA 10.9.3)
    return true;
}

QpCtx& Hca::fresh_ctx(QpObj& qp) {
    // A new context replaces the old one, whose timers cancel themselves (control path only).
    auto c = std::make_unique<QpCtx>();
    c->qp = &qp;
    c->hca = this;
    c->ack_timer.fn = on_ack_timer;
    c->ack_timer.ctx = c.get();
    c->rnr_timer.fn = on_rnr_timer;
    c->rnr_timer.ctx = c.get();
    dcqcn_init(*c);
    c->track.resize(qp.sq.storage());
    const DeviceAttr& da = dev_.query_device();
    c->rsges.resize(std::max(da.max_sge, da.max_srq_sge));  // a receive WQE's SGEs, never cut
    ctx_[qp.qpn] = std::move(c);
    return *ctx_[qp.qpn];
}

QpCtx& Hca::make_ctx(QpObj& qp) {
    QpCtx& c = fresh_ctx(qp);
    const QpState st = qp.state();
    if (st != QpState::reset && st != QpState::init) ctx_rtr(c);
    if (st == QpState::rts || st == QpState::sqd || st == QpState::sqe) ctx_rts(c);
    ctx_attrs(c);
    return c;
}

void Hca::ctx_rtr(QpCtx& c) {
    // The connection is known now: the responder's expected PSN, the packet template.
    QpObj& qp = *c.qp;
    c.epsn = qp.attr.rq_psn;
    c.done_psn = psn_sub(c.epsn, 1);  // nothing executed yet: a stale duplicate gets ePSN - 1
    c.res.assign(qp.attr.max_dest_rd_atomic, RespResource{});  // 0: READ and atomics refused
    c.res_next = c.res_pending = 0;
    if (qp.type != QpType::ud) {
        headers_for(qp, qp.attr.ah_attr, qp.attr.dest_qp_num, c.tmpl);
        c.dmac_unresolved = c.tmpl.eth.dst == pkt::Mac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
        set_tmpl(c);
    }
}

void Hca::ctx_rts(QpCtx& c) {
    QpObj& qp = *c.qp;
    c.psn = c.una = qp.attr.sq_psn;
    c.next_wqe = qp.sq.head;
    c.retry_left = qp.attr.retry_cnt;
    c.rnr_left = qp.attr.rnr_retry;
}

void Hca::ctx_attrs(QpCtx& c) {
    QpObj& qp = *c.qp;
    // The path MTU, at most the port's active MTU; UD messages use the port's (as rxe does).
    PortAttr pa;
    dev_.query_port(1, pa);
    const uint32_t port_mtu = mtu_bytes(pa.active_mtu);
    c.mtu = qp.type == QpType::ud ? port_mtu : std::min(mtu_bytes(qp.attr.path_mtu), port_mtu);
    c.pkey = dev_.pkey(qp.attr.pkey_index);  // pkey_index may change in INIT, RTR and SQD
    c.tmpl.bth.pkey = c.pkey;
    if (c.ftmpl.valid) set_tmpl(c);
}

void Hca::qp_modified(QpObj& qp, QpState from) {
    const QpState to = qp.state();
    if (to == QpState::reset) {
        fresh_ctx(qp);
        return;
    }
    if (!ctx_[qp.qpn]) make_ctx(qp);
    QpCtx& c = *ctx_[qp.qpn];
    if (to == QpState::rtr && from == QpState::init) ctx_rtr(c);
    if (to == QpState::rts && from == QpState::rtr) ctx_rts(c);
    ctx_attrs(c);
    if (to == QpState::rts && from == QpState::sqe) {
        // SQE -> RTS: the flushed send queue starts over with what is posted from now (IBTA 10.3.1).
        c.next_wqe = qp.sq.head;
        c.next_off = 0;
        c.failed_wqe = UINT64_MAX;
    }
    if (to == QpState::sqd && from == QpState::rts) {
        c.drained_sent = false;
        check_drained(c);
    }
    if (to == QpState::rts && !qp.sq.empty()) schedule(c);  // SQD -> RTS resumes sending
}

void Hca::qp_error(QpObj& qp) {
    QpCtx* c = ctx(qp.qpn);
    if (!c) return;
    timers_.cancel(c->ack_timer);
    timers_.cancel(c->rnr_timer);
    // A receive WQE the responder had taken for a message in progress is older than every
    // posted one: it is flushed first (IBTA ch. 10: flushed in order).
    if (c->have_wqe) {
        Wc wc;
        wc.wr_id = c->rwqe.wr_id;
        wc.status = WcStatus::wr_flush_err;
        wc.opcode = WcOpcode::recv;
        wc.qp_num = qp.qpn;
        dev_.counters().add(Counter::resp_cqe_flush_error);
        dev_.complete(qp.recv_cq, wc);
        c->have_wqe = false;
    }
    c->next_wqe = qp.sq.tail;
    c->failed_wqe = UINT64_MAX;
    c->in_msg = QpCtx::InMsg::none;
    for (auto& r : c->res) r.sending = false;
    c->res_pending = 0;
    trace(TraceKind::qp_error, qp.qpn, 0);
}

void Hca::qp_destroyed(QpObj& qp) {
    if (QpCtx* c = ctx(qp.qpn)) {
        timers_.cancel(c->ack_timer);
        timers_.cancel(c->rnr_timer);
        run_.erase(std::remove(run_.begin(), run_.end(), qp.qpn), run_.end());
        running_.erase(std::remove(running_.begin(), running_.end(), qp.qpn), running_.end());
        acks_.erase(std::remove(acks_.begin(), acks_.end(), qp.qpn), acks_.end());
        ctx_[qp.qpn].reset();
    }
}

void Hca::sq_doorbell(QpObj& qp) {
    if (QpCtx* c = ctx(qp.qpn)) schedule(*c);
}

void Hca::rq_doorbell(QpObj&) {}  // the requester's retry after an RNR NAK finds the WQE

void Hca::schedule(QpCtx& c) {
    if (c.scheduled) return;
    c.scheduled = true;
    run_.push_back(c.qp->qpn);
}

Hca::Tx Hca::send_ack(QpCtx& c, uint8_t syndrome, uint32_t psn, uint32_t msn) {
    pkt::Headers h = tmpl(c);
    h.bth.opcode = pkt::op::acknowledge;
    h.bth.psn = psn;
    h.aeth = {syndrome, msn};
    return send(h, 0, [](std::span<uint8_t>) { return true; }, &c.ftmpl);
}

void Hca::retire(QpCtx& c, WcStatus status, WcOpcode op, uint32_t byte_len) {
    if (trace_fn_ && !c.qp->sq.empty()) {
        Wc w;
        w.wr_id = c.qp->sq.at(c.qp->sq.head).wr_id;
        w.status = status;
        w.opcode = op;
        w.byte_len = byte_len;
        w.qp_num = c.qp->qpn;
        trace_wc(c.qp->qpn, w);
    }
    // rxe's rdma_sends: SEND WQEs completed successfully (as rdma_recvs counts the receive side).
    if (status == WcStatus::success && op == WcOpcode::send) counters().add(Counter::rdma_sends);
    dev_.retire_send(c.qp, status, op, byte_len);
}

void Hca::fatal(QpCtx& c, WcStatus status, WcOpcode op) {
    if (!c.qp->sq.empty()) retire(c, status, op, 0);
    c.failed_wqe = UINT64_MAX;
    // The error CQE reports it: no QP_FATAL, which applications take for a dying device (rxe's
    // completer and requester move the QP to ERR without an event, as for a Modify QP to ERR).
    if (c.qp->type == QpType::rc) {
        dev_.qp_to_error(c.qp);
        return;
    }
    // UC, UD: the send queue to SQE, flushed; the requester starts over at SQE -> RTS (IBTA 10.3.1).
    dev_.qp_to_sqe(c.qp);
    c.next_wqe = c.qp->sq.tail;
    c.next_off = 0;
    c.una = c.psn;
}

void Hca::trace_sges(TraceKind k, uint32_t qpn, uint32_t psn, const Sge* sges, uint32_t nsge, uint64_t off,
                     uint32_t bytes) {
    uint64_t addr = 0;
    uint32_t key = 0;
    for (uint32_t i = 0; i < nsge; ++i) {
        if (off < sges[i].length) {
            addr = sges[i].addr + off;
            key = sges[i].lkey;
            break;
        }
        off -= sges[i].length;
    }
    trace_fn_(trace_ctx_, TraceEvent{.kind = k, .qpn = qpn, .psn = psn, .addr = addr, .key = key, .bytes = bytes});
}

bool Hca::tx_flush() {
    uint32_t sent = 0;
    while (sent < ntx_) {
        const uint16_t k = port_.tx_burst(&txq_[sent], uint16_t(ntx_ - sent));
        if (k == 0) break;
        sent += k;
    }
    // What the port refused (its ring is full: the peer has not taken the frames before) waits
    // at the head of the queue, in order; send() builds nothing more until there is room. A NIC
    // never drops its own frames: dropping them lost UD SENDs for good (ib_send_lat -c UD between
    // two daemons next to bandwidth tests hung) and made 64+ RC QPs run out of retries.
    if (sent && sent < ntx_) std::copy(txq_.begin() + sent, txq_.begin() + ntx_, txq_.begin());
    ntx_ -= sent;
    tx_refused_ = ntx_ == txq_.size();
    return !tx_refused_;
}

void Hca::profile_turns(bool on) {
    if (!on) prof_.reset();
    else prof_ = std::make_unique<TurnProfile>();  // (re)starts the count
}

size_t Hca::poll() {
    t_lcore = lcore_;  // this thread now writes lcore_'s counters (a store; one thread may poll several)
    size_t moved = 0;
    std::array<uint64_t, TurnProfile::count> t;  // with a profile: each step's end
    const auto mark = [&](int k) {
        if (prof_) [[unlikely]] t[size_t(k)] = clock_.now_ns();
    };
    mark(0);
    tx_refused_ = false;  // the port may have room again
    in_poll_ = true;
    now_valid_ = false;
    const uint16_t n = port_.rx_burst(rxq_.data(), uint16_t(rxq_.size()));
    mark(1);
    for (uint16_t i = 0; i < n; ++i) receive(rxq_[i]);
    if (n) port_.free_burst(rxq_.data(), n);  // one bulk put for the burst
    moved += n;
    mark(2);

    // Coalesced ACKs: one per QP per burst, for the newest PSN that asked. One owed behind READ
    // responses or atomic ACKs waits for them: responses leave in PSN order.
    for (uint32_t qpn : acks_) {
        if (tx_refused_) break;  // the port is full: the rest stay due (and listed) for the next turn
        QpCtx* c = ctx(qpn);
        if (!c || !c->ack.due || c->res_pending) continue;
        if (resp_send_ack(*c, c->ack) == Tx::ok) ++moved;
    }
    acks_.erase(std::remove_if(acks_.begin(), acks_.end(),
                               [&](uint32_t q) {
                                   QpCtx* c = ctx(q);
                                   if (c && c->ack.due) return false;
                                   if (c) c->ack_listed = false;
                                   return true;
                               }),
                acks_.end());

    // Timers after the ACKs that may cancel them: while receive bursts come full (this process
    // or its peer was descheduled, and a ring's worth of ACKs waits), up to kTimerDefer turns
    // read on first; a timeout after that is one.
    if (n < rxq_.size() || ++timer_defer_ >= kTimerDefer) {
        timer_defer_ = 0;
        if (timers_.size()) timers_.expire(now());  // no timer armed: no clock read
    }

    mark(3);

    moved += run_scheduled();
    mark(4);
    const uint32_t queued = ntx_;
    tx_flush();
    in_poll_ = now_valid_ = false;
    if (prof_) [[unlikely]] {
        mark(5);
        prof_->turn(t, moved, n != 0, ntx_ < queued);  // the last burst: did the port take any
    }
    return moved;
}

// Requesters and READ responders with something due. A QP stays listed while it has more.
size_t Hca::run_scheduled() {
    size_t moved = 0;
    running_.swap(run_);  // QPs scheduled while these run go on the next turn's list
    for (size_t i = 0; i < running_.size(); ++i) {
        if (ntx_ == txq_.size() && (tx_refused_ || !tx_flush())) {
            // The port takes nothing more this turn: the QPs not yet visited stay scheduled and
            // go first in the next one (then those that asked again), rather than each failing
            // to send in turn, or waiting behind the ones just served.
            const size_t rest = running_.size() - i;
            std::move(running_.begin() + long(i), running_.end(), running_.begin());
            running_.resize(rest);
            running_.insert(running_.end(), run_.begin(), run_.end());  // within the reserve: each QP once
            run_.swap(running_);
            break;
        }
        QpCtx* c = ctx(running_[i]);
        if (!c) continue;
        c->scheduled = false;
        const uint64_t before = dev_.counters().get(Counter::sent_pkts);
        if (!resp_send_responses(*c, cfg_.tx_budget)) schedule(*c);
        req_run(*c);
        moved += dev_.counters().get(Counter::sent_pkts) - before;
    }
    running_.clear();
    return moved;
}

}  // namespace hcaemu::transport
