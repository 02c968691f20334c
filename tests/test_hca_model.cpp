// The object model: tables, keys and the MR check, CQ, QP state machine through the API, work
// request validation, flush to ERR, SRQ, AH, the DMA engine.
#include <catch2/catch.hpp>

#include <poll.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "hca_model/device.hpp"

using namespace hcaemu;

namespace {

constexpr uint32_t kAllAccess = access::local_write | access::remote_write | access::remote_read | access::remote_atomic;

struct Fixture {
    PortConfig port_cfg() {
        PortConfig c;
        c.ipv4[0] = 0xC6120001;  // 198.18.0.1
        return c;
    }
    Device dev{DeviceAttr{}, port_cfg()};
    Pd pd = std::move(dev.alloc_pd().value);
    std::vector<uint8_t> buf = std::vector<uint8_t>(4096);
    Mr mr = std::move(dev.reg_mr(pd, buf.data(), buf.size(), kAllAccess).value);
    CompChannel ch;
    Cq cq = std::move(dev.create_cq(64, &ch, 0xC0FFEE).value);

    Qp make_qp(QpType t = QpType::rc, uint32_t sq = 8, uint32_t rq = 8, uint32_t inline_data = 64) {
        QpInitAttr ia;
        ia.send_cq = &cq;
        ia.recv_cq = &cq;
        ia.qp_type = t;
        ia.cap = {sq, rq, 4, 4, inline_data};
        auto r = dev.create_qp(pd, ia);
        REQUIRE(r.ok());
        return std::move(r.value);
    }

    // RESET -> INIT -> RTR -> RTS with the attributes each step needs.
    void to_rts(Qp& qp, QpType t = QpType::rc) {
        QpAttr a;
        a.qp_state = QpState::init;
        a.port_num = 1;
        a.qkey = 0x11111111;
        a.qp_access_flags = access::remote_write | access::remote_read | access::remote_atomic;
        uint32_t m = qp_attr::state | qp_attr::pkey_index | qp_attr::port;
        m |= t == QpType::ud ? qp_attr::qkey : qp_attr::access_flags;
        REQUIRE(qp.modify(a, m).ok());
        a.qp_state = QpState::rtr;
        a.path_mtu = Mtu::mtu1024;
        a.dest_qp_num = 0x42;
        a.rq_psn = 100;
        a.max_dest_rd_atomic = 4;
        a.min_rnr_timer = 12;
        m = qp_attr::state;
        if (t == QpType::rc) m |= qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn | qp_attr::max_dest_rd_atomic | qp_attr::min_rnr_timer;
        if (t == QpType::uc) m |= qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn;
        REQUIRE(qp.modify(a, m).ok());
        a.qp_state = QpState::rts;
        a.sq_psn = 200;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 4;
        m = qp_attr::state | qp_attr::sq_psn;
        if (t == QpType::rc) m |= qp_attr::timeout | qp_attr::retry_cnt | qp_attr::rnr_retry | qp_attr::max_qp_rd_atomic;
        REQUIRE(qp.modify(a, m).ok());
        REQUIRE(qp.state() == QpState::rts);
    }

    std::vector<Wc> drain() {
        std::vector<Wc> out;
        Wc wc[8];
        int n;
        while ((n = cq.poll(wc)) > 0) out.insert(out.end(), wc, wc + n);
        return out;
    }
};

std::vector<AsyncEvent> events(Device& d) {
    std::vector<AsyncEvent> v;
    AsyncEvent e;
    while (d.get_async_event(e)) v.push_back(e);
    return v;
}

}  // namespace

TEST_CASE("device and port attributes as ibv_query_device and ibv_query_port report them", "[device]") {
    Fixture f;
    const DeviceAttr& a = f.dev.query_device();
    CHECK(a.max_qp == 0x10000);
    CHECK(a.max_qp_rd_atom == 128);
    CHECK(a.atomic_cap == AtomicCap::hca);
    // No GUID given: the default MAC 52:54:00:18:00:01's modified EUI-64, as rxe derives it.
    CHECK(a.node_guid == 0x505400fffe180001ull);
    CHECK(a.sys_image_guid == a.node_guid);
    DeviceAttr given;
    given.node_guid = 0x0123456789abcdefull;
    CHECK(Device(given, PortConfig{}).query_device().node_guid == 0x0123456789abcdefull);
    PortAttr p;
    REQUIRE(f.dev.query_port(1, p) == Status::ok);
    CHECK(p.state == PortState::active);
    CHECK(p.max_mtu == Mtu::mtu4096);
    CHECK(p.active_mtu == Mtu::mtu1024);  // 1500 - 80 = 1420 -> 1024, as rxe reports
    CHECK(f.dev.query_port(2, p) == Status::invalid_argument);
    // rxe's rule: link MTU minus 80 bytes of RoCE v2 headers, rounded down to an IB MTU.
    CHECK(active_mtu_for_link(9000) == Mtu::mtu4096);
    CHECK(active_mtu_for_link(4176) == Mtu::mtu4096);
    CHECK(active_mtu_for_link(4175) == Mtu::mtu2048);
    CHECK(active_mtu_for_link(2128) == Mtu::mtu2048);
    CHECK(active_mtu_for_link(2127) == Mtu::mtu1024);
    CHECK(active_mtu_for_link(1104) == Mtu::mtu1024);
    CHECK(active_mtu_for_link(1103) == Mtu::mtu512);
    CHECK(active_mtu_for_link(500) == Mtu::mtu256);
    f.dev.set_link_mtu(9000);
    REQUIRE(f.dev.query_port(1, p) == Status::ok);
    CHECK(p.active_mtu == Mtu::mtu4096);
    CHECK(mtu_bytes(Mtu::mtu256) == 256);
    CHECK(mtu_bytes(Mtu::mtu4096) == 4096);
}

TEST_CASE("GID table: link-local from the MAC, then IPv4-mapped, then IPv6", "[device]") {
    PortConfig c;
    c.mac = {0x52, 0x54, 0x00, 0x18, 0x00, 0x02};
    c.ipv4[0] = 0xC6120002;
    c.ipv6[0] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    Device d(DeviceAttr{}, c);
    GidEntry g;
    REQUIRE(d.query_gid(1, 0, g) == Status::ok);
    CHECK(g.gid == Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x18, 0x00, 0x02});
    REQUIRE(d.query_gid(1, 1, g) == Status::ok);
    CHECK(g.gid == Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 2});
    CHECK(g.type == GidType::roce_v2);
    REQUIRE(d.query_gid(1, 2, g) == Status::ok);
    CHECK(g.gid[0] == 0xfd);
    CHECK(d.query_gid(1, 3, g) == Status::invalid_argument);
    CHECK(d.query_gid(1, -1, g) == Status::invalid_argument);
    PortAttr p;
    d.query_port(1, p);
    CHECK(p.gid_tbl_len == int(kGidTableLen));  // 3 used, the rest empty
}

TEST_CASE("MR registration rules", "[mr]") {
    Fixture f;
    std::vector<uint8_t> b(100);
    CHECK(f.dev.reg_mr(f.pd, b.data(), 100, access::remote_write).status == Status::invalid_argument);   // needs local write
    CHECK(f.dev.reg_mr(f.pd, b.data(), 100, access::remote_atomic).status == Status::invalid_argument);
    CHECK(f.dev.reg_mr(f.pd, b.data(), 100, access::remote_read).ok());  // remote read alone is fine
    CHECK(f.dev.reg_mr(f.pd, b.data(), 0, 0).status == Status::invalid_argument);
    CHECK(f.dev.reg_mr(f.pd, nullptr, 100, 0).status == Status::invalid_argument);
    CHECK(f.dev.reg_mr(f.pd, b.data(), 100, 1u << 20).status == Status::invalid_argument);
    Pd none;
    CHECK(f.dev.reg_mr(none, b.data(), 100, 0).status == Status::bad_handle);
    Device other;
    auto opd = other.alloc_pd();
    CHECK(f.dev.reg_mr(opd.value, b.data(), 100, 0).status == Status::bad_handle);  // another device's PD
}

TEST_CASE("the MR check: every outcome", "[mr]") {
    Fixture f;
    const MrObj* m = f.dev.mr_by_key(f.mr.rkey());
    REQUIRE(m);
    const PdObj* pd = f.dev.pd(f.pd.handle());
    const uint64_t va = f.mr.addr();
    CHECK(check_mr_access(m, pd, va, 4096, access::remote_write) == MrError::ok);
    CHECK(check_mr_access(m, pd, va + 4095, 1, access::remote_read) == MrError::ok);
    CHECK(check_mr_access(m, pd, va + 4096, 0, access::remote_read) == MrError::ok);  // empty at the end
    CHECK(check_mr_access(nullptr, pd, va, 1, 0) == MrError::bad_key);
    auto pd2 = f.dev.alloc_pd();
    CHECK(check_mr_access(m, f.dev.pd(pd2->handle()), va, 1, 0) == MrError::pd_mismatch);
    CHECK(check_mr_access(m, pd, va + 4095, 2, 0) == MrError::out_of_bounds);
    CHECK(check_mr_access(m, pd, va - 1, 1, 0) == MrError::out_of_bounds);
    CHECK(check_mr_access(m, pd, va, 4097, 0) == MrError::out_of_bounds);
    CHECK(check_mr_access(m, pd, va + 10, ~0ull - 5, 0) == MrError::out_of_bounds);   // va + len overflows
    CHECK(check_mr_access(m, pd, ~0ull - 2, 8, 0) == MrError::out_of_bounds);
    CHECK(check_mr_access(m, pd, va + 4096, ~0ull, 0) == MrError::out_of_bounds);
    std::vector<uint8_t> b(64);
    auto ro = f.dev.reg_mr(f.pd, b.data(), b.size(), access::remote_read);
    const MrObj* r = f.dev.mr_by_key(ro->rkey());
    CHECK(check_mr_access(r, pd, ro->addr(), 8, access::remote_write) == MrError::access_denied);
    CHECK(check_mr_access(r, pd, ro->addr(), 8, access::remote_atomic) == MrError::access_denied);
    CHECK(check_mr_access(r, pd, ro->addr(), 8, access::local_write) == MrError::access_denied);
    CHECK(check_mr_access(r, pd, ro->addr(), 8, access::remote_read) == MrError::ok);
    CHECK(check_mr_access(r, pd, ro->addr(), 8, 0) == MrError::ok);  // local read is always allowed
    CHECK(check_mr_access(m, pd, va + 8, 8, access::remote_atomic) == MrError::ok);
    CHECK(check_mr_access(m, pd, va + 12, 8, access::remote_atomic) == MrError::misaligned);
    CHECK(check_mr_access(m, pd, va + 12, 8, access::remote_write) == MrError::ok);  // only atomics align
}

TEST_CASE("re-registration keeps the keys and changes the region behind them, all or nothing", "[mr]") {
    Fixture f;
    const uint32_t k0 = f.mr.lkey();
    CHECK(f.mr.rkey() == k0);
    REQUIRE(f.dev.mr_by_key(k0) != nullptr);
    REQUIRE(f.mr.rereg(rereg::change_access, nullptr, nullptr, 0, access::local_write | access::remote_read) == Status::ok);
    CHECK(f.mr.lkey() == k0);  // as rxe and mlx5: a peer's cached R_Key still names it
    CHECK(f.mr.rkey() == k0);
    REQUIRE(f.dev.mr_by_key(k0) != nullptr);
    CHECK(f.dev.mr_by_key(k0)->access == (access::local_write | access::remote_read));
    REQUIRE(f.mr.rereg(rereg::change_access, nullptr, nullptr, 0, kAllAccess) == Status::ok);
    // a failing re-registration changes nothing
    const uint32_t cur = f.mr.lkey();
    CHECK(f.mr.rereg(rereg::change_access, nullptr, nullptr, 0, access::remote_write) == Status::invalid_argument);
    CHECK(f.mr.lkey() == cur);
    CHECK(f.dev.mr_by_key(cur)->access == kAllAccess);
    CHECK(f.mr.rereg(0, nullptr, nullptr, 0, 0) == Status::invalid_argument);
    REQUIRE(f.mr.destroy() == Status::ok);
    CHECK(f.dev.mr_by_key(cur) == nullptr);
    // change of translation and PD
    std::vector<uint8_t> b(128);
    auto m2 = f.dev.reg_mr(f.pd, b.data(), 128, kAllAccess);
    auto pd2 = f.dev.alloc_pd();
    std::vector<uint8_t> c(256);
    REQUIRE(m2->rereg(rereg::change_translation | rereg::change_pd, &pd2.value, c.data(), 256, 0) == Status::ok);
    CHECK(m2->length() == 256);
    CHECK(m2->addr() == reinterpret_cast<uintptr_t>(c.data()));
    CHECK(f.dev.mr_by_key(m2->lkey())->pd == f.dev.pd(pd2->handle()));
    CHECK(f.dev.mr_by_key(m2->lkey())->host == c.data());
    CHECK(f.pd.destroy() == Status::ok);  // the MR moved away from it
}

TEST_CASE("a new MR in a reused slot gets a new key; the old key stays dead", "[mr]") {
    DeviceAttr a;
    a.max_mr = 1;  // one slot: every registration reuses it
    Device d(a);
    auto pd = d.alloc_pd();
    std::vector<uint8_t> b(64);
    auto m1 = d.reg_mr(pd.value, b.data(), 64, access::local_write);
    REQUIRE(m1.ok());
    const uint32_t k1 = m1->lkey();
    CHECK(k1 != 0);  // index 0 is never used: a zeroed SGE names no MR
    REQUIRE(m1->destroy() == Status::ok);
    auto m2 = d.reg_mr(pd.value, b.data(), 64, access::local_write);
    REQUIRE(m2.ok());
    CHECK(m2->lkey() >> 8 == k1 >> 8);  // the same slot
    CHECK(m2->lkey() != k1);
    CHECK(d.mr_by_key(k1) == nullptr);
    CHECK(d.mr_by_key(m2->lkey()) != nullptr);
    CHECK(d.mr_by_key(0) == nullptr);
    CHECK(d.reg_mr(pd.value, b.data(), 64, access::local_write | access::zero_based).status == Status::invalid_argument);
}

TEST_CASE("an MR in use by a request in flight cannot be deregistered", "[mr]") {
    Fixture f;
    MrObj* m = f.dev.mr(f.mr.handle());
    m->pins.inc();
    CHECK(f.mr.destroy() == Status::busy);
    CHECK(f.dev.mr_by_key(f.mr.lkey()) == m);
    // re-registration is not blocked: WQEs are checked against the region when they run
    CHECK(f.mr.rereg(rereg::change_access, nullptr, nullptr, 0, access::local_write) == Status::ok);
    CHECK(m->access == access::local_write);
    m->pins.dec();
    // Pinned by lcore 1's WQE, released on lcore 0 (slot 0 wraps below zero): the sum decides.
    t_lcore = 1;
    m->pins.inc();
    t_lcore = 0;
    CHECK(f.mr.destroy() == Status::busy);
    m->pins.dec();
    CHECK(m->pins.v[0] == UINT32_MAX);
    CHECK(f.mr.destroy() == Status::ok);
}

TEST_CASE("posted send WQEs pin their MRs until they retire or flush", "[mr][wr]") {
    Fixture f;
    Qp qp = f.make_qp();
    f.to_rts(qp);
    Sge sge{f.mr.addr(), 8, f.mr.lkey()};
    SendWr w;
    w.wr_id = 5;
    w.sg_list = &sge;
    w.num_sge = 1;
    const SendWr* bad;
    REQUIRE(qp.post_send(&w, &bad) == Status::ok);
    REQUIRE(qp.post_send(&w, &bad) == Status::ok);
    CHECK(f.dev.mr(f.mr.handle())->pins.sum() == 2);
    CHECK(f.mr.destroy() == Status::busy);
    QpObj* q = f.dev.qp_by_qpn(qp.qpn());
    f.dev.retire_send(q, WcStatus::success, WcOpcode::send, 8);  // unsignaled and successful: no completion
    CHECK(f.drain().empty());
    CHECK(f.dev.mr(f.mr.handle())->pins.sum() == 1);
    f.dev.retire_send(q, WcStatus::rem_access_err, WcOpcode::send, 0);  // errors complete even when unsignaled
    auto wc = f.drain();
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].wr_id == 5);
    CHECK(wc[0].status == WcStatus::rem_access_err);
    CHECK(wc[0].qp_num == qp.qpn());
    CHECK(f.dev.mr(f.mr.handle())->pins.sum() == 0);
    REQUIRE(qp.post_send(&w, &bad) == Status::ok);
    QpAttr a;
    a.qp_state = QpState::err;
    REQUIRE(qp.modify(a, qp_attr::state).ok());
    CHECK(f.dev.mr(f.mr.handle())->pins.sum() == 0);
    CHECK(f.mr.destroy() == Status::ok);
}

TEST_CASE("objects in use cannot be destroyed; handles are per device and die with their object", "[device]") {
    Fixture f;
    CHECK(f.pd.destroy() == Status::busy);  // the MR uses it
    Qp qp = f.make_qp();
    CHECK(f.cq.destroy() == Status::busy);  // the QP uses it
    const uint32_t qpn = qp.qpn();
    CHECK(qpn >= 2);                        // QPN 0 and 1 are reserved
    CHECK(f.dev.qp_by_qpn(qpn) != nullptr);
    REQUIRE(qp.destroy() == Status::ok);
    CHECK(f.dev.qp_by_qpn(qpn) == nullptr);
    CHECK(qp.destroy() == Status::bad_handle);
    CHECK(f.mr.destroy() == Status::ok);
    CHECK(f.cq.destroy() == Status::ok);
    CHECK(f.pd.destroy() == Status::ok);
    CHECK(f.dev.num_pds() == 0);
    CHECK(f.dev.num_qps() == 0);
}

TEST_CASE("QPNs are never 0 or 1 and are not reused at once", "[qp]") {
    Fixture f;
    std::vector<uint32_t> qpns;
    for (int i = 0; i < 5; ++i) {
        Qp q = f.make_qp();
        qpns.push_back(q.qpn());
    }  // each destroyed at the end of its iteration
    for (size_t i = 0; i < qpns.size(); ++i) {
        CHECK(qpns[i] >= 2);
        for (size_t j = i + 1; j < qpns.size(); ++j) CHECK(qpns[i] != qpns[j]);
    }
}

TEST_CASE("table limits give no_resources", "[device]") {
    DeviceAttr a;
    a.max_pd = 2;
    Device d(a);
    auto p1 = d.alloc_pd();
    auto p2 = d.alloc_pd();
    CHECK(d.alloc_pd().status == Status::no_resources);
    REQUIRE(p1->destroy() == Status::ok);
    CHECK(d.alloc_pd().ok());
}

TEST_CASE("a table's own heap grows with the highest index used, up to max, then stays", "[device]") {
    DeviceAttr a;
    a.max_pd = 64;
    Device d(a);
    const size_t empty = d.table_bytes();
    for (int i = 0; i < 64; ++i) REQUIRE(d.alloc_pd()->destroy() == Status::ok);  // a fresh index each
    const size_t full = d.table_bytes();
    CHECK(full >= empty + 64 * sizeof(void*));  // a slot per index ever used
    for (int i = 0; i < 1000; ++i) REQUIRE(d.alloc_pd()->destroy() == Status::ok);  // freed ones, oldest first
    CHECK(d.table_bytes() == full);
    CHECK(d.num_pds() == 0);
}

TEST_CASE("QP creation validates its capabilities", "[qp]") {
    Fixture f;
    QpInitAttr ia;
    ia.send_cq = &f.cq;
    ia.recv_cq = &f.cq;
    ia.cap = {8, 8, 1, 1, 0};
    CHECK(f.dev.create_qp(f.pd, ia).ok());
    ia.cap.max_send_wr = f.dev.query_device().max_qp_wr + 1;
    CHECK(f.dev.create_qp(f.pd, ia).status == Status::invalid_argument);
    ia.cap = {8, 8, 33, 1, 0};
    CHECK(f.dev.create_qp(f.pd, ia).status == Status::invalid_argument);
    ia.cap = {8, 8, 1, 1, 257};
    CHECK(f.dev.create_qp(f.pd, ia).status == Status::invalid_argument);
    ia.cap = {8, 8, 1, 1, 0};
    ia.recv_cq = nullptr;
    CHECK(f.dev.create_qp(f.pd, ia).status == Status::bad_handle);
}

TEST_CASE("modify_qp: the full path to RTS, and an illegal transition or mask changes nothing", "[qp]") {
    Fixture f;
    Qp qp = f.make_qp();
    QpAttr a;
    a.qp_state = QpState::rts;
    auto r = qp.modify(a, qp_attr::state);
    CHECK(r.status == Status::bad_transition);
    CHECK(qp.state() == QpState::reset);

    a.qp_state = QpState::init;
    a.port_num = 1;
    a.qp_access_flags = access::remote_write;
    r = qp.modify(a, qp_attr::state | qp_attr::port | qp_attr::pkey_index);  // RC needs access flags too
    CHECK(r.status == Status::missing_attr);
    CHECK(r.bits == qp_attr::access_flags);
    CHECK(qp.state() == QpState::reset);
    r = qp.modify(a, qp_attr::state | qp_attr::port | qp_attr::pkey_index | qp_attr::access_flags | qp_attr::sq_psn);
    CHECK(r.status == Status::attr_not_allowed);
    CHECK(r.bits == qp_attr::sq_psn);
    a.port_num = 2;  // a value error: nothing applied
    r = qp.modify(a, qp_attr::state | qp_attr::port | qp_attr::pkey_index | qp_attr::access_flags);
    CHECK(r.status == Status::invalid_argument);
    CHECK(qp.state() == QpState::reset);
    QpAttr q;
    REQUIRE(qp.query(q) == Status::ok);
    CHECK(q.qp_access_flags == 0);

    f.to_rts(qp);
    REQUIRE(qp.query(q) == Status::ok);
    CHECK(q.qp_state == QpState::rts);
    CHECK(q.dest_qp_num == 0x42);
    CHECK(q.rq_psn == 100);
    CHECK(q.sq_psn == 200);
    CHECK(q.timeout == 14);
    CHECK(q.max_dest_rd_atomic == 4);
    CHECK(q.path_mtu == Mtu::mtu1024);

    // value ranges, each refused with nothing changed
    QpAttr bad = q;
    bad.retry_cnt = 8;
    CHECK(qp.modify(bad, qp_attr::retry_cnt).status == Status::attr_not_allowed);  // not modifiable in RTS for RC
    bad = q;
    bad.qp_access_flags = 1u << 6;
    CHECK(qp.modify(bad, qp_attr::access_flags).status == Status::invalid_argument);
    bad = q;
    bad.path_mig_state = 3;
    CHECK(qp.modify(bad, qp_attr::path_mig_state).status == Status::invalid_argument);
    bad = q;
    bad.alt_port_num = 1;
    bad.alt_ah_attr.sgid_index = 9;
    CHECK(qp.modify(bad, qp_attr::alt_path).status == Status::invalid_argument);
    bad.alt_ah_attr.sgid_index = 0;
    bad.alt_timeout = 17;
    REQUIRE(qp.modify(bad, qp_attr::alt_path).ok());
    REQUIRE(qp.query(q) == Status::ok);
    CHECK(q.alt_timeout == 17);  // kept and reported
    bad = q;
    bad.min_rnr_timer = 32;
    CHECK(qp.modify(bad, qp_attr::min_rnr_timer).status == Status::invalid_argument);
    bad = q;
    bad.cur_qp_state = QpState::rtr;  // not the current state
    CHECK(qp.modify(bad, qp_attr::cur_state).status == Status::invalid_argument);
    bad.cur_qp_state = QpState::rts;
    CHECK(qp.modify(bad, qp_attr::cur_state).ok());

    // RTS -> SQD -> RTS, and any -> RESET forgets everything
    a.qp_state = QpState::sqd;
    a.en_sqd_async_notify = true;
    REQUIRE(qp.modify(a, qp_attr::state | qp_attr::en_sqd_async_notify).ok());
    auto ev = events(f.dev);
    REQUIRE(ev.size() == 1);
    CHECK(ev[0].type == EventType::sq_drained);
    CHECK(ev[0].element == qp.qpn());
    a.qp_state = QpState::rts;
    REQUIRE(qp.modify(a, qp_attr::state).ok());
    a.qp_state = QpState::reset;
    REQUIRE(qp.modify(a, qp_attr::state).ok());
    REQUIRE(qp.query(q) == Status::ok);
    CHECK(q.dest_qp_num == 0);
    CHECK(q.cap.max_send_wr == 8);
}

TEST_CASE("attribute values out of range are refused on the way to RTS", "[qp]") {
    Fixture f;
    Qp qp = f.make_qp();
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    REQUIRE(qp.modify(a, qp_attr::state | qp_attr::port | qp_attr::pkey_index | qp_attr::access_flags).ok());
    const uint32_t rtr = qp_attr::state | qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn |
                         qp_attr::max_dest_rd_atomic | qp_attr::min_rnr_timer;
    a.qp_state = QpState::rtr;
    a.path_mtu = Mtu::mtu1024;
    auto refused = [&](const QpAttr& x, uint32_t m) {
        CHECK(qp.modify(x, m).status == Status::invalid_argument);
        CHECK(qp.state() == QpState::init);
    };
    QpAttr x = a;
    x.path_mtu = Mtu(6);
    refused(x, rtr);
    x = a;
    x.dest_qp_num = 1u << 24;
    refused(x, rtr);
    x = a;
    x.max_dest_rd_atomic = 129;  // above max_qp_rd_atom
    refused(x, rtr);
    x = a;
    x.ah_attr.sgid_index = 7;
    refused(x, rtr);
    x = a;
    x.ah_attr.port_num = 2;
    refused(x, rtr);
    x = a;
    x.ah_attr.flow_label = 1u << 20;
    refused(x, rtr);
    x = a;
    x.rq_psn = 0x1ABCDEF;  // masked to 24 bits, as drivers do
    REQUIRE(qp.modify(x, rtr).ok());
    QpAttr q;
    qp.query(q);
    CHECK(q.rq_psn == 0xABCDEF);
    const uint32_t rts = qp_attr::state | qp_attr::sq_psn | qp_attr::timeout | qp_attr::retry_cnt | qp_attr::rnr_retry |
                         qp_attr::max_qp_rd_atomic;
    a.qp_state = QpState::rts;
    auto refused_rts = [&](const QpAttr& y) {
        CHECK(qp.modify(y, rts).status == Status::invalid_argument);
        CHECK(qp.state() == QpState::rtr);
    };
    x = a;
    x.timeout = 32;
    refused_rts(x);
    x = a;
    x.retry_cnt = 8;
    refused_rts(x);
    x = a;
    x.rnr_retry = 8;
    refused_rts(x);
    x = a;
    x.max_rd_atomic = 129;
    refused_rts(x);
    REQUIRE(qp.modify(a, rts).ok());
    // SQE (UC/UD only) is not a modify target from RTS
    a.qp_state = QpState::sqe;
    CHECK(qp.modify(a, qp_attr::state).status == Status::bad_transition);
}

TEST_CASE("SQE: sends are flushed, receives go on", "[qp]") {
    Fixture f;
    Qp qp = f.make_qp(QpType::uc);
    f.to_rts(qp, QpType::uc);
    RecvWr r;
    r.wr_id = 77;
    const RecvWr* rbad;
    REQUIRE(qp.post_recv(&r, &rbad) == Status::ok);
    f.dev.qp_by_qpn(qp.qpn())->attr.qp_state = QpState::sqe;  // as the HCA moves it on a send error
    SendWr w;
    w.wr_id = 5;
    const SendWr* bad;
    REQUIRE(qp.post_send(&w, &bad) == Status::ok);
    auto wc = f.drain();
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].wr_id == 5);
    CHECK(wc[0].status == WcStatus::wr_flush_err);
    CHECK(f.dev.qp_by_qpn(qp.qpn())->rq.count() == 1);  // the receive is still posted
    QpAttr a;
    a.qp_state = QpState::rts;
    REQUIRE(qp.modify(a, qp_attr::state).ok());  // SQE -> RTS by modify
}

TEST_CASE("posted receives pin nothing: dereg_mr with receives posted succeeds (as rxe)", "[mr][wr]") {
    Fixture f;
    Qp qp = f.make_qp();
    Sge s{f.mr.addr(), 100, f.mr.lkey()};
    RecvWr r;
    r.wr_id = 5;
    r.sg_list = &s;
    r.num_sge = 1;
    const RecvWr* bad;
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    REQUIRE(qp.modify(a, qp_attr::state | qp_attr::port | qp_attr::pkey_index | qp_attr::access_flags).ok());
    REQUIRE(qp.post_recv(&r, &bad) == Status::ok);
    REQUIRE(qp.post_recv(&r, &bad) == Status::ok);
    CHECK(f.dev.mr(f.mr.handle())->pins.sum() == 0);
    const uint32_t lkey = f.mr.lkey();
    CHECK(f.mr.destroy() == Status::ok);
    CHECK(f.dev.mr_by_key(lkey) == nullptr);
    // The WQEs keep their SGEs as posted (the responder's DMA finds the key gone, see
    // test_transport); they are still taken and flushed as usual.
    RecvWqe w;
    Sge sg[4];
    REQUIRE(f.dev.take_recv(f.dev.qp_by_qpn(qp.qpn()), w, sg));
    CHECK(w.wr_id == 5);
    CHECK(w.num_sge == 1);
    CHECK(sg[0].lkey == lkey);
    CHECK(w.length == 100);
    // Still checked when posted: the SGE count against max_recv_sge.
    r.num_sge = 5;
    CHECK(qp.post_recv(&r, &bad) == Status::too_many_sge);
    CHECK(bad == &r);
    r.num_sge = 1;
    a.qp_state = QpState::err;
    REQUIRE(qp.modify(a, qp_attr::state).ok());
    CHECK(f.dev.qp_by_qpn(qp.qpn())->rq.empty());
}

TEST_CASE("a receive WR longer than the port's max_msg_sz is refused when posted (as rxe's post_recv), on a QP and an SRQ", "[wr][srq]") {
    Fixture f;
    PortAttr pa;
    REQUIRE(f.dev.query_port(1, pa) == Status::ok);
    const uint32_t max = pa.max_msg_sz;
    REQUIRE(max == 0x80000000u);
    // Keys are not checked at post: the lengths alone decide.
    Sge s[2] = {{f.mr.addr(), max / 2, f.mr.lkey()}, {f.mr.addr(), max / 2, f.mr.lkey()}};
    RecvWr ok_wr, long_wr;
    ok_wr.wr_id = 1;
    ok_wr.sg_list = s;
    ok_wr.num_sge = 2;  // exactly max_msg_sz
    long_wr = ok_wr;
    long_wr.wr_id = 2;
    Sge l[2] = {s[0], {f.mr.addr(), max / 2 + 1, f.mr.lkey()}};
    long_wr.sg_list = l;
    ok_wr.next = &long_wr;
    const RecvWr* bad = nullptr;
    SECTION("QP") {
        Qp qp = f.make_qp();
        QpAttr a;
        a.qp_state = QpState::init;
        a.port_num = 1;
        REQUIRE(qp.modify(a, qp_attr::state | qp_attr::port | qp_attr::pkey_index | qp_attr::access_flags).ok());
        CHECK(qp.post_recv(&ok_wr, &bad) == Status::invalid_argument);
        CHECK(bad == &long_wr);
        const QpObj* q = f.dev.qp_by_qpn(qp.qpn());
        REQUIRE(q->rq.tail - q->rq.head == 1);  // the first WR of the list was taken
        CHECK(q->rq.at(q->rq.head).wr_id == 1);
        CHECK(q->rq.at(q->rq.head).length == max);
    }
    SECTION("SRQ") {
        SrqAttr sa{8, 2, 0};
        auto srq = f.dev.create_srq(f.pd, sa);
        REQUIRE(srq.ok());
        CHECK(srq.value.post_recv(&long_wr, &bad) == Status::invalid_argument);
        CHECK(bad == &long_wr);
        const SrqObj* so = f.dev.srq(srq.value.handle());
        CHECK(so->rq.empty());
        ok_wr.next = nullptr;
        CHECK(srq.value.post_recv(&ok_wr, &bad) == Status::ok);
        CHECK(so->rq.tail - so->rq.head == 1);
    }
}

TEST_CASE("take_recv on an empty queue asks rq_fill first: a receive posted elsewhere is seen", "[wr]") {
    Fixture f;
    Qp qp = f.make_qp();
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    REQUIRE(qp.modify(a, qp_attr::state | qp_attr::port | qp_attr::pkey_index | qp_attr::access_flags).ok());
    struct Ctx {
        Qp* qp;
        Sge s;
        int asked = 0;
        int posts = 1;  // receives waiting "in the client's ring"
    } ctx{&qp, {f.mr.addr(), 100, f.mr.lkey()}};
    f.dev.set_rq_fill(
        [](void* p, QpObj& q) {
            auto* c = static_cast<Ctx*>(p);
            ++c->asked;
            CHECK(q.qpn == c->qp->qpn());
            for (; c->posts > 0; --c->posts) {
                RecvWr r;
                r.wr_id = 77;
                r.sg_list = &c->s;
                r.num_sge = 1;
                const RecvWr* bad;
                REQUIRE(c->qp->post_recv(&r, &bad) == Status::ok);
            }
        },
        &ctx);
    RecvWqe w;
    Sge sg[4];
    REQUIRE(f.dev.take_recv(f.dev.qp_by_qpn(qp.qpn()), w, sg));  // empty: filled, then taken
    CHECK(w.wr_id == 77);
    CHECK(ctx.asked == 1);
    CHECK_FALSE(f.dev.take_recv(f.dev.qp_by_qpn(qp.qpn()), w, sg));  // nothing more anywhere
    CHECK(ctx.asked == 2);
    f.dev.set_rq_fill(nullptr, nullptr);
    CHECK_FALSE(f.dev.take_recv(f.dev.qp_by_qpn(qp.qpn()), w, sg));
    CHECK(ctx.asked == 2);
}

TEST_CASE("retire_send on an empty send queue changes nothing", "[qp]") {
    Fixture f;
    Qp qp = f.make_qp();
    QpObj* q = f.dev.qp_by_qpn(qp.qpn());
    f.dev.retire_send(q, WcStatus::success, WcOpcode::send, 0);
    CHECK(q->sq.empty());
    CHECK(q->sq.count() == 0);
    CHECK(f.drain().empty());
}

TEST_CASE("destroying a completion channel detaches its CQs", "[cq]") {
    Device d;
    auto cq = [&] {
        CompChannel ch;
        auto r = d.create_cq(4, &ch);
        REQUIRE(r.ok());
        CHECK(ch.cqs() == 1);
        return std::move(r.value);
    }();  // the channel is gone; the CQ lives on
    REQUIRE(cq.req_notify(false) == Status::ok);
    Wc wc;
    CHECK(d.complete(d.cq(cq.handle()), wc));  // no event to deliver, and no write to freed memory
    Wc out[1];
    CHECK(cq.poll(out) == 1);
    CHECK(cq.destroy() == Status::ok);
}

TEST_CASE("CQ resize keeps completions in order across the ring's wrap", "[cq]") {
    Fixture f;
    auto c = f.dev.create_cq(4);
    CqObj* o = f.dev.cq(c->handle());
    Wc wc, out[8];
    for (uint64_t i = 0; i < 3; ++i) {
        wc.wr_id = i;
        f.dev.complete(o, wc);
    }
    REQUIRE(c->poll({out, 2}) == 2);
    for (uint64_t i = 3; i < 6; ++i) {  // wraps: slots 3, 0, 1
        wc.wr_id = i;
        f.dev.complete(o, wc);
    }
    REQUIRE(c->resize(6) == Status::ok);
    REQUIRE(c->poll(out) == 4);
    for (uint64_t i = 0; i < 4; ++i) CHECK(out[i].wr_id == i + 2);
}

TEST_CASE("UD and UC reach RTS with their own required attributes", "[qp]") {
    Fixture f;
    Qp ud = f.make_qp(QpType::ud);
    f.to_rts(ud, QpType::ud);
    QpAttr q;
    ud.query(q);
    CHECK(q.qkey == 0x11111111);
    Qp uc = f.make_qp(QpType::uc);
    f.to_rts(uc, QpType::uc);
}

TEST_CASE("work request validation, with the first bad WR reported", "[qp][wr]") {
    Fixture f;
    Qp qp = f.make_qp(QpType::rc, 4, 4, 16);
    Sge sge{f.mr.addr(), 64, f.mr.lkey()};
    SendWr w;
    w.sg_list = &sge;
    w.num_sge = 1;
    const SendWr* bad = nullptr;
    CHECK(qp.post_send(&w, &bad) == Status::bad_qp_state);  // RESET
    CHECK(bad == &w);
    f.to_rts(qp);

    SendWr chain[3];
    for (int i = 0; i < 3; ++i) {
        chain[i].wr_id = uint64_t(i);
        chain[i].sg_list = &sge;
        chain[i].num_sge = 1;
        if (i) chain[i - 1].next = &chain[i];
    }
    chain[2].num_sge = 5;  // max_send_sge is 4
    CHECK(qp.post_send(&chain[0], &bad) == Status::too_many_sge);
    CHECK(bad == &chain[2]);
    CHECK(f.dev.qp_by_qpn(qp.qpn())->sq.count() == 2);  // the two before it were posted

    SendWr x = w;
    Sge bad_sge{f.mr.addr(), 64, f.mr.lkey() ^ 0x100};
    x.sg_list = &bad_sge;
    CHECK(qp.post_send(&x, &bad) == Status::bad_lkey);
    bad_sge = {f.mr.addr() + 4090, 64, f.mr.lkey()};  // runs off the MR's end
    CHECK(qp.post_send(&x, &bad) == Status::bad_lkey);
    x = w;
    x.send_flags = send_flag::inline_;
    uint8_t outside[32] = {};  // not registered memory, and an lkey that names nothing
    Sge big{reinterpret_cast<uintptr_t>(outside), 17, 0xDEAD00};
    x.sg_list = &big;
    CHECK(qp.post_send(&x, &bad) == Status::inline_too_large);
    big.length = 16;
    CHECK(qp.post_send(&x, &bad) == Status::ok);  // inline ignores lkeys
    CHECK(bad == nullptr);
    x = w;
    x.opcode = WrOpcode::atomic_fetch_and_add;
    Sge eight{f.mr.addr(), 8, f.mr.lkey()};
    x.sg_list = &eight;
    x.atomic.remote_addr = 0x1004;
    CHECK(qp.post_send(&x, &bad) == Status::misaligned);
    // the queue holds 4: 2 + 1 inline posted, one more fits
    CHECK(qp.post_send(&w, &bad) == Status::ok);
    CHECK(qp.post_send(&w, &bad) == Status::queue_full);

    Qp uc = f.make_qp(QpType::uc);
    f.to_rts(uc, QpType::uc);
    x = w;
    x.opcode = WrOpcode::rdma_read;
    CHECK(uc.post_send(&x, &bad) == Status::opcode_not_allowed);
    x.opcode = WrOpcode::atomic_cmp_and_swp;
    CHECK(uc.post_send(&x, &bad) == Status::opcode_not_allowed);
    x.opcode = WrOpcode::rdma_write_with_imm;
    CHECK(uc.post_send(&x, &bad) == Status::ok);
    // A bad second SGE: refused, nothing posted, no pin left on the first SGE's MR.
    const QpObj* qo = f.dev.qp_by_qpn(uc.qpn());
    const MrObj* mo = f.dev.mr(f.mr.handle());
    const uint64_t posted = qo->sq.count();
    const uint32_t pins = mo->pins.sum();
    Sge two[2] = {{f.mr.addr(), 64, f.mr.lkey()}, {f.mr.addr(), 8, f.mr.lkey() ^ 0x100}};
    x = w;
    x.sg_list = two;
    x.num_sge = 2;
    CHECK(uc.post_send(&x, &bad) == Status::bad_lkey);
    CHECK(qo->sq.count() == posted);
    CHECK(mo->pins.sum() == pins);
    // A total past max_msg_sz is invalid_argument, reported before the bad key it also holds.
    two[0] = {f.mr.addr(), 0x80000000u, f.mr.lkey() ^ 0x100};
    CHECK(uc.post_send(&x, &bad) == Status::invalid_argument);
    two[0] = {f.mr.addr(), 64, f.mr.lkey()};
    two[1].lkey = f.mr.lkey();
    CHECK(uc.post_send(&x, &bad) == Status::ok);  // both good: posted, both SGEs pin the MR
    CHECK(qo->sq.count() == posted + 1);
    CHECK(mo->pins.sum() == pins + 2);

    Qp ud = f.make_qp(QpType::ud);
    f.to_rts(ud, QpType::ud);
    x = w;
    CHECK(ud.post_send(&x, &bad) == Status::no_ah);
    AhAttr aa;
    aa.dgid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 2};
    auto ah = f.dev.create_ah(f.pd, aa);
    REQUIRE(ah.ok());
    x.ud.ah = &ah.value;
    x.ud.remote_qpn = 0x99;
    CHECK(ud.post_send(&x, &bad) == Status::ok);
    CHECK(ah->destroy() == Status::busy);  // a WQE names it
    x.opcode = WrOpcode::rdma_write;
    CHECK(ud.post_send(&x, &bad) == Status::opcode_not_allowed);
    x.opcode = WrOpcode::send;
    sge.length = 1025;  // UD messages fit one packet (active MTU 1024)
    CHECK(ud.post_send(&x, &bad) == Status::invalid_argument);

    RecvWr rw;
    Sge rs{f.mr.addr(), 4096, f.mr.lkey()};
    rw.sg_list = &rs;
    rw.num_sge = 1;
    const RecvWr* rbad = nullptr;
    for (int i = 0; i < 4; ++i) CHECK(qp.post_recv(&rw, &rbad) == Status::ok);
    CHECK(qp.post_recv(&rw, &rbad) == Status::queue_full);
    CHECK(rbad == &rw);
    std::vector<uint8_t> ro(64);
    auto romr = f.dev.reg_mr(f.pd, ro.data(), 64, access::remote_read);
    Sge ros{romr->addr(), 64, romr->lkey()};
    rw.sg_list = &ros;
    // Receive buffers need local write, but a bad key fails the WQE when it is used, not the post
    // (as rxe): posted, and the MR is not pinned by it.
    CHECK(uc.post_recv(&rw, &rbad) == Status::ok);
    CHECK(f.dev.mr(romr->handle())->pins.sum() == 0);
    CHECK(romr->destroy() == Status::ok);
}

TEST_CASE("entering ERR flushes every outstanding WR, in order, signaled or not", "[qp][flush]") {
    Fixture f;
    Qp qp = f.make_qp();
    f.to_rts(qp);
    Sge sge{f.mr.addr(), 8, f.mr.lkey()};
    SendWr w[3];
    w[0].wr_id = 10;
    w[0].opcode = WrOpcode::rdma_write;
    w[1].wr_id = 11;
    w[1].opcode = WrOpcode::rdma_read;
    w[1].send_flags = send_flag::signaled;
    w[2].wr_id = 12;
    w[2].opcode = WrOpcode::atomic_cmp_and_swp;
    for (auto& x : w) {
        x.sg_list = &sge;
        x.num_sge = 1;
    }
    w[0].next = &w[1];
    w[1].next = &w[2];
    const SendWr* bad;
    REQUIRE(qp.post_send(w, &bad) == Status::ok);
    RecvWr r[2];
    r[0].wr_id = 20;
    r[1].wr_id = 21;
    r[0].next = &r[1];
    const RecvWr* rbad;
    REQUIRE(qp.post_recv(r, &rbad) == Status::ok);
    CHECK(f.drain().empty());

    QpAttr a;
    a.qp_state = QpState::err;
    REQUIRE(qp.modify(a, qp_attr::state).ok());
    auto wc = f.drain();
    REQUIRE(wc.size() == 5);
    const uint64_t ids[] = {10, 11, 12, 20, 21};
    const WcOpcode ops[] = {WcOpcode::rdma_write, WcOpcode::rdma_read, WcOpcode::comp_swap, WcOpcode::recv, WcOpcode::recv};
    for (size_t i = 0; i < 5; ++i) {
        CHECK(wc[i].wr_id == ids[i]);
        CHECK(wc[i].status == WcStatus::wr_flush_err);
        CHECK(wc[i].opcode == ops[i]);
        CHECK(wc[i].qp_num == qp.qpn());
    }
    CHECK(f.dev.counters().get(Counter::req_cqe_flush_error) == 3);
    CHECK(f.dev.counters().get(Counter::resp_cqe_flush_error) == 2);
    // WRs posted in ERR are flushed at once
    w[2].next = nullptr;
    REQUIRE(qp.post_send(&w[2], &bad) == Status::ok);
    r[1].next = nullptr;
    REQUIRE(qp.post_recv(&r[1], &rbad) == Status::ok);
    wc = f.drain();
    REQUIRE(wc.size() == 2);
    CHECK(wc[0].wr_id == 12);
    CHECK(wc[1].wr_id == 21);
    CHECK(std::string(name(WcStatus::wr_flush_err)) == "Work Request Flushed Error");
    CHECK(std::string(id(WcStatus::wr_flush_err)) == "IBV_WC_WR_FLUSH_ERR");
}

TEST_CASE("RESET drops the QP's unpolled CQEs from its CQs, keeps other QPs' in order", "[qp][flush]") {
    Fixture f;
    Qp qp = f.make_qp(), other = f.make_qp();
    f.to_rts(qp);
    f.to_rts(other);
    RecvWr r[3];
    r[0].wr_id = 30;
    r[1].wr_id = 31;
    r[2].wr_id = 32;
    const RecvWr* rbad;
    REQUIRE(qp.post_recv(&r[0], &rbad) == Status::ok);
    REQUIRE(other.post_recv(&r[1], &rbad) == Status::ok);
    REQUIRE(qp.post_recv(&r[2], &rbad) == Status::ok);
    QpAttr a;
    a.qp_state = QpState::err;
    REQUIRE(qp.modify(a, qp_attr::state).ok());
    REQUIRE(other.modify(a, qp_attr::state).ok());  // CQ: 30, 32 (qp), then 31 (other)
    a.qp_state = QpState::reset;
    REQUIRE(qp.modify(a, qp_attr::state).ok());
    const auto wc = f.drain();
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].wr_id == 31);
    CHECK(wc[0].qp_num == other.qpn());
}

TEST_CASE("CQ overflow raises CQ_ERR and moves the attached QPs to error", "[cq]") {
    Fixture f;
    auto small = f.dev.create_cq(2);
    REQUIRE(small.ok());
    QpInitAttr ia;
    ia.send_cq = &small.value;
    ia.recv_cq = &f.cq;
    ia.cap = {8, 8, 1, 1, 0};
    auto qp = f.dev.create_qp(f.pd, ia);
    REQUIRE(qp.ok());
    f.to_rts(qp.value);
    Sge sge{f.mr.addr(), 8, f.mr.lkey()};
    SendWr w[3];
    for (int i = 0; i < 3; ++i) {
        w[i].wr_id = uint64_t(100 + i);
        w[i].sg_list = &sge;
        w[i].num_sge = 1;
    }
    const SendWr* bad;
    for (auto& x : w) REQUIRE(qp->post_send(&x, &bad) == Status::ok);
    RecvWr r;
    r.wr_id = 7;
    const RecvWr* rbad;
    REQUIRE(qp->post_recv(&r, &rbad) == Status::ok);
    // Three completions into a CQ of two (as the transport would add them):
    QpObj* q = f.dev.qp_by_qpn(qp->qpn());
    CqObj* c = f.dev.cq(small->handle());
    Wc wc;
    wc.qp_num = q->qpn;
    for (int i = 0; i < 2; ++i) {
        wc.wr_id = q->sq.at(q->sq.head++).wr_id;
        CHECK(f.dev.complete(c, wc));
    }
    wc.wr_id = q->sq.at(q->sq.head++).wr_id;
    CHECK_FALSE(f.dev.complete(c, wc));
    CHECK(c->overflowed);
    CHECK(qp->state() == QpState::err);
    auto ev = events(f.dev);
    REQUIRE(ev.size() == 2);
    CHECK(ev[0].type == EventType::cq_err);
    CHECK(ev[0].element == small->handle());
    CHECK(ev[1].type == EventType::qp_fatal);
    CHECK(ev[1].element == qp->qpn());
    CHECK(f.dev.counters().get(Counter::cq_overflow) == 1);
    // the receive side flushed into its own (healthy) CQ
    auto rwc = f.drain();
    REQUIRE(rwc.size() == 1);
    CHECK(rwc[0].wr_id == 7);
    CHECK(rwc[0].status == WcStatus::wr_flush_err);
    Wc out[4];
    REQUIRE(small->poll(out) == 2);
    CHECK(out[0].wr_id == 100);
    CHECK(out[1].wr_id == 101);
}

TEST_CASE("CQ: poll order, resize, notification requests and the completion channel", "[cq]") {
    Fixture f;
    CqObj* c = f.dev.cq(f.cq.handle());
    Wc wc;
    for (uint64_t i = 0; i < 5; ++i) {
        wc.wr_id = i;
        f.dev.complete(c, wc);
    }
    REQUIRE(f.cq.resize(4) == Status::invalid_argument);  // holds 5
    REQUIRE(f.cq.resize(8) == Status::ok);
    CHECK(f.cq.cqe() == 8);
    Wc out[8];
    REQUIRE(f.cq.poll({out, 2}) == 2);
    CHECK(out[0].wr_id == 0);
    CHECK(out[1].wr_id == 1);
    REQUIRE(f.cq.poll(out) == 3);
    CHECK(out[2].wr_id == 4);
    CHECK(f.cq.poll(out) == 0);

    CqEvent ev;
    CHECK_FALSE(f.ch.get_cq_event(ev));
    f.dev.complete(c, wc);  // not armed: no event
    CHECK(f.ch.pending() == 0);
    REQUIRE(f.cq.req_notify(false) == Status::ok);
    f.dev.complete(c, wc);
    REQUIRE(f.ch.pending() == 1);
    pollfd p{f.ch.fd(), POLLIN, 0};
    CHECK(poll(&p, 1, 0) == 1);  // the eventfd is readable
    f.dev.complete(c, wc);       // one event per request
    CHECK(f.ch.pending() == 1);
    REQUIRE(f.ch.get_cq_event(ev));
    CHECK(ev.cq_handle == f.cq.handle());
    CHECK(ev.cq_context == 0xC0FFEE);
    CHECK(poll(&p, 1, 0) == 0);
    CHECK(f.cq.destroy() == Status::busy);  // one event not acknowledged
    f.cq.ack_events(1);

    REQUIRE(f.cq.req_notify(true) == Status::ok);  // solicited only
    f.dev.complete(c, wc, false);
    CHECK(f.ch.pending() == 0);
    f.dev.complete(c, wc, true);
    CHECK(f.ch.pending() == 1);
    REQUIRE(f.cq.req_notify(true) == Status::ok);
    wc.status = WcStatus::rem_access_err;  // errors always notify
    f.dev.complete(c, wc, false);
    CHECK(f.ch.pending() == 2);
    CHECK(f.dev.create_cq(0).status == Status::invalid_argument);
    CHECK(f.dev.create_cq(int(f.dev.query_device().max_cqe) + 1).status == Status::invalid_argument);
}

TEST_CASE("SRQ: shared receives, the limit event, refusal while used", "[srq]") {
    Fixture f;
    SrqAttr sa{8, 2, 0};
    auto srq = f.dev.create_srq(f.pd, sa);
    REQUIRE(srq.ok());
    QpInitAttr ia;
    ia.send_cq = &f.cq;
    ia.recv_cq = &f.cq;
    ia.srq = &srq.value;
    ia.cap = {4, 99, 1, 99, 0};
    auto qp = f.dev.create_qp(f.pd, ia);
    REQUIRE(qp.ok());
    CHECK(ia.cap.max_recv_wr == 0);  // receives come from the SRQ
    Sge sge{f.mr.addr(), 100, f.mr.lkey()};
    RecvWr r[4];
    for (int i = 0; i < 4; ++i) {
        r[i].wr_id = uint64_t(i);
        r[i].sg_list = &sge;
        r[i].num_sge = 1;
        if (i) r[i - 1].next = &r[i];
    }
    const RecvWr* bad;
    REQUIRE(srq->post_recv(r, &bad) == Status::ok);
    CHECK(qp->post_recv(r, &bad) == Status::invalid_argument);
    SrqAttr lim;
    lim.srq_limit = 3;
    REQUIRE(srq->modify(lim, srq_attr::limit) == Status::ok);
    CHECK(srq->modify(lim, srq_attr::max_wr) == Status::not_supported);
    lim.srq_limit = 9;
    CHECK(srq->modify(lim, srq_attr::limit) == Status::invalid_argument);

    QpObj* q = f.dev.qp_by_qpn(qp->qpn());
    RecvWqe w;
    Sge sg[2];
    REQUIRE(f.dev.take_recv(q, w, sg));
    CHECK(w.wr_id == 0);
    CHECK(w.length == 100);
    CHECK(sg[0].lkey == f.mr.lkey());
    CHECK(events(f.dev).empty());  // 3 left: not below the limit
    REQUIRE(f.dev.take_recv(q, w, sg));
    auto ev = events(f.dev);
    REQUIRE(ev.size() == 1);
    CHECK(ev[0].type == EventType::srq_limit_reached);
    CHECK(ev[0].element == srq->handle());
    SrqAttr now;
    srq->query(now);
    CHECK(now.srq_limit == 0);  // disarmed until set again
    REQUIRE(f.dev.take_recv(q, w, sg));
    REQUIRE(f.dev.take_recv(q, w, sg));
    CHECK(w.wr_id == 3);
    CHECK_FALSE(f.dev.take_recv(q, w, sg));
    CHECK(events(f.dev).empty());
    CHECK(srq->destroy() == Status::busy);
    // ERR on an SRQ QP: the last-WQE event (the SRQ's WQEs are not flushed)
    QpAttr a;
    a.qp_state = QpState::err;
    REQUIRE(qp->modify(a, qp_attr::state).ok());
    ev = events(f.dev);
    REQUIRE(ev.size() == 1);
    CHECK(ev[0].type == EventType::qp_last_wqe_reached);
    REQUIRE(qp->destroy() == Status::ok);
    CHECK(srq->destroy() == Status::ok);
    SrqAttr too_big{f.dev.query_device().max_srq_wr + 1, 1, 0};
    CHECK(f.dev.create_srq(f.pd, too_big).status == Status::invalid_argument);
}

TEST_CASE("AH validation", "[ah]") {
    Fixture f;
    AhAttr a;
    CHECK(f.dev.create_ah(f.pd, a).ok());
    a.sgid_index = 5;
    CHECK(f.dev.create_ah(f.pd, a).status == Status::invalid_argument);
    a.sgid_index = 0;
    a.port_num = 2;
    CHECK(f.dev.create_ah(f.pd, a).status == Status::invalid_argument);
    a.port_num = 1;
    a.flow_label = 1u << 20;
    CHECK(f.dev.create_ah(f.pd, a).status == Status::invalid_argument);
}

TEST_CASE("DMA gather and scatter across SGE boundaries and MR ends", "[dma]") {
    Fixture f;
    for (size_t i = 0; i < f.buf.size(); ++i) f.buf[i] = uint8_t(i * 7);
    std::vector<uint8_t> b2(100, 0xEE);
    auto mr2 = f.dev.reg_mr(f.pd, b2.data(), b2.size(), access::local_write);
    const PdObj* pd = f.dev.pd(f.pd.handle());
    // three pieces: the last 10 bytes of MR 1, all 100 of MR 2, 5 bytes at the start of MR 1
    Sge sgl[3] = {{f.mr.addr() + 4086, 10, f.mr.lkey()}, {mr2->addr(), 100, mr2->lkey()}, {f.mr.addr(), 5, f.mr.lkey()}};
    std::vector<uint8_t> out(115);
    REQUIRE(f.dev.dma().gather(pd, sgl, 3, 0, out) == MrError::ok);
    for (size_t i = 0; i < 10; ++i) CHECK(out[i] == uint8_t((4086 + i) * 7));
    for (size_t i = 10; i < 110; ++i) CHECK(out[i] == 0xEE);
    for (size_t i = 110; i < 115; ++i) CHECK(out[i] == uint8_t((i - 110) * 7));
    // from an offset in the middle of the second SGE
    std::vector<uint8_t> mid(20);
    REQUIRE(f.dev.dma().gather(pd, sgl, 3, 95, mid) == MrError::ok);
    for (size_t i = 0; i < 15; ++i) CHECK(mid[i] == 0xEE);
    for (size_t i = 15; i < 20; ++i) CHECK(mid[i] == uint8_t((i - 15) * 7));
    CHECK(f.dev.dma().gather(pd, sgl, 3, 100, mid) == MrError::length);  // asks past the list

    // scatter inside one SGE, from an offset into the second: only those bytes change
    {
        const auto b1 = f.buf;
        std::vector<uint8_t> piece(50);
        for (size_t i = 0; i < piece.size(); ++i) piece[i] = uint8_t(100 + i);
        REQUIRE(f.dev.dma().scatter(pd, sgl, 3, 12, piece) == MrError::ok);  // bytes 2..51 of MR 2
        for (size_t i = 0; i < 100; ++i) CHECK(b2[i] == (i >= 2 && i < 52 ? uint8_t(100 + i - 2) : 0xEE));
        CHECK(f.buf == b1);
        std::fill(b2.begin(), b2.end(), 0xEE);
    }

    // scatter across all three, then check every byte
    std::vector<uint8_t> in(115);
    for (size_t i = 0; i < in.size(); ++i) in[i] = uint8_t(200 + i);
    REQUIRE(f.dev.dma().scatter(pd, sgl, 3, 0, in) == MrError::ok);
    for (size_t i = 0; i < 10; ++i) CHECK(f.buf[4086 + i] == uint8_t(200 + i));
    for (size_t i = 0; i < 100; ++i) CHECK(b2[i] == uint8_t(210 + i));
    for (size_t i = 0; i < 5; ++i) CHECK(f.buf[i] == uint8_t(200 + 110 + i));

    // an SGE that runs past its MR's end: refused, and nothing is written anywhere
    const auto before = f.buf;
    const auto before2 = b2;
    Sge over[2] = {{mr2->addr(), 100, mr2->lkey()}, {f.mr.addr() + 4090, 10, f.mr.lkey()}};
    CHECK(f.dev.dma().scatter(pd, over, 2, 0, in) == MrError::out_of_bounds);
    CHECK(f.buf == before);
    CHECK(b2 == before2);
    // no local write on a read-only MR
    std::vector<uint8_t> ro(16);
    auto romr = f.dev.reg_mr(f.pd, ro.data(), ro.size(), access::remote_read);
    Sge r1{romr->addr(), 16, romr->lkey()};
    CHECK(f.dev.dma().scatter(pd, &r1, 1, 0, std::span<const uint8_t>(in.data(), 16)) == MrError::access_denied);
    CHECK(std::all_of(ro.begin(), ro.end(), [](uint8_t b) { return b == 0; }));  // one SGE, refused: nothing written
    CHECK(f.dev.dma().gather(pd, &r1, 1, 0, std::span<uint8_t>(out.data(), 16)) == MrError::ok);
    CHECK(f.dev.counters().get(Counter::dma_access_errors) == 3);
}

TEST_CASE("DMA remote access through R_Keys, and atomics", "[dma]") {
    Fixture f;
    const PdObj* pd = f.dev.pd(f.pd.handle());
    DmaEngine& d = f.dev.dma();
    const uint8_t data[5] = {1, 2, 3, 4, 5};
    REQUIRE(d.remote_write(pd, f.mr.rkey(), f.mr.addr() + 4091, data) == MrError::ok);
    CHECK(f.buf[4095] == 5);
    CHECK(d.remote_write(pd, f.mr.rkey(), f.mr.addr() + 4092, data) == MrError::out_of_bounds);
    CHECK(f.buf[4092] == 2);  // unchanged by the refused write
    CHECK(d.remote_write(pd, f.mr.rkey() + 1, f.mr.addr(), data) == MrError::bad_key);
    uint8_t back[5];
    REQUIRE(d.remote_read(pd, f.mr.rkey(), f.mr.addr() + 4091, back) == MrError::ok);
    CHECK(std::memcmp(back, data, 5) == 0);

    uint64_t v = 40, orig = 0;
    std::memcpy(&f.buf[64], &v, 8);
    REQUIRE(d.atomic(pd, f.mr.rkey(), f.mr.addr() + 64, AtomicOp::fetch_add, 2, 0, orig) == MrError::ok);
    CHECK(orig == 40);
    std::memcpy(&v, &f.buf[64], 8);
    CHECK(v == 42);
    REQUIRE(d.atomic(pd, f.mr.rkey(), f.mr.addr() + 64, AtomicOp::cmp_swap, 41, 7, orig) == MrError::ok);
    std::memcpy(&v, &f.buf[64], 8);
    CHECK(v == 42);  // compare failed: unchanged
    REQUIRE(d.atomic(pd, f.mr.rkey(), f.mr.addr() + 64, AtomicOp::cmp_swap, 42, 7, orig) == MrError::ok);
    CHECK(orig == 42);
    std::memcpy(&v, &f.buf[64], 8);
    CHECK(v == 7);
    CHECK(d.atomic(pd, f.mr.rkey(), f.mr.addr() + 65, AtomicOp::fetch_add, 1, 0, orig) == MrError::misaligned);
    CHECK(d.atomic(pd, f.mr.rkey(), f.mr.addr() + 4092, AtomicOp::fetch_add, 1, 0, orig) == MrError::out_of_bounds);
    std::vector<uint8_t> nw(64);
    auto no_atomic = f.dev.reg_mr(f.pd, nw.data(), 64, access::local_write | access::remote_write);
    CHECK(d.atomic(pd, no_atomic->rkey(), no_atomic->addr(), AtomicOp::fetch_add, 1, 0, orig) == MrError::access_denied);
    CHECK(f.dev.counters().get(Counter::dma_bytes_written) == 5 + 8 * 3);
}

TEST_CASE("counters and status names are stable", "[device]") {
    CHECK(std::string(kCounterName[size_t(Counter::duplicate_request)]) == "duplicate_request");
    CHECK(std::string(kCounterName[size_t(Counter::local_ack_timeout_err)]) == "local_ack_timeout_err");
    CHECK(std::string(name(Status::bad_lkey)) == "bad_lkey");
    CHECK(to_errno(Status::queue_full) == 12);
    CHECK(to_errno(Status::busy) == 16);
    CHECK(std::string(name(QpState::rts)) == "RTS");
    CHECK(std::string(qp_attr_name(7)) == "IBV_QP_AV");
}

TEST_CASE("more work request validation: receives, SRQ, atomics, inline, foreign objects", "[qp][wr]") {
    Fixture f;
    Qp qp = f.make_qp();
    Sge five[5];
    for (auto& s : five) s = {f.mr.addr(), 8, f.mr.lkey()};
    RecvWr r;
    r.sg_list = five;
    r.num_sge = 5;  // max_recv_sge is 4
    const RecvWr* rbad = nullptr;
    CHECK(qp.post_recv(&r, &rbad) == Status::bad_qp_state);  // RESET
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    REQUIRE(qp.modify(a, qp_attr::state | qp_attr::port | qp_attr::pkey_index | qp_attr::access_flags).ok());
    CHECK(qp.post_recv(&r, &rbad) == Status::too_many_sge);
    SendWr w;
    w.sg_list = five;
    w.num_sge = 1;
    const SendWr* bad = nullptr;
    CHECK(qp.post_send(&w, &bad) == Status::bad_qp_state);  // INIT

    SrqAttr sa{2, 1, 0};
    auto srq = f.dev.create_srq(f.pd, sa);
    r.num_sge = 2;
    CHECK(srq->post_recv(&r, &rbad) == Status::too_many_sge);
    r.num_sge = 1;
    Sge foreign{f.mr.addr(), 8, f.mr.lkey() + 0x100};
    r.sg_list = &foreign;
    CHECK(srq->post_recv(&r, &rbad) == Status::ok);  // a bad key fails at use
    r.sg_list = five;
    CHECK(srq->post_recv(&r, &rbad) == Status::ok);
    CHECK(srq->post_recv(&r, &rbad) == Status::queue_full);

    Qp rc = f.make_qp();
    f.to_rts(rc);
    SendWr x;
    x.opcode = WrOpcode::atomic_fetch_and_add;
    Sge four{f.mr.addr(), 4, f.mr.lkey()};
    x.sg_list = &four;
    x.num_sge = 1;
    CHECK(rc.post_send(&x, &bad) == Status::invalid_argument);  // an atomic returns 8 bytes
    x.opcode = WrOpcode::rdma_read;
    x.send_flags = send_flag::inline_;
    CHECK(rc.post_send(&x, &bad) == Status::invalid_argument);  // READ cannot be inline
    // an MR of another PD
    auto pd2 = f.dev.alloc_pd();
    std::vector<uint8_t> b(64);
    auto mr2 = f.dev.reg_mr(pd2.value, b.data(), 64, access::local_write);
    Sge other{mr2->addr(), 8, mr2->lkey()};
    x = SendWr{};
    x.sg_list = &other;
    x.num_sge = 1;
    CHECK(rc.post_send(&x, &bad) == Status::bad_lkey);
    // an AH of another PD, and of another device
    Qp ud = f.make_qp(QpType::ud);
    f.to_rts(ud, QpType::ud);
    auto ah2 = f.dev.create_ah(pd2.value, AhAttr{});
    x.sg_list = five;
    x.ud.ah = &ah2.value;
    CHECK(ud.post_send(&x, &bad) == Status::no_ah);
    Device other_dev;
    auto opd = other_dev.alloc_pd();
    auto oah = other_dev.create_ah(opd.value, AhAttr{});
    x.ud.ah = &oah.value;
    CHECK(ud.post_send(&x, &bad) == Status::no_ah);
    // atomics are refused when the device has no atomic capability
    DeviceAttr na;
    na.atomic_cap = AtomicCap::none;
    Device d2(na);
    CHECK(d2.query_device().atomic_cap == AtomicCap::none);
}

TEST_CASE("an MR with its own iova (ibv_reg_mr_iova): SGEs, R_Keys and atomics name the iova, bytes land at host", "[dma][mr]") {
    Fixture f;
    const PdObj* pd = f.dev.pd(f.pd.handle());
    std::vector<uint8_t> host(256, 0);
    for (size_t i = 0; i < host.size(); ++i) host[i] = uint8_t(i);
    constexpr uint64_t kIova = 0x7f0000001000ull;  // the client's address, not ours
    auto mr = f.dev.reg_mr(f.pd, host.data(), host.size(), kIova, kAllAccess);
    REQUIRE(mr.ok());
    CHECK(mr->addr() == kIova);
    CHECK(mr->length() == 256);
    // gather 8 bytes at iova+16 -> host[16..24)
    Sge s{kIova + 16, 8, mr->lkey()};
    std::vector<uint8_t> out(8);
    REQUIRE(f.dev.dma().gather(pd, &s, 1, 0, out) == MrError::ok);
    CHECK(out == std::vector<uint8_t>{16, 17, 18, 19, 20, 21, 22, 23});
    // scatter at iova+250 -> host[250..256); one past the end refused, nothing written
    const uint8_t six[6] = {0xA0, 0xA1, 0xA2, 0xA3, 0xA4, 0xA5};
    Sge s2{kIova + 250, 6, mr->lkey()};
    REQUIRE(f.dev.dma().scatter(pd, &s2, 1, 0, six) == MrError::ok);
    CHECK(std::memcmp(&host[250], six, 6) == 0);
    const auto before = host;
    const uint8_t seven[7] = {};
    Sge s3{kIova + 250, 7, mr->lkey()};
    CHECK(f.dev.dma().scatter(pd, &s3, 1, 0, seven) == MrError::out_of_bounds);
    CHECK(host == before);
    // the host address is no address of this MR
    Sge s4{uint64_t(reinterpret_cast<uintptr_t>(host.data())), 8, mr->lkey()};
    CHECK(f.dev.dma().gather(pd, &s4, 1, 0, out) == MrError::out_of_bounds);
    // remote write, read and atomic by iova
    const uint8_t w[4] = {9, 8, 7, 6};
    REQUIRE(f.dev.dma().remote_write(pd, mr->rkey(), kIova + 100, w) == MrError::ok);
    CHECK(std::memcmp(&host[100], w, 4) == 0);
    uint8_t r[3] = {};
    REQUIRE(f.dev.dma().remote_read(pd, mr->rkey(), kIova + 1, r) == MrError::ok);
    CHECK((r[0] == 1 && r[1] == 2 && r[2] == 3));
    uint64_t v = 40;
    std::memcpy(&host[64], &v, 8);
    uint64_t orig = 0;
    REQUIRE(f.dev.dma().atomic(pd, mr->rkey(), kIova + 64, AtomicOp::fetch_add, 2, 0, orig) == MrError::ok);
    CHECK(orig == 40);
    std::memcpy(&v, &host[64], 8);
    CHECK(v == 42);
    // rereg of the access keeps the iova; a new translation names the new address
    Mr m = std::move(mr.value);
    REQUIRE(m.rereg(rereg::change_access, nullptr, nullptr, 0, access::local_write) == Status::ok);
    CHECK(m.addr() == kIova);
    REQUIRE(m.rereg(rereg::change_translation, nullptr, host.data(), 128, 0) == Status::ok);
    CHECK(m.addr() == uint64_t(reinterpret_cast<uintptr_t>(host.data())));
    CHECK(m.length() == 128);
    // an iova range that wraps is refused
    CHECK(f.dev.reg_mr(f.pd, host.data(), 256, ~uint64_t(0) - 100, 0).status == Status::invalid_argument);
}

TEST_CASE("P_Key table: ibv_query_pkey, its length in the port and device attributes, pkey_index bounds", "[device]") {
    Fixture f;
    uint16_t k = 0;
    REQUIRE(f.dev.query_pkey(1, 0, k) == Status::ok);
    CHECK(k == 0xFFFF);  // the default partition, full member
    CHECK(f.dev.query_pkey(1, 1, k) == Status::invalid_argument);
    CHECK(f.dev.query_pkey(2, 0, k) == Status::invalid_argument);
    PortConfig pc;
    pc.pkeys = {0xFFFF, 0x8123, 0x0123};
    Device d(DeviceAttr{}, pc);
    PortAttr p;
    REQUIRE(d.query_port(1, p) == Status::ok);
    CHECK(p.pkey_tbl_len == 3);
    CHECK(d.query_device().max_pkeys == 3);
    REQUIRE(d.query_pkey(1, 2, k) == Status::ok);
    CHECK(k == 0x0123);
    CHECK(d.pkey(1) == 0x8123);
    CHECK(d.pkey(3) == 0);  // past the table: no partition
    pc.pkeys.clear();       // an empty table still has the default entry
    Device e(DeviceAttr{}, pc);
    REQUIRE(e.query_pkey(1, 0, k) == Status::ok);
    CHECK(k == 0xFFFF);
    // A QP's pkey_index must name an entry.
    auto pd = d.alloc_pd();
    auto cq = d.create_cq(8);
    QpInitAttr ia;
    ia.send_cq = ia.recv_cq = &cq.value;
    ia.cap = {4, 4, 1, 1, 0};
    auto qp = d.create_qp(pd.value, ia);
    REQUIRE(qp.ok());
    QpAttr a;
    a.qp_state = QpState::init;
    a.pkey_index = 3;
    const uint32_t m = qp_attr::state | qp_attr::pkey_index | qp_attr::port | qp_attr::access_flags;
    CHECK(qp.value.modify(a, m).status == Status::invalid_argument);
    a.pkey_index = 2;
    CHECK(qp.value.modify(a, m).ok());
}

TEST_CASE("pkey_match: IBTA 10.9.3, equal non-zero 15-bit keys with at least one full member", "[device]") {
    CHECK(pkey_match(0xFFFF, 0xFFFF));
    CHECK(pkey_match(0x7FFF, 0xFFFF));
    CHECK(pkey_match(0xFFFF, 0x7FFF));
    CHECK_FALSE(pkey_match(0x7FFF, 0x7FFF));  // two limited members
    CHECK_FALSE(pkey_match(0x8123, 0x8124));
    CHECK_FALSE(pkey_match(0x8000, 0x8000));  // key 0: no partition
    CHECK_FALSE(pkey_match(0x0000, 0x8000));
    CHECK_FALSE(pkey_match(0x0000, 0x0000));
    CHECK(pkey_match(0x0123, 0x8123));
}

TEST_CASE("qp_to_sqe: UC and UD flush the send queue only and resume at SQE -> RTS; RC goes to ERR", "[qp]") {
    Fixture f;
    for (QpType t : {QpType::uc, QpType::ud}) {
        Qp qp = f.make_qp(t);
        f.to_rts(qp, t);
        Sge sge{f.mr.addr(), 16, f.mr.lkey()};
        RecvWr r;
        r.wr_id = 7;
        r.sg_list = &sge;
        r.num_sge = 1;
        const RecvWr* rbad;
        REQUIRE(qp.post_recv(&r, &rbad) == Status::ok);
        QpObj* q = f.dev.qp_by_qpn(qp.qpn());
        // A send WQE in the queue (posted without the transport: it stays there).
        auto ah = f.dev.create_ah(f.pd, AhAttr{.dgid = pkt::ipv4_mapped_gid(0xC6120002), .sgid_index = 1});
        REQUIRE(ah.ok());
        SendWr w;
        w.wr_id = 3;
        w.sg_list = &sge;
        w.num_sge = 1;
        w.ud.ah = &ah.value;
        const SendWr* bad;
        REQUIRE(qp.post_send(&w, &bad) == Status::ok);
        f.dev.qp_to_sqe(q);
        CHECK(qp.state() == QpState::sqe);
        auto wc = f.drain();
        REQUIRE(wc.size() == 1);  // the send flushed; the receive stays posted
        CHECK((wc[0].wr_id == 3 && wc[0].status == WcStatus::wr_flush_err));
        CHECK(q->rq.count() == 1);
        CHECK(events(f.dev).empty());
        QpAttr a;
        a.qp_state = QpState::rts;
        REQUIRE(qp.modify(a, qp_attr::state).ok());
        CHECK(qp.state() == QpState::rts);
    }
    Qp rc = f.make_qp(QpType::rc);
    f.to_rts(rc);
    f.dev.qp_to_sqe(f.dev.qp_by_qpn(rc.qpn()));
    CHECK(rc.state() == QpState::err);
    CHECK(events(f.dev).empty());  // an error a completion reports: no QP_FATAL
}

TEST_CASE("RC with max_rd_atomic 0: READ and atomics are refused at post (initiator depth 0)", "[qp]") {
    Fixture f;
    Qp qp = f.make_qp();
    f.to_rts(qp);
    QpAttr a;
    a.max_rd_atomic = 0;
    a.qp_state = QpState::sqd;
    REQUIRE(qp.modify(a, qp_attr::state).ok());
    REQUIRE(qp.modify(a, qp_attr::max_qp_rd_atomic).ok());
    Sge sge{f.mr.addr(), 8, f.mr.lkey()};
    SendWr w;
    w.sg_list = &sge;
    w.num_sge = 1;
    w.rdma.remote_addr = w.atomic.remote_addr = 0x1000;
    const SendWr* bad;
    for (WrOpcode o : {WrOpcode::rdma_read, WrOpcode::atomic_cmp_and_swp, WrOpcode::atomic_fetch_and_add}) {
        w.opcode = o;
        CHECK(qp.post_send(&w, &bad) == Status::invalid_argument);
        CHECK(bad == &w);
    }
    w.opcode = WrOpcode::rdma_write;
    CHECK(qp.post_send(&w, &bad) == Status::ok);
}
