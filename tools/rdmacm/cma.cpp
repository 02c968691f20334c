// librdmacm.so.1 on libhcaemu: the rdma_* entry points of <rdma/rdma_cma.h> (RDMACM_1.0 ... 1.3),
// with librdmacm's rules for ids, channels, QPs and synchronous ids; the CM calls are api::Cm's.
#include <arpa/inet.h>
#include <endian.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <rdma/rdma_verbs.h>

#include "tools/rdmacm/rdmacm.hpp"

using namespace hcaemu;
using namespace hcaemu::rdmacm;

namespace {

uint16_t port_of(const sockaddr* a) {
    if (a->sa_family == AF_INET) return reinterpret_cast<const sockaddr_in*>(a)->sin_port;
    if (a->sa_family == AF_INET6) return reinterpret_cast<const sockaddr_in6*>(a)->sin6_port;
    return 0;
}

void set_port(sockaddr_storage& a, uint16_t be_port) {
    if (a.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&a)->sin_port = be_port;
    if (a.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&a)->sin6_port = be_port;
}

// How well device `d` suits reaching `dst`: its own address (loopback) 3, the same /24 (IPv4) or
// /64 (IPv6) 2, the same family 1.
int fit(const Device& d, const sockaddr* dst) {
    if (d.ip.ss_family != dst->sa_family) return 0;
    if (dst->sa_family == AF_INET) {
        const uint32_t a = ntohl(reinterpret_cast<const sockaddr_in*>(&d.ip)->sin_addr.s_addr);
        const uint32_t b = ntohl(reinterpret_cast<const sockaddr_in*>(dst)->sin_addr.s_addr);
        return a == b ? 3 : (a >> 8) == (b >> 8) ? 2 : 1;
    }
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&d.ip)->sin6_addr.s6_addr;
    const auto* b = reinterpret_cast<const sockaddr_in6*>(dst)->sin6_addr.s6_addr;
    return std::memcmp(a, b, 16) == 0 ? 3 : std::memcmp(a, b, 8) == 0 ? 2 : 1;
}

// The device a connection to `dst` leaves from, among `cands` (librdmacm asks the kernel's
// routing; hcaemu's devices each have one address).
Device* pick(const std::vector<Device*>& cands, const sockaddr* dst) {
    Device* best = nullptr;
    int best_fit = -1;
    for (Device* d : cands)
        if (const int f = fit(*d, dst); f > best_fit) best = d, best_fit = f;
    return best;
}

std::vector<Device*> cm_devices() {
    std::vector<Device*> v;
    for (auto& d : core().devs)
        if (d->has_cm) v.push_back(d.get());
    return v;
}

// rdma_bind_addr to a wildcard address: a CM id on every device, all on one port.
int bind_wildcard(IdState& st, const sockaddr* addr) {
    sockaddr_storage a{};
    std::memcpy(&a, addr, addr_len(addr));
    const auto devs = cm_devices();
    if (devs.empty()) return err(ENODEV);
    for (Device* d : devs) {
        uint32_t cm_id = 0;
        int r = add_sub(st, *d, cm_id);
        if (!r) r = with_cm(*d, [&](api::Cm& cm) { return cm.bind(cm_id, reinterpret_cast<sockaddr*>(&a)); });
        if (r) {
            remove_subs(st, nullptr);
            return err(r);
        }
        if (!port_of(reinterpret_cast<sockaddr*>(&a))) {  // the ephemeral port the first chose, for the others
            api::CmIdInfo info;
            if (with_cm(*d, [&](api::Cm& cm) { return cm.query(cm_id, info); }) == 0)
                set_port(a, port_of(reinterpret_cast<sockaddr*>(&info.src)));
        }
    }
    return query_into(st);
}

// rdma_bind_addr to one address: the device that has it.
int bind_one(IdState& st, const sockaddr* addr) {
    for (Device* d : cm_devices()) {
        uint32_t cm_id = 0;
        if (const int r = add_sub(st, *d, cm_id)) return err(r);
        const int r = with_cm(*d, [&](api::Cm& cm) { return cm.bind(cm_id, addr); });
        if (!r) {
            choose_device(st, *d);
            return query_into(st);
        }
        remove_subs(st, nullptr);
        if (r != ENODEV && r != EADDRNOTAVAIL) return err(r);
    }
    return err(EADDRNOTAVAIL);  // no device has the address (the kernel's answer)
}

bool valid_param(IdState& st, const rdma_conn_param* p) {
    if (st.w->id.ps != RDMA_PS_TCP) return true;
    if (!st.w->id.qp && !p) return false;
    if (!p || !st.dev) return true;
    if (p->responder_resources != RDMA_MAX_RESP_RES && p->responder_resources > st.dev->max_resp_res) return false;
    if (p->initiator_depth != RDMA_MAX_INIT_DEPTH && p->initiator_depth > st.dev->max_init_depth) return false;
    return true;
}

// ucma_copy_conn_param_to_kern: create_ep's ai_connect, then the caller's private data.
bool to_cm_param(IdState& st, const rdma_conn_param* p, uint32_t qp_num, bool srq, api::CmConnParam& o) {
    o.qp_num = qp_num;
    o.srq = srq;
    o.responder_resources = st.responder_resources;
    o.initiator_depth = st.initiator_depth;
    size_t len = st.connect_data.size();
    if (p && p->private_data && p->private_data_len) len += p->private_data_len;
    if (len > api::kCmMaxPrivate) return false;
    if (!st.connect_data.empty()) std::memcpy(o.private_data, st.connect_data.data(), st.connect_data.size());
    o.private_data_len = uint8_t(st.connect_data.size());
    if (p) {
        o.flow_control = p->flow_control;
        o.retry_count = p->retry_count;
        o.rnr_retry_count = p->rnr_retry_count;
        if (p->private_data && p->private_data_len) {
            std::memcpy(o.private_data + o.private_data_len, p->private_data, p->private_data_len);
            o.private_data_len = uint8_t(o.private_data_len + p->private_data_len);
        }
    } else {
        o.retry_count = 7;
        o.rnr_retry_count = 7;
    }
    if (st.w->id.qp_type == IBV_QPT_UD) o.qkey = RDMA_UDP_QKEY;
    return true;
}

int on_sub(IdState& st, const std::function<int(api::Cm&, uint32_t)>& fn) {
    if (st.subs.empty()) return err(EINVAL);
    const Sub s = st.subs.front();
    const int r = with_cm(*s.dev, [&](api::Cm& cm) { return fn(cm, s.cm); });
    return r ? err(r) : 0;
}

void destroy_cqs(rdma_cm_id* id) {
    if (id->recv_cq) {
        ibv_destroy_cq(id->recv_cq);
        if (id->send_cq && id->send_cq != id->recv_cq) ibv_destroy_cq(id->send_cq);
        id->recv_cq = id->send_cq = nullptr;
    }
    if (id->recv_cq_channel) {
        ibv_destroy_comp_channel(id->recv_cq_channel);
        if (id->send_cq_channel && id->send_cq_channel != id->recv_cq_channel) ibv_destroy_comp_channel(id->send_cq_channel);
        id->recv_cq_channel = id->send_cq_channel = nullptr;
    }
}

int create_cqs(rdma_cm_id* id, uint32_t send_size, uint32_t recv_size) {
    if (recv_size) {
        id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
        if (id->recv_cq_channel) id->recv_cq = ibv_create_cq(id->verbs, int(recv_size), id, id->recv_cq_channel, 0);
        if (!id->recv_cq) return destroy_cqs(id), -1;
    }
    if (send_size) {
        id->send_cq_channel = ibv_create_comp_channel(id->verbs);
        if (id->send_cq_channel) id->send_cq = ibv_create_cq(id->verbs, int(send_size), id, id->send_cq_channel, 0);
        if (!id->send_cq) return destroy_cqs(id), -1;
    }
    return 0;
}

// A new QP to INIT (connected) or through INIT, RTR and RTS (UD), from the CM's attributes.
int init_qp(rdma_cm_id* id, ibv_qp* qp) {
    ibv_qp_attr a{};
    int mask = 0;
    a.qp_state = IBV_QPS_INIT;
    if (qp_init_attr(id, &a, &mask)) return -1;
    if (const int r = ibv_modify_qp(qp, &a, mask)) return err(r);
    if (id->qp_type != IBV_QPT_UD) return 0;
    a.qp_state = IBV_QPS_RTR;
    if (const int r = ibv_modify_qp(qp, &a, IBV_QP_STATE)) return err(r);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    if (const int r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) return err(r);
    return 0;
}

int destroy_id(IdW* w) {
    IdState& st = *w->st;
    std::vector<Sub> subs;
    std::vector<IdW*> unreported;
    uint32_t delivered = 0;
    {
        const std::lock_guard g(core().mu);
        for (const Sub& s : st.subs) core().ids.erase({s.dev, s.cm});
        subs = std::move(st.subs);
        st.subs.clear();
        unreported = drop_events_of(&st);
        delivered = st.delivered;
    }
    for (const Sub& s : subs)
        (void)with_cm(*s.dev, [&](api::Cm& cm) {
            uint32_t n = 0;
            return cm.destroy_id(s.cm, n);
        });
    for (IdW* u : unreported) (void)destroy_id(u);
    if (w->id.event) {
        rdma_ack_cm_event(w->id.event);
        w->id.event = nullptr;
    }
    {
        std::unique_lock l(st.mut);
        st.cv.wait(l, [&] { return st.completed >= delivered; });
    }
    free_id(w);
    return 0;
}

}  // namespace

extern "C" {

// ---------------------------------------------------------------- devices and channels

ibv_context** rdma_get_devices(int* num_devices) {
    if (num_devices) *num_devices = 0;
    if (init()) return nullptr;
    auto& devs = core().devs;
    auto** l = static_cast<ibv_context**>(std::calloc(devs.size() + 1, sizeof(ibv_context*)));
    if (!l) return errno = ENOMEM, nullptr;
    for (size_t i = 0; i < devs.size(); ++i) l[i] = devs[i]->verbs;
    if (num_devices) *num_devices = int(devs.size());
    return l;
}

void rdma_free_devices(ibv_context** list) { std::free(list); }

rdma_event_channel* rdma_create_event_channel(void) {
    if (init()) return nullptr;
    ChannelW* c = new_channel();
    return c ? &c->ch : nullptr;
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
    if (!stale_channel(channel)) free_channel(reinterpret_cast<ChannelW*>(channel));
}

// ---------------------------------------------------------------- ids

int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context, rdma_port_space ps) {
    if (init()) return -1;
    if (!id || (channel && stale_channel(channel))) return err(EINVAL);
    const ibv_qp_type qt = (ps == RDMA_PS_IPOIB || ps == RDMA_PS_UDP) ? IBV_QPT_UD : IBV_QPT_RC;
    IdW* w = new_id(channel, context, ps, qt);
    if (!w) return err(ENOMEM);
    *id = &w->id;
    return 0;
}

int rdma_destroy_id(rdma_cm_id* id) { return stale_id(id) ? -1 : destroy_id(reinterpret_cast<IdW*>(id)); }

int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
    if (stale_id(id)) return -1;
    if (!addr_len(addr)) return err(EINVAL);
    IdState& st = st_of(id);
    if (!st.subs.empty()) return err(EINVAL);  // bound already
    return is_wildcard(addr) ? bind_wildcard(st, addr) : bind_one(st, addr);
}

int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr, int timeout_ms) {
    if (stale_id(id)) return -1;
    const socklen_t dst_len = addr_len(dst_addr);
    if (!dst_len || (src_addr && !addr_len(src_addr))) return err(EINVAL);
    IdState& st = st_of(id);
    const sockaddr* src = src_addr;
    if (st.subs.empty()) {
        if (src && !is_wildcard(src)) {
            if (rdma_bind_addr(id, src_addr)) return -1;
            src = nullptr;
        } else {
            Device* d = pick(cm_devices(), dst_addr);
            if (!d) return err(ENODEV);
            uint32_t cm_id = 0;
            if (const int r = add_sub(st, *d, cm_id)) return err(r);
            choose_device(st, *d);
        }
    } else {
        src = nullptr;  // bound: the CM id has its address
        if (!st.dev) {  // bound to a wildcard on every device: the one the destination is reached from
            std::vector<Device*> cands;
            for (const Sub& s : st.subs) cands.push_back(s.dev);
            Device* d = pick(cands, dst_addr);
            remove_subs(st, d);
            choose_device(st, *d);
        }
    }
    std::memcpy(&id->route.addr.dst_storage, dst_addr, dst_len);
    if (on_sub(st, [&](api::Cm& cm, uint32_t c) { return cm.resolve_addr(c, src, dst_addr, timeout_ms); })) return -1;
    return complete(id);
}

int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
    if (stale_id(id)) return -1;
    IdState& st = st_of(id);
    if (!st.dev) return err(EINVAL);
    if (on_sub(st, [&](api::Cm& cm, uint32_t c) { return cm.resolve_route(c, timeout_ms); })) return -1;
    return complete(id);
}

int rdma_listen(rdma_cm_id* id, int backlog) {
    if (stale_id(id)) return -1;
    IdState& st = st_of(id);
    if (st.subs.empty()) {  // not bound: the kernel binds it to the IPv4 wildcard, any port
        sockaddr_in any{};
        any.sin_family = AF_INET;
        if (bind_wildcard(st, reinterpret_cast<sockaddr*>(&any))) return -1;
    }
    for (const Sub& s : st.subs)
        if (const int r = with_cm(*s.dev, [&](api::Cm& cm) { return cm.listen(s.cm, backlog); })) return err(r);
    const int r = query_into(st);
    // A harness waits for this line before it starts a client (scripts/interop/run.sh).
    if (r == 0 && debug()) std::fprintf(stderr, "rdmacm: listening on port %u\n", unsigned(ntohs(rdma_get_src_port(id))));
    return r;
}

int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
    if (stale_id(id)) return -1;
    IdState& st = st_of(id);
    if (!st.dev || !valid_param(st, conn_param)) return err(EINVAL);
    st.initiator_depth = conn_param && conn_param->initiator_depth != RDMA_MAX_INIT_DEPTH ? conn_param->initiator_depth
                                                                                            : st.dev->max_init_depth;
    st.responder_resources = conn_param && conn_param->responder_resources != RDMA_MAX_RESP_RES
                                 ? conn_param->responder_resources
                                 : st.dev->max_resp_res;
    uint32_t qp_num = conn_param ? conn_param->qp_num : 0;
    bool srq = conn_param ? conn_param->srq : false;
    if (id->qp) qp_num = id->qp->qp_num, srq = id->qp->srq != nullptr;
    api::CmConnParam p;
    if (!to_cm_param(st, conn_param, qp_num, srq, p)) return err(EINVAL);
    if (on_sub(st, [&](api::Cm& cm, uint32_t c) { return cm.connect(c, p); })) return -1;
    st.connect_data.clear();
    return complete(id);
}

int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
    if (stale_id(id)) return -1;
    IdState& st = st_of(id);
    if (!st.dev || !valid_param(st, conn_param)) return err(EINVAL);
    const bool ud = id->qp_type == IBV_QPT_UD;
    if (!conn_param || conn_param->initiator_depth == RDMA_MAX_INIT_DEPTH)
        st.initiator_depth = std::min(st.initiator_depth, st.dev->max_init_depth);
    else
        st.initiator_depth = conn_param->initiator_depth;
    if (!conn_param || conn_param->responder_resources == RDMA_MAX_RESP_RES)
        st.responder_resources = std::min(st.responder_resources, st.dev->max_resp_res);
    else
        st.responder_resources = conn_param->responder_resources;
    // librdmacm moves the QP to RTR and RTS, then has the kernel send the REP. Here RTS follows the
    // CM's accept: its sq_psn is the starting PSN the REP carried, whenever the CM chose it (the
    // agent picks it in accept(): before, the QP got 0). The QP receives and ACKs in RTR before the
    // REP leaves; the program posts sends only after rdma_accept returns.
    if (!ud && modify_qp_rtr(id, st.responder_resources)) return -1;
    const uint32_t qp_num = id->qp ? id->qp->qp_num : conn_param ? conn_param->qp_num : 0;
    const bool srq = id->qp ? id->qp->srq != nullptr : conn_param ? conn_param->srq != 0 : false;
    api::CmConnParam p;
    if (!to_cm_param(st, conn_param, qp_num, srq, p)) return err(EINVAL);
    if (on_sub(st, [&](api::Cm& cm, uint32_t c) { return cm.accept(c, p); }) ||
        (!ud && modify_qp_rts(id, st.initiator_depth))) {
        const int e = errno;
        (void)modify_qp_err(id);
        return err(e);
    }
    return ud ? 0 : complete(id);
}

int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
    if (stale_id(id)) return -1;
    if (private_data_len > api::kCmMaxPrivate) return err(EINVAL);
    const auto* pd = private_data && private_data_len ? static_cast<const uint8_t*>(private_data) : nullptr;
    return on_sub(st_of(id), [&](api::Cm& cm, uint32_t c) { return cm.reject(c, pd, pd ? private_data_len : 0); });
}

// The CM has no reason code to pass (IBTA's 35, vendor option not supported): a consumer reject.
int rdma_reject_ece(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
    return rdma_reject(id, private_data, private_data_len);
}

// IBV_EVENT_COMM_EST (data before the RTU): the CM's own REP retries and the RTU establish the
// connection; nothing to do. Another event: EINVAL, as the kernel's rdma_notify.
int rdma_notify(rdma_cm_id* id, ibv_event_type event) {
    if (stale_id(id)) return -1;
    if (!st_of(id).dev) return err(EINVAL);
    return event == IBV_EVENT_COMM_EST ? 0 : err(EINVAL);
}

int rdma_disconnect(rdma_cm_id* id) {
    if (stale_id(id)) return -1;
    if (!id->verbs || !id->verbs->device) return err(EINVAL);
    if (modify_qp_err(id)) return -1;  // ucma_shutdown on an IB transport
    if (on_sub(st_of(id), [&](api::Cm& cm, uint32_t c) { return cm.disconnect(c); })) return -1;
    return complete(id);
}

int rdma_establish(rdma_cm_id* id) {
    if (stale_id(id)) return -1;
    if (id->qp) return err(EINVAL);
    return conn_resp(st_of(id));
}

int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
    if (stale_id(id)) return -1;
    return qp_init_attr(id, qp_attr, qp_attr_mask);
}

int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
    if (stale_id(id) || (channel && stale_channel(channel))) return -1;
    IdState& st = st_of(id);
    if (st.sync && !channel) return err(EINVAL);
    const bool sync = channel == nullptr;
    ChannelW* to = sync ? new_channel() : reinterpret_cast<ChannelW*>(channel);
    if (!to) return -1;
    ChannelW* from = chan_of(id);
    const bool from_sync = st.sync;
    uint32_t delivered = 0;
    {
        const std::lock_guard g(core().mu);
        move_events(&st, to);
        id->channel = &to->ch;
        st.sync = sync;
        delivered = st.delivered;
    }
    if (from_sync) {
        if (id->event) {
            rdma_ack_cm_event(id->event);
            id->event = nullptr;
        }
        free_channel(from);
    }
    std::unique_lock l(st.mut);
    st.cv.wait(l, [&] { return st.completed >= delivered; });
    return 0;
}

int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval, size_t optlen) {
    if (stale_id(id)) return -1;
    if (level != RDMA_OPTION_ID) return err(ENOSYS);  // RDMA_OPTION_IB_PATH: no IB SA paths on RoCE here
    if (!optval) return err(EINVAL);
    api::CmOption opt;
    uint32_t value = 0;
    switch (optname) {
    case RDMA_OPTION_ID_TOS:
    case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (optlen != sizeof(uint8_t)) return err(EINVAL);
        value = *static_cast<uint8_t*>(optval);
        opt = optname == RDMA_OPTION_ID_TOS ? api::CmOption::tos : api::CmOption::ack_timeout;
        break;
    case RDMA_OPTION_ID_REUSEADDR:
    case RDMA_OPTION_ID_AFONLY:
        if (optlen != sizeof(int)) return err(EINVAL);
        value = uint32_t(*static_cast<int*>(optval));
        opt = optname == RDMA_OPTION_ID_REUSEADDR ? api::CmOption::reuseaddr : api::CmOption::afonly;
        break;
    default: return err(ENOSYS);
    }
    IdState& st = st_of(id);
    for (const Sub& s : st.subs)
        if (const int r = with_cm(*s.dev, [&](api::Cm& cm) { return cm.set_option(s.cm, opt, value); })) return err(r);
    std::erase_if(st.options, [&](const auto& o) { return o.first == opt; });
    st.options.emplace_back(opt, value);
    return 0;
}

// ---------------------------------------------------------------- events

int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
    if (init()) return -1;
    if (!event || stale_channel(channel)) return err(EINVAL);
    for (;;) {
        EventW* e = nullptr;
        if (get_event(reinterpret_cast<ChannelW*>(channel), e)) return -1;
        if (finish_event(*e)) {
            *event = &e->ev;
            return 0;
        }
        ack(*e->owner);
        delete e;
    }
}

int rdma_ack_cm_event(rdma_cm_event* event) {
    if (!event) return err(EINVAL);
    auto* e = reinterpret_cast<EventW*>(event);
    ack(*e->owner);
    delete e;
    return 0;
}

const char* rdma_event_str(rdma_cm_event_type event) {
    static const char* const kNames[] = {
        "RDMA_CM_EVENT_ADDR_RESOLVED",    "RDMA_CM_EVENT_ADDR_ERROR",     "RDMA_CM_EVENT_ROUTE_RESOLVED",
        "RDMA_CM_EVENT_ROUTE_ERROR",      "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
        "RDMA_CM_EVENT_CONNECT_ERROR",    "RDMA_CM_EVENT_UNREACHABLE",    "RDMA_CM_EVENT_REJECTED",
        "RDMA_CM_EVENT_ESTABLISHED",      "RDMA_CM_EVENT_DISCONNECTED",   "RDMA_CM_EVENT_DEVICE_REMOVAL",
        "RDMA_CM_EVENT_MULTICAST_JOIN",   "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
        "RDMA_CM_EVENT_TIMEWAIT_EXIT"};
    const auto i = unsigned(event);
    return i < std::size(kNames) ? kNames[i] : "UNKNOWN EVENT";
}

uint16_t rdma_get_src_port(rdma_cm_id* id) { return stale_id(id) ? 0 : port_of(&id->route.addr.src_addr); }
uint16_t rdma_get_dst_port(rdma_cm_id* id) { return stale_id(id) ? 0 : port_of(&id->route.addr.dst_addr); }

// ---------------------------------------------------------------- QPs and SRQs

int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
    if (stale_id(id)) return -1;
    if (id->qp) return err(EINVAL);
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
        attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
        attr->pd = id->pd;
    } else if (id->verbs != attr->pd->context) {
        return err(EINVAL);
    }
    if (!id->verbs || !attr->pd) return err(EINVAL);
    if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
        (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
        return err(EINVAL);
    if (id->qp_type == IBV_QPT_XRC_RECV) return err(EOPNOTSUPP);  // no XRC (libibverbs: open_xrcd)
    if (create_cqs(id, attr->send_cq || id->send_cq ? 0 : attr->cap.max_send_wr,
                   attr->recv_cq || id->recv_cq ? 0 : attr->cap.max_recv_wr))
        return -1;
    if (!attr->send_cq) attr->send_cq = id->send_cq;
    if (!attr->recv_cq) attr->recv_cq = id->recv_cq;
    if (id->srq && !attr->srq) attr->srq = id->srq;
    ibv_qp* qp = ibv_create_qp_ex(id->verbs, attr);
    if (!qp) {
        const int e = errno;
        destroy_cqs(id);
        return err(e);
    }
    if (init_qp(id, qp)) {
        const int e = errno;
        ibv_destroy_qp(qp);
        destroy_cqs(id);
        return err(e);
    }
    id->pd = qp->pd;
    id->qp = qp;
    return 0;
}

int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
    if (stale_id(id)) return -1;
    ibv_qp_init_attr_ex ax{};
    std::memcpy(&ax, qp_init_attr, sizeof *qp_init_attr);
    ax.comp_mask = IBV_QP_INIT_ATTR_PD;
    ax.pd = pd ? pd : id->pd;
    const int r = rdma_create_qp_ex(id, &ax);
    std::memcpy(qp_init_attr, &ax, sizeof *qp_init_attr);
    return r;
}

void rdma_destroy_qp(rdma_cm_id* id) {
    if (stale_id(id)) return;
    ibv_destroy_qp(id->qp);
    id->qp = nullptr;
    destroy_cqs(id);
}

int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
    if (stale_id(id)) return -1;
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)) return err(EINVAL);
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
        attr->pd = id->pd;
        attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    }
    if (attr->srq_type == IBV_SRQT_XRC) return err(EOPNOTSUPP);  // no XRC
    ibv_srq* srq = ibv_create_srq_ex(id->verbs, attr);
    if (!srq) return -1;
    if (!id->pd) id->pd = attr->pd;
    id->srq = srq;
    return 0;
}

int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
    if (stale_id(id)) return -1;
    ibv_srq_init_attr_ex ax{};
    std::memcpy(&ax, attr, sizeof *attr);
    ax.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    ax.srq_type = id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
    ax.pd = pd;
    const int r = rdma_create_srq_ex(id, &ax);
    std::memcpy(attr, &ax, sizeof *attr);
    return r;
}

void rdma_destroy_srq(rdma_cm_id* id) {
    if (stale_id(id)) return;
    ibv_destroy_srq(id->srq);
    id->srq = nullptr;
    destroy_cqs(id);
}

// ---------------------------------------------------------------- synchronous endpoints

int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
    if (stale_id(listen)) return -1;
    if (!st_of(listen).sync) return err(EINVAL);
    if (listen->event) {
        rdma_ack_cm_event(listen->event);
        listen->event = nullptr;
    }
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(listen->channel, &ev)) return -1;
    int r = 0;
    if (ev->event == RDMA_CM_EVENT_REJECTED) r = err(ECONNREFUSED);
    else if (ev->status) r = err(-ev->status);
    else if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) r = err(EINVAL);
    else if (IdState& ls = st_of(listen); ls.qp_init_attr) {
        ibv_qp_init_attr a = *ls.qp_init_attr;
        r = rdma_create_qp(ev->id, listen->pd, &a);
    }
    if (r) {
        listen->event = ev;
        return r;
    }
    *id = ev->id;
    (*id)->event = ev;
    return 0;
}

int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
    rdma_cm_id* cm_id = nullptr;
    if (init()) return -1;
    IdW* w = new_id(nullptr, nullptr, rdma_port_space(res->ai_port_space), ibv_qp_type(res->ai_qp_type));
    if (!w) return err(ENOMEM);
    cm_id = &w->id;
    IdState& st = *w->st;
    int r = 0;
    if (res->ai_flags & RAI_PASSIVE) {
        r = rdma_bind_addr(cm_id, res->ai_src_addr);
        if (!r && pd) cm_id->pd = pd;
        if (!r && qp_init_attr) {
            st.qp_init_attr = std::make_unique<ibv_qp_init_attr>(*qp_init_attr);
            st.qp_init_attr->qp_type = ibv_qp_type(res->ai_qp_type);
        }
    } else {
        r = rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000);
        if (!r) r = rdma_resolve_route(cm_id, 2000);
        if (!r && qp_init_attr) {
            qp_init_attr->qp_type = ibv_qp_type(res->ai_qp_type);
            r = rdma_create_qp(cm_id, pd, qp_init_attr);
        }
        if (!r && res->ai_connect_len) {
            const auto* c = static_cast<const uint8_t*>(res->ai_connect);
            st.connect_data.assign(c, c + res->ai_connect_len);
        }
    }
    if (r) {
        const int e = errno;
        rdma_destroy_ep(cm_id);
        return err(e);
    }
    *id = cm_id;
    return 0;
}

void rdma_destroy_ep(rdma_cm_id* id) {
    if (stale_id(id)) return;
    if (id->qp) rdma_destroy_qp(id);
    if (id->srq) rdma_destroy_srq(id);
    rdma_destroy_id(id);
}

// ---------------------------------------------------------------- not supported

// Multicast: the CM joins no groups (the kernel's answer for a device without multicast).
int rdma_join_multicast(rdma_cm_id*, sockaddr*, void*) { return err(ENOSYS); }
int rdma_join_multicast_ex(rdma_cm_id*, rdma_cm_join_mc_attr_ex*, void*) { return err(ENOSYS); }
int rdma_leave_multicast(rdma_cm_id*, sockaddr*) { return err(EADDRNOTAVAIL); }  // never joined

// ECE is kept in the library, as librdmacm does; the CM carries none, so the remote's is zero.
int rdma_set_local_ece(rdma_cm_id* id, ibv_ece* ece) {
    if (stale_id(id)) return -1;
    if (!id || id->qp || !ece || !ece->vendor_id || ece->comp_mask) return err(EINVAL);
    st_of(id).local_ece = *ece;
    return 0;
}

int rdma_get_remote_ece(rdma_cm_id* id, ibv_ece* ece) {
    if (stale_id(id)) return -1;
    if (!id || id->qp || !ece) return err(EINVAL);
    *ece = st_of(id).remote_ece;
    ece->comp_mask = 0;
    return 0;
}

}  // extern "C"
