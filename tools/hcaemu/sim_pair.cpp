#include "tools/hcaemu/sim_pair.hpp"

#include <algorithm>

namespace hcaemu::tools {

namespace {

constexpr uint32_t kIp[2] = {0xC6120001, 0xC6120002};  // 198.18.0.1, 198.18.0.2

}  // namespace

void SimPair::build_side(Side& s, port::Port& port, const port::Clock& clock, const SimConfig& c, int index,
                         const pkt::Mac& peer_mac) {
    PortConfig pc;
    pc.mac = port.mac();
    pc.ipv4[0] = kIp[index];
    pc.link_mtu = port.mtu();
    pc.max_msg_sz = c.max_msg_sz;
    pc.pkeys = c.pkeys;
    pc.ipv6[0] = c.ipv6[index];
    DeviceAttr da;
    da.max_sge = std::max(da.max_sge, c.max_sge);
    s.dev = std::make_unique<Device>(da, pc);
    s.hca = std::make_unique<transport::Hca>(*s.dev, port, clock, c.hca);
    s.hca->set_neighbor(pkt::ipv4_mapped_gid(kIp[1 - index]), peer_mac);
    if (c.ipv6[1 - index] != Gid{}) s.hca->set_neighbor(c.ipv6[1 - index], peer_mac);
    s.gid = pkt::ipv4_mapped_gid(kIp[index]);
    s.pd = std::move(s.dev->alloc_pd().value);
    s.mem.assign(c.mem_bytes, 0);
    const uint32_t acc = access::local_write | access::remote_write | access::remote_read | access::remote_atomic;
    s.mr = std::move((c.mr_iova[index] ? s.dev->reg_mr(s.pd, s.mem.data(), s.mem.size(), c.mr_iova[index], acc)
                                       : s.dev->reg_mr(s.pd, s.mem.data(), s.mem.size(), acc))
                         .value);
    s.cq = std::move(s.dev->create_cq(int(std::min<uint32_t>(c.sq_depth + c.rq_depth + 16, 32767))).value);
    QpInitAttr ia;
    ia.send_cq = &s.cq;
    ia.recv_cq = &s.cq;
    ia.qp_type = c.type;
    ia.cap = {c.sq_depth, c.rq_depth, c.max_sge, c.max_sge, c.max_inline};
    s.qp = std::move(s.dev->create_qp(s.pd, ia).value);
}

SimPair::SimPair(const SimConfig& c) : clock(1'000'000'000), wire(c.wire, clock), cfg(c) {
    for (int i = 0; i < 2; ++i) build_side(side[i], wire.end(i), clock, c, i, c.wire.mac[1 - i]);
    for (int i = 0; i < 2; ++i) {
        if (c.type == QpType::ud) {
            AhAttr aa;
            aa.dgid = side[1 - i].gid;
            aa.sgid_index = 1;
            side[i].ah = std::move(side[i].dev->create_ah(side[i].pd, aa).value);
        }
        connect(i);
    }
}

SimPair::~SimPair() = default;

bool connect_qp(Qp& qp, const SimConfig& cfg, uint32_t peer_qpn, const Gid& peer_gid, uint32_t sq_psn, uint32_t rq_psn,
                int sgid_index) {
    const QpType t = cfg.type;
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    a.qkey = 0x11111111;
    a.pkey_index = cfg.pkey_index;
    a.qp_access_flags = access::remote_write | access::remote_read | access::remote_atomic;
    uint32_t m = qp_attr::state | qp_attr::pkey_index | qp_attr::port;
    m |= t == QpType::ud ? qp_attr::qkey : qp_attr::access_flags;
    if (!qp.modify(a, m).ok()) return false;
    a.qp_state = QpState::rtr;
    a.path_mtu = cfg.mtu;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = cfg.max_rd_atomic;
    a.min_rnr_timer = cfg.min_rnr_timer;
    a.ah_attr.dgid = peer_gid;
    a.ah_attr.sgid_index = uint8_t(sgid_index >= 0 ? sgid_index : pkt::is_ipv4_mapped(peer_gid) ? 1 : 2);
    m = qp_attr::state;
    if (t == QpType::rc)
        m |= qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn | qp_attr::max_dest_rd_atomic |
             qp_attr::min_rnr_timer;
    if (t == QpType::uc) m |= qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn;
    if (!qp.modify(a, m).ok()) return false;
    a.qp_state = QpState::rts;
    a.sq_psn = sq_psn;
    a.timeout = cfg.timeout;
    a.retry_cnt = cfg.retry_cnt;
    a.rnr_retry = cfg.rnr_retry;
    a.max_rd_atomic = cfg.max_rd_atomic;
    m = qp_attr::state | qp_attr::sq_psn;
    if (t == QpType::rc) m |= qp_attr::timeout | qp_attr::retry_cnt | qp_attr::rnr_retry | qp_attr::max_qp_rd_atomic;
    return qp.modify(a, m).ok();
}

void SimPair::connect(int i) {
    connect_qp(side[i].qp, cfg, side[1 - i].qp.qpn(), side[1 - i].gid, cfg.sq_psn[i], cfg.sq_psn[1 - i]);
}

void SimPair::reconnect() {
    for (int i = 0; i < 2; ++i) {
        QpAttr a;
        a.qp_state = QpState::reset;
        side[i].qp.modify(a, qp_attr::state);
    }
    for (int i = 0; i < 2; ++i) connect(i);
}

bool SimPair::run_until(const std::function<bool()>& done, uint64_t max_ns, uint64_t max_polls) {
    const uint64_t start = clock.now_ns();
    for (uint64_t n = 0; n < max_polls; ++n) {
        if (done()) return true;
        const size_t moved = side[0].hca->poll() + side[1].hca->poll();
        if (moved) continue;
        // Nothing moved (idle, or waiting for buffers the wire still holds): jump to the next
        // thing that will happen.
        const uint64_t next = std::min({wire.next_delivery_ns(), side[0].hca->next_timer_ns(), side[1].hca->next_timer_ns()});
        if (next == UINT64_MAX || next - start > max_ns) {
            // Nothing more will happen by itself; done() may still post work (then go on).
            if (done()) return true;
            if (side[0].hca->has_work() || side[1].hca->has_work()) continue;
            return false;
        }
        clock.set(std::max(next, clock.now_ns() + 1));
    }
    return done();
}

}  // namespace hcaemu::tools
