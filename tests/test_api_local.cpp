// libhcaemu in-process (tools/libhcaemu/local.cpp): open_device's specs, and two api::Contexts over
// DPDK's net_ring pair in this process doing RC SEND and WRITE through the API only: buffers,
// objects, completion events, res_list and read_stats checked against the device's own state.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "dpdk_port/dpdk.hpp"
#include "dpdk_port/net_port.hpp"
#include "tools/attach/attach.hpp"
#include "tools/libhcaemu/api.hpp"

using namespace hcaemu;

namespace {

std::string attr(const api::ResEntry& e, const std::string& n) {
    for (const auto& [k, v] : e.attrs)
        if (k == n) return v;
    return "<none>";
}

// A Pd of another implementation (a daemon client's, say): a local context must refuse it.
class ForeignPd final : public api::Pd {
public:
    Status destroy() override { return Status::ok; }
    uint32_t handle() const override { return 256; }
};

// Turns both engines until `cond` or `turns` turns.
template <class C>
bool turn_until(api::Context& a, api::Context& b, C cond, int turns = 200000) {
    for (int i = 0; i < turns; ++i) {
        if (cond()) return true;
        a.poll();
        b.poll();
    }
    return cond();
}

// Resolves a's peer (ARP) while b answers: each try is a non-blocking look at the neighbour table.
bool resolve(api::Context& a, api::Context& b) {
    std::string err;
    for (int i = 0; i < 100000; ++i) {
        if (a.resolve(b.gid(), 0, err)) return true;
        a.poll();
        b.poll();
    }
    return false;
}

}  // namespace

namespace {
std::string hex(uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
    return b;
}
}  // namespace

TEST_CASE("open_device: the spec picks the device, bad specs are refused with a reason") {
    std::string err;
    CHECK_FALSE(api::open_device("tcp:1.2.3.4", {}, err));
    CHECK(err == "unknown device 'tcp:1.2.3.4': use unix:PATH (a running hcaemud) or local (an in-process HCA)");
    CHECK_FALSE(api::open_device("unix:", {}, err));
    CHECK(err == "device 'unix:' names no socket: use unix:PATH");
    CHECK_FALSE(api::open_device("unix:/nonexistent-hcaemu-dir/x.sock", {}, err));
    CHECK(err.rfind("cannot connect to unix:/nonexistent-hcaemu-dir/x.sock: ", 0) == 0);
    CHECK_FALSE(api::open_device("local", {}, err));  // no --ip
    CHECK(err == "--ip ADDR/LEN is required: the address this HCA answers ARP/ND for and puts in its GID table");
}

TEST_CASE("two in-process contexts on a net_ring pair: RC SEND and WRITE through the API") {
    std::string err;
    REQUIRE(port::eal_start(port::default_eal_args(), err));
    uint16_t pa = 0, pb = 0;
    REQUIRE(port::make_ring_pair("apil", pa, pb, err));
    tools::AttachOptions oa, ob;
    oa.port = "net_ring_apil_a";
    oa.ip = "198.18.0.1/24";
    oa.mac = tools::parse_mac("02:00:00:00:00:0a");
    ob.port = "net_ring_apil_b";
    ob.ip = "198.18.0.2/24";
    ob.mac = tools::parse_mac("02:00:00:00:00:0b");
    auto a = api::open_device("", oa, err);
    INFO(err);
    REQUIRE(a);
    auto b = api::open_device("local", ob, err);
    INFO(err);
    REQUIRE(b);

    CHECK(a->name() == "hcaemu0");
    CHECK(a->alive());
    CHECK(tools::gid_to_string(a->gid()) == "198.18.0.1");
    CHECK(a->gid_index() == 1);
    GidEntry ge;
    REQUIRE(a->query_gid(1, a->gid_index(), ge) == Status::ok);
    CHECK(ge.gid == a->gid());
    PortAttr pattr;
    REQUIRE(a->query_port(1, pattr) == Status::ok);
    CHECK(pattr.active_mtu == Mtu::mtu1024);

    // Buffers: page-aligned, zeroed, of the size asked for.
    CHECK(a->alloc_buffer(0).status == Status::invalid_argument);
    auto ba = a->alloc_buffer(5000);
    REQUIRE(ba.ok());
    auto bb = b->alloc_buffer(5000);
    REQUIRE(bb.ok());
    CHECK(ba.value.size == 5000);
    CHECK(reinterpret_cast<uintptr_t>(ba.value.data) % uintptr_t(sysconf(_SC_PAGESIZE)) == 0);
    bool zero = true;
    for (size_t i = 0; i < 5000; ++i) zero = zero && ba.value.data[i] == 0 && bb.value.data[i] == 0;
    CHECK(zero);

    auto pda = a->alloc_pd();
    auto pdb = b->alloc_pd();
    REQUIRE(pda.ok());
    REQUIRE(pdb.ok());
    const uint32_t acc = access::local_write | access::remote_write;
    auto mra = a->reg_mr(*pda.value, ba.value.data, 5000, acc);
    auto mrb = b->reg_mr(*pdb.value, bb.value.data, 5000, acc);
    REQUIRE(mra.ok());
    REQUIRE(mrb.ok());
    CHECK(mra.value->addr() == reinterpret_cast<uintptr_t>(ba.value.data));
    CHECK(mra.value->length() == 5000);
    ForeignPd foreign;
    CHECK(a->reg_mr(foreign, ba.value.data, 64, acc).status == Status::bad_handle);
    CHECK(b->reg_mr(*pda.value, bb.value.data, 64, acc).status == Status::bad_handle);  // a's PD on b
    CHECK(a->alloc_pd().value->destroy() == Status::ok);

    auto cha = a->create_comp_channel();
    REQUIRE(cha.ok());
    auto cqa = a->create_cq(16);
    auto cqb = b->create_cq(16, cha.value.get(), 0x77);
    CHECK(cqb.status == Status::bad_handle);  // a's channel is not b's
    auto chb = b->create_comp_channel();
    REQUIRE(chb.ok());
    cqb = b->create_cq(16, chb.value.get(), 0x77);
    REQUIRE(cqa.ok());
    REQUIRE(cqb.ok());
    CHECK(cqa.value->cqe() >= 16);

    api::QpInitAttr ia;
    ia.send_cq = cqa.value.get();
    ia.recv_cq = cqa.value.get();
    ia.cap = {8, 8, 1, 1, 0};
    CHECK(a->create_qp(foreign, ia).status == Status::bad_handle);
    auto qpa = a->create_qp(*pda.value, ia);
    REQUIRE(qpa.ok());
    CHECK(ia.cap.max_send_wr >= 8);
    api::QpInitAttr ib = ia;
    ib.send_cq = cqb.value.get();
    ib.recv_cq = cqb.value.get();
    ia.send_cq = cqb.value.get();  // b's CQ on a's device
    CHECK(a->create_qp(*pda.value, ia).status == Status::bad_handle);
    auto qpb = b->create_qp(*pdb.value, ib);
    REQUIRE(qpb.ok());
    SrqAttr sa;
    sa.max_wr = 4;
    auto srqa = a->create_srq(*pda.value, sa);
    REQUIRE(srqa.ok());
    AhAttr aha;
    aha.dgid = b->gid();
    aha.sgid_index = uint8_t(a->gid_index());
    auto aha_r = a->create_ah(*pda.value, aha);
    REQUIRE(aha_r.ok());
    REQUIRE(aha_r.value->native() != nullptr);

    // res_list: this process's objects, client 0, with the device's values.
    std::vector<api::ResEntry> rl;
    REQUIRE(a->res_list(api::ResKind::pd, rl) == Status::ok);
    REQUIRE(rl.size() == 1);
    CHECK(rl[0].client == 0);
    CHECK(rl[0].pid == uint32_t(getpid()));
    CHECK(rl[0].comm == "test_api_local");
    CHECK(attr(rl[0], "handle") == std::to_string(pda.value->handle()));
    CHECK(attr(rl[0], "users") == "4");  // the MR, the QP, the SRQ, the AH
    REQUIRE(a->res_list(api::ResKind::mr, rl) == Status::ok);
    REQUIRE(rl.size() == 1);
    CHECK(attr(rl[0], "lkey") == hex(mra.value->lkey()));
    CHECK(attr(rl[0], "rkey") == hex(mra.value->rkey()));
    CHECK(attr(rl[0], "length") == "5000");
    CHECK(attr(rl[0], "iova") == hex(mra.value->addr()));
    CHECK(attr(rl[0], "access") == hex(acc));
    REQUIRE(a->res_list(api::ResKind::cq, rl) == Status::ok);
    REQUIRE(rl.size() == 1);
    CHECK(attr(rl[0], "handle") == std::to_string(cqa.value->handle()));
    CHECK(attr(rl[0], "cqe") == std::to_string(cqa.value->cqe()));
    CHECK(attr(rl[0], "qps") == "1");
    CHECK(attr(rl[0], "channel") == "no");
    REQUIRE(a->res_list(api::ResKind::srq, rl) == Status::ok);
    REQUIRE(rl.size() == 1);
    CHECK(attr(rl[0], "max_wr") == std::to_string(sa.max_wr));
    CHECK(attr(rl[0], "used") == "0");
    REQUIRE(a->res_list(api::ResKind::qp, rl) == Status::ok);
    REQUIRE(rl.size() == 1);
    CHECK(attr(rl[0], "handle") == std::to_string(qpa.value->handle()));
    CHECK(attr(rl[0], "qpn") == std::to_string(qpa.value->qpn()));
    CHECK(attr(rl[0], "type") == "RC");
    CHECK(attr(rl[0], "state") == "RESET");
    CHECK(attr(rl[0], "pd") == std::to_string(pda.value->handle()));
    CHECK(attr(rl[0], "send_cq") == std::to_string(cqa.value->handle()));
    CHECK(a->res_list(api::ResKind::count, rl) == Status::invalid_argument);

    // Connect a <-> b (RC, PSN 0x100 both ways) once each knows the other's MAC.
    REQUIRE(resolve(*a, *b));
    REQUIRE(resolve(*b, *a));
    const auto connect = [](api::Qp& q, const api::Context& peer_ctx, uint32_t peer_qpn) {
        QpAttr at;
        at.qp_state = QpState::init;
        at.port_num = 1;
        at.qp_access_flags = access::remote_write;
        ModifyResult m = q.modify(at, qp_attr::state | qp_attr::pkey_index | qp_attr::port | qp_attr::access_flags);
        if (!m.ok()) return m;
        at.qp_state = QpState::rtr;
        at.path_mtu = Mtu::mtu1024;
        at.dest_qp_num = peer_qpn;
        at.rq_psn = 0x100;
        at.max_dest_rd_atomic = 1;
        at.min_rnr_timer = 12;
        at.ah_attr.dgid = peer_ctx.gid();
        at.ah_attr.sgid_index = 1;
        m = q.modify(at, qp_attr::state | qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn |
                             qp_attr::max_dest_rd_atomic | qp_attr::min_rnr_timer);
        if (!m.ok()) return m;
        at.qp_state = QpState::rts;
        at.sq_psn = 0x100;
        at.timeout = 14;
        at.retry_cnt = 7;
        at.rnr_retry = 7;
        at.max_rd_atomic = 1;
        return q.modify(at, qp_attr::state | qp_attr::sq_psn | qp_attr::timeout | qp_attr::retry_cnt |
                                qp_attr::rnr_retry | qp_attr::max_qp_rd_atomic);
    };
    REQUIRE(connect(*qpa.value, *b, qpb.value->qpn()).ok());
    REQUIRE(connect(*qpb.value, *a, qpa.value->qpn()).ok());
    CHECK(qpa.value->state() == QpState::rts);
    QpAttr qattr;
    api::QpInitAttr qinit;
    REQUIRE(qpa.value->query(qattr, &qinit) == Status::ok);
    CHECK(qattr.dest_qp_num == qpb.value->qpn());
    CHECK(qinit.send_cq == cqa.value.get());
    CHECK(qinit.qp_type == QpType::rc);

    // b waits for events on its CQ; a SENDs 3000 bytes (3 packets), then WRITEs 100 to offset 4096.
    REQUIRE(cqb.value->req_notify(false) == Status::ok);
    Sge rsge{reinterpret_cast<uintptr_t>(bb.value.data), 4000, mrb.value->lkey()};
    RecvWr rwr;
    rwr.wr_id = 55;
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    const RecvWr* rbad = nullptr;
    REQUIRE(qpb.value->post_recv(&rwr, &rbad) == Status::ok);
    for (size_t i = 0; i < 5000; ++i) ba.value.data[i] = uint8_t(i * 31 + 7);
    Sge s1{reinterpret_cast<uintptr_t>(ba.value.data), 3000, mra.value->lkey()};
    Sge s2{reinterpret_cast<uintptr_t>(ba.value.data) + 4096, 100, mra.value->lkey()};
    SendWr w1, w2;
    w1.wr_id = 1;
    w1.sg_list = &s1;
    w1.num_sge = 1;
    w1.opcode = WrOpcode::send;
    w1.send_flags = send_flag::signaled;
    w1.next = &w2;
    w2.wr_id = 2;
    w2.sg_list = &s2;
    w2.num_sge = 1;
    w2.opcode = WrOpcode::rdma_write;
    w2.send_flags = send_flag::signaled;
    w2.rdma.remote_addr = mrb.value->addr() + 4096;
    w2.rdma.rkey = mrb.value->rkey();
    const SendWr* sbad = nullptr;
    REQUIRE(qpa.value->post_send(&w1, &sbad) == Status::ok);
    CHECK(a->busy());

    std::vector<Wc> got_a, got_b;
    std::array<Wc, 4> wc;
    CqEvent ev;
    bool event = false;
    REQUIRE(turn_until(*a, *b, [&] {
        for (int n = cqa.value->poll(wc); n > 0; n = cqa.value->poll(wc)) got_a.insert(got_a.end(), wc.begin(), wc.begin() + n);
        if (!event && chb.value->get_cq_event(ev)) event = true;
        for (int n = cqb.value->poll(wc); n > 0; n = cqb.value->poll(wc)) got_b.insert(got_b.end(), wc.begin(), wc.begin() + n);
        return got_a.size() == 2 && got_b.size() == 1 && event;
    }));
    CHECK(got_a[0].wr_id == 1);
    CHECK(got_a[0].status == WcStatus::success);
    CHECK(got_a[0].opcode == WcOpcode::send);
    CHECK(got_a[1].wr_id == 2);
    CHECK(got_a[1].status == WcStatus::success);
    CHECK(got_a[1].opcode == WcOpcode::rdma_write);
    CHECK(got_b[0].wr_id == 55);
    CHECK(got_b[0].opcode == WcOpcode::recv);
    CHECK(got_b[0].byte_len == 3000);
    CHECK(got_b[0].qp_num == qpb.value->qpn());
    CHECK(ev.cq_handle == cqb.value->handle());
    CHECK(ev.cq_context == 0x77);
    cqb.value->ack_events(1);
    CHECK(std::memcmp(bb.value.data, ba.value.data, 3000) == 0);
    CHECK(std::memcmp(bb.value.data + 4096, ba.value.data + 4096, 100) == 0);
    CHECK(bb.value.data[3000] == 0);
    CHECK(bb.value.data[4196] == 0);
    CHECK_FALSE(chb.value->wait_cq_event(ev, 5));  // nothing more is armed

    // The counters: every device counter by name, in kCounterName order, then rx_err_*; the IP
    // side's in kNetStatNames order; no daemon group in-process.
    api::Stats st;
    REQUIRE(b->read_stats(st) == Status::ok);
    REQUIRE(st.device.size() == kCounterCount + pkt::kParseErrorCount);
    for (size_t i = 0; i < kCounterCount; ++i) CHECK(st.device[i].first == kCounterName[i]);
    CHECK(st.device[kCounterCount].first == std::string("rx_err_") + pkt::name(pkt::ParseError(0)));
    CHECK(st.device[size_t(Counter::rdma_recvs)].second == 1);
    CHECK(st.device[size_t(Counter::rcvd_pkts)].second == 4);  // SEND First, Middle, Last; WRITE Only
    CHECK(st.device[size_t(Counter::dma_bytes_written)].second == 3100);
    REQUIRE(st.net.size() == port::kNetStatCount);
    for (size_t i = 0; i < port::kNetStatCount; ++i) CHECK(st.net[i].first == port::kNetStatNames[i]);
    CHECK(st.net[0].second == 1);  // b answered one ARP request from a
    REQUIRE(st.link.size() == 21);
    // By name: a counter added to the list moves no check here.
    auto link = [&](const char* n) -> std::optional<uint64_t> {
        for (const auto& [k, v] : st.link)
            if (k == n) return v;
        return std::nullopt;
    };
    CHECK(st.link[0].first == "link_up");  // the list opens with the link's state
    CHECK(link("link_up") == 1u);
    REQUIRE(link("rx_frames"));
    CHECK(*link("rx_frames") >= 5);  // the 4 RoCE frames and a's ARP request at least
    // the pool mapped at open (dpdk_port/prefault.hpp); net_ring shares no region with a peer
    CHECK(link("prefaulted_pool_bytes").value_or(0) > 0);
    CHECK(link("prefaulted_link_bytes") == 0u);
    // the PMD's own count: net_ring loses nothing, so it saw exactly what the port took
    CHECK(link("pmd_ipackets") == link("rx_frames"));
    REQUIRE(link("tx_frames"));
    CHECK(link("pmd_opackets") == link("tx_frames"));
    CHECK(link("pmd_rx_nombuf") == 0u);
    CHECK(st.daemon.empty());

    REQUIRE(b->res_list(api::ResKind::qp, rl) == Status::ok);
    REQUIRE(rl.size() == 1);
    CHECK(attr(rl[0], "state") == "RTS");
    CHECK(attr(rl[0], "dest_qpn") == std::to_string(qpa.value->qpn()));
    CHECK(attr(rl[0], "path_mtu") == "1024");
    CHECK(attr(rl[0], "rq_used") == "0");
    CHECK(attr(rl[0], "rq_size") == std::to_string(ib.cap.max_recv_wr));
    REQUIRE(b->res_list(api::ResKind::cq, rl) == Status::ok);
    CHECK(attr(rl[0], "channel") == "yes");

    // Destroying: refused while used, then the listing shrinks.
    CHECK(pda.value->destroy() == Status::busy);
    CHECK(qpa.value->destroy() == Status::ok);
    CHECK(qpa.value->destroy() == Status::bad_handle);
    REQUIRE(a->res_list(api::ResKind::qp, rl) == Status::ok);
    CHECK(rl.empty());
    CHECK(srqa.value->destroy() == Status::ok);
    CHECK(aha_r.value->destroy() == Status::ok);
    CHECK(mra.value->destroy() == Status::ok);
    REQUIRE(a->res_list(api::ResKind::pd, rl) == Status::ok);
    REQUIRE(rl.size() == 1);
    CHECK(attr(rl[0], "users") == "0");
    a->free_buffer(ba.value);
    CHECK(ba.value.data == nullptr);
    CHECK(ba.value.size == 0);

    // b's objects outlive b's context (each keeps the device alive); a's context goes first.
    a.reset();
    b.reset();
    CHECK(qpb.value->state() == QpState::rts);
    CHECK(qpb.value->destroy() == Status::ok);
}

namespace {
int g_checks = 0;
bool interrupt_on_third_check() { return ++g_checks >= 3; }
}  // namespace

TEST_CASE("resolve: the program's interrupt check ends the wait for an address nobody answers") {
    std::string err;
    REQUIRE(port::eal_start(port::default_eal_args(), err));
    uint16_t pa = 0, pb = 0;
    REQUIRE(port::make_ring_pair("apii", pa, pb, err));
    tools::AttachOptions o;
    o.port = "net_ring_apii_a";
    o.ip = "198.18.0.1/24";
    auto a = api::open_device("local", o, err);
    INFO(err);
    REQUIRE(a);
    const Gid nobody = pkt::ipv4_mapped_gid(0xC612004D);  // 198.18.0.77: the other end is silent

    // No check installed: the wait runs to its timeout.
    tools::set_interrupt_check(nullptr);
    CHECK_FALSE(tools::interrupted());
    CHECK_FALSE(a->resolve(nobody, 0, err));
    CHECK(err == "no answer from 198.18.0.77 to ARP requests");

    // Installed: asked once per turn of the wait, which ends at its first true, long before 60 s.
    g_checks = 0;
    tools::set_interrupt_check(&interrupt_on_third_check);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_FALSE(a->resolve(nobody, 60'000, err));
    CHECK(err == "interrupted by a signal");
    CHECK(g_checks == 3);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    tools::set_interrupt_check(nullptr);
}
