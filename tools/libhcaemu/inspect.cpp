#include "tools/libhcaemu/inspect.hpp"

#include <cstdio>
#include <string>

#include "tools/attach/attach.hpp"

namespace hcaemu::api {

namespace {

std::string u(uint64_t v) { return std::to_string(v); }

const char* arm_name(NotifyArm a) {
    switch (a) {
    case NotifyArm::none: return "none";
    case NotifyArm::next: return "next";
    case NotifyArm::solicited: return "solicited";
    }
    return "?";
}

std::string hex(uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
    return b;
}

}  // namespace

ResAttrs res_attrs(const PdObj& p) { return {{"handle", u(p.handle)}, {"users", u(p.users)}}; }

ResAttrs res_attrs(const MrObj& m) {
    return {{"handle", u(m.handle)}, {"pd", u(m.pd ? m.pd->handle : 0)}, {"lkey", hex(m.lkey)},
            {"rkey", hex(m.rkey)}, {"iova", hex(m.iova)}, {"length", u(m.length)},
            {"access", hex(m.access)}, {"pins", u(m.pins.sum())}};
}

ResAttrs res_attrs(const CqObj& c) {
    return {{"handle", u(c.handle)}, {"cqe", u(c.ring.cap())}, {"used", u(c.ring.count())},
            {"qps", u(c.qps.size())}, {"arm", arm_name(c.arm)}, {"channel", c.channel ? "yes" : "no"},
            {"overflowed", c.overflowed ? "yes" : "no"}};
}

ResAttrs res_attrs(const QpObj& q) {
    ResAttrs a{{"handle", u(q.handle)}, {"qpn", u(q.qpn)}, {"type", name(q.type)}, {"state", name(q.state())},
               {"pd", u(q.pd ? q.pd->handle : 0)}, {"send_cq", u(q.send_cq ? q.send_cq->handle : 0)},
               {"recv_cq", u(q.recv_cq ? q.recv_cq->handle : 0)}};
    if (q.srq) a.emplace_back("srq", u(q.srq->handle));
    // (no PSNs: the device keeps the ones modify_qp set; the live ones are the transport's)
    if (q.type != QpType::ud) a.emplace_back("dest_qpn", u(q.attr.dest_qp_num));
    a.emplace_back("path_mtu", u(mtu_bytes(q.attr.path_mtu)));
    a.emplace_back("sq_used", u(q.sq.count()));
    a.emplace_back("sq_size", u(q.sq.cap()));
    if (!q.srq) {
        a.emplace_back("rq_used", u(q.rq.count()));
        a.emplace_back("rq_size", u(q.rq.cap()));
    }
    return a;
}

ResAttrs res_attrs(const SrqObj& s) {
    return {{"handle", u(s.handle)}, {"pd", u(s.pd ? s.pd->handle : 0)}, {"max_wr", u(s.attr.max_wr)},
            {"max_sge", u(s.attr.max_sge)}, {"limit", u(s.attr.srq_limit)}, {"used", u(s.rq.count())},
            {"qps", u(s.users)}};
}

void res_walk(const Device& dev, ResKind kind, const std::function<void(uint32_t, ResAttrs&&)>& f) {
    auto each = [&](const auto& table) {
        table.for_each([&](uint32_t, const auto& o) { f(o.handle, res_attrs(o)); });
    };
    switch (kind) {
    case ResKind::pd: each(dev.pd_table()); break;
    case ResKind::mr: each(dev.mr_table()); break;
    case ResKind::cq: each(dev.cq_table()); break;
    case ResKind::qp: each(dev.qp_table()); break;
    case ResKind::srq: each(dev.srq_table()); break;
    case ResKind::count: break;
    }
}

Counts device_counts(const Counters& c) {
    Counts out;
    for (size_t i = 0; i < kCounterCount; ++i) out.emplace_back(kCounterName[i], c.v[i]);
    for (size_t i = 0; i < pkt::kParseErrorCount; ++i)
        out.emplace_back(std::string("rx_err_") + pkt::name(pkt::ParseError(i)), c.rx_err[i]);
    return out;
}

Counts net_counts(const port::NetStats& n) {
    Counts out;
    for (size_t i = 0; i < port::kNetStatCount; ++i) out.emplace_back(port::kNetStatNames[i], n.*port::kNetStatFields[i]);
    return out;
}

Counts link_counts(port::DpdkPort& d) {
    const port::PortStats p = d.stats();
    const port::LinkStats l = d.link_stats();
    return {{"link_up", d.link_up() ? 1 : 0},
            {"tx_frames", p.tx_frames},
            {"tx_bytes", p.tx_bytes},
            {"rx_frames", p.rx_frames},
            {"rx_bytes", p.rx_bytes},
            {"tx_no_buffer", p.tx_no_buffer},
            {"rx_dropped", p.rx_dropped},
            {"up_events", l.up_events},
            {"down_events", l.down_events},
            {"polls_while_down", l.polls_while_down},
            {"reconnects", l.reconnects},
            {"burst_faults", l.burst_faults},
            {"frames_lost_in_fault", l.frames_lost_in_fault},
            {"prefaulted_pool_bytes", l.prefaulted_pool_bytes},
            {"prefaulted_link_bytes", l.prefaulted_link_bytes},
            {"pmd_ipackets", l.pmd_ipackets},
            {"pmd_opackets", l.pmd_opackets},
            {"pmd_ierrors", l.pmd_ierrors},
            {"pmd_oerrors", l.pmd_oerrors},
            {"pmd_imissed", l.pmd_imissed},
            {"pmd_rx_nombuf", l.pmd_rx_nombuf}};
}

void collect_stats(tools::Attached& a, Stats& out) {
    out.device = device_counts(a.dev().counters_total());
    out.net = net_counts(a.net().net_stats());
    out.link = link_counts(a.dpdk());
    add_conform_counts(a, out.link);
}

void add_conform_counts(const tools::Attached& a, Counts& out) {
    const port::ConformPort* c = a.conform();
    if (!c) return;
    const port::ConformStats s = c->monitor().stats();
    out.emplace_back("conform_frames", s.frames);
    out.emplace_back("conform_violations", s.violations);
    for (size_t i = 0; i < port::kConfRuleCount; ++i) {
        std::string n = std::string("conform_") + port::kConfRules[i].id;
        for (char& ch : n)
            if (ch == '.') ch = '_';
        out.emplace_back(n, c->monitor().count(port::ConfRule(i)));
    }
}

}  // namespace hcaemu::api
