// The CM agent (agent.hpp): ids, ports, address resolution, and the IB CM state machine of IBTA
// vol. 1 ch. 12 with the RDMA CM conventions of Annex A11. Field values follow Linux's cm.c and
// cma.c where the spec leaves a choice (cited as such).
#include "tools/cm/agent.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hcaemu::cm {

namespace {

constexpr std::array<const char*, size_t(CmState::count)> kStateName = {
    "IDLE", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_RESOLVED", "LISTEN", "REQ_SENT", "MRA_REQ_RCVD",
    "REQ_RCVD", "MRA_REQ_SENT", "REP_SENT", "REP_RCVD", "ESTABLISHED", "DREQ_SENT", "DREQ_RCVD",
    "TIMEWAIT", "SIDR_REQ_SENT", "SIDR_REQ_RCVD"};

constexpr uint32_t bit(CmState s) { return 1u << uint8_t(s); }

// IBTA 12.9 (figures 91-93): the states in which each received message drives a transition.
// A message in any other state is a duplicate (answered by its own rule) or counted and dropped.
struct Takes {
    uint16_t attr;
    uint32_t states;
};
constexpr Takes kTakes[] = {
    {pkt::cm_attr::rep, bit(CmState::req_sent) | bit(CmState::mra_req_rcvd)},
    {pkt::cm_attr::rtu, bit(CmState::rep_sent)},
    {pkt::cm_attr::mra, bit(CmState::req_sent) | bit(CmState::mra_req_rcvd) | bit(CmState::rep_sent)},
    {pkt::cm_attr::rej, bit(CmState::req_sent) | bit(CmState::mra_req_rcvd) | bit(CmState::req_rcvd) |
                            bit(CmState::mra_req_sent) | bit(CmState::rep_sent) | bit(CmState::rep_rcvd)},
    // DREQ in REP_SENT: the RTU was lost, the peer is established (Linux cm.c takes it there too).
    {pkt::cm_attr::dreq, bit(CmState::established) | bit(CmState::rep_sent) | bit(CmState::dreq_sent)},
    {pkt::cm_attr::drep, bit(CmState::dreq_sent)},
    {pkt::cm_attr::sidr_rep, bit(CmState::sidr_req_sent)},
};

// Per-attribute counters, sent and received.
struct AttrCounters {
    uint16_t attr;
    Counter sent, rcvd;
};
constexpr AttrCounters kAttrCounters[] = {
    {pkt::cm_attr::req, Counter::cm_req_sent, Counter::cm_req_rcvd},
    {pkt::cm_attr::mra, Counter::cm_mra_sent, Counter::cm_mra_rcvd},
    {pkt::cm_attr::rej, Counter::cm_rej_sent, Counter::cm_rej_rcvd},
    {pkt::cm_attr::rep, Counter::cm_rep_sent, Counter::cm_rep_rcvd},
    {pkt::cm_attr::rtu, Counter::cm_rtu_sent, Counter::cm_rtu_rcvd},
    {pkt::cm_attr::dreq, Counter::cm_dreq_sent, Counter::cm_dreq_rcvd},
    {pkt::cm_attr::drep, Counter::cm_drep_sent, Counter::cm_drep_rcvd},
    {pkt::cm_attr::sidr_req, Counter::cm_sidr_req_sent, Counter::cm_sidr_req_rcvd},
    {pkt::cm_attr::sidr_rep, Counter::cm_sidr_rep_sent, Counter::cm_sidr_rep_rcvd},
};

bool is_wildcard(const Gid& g) { return g == Gid{} || g == pkt::ipv4_mapped_gid(0); }

// A sockaddr as a GID and a port; false for another family.
bool from_sockaddr(const sockaddr* sa, Gid& g, uint16_t& port) {
    if (sa->sa_family == AF_INET) {
        const auto* s = reinterpret_cast<const sockaddr_in*>(sa);
        g = pkt::ipv4_mapped_gid(ntohl(s->sin_addr.s_addr));
        port = ntohs(s->sin_port);
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        const auto* s = reinterpret_cast<const sockaddr_in6*>(sa);
        std::memcpy(g.data(), &s->sin6_addr, 16);
        port = ntohs(s->sin6_port);
        return true;
    }
    return false;
}

sockaddr_storage to_sockaddr(const Gid& g, uint16_t port, bool v6) {
    sockaddr_storage ss{};
    if (!v6 && (pkt::is_ipv4_mapped(g) || g == Gid{})) {
        auto* s = reinterpret_cast<sockaddr_in*>(&ss);
        s->sin_family = AF_INET;
        s->sin_addr.s_addr = htonl(pkt::is_ipv4_mapped(g) ? pkt::ipv4_of_mapped(g) : 0);
        s->sin_port = htons(port);
    } else {
        auto* s = reinterpret_cast<sockaddr_in6*>(&ss);
        s->sin6_family = AF_INET6;
        std::memcpy(&s->sin6_addr, g.data(), 16);
        s->sin6_port = htons(port);
    }
    return ss;
}

// cm.c's cm_ack_timeout: the Local ACK Timeout of a REQ's path from the CA's ACK delay and the
// packet lifetime (both 4.096 us * 2^n codes): about 2 * lifetime + ack delay, at most 31.
uint8_t ack_timeout(uint8_t ca_ack_delay, uint8_t plt) {
    unsigned t = plt + 1u;  // two lifetimes
    if (t >= ca_ack_delay) t += (ca_ack_delay >= t - 1) ? 1 : 0;
    else t = ca_ack_delay + (t >= ca_ack_delay - 1u ? 1 : 0);
    return uint8_t(std::min(t, 31u));
}

template <class T>
void copy_pd(std::array<uint8_t, sizeof(T{}.private_data)>& dst, const uint8_t* src, size_t len) {
    std::memcpy(dst.data(), src, std::min(len, dst.size()));
}

}  // namespace

const char* name(CmState s) { return size_t(s) < kStateName.size() ? kStateName[size_t(s)] : "?"; }

struct Agent::Id {
    uint32_t id = 0;
    uint64_t context = 0;
    pkt::RdmaPs ps = pkt::RdmaPs::tcp;
    QpType qp_type = QpType::rc;
    CmState state = CmState::idle;
    uint32_t listen_id = 0;     // a passive id: the listener it came through
    int backlog = 0;
    // Addresses: ours (bound) and the peer's.
    bool bound = false;
    bool v6 = false;            // the consumer's family (what query returns)
    Gid src{};
    uint16_t sport = 0;
    Gid dst{};
    uint16_t dport = 0;
    uint8_t sgid_index = 0;
    pkt::Mac dmac{};
    bool route = false;
    bool reuseaddr = false;
    uint8_t tos = 0;
    uint8_t ack_timeout = 0;    // RDMA_OPTION_ID_ACK_TIMEOUT; 0: cm_ack_timeout's
    uint64_t resolve_deadline = 0;
    // The connection.
    uint32_t local_comm_id = 0, remote_comm_id = 0;
    uint64_t remote_ca_guid = 0;
    uint32_t local_qpn = 0, remote_qpn = 0;
    uint32_t sq_psn = 0, rq_psn = 0;
    uint8_t responder_resources = 0;  // ours: max_dest_rd_atomic
    uint8_t initiator_depth = 0;      // ours: max_rd_atomic
    uint8_t retry_count = 7, rnr_retry_count = 7;
    uint8_t local_ack_timeout = 0;
    Mtu path_mtu = Mtu::mtu1024;
    uint32_t qkey = 0;                // UD: the peer's (SIDR_REP)
    uint64_t tid = 0;                 // the exchange's TransactionID
    uint64_t dreq_tid = 0;
    uint8_t remote_resp_timeout = 20; // from the REQ: how long the peer may take to answer us
    uint8_t peer_resp_timeout = 20;   // the REQ's Local CM Response Timeout: the REQ sender's
    uint8_t max_cm_retries = 15;
    Mtu active_mtu = Mtu::mtu1024;
    // The resend timer: `last` goes again at `deadline` while retries are left.
    std::array<uint8_t, pkt::kMadLen> last{};
    transport::GsiDest dest{};
    pkt::Mac dest_mac{};
    bool dest_mac_known = false;
    uint64_t deadline = UINT64_MAX;
    uint64_t timeout_ns = 0;
    uint8_t retries_left = 0;
    uint32_t events = 0;
};

Agent::Agent(transport::Hca& hca, const AgentConfig& cfg) : hca_(hca), cfg_(cfg) {
    rng_.seed(cfg.seed ? cfg.seed : std::random_device{}());
    comm_xor_ = uint32_t(rng_());
    next_port_ = uint16_t(32768 + rng_() % (60999 - 32768 + 1));  // Linux's ip_local_port_range
    ca_guid_ = hca.device().query_device().node_guid;
    GidEntry ll;
    if (!ca_guid_ && hca.device().query_gid(1, 0, ll) == Status::ok)  // the EUI-64 of the link-local GID
        for (int i = 8; i < 16; ++i) ca_guid_ = ca_guid_ << 8 | ll.gid[size_t(i)];
    efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    hca_.set_cm_agent(&Agent::on_mad, this);
}

Agent::~Agent() {
    hca_.set_cm_agent(nullptr, nullptr);
    if (efd_ >= 0) ::close(efd_);
}

// ---- ids, addresses, ports ----------------------------------------------------------------------

Agent::Id* Agent::find(uint32_t id) const {
    auto it = ids_.find(id);
    return it == ids_.end() ? nullptr : it->second.get();
}

Agent::Id* Agent::by_comm_id(uint32_t comm) const {
    if (!comm) return nullptr;
    for (auto& [k, c] : ids_)
        if (c->local_comm_id == comm) return c.get();
    return nullptr;
}

CmState Agent::state(uint32_t id) const {
    const Id* c = find(id);
    return c ? c->state : CmState::count;
}

uint32_t Agent::local_comm_id(uint32_t id) const {
    const Id* c = find(id);
    return c ? c->local_comm_id : 0;
}

Agent::Id& Agent::new_id(pkt::RdmaPs ps, QpType t, uint64_t context) {
    auto c = std::make_unique<Id>();
    while (!next_id_ || ids_.count(next_id_)) ++next_id_;
    c->id = next_id_++;
    c->ps = ps;
    c->qp_type = t;
    c->context = context;
    Id& r = *c;
    ids_.emplace(r.id, std::move(c));
    return r;
}

int Agent::create_id(pkt::RdmaPs ps, QpType qp_type, uint64_t context, uint32_t& id) {
    if (ps != pkt::RdmaPs::tcp && ps != pkt::RdmaPs::udp && ps != pkt::RdmaPs::ipoib && ps != pkt::RdmaPs::ib)
        return EINVAL;
    if (ps == pkt::RdmaPs::ib || ps == pkt::RdmaPs::ipoib) return EOPNOTSUPP;
    if (!(ps == pkt::RdmaPs::tcp && qp_type == QpType::rc) && !(ps == pkt::RdmaPs::udp && qp_type == QpType::ud))
        return EINVAL;  // cma.c: TCP is RC, UDP is UD
    id = new_id(ps, qp_type, context).id;
    return 0;
}

// The GID of ours to send to `dst` from: the same family (IPv4-mapped or not), not link-local.
int Agent::pick_sgid(const Gid& dst, Gid& sgid, uint8_t& index) const {
    const bool v4 = pkt::is_ipv4_mapped(dst);
    GidEntry e;
    for (int i = 1; hca_.device().query_gid(1, i, e) == Status::ok; ++i)
        if (pkt::is_ipv4_mapped(e.gid) == v4 && e.gid != Gid{}) {
            sgid = e.gid;
            index = uint8_t(i);
            return 0;
        }
    return ENODEV;
}

bool Agent::port_free(const Id& c, uint16_t port, bool wildcard, const Gid& ip) const {
    for (auto& [k, o] : ids_) {
        if (o.get() == &c || !o->bound || o->ps != c.ps || o->sport != port || o->listen_id) continue;
        const bool overlap = wildcard || is_wildcard(o->src) || o->src == ip;
        if (!overlap) continue;
        // cma.c: reuse is allowed when both ids asked for it and neither listens.
        if (c.reuseaddr && o->reuseaddr && o->state != CmState::listen) continue;
        return false;
    }
    return true;
}

int Agent::bind_addr(Id& c, const sockaddr* addr) {
    Gid ip;
    uint16_t port = 0;
    if (!from_sockaddr(addr, ip, port)) return EAFNOSUPPORT;
    const bool wild = is_wildcard(ip);
    if (!wild) {
        bool ours = false;
        GidEntry e;
        for (int i = 0; hca_.device().query_gid(1, i, e) == Status::ok && !ours; ++i) {
            ours = e.gid == ip;
            if (ours) c.sgid_index = uint8_t(i);
        }
        if (!ours) return EADDRNOTAVAIL;  // no port of this device has it (Linux: cma_translate_addr)
    }
    if (port == 0) {  // an ephemeral port, as Linux hands them out
        for (int n = 0; n < 60999 - 32768 + 1 && !port; ++n) {
            const uint16_t p = next_port_;
            next_port_ = next_port_ >= 60999 ? 32768 : uint16_t(next_port_ + 1);
            if (port_free(c, p, wild, ip)) port = p;
        }
        if (!port) return EADDRNOTAVAIL;
    } else if (!port_free(c, port, wild, ip)) {
        return EADDRINUSE;
    }
    c.src = ip;
    c.sport = port;
    c.v6 = addr->sa_family == AF_INET6;
    c.bound = true;
    return 0;
}

int Agent::bind(uint32_t id, const sockaddr* addr) {
    Id* c = find(id);
    if (!c || !addr || c->state != CmState::idle || c->bound) return EINVAL;
    return bind_addr(*c, addr);
}

int Agent::resolve_addr(uint32_t id, const sockaddr* src, const sockaddr* dst, int timeout_ms) {
    Id* c = find(id);
    if (!c || !dst || (c->state != CmState::idle && c->state != CmState::addr_resolved)) return EINVAL;
    Gid d;
    uint16_t dport = 0;
    if (!from_sockaddr(dst, d, dport) || is_wildcard(d)) return EINVAL;
    Gid s;
    uint8_t idx = 0;
    if (int e = pick_sgid(d, s, idx)) return e;
    if (!c->bound) {
        if (src) {
            if (int e = bind_addr(*c, src)) return e;
        } else {
            const sockaddr_storage ss = to_sockaddr(s, 0, dst->sa_family == AF_INET6);
            if (int e = bind_addr(*c, reinterpret_cast<const sockaddr*>(&ss))) return e;
        }
    }
    if (is_wildcard(c->src)) c->src = s;
    c->sgid_index = idx;
    c->dst = d;
    c->dport = dport;
    c->v6 = dst->sa_family == AF_INET6;
    c->state = CmState::addr_query;
    c->resolve_deadline = hca_.now() + uint64_t(timeout_ms < 0 ? 0 : timeout_ms) * 1'000'000;
    if (hca_.resolve(d, c->dmac)) {
        c->state = CmState::addr_resolved;
        push(*c, api::CmEventType::addr_resolved, 0);
    }
    arm(hca_.now());  // poll() asks the neighbour table again
    return 0;
}

int Agent::resolve_route(uint32_t id, int timeout_ms) {
    (void)timeout_ms;
    Id* c = find(id);
    if (!c || c->state != CmState::addr_resolved) return EINVAL;
    // RoCE: the route is the neighbour and the port's MTU (Linux cma_resolve_iboe_route).
    PortAttr pa;
    hca_.device().query_port(1, pa);
    c->path_mtu = pa.active_mtu;
    c->route = true;
    c->state = CmState::route_resolved;
    push(*c, api::CmEventType::route_resolved, 0);
    return 0;
}

int Agent::query(uint32_t id, api::CmIdInfo& out) {
    Id* c = find(id);
    if (!c) return EINVAL;
    out = api::CmIdInfo{};
    out.src = to_sockaddr(c->src, c->sport, c->v6);
    out.dst = to_sockaddr(c->dst, c->dport, c->v6);
    out.sgid = c->src;
    out.dgid = c->dst;
    out.sgid_index = c->sgid_index;
    out.route_resolved = c->route;
    out.path_mtu = c->path_mtu;
    out.traffic_class = c->tos;
    std::memcpy(out.dmac, c->dmac.data(), 6);
    out.ps = c->ps;
    out.qp_type = c->qp_type;
    return 0;
}

int Agent::listen(uint32_t id, int backlog) {
    Id* c = find(id);
    if (!c) return EINVAL;
    if (c->state == CmState::listen) {  // rdma_listen again: a new backlog
        c->backlog = backlog;
        return 0;
    }
    if (c->state != CmState::idle) return EINVAL;
    if (!c->bound) {  // cma.c: an unbound listener takes the wildcard address and any port
        sockaddr_in6 any{};
        any.sin6_family = AF_INET6;
        if (int e = bind_addr(*c, reinterpret_cast<const sockaddr*>(&any))) return e;
    }
    for (auto& [k, o] : ids_)  // one listener per port space, port and address
        if (o.get() != c && o->state == CmState::listen && o->ps == c->ps && o->sport == c->sport &&
            (o->src == c->src || is_wildcard(o->src) || is_wildcard(c->src)))
            return EADDRINUSE;
    c->backlog = backlog;
    c->state = CmState::listen;
    return 0;
}

int Agent::set_option(uint32_t id, api::CmOption opt, uint32_t value) {
    Id* c = find(id);
    if (!c) return EINVAL;
    switch (opt) {
    case api::CmOption::tos: c->tos = uint8_t(value); return value > 255 ? EINVAL : 0;
    case api::CmOption::reuseaddr:
        if (c->bound) return EINVAL;
        c->reuseaddr = value != 0;
        return 0;
    case api::CmOption::afonly: return c->bound ? EINVAL : 0;
    case api::CmOption::ack_timeout:
        if (value > 31) return EINVAL;
        c->ack_timeout = uint8_t(value);
        return 0;
    }
    return EINVAL;
}

Agent::Id* Agent::listener_for(pkt::RdmaPs ps, uint16_t port, const Gid& dst) const {
    for (auto& [k, o] : ids_)
        if (o->state == CmState::listen && o->ps == ps && o->sport == port && (is_wildcard(o->src) || o->src == dst))
            return o.get();
    return nullptr;
}

// ---- events ------------------------------------------------------------------------------------

void Agent::push(Id& c, api::CmEventType t, int32_t status, const api::CmConnParam* p, uint32_t listen_id) {
    api::CmEvent ev;
    ev.type = t;
    ev.status = status;
    ev.id = c.id;
    ev.listen_id = listen_id;
    ev.context = c.context;
    if (p) ev.param = *p;
    events_.push_back(ev);
    ++c.events;
    const uint64_t one = 1;
    if (efd_ >= 0) (void)!::write(efd_, &one, sizeof one);
}

bool Agent::get_event(api::CmEvent& ev) {
    if (events_.empty()) return false;
    ev = events_.front();
    events_.pop_front();
    if (events_.empty() && efd_ >= 0) {
        uint64_t v;
        (void)!::read(efd_, &v, sizeof v);
    }
    return true;
}

// ---- sending -----------------------------------------------------------------------------------

void Agent::count(uint16_t attr, bool sent) {
    for (const auto& a : kAttrCounters)
        if (a.attr == attr) hca_.device().counters().add(sent ? a.sent : a.rcvd);
}

void Agent::send_to(const transport::GsiDest& d, const pkt::CmMad& m) {
    std::array<uint8_t, pkt::kMadLen> b;
    pkt::build_cm(m, b);
    if (hca_.send_mad(d, b)) count(pkt::kCmAttrs[m.msg.index()].id, true);
}

void Agent::send(Id& c, const pkt::CmMad& m, bool retry, uint64_t timeout_ns, uint8_t retries) {
    pkt::build_cm(m, c.last);
    c.dest.sgid = c.src;
    c.dest.dgid = c.dst;
    c.dest.dest_qp = pkt::kGsiQpn;
    c.dest.traffic_class = c.tos;
    c.dest.dmac = c.dest_mac_known ? &c.dest_mac : nullptr;
    if (hca_.send_mad(c.dest, c.last)) count(pkt::kCmAttrs[m.msg.index()].id, true);
    if (retry) {
        c.timeout_ns = timeout_ns;
        c.retries_left = retries;
        c.deadline = hca_.now() + timeout_ns;
        arm(c.deadline);
    }
}

void Agent::stop_timer(Id& c) {
    c.deadline = UINT64_MAX;
    c.retries_left = 0;
}

static pkt::MadHdr cm_hdr(uint64_t tid) {
    pkt::MadHdr h;
    h.tid = tid;
    return h;
}

void Agent::send_rej_to(const Recv& m, uint64_t tid, uint32_t local_comm, uint32_t remote_comm, uint8_t msg,
                        uint16_t reason, const uint8_t* pd, uint8_t len) {
    pkt::CmRej r;
    r.local_comm_id = local_comm;
    r.remote_comm_id = remote_comm;
    r.message_rejected = msg;
    r.reason = reason;
    if (pd) copy_pd<pkt::CmRej>(r.private_data, pd, len);
    const transport::GsiDest d{.sgid = m.dgid, .dgid = m.sgid, .dest_qp = m.src_qp, .pkey = m.pkey,
                               .traffic_class = m.traffic_class, .dmac = &m.smac};
    send_to(d, pkt::CmMad{cm_hdr(tid), r});
}

void Agent::send_rej(Id& c, uint8_t msg, uint16_t reason, const uint8_t* pd, uint8_t len) {
    pkt::CmRej r;
    r.local_comm_id = c.local_comm_id;
    r.remote_comm_id = c.remote_comm_id;
    r.message_rejected = msg;
    r.reason = reason;
    if (reason == pkt::rej_reason::timeout) {  // IBTA Table 109: ARI is the sender's CA GUID
        for (int i = 0; i < 8; ++i) r.ari[size_t(i)] = uint8_t(ca_guid_ >> (56 - 8 * i));
        r.rejected_info_length = 8;
    }
    if (pd) copy_pd<pkt::CmRej>(r.private_data, pd, len);
    send(c, pkt::CmMad{cm_hdr(c.tid), r}, false);
}

void Agent::send_dreq(Id& c) {
    pkt::CmDreq r;
    r.local_comm_id = c.local_comm_id;
    r.remote_comm_id = c.remote_comm_id;
    r.remote_qpn = c.remote_qpn;
    c.dreq_tid = uint64_t(1) << 32 | c.local_comm_id;  // cm.c's cm_form_tid: a new transaction
    // Retried as the REQ was (cm.c keeps the connection's timeout for the DREQ).
    send(c, pkt::CmMad{cm_hdr(c.dreq_tid), r}, true,
         2 * plt_ns() + pkt::cm_timeout_ns(c.remote_resp_timeout), c.max_cm_retries);
    c.state = CmState::dreq_sent;
}

void Agent::send_drep(Id& c, uint64_t tid) {
    pkt::CmDrep r;
    r.local_comm_id = c.local_comm_id;
    r.remote_comm_id = c.remote_comm_id;
    send(c, pkt::CmMad{cm_hdr(tid), r}, false);
}

// ---- consumer calls that send --------------------------------------------------------------------

// The private data of a REQ or SIDR_REQ: the CMA header (Annex A11.4), then the consumer's.
std::array<uint8_t, 216> Agent::cma_private(const Id& c, const api::CmConnParam& p) const {
    std::array<uint8_t, 216> pd{};
    const pkt::CmaHdr ch = pkt::is_ipv4_mapped(c.src)
                               ? pkt::cma_hdr_ipv4(pkt::ipv4_of_mapped(c.src), c.sport, pkt::ipv4_of_mapped(c.dst))
                               : pkt::cma_hdr_ipv6(c.src, c.sport, c.dst);
    pkt::build_cma_hdr(ch, std::span<uint8_t, pkt::kCmaHdrLen>(pd.data(), pkt::kCmaHdrLen));
    std::memcpy(pd.data() + pkt::kCmaHdrLen, p.private_data, std::min<size_t>(p.private_data_len, 216 - pkt::kCmaHdrLen));
    return pd;
}

// UD: a SIDR_REQ, retried as a REQ is (cm.c takes the timeout and retries from the consumer).
int Agent::connect_sidr(Id& c, const std::array<uint8_t, 216>& pd, uint64_t timeout) {
    pkt::CmSidrReq r;
    r.request_id = c.local_comm_id;
    r.pkey = pkt::kDefaultPkey;
    r.service_id = pkt::ip_service_id(c.ps, c.dport);
    std::memcpy(r.private_data.data(), pd.data(), r.private_data.size());
    c.sq_psn = random24();
    send(c, pkt::CmMad{cm_hdr(c.tid), r}, true, timeout, cfg_.max_cm_retries);
    c.state = CmState::sidr_req_sent;
    return 0;
}

int Agent::connect(uint32_t id, const api::CmConnParam& p) {
    Id* c = find(id);
    if (!c || c->state != CmState::route_resolved) return EINVAL;
    const size_t max_pd = (c->qp_type == QpType::ud ? 216 : 92) - pkt::kCmaHdrLen;
    if (p.private_data_len > max_pd) return EINVAL;
    const auto pd = cma_private(*c, p);
    // Never 0 (a REJ to a REQ carries 0), and distinct: `| 1` after the XOR made each even sequence
    // number and the next one the same ID (the second REQ was taken for a duplicate of the first).
    c->local_comm_id = ((++comm_seq_ << 1) ^ comm_xor_) | 1;
    c->tid = uint64_t(1) << 32 | c->local_comm_id;      // cm.c's cm_form_tid
    c->local_qpn = p.qp_num & 0xFFFFFF;
    c->dest_mac = c->dmac;
    c->dest_mac_known = true;
    c->dest.pkey = pkt::kDefaultPkey;
    c->remote_resp_timeout = cfg_.cm_response_timeout;
    c->max_cm_retries = cfg_.max_cm_retries;
    const uint64_t to = 2 * plt_ns() + pkt::cm_timeout_ns(cfg_.cm_response_timeout);  // cm.c: REQ's timeout_ms
    if (c->qp_type == QpType::ud) return connect_sidr(*c, pd, to);
    if (p.responder_resources > hca_.device().query_device().max_qp_rd_atom ||
        p.initiator_depth > hca_.device().query_device().max_qp_init_rd_atom)
        return EINVAL;
    // Starting PSN in a REQ or REP: the PSN its sender expects to receive. Linux's cm.c puts its
    // own receive PSN there and sends from the peer's (tests/data/cm_rxe: rxe's active side sends
    // at the REP's PSN, its passive side at the REQ's). cma.c: the CM's choice (id_priv->seq_num).
    c->rq_psn = random24();
    c->responder_resources = p.responder_resources;
    c->initiator_depth = p.initiator_depth;
    c->retry_count = std::min<uint8_t>(p.retry_count, 7);
    c->rnr_retry_count = std::min<uint8_t>(p.rnr_retry_count, 7);
    c->local_ack_timeout = c->ack_timeout ? c->ack_timeout
                                          : ack_timeout(hca_.device().query_device().local_ca_ack_delay,
                                                        cfg_.packet_life_time);
    pkt::CmReq r;
    r.local_comm_id = c->local_comm_id;
    r.service_id = pkt::ip_service_id(c->ps, c->dport);
    r.local_ca_guid = ca_guid_;
    r.local_qpn = c->local_qpn;
    r.responder_resources = p.responder_resources;
    r.initiator_depth = p.initiator_depth;
    r.remote_cm_response_timeout = cfg_.cm_response_timeout;
    r.transport_service_type = uint8_t(pkt::CmTransport::rc);
    r.end_to_end_flow_control = p.flow_control ? 1 : 0;
    r.starting_psn = c->rq_psn;
    r.local_cm_response_timeout = cfg_.cm_response_timeout;
    r.retry_count = c->retry_count;
    r.pkey = pkt::kDefaultPkey;
    r.path_mtu = uint8_t(c->path_mtu);
    r.rnr_retry_count = c->rnr_retry_count;
    r.max_cm_retries = cfg_.max_cm_retries;
    r.srq = p.srq ? 1 : 0;
    // RoCE: no LIDs, the permissive LID in both (cm.c); the GIDs are the IP addresses.
    r.primary.local_lid = 0xFFFF;
    r.primary.remote_lid = 0xFFFF;
    r.primary.local_gid = c->src;
    r.primary.remote_gid = c->dst;
    r.primary.packet_rate = 3;  // IBTA 9.10 rate code: 10 Gb/s
    r.primary.traffic_class = c->tos;
    r.primary.hop_limit = 64;
    r.primary.local_ack_timeout = c->local_ack_timeout;
    std::memcpy(r.private_data.data(), pd.data(), r.private_data.size());
    send(*c, pkt::CmMad{cm_hdr(c->tid), r}, true, to, cfg_.max_cm_retries);
    c->state = CmState::req_sent;
    return 0;
}

int Agent::accept(uint32_t id, const api::CmConnParam& p) {
    Id* c = find(id);
    if (!c) return EINVAL;
    if (c->state == CmState::sidr_req_rcvd) {
        if (p.private_data_len > 136) return EINVAL;
        pkt::CmSidrRep r;
        r.request_id = c->remote_comm_id;
        r.status = uint8_t(pkt::CmSidrStatus::success);
        r.qpn = p.qp_num & 0xFFFFFF;
        r.service_id = pkt::ip_service_id(c->ps, c->sport);
        r.qkey = p.qkey ? p.qkey : cfg_.udp_qkey;
        copy_pd<pkt::CmSidrRep>(r.private_data, p.private_data, p.private_data_len);
        send(*c, pkt::CmMad{cm_hdr(c->tid), r}, false);
        c->local_qpn = r.qpn;
        c->state = CmState::idle;  // cm.c: a SIDR exchange leaves the id idle
        return 0;
    }
    if (c->state != CmState::req_rcvd && c->state != CmState::mra_req_sent) return EINVAL;
    if (p.private_data_len > 196) return EINVAL;
    c->local_qpn = p.qp_num & 0xFFFFFF;
    c->responder_resources = p.responder_resources;
    c->initiator_depth = p.initiator_depth;
    c->rnr_retry_count = std::min<uint8_t>(p.rnr_retry_count, 7);
    pkt::CmRep r;
    r.local_comm_id = c->local_comm_id;
    r.remote_comm_id = c->remote_comm_id;
    r.local_qpn = c->local_qpn;
    r.starting_psn = c->rq_psn;
    r.responder_resources = p.responder_resources;
    r.initiator_depth = p.initiator_depth;
    r.target_ack_delay = hca_.device().query_device().local_ca_ack_delay;
    r.end_to_end_flow_control = p.flow_control ? 1 : 0;
    r.rnr_retry_count = c->rnr_retry_count;
    r.srq = p.srq ? 1 : 0;
    r.local_ca_guid = ca_guid_;
    copy_pd<pkt::CmRep>(r.private_data, p.private_data, p.private_data_len);
    // Retried until the RTU, every Local CM Response Timeout of the REQ (cm.c), max CM retries times.
    send(*c, pkt::CmMad{cm_hdr(c->tid), r}, true, pkt::cm_timeout_ns(c->peer_resp_timeout), c->max_cm_retries);
    c->state = CmState::rep_sent;
    return 0;
}

int Agent::reject(uint32_t id, const uint8_t* pd, uint8_t len) {
    Id* c = find(id);
    if (!c || (len && !pd)) return EINVAL;
    if (c->state == CmState::sidr_req_rcvd) {
        if (len > 136) return EINVAL;
        pkt::CmSidrRep r;
        r.request_id = c->remote_comm_id;
        r.status = uint8_t(pkt::CmSidrStatus::reject);
        r.service_id = pkt::ip_service_id(c->ps, c->sport);
        if (pd) copy_pd<pkt::CmSidrRep>(r.private_data, pd, len);
        send(*c, pkt::CmMad{cm_hdr(c->tid), r}, false);
        c->state = CmState::idle;
        return 0;
    }
    if (len > 148) return EINVAL;
    const bool req = c->state == CmState::req_rcvd || c->state == CmState::mra_req_sent;
    if (!req && c->state != CmState::rep_rcvd) return EINVAL;
    send_rej(*c, req ? 0 : 1, pkt::rej_reason::consumer_defined, pd, len);
    stop_timer(*c);
    c->state = CmState::idle;
    return 0;
}

int Agent::establish(uint32_t id) {
    Id* c = find(id);
    if (!c || c->state != CmState::rep_rcvd) return EINVAL;
    pkt::CmRtu r;
    r.local_comm_id = c->local_comm_id;
    r.remote_comm_id = c->remote_comm_id;
    send(*c, pkt::CmMad{cm_hdr(c->tid), r}, false);
    c->state = CmState::established;  // no event: librdmacm reports ESTABLISHED itself (as the kernel)
    return 0;
}

int Agent::disconnect(uint32_t id) {
    Id* c = find(id);
    if (!c) return EINVAL;
    switch (c->state) {
    case CmState::established:
    case CmState::rep_sent:
        stop_timer(*c);
        send_dreq(*c);
        return 0;
    case CmState::dreq_rcvd:
        send_drep(*c, c->dreq_tid);
        enter_timewait(*c);
        return 0;
    case CmState::rep_rcvd: case CmState::req_sent: case CmState::mra_req_rcvd:
        // cma.c: rdma_disconnect before the connection exists rejects it.
        stop_timer(*c);
        send_rej(*c, c->state == CmState::rep_rcvd ? 1 : 2, pkt::rej_reason::consumer_defined);
        c->state = CmState::idle;
        return 0;
    default: return EINVAL;
    }
}

int Agent::destroy_id(uint32_t id, uint32_t& events_reported) {
    Id* c = find(id);
    if (!c) return EINVAL;
    switch (c->state) {  // leave the connection as IBTA 12.9 says for each state (cm.c's destroy)
    case CmState::req_sent:
    case CmState::mra_req_rcvd: send_rej(*c, 0, pkt::rej_reason::timeout); break;
    case CmState::req_rcvd:
    case CmState::mra_req_sent: send_rej(*c, 0, pkt::rej_reason::consumer_defined); break;
    case CmState::rep_sent:
    case CmState::rep_rcvd: send_rej(*c, 1, pkt::rej_reason::consumer_defined); break;
    case CmState::established: send_dreq(*c); break;
    case CmState::dreq_rcvd: send_drep(*c, c->dreq_tid); break;
    default: break;
    }
    events_reported = c->events;
    events_.erase(std::remove_if(events_.begin(), events_.end(), [&](const api::CmEvent& e) { return e.id == id; }),
                  events_.end());
    ids_.erase(id);
    return 0;
}

// ---- init_qp_attr: what cma.c / cm.c compute for each state ---------------------------------------

int Agent::init_qp_attr(uint32_t id, QpState state, QpAttr& a, uint32_t& mask) {
    Id* c = find(id);
    if (!c) return EINVAL;
    a = QpAttr{};
    a.qp_state = state;
    const bool connected = c->local_comm_id != 0 || c->state == CmState::req_rcvd || c->state == CmState::mra_req_sent;
    if (c->qp_type == QpType::ud) {  // cma_ib_init_qp_attr: UD
        switch (state) {
        case QpState::init:
            a.pkey_index = 0;
            a.port_num = 1;
            a.qkey = cfg_.udp_qkey;  // RDMA_PS_UDP's Q_Key
            mask = qp_attr::state | qp_attr::pkey_index | qp_attr::port | qp_attr::qkey;
            return 0;
        case QpState::rtr: mask = qp_attr::state; return 0;
        case QpState::rts:
            a.sq_psn = c->sq_psn;
            mask = qp_attr::state | qp_attr::sq_psn;
            return 0;
        default: return EINVAL;
        }
    }
    switch (state) {
    case QpState::init:  // cm_init_qp_init_attr; before a connection cma_ib_init_qp_attr: no remote access
        a.pkey_index = 0;
        a.port_num = 1;
        a.qp_access_flags = connected ? access::remote_write | (c->responder_resources
                                                                     ? access::remote_read | access::remote_atomic
                                                                     : 0)
                                      : 0;
        mask = qp_attr::state | qp_attr::access_flags | qp_attr::pkey_index | qp_attr::port;
        return 0;
    case QpState::rtr:  // cm_init_qp_rtr_attr
        if (!connected || !c->remote_qpn) return EINVAL;
        a.ah_attr.dgid = c->dst;
        a.ah_attr.sgid_index = c->sgid_index;
        a.ah_attr.hop_limit = 64;
        a.ah_attr.traffic_class = c->tos;
        a.ah_attr.port_num = 1;
        a.path_mtu = c->path_mtu;
        a.dest_qp_num = c->remote_qpn;
        a.rq_psn = c->rq_psn;
        a.max_dest_rd_atomic = c->responder_resources;
        a.min_rnr_timer = 0;
        mask = qp_attr::state | qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn |
               qp_attr::max_dest_rd_atomic | qp_attr::min_rnr_timer;
        return 0;
    case QpState::rts:  // cm_init_qp_rts_attr
        if (!connected || !c->remote_qpn) return EINVAL;
        a.sq_psn = c->sq_psn;
        a.timeout = c->local_ack_timeout;
        a.retry_cnt = c->retry_count;
        a.rnr_retry = c->rnr_retry_count;
        a.max_rd_atomic = c->initiator_depth;
        mask = qp_attr::state | qp_attr::sq_psn | qp_attr::timeout | qp_attr::retry_cnt | qp_attr::rnr_retry |
               qp_attr::max_qp_rd_atomic;
        return 0;
    default: return EINVAL;
    }
}

// ---- receiving ---------------------------------------------------------------------------------

void Agent::on_mad(void* ctx, const Recv& m) { static_cast<Agent*>(ctx)->receive(m); }

bool Agent::takes(const Id& c, uint16_t attr) {
    for (const auto& t : kTakes)
        if (t.attr == attr && (t.states & bit(c.state))) return true;
    hca_.device().counters().add(Counter::cm_rx_wrong_state);
    return false;
}

void Agent::receive(const Recv& m) {
    pkt::CmMad mad;
    if (pkt::parse_cm(m.mad, mad) != pkt::MadError::ok) {
        hca_.device().counters().add(Counter::cm_rx_invalid);
        // A REQ of another class version gets REJ 31 (IBTA 12.6.7.2; cm.c answers the same).
        pkt::MadHdr h;
        if (pkt::parse_mad_hdr(m.mad, h) == pkt::MadError::ok && h.attr_id == pkt::cm_attr::req &&
            h.class_version != pkt::kCmClassVersion && h.method == pkt::mad_method::send)
            send_rej_to(m, h.tid, 0, uint32_t(m.mad[24]) << 24 | uint32_t(m.mad[25]) << 16 | uint32_t(m.mad[26]) << 8 | m.mad[27],
                        0, pkt::rej_reason::invalid_class_version, nullptr, 0);
        return;
    }
    count(mad.hdr.attr_id, false);
    std::visit(
        [&](const auto& r) {
            using T = std::decay_t<decltype(r)>;
            if constexpr (std::is_same_v<T, pkt::CmReq>) rx_req(m, mad.hdr, r);
            else if constexpr (std::is_same_v<T, pkt::CmMra>) rx_mra(r);
            else if constexpr (std::is_same_v<T, pkt::CmRej>) rx_rej(r);
            else if constexpr (std::is_same_v<T, pkt::CmRep>) rx_rep(mad.hdr, r);
            else if constexpr (std::is_same_v<T, pkt::CmRtu>) rx_rtu(r);
            else if constexpr (std::is_same_v<T, pkt::CmDreq>) rx_dreq(m, mad.hdr, r);
            else if constexpr (std::is_same_v<T, pkt::CmDrep>) rx_drep(r);
            else if constexpr (std::is_same_v<T, pkt::CmSidrReq>) rx_sidr_req(m, mad.hdr, r);
            else if constexpr (std::is_same_v<T, pkt::CmSidrRep>) rx_sidr_rep(r);
            else hca_.device().counters().add(Counter::cm_rx_unmatched);  // a ClassPortInfo GetResp we never asked for
        },
        mad.msg);
}

// A new id for a REQ or SIDR_REQ a listener took: our address is the one the MAD came to, the
// peer's the sender's (its port from the CMA header); answers go back to its MAC and P_Key.
Agent::Id& Agent::passive_id(const Id& l, const Recv& m, const pkt::CmaHdr& ch, CmState st) {
    Id& c = new_id(l.ps, l.qp_type, l.context);
    c.listen_id = l.id;
    c.state = st;
    c.bound = true;
    c.v6 = ch.ip_version == 6;
    c.src = m.dgid;
    c.sport = l.sport;
    c.dst = m.sgid;
    c.dport = ch.src_port;
    c.dmac = c.dest_mac = m.smac;
    c.dest_mac_known = true;
    c.dest.pkey = m.pkey;
    c.route = true;
    GidEntry e;
    for (int i = 0; hca_.device().query_gid(1, i, e) == Status::ok; ++i)
        if (e.gid == c.src) c.sgid_index = uint8_t(i);
    return c;
}

// REQ (IBTA 12.6.5, 12.9.5): a duplicate, a stale connection, no listener, or a new passive id.
void Agent::rx_req(const Recv& m, const pkt::MadHdr& h, const pkt::CmReq& r) {
    Counters& cn = hca_.device().counters();
    for (auto& [k, o] : ids_)
        if (o->remote_comm_id == r.local_comm_id && o->remote_ca_guid == r.local_ca_guid && o->listen_id) {
            rx_dup_req(*o, m);
            return;
        }
    // The peer's QP is still connected to one of ours: REJ stale connection (IBTA 12.4.2; cm.c's
    // cm_insert_remote_qpn), and the old connection is left (DREQ) as the spec says.
    for (auto& [k, o] : ids_)
        if (o->remote_qpn == r.local_qpn && o->dst == r.primary.local_gid &&
            (o->state == CmState::established || o->state == CmState::rep_sent || o->state == CmState::rep_rcvd)) {
            cn.add(Counter::cm_stale_conn);
            send_rej_to(m, h.tid, 0, r.local_comm_id, 0, pkt::rej_reason::stale_conn, nullptr, 0);
            if (o->state == CmState::established) {
                send_dreq(*o);
                push(*o, api::CmEventType::disconnected, 0);
            }
            return;
        }
    pkt::CmaHdr ch;
    const auto ps = pkt::RdmaPs(pkt::service_id_ps(r.service_id));
    const bool ip_sid = pkt::is_ip_service_id(r.service_id) && ps == pkt::RdmaPs::tcp;
    Id* l = nullptr;
    if (ip_sid && pkt::parse_cma_hdr(r.private_data, ch) == pkt::MadError::ok) {
        const Gid dst = ch.ip_version == 4 ? pkt::ipv4_mapped_gid(ch.dst_ip4()) : ch.dst_ip;
        l = listener_for(ps, pkt::service_id_port(r.service_id), dst);
    }
    if (!l) {  // nobody listens on that Service ID (cm.c: REJ 8, Local Comm ID 0)
        send_rej_to(m, h.tid, 0, r.local_comm_id, 0, pkt::rej_reason::invalid_service_id, nullptr, 0);
        return;
    }
    if (r.transport_service_type != uint8_t(pkt::CmTransport::rc)) {
        send_rej_to(m, h.tid, 0, r.local_comm_id, 0, pkt::rej_reason::invalid_transport_type, nullptr, 0);
        return;
    }
    Id& c = passive_id(*l, m, ch, CmState::req_rcvd);
    c.tos = r.primary.traffic_class;
    c.local_comm_id = ((++comm_seq_ << 1) ^ comm_xor_) | 1;  // as the active side's
    c.remote_comm_id = r.local_comm_id;
    c.remote_ca_guid = r.local_ca_guid;
    c.remote_qpn = r.local_qpn;
    c.sq_psn = r.starting_psn;  // the PSN the active side expects (see connect)
    // The passive side's starting PSN exists from the REQ on: librdmacm's rdma_accept moves the
    // QP to RTR and RTS (init_qp_attr) before the accept that sends the REP (cma.c: seq_num).
    c.rq_psn = random24();
    c.responder_resources = r.initiator_depth;  // cm.c: until the REP says otherwise
    c.initiator_depth = r.responder_resources;
    c.tid = h.tid;
    c.path_mtu = Mtu(std::clamp<uint8_t>(r.path_mtu, 1, 5));
    c.retry_count = r.retry_count;
    c.rnr_retry_count = r.rnr_retry_count;
    c.local_ack_timeout = r.primary.local_ack_timeout;
    c.peer_resp_timeout = r.local_cm_response_timeout;
    c.remote_resp_timeout = r.remote_cm_response_timeout;
    c.max_cm_retries = r.max_cm_retries;
    // What the consumer sees, from its own side (cm.c swaps the REQ's two depths).
    api::CmConnParam p;
    p.private_data_len = uint8_t(r.private_data.size() - pkt::kCmaHdrLen);
    std::memcpy(p.private_data, r.private_data.data() + pkt::kCmaHdrLen, p.private_data_len);
    p.responder_resources = r.initiator_depth;
    p.initiator_depth = r.responder_resources;
    p.flow_control = r.end_to_end_flow_control;
    p.retry_count = r.retry_count;
    p.rnr_retry_count = r.rnr_retry_count;
    p.srq = r.srq;
    p.qp_num = r.local_qpn;
    push(c, api::CmEventType::connect_request, 0, &p, l->id);
}

// A REQ seen before (IBTA 12.9.6; cm.c's cm_dup_req_handler): MRA while the consumer decides, the
// REP again once sent, REJ stale connection in TimeWait; else dropped.
void Agent::rx_dup_req(Id& c, const Recv& m) {
    Counters& cn = hca_.device().counters();
    cn.add(Counter::cm_duplicates);
    switch (c.state) {
    case CmState::req_rcvd:
    case CmState::mra_req_sent: {
        pkt::CmMra r;
        r.local_comm_id = c.local_comm_id;
        r.remote_comm_id = c.remote_comm_id;
        r.message_mraed = 0;  // REQ
        r.service_timeout = cfg_.mra_service_timeout;
        send(c, pkt::CmMad{cm_hdr(c.tid), r}, false);
        c.state = CmState::mra_req_sent;
        return;
    }
    case CmState::rep_sent:
        if (hca_.send_mad(c.dest, c.last)) count(pkt::cm_attr::rep, true);
        return;
    case CmState::timewait:
        cn.add(Counter::cm_stale_conn);
        send_rej_to(m, c.tid, c.local_comm_id, c.remote_comm_id, 0, pkt::rej_reason::stale_conn, nullptr, 0);
        return;
    default: return;
    }
}

void Agent::rx_mra(const pkt::CmMra& r) {
    Id* c = by_comm_id(r.remote_comm_id);
    if (!c) {
        hca_.device().counters().add(Counter::cm_rx_unmatched);
        return;
    }
    if (!takes(*c, pkt::cm_attr::mra)) return;
    const bool for_req = r.message_mraed == 0 && (c->state == CmState::req_sent || c->state == CmState::mra_req_rcvd);
    const bool for_rep = r.message_mraed == 1 && c->state == CmState::rep_sent;
    if (!for_req && !for_rep) {
        hca_.device().counters().add(Counter::cm_rx_wrong_state);
        return;
    }
    // IBTA 12.6.6: the sender waits Service Timeout + the packet lifetime more, resending no more.
    c->retries_left = 0;
    c->deadline = hca_.now() + pkt::cm_timeout_ns(r.service_timeout) + plt_ns();
    arm(c->deadline);
    if (for_req) c->state = CmState::mra_req_rcvd;
}

void Agent::rx_rej(const pkt::CmRej& r) {
    Id* c = by_comm_id(r.remote_comm_id);
    if (!c || (r.local_comm_id && c->remote_comm_id && r.local_comm_id != c->remote_comm_id)) {
        hca_.device().counters().add(Counter::cm_rx_unmatched);
        return;
    }
    if (!takes(*c, pkt::cm_attr::rej)) return;
    stop_timer(*c);
    c->state = CmState::idle;
    api::CmConnParam p;
    p.private_data_len = uint8_t(r.private_data.size());
    std::memcpy(p.private_data, r.private_data.data(), p.private_data_len);
    push(*c, api::CmEventType::rejected, int32_t(r.reason), &p);  // cma.c: status = the reason
}

void Agent::rx_rep(const pkt::MadHdr& h, const pkt::CmRep& r) {
    Id* c = by_comm_id(r.remote_comm_id);
    if (!c) {
        hca_.device().counters().add(Counter::cm_rx_unmatched);
        return;
    }
    if (!c->listen_id && (c->state == CmState::established || c->state == CmState::rep_rcvd)) {
        // Duplicate REP (IBTA 12.9.6, cm.c's cm_dup_rep_handler): the RTU again once sent.
        hca_.device().counters().add(Counter::cm_duplicates);
        if (c->state == CmState::established && c->remote_comm_id == r.local_comm_id) {
            pkt::CmRtu u;
            u.local_comm_id = c->local_comm_id;
            u.remote_comm_id = c->remote_comm_id;
            send(*c, pkt::CmMad{cm_hdr(c->tid), u}, false);
        }
        return;
    }
    if (!takes(*c, pkt::cm_attr::rep)) return;
    if (h.tid != c->tid) {  // a REP answers our REQ's transaction
        hca_.device().counters().add(Counter::cm_rx_unmatched);
        return;
    }
    stop_timer(*c);
    c->remote_comm_id = r.local_comm_id;
    c->remote_ca_guid = r.local_ca_guid;
    c->remote_qpn = r.local_qpn;
    c->sq_psn = r.starting_psn;
    c->rnr_retry_count = std::min(c->rnr_retry_count, r.rnr_retry_count);
    // Our READ depth is at most what the peer's responder takes (cm.c swaps the REP's depths).
    c->initiator_depth = std::min(c->initiator_depth, r.responder_resources);
    c->responder_resources = std::min(c->responder_resources, r.initiator_depth);
    c->state = CmState::rep_rcvd;
    api::CmConnParam p;
    p.private_data_len = uint8_t(r.private_data.size());
    std::memcpy(p.private_data, r.private_data.data(), p.private_data_len);
    p.responder_resources = r.initiator_depth;
    p.initiator_depth = r.responder_resources;
    p.flow_control = r.end_to_end_flow_control;
    p.rnr_retry_count = r.rnr_retry_count;
    p.srq = r.srq;
    p.qp_num = r.local_qpn;
    push(*c, api::CmEventType::connect_response, 0, &p);
}

void Agent::rx_rtu(const pkt::CmRtu& r) {
    Id* c = by_comm_id(r.remote_comm_id);
    if (!c || c->remote_comm_id != r.local_comm_id) {
        hca_.device().counters().add(Counter::cm_rx_unmatched);
        return;
    }
    if (c->state == CmState::established) {  // a duplicate RTU: nothing to answer
        hca_.device().counters().add(Counter::cm_duplicates);
        return;
    }
    if (!takes(*c, pkt::cm_attr::rtu)) return;
    stop_timer(*c);
    c->state = CmState::established;
    api::CmConnParam p;
    p.private_data_len = uint8_t(r.private_data.size());
    std::memcpy(p.private_data, r.private_data.data(), p.private_data_len);
    p.qp_num = c->remote_qpn;
    push(*c, api::CmEventType::established, 0, &p);
}

void Agent::rx_dreq(const Recv& m, const pkt::MadHdr& h, const pkt::CmDreq& r) {
    Id* c = by_comm_id(r.remote_comm_id);
    if (!c || c->remote_comm_id != r.local_comm_id) {
        // No such connection: DREP anyway, so that the peer does not retry (IBTA 12.9.7; cm.c
        // answers an unknown DREQ the same way).
        hca_.device().counters().add(Counter::cm_rx_unmatched);
        pkt::CmDrep d;
        d.local_comm_id = r.remote_comm_id;
        d.remote_comm_id = r.local_comm_id;
        const transport::GsiDest dst{.sgid = m.dgid, .dgid = m.sgid, .dest_qp = m.src_qp, .pkey = m.pkey,
                                     .traffic_class = m.traffic_class, .dmac = &m.smac};
        send_to(dst, pkt::CmMad{cm_hdr(h.tid), d});
        return;
    }
    if (c->state == CmState::timewait) {  // a duplicate DREQ: the DREP again (IBTA 12.9.6)
        hca_.device().counters().add(Counter::cm_duplicates);
        send_drep(*c, h.tid);
        return;
    }
    if (c->state == CmState::dreq_rcvd) {  // the consumer has not answered yet
        hca_.device().counters().add(Counter::cm_duplicates);
        return;
    }
    if (!takes(*c, pkt::cm_attr::dreq)) return;
    stop_timer(*c);
    c->dreq_tid = h.tid;
    if (c->state == CmState::dreq_sent) {  // both sides disconnect at once: answer, then TimeWait
        send_drep(*c, h.tid);
        enter_timewait(*c);
        push(*c, api::CmEventType::disconnected, 0);
        return;
    }
    c->state = CmState::dreq_rcvd;
    push(*c, api::CmEventType::disconnected, 0);
}

void Agent::rx_drep(const pkt::CmDrep& r) {
    Id* c = by_comm_id(r.remote_comm_id);
    if (!c || c->remote_comm_id != r.local_comm_id) {
        hca_.device().counters().add(Counter::cm_rx_unmatched);
        return;
    }
    if (c->state == CmState::timewait) {  // both sides sent a DREQ: the peer's DREP to ours, dropped
        hca_.device().counters().add(Counter::cm_duplicates);
        return;
    }
    if (!takes(*c, pkt::cm_attr::drep)) return;
    stop_timer(*c);
    enter_timewait(*c);
    push(*c, api::CmEventType::disconnected, 0);
}

void Agent::rx_sidr_req(const Recv& m, const pkt::MadHdr& h, const pkt::CmSidrReq& r) {
    for (auto& [k, o] : ids_)  // a duplicate while the consumer decides: dropped (cm.c)
        if (o->state == CmState::sidr_req_rcvd && o->remote_comm_id == r.request_id && o->dst == m.sgid) {
            hca_.device().counters().add(Counter::cm_duplicates);
            return;
        }
    pkt::CmaHdr ch;
    const auto ps = pkt::RdmaPs(pkt::service_id_ps(r.service_id));
    Id* l = nullptr;
    if (pkt::is_ip_service_id(r.service_id) && ps == pkt::RdmaPs::udp &&
        pkt::parse_cma_hdr(r.private_data, ch) == pkt::MadError::ok)
        l = listener_for(ps, pkt::service_id_port(r.service_id), ch.ip_version == 4 ? pkt::ipv4_mapped_gid(ch.dst_ip4()) : ch.dst_ip);
    if (!l) {  // cm.c: SIDR_REP status "unsupported" (no such service)
        pkt::CmSidrRep s;
        s.request_id = r.request_id;
        s.status = uint8_t(pkt::CmSidrStatus::unsupported);
        s.service_id = r.service_id;
        const transport::GsiDest d{.sgid = m.dgid, .dgid = m.sgid, .dest_qp = m.src_qp, .pkey = m.pkey,
                                   .traffic_class = m.traffic_class, .dmac = &m.smac};
        send_to(d, pkt::CmMad{cm_hdr(h.tid), s});
        return;
    }
    Id& c = passive_id(*l, m, ch, CmState::sidr_req_rcvd);
    c.remote_comm_id = r.request_id;
    c.tid = h.tid;
    api::CmConnParam p;
    p.private_data_len = uint8_t(r.private_data.size() - pkt::kCmaHdrLen);
    std::memcpy(p.private_data, r.private_data.data() + pkt::kCmaHdrLen, p.private_data_len);
    p.ah.dgid = m.sgid;
    p.ah.sgid_index = c.sgid_index;
    p.ah.traffic_class = m.traffic_class;
    push(c, api::CmEventType::connect_request, 0, &p, l->id);
}

void Agent::rx_sidr_rep(const pkt::CmSidrRep& r) {
    Id* c = by_comm_id(r.request_id);
    if (!c) {
        hca_.device().counters().add(Counter::cm_rx_unmatched);
        return;
    }
    if (!takes(*c, pkt::cm_attr::sidr_rep)) return;
    stop_timer(*c);
    c->state = CmState::idle;
    api::CmConnParam p;
    p.private_data_len = uint8_t(r.private_data.size());
    std::memcpy(p.private_data, r.private_data.data(), p.private_data_len);
    if (r.status != uint8_t(pkt::CmSidrStatus::success)) {  // cma.c: UNREACHABLE with the status
        push(*c, api::CmEventType::unreachable, int32_t(r.status), &p);
        return;
    }
    c->remote_qpn = r.qpn;
    c->qkey = r.qkey;
    p.qp_num = r.qpn;
    p.qkey = r.qkey;
    p.ah.dgid = c->dst;
    p.ah.sgid_index = c->sgid_index;
    p.ah.traffic_class = c->tos;
    push(*c, api::CmEventType::established, 0, &p);
}

// ---- timers ------------------------------------------------------------------------------------

void Agent::enter_timewait(Id& c) {
    // IBTA 12.9.7: long enough for the peer's packets in flight to die (cm.c: the path's
    // lifetime + the CA's ACK delay).
    c.state = CmState::timewait;
    c.retries_left = 0;
    c.deadline = hca_.now() + 2 * plt_ns() + pkt::cm_timeout_ns(hca_.device().query_device().local_ca_ack_delay);
    arm(c.deadline);
}

void Agent::timeout(Id& c) {
    Counters& cn = hca_.device().counters();
    if (c.retries_left > 0 && c.state != CmState::timewait && c.state != CmState::mra_req_rcvd) {
        --c.retries_left;
        cn.add(Counter::cm_retries);
        if (hca_.send_mad(c.dest, c.last)) count(uint16_t(c.last[16] << 8 | c.last[17]), true);
        c.deadline = hca_.now() + c.timeout_ns;
        arm(c.deadline);
        return;
    }
    c.deadline = UINT64_MAX;
    switch (c.state) {
    case CmState::req_sent:
    case CmState::mra_req_rcvd:
    case CmState::rep_sent:
    case CmState::sidr_req_sent:
        cn.add(Counter::cm_timeouts);
        c.state = CmState::idle;
        push(c, api::CmEventType::unreachable, -ETIMEDOUT);  // cma.c: REQ/REP error
        return;
    case CmState::dreq_sent:
        cn.add(Counter::cm_timeouts);
        enter_timewait(c);
        push(c, api::CmEventType::disconnected, -ETIMEDOUT);
        return;
    case CmState::timewait:
        c.state = CmState::idle;
        c.local_comm_id = 0;
        push(c, api::CmEventType::timewait_exit, 0);
        return;
    default: return;
    }
}

void Agent::poll() {
    if (next_check_ == UINT64_MAX) return;  // nothing due: no clock read on an idle turn
    const uint64_t now = hca_.now();
    if (now < next_check_) return;
    next_check_ = UINT64_MAX;
    for (auto& [k, c] : ids_) {
        if (c->state == CmState::addr_query) {
            if (hca_.resolve(c->dst, c->dmac)) {
                c->state = CmState::addr_resolved;
                push(*c, api::CmEventType::addr_resolved, 0);
            } else if (now >= c->resolve_deadline) {
                c->state = CmState::idle;
                push(*c, api::CmEventType::addr_error, -ETIMEDOUT);
            }
        }
        if (c->deadline <= now) timeout(*c);
    }
    // The next look: the earliest deadline, and soon again while an ARP/ND answer is awaited.
    next_check_ = next_deadline_ns();
    for (auto& [k, c] : ids_)
        if (c->state == CmState::addr_query) next_check_ = std::min(next_check_, now + 100'000);
}

uint64_t Agent::next_deadline_ns() const {
    uint64_t d = UINT64_MAX;
    for (auto& [k, c] : ids_) {
        d = std::min(d, c->deadline);
        if (c->state == CmState::addr_query) d = std::min(d, c->resolve_deadline);
    }
    return d;
}

}  // namespace hcaemu::cm
