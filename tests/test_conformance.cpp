// Conformance rules of the requester, the completer and the receive checks, packet by packet: a
// hand-driven peer (tests/raw_peer.hpp) answers or injects frames field by field, and each test
// checks the frames the HCA sends, its completions, its QP state, its async events and counters.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "tests/raw_peer.hpp"

using namespace hcaemu;
using test::RawPeer;
namespace op = pkt::op;

namespace {

constexpr uint32_t kOtherIp = 0xC6120003;  // 198.18.0.3: neither end

// A send WR from the DUT with one SGE at `off` in its buffer (none when len is 0).
Status post(RawPeer& r, WrOpcode opc, uint64_t off, uint32_t len, uint64_t wr_id,
            uint32_t flags = send_flag::signaled, uint64_t raddr = 0, uint32_t rkey = 0, const Ah* ah = nullptr) {
    Sge sge{r.addr(off), len, r.dut.mr.lkey()};
    SendWr w;
    w.wr_id = wr_id;
    w.opcode = opc;
    w.send_flags = flags;
    w.sg_list = &sge;
    w.num_sge = len ? 1 : 0;
    w.imm_data = 0x01020304;
    w.rdma.remote_addr = w.atomic.remote_addr = raddr;
    w.rdma.rkey = w.atomic.rkey = rkey;
    w.atomic.compare_add = 5;
    w.ud.ah = ah;
    w.ud.remote_qpn = RawPeer::kPeerQpn;
    w.ud.remote_qkey = 0x22222222;
    const SendWr* bad = nullptr;
    return r.dut.qp.post_send(&w, &bad);
}

std::vector<AsyncEvent> events(RawPeer& r) {
    std::vector<AsyncEvent> v;
    AsyncEvent ev;
    while (r.dut.dev->get_async_event(ev)) v.push_back(ev);
    return v;
}

// The newest posted WQE's SGE now points past the MR, as a translation gone stale after the
// post-time check would: the requester's gather fails the MR check when it builds the packet.
void spoil_last_wqe(RawPeer& r) {
    QpObj* q = r.dut.dev->qp_by_qpn(r.dut.qp.qpn());
    const uint64_t n = q->sq.tail - 1;
    q->sq_sges[q->sq.index(n) * q->attr.cap.max_send_sge].addr = r.addr(r.dut.mem.size());
}

pkt::Headers ack_from_peer(RawPeer& r, uint8_t opcode, uint32_t psn, uint8_t syndrome, uint32_t msn) {
    pkt::Headers h = r.req(opcode, psn);
    h.aeth = {syndrome, msn};
    return h;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = uint8_t(seed + i * 13);
    return v;
}

bool all_zero(const uint8_t* p, size_t n) { return std::all_of(p, p + n, [](uint8_t b) { return b == 0; }); }

}  // namespace

// ---------------------------------------------------------------- defect 6: initiator depth 0

TEST_CASE("max_rd_atomic 0: READ and atomics are refused at post; other WRs go", "[conformance]") {
    tools::SimConfig cfg;
    cfg.max_rd_atomic = 0;
    RawPeer r(cfg);
    REQUIRE(r.connected);
    CHECK(post(r, WrOpcode::rdma_read, 0, 64, 1, send_flag::signaled, 0x1000, 0x55) == Status::invalid_argument);
    CHECK(post(r, WrOpcode::atomic_fetch_and_add, 64, 8, 2, send_flag::signaled, 0x2000, 0x55) ==
          Status::invalid_argument);
    CHECK(post(r, WrOpcode::atomic_cmp_and_swp, 64, 8, 3, send_flag::signaled, 0x2000, 0x55) ==
          Status::invalid_argument);
    REQUIRE(post(r, WrOpcode::rdma_write, 0, 16, 4, send_flag::signaled, 0x3000, 0x55) == Status::ok);
    auto out = r.run();
    REQUIRE(out.size() == 1);
    CHECK(out[0].opcode() == op::write_only);
    CHECK(out[0].psn() == r.cfg.sq_psn[0]);
}

TEST_CASE("max_rd_atomic set to 0 in SQD under a posted READ: LOC_QP_OP_ERR, no READ sent, no hang",
          "[conformance]") {
    tools::SimConfig cfg;
    cfg.max_rd_atomic = 4;
    RawPeer r(cfg);
    REQUIRE(r.connected);
    QpAttr a;
    a.qp_state = QpState::sqd;
    REQUIRE(r.dut.qp.modify(a, qp_attr::state).ok());
    REQUIRE(post(r, WrOpcode::rdma_read, 0, 64, 11, send_flag::signaled, 0x1000, 0x55) == Status::ok);
    a.max_rd_atomic = 0;
    REQUIRE(r.dut.qp.modify(a, qp_attr::max_qp_rd_atomic).ok());
    a.qp_state = QpState::rts;
    REQUIRE(r.dut.qp.modify(a, qp_attr::state).ok());
    auto out = r.run();
    CHECK(out.empty());
    auto wc = r.poll_cq();
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].wr_id == 11);
    CHECK(wc[0].status == WcStatus::loc_qp_op_err);
    CHECK(wc[0].opcode == WcOpcode::rdma_read);
    CHECK(r.state() == QpState::err);
    CHECK(events(r).empty());
}

// ---------------------------------------------------------------- defect 7: P_Key

namespace {

// A WRITE Only with AckReq from the peer with BTH P_Key `pkey`: true when the DUT placed it and
// acknowledged it (with its own P_Key in the ACK), false when it answered nothing.
bool write_accepted(RawPeer& r, uint16_t pkey, uint32_t& psn, uint16_t qp_pkey) {
    const auto data = pattern(32, uint8_t(pkey));
    std::memset(r.mem() + 128, 0, 32);
    pkt::Headers h = r.req(op::write_only, psn, true);
    h.bth.pkey = pkey;
    h.reth = {r.addr(128), r.rkey(), 32};
    REQUIRE(r.send(h, data));
    auto out = r.run();
    if (out.empty()) {
        CHECK(all_zero(r.mem() + 128, 32));
        return false;
    }
    REQUIRE(out.size() == 1);
    CHECK(out[0].opcode() == op::acknowledge);
    CHECK(out[0].psn() == psn);
    CHECK(out[0].p.h.bth.pkey == qp_pkey);
    CHECK(std::memcmp(r.mem() + 128, data.data(), 32) == 0);
    psn = (psn + 1) & 0xFFFFFF;
    return true;
}

}  // namespace

TEST_CASE("P_Key: IBTA 10.9.3 matching against the QP's table entry, mismatches dropped and counted",
          "[conformance]") {
    const std::vector<uint16_t> table = {0xFFFF, 0x8123, 0x0123, 0x8000, 0x0000};
    struct Case {
        uint16_t index;
        uint16_t pkt;
        bool match;
    };
    const Case cases[] = {
        {0, 0xFFFF, true},  {0, 0x7FFF, true},   {0, 0x8000, false}, {0, 0x0000, false},
        {1, 0x8123, true},  {1, 0x0123, true},   {1, 0x8124, false}, {1, 0xFFFF, false},
        {2, 0x8123, true},  {2, 0x0123, false},  {2, 0xFFFF, false},  // two limited members never match
        {3, 0x8000, false}, {3, 0x0000, false},  {3, 0xFFFF, false},  // 0x8000: no partition
        {4, 0x0000, false}, {4, 0x8000, false},
    };
    for (uint16_t index = 0; index < table.size(); ++index) {
        tools::SimConfig cfg;
        cfg.pkeys = table;
        cfg.pkey_index = index;
        RawPeer r(cfg);
        REQUIRE(r.connected);
        uint64_t dropped = 0;
        uint32_t psn = cfg.sq_psn[1];
        for (const Case& k : cases) {
            if (k.index != index) continue;
            INFO("QP P_Key " << std::hex << table[index] << ", packet P_Key " << k.pkt);
            CHECK(write_accepted(r, k.pkt, psn, table[index]) == k.match);
            if (!k.match) ++dropped;
        }
        CHECK(r.counter(Counter::pkey_violations) == dropped);
        CHECK(r.counter(Counter::rx_drop_no_qp) == 0);
        // The QP's own requests carry its P_Key in their BTH.
        REQUIRE(post(r, WrOpcode::rdma_write, 0, 16, 5, send_flag::signaled, 0x3000, 0x55) == Status::ok);
        auto out = r.run();
        REQUIRE(out.size() == 1);
        CHECK(out[0].opcode() == op::write_only);
        CHECK(out[0].p.h.bth.pkey == table[index]);
    }
}

TEST_CASE("P_Key: a UD QP's SEND carries the P_Key of its pkey_index", "[conformance]") {
    tools::SimConfig cfg;
    cfg.type = QpType::ud;
    cfg.pkeys = {0xFFFF, 0x8042};
    cfg.pkey_index = 1;
    RawPeer r(cfg);
    REQUIRE(r.connected);
    AhAttr aa;
    aa.dgid = pkt::ipv4_mapped_gid(RawPeer::kPeerIp);
    aa.sgid_index = 1;
    auto ah = r.dut.dev->create_ah(r.dut.pd, aa);
    REQUIRE(ah.ok());
    REQUIRE(post(r, WrOpcode::send, 0, 16, 1, send_flag::signaled, 0, 0, &ah.value) == Status::ok);
    auto out = r.run();
    REQUIRE(out.size() == 1);
    CHECK(out[0].opcode() == (op::ud | op::send_only));
    CHECK(out[0].p.h.bth.pkey == 0x8042);
}

// ---------------------------------------------------------------- defect 8: RC/UC address check

TEST_CASE("RC and UC: a request from another IP, or to another IP, is dropped and counted; UD is not checked",
          "[conformance]") {
    for (QpType type : {QpType::rc, QpType::uc}) {
        tools::SimConfig cfg;
        cfg.type = type;
        RawPeer r(cfg);
        REQUIRE(r.connected);
        const uint8_t base = type == QpType::rc ? op::rc : op::uc;
        const auto data = pattern(48, 7);
        const uint32_t psn = cfg.sq_psn[1];
        // The right QPN and PSN, from a third host.
        pkt::Headers h = r.req(uint8_t(base | op::write_only), psn, type == QpType::rc);
        h.reth = {r.addr(256), r.rkey(), 48};
        h.ip4.src = kOtherIp;
        REQUIRE(r.send(h, data));
        CHECK(r.run().empty());
        CHECK(all_zero(r.mem() + 256, 48));
        CHECK(r.counter(Counter::rx_drop_addr) == 1);
        // From the peer, to an address that is not the QP's.
        h.ip4.src = RawPeer::kPeerIp;
        h.ip4.dst = kOtherIp;
        REQUIRE(r.send(h, data));
        CHECK(r.run().empty());
        CHECK(all_zero(r.mem() + 256, 48));
        CHECK(r.counter(Counter::rx_drop_addr) == 2);
        // The same PSN from the peer to the QP: the drops left the expected PSN where it was.
        h.ip4.dst = r.tmpl.ip4.dst;
        REQUIRE(r.send(h, data));
        auto out = r.run();
        if (type == QpType::rc) {
            REQUIRE(out.size() == 1);
            CHECK(out[0].opcode() == op::acknowledge);
            CHECK(out[0].psn() == psn);
        } else {
            CHECK(out.empty());
        }
        CHECK(std::memcmp(r.mem() + 256, data.data(), 48) == 0);
        CHECK(r.counter(Counter::rx_drop_addr) == 2);
        CHECK(r.counter(Counter::rx_drop_no_qp) == 0);
    }
    // UD: datagrams come from anyone (the Q_Key is their check).
    tools::SimConfig cfg;
    cfg.type = QpType::ud;
    RawPeer r(cfg);
    REQUIRE(r.connected);
    REQUIRE(r.post_recv(1024, 40 + 64, 77) == Status::ok);
    const auto data = pattern(64, 3);
    pkt::Headers h = r.req(op::ud | op::send_only, 5);
    h.ip4.src = kOtherIp;
    REQUIRE(r.send(h, data));
    r.run();
    auto wc = r.poll_cq();
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].wr_id == 77);
    CHECK(wc[0].status == WcStatus::success);
    CHECK(std::memcmp(r.mem() + 1024 + 40, data.data(), 64) == 0);
    CHECK(r.counter(Counter::rx_drop_addr) == 0);
}

TEST_CASE("RC over IPv6: a request from another source, to another address or over IPv4 is dropped and counted",
          "[conformance]") {
    // 2001:2::/48, the IPv6 benchmarking prefix (RFC 5180), on the in-memory wire only.
    auto v6 = [](uint8_t host) { return Gid{0x20, 0x01, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, host}; };
    tools::SimConfig cfg;
    cfg.ipv6[0] = v6(1);
    cfg.ipv6[1] = v6(2);
    RawPeer r(cfg);
    REQUIRE(r.connected);
    const auto data = pattern(48, 11);
    const uint32_t psn = cfg.sq_psn[1];
    pkt::Headers h = r.req(op::write_only, psn, true);
    h.reth = {r.addr(256), r.rkey(), 48};
    h.ip6.src = v6(3);
    REQUIRE(r.send(h, data));
    CHECK(r.run().empty());
    h.ip6.src = v6(2);
    h.ip6.dst = v6(9);
    REQUIRE(r.send(h, data));
    CHECK(r.run().empty());
    // The same peer and QP over IPv4 (its mapped addresses): not the path's IP version.
    pkt::Headers h4 = h;
    h4.ipv6 = false;
    h4.eth.ethertype = pkt::kEthTypeIpv4;
    h4.ip4.src = RawPeer::kPeerIp;
    h4.ip4.dst = 0xC6120001;
    h4.ip4.ttl = 64;
    REQUIRE(r.send(h4, data));
    CHECK(r.run().empty());
    CHECK(all_zero(r.mem() + 256, 48));
    CHECK(r.counter(Counter::rx_drop_addr) == 3);
    h.ip6.dst = v6(1);
    REQUIRE(r.send(h, data));
    auto out = r.run();
    REQUIRE(out.size() == 1);
    CHECK(out[0].opcode() == op::acknowledge);
    CHECK(out[0].psn() == psn);
    CHECK(out[0].p.h.ipv6);
    CHECK(out[0].p.h.ip6.src == v6(1));
    CHECK(out[0].p.h.ip6.dst == v6(2));
    CHECK(std::memcmp(r.mem() + 256, data.data(), 48) == 0);
}

// ---------------------------------------------------------------- defect 10: no QP_FATAL for CQE errors

TEST_CASE("retry exhaustion and a NAK: the error CQE, the QP in ERR, and no QP_FATAL event", "[conformance]") {
    SECTION("transport retries exhausted") {
        tools::SimConfig cfg;
        cfg.retry_cnt = 1;
        cfg.timeout = 1;  // 8.192 us
        RawPeer r(cfg);
        REQUIRE(r.connected);
        REQUIRE(post(r, WrOpcode::send, 0, 32, 9) == Status::ok);
        auto out = r.run(100'000'000);
        REQUIRE(out.size() == 2);  // the SEND and its one retry
        CHECK(out[0].psn() == cfg.sq_psn[0]);
        CHECK(out[1].psn() == cfg.sq_psn[0]);
        auto wc = r.poll_cq();
        REQUIRE(wc.size() == 1);
        CHECK(wc[0].wr_id == 9);
        CHECK(wc[0].status == WcStatus::retry_exc_err);
        CHECK(r.state() == QpState::err);
        CHECK(events(r).empty());
        CHECK(r.counter(Counter::retry_exceeded_err) == 1);
    }
    SECTION("remote access error NAK") {
        RawPeer r;
        REQUIRE(r.connected);
        REQUIRE(post(r, WrOpcode::rdma_write, 0, 32, 10, send_flag::signaled, 0x3000, 0x55) == Status::ok);
        REQUIRE(r.run().size() == 1);
        REQUIRE(r.send(ack_from_peer(r, op::acknowledge, r.cfg.sq_psn[0],
                                     pkt::aeth_syndrome(pkt::AethType::nak, uint8_t(pkt::NakCode::remote_access_error)), 0)));
        r.run();
        auto wc = r.poll_cq();
        REQUIRE(wc.size() == 1);
        CHECK(wc[0].wr_id == 10);
        CHECK(wc[0].status == WcStatus::rem_access_err);
        CHECK(r.state() == QpState::err);
        CHECK(events(r).empty());
    }
}

// ---------------------------------------------------------------- defect 11: UC/UD to SQE

TEST_CASE("UD: a local protection error moves the QP to SQE; later sends flush, receives go on, SQE -> RTS resumes",
          "[conformance]") {
    tools::SimConfig cfg;
    cfg.type = QpType::ud;
    RawPeer r(cfg);
    REQUIRE(r.connected);
    AhAttr aa;
    aa.dgid = pkt::ipv4_mapped_gid(RawPeer::kPeerIp);
    aa.sgid_index = 1;
    auto ah = r.dut.dev->create_ah(r.dut.pd, aa);
    REQUIRE(ah.ok());
    REQUIRE(post(r, WrOpcode::send, 0, 32, 1, send_flag::signaled, 0, 0, &ah.value) == Status::ok);
    REQUIRE(post(r, WrOpcode::send, 0, 32, 2, send_flag::signaled, 0, 0, &ah.value) == Status::ok);
    spoil_last_wqe(r);
    REQUIRE(post(r, WrOpcode::send, 0, 32, 3, send_flag::signaled, 0, 0, &ah.value) == Status::ok);
    auto out = r.run();
    REQUIRE(out.size() == 1);
    CHECK(out[0].psn() == cfg.sq_psn[0]);
    auto wc = r.poll_cq();
    REQUIRE(wc.size() == 3);
    CHECK((wc[0].wr_id == 1 && wc[0].status == WcStatus::success));
    CHECK((wc[1].wr_id == 2 && wc[1].status == WcStatus::loc_prot_err && wc[1].opcode == WcOpcode::send));
    CHECK((wc[2].wr_id == 3 && wc[2].status == WcStatus::wr_flush_err));
    CHECK(r.state() == QpState::sqe);
    CHECK(events(r).empty());
    // In SQE a send is flushed as it is posted.
    REQUIRE(post(r, WrOpcode::send, 0, 32, 4, send_flag::signaled, 0, 0, &ah.value) == Status::ok);
    wc = r.poll_cq();
    REQUIRE(wc.size() == 1);
    CHECK((wc[0].wr_id == 4 && wc[0].status == WcStatus::wr_flush_err));
    CHECK(r.run().empty());
    // The receive side works on.
    REQUIRE(r.post_recv(1024, 40 + 64, 50) == Status::ok);
    const auto data = pattern(64, 9);
    REQUIRE(r.send(r.req(op::ud | op::send_only, 7), data));
    r.run();
    wc = r.poll_cq();
    REQUIRE(wc.size() == 1);
    CHECK((wc[0].wr_id == 50 && wc[0].status == WcStatus::success && wc[0].opcode == WcOpcode::recv));
    CHECK(std::memcmp(r.mem() + 1024 + 40, data.data(), 64) == 0);
    // SQE -> RTS: sending resumes with the next PSN (the failed WQE sent nothing).
    QpAttr a;
    a.qp_state = QpState::rts;
    REQUIRE(r.dut.qp.modify(a, qp_attr::state).ok());
    REQUIRE(post(r, WrOpcode::send, 0, 32, 5, send_flag::signaled, 0, 0, &ah.value) == Status::ok);
    out = r.run();
    REQUIRE(out.size() == 1);
    CHECK(out[0].psn() == cfg.sq_psn[0] + 1);
    CHECK(out[0].payload() == std::vector<uint8_t>(r.mem(), r.mem() + 32));
    wc = r.poll_cq();
    REQUIRE(wc.size() == 1);
    CHECK((wc[0].wr_id == 5 && wc[0].status == WcStatus::success));
}

TEST_CASE("UC: a local protection error moves the QP to SQE, and the responder side still places WRITEs",
          "[conformance]") {
    tools::SimConfig cfg;
    cfg.type = QpType::uc;
    RawPeer r(cfg);
    REQUIRE(r.connected);
    REQUIRE(post(r, WrOpcode::rdma_write, 0, 32, 1, send_flag::signaled, 0x3000, 0x55) == Status::ok);
    spoil_last_wqe(r);
    CHECK(r.run().empty());
    auto wc = r.poll_cq();
    REQUIRE(wc.size() == 1);
    CHECK((wc[0].wr_id == 1 && wc[0].status == WcStatus::loc_prot_err && wc[0].opcode == WcOpcode::rdma_write));
    CHECK(r.state() == QpState::sqe);
    const auto data = pattern(40, 4);
    pkt::Headers h = r.req(op::uc | op::write_only, cfg.sq_psn[1]);
    h.reth = {r.addr(512), r.rkey(), 40};
    REQUIRE(r.send(h, data));
    r.run();
    CHECK(std::memcmp(r.mem() + 512, data.data(), 40) == 0);
}

// ---------------------------------------------------------------- defect 12: completer and SE

TEST_CASE("completer: a READ response or an atomic ACK whose AETH is not an ACK is a bad response", "[conformance]") {
    SECTION("READ Response Only with a NAK syndrome") {
        RawPeer r;
        REQUIRE(r.connected);
        REQUIRE(post(r, WrOpcode::rdma_read, 512, 64, 7, send_flag::signaled, 0x1000, 0x55) == Status::ok);
        auto out = r.run();
        REQUIRE(out.size() == 1);
        REQUIRE(out[0].opcode() == op::read_request);
        pkt::Headers h = ack_from_peer(r, op::read_response_only, out[0].psn(),
                                       pkt::aeth_syndrome(pkt::AethType::nak, uint8_t(pkt::NakCode::invalid_request)), 1);
        REQUIRE(r.send(h, pattern(64, 0xA0)));
        r.run();
        auto wc = r.poll_cq();
        REQUIRE(wc.size() == 1);
        CHECK(wc[0].wr_id == 7);
        CHECK(wc[0].status == WcStatus::bad_resp_err);
        CHECK(all_zero(r.mem() + 512, 64));
        CHECK(r.state() == QpState::err);
    }
    SECTION("READ Response First with an RNR NAK syndrome") {
        RawPeer r;
        REQUIRE(r.connected);
        REQUIRE(post(r, WrOpcode::rdma_read, 4096, 2048, 8, send_flag::signaled, 0x1000, 0x55) == Status::ok);
        auto out = r.run();
        REQUIRE(out.size() == 1);
        pkt::Headers h = ack_from_peer(r, op::read_response_first, out[0].psn(),
                                       pkt::aeth_syndrome(pkt::AethType::rnr_nak, 3), 1);
        REQUIRE(r.send(h, pattern(1024, 0xB0)));
        r.run();
        auto wc = r.poll_cq();
        REQUIRE(wc.size() == 1);
        CHECK(wc[0].status == WcStatus::bad_resp_err);
        CHECK(all_zero(r.mem() + 4096, 2048));
    }
    SECTION("ATOMIC Acknowledge with an RNR NAK syndrome") {
        RawPeer r;
        REQUIRE(r.connected);
        REQUIRE(post(r, WrOpcode::atomic_fetch_and_add, 600, 8, 9, send_flag::signaled, 0x2000, 0x55) == Status::ok);
        auto out = r.run();
        REQUIRE(out.size() == 1);
        REQUIRE(out[0].opcode() == op::fetch_add);
        pkt::Headers h = ack_from_peer(r, op::atomic_acknowledge, out[0].psn(),
                                       pkt::aeth_syndrome(pkt::AethType::rnr_nak, 3), 1);
        h.atomic_ack.orig = 0x5555555555555555ull;
        REQUIRE(r.send(h));
        r.run();
        auto wc = r.poll_cq();
        REQUIRE(wc.size() == 1);
        CHECK(wc[0].wr_id == 9);
        CHECK(wc[0].status == WcStatus::bad_resp_err);
        CHECK(all_zero(r.mem() + 600, 8));
    }
}

TEST_CASE("requester: SE only on SEND and RDMA WRITE with immediate, never on a plain RDMA WRITE", "[conformance]") {
    RawPeer r;
    REQUIRE(r.connected);
    const uint32_t sol = send_flag::signaled | send_flag::solicited;
    REQUIRE(post(r, WrOpcode::rdma_write, 0, 16, 1, sol, 0x3000, 0x55) == Status::ok);
    REQUIRE(post(r, WrOpcode::rdma_write_with_imm, 0, 16, 2, sol, 0x3000, 0x55) == Status::ok);
    REQUIRE(post(r, WrOpcode::send, 0, 16, 3, sol) == Status::ok);
    REQUIRE(post(r, WrOpcode::send_with_imm, 0, 16, 4, sol) == Status::ok);
    REQUIRE(post(r, WrOpcode::send, 0, 16, 5) == Status::ok);  // not solicited
    auto out = r.run();
    REQUIRE(out.size() == 5);
    CHECK(out[0].opcode() == op::write_only);
    CHECK_FALSE(out[0].p.h.bth.se);
    CHECK(out[1].opcode() == op::write_only_imm);
    CHECK(out[1].p.h.bth.se);
    CHECK(out[2].opcode() == op::send_only);
    CHECK(out[2].p.h.bth.se);
    CHECK(out[3].opcode() == op::send_only_imm);
    CHECK(out[3].p.h.bth.se);
    CHECK_FALSE(out[4].p.h.bth.se);
}

// ---------------------------------------------------------------- defect 13: which WQE a local error fails

TEST_CASE("RC: a local error fails the WQE that hit it, after the earlier ones complete; no QP_FATAL",
          "[conformance]") {
    RawPeer r;
    REQUIRE(r.connected);
    REQUIRE(post(r, WrOpcode::send, 0, 100, 1) == Status::ok);
    REQUIRE(post(r, WrOpcode::rdma_write, 0, 100, 2, send_flag::signaled, 0x3000, 0x55) == Status::ok);
    REQUIRE(post(r, WrOpcode::send, 0, 100, 3) == Status::ok);
    spoil_last_wqe(r);
    REQUIRE(post(r, WrOpcode::send, 0, 100, 4) == Status::ok);
    auto out = r.run();
    REQUIRE(out.size() == 2);  // the first two; the third fails to gather and nothing follows it
    CHECK(out[0].psn() == r.cfg.sq_psn[0]);
    CHECK(out[1].psn() == r.cfg.sq_psn[0] + 1);
    CHECK(r.poll_cq().empty());  // the failed WQE waits for the two before it
    REQUIRE(r.send(ack_from_peer(r, op::acknowledge, r.cfg.sq_psn[0] + 1,
                                 pkt::aeth_syndrome(pkt::AethType::ack, 0x1F), 2)));
    CHECK(r.run().empty());
    auto wc = r.poll_cq();
    REQUIRE(wc.size() == 4);
    CHECK((wc[0].wr_id == 1 && wc[0].status == WcStatus::success));
    CHECK((wc[1].wr_id == 2 && wc[1].status == WcStatus::success));
    CHECK((wc[2].wr_id == 3 && wc[2].status == WcStatus::loc_prot_err && wc[2].opcode == WcOpcode::send));
    CHECK((wc[3].wr_id == 4 && wc[3].status == WcStatus::wr_flush_err));
    CHECK(r.state() == QpState::err);
    CHECK(events(r).empty());
}

TEST_CASE("RC: a local error at the head fails at once, with the head's wr_id", "[conformance]") {
    RawPeer r;
    REQUIRE(r.connected);
    REQUIRE(post(r, WrOpcode::send, 0, 100, 21) == Status::ok);
    spoil_last_wqe(r);
    REQUIRE(post(r, WrOpcode::send, 0, 100, 22) == Status::ok);
    CHECK(r.run().empty());
    auto wc = r.poll_cq();
    REQUIRE(wc.size() == 2);
    CHECK((wc[0].wr_id == 21 && wc[0].status == WcStatus::loc_prot_err));
    CHECK((wc[1].wr_id == 22 && wc[1].status == WcStatus::wr_flush_err));
    CHECK(r.counter(Counter::dma_access_errors) == 1);
}

TEST_CASE("a packet the port's buffers cannot hold is a local QP operation error, not a protection error",
          "[conformance]") {
    tools::SimConfig cfg;
    cfg.mtu = Mtu::mtu4096;
    cfg.wire.frame_cap = cfg.wire.mtu + 18;  // frames of a 1500-byte link
    RawPeer r(cfg);
    REQUIRE(r.connected);
    // The device is told of a jumbo link its port's buffers do not match: its active MTU, and so
    // the QP's path MTU after the next modify, becomes 4096.
    r.dut.dev->set_link_mtu(9000);
    QpAttr a;
    a.min_rnr_timer = 2;
    REQUIRE(r.dut.qp.modify(a, qp_attr::min_rnr_timer).ok());
    REQUIRE(post(r, WrOpcode::rdma_write, 0, 2000, 31, send_flag::signaled, 0x3000, 0x55) == Status::ok);
    CHECK(r.run().empty());
    auto wc = r.poll_cq();
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].wr_id == 31);
    CHECK(wc[0].status == WcStatus::loc_qp_op_err);
    CHECK(r.counter(Counter::dma_access_errors) == 0);
    CHECK(r.state() == QpState::err);
}

// ---------------------------------------------------------------- defect 14: an Hca attached late

TEST_CASE("an Hca attached to a device whose QP is already in RTS serves it: WRITE, READ, SEND", "[conformance]") {
    port::VirtualClock clock(1'000'000'000);
    tools::SimConfig cfg;
    port::MemWire wire(cfg.wire, clock);
    constexpr uint32_t kIp0 = 0xC6120001, kIp1 = 0xC6120002;
    // The late side: a device, its objects and a QP in RTS, all before any Hca.
    PortConfig pc;
    pc.mac = wire.end(0).mac();
    pc.ipv4[0] = kIp0;
    pc.link_mtu = wire.end(0).mtu();
    Device dev(DeviceAttr{}, pc);
    Pd pd = std::move(dev.alloc_pd().value);
    std::vector<uint8_t> mem(1 << 16, 0);
    Mr mr = std::move(dev.reg_mr(pd, mem.data(), mem.size(),
                                 access::local_write | access::remote_write | access::remote_read).value);
    Cq cq = std::move(dev.create_cq(64).value);
    QpInitAttr ia;
    ia.send_cq = ia.recv_cq = &cq;
    ia.cap = {16, 16, 1, 1, 0};
    Qp qp = std::move(dev.create_qp(pd, ia).value);
    tools::SimPair::Side peer;
    tools::SimPair::build_side(peer, wire.end(1), clock, cfg, 1, cfg.wire.mac[0]);
    REQUIRE(tools::connect_qp(qp, cfg, peer.qp.qpn(), pkt::ipv4_mapped_gid(kIp1), 0x100, 0x200));
    REQUIRE(tools::connect_qp(peer.qp, cfg, qp.qpn(), pkt::ipv4_mapped_gid(kIp0), 0x200, 0x100));
    transport::Hca hca(dev, wire.end(0), clock, cfg.hca);
    hca.set_neighbor(pkt::ipv4_mapped_gid(kIp1), cfg.wire.mac[1]);

    auto run = [&](size_t want_late, size_t want_peer, std::vector<Wc>& late, std::vector<Wc>& pw) {
        Wc wc[8];
        for (int turn = 0; turn < 100000 && (late.size() < want_late || pw.size() < want_peer); ++turn) {
            const size_t moved = hca.poll() + peer.hca->poll();
            for (int n; (n = cq.poll(wc)) > 0;) late.insert(late.end(), wc, wc + n);
            for (int n; (n = peer.cq.poll(wc)) > 0;) pw.insert(pw.end(), wc, wc + n);
            if (!moved) {
                const uint64_t next = std::min({wire.next_delivery_ns(), hca.next_timer_ns(), peer.hca->next_timer_ns()});
                clock.set(std::max(next == UINT64_MAX ? clock.now_ns() + 1000 : next, clock.now_ns() + 1));
            }
        }
    };
    auto peer_post = [&](WrOpcode opc, uint64_t off, uint32_t len, uint64_t raddr) {
        Sge sge{peer.mr.addr() + off, len, peer.mr.lkey()};
        SendWr w;
        w.wr_id = off;
        w.opcode = opc;
        w.send_flags = send_flag::signaled;
        w.sg_list = &sge;
        w.num_sge = 1;
        w.rdma.remote_addr = raddr;
        w.rdma.rkey = mr.rkey();
        const SendWr* bad = nullptr;
        return peer.qp.post_send(&w, &bad);
    };
    // The peer WRITEs 3000 bytes (three packets) into the late side and READs 2500 bytes back.
    const auto data = pattern(3000, 0x31);
    std::copy(data.begin(), data.end(), peer.mem.begin());
    const auto src = pattern(2500, 0x77);
    std::copy(src.begin(), src.end(), mem.begin() + 8192);
    REQUIRE(peer_post(WrOpcode::rdma_write, 0, 3000, mr.addr()) == Status::ok);
    REQUIRE(peer_post(WrOpcode::rdma_read, 4096, 2500, mr.addr() + 8192) == Status::ok);
    std::vector<Wc> late, pw;
    run(0, 2, late, pw);
    REQUIRE(pw.size() == 2);
    CHECK((pw[0].status == WcStatus::success && pw[1].status == WcStatus::success));
    CHECK(std::memcmp(mem.data(), data.data(), 3000) == 0);
    CHECK(std::memcmp(peer.mem.data() + 4096, src.data(), 2500) == 0);
    // The late side SENDs: its requester starts at the QP's sq_psn.
    Sge rs{peer.mr.addr() + 16384, 256, peer.mr.lkey()};
    RecvWr rw;
    rw.wr_id = 99;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    const RecvWr* rbad = nullptr;
    REQUIRE(peer.qp.post_recv(&rw, &rbad) == Status::ok);
    Sge ss{mr.addr() + 8192, 200, mr.lkey()};
    SendWr sw;
    sw.wr_id = 5;
    sw.send_flags = send_flag::signaled;
    sw.sg_list = &ss;
    sw.num_sge = 1;
    const SendWr* sbad = nullptr;
    REQUIRE(qp.post_send(&sw, &sbad) == Status::ok);
    late.clear();
    pw.clear();
    run(1, 1, late, pw);
    REQUIRE(late.size() == 1);
    CHECK((late[0].wr_id == 5 && late[0].status == WcStatus::success));
    REQUIRE(pw.size() == 1);
    CHECK((pw[0].wr_id == 99 && pw[0].status == WcStatus::success && pw[0].byte_len == 200));
    CHECK(std::memcmp(peer.mem.data() + 16384, src.data(), 200) == 0);
    // An attribute-only modify keeps the context whole: another READ is served.
    QpAttr a;
    a.min_rnr_timer = 3;
    REQUIRE(qp.modify(a, qp_attr::min_rnr_timer).ok());
    REQUIRE(peer_post(WrOpcode::rdma_read, 20000, 1000, mr.addr() + 8192) == Status::ok);
    pw.clear();
    run(0, 1, late, pw);
    REQUIRE(pw.size() == 1);
    CHECK(pw[0].status == WcStatus::success);
    CHECK(std::memcmp(peer.mem.data() + 20000, src.data(), 1000) == 0);
    CHECK(dev.counters().get(Counter::rx_drop_no_qp) == 0);
}
