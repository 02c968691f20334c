// libibverbs.so.1 on libhcaemu: PD, MR, completion channels, CQ, QP, SRQ and AH, each an ibv_*
// struct in a wrapper over its api:: object; the data path (post, poll, notify) through the
// context's ops, as verbs.h's inline functions call it.
#include <endian.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tools/libhcaemu/sysretry.hpp"
#include "tools/verbs/verbs.hpp"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

namespace hcaemu::verbs {

static_assert(sizeof(ibv_sge) == sizeof(Sge) && offsetof(ibv_sge, addr) == offsetof(Sge, addr) &&
              offsetof(ibv_sge, length) == offsetof(Sge, length) && offsetof(ibv_sge, lkey) == offsetof(Sge, lkey));

namespace {

template <class W>
W* alloc_wrap() {
    return static_cast<W*>(std::calloc(1, sizeof(W)));
}

// HCAEMU_VERBS_DEBUG=1: why a control verb failed, on stderr (libibverbs itself says nothing).
bool debug() {
    static const bool on = [] {
        const char* e = std::getenv("HCAEMU_VERBS_DEBUG");
        return e && *e && *e != '0';
    }();
    return on;
}

const Sge* sges(const ibv_sge* s) { return reinterpret_cast<const Sge*>(s); }

// How long modify_qp and create_ah wait for ARP/ND: the neighbour layer's own 3 s (12 x 250 ms).
constexpr uint64_t kResolveMs = 3500;

Gid gid_of(const ibv_gid& g) {
    Gid o;
    std::memcpy(o.data(), g.raw, 16);
    return o;
}

// ARP/ND for a destination before the first packet to it, as the kernel resolves the
// destination MAC when a RoCE QP gets its path or an AH is made. Under the node lock.
int resolve_locked(Node& n, const Gid& dgid) {
    std::string err;
    if (n.api->resolve(dgid, kResolveMs, err)) return 0;
    std::fprintf(stderr, "libibverbs (hcaemu): %s\n", err.c_str());
    return errno = EHOSTUNREACH;
}

// ---------------------------------------------------------------- data path

}  // namespace

void to_ibv_wc(const Wc& c, ibv_wc& o) {
    o.wr_id = c.wr_id;
    o.status = ibv_wc_status(c.status);
    o.opcode = ibv_wc_opcode(c.opcode);
    o.vendor_err = c.vendor_err;
    o.byte_len = c.byte_len;
    if (c.wc_flags & wc_flag::with_inv)
        o.invalidated_rkey = c.imm_data;
    else
        o.imm_data = htobe32(c.imm_data);  // ibv_wc.imm_data is in network order
    o.qp_num = c.qp_num;
    o.src_qp = c.src_qp;
    o.wc_flags = c.wc_flags;
    o.pkey_index = c.pkey_index;
    o.slid = c.slid;
    o.sl = c.sl;
    o.dlid_path_bits = c.dlid_path_bits;
}

size_t turn_engine(Node& n, bool force) {
    const bool had_work = n.api->busy();
    const size_t moved = n.api->poll();
    n.drain();
    if (moved || had_work || force || n.api->busy()) n.mu.epoch.fetch_add(1, std::memory_order_release);
    return moved;
}


bool still_empty(Node& n, CqW& w) {
    if (!n.local || n.mu.epoch.load(std::memory_order_acquire) != w.empty_at.load(std::memory_order_relaxed))
        return false;
    n.note_empty_poll();
    // No clock here (clock_gettime was half of a polling program's time on this machine): the
    // progress thread counts its turns; 64 empty polls in a row without one mean it has no CPU.
    thread_local uint64_t seen = 0;
    thread_local uint32_t idle_polls = 0;
    const uint64_t turns = n.thread_turns.load(std::memory_order_relaxed);
    if (turns != seen) {
        seen = turns;
        idle_polls = 0;
        return true;
    }
    if (++idle_polls < 64) return true;
    idle_polls = 0;
    // The progress thread has had no CPU for a while: one turn here, if the mutex is free.
    if (!n.mu.m.try_lock()) return true;
    (void)turn_engine(n, false);
    n.mu.m.unlock();
    return n.mu.epoch.load(std::memory_order_relaxed) == w.empty_at.load(std::memory_order_relaxed);
}

void found_empty(Node& n, CqW& w) {
    if (!n.local) {
        // The daemon's engine needs the CPU this busy-polling thread takes: libhcaemu's poll()
        // yields every 64th call (and reads the daemon's events), as hcaemu's own tools do.
        (void)n.api->poll();
        return;
    }
    w.empty_at.store(n.mu.epoch.load(std::memory_order_relaxed), std::memory_order_relaxed);
    n.note_empty_poll();
}

namespace {

// Taking completions adds none: the raw mutex, so that the epoch stays (NodeMutex).
int cq_poll(ibv_cq* cq, int num, ibv_wc* wc) {
    auto* w = wrap_of<CqW>(cq);
    Node& n = node_of(cq->context);
    if (still_empty(n, *w)) return 0;
    Wc tmp[16];
    int total = 0;
    n.mu.lock_raw();
    const std::lock_guard g(n.mu.m, std::adopt_lock);
    while (total < num) {
        const int want = std::min(num - total, 16);
        const int k = w->api->poll(std::span<Wc>(tmp, size_t(want)));
        if (k < 0) return total ? total : -1;
        for (int i = 0; i < k; ++i) to_ibv_wc(tmp[i], wc[total + i]);
        total += k;
        if (k < want) break;
    }
    if (!total) found_empty(n, *w);
    return total;
}

int cq_req_notify(ibv_cq* cq, int solicited_only) {
    Node& n = node_of(cq->context);
    const std::lock_guard g(n.mu);
    const Status s = wrap_of<CqW>(cq)->api->req_notify(solicited_only != 0);
    return s == Status::ok ? 0 : set_errno(s);
}

bool has_imm(ibv_wr_opcode op) { return op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM; }

void to_send_wr(const ibv_qp& qp, const ibv_send_wr& wr, SendWr& s) {
    s.wr_id = wr.wr_id;
    s.sg_list = sges(wr.sg_list);
    s.num_sge = wr.num_sge;
    s.opcode = WrOpcode(wr.opcode);
    s.send_flags = wr.send_flags;
    if (has_imm(wr.opcode)) s.imm_data = be32toh(wr.imm_data);
    if (wr.opcode == IBV_WR_SEND_WITH_INV) s.invalidate_rkey = wr.invalidate_rkey;
    if (qp.qp_type == IBV_QPT_UD) {
        s.ud.ah = wr.wr.ud.ah ? wrap_of<AhW>(wr.wr.ud.ah)->api->native() : nullptr;
        s.ud.remote_qpn = wr.wr.ud.remote_qpn;
        s.ud.remote_qkey = wr.wr.ud.remote_qkey;
    } else if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        s.atomic.remote_addr = wr.wr.atomic.remote_addr;
        s.atomic.compare_add = wr.wr.atomic.compare_add;
        s.atomic.swap = wr.wr.atomic.swap;
        s.atomic.rkey = wr.wr.atomic.rkey;
    } else {
        s.rdma.remote_addr = wr.wr.rdma.remote_addr;
        s.rdma.rkey = wr.wr.rdma.rkey;
    }
}

// Posts a WR list one WR at a time under the node's lock, then wakes the engine. On an error
// *bad_wr is the caller's own WR, as libibverbs reports it. `post(wr)` converts and posts one.
template <class Wr, class Post>
int post_list(ibv_context* ctx, Wr* wr, Wr** bad_wr, Post&& post) {
    Node& n = node_of(ctx);
    int err = 0;
    {
        const std::lock_guard g(n.mu);
        for (; wr; wr = wr->next) {
            const Status st = post(*wr);
            if (st != Status::ok) {
                *bad_wr = wr;
                err = set_errno(st);
                break;
            }
        }
    }
    n.wake();
    return err;
}

int qp_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
    auto* w = wrap_of<QpW>(qp);
    return post_list(qp->context, wr, bad_wr, [&](const ibv_send_wr& x) {
        SendWr s;
        to_send_wr(*qp, x, s);
        const SendWr* bad = nullptr;
        return w->api->post_send(&s, &bad);
    });
}

int qp_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    auto* w = wrap_of<QpW>(qp);
    return post_list(qp->context, wr, bad_wr, [&](const ibv_recv_wr& x) {
        const RecvWr r{x.wr_id, nullptr, sges(x.sg_list), x.num_sge};
        const RecvWr* bad = nullptr;
        return w->api->post_recv(&r, &bad);
    });
}

int srq_post_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    auto* w = wrap_of<SrqW>(srq);
    return post_list(srq->context, wr, bad_wr, [&](const ibv_recv_wr& x) {
        const RecvWr r{x.wr_id, nullptr, sges(x.sg_list), x.num_sge};
        const RecvWr* bad = nullptr;
        return w->api->post_recv(&r, &bad);
    });
}

ibv_qp* ctx_create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr);
ibv_srq* ctx_create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr);
int srq_get_num(ibv_srq*, uint32_t*) { return EOPNOTSUPP; }  // XRC SRQs only

// The standard completion fields only: no timestamps, VLAN, flow tag or tag matching.
ibv_cq_ex* ctx_create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
    const uint32_t known_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
    if ((attr->comp_mask & ~known_mask) || (attr->wc_flags & ~uint64_t(IBV_WC_STANDARD_FLAGS)) ||
        ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & ~uint32_t(IBV_CREATE_CQ_ATTR_SINGLE_THREADED)))) {
        errno = EOPNOTSUPP;
        return nullptr;
    }
    ibv_cq* cq = create_cq_common(context, int(attr->cqe), attr->cq_context, attr->channel, int(attr->comp_vector));
    if (!cq) return nullptr;
    auto* w = wrap_of<CqW>(cq);
    fill_cq_ex_ops(w->cq);
    return &w->cq;
}

}  // namespace

void fill_ops(verbs_context& vc) {
    ibv_context_ops& o = vc.context.ops;
    o.poll_cq = cq_poll;
    o.req_notify_cq = cq_req_notify;
    o.post_send = qp_post_send;
    o.post_recv = qp_post_recv;
    o.post_srq_recv = srq_post_recv;
    // alloc_mw, bind_mw, dealloc_mw stay null: verbs.h's ibv_alloc_mw answers EOPNOTSUPP.
    fill_query_ops(vc);
    vc.create_qp_ex = ctx_create_qp_ex;
    vc.create_srq_ex = ctx_create_srq_ex;
    vc.get_srq_num = srq_get_num;
    vc.create_cq_ex = ctx_create_cq_ex;
    // Every other extension op stays null: verbs.h's inline functions then answer EOPNOTSUPP
    // (create_cq_ex, flows, WQs, DM, counters, TDs, parent domains, ...).
}

void to_ibv(const AhAttr& a, ibv_ah_attr& o) {
    o = ibv_ah_attr{};
    std::memcpy(o.grh.dgid.raw, a.dgid.data(), 16);
    o.grh.flow_label = a.flow_label;
    o.grh.sgid_index = a.sgid_index;
    o.grh.hop_limit = a.hop_limit;
    o.grh.traffic_class = a.traffic_class;
    o.sl = a.sl;
    o.is_global = a.is_global;
    o.port_num = a.port_num;
}

bool from_ibv(const ibv_ah_attr& a, AhAttr& o) {
    o.dgid = gid_of(a.grh.dgid);
    o.flow_label = a.grh.flow_label;
    o.sgid_index = a.grh.sgid_index;
    o.hop_limit = a.grh.hop_limit;
    o.traffic_class = a.grh.traffic_class;
    o.sl = a.sl;
    o.port_num = a.port_num;
    o.is_global = a.is_global != 0;
    return o.is_global;  // RoCE routes by the GRH only (IBTA A16.4.3)
}

namespace {

// ---------------------------------------------------------------- QP attributes

void from_ibv_qp_attr(const ibv_qp_attr& a, QpAttr& o) {
    o.qp_state = QpState(a.qp_state);
    o.cur_qp_state = QpState(a.cur_qp_state);
    o.path_mtu = Mtu(a.path_mtu);
    o.qkey = a.qkey;
    o.rq_psn = a.rq_psn;
    o.sq_psn = a.sq_psn;
    o.dest_qp_num = a.dest_qp_num;
    o.qp_access_flags = uint32_t(a.qp_access_flags);
    o.cap = QpCap{a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge, a.cap.max_inline_data};
    (void)from_ibv(a.ah_attr, o.ah_attr);
    (void)from_ibv(a.alt_ah_attr, o.alt_ah_attr);
    o.pkey_index = a.pkey_index;
    o.alt_pkey_index = a.alt_pkey_index;
    o.path_mig_state = uint8_t(a.path_mig_state);
    o.alt_port_num = a.alt_port_num;
    o.alt_timeout = a.alt_timeout;
    o.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    o.sq_draining = a.sq_draining != 0;
    o.max_rd_atomic = a.max_rd_atomic;
    o.max_dest_rd_atomic = a.max_dest_rd_atomic;
    o.min_rnr_timer = a.min_rnr_timer;
    o.port_num = a.port_num;
    o.timeout = a.timeout;
    o.retry_cnt = a.retry_cnt;
    o.rnr_retry = a.rnr_retry;
}

}  // namespace

void to_ibv_qp_attr(const QpAttr& a, ibv_qp_attr& o) {
    o = ibv_qp_attr{};
    o.qp_state = ibv_qp_state(a.qp_state);
    o.cur_qp_state = ibv_qp_state(a.cur_qp_state);
    o.path_mtu = ibv_mtu(a.path_mtu);
    o.path_mig_state = ibv_mig_state(a.path_mig_state);
    o.qkey = a.qkey;
    o.rq_psn = a.rq_psn;
    o.sq_psn = a.sq_psn;
    o.dest_qp_num = a.dest_qp_num;
    o.qp_access_flags = unsigned(a.qp_access_flags);
    o.cap = ibv_qp_cap{a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge, a.cap.max_inline_data};
    to_ibv(a.ah_attr, o.ah_attr);
    to_ibv(a.alt_ah_attr, o.alt_ah_attr);
    o.pkey_index = a.pkey_index;
    o.alt_pkey_index = a.alt_pkey_index;
    o.en_sqd_async_notify = a.en_sqd_async_notify;
    o.sq_draining = a.sq_draining;
    o.max_rd_atomic = a.max_rd_atomic;
    o.max_dest_rd_atomic = a.max_dest_rd_atomic;
    o.min_rnr_timer = a.min_rnr_timer;
    o.port_num = a.port_num;
    o.timeout = a.timeout;
    o.retry_cnt = a.retry_cnt;
    o.rnr_retry = a.rnr_retry;
    o.alt_port_num = a.alt_port_num;
    o.alt_timeout = a.alt_timeout;
}

namespace {

ibv_qp* create_qp_common(ibv_pd* pd, ibv_qp_init_attr& ia) {
    if (ia.qp_type != IBV_QPT_RC && ia.qp_type != IBV_QPT_UC && ia.qp_type != IBV_QPT_UD) {
        errno = EOPNOTSUPP;  // XRC, raw packet, driver QPs
        return nullptr;
    }
    Node& n = node_of(pd->context);
    api::QpInitAttr a;
    a.send_cq = ia.send_cq ? wrap_of<CqW>(ia.send_cq)->api : nullptr;
    a.recv_cq = ia.recv_cq ? wrap_of<CqW>(ia.recv_cq)->api : nullptr;
    a.srq = ia.srq ? wrap_of<SrqW>(ia.srq)->api : nullptr;
    a.cap = QpCap{ia.cap.max_send_wr, ia.cap.max_recv_wr, ia.cap.max_send_sge, ia.cap.max_recv_sge, ia.cap.max_inline_data};
    a.qp_type = QpType(ia.qp_type);
    a.sq_sig_all = ia.sq_sig_all != 0;
    auto* w = alloc_wrap<QpW>();
    if (!w) {
        errno = ENOMEM;
        return nullptr;
    }
    const std::lock_guard g(n.mu);
    auto r = n.api->create_qp(*wrap_of<PdW>(pd)->api, a);
    if (!r.ok()) {
        std::free(w);
        set_errno(r.status);
        return nullptr;
    }
    w->api = r.value.release();
    ibv_qp& q = *as_qp(w);
    q.context = pd->context;
    q.qp_context = ia.qp_context;
    q.pd = pd;
    q.send_cq = ia.send_cq;
    q.recv_cq = ia.recv_cq;
    q.srq = ia.srq;
    q.handle = w->api->handle();
    q.qp_num = w->api->qpn();
    q.state = IBV_QPS_RESET;
    q.qp_type = ia.qp_type;
    pthread_mutex_init(&q.mutex, nullptr);
    pthread_cond_init(&q.cond, nullptr);
    ia.cap = ibv_qp_cap{a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge, a.cap.max_inline_data};
    n.qps[q.qp_num] = &q;
    n.had_qp = true;
    return &q;
}

ibv_qp* ctx_create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
    // A PD-based RC/UC/UD QP, with the ibv_wr_* API if send_ops_flags asks: XRC domains, RSS,
    // TSO and creation flags are not there.
    const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if ((attr->comp_mask & ~known) || ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)) {
        errno = EOPNOTSUPP;
        return nullptr;
    }
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd || attr->pd->context != context) {
        errno = EINVAL;
        return nullptr;
    }
    ibv_qp_init_attr ia{};
    ia.qp_context = attr->qp_context;
    ia.send_cq = attr->send_cq;
    ia.recv_cq = attr->recv_cq;
    ia.srq = attr->srq;
    ia.cap = attr->cap;
    ia.qp_type = attr->qp_type;
    ia.sq_sig_all = attr->sq_sig_all;
    ibv_qp* q = create_qp_common(attr->pd, ia);
    if (!q) return nullptr;
    attr->cap = ia.cap;
    if ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && !setup_wr_api(*wrap_of<QpW>(q), attr->send_ops_flags, ia.cap)) {
        const int e = errno;
        (void)ibv_destroy_qp(q);
        errno = e;
        return nullptr;
    }
    return q;
}

ibv_srq* create_srq_common(ibv_pd* pd, ibv_srq_init_attr& ia) {
    Node& n = node_of(pd->context);
    SrqAttr a{ia.attr.max_wr, ia.attr.max_sge, ia.attr.srq_limit};
    auto* w = alloc_wrap<SrqW>();
    if (!w) {
        errno = ENOMEM;
        return nullptr;
    }
    const std::lock_guard g(n.mu);
    auto r = n.api->create_srq(*wrap_of<PdW>(pd)->api, a);
    if (!r.ok()) {
        std::free(w);
        set_errno(r.status);
        return nullptr;
    }
    w->api = r.value.release();
    ibv_srq& s = w->srq;
    s.context = pd->context;
    s.srq_context = ia.srq_context;
    s.pd = pd;
    s.handle = w->api->handle();
    pthread_mutex_init(&s.mutex, nullptr);
    pthread_cond_init(&s.cond, nullptr);
    ia.attr.max_wr = a.max_wr;
    ia.attr.max_sge = a.max_sge;
    n.srqs[s.handle] = &s;
    return &s;
}

ibv_srq* ctx_create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr) {
    const uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    if ((attr->comp_mask & ~known) || ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC)) {
        errno = EOPNOTSUPP;  // XRC and tag-matching SRQs
        return nullptr;
    }
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd || attr->pd->context != context) {
        errno = EINVAL;
        return nullptr;
    }
    ibv_srq_init_attr ia{attr->srq_context, attr->attr};
    ibv_srq* s = create_srq_common(attr->pd, ia);
    if (s) attr->attr = ia.attr;
    return s;
}

}  // namespace

ibv_cq* create_cq_common(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                         int comp_vector) {
    if (comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
        errno = EINVAL;
        return nullptr;
    }
    Node& n = node_of(context);
    auto* w = alloc_wrap<CqW>();
    if (!w) {
        errno = ENOMEM;
        return nullptr;
    }
    const std::lock_guard g(n.mu);
    // The api CQ's context is our ibv_cq: a completion event names it.
    auto r = n.api->create_cq(cqe, channel ? wrap_of<ChanW>(channel)->api : nullptr, reinterpret_cast<uint64_t>(as_cq(w)));
    if (!r.ok()) {
        std::free(w);
        set_errno(r.status);
        return nullptr;
    }
    w->api = r.value.release();
    w->empty_at.store(0, std::memory_order_relaxed);  // no epoch is 0: the first poll looks
    ibv_cq& c = *as_cq(w);
    c.context = context;
    c.channel = channel;
    c.cq_context = cq_context;
    c.handle = w->api->handle();
    c.cqe = w->api->cqe();
    pthread_mutex_init(&c.mutex, nullptr);
    pthread_cond_init(&c.cond, nullptr);
    if (channel) ++channel->refcnt;
    n.cqs[c.handle] = &c;
    return &c;
}

}  // namespace hcaemu::verbs

using namespace hcaemu;
using namespace hcaemu::verbs;

extern "C" {

// ---------------------------------------------------------------- PD, MR

ibv_pd* ibv_alloc_pd(ibv_context* context) {
    Node& n = node_of(context);
    auto* w = alloc_wrap<PdW>();
    if (!w) {
        errno = ENOMEM;
        return nullptr;
    }
    const std::lock_guard g(n.mu);
    auto r = n.api->alloc_pd();
    if (!r.ok()) {
        std::free(w);
        set_errno(r.status);
        return nullptr;
    }
    w->api = r.value.release();
    w->pd.context = context;
    w->pd.handle = w->api->handle();
    n.pds[w->pd.handle] = &w->pd;
    return &w->pd;
}

extern "C++" {
namespace {

// One wrapper of a PD or MR gone (destroyed or unimported): the api object goes with the last.
template <class W>
void release_wrap(Node& n, W* w) {
    auto it = n.imports.find(w->api);
    if (it == n.imports.end()) delete w->api;
    else if (--it->second == 0) n.imports.erase(it);
    std::free(w);
}

}  // namespace
}

// Of an imported PD too (libibverbs: it destroys the shared object); the other wrappers then get
// EINVAL, as the kernel's object is gone for them as well, until unimported.
int ibv_dealloc_pd(ibv_pd* pd) {
    auto* w = wrap_of<PdW>(pd);
    Node& n = node_of(pd->context);
    const std::lock_guard g(n.mu);
    const Status s = w->api->destroy();
    if (s != Status::ok) return set_errno(s);
    if (auto it = n.pds.find(pd->handle); it != n.pds.end() && wrap_of<PdW>(it->second)->api == w->api) n.pds.erase(it);
    release_wrap(n, w);
    return 0;
}

// ibv_import_pd/mr on a context imported from another's cmd_fd (the same HCA connection, so the
// same objects): a second wrapper around the original object.
ibv_pd* ibv_import_pd(ibv_context* context, uint32_t pd_handle) {
    Node& n = node_of(context);
    const std::lock_guard g(n.mu);
    auto it = n.pds.find(pd_handle);
    auto* w = it == n.pds.end() ? nullptr : alloc_wrap<PdW>();
    if (!w) {
        errno = it == n.pds.end() ? EINVAL : ENOMEM;
        return nullptr;
    }
    w->api = wrap_of<PdW>(it->second)->api;
    w->imported = true;
    ++n.imports[w->api];
    w->pd.context = context;
    w->pd.handle = pd_handle;
    return &w->pd;
}

void ibv_unimport_pd(ibv_pd* pd) {
    if (!pd || !wrap_of<PdW>(pd)->imported) return;
    Node& n = node_of(pd->context);
    const std::lock_guard g(n.mu);
    release_wrap(n, wrap_of<PdW>(pd));
}

ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t mr_handle) {
    Node& n = node_of(pd->context);
    const std::lock_guard g(n.mu);
    auto it = n.mrs.find(mr_handle);
    auto* w = it == n.mrs.end() ? nullptr : alloc_wrap<MrW>();
    if (!w) {
        errno = it == n.mrs.end() ? EINVAL : ENOMEM;
        return nullptr;
    }
    w->api = wrap_of<MrW>(it->second)->api;
    w->imported = true;
    ++n.imports[w->api];
    w->mr = *it->second;
    w->mr.context = pd->context;
    w->mr.pd = pd;
    w->mr.addr = nullptr;  // as libibverbs: the importer does not know the exporter's address
    return &w->mr;
}

void ibv_unimport_mr(ibv_mr* mr) {
    if (!mr || !wrap_of<MrW>(mr)->imported) return;
    Node& n = node_of(mr->context);
    const std::lock_guard g(n.mu);
    release_wrap(n, wrap_of<MrW>(mr));
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
    if (iova != reinterpret_cast<uintptr_t>(addr)) {
        errno = EOPNOTSUPP;  // hcaemu's MRs are addressed by their virtual address only
        return nullptr;
    }
    // The optional bits (relaxed ordering, ...) may be ignored by a device (verbs.h).
    const uint32_t acc = access & ~uint32_t(IBV_ACCESS_OPTIONAL_RANGE);
    if (acc & ~access::supported) {
        errno = EOPNOTSUPP;  // memory windows, zero-based, on-demand paging, ...
        return nullptr;
    }
    Node& n = node_of(pd->context);
    auto* w = alloc_wrap<MrW>();
    if (!w) {
        errno = ENOMEM;
        return nullptr;
    }
    const std::lock_guard g(n.mu);
    auto r = n.api->reg_mr(*wrap_of<PdW>(pd)->api, addr, length, acc);
    if (!r.ok()) {
        std::free(w);
        set_errno(r.status);
        return nullptr;
    }
    w->api = r.value.release();
    ibv_mr& m = w->mr;
    m.context = pd->context;
    m.pd = pd;
    m.addr = addr;
    m.length = length;
    m.handle = w->api->handle();
    m.lkey = w->api->lkey();
    m.rkey = w->api->rkey();
    n.mrs[m.handle] = &m;
    return &m;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
    return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<uintptr_t>(addr), unsigned(access));
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
    return ibv_reg_mr_iova2(pd, addr, length, iova, unsigned(access));
}

int ibv_dereg_mr(ibv_mr* mr) {
    auto* w = wrap_of<MrW>(mr);
    Node& n = node_of(mr->context);
    const std::lock_guard g(n.mu);
    const Status s = w->api->destroy();
    if (s != Status::ok) return set_errno(s);
    if (auto it = n.mrs.find(mr->handle); it != n.mrs.end() && wrap_of<MrW>(it->second)->api == w->api) n.mrs.erase(it);
    release_wrap(n, w);
    return 0;
}

// libibverbs' checks first (ERR_INPUT, EINVAL), then the device's (ERR_CMD, its errno); the keys
// stay. hcaemu needs no fork handling (remapped pages are MAP_SHARED memfd pages).
int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
    constexpr int kFlags = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
    if ((flags & ~kFlags) || ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) ||
        (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) || ((flags & IBV_REREG_MR_CHANGE_PD) && !pd)) {
        errno = EINVAL;
        return IBV_REREG_MR_ERR_INPUT;
    }
    auto* w = wrap_of<MrW>(mr);
    Node& n = node_of(mr->context);
    const uint32_t acc = uint32_t(access) & ~uint32_t(IBV_ACCESS_OPTIONAL_RANGE);
    const std::lock_guard g(n.mu);
    // pd, addr and length are read only with their flag (pyverbs passes anything otherwise).
    api::Pd* np = (flags & IBV_REREG_MR_CHANGE_PD) ? wrap_of<PdW>(pd)->api : nullptr;
    const Status s = w->api->rereg(uint32_t(flags), np, addr, length, acc);
    if (s != Status::ok) {
        set_errno(s);
        return IBV_REREG_MR_ERR_CMD;
    }
    if (flags & IBV_REREG_MR_CHANGE_PD) mr->pd = pd;
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        mr->addr = addr;
        mr->length = length;
    }
    mr->lkey = w->api->lkey();
    mr->rkey = w->api->rkey();
    return 0;
}

// ---------------------------------------------------------------- completion channels, CQ

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
    Node& n = node_of(context);
    auto* w = alloc_wrap<ChanW>();
    if (!w) {
        errno = ENOMEM;
        return nullptr;
    }
    // A semaphore eventfd: one count per queued event, as the kernel's channel file reads.
    const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    if (fd < 0) {
        std::free(w);
        return nullptr;
    }
    const std::lock_guard g(n.mu);
    auto r = n.api->create_comp_channel();
    if (!r.ok()) {
        ::close(fd);
        std::free(w);
        set_errno(r.status);
        return nullptr;
    }
    w->api = r.value.release();
    w->q = new std::deque<ibv_cq*>;
    w->ch.context = context;
    w->ch.fd = fd;
    w->ch.refcnt = 0;
    n.chans.push_back(w);
    return &w->ch;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
    auto* w = wrap_of<ChanW>(channel);
    Node& n = node_of(channel->context);
    const std::lock_guard g(n.mu);
    if (channel->refcnt) return errno = EBUSY;
    std::erase(n.chans, w);
    delete w->api;
    delete w->q;
    if (!w->gate.may_free()) return 0;  // a thread waits in ibv_get_cq_event: kept, dead (sysretry.hpp)
    ::close(channel->fd);
    std::free(w);
    return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector) {
    return create_cq_common(context, cqe, cq_context, channel, comp_vector);
}

int ibv_resize_cq(ibv_cq* cq, int cqe) {
    Node& n = node_of(cq->context);
    const std::lock_guard g(n.mu);
    auto* w = wrap_of<CqW>(cq);
    const Status s = w->api->resize(cqe);
    if (s != Status::ok) return set_errno(s);
    cq->cqe = w->api->cqe();
    return 0;
}

int ibv_destroy_cq(ibv_cq* cq) {
    auto* w = wrap_of<CqW>(cq);
    Node& n = node_of(cq->context);
    {
        const std::lock_guard g(n.mu);
        n.drain();  // events the engine raised since the last drain, acked to the api
        const Status s = w->api->destroy();
        if (s != Status::ok) return set_errno(s);
        n.cqs.erase(cq->handle);
        if (ibv_comp_channel* ch = cq->channel) {
            // Its events not yet taken go with it, each with its count on the channel's fd.
            auto* cw = wrap_of<ChanW>(ch);
            const size_t before = cw->q->size();
            std::erase(*cw->q, cq);
            for (size_t i = cw->q->size(); i < before; ++i) {
                uint64_t one;
                (void)!::read(ch->fd, &one, sizeof one);
            }
            --ch->refcnt;
        }
        delete w->api;
    }
    // As libibverbs: wait until every event ibv_get_cq_event returned for it is acked.
    pthread_mutex_lock(&cq->mutex);
    while (cq->comp_events_completed != w->delivered) pthread_cond_wait(&cq->cond, &cq->mutex);
    pthread_mutex_unlock(&cq->mutex);
    pthread_mutex_destroy(&cq->mutex);
    pthread_mutex_destroy(&w->poll_mu);
    pthread_cond_destroy(&cq->cond);
    std::free(w);
    return 0;
}

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
    uint64_t one;
    auto* w = wrap_of<ChanW>(channel);
    Node& n = node_of(channel->context);
    std::unique_lock g(n.mu);
    // Blocks unless the program made the fd non-blocking (then EAGAIN), as the kernel's file;
    // another thread may destroy the channel meanwhile (the gate keeps it, sysretry.hpp).
    if (api::gated_read(g, w->gate, channel->fd, one) != ssize_t(sizeof one)) return -1;
    if (w->q->empty()) {
        errno = EAGAIN;
        return -1;
    }
    *cq = w->q->front();
    w->q->pop_front();
    *cq_context = (*cq)->cq_context;
    pthread_mutex_lock(&(*cq)->mutex);
    ++wrap_of<CqW>(*cq)->delivered;
    pthread_mutex_unlock(&(*cq)->mutex);
    return 0;
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_signal(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}

// ---------------------------------------------------------------- SRQ

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* srq_init_attr) {
    return create_srq_common(pd, *srq_init_attr);
}

int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
    if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return errno = EINVAL;
    Node& n = node_of(srq->context);
    const std::lock_guard g(n.mu);
    const Status s = wrap_of<SrqW>(srq)->api->modify(SrqAttr{attr->max_wr, attr->max_sge, attr->srq_limit}, uint32_t(mask));
    return s == Status::ok ? 0 : set_errno(s);
}

int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
    Node& n = node_of(srq->context);
    const std::lock_guard g(n.mu);
    SrqAttr a;
    const Status s = wrap_of<SrqW>(srq)->api->query(a);
    if (s != Status::ok) return set_errno(s);
    *attr = ibv_srq_attr{a.max_wr, a.max_sge, a.srq_limit};
    return 0;
}

int ibv_destroy_srq(ibv_srq* srq) {
    auto* w = wrap_of<SrqW>(srq);
    Node& n = node_of(srq->context);
    const std::lock_guard g(n.mu);
    const Status s = w->api->destroy();
    if (s != Status::ok) return set_errno(s);
    n.srqs.erase(srq->handle);
    delete w->api;
    pthread_mutex_destroy(&srq->mutex);
    pthread_cond_destroy(&srq->cond);
    std::free(w);
    return 0;
}

// ---------------------------------------------------------------- QP

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) { return create_qp_common(pd, *qp_init_attr); }

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
    auto* w = wrap_of<QpW>(qp);
    Node& n = node_of(qp->context);
    QpAttr a;
    from_ibv_qp_attr(*attr, a);
    const uint32_t mask = uint32_t(attr_mask);
    const std::lock_guard g(n.mu);
    if ((mask & IBV_QP_AV) && qp->qp_type != IBV_QPT_UD) {
        if (!attr->ah_attr.is_global) return errno = EINVAL;  // RoCE needs the GRH
        if (const int e = resolve_locked(n, a.ah_attr.dgid)) return e;
    }
    const ModifyResult r = w->api->modify(a, mask);
    if (!r.ok()) {
        if (debug())
            std::fprintf(stderr, "libibverbs (hcaemu): modify_qp QPN %u mask 0x%x to %d: %s (attribute bits 0x%x)\n",
                         qp->qp_num, mask, int(attr->qp_state), name(r.status), r.bits);
        return set_errno(r.status);
    }
    if (mask & IBV_QP_STATE) qp->state = attr->qp_state;
    return 0;
}

int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr) {
    (void)attr_mask;  // every attribute is reported, as providers do
    auto* w = wrap_of<QpW>(qp);
    Node& n = node_of(qp->context);
    const std::lock_guard g(n.mu);
    QpAttr a;
    api::QpInitAttr ia;
    const Status s = w->api->query(a, &ia);
    if (s != Status::ok) return set_errno(s);
    to_ibv_qp_attr(a, *attr);
    if (init_attr) {
        *init_attr = ibv_qp_init_attr{};
        init_attr->qp_context = qp->qp_context;
        init_attr->send_cq = qp->send_cq;
        init_attr->recv_cq = qp->recv_cq;
        init_attr->srq = qp->srq;
        init_attr->cap = attr->cap;
        init_attr->qp_type = qp->qp_type;
        init_attr->sq_sig_all = ia.sq_sig_all;
    }
    qp->state = attr->qp_state;
    return 0;
}

int ibv_destroy_qp(ibv_qp* qp) {
    auto* w = wrap_of<QpW>(qp);
    Node& n = node_of(qp->context);
    const std::lock_guard g(n.mu);
    const Status s = w->api->destroy();
    if (s != Status::ok) return set_errno(s);
    n.qps.erase(qp->qp_num);
    delete w->api;
    free_wr_api(*w);
    pthread_mutex_destroy(&qp->mutex);
    pthread_cond_destroy(&qp->cond);
    std::free(w);
    return 0;
}

// ---------------------------------------------------------------- AH

ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
    AhAttr a;
    if (!from_ibv(*attr, a)) {
        errno = EINVAL;  // RoCE: an AH without a GRH names no destination
        return nullptr;
    }
    Node& n = node_of(pd->context);
    auto* w = alloc_wrap<AhW>();
    if (!w) {
        errno = ENOMEM;
        return nullptr;
    }
    const std::lock_guard g(n.mu);
    if (resolve_locked(n, a.dgid)) {
        std::free(w);
        return nullptr;
    }
    auto r = n.api->create_ah(*wrap_of<PdW>(pd)->api, a);
    if (!r.ok()) {
        std::free(w);
        set_errno(r.status);
        return nullptr;
    }
    w->api = r.value.release();
    w->ah.context = pd->context;
    w->ah.pd = pd;
    w->ah.handle = w->api->handle();
    w->dgid = a.dgid;
    return &w->ah;
}

int ibv_destroy_ah(ibv_ah* ah) {
    auto* w = wrap_of<AhW>(ah);
    Node& n = node_of(ah->context);
    const std::lock_guard g(n.mu);
    const Status s = w->api->destroy();
    if (s != Status::ok) return set_errno(s);
    delete w->api;
    std::free(w);
    return 0;
}

// The reply's address from a UD receive: the GRH the HCA wrote at the buffer's start holds the
// sender's address, an IPv6 header or (RoCE v2 over IPv4) an IPv4 header in its last 20 bytes.
int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh, ibv_ah_attr* ah_attr) {
    *ah_attr = ibv_ah_attr{};
    if (!(wc->wc_flags & IBV_WC_GRH) || !grh) {
        errno = EINVAL;  // RoCE: no GRH, no route back
        return -1;
    }
    const auto* raw = reinterpret_cast<const uint8_t*>(grh);
    Gid src{}, dst{};
    uint32_t flow = 0;
    uint8_t tclass = 0;
    const bool v6 = (raw[0] >> 4) == 6;
    if (v6) {
        const uint32_t vtf = be32toh(grh->version_tclass_flow);
        flow = vtf & 0xFFFFF;
        tclass = uint8_t(vtf >> 20);
        src = gid_of(grh->sgid);
        dst = gid_of(grh->dgid);
    } else if ((raw[20] >> 4) == 4) {  // RFC 791: saddr at 12, daddr at 16
        uint32_t s4, d4;
        std::memcpy(&s4, raw + 32, 4);
        std::memcpy(&d4, raw + 36, 4);
        src = pkt::ipv4_mapped_gid(be32toh(s4));
        dst = pkt::ipv4_mapped_gid(be32toh(d4));
        tclass = raw[21];
    } else {
        errno = EINVAL;
        return -1;
    }
    ibv_port_attr pa;
    if (ibv_query_port(context, port_num, &pa)) return -1;
    int index = -1;
    for (int i = 0; i < pa.gid_tbl_len && index < 0; ++i) {
        ibv_gid g;
        if (ibv_query_gid(context, port_num, i, &g) == 0 && gid_of(g) == dst) index = i;
    }
    if (index < 0) {
        errno = ENOENT;  // addressed to a GID not in our table
        return -1;
    }
    std::memcpy(ah_attr->grh.dgid.raw, src.data(), 16);
    ah_attr->grh.flow_label = flow;
    ah_attr->grh.sgid_index = uint8_t(index);
    ah_attr->grh.hop_limit = 0xFF;
    ah_attr->grh.traffic_class = tclass;
    ah_attr->is_global = 1;
    ah_attr->sl = wc->sl;
    ah_attr->dlid = wc->slid;
    ah_attr->port_num = port_num;
    return 0;
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
    ibv_ah_attr a;
    if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &a)) return nullptr;
    return ibv_create_ah(pd, &a);
}

// ---------------------------------------------------------------- async events

int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
    uint64_t one;
    Ctx& c = ctx_of(context);
    std::unique_lock g(c.node->mu);
    // Another thread may close the context meanwhile (the gate keeps it, sysretry.hpp).
    if (api::gated_read(g, c.gate, context->async_fd, one) != ssize_t(sizeof one)) return -1;
    if (c.async.empty()) {
        errno = EAGAIN;
        return -1;
    }
    *event = c.async.front();
    c.async.pop_front();
    return 0;
}

// Counted in the object's events_completed, as libibverbs does (its destroy does not wait for
// them here: the api object is gone by then and no later event can name it).
void ibv_ack_async_event(ibv_async_event* event) {
    pthread_mutex_t* mu = nullptr;
    pthread_cond_t* cv = nullptr;
    uint32_t* count = nullptr;
    switch (event->event_type) {
    case IBV_EVENT_CQ_ERR:
        mu = &event->element.cq->mutex, cv = &event->element.cq->cond, count = &event->element.cq->async_events_completed;
        break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        mu = &event->element.srq->mutex, cv = &event->element.srq->cond, count = &event->element.srq->events_completed;
        break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        mu = &event->element.qp->mutex, cv = &event->element.qp->cond, count = &event->element.qp->events_completed;
        break;
    default:
        return;  // port and device events name no object
    }
    pthread_mutex_lock(mu);
    ++*count;
    pthread_cond_signal(cv);
    pthread_mutex_unlock(mu);
}

}  // extern "C"
