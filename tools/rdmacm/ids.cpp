// librdmacm.so.1 on libhcaemu: rdma_cm_id and its CM ids, the QP moves librdmacm makes
// (ucma_modify_qp_rtr/rts/err), and the part of rdma_get_cm_event that runs in the caller's thread.
#include <endian.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "tools/rdmacm/rdmacm.hpp"
#include "tools/verbs/hcaemu_private.hpp"

namespace hcaemu::rdmacm {

static_assert(std::is_standard_layout_v<IdW> && std::is_standard_layout_v<ChannelW> &&
              std::is_standard_layout_v<EventW>);

bool debug() {
    static const bool on = [] {
        const char* v = std::getenv("HCAEMU_RDMACM_DEBUG");
        return v && *v && *v != '0';
    }();
    return on;
}

// ---------------------------------------------------------------- conversions

socklen_t addr_len(const sockaddr* a) {
    if (!a) return 0;
    switch (a->sa_family) {
    case AF_INET: return sizeof(sockaddr_in);
    case AF_INET6: return sizeof(sockaddr_in6);
    default: return 0;  // AF_IB: as librdmacm on a kernel without AF_IB support
    }
}

bool is_wildcard(const sockaddr* a) {
    if (a->sa_family == AF_INET) return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr == htonl(INADDR_ANY);
    if (a->sa_family == AF_INET6) return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
    return false;
}

bool gid_to_sockaddr(const Gid& g, sockaddr_storage& out) {
    out = {};
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(g.data(), kMapped, 12) == 0) {
        auto* s = reinterpret_cast<sockaddr_in*>(&out);
        s->sin_family = AF_INET;
        std::memcpy(&s->sin_addr, g.data() + 12, 4);
        return true;
    }
    auto* s = reinterpret_cast<sockaddr_in6*>(&out);
    s->sin6_family = AF_INET6;
    std::memcpy(&s->sin6_addr, g.data(), 16);
    return true;
}

// ---------------------------------------------------------------- ids

IdW* new_id(rdma_event_channel* channel, void* context, rdma_port_space ps, ibv_qp_type qp_type, bool mu_held) {
    auto* w = static_cast<IdW*>(std::calloc(1, sizeof(IdW)));
    if (!w) return nullptr;
    auto* st = new IdState;
    w->st = st;
    st->w = w;
    w->id.context = context;
    w->id.ps = ps;
    w->id.qp_type = qp_type;
    if (!channel) {
        ChannelW* c = new_channel();
        if (!c) {
            delete st;
            std::free(w);
            return nullptr;
        }
        st->sync = true;
        channel = &c->ch;
    }
    w->id.channel = channel;
    if (mu_held) {
        core().live.insert(&w->id);
    } else {
        const std::lock_guard g(core().mu);
        core().live.insert(&w->id);
    }
    return w;
}

void free_id(IdW* w) {
    {
        const std::lock_guard g(core().mu);
        core().live.erase(&w->id);
    }
    std::free(w->id.route.path_rec);
    if (w->st->sync) free_channel(chan_of(&w->id));
    delete w->st;
    std::free(w);
}

int add_sub(IdState& st, Device& d, uint32_t& cm_id) {
    const auto ps = pkt::RdmaPs(uint16_t(st.w->id.ps));
    const auto qt = QpType(uint8_t(st.w->id.qp_type));
    const int r = with_cm(d, [&](api::Cm& cm) {
        if (const int e = cm.create_id(ps, qt, uint64_t(uintptr_t(&st)), cm_id)) return e;
        for (const auto& [opt, v] : st.options) (void)cm.set_option(cm_id, opt, v);
        return 0;
    });
    if (r) return r;
    const std::lock_guard g(core().mu);
    core().ids[{&d, cm_id}] = &st;
    st.subs.push_back({&d, cm_id});
    return 0;
}

void remove_subs(IdState& st, const Device* keep) {
    std::vector<Sub> gone;
    {
        const std::lock_guard g(core().mu);
        std::vector<Sub> kept;
        for (const Sub& s : st.subs) {
            if (s.dev == keep) {
                kept.push_back(s);
                continue;
            }
            core().ids.erase({s.dev, s.cm});
            gone.push_back(s);
        }
        st.subs = std::move(kept);
    }
    for (const Sub& s : gone)
        (void)with_cm(*s.dev, [&](api::Cm& cm) {
            uint32_t n = 0;
            return cm.destroy_id(s.cm, n);
        });
}

void choose_device(IdState& st, Device& d) {
    st.dev = &d;
    st.w->id.verbs = d.verbs;
    if (!st.w->id.pd) st.w->id.pd = d.pd;
    st.w->id.port_num = 1;
}

void apply_info(rdma_cm_id* id, const api::CmIdInfo& info, bool route) {
    rdma_addr& a = id->route.addr;
    std::memcpy(&a.src_storage, &info.src, sizeof a.src_storage);
    if (info.dst.ss_family) std::memcpy(&a.dst_storage, &info.dst, sizeof a.dst_storage);
    std::memcpy(a.addr.ibaddr.sgid.raw, info.sgid.data(), 16);
    std::memcpy(a.addr.ibaddr.dgid.raw, info.dgid.data(), 16);
    a.addr.ibaddr.pkey = htobe16(info.pkey);
    id->port_num = info.port_num;
    if (!route || !info.route_resolved) return;
    // The path record of a RoCE route, as the kernel reports one (ucma query_route).
    if (!id->route.path_rec) id->route.path_rec = static_cast<ibv_sa_path_rec*>(std::calloc(1, sizeof(ibv_sa_path_rec)));
    if (!id->route.path_rec) return;
    ibv_sa_path_rec& p = *id->route.path_rec;
    p = {};
    std::memcpy(p.dgid.raw, info.dgid.data(), 16);
    std::memcpy(p.sgid.raw, info.sgid.data(), 16);
    p.hop_limit = info.hop_limit;
    p.traffic_class = info.traffic_class;
    p.reversible = 1;
    p.numb_path = 1;
    p.pkey = htobe16(info.pkey);
    p.mtu_selector = 2;  // exactly
    p.mtu = uint8_t(info.path_mtu);
    p.rate_selector = 2;
    p.packet_life_time_selector = 2;
    id->route.num_paths = 1;
}

int query_into(IdState& st) {
    if (st.subs.empty()) return 0;
    api::CmIdInfo info;
    const Sub s = st.subs.front();
    const int r = with_cm(*s.dev, [&](api::Cm& cm) { return cm.query(s.cm, info); });
    if (r) return err(r);
    apply_info(&st.w->id, info, info.route_resolved);
    return 0;
}

void ack(IdState& st) {
    const std::lock_guard g(st.mut);
    st.completed++;
    st.cv.notify_all();
}

int complete(rdma_cm_id* id) {
    IdState& st = st_of(id);
    if (!st.sync) return 0;
    if (id->event) {
        rdma_ack_cm_event(id->event);
        id->event = nullptr;
    }
    if (rdma_get_cm_event(id->channel, &id->event)) return -1;
    const int s = id->event->status;
    if (!s) return 0;
    if (id->event->event == RDMA_CM_EVENT_REJECTED) return err(ECONNREFUSED);
    return err(s < 0 ? -s : s);
}

// ---------------------------------------------------------------- QP moves

namespace {

int init_qp_attr(IdState& st, ibv_qp_state state, ibv_qp_attr& attr, int& mask) {
    if (!st.dev || st.subs.empty()) return err(EINVAL);
    QpAttr a;
    uint32_t m = 0;
    const Sub s = st.subs.front();
    const int r = with_cm(*s.dev, [&](api::Cm& cm) { return cm.init_qp_attr(s.cm, QpState(uint8_t(state)), a, m); });
    if (r) return err(r);
    hcaemu_verbs_to_ibv_qp_attr(a, attr);
    mask = int(m);
    return 0;
}

int modify(ibv_qp* qp, ibv_qp_attr& attr, int mask) {
    const int r = ibv_modify_qp(qp, &attr, mask);
    if (debug())
        std::fprintf(stderr,
                     "librdmacm (hcaemu): QPN %u to state %d, mask 0x%x: %s (dest QPN %u, rq_psn %u, sq_psn %u, "
                     "max_rd_atomic %u, max_dest_rd_atomic %u, mtu %d, timeout %u, retry %u, rnr_retry %u, dgid ..%02x)\n",
                     qp->qp_num, int(attr.qp_state), unsigned(mask), r ? std::strerror(r) : "ok", attr.dest_qp_num,
                     attr.rq_psn, attr.sq_psn, attr.max_rd_atomic, attr.max_dest_rd_atomic, int(attr.path_mtu),
                     attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.ah_attr.grh.dgid.raw[15]);
    return r ? err(r) : 0;
}

}  // namespace

int qp_init_attr(rdma_cm_id* id, ibv_qp_attr* attr, int* mask) {
    return init_qp_attr(st_of(id), attr->qp_state, *attr, *mask);
}

int modify_qp_rtr(rdma_cm_id* id, uint8_t resp_res) {
    if (!id->qp) return 0;
    ibv_qp_attr a{};
    int mask = 0;
    if (init_qp_attr(st_of(id), IBV_QPS_INIT, a, mask) || modify(id->qp, a, mask)) return -1;
    if (init_qp_attr(st_of(id), IBV_QPS_RTR, a, mask)) return -1;
    if (resp_res != RDMA_MAX_RESP_RES) a.max_dest_rd_atomic = resp_res;
    return modify(id->qp, a, mask);
}

int modify_qp_rts(rdma_cm_id* id, uint8_t init_depth) {
    if (!id->qp) return 0;
    ibv_qp_attr a{};
    int mask = 0;
    if (init_qp_attr(st_of(id), IBV_QPS_RTS, a, mask)) return -1;
    if (init_depth != RDMA_MAX_INIT_DEPTH) a.max_rd_atomic = init_depth;
    return modify(id->qp, a, mask);
}

int modify_qp_err(rdma_cm_id* id) {
    if (!id->qp) return 0;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    return modify(id->qp, a, IBV_QP_STATE);
}

// The active side's answer to a REP: the QP to RTR and RTS, then the RTU (ucma accept).
int conn_resp(IdState& st) {
    rdma_cm_id* id = &st.w->id;
    int r = modify_qp_rtr(id, RDMA_MAX_RESP_RES);
    if (!r) r = modify_qp_rts(id, RDMA_MAX_INIT_DEPTH);
    if (!r && !st.subs.empty()) {
        const Sub s = st.subs.front();
        if (const int e = with_cm(*s.dev, [&](api::Cm& cm) { return cm.establish(s.cm); })) r = err(e);
    }
    if (r) {
        const int e = errno;
        (void)modify_qp_err(id);
        errno = e;
    }
    return r;
}

// ---------------------------------------------------------------- events, the caller's part

namespace {

void copy_private(EventW& e, const void*& ptr, uint8_t& len) {
    len = e.cm.param.private_data_len;
    std::memcpy(e.private_data, e.cm.param.private_data, std::min<size_t>(len, sizeof e.private_data));
    ptr = len ? e.private_data : nullptr;
}

void copy_conn(EventW& e) {
    rdma_conn_param& c = e.ev.param.conn;
    const api::CmConnParam& p = e.cm.param;
    copy_private(e, c.private_data, c.private_data_len);
    c.responder_resources = p.responder_resources;
    c.initiator_depth = p.initiator_depth;
    c.flow_control = p.flow_control;
    c.retry_count = p.retry_count;
    c.rnr_retry_count = p.rnr_retry_count;
    c.srq = p.srq;
    c.qp_num = p.qp_num;
}

void copy_ud(EventW& e) {
    rdma_ud_param& u = e.ev.param.ud;
    copy_private(e, u.private_data, u.private_data_len);
    hcaemu_verbs_to_ibv_ah(e.cm.param.ah, u.ah_attr);
    u.qp_num = e.cm.param.qp_num;
    u.qkey = e.cm.param.qkey;
}

// A connect request to a listener created without a channel (rdma_get_request): the new id gets
// a channel of its own, as librdmacm's migrate.
void make_sync(IdState& st) {
    ChannelW* c = new_channel();
    if (!c) return;
    const std::lock_guard g(core().mu);
    move_events(&st, c);
    st.sync = true;
    st.w->id.channel = &c->ch;
}

}  // namespace

bool finish_event(EventW& e) {
    rdma_cm_event& ev = e.ev;
    rdma_cm_id* id = &e.id->id;
    IdState& st = *e.id->st;
    const bool ud = id->qp_type == IBV_QPT_UD;
    ev.id = id;
    ev.listen_id = e.listen ? &e.listen->id : nullptr;
    ev.event = rdma_cm_event_type(e.cm.type);
    ev.status = e.cm.status;
    switch (ev.event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        if (e.have_info) {
            apply_info(id, e.info, ev.event == RDMA_CM_EVENT_ROUTE_RESOLVED);
        } else {
            ev.event = ev.event == RDMA_CM_EVENT_ADDR_RESOLVED ? RDMA_CM_EVENT_ADDR_ERROR : RDMA_CM_EVENT_ROUTE_ERROR;
            ev.status = -ENODEV;
        }
        break;
    case RDMA_CM_EVENT_CONNECT_REQUEST:
        ud ? copy_ud(e) : copy_conn(e);
        st.initiator_depth = e.cm.param.initiator_depth;
        st.responder_resources = e.cm.param.responder_resources;
        if (e.listen && e.listen->st->sync) make_sync(st);
        break;
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
        if (ud) {  // a SIDR_REP: reported as the kernel does, ESTABLISHED with the UD parameters
            copy_ud(e);
            ev.event = ev.status ? RDMA_CM_EVENT_UNREACHABLE : RDMA_CM_EVENT_ESTABLISHED;
            break;
        }
        copy_conn(e);
        if (!id->qp) break;  // the program calls rdma_establish
        if (conn_resp(st) == 0) {
            ev.event = RDMA_CM_EVENT_ESTABLISHED;
        } else {
            ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
            ev.status = -errno;
            st.connect_error = true;
        }
        break;
    case RDMA_CM_EVENT_REJECTED:
        if (st.connect_error) return false;
        ud ? copy_ud(e) : copy_conn(e);
        (void)modify_qp_err(id);
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        if (st.connect_error) return false;
        copy_conn(e);
        break;
    default:
        ud ? copy_ud(e) : copy_conn(e);
        break;
    }
    return true;
}

}  // namespace hcaemu::rdmacm
