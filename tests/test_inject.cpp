// Event injection (dpdk_port/inject.hpp): the rule parser and its every error, matching (nth,
// round, seeded probability, count), and each action between two HCAs on the in-memory wire in
// virtual time, with its exact effect on the wire, the peer's counters and the data.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <map>
#include <cstring>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include "dpdk_port/inject.hpp"
#include "dpdk_port/mem_wire.hpp"
#include "dpdk_port/net_port.hpp"
#include "dpdk_port/pcap_file.hpp"
#include "packet/build.hpp"
#include "packet/bytes.hpp"
#include "packet/parse.hpp"
#include "tools/hcaemu/sim_pair.hpp"
#include "transport/psn.hpp"

using namespace hcaemu;
using port::InjectError;
using port::InjectRule;

namespace {

InjectError parse(const std::string& s, InjectRule* out = nullptr, std::string* msg = nullptr) {
    InjectRule r;
    std::string m;
    const InjectError e = port::parse_inject_rule(s, r, m);
    if (out) *out = r;
    if (msg) *msg = m;
    return e;
}

}  // namespace

TEST_CASE("inject: rules parse to the fields they name and back to the same text", "[inject][parse]") {
    InjectRule r;
    REQUIRE(parse("drop dir=tx qp=0x12 op=WRITE_MIDDLE psn=5 nth=1 count=1", &r) == InjectError::ok);
    CHECK(r.action == port::InjectAction::drop);
    CHECK(r.dir == port::InjectDir::tx);
    CHECK((r.has_qp && r.qp == 0x12));
    CHECK((r.op_class == port::OpClass::exact && r.opcode == pkt::op::write_middle));
    CHECK((r.has_psn && r.psn == 5));
    CHECK(r.count == 1);
    CHECK(port::to_string(r) == "drop dir=tx qp=0x12 op=RC_RDMA_WRITE_MIDDLE psn=5 count=1");

    REQUIRE(parse("ecn dir=rx prob=0.1 seed=7 count=all", &r) == InjectError::ok);
    CHECK((r.prob == 0.1 && r.seed == 7 && r.count == 0));
    REQUIRE(parse("corrupt dir=tx op=send bth.tver=1 bth.pkey=0x1234 icrc", &r) == InjectError::ok);
    CHECK((r.nfields == 2 && r.icrc && r.fields[1].value == 0x1234));
    REQUIRE(parse("rnr dir=tx op=ack timer=14", &r) == InjectError::ok);
    CHECK((r.timer == 14 && !r.add && r.op_class == port::OpClass::ack));
    REQUIRE(parse("ghost-ack dir=tx op=ack", &r) == InjectError::ok);
    CHECK((r.add && r.at_rel && r.at == 4096));
    REQUIRE(parse("nak-seq dir=rx at=7 mode=add", &r) == InjectError::ok);
    CHECK((!r.at_rel && r.at == 7 && r.add));
    REQUIRE(parse("unexpected-op dir=tx op=ack opcode=0x0E at=-2", &r) == InjectError::ok);
    CHECK((r.new_opcode == 0x0E && r.at == -2));
    REQUIRE(parse("ack-withhold dir=tx psn=3", &r) == InjectError::ok);
    CHECK(r.op_class == port::OpClass::ack);
    REQUIRE(parse("reorder dir=tx", &r) == InjectError::ok);
    CHECK(r.us == 1000);
    REQUIRE(parse("dup dir=rx op=UC_SEND_ONLY round=2", &r) == InjectError::ok);
    CHECK((r.action == port::InjectAction::duplicate && r.opcode == 0x24 && r.round == 2));

    // Every canonical text parses back to the same rule.
    for (const char* t : {"drop dir=tx qp=0x12 op=WRITE_MIDDLE psn=5", "ecn dir=rx prob=0.25 seed=9 count=all",
                          "corrupt dir=tx icrc reth.rkey=0xdead", "delay dir=rx us=250 nth=3 count=2",
                          "rnr dir=tx op=ack timer=0 at=+3", "unexpected-op dir=rx opcode=RDMA_READ_RESPONSE_MIDDLE"}) {
        InjectRule a, b;
        REQUIRE(parse(t, &a) == InjectError::ok);
        REQUIRE(parse(port::to_string(a), &b) == InjectError::ok);
        CHECK(port::to_string(b) == port::to_string(a));
    }
    CHECK(port::split_inject_rules(" drop dir=tx ;; ecn dir=rx ; ") == std::vector<std::string>{"drop dir=tx", "ecn dir=rx"});
}

TEST_CASE("inject: every parse error is typed, with a message naming the token", "[inject][parse]") {
    struct Bad {
        const char* text;
        InjectError e;
        const char* in_msg;
    };
    const Bad bad[] = {
        {"", InjectError::empty, "empty"},
        {"   ", InjectError::empty, "empty"},
        {"explode dir=tx", InjectError::unknown_action, "explode"},
        {"drop dir=tx colour=red", InjectError::unknown_key, "colour"},
        {"drop dir=tx psn", InjectError::missing_value, "psn"},
        {"drop dir=tx psn=", InjectError::missing_value, "psn"},
        {"drop dir=tx =5", InjectError::missing_value, "=5"},
        {"drop dir=tx psn=five", InjectError::bad_number, "five"},
        {"drop dir=tx psn=0x1000000", InjectError::out_of_range, "psn"},
        {"drop dir=tx qp=16777216", InjectError::out_of_range, "qp"},
        {"drop dir=tx nth=0", InjectError::out_of_range, "nth"},
        {"drop dir=tx count=0", InjectError::out_of_range, "count"},
        {"drop dir=tx round=0", InjectError::out_of_range, "round"},
        {"drop dir=tx prob=0", InjectError::out_of_range, "prob"},
        {"drop dir=tx prob=1.5", InjectError::out_of_range, "prob"},
        {"drop dir=tx prob=x", InjectError::bad_number, "prob"},
        {"drop dir=up", InjectError::bad_direction, "up"},
        {"drop psn=5", InjectError::missing_direction, "dir="},
        {"drop dir=tx op=WRITE_SIDEWAYS", InjectError::bad_opcode, "WRITE_SIDEWAYS"},
        {"drop dir=tx op=0x1f", InjectError::bad_opcode, "0x1f"},
        {"drop dir=tx psn=1 psn=2", InjectError::duplicate_key, "psn"},
        {"drop dir=tx us=5", InjectError::not_for_action, "us"},
        {"drop dir=tx bth.psn=5", InjectError::not_for_action, "bth.psn"},
        {"ecn dir=tx timer=3", InjectError::not_for_action, "timer"},
        {"drop dir=tx at=5", InjectError::not_for_action, "at"},
        {"ack-withhold dir=tx op=write", InjectError::not_for_action, "ACK"},
        {"corrupt dir=tx", InjectError::corrupt_needs_target, "icrc"},
        {"corrupt dir=tx icrc=1", InjectError::missing_value, "icrc"},
        {"corrupt dir=tx bth.tver=16", InjectError::out_of_range, "bth.tver"},
        {"corrupt dir=tx bth.se=1 bth.m=1 bth.pad=1 bth.tver=1 bth.psn=1", InjectError::too_many_fields, "4"},
        {"delay dir=tx", InjectError::missing_value, "us="},
        {"delay dir=tx us=0", InjectError::out_of_range, "us"},
        {"delay dir=tx us=1000001", InjectError::out_of_range, "us"},
        {"rnr dir=tx timer=32", InjectError::out_of_range, "timer"},
        {"nak-seq dir=tx mode=sometimes", InjectError::bad_number, "mode"},
        {"nak-seq dir=tx at=+x", InjectError::bad_number, "at"},
        {"nak-seq dir=tx at=+8388608", InjectError::out_of_range, "at"},
        {"unexpected-op dir=tx opcode=NOPE", InjectError::bad_opcode, "NOPE"},
    };
    for (const Bad& b : bad) {
        std::string msg;
        INFO(b.text);
        CHECK(parse(b.text, nullptr, &msg) == b.e);
        CHECK(msg.find(b.in_msg) != std::string::npos);
    }
}

TEST_CASE("inject: matching by nth, count, op class, round and a seeded probability", "[inject][match]") {
    InjectRule r;
    SECTION("nth=3 count=2 fires on the 3rd and 4th matching frames only; others do not count") {
        REQUIRE(parse("drop dir=tx op=write nth=3 count=2", &r) == InjectError::ok);
        port::ActiveRule a(1, r);
        std::vector<int> fired;
        for (int i = 0; i < 8; ++i) {
            CHECK_FALSE(a.test({pkt::op::send_only, 1, uint32_t(i)}, 1));  // not a WRITE: not counted
            if (a.test({uint8_t(i % 2 ? pkt::op::write_middle : pkt::op::uc | pkt::op::write_only), 1, uint32_t(i)}, 1))
                fired.push_back(i);
        }
        CHECK(fired == std::vector<int>{2, 3});
        CHECK(a.matched() == 8);
        CHECK(a.hits() == 2);
        CHECK(a.exhausted());
    }
    SECTION("op classes") {
        REQUIRE(parse("drop dir=tx op=read-resp", &r) == InjectError::ok);
        for (unsigned o = 0; o < 256; ++o)
            CHECK(port::op_matches(r, uint8_t(o)) == (o >= 0x0D && o <= 0x10));
        REQUIRE(parse("drop dir=tx op=ack", &r) == InjectError::ok);
        CHECK(port::op_matches(r, 0x11));
        CHECK_FALSE(port::op_matches(r, 0x12));
        REQUIRE(parse("drop dir=tx op=atomic", &r) == InjectError::ok);
        CHECK((port::op_matches(r, 0x13) && port::op_matches(r, 0x14) && !port::op_matches(r, 0x12)));
    }
    SECTION("qp, psn and round must all hold") {
        REQUIRE(parse("drop dir=tx qp=7 psn=5 round=2 count=all", &r) == InjectError::ok);
        port::ActiveRule a(1, r);
        CHECK_FALSE(a.test({0x06, 7, 5}, 1));
        CHECK(a.test({0x06, 7, 5}, 2));
        CHECK_FALSE(a.test({0x06, 7, 5}, 3));
        CHECK_FALSE(a.test({0x06, 8, 5}, 2));
        CHECK_FALSE(a.test({0x06, 7, 6}, 2));
    }
    SECTION("prob with a seed draws the same frames every time; another seed, others") {
        auto run = [&](const char* t) {
            REQUIRE(parse(t, &r) == InjectError::ok);
            port::ActiveRule a(1, r);
            std::vector<int> f;
            for (int i = 0; i < 10000; ++i)
                if (a.test({0x04, 1, uint32_t(i)}, 1)) f.push_back(i);
            return f;
        };
        const auto a = run("ecn dir=rx prob=0.1 seed=7 count=all");
        const auto b = run("ecn dir=rx prob=0.1 seed=7 count=all");
        const auto c = run("ecn dir=rx prob=0.1 seed=8 count=all");
        CHECK(a == b);
        CHECK(a != c);
        CHECK(a.size() > 900);
        CHECK(a.size() < 1100);
        CHECK(run("ecn dir=rx prob=0.1 seed=7 count=5") == std::vector<int>(a.begin(), a.begin() + 5));
    }
}

// ---------------------------------------------------------------- an InjectPort over a port that records

namespace {

// A port that keeps what is sent and hands out what a test queues for receive.
class RecPort final : public port::Port {
public:
    RecPort() : mem_(64 * 2048) {
        for (uint32_t i = 0; i < 64; ++i) free_.push_back(i);
    }
    bool alloc(port::Frame& f) override {
        if (free_.empty()) return false;
        const uint32_t s = free_.back();
        free_.pop_back();
        f = {mem_.data() + s * 2048, 0, 2048, s, nullptr};
        return true;
    }
    uint16_t tx_burst(port::Frame* f, uint16_t n) override {
        for (uint16_t i = 0; i < n; ++i) {
            sent.emplace_back(f[i].data, f[i].data + f[i].len);
            free(f[i]);
        }
        return n;
    }
    uint16_t rx_burst(port::Frame* f, uint16_t n) override {
        uint16_t k = 0;
        while (k < n && !rxq.empty()) {
            port::Frame g;
            REQUIRE(alloc(g));
            std::memcpy(g.data, rxq.front().data(), rxq.front().size());
            g.len = uint32_t(rxq.front().size());
            rxq.erase(rxq.begin());
            f[k++] = g;
        }
        return k;
    }
    void free(port::Frame& f) override { free_.push_back(f.slot); }
    pkt::Mac mac() const override { return {2, 0, 0, 0, 0, 1}; }
    uint32_t mtu() const override { return 1500; }
    port::PortStats stats() const override { return {}; }
    size_t pool_free() const { return free_.size(); }

    std::vector<std::vector<uint8_t>> sent, rxq;

private:
    std::vector<uint8_t> mem_;
    std::vector<uint32_t> free_;
};

std::vector<uint8_t> frame(uint8_t opcode, uint32_t psn, uint32_t qp = 0x11, bool v6 = false, uint32_t payload = 0) {
    pkt::Headers h;
    h.eth.src = {2, 0, 0, 0, 0, 2};
    h.eth.dst = {2, 0, 0, 0, 0, 1};
    h.ipv6 = v6;
    h.eth.ethertype = v6 ? pkt::kEthTypeIpv6 : pkt::kEthTypeIpv4;
    h.ip4.src = 0xC6120002;
    h.ip4.dst = 0xC6120001;
    h.ip6.src = pkt::ipv4_mapped_gid(1);
    h.ip6.dst = pkt::ipv4_mapped_gid(2);
    h.ip6.src[0] = h.ip6.dst[0] = 0x20;
    h.bth.opcode = opcode;
    h.bth.dest_qp = qp;
    h.bth.psn = psn;
    h.aeth.msn = 9;
    h.reth.rkey = 0x1234;
    h.reth.dma_len = payload;
    std::vector<uint8_t> pl(payload, 0xAB), out(2048);
    size_t len = 0;
    REQUIRE(pkt::build(h, pl, out, len) == pkt::BuildError::ok);
    out.resize(len);
    return out;
}

void send(port::InjectPort& p, RecPort& rec, const std::vector<uint8_t>& bytes) {
    port::Frame f;
    REQUIRE(rec.alloc(f));
    std::memcpy(f.data, bytes.data(), bytes.size());
    f.len = uint32_t(bytes.size());
    REQUIRE(p.tx_burst(&f, 1) == 1);
}

pkt::Packet parsed(const std::vector<uint8_t>& b, pkt::ParseError want = pkt::ParseError::ok) {
    pkt::Packet pk;
    REQUIRE(pkt::parse(b, pk) == want);
    return pk;
}

}  // namespace

TEST_CASE("inject: round counts the times a (QP, PSN) went out; only the first retransmission is dropped",
          "[inject][match]") {
    port::VirtualClock clk;
    RecPort rec;
    port::InjectPort p(rec, clk);
    std::string msg;
    REQUIRE(p.add("drop dir=tx psn=5 round=2", msg) == 1);
    for (uint32_t psn : {4u, 5u, 6u, 5u, 6u, 5u}) send(p, rec, frame(pkt::op::send_only, psn));
    std::vector<uint32_t> got;
    for (auto& s : rec.sent) got.push_back(parsed(s).h.bth.psn);
    CHECK(got == std::vector<uint32_t>{4, 5, 6, 6, 5});
    const auto l = p.list();
    REQUIRE(l.size() == 1);
    CHECK(l[0].matched == 1);  // psn=5 at round 2 only: the others fail the round
    CHECK(l[0].hits == 1);
    CHECK(rec.pool_free() == 64);
}

TEST_CASE("inject: corrupt sets a field with a valid ICRC, or breaks the ICRC; ECN CE keeps the ICRC", "[inject][action]") {
    port::VirtualClock clk;
    RecPort rec;
    port::InjectPort p(rec, clk);
    std::string msg;
    REQUIRE(p.add("corrupt dir=tx op=WRITE_FIRST bth.tver=1 reth.len=0x99 ip.ttl=3", msg));
    REQUIRE(p.add("corrupt dir=tx op=SEND_ONLY icrc", msg));
    REQUIRE(p.add("ecn dir=tx op=SEND_LAST count=all", msg));
    REQUIRE(p.add("corrupt dir=tx op=ACKNOWLEDGE aeth.syndrome=0x61 bth.psn=77", msg));
    REQUIRE(p.add("corrupt dir=tx op=SEND_FIRST reth.rkey=1", msg));  // no RETH: not applicable
    send(p, rec, frame(pkt::op::write_first, 1, 0x11, false, 16));
    send(p, rec, frame(pkt::op::send_only, 2));
    send(p, rec, frame(pkt::op::send_last, 3));
    send(p, rec, frame(pkt::op::send_last, 4, 0x11, true));
    send(p, rec, frame(pkt::op::acknowledge, 5));
    send(p, rec, frame(pkt::op::send_first, 6, 0x11, false, 4));
    REQUIRE(rec.sent.size() == 6);
    pkt::Packet a;
    REQUIRE(pkt::parse(rec.sent[0], a) == pkt::ParseError::bad_tver);  // TVer 1: the peer rejects it
    CHECK(rec.sent[0][14 + 8] == 3);  // TTL
    CHECK(pkt::ipv4_header_checksum(&rec.sent[0][14]) == 0);  // fixed
    CHECK(pkt::load_be32(&rec.sent[0][14 + 20 + 8 + 12 + 12]) == 0x99);  // RETH DMA length
    parsed(rec.sent[1], pkt::ParseError::bad_icrc);
    const auto e4 = parsed(rec.sent[2]);  // ICRC and IPv4 checksum still valid
    CHECK((e4.h.ip4.tos & 3) == 3);
    const auto e6 = parsed(rec.sent[3]);
    CHECK((e6.h.ip6.traffic_class & 3) == 3);
    const auto ack = parsed(rec.sent[4]);
    CHECK(ack.h.aeth.syndrome == 0x61);
    CHECK(ack.h.bth.psn == 77);
    CHECK(rec.sent[5] == frame(pkt::op::send_first, 6, 0x11, false, 4));
    CHECK(p.inject_stats().not_applicable == 1);
    CHECK(p.inject_stats().fired == 5);
}

TEST_CASE("inject: forged responses take the matched frame's addresses, PSN or at=, instead of or beside it",
          "[inject][action]") {
    port::VirtualClock clk;
    RecPort rec;
    port::InjectPort p(rec, clk);
    std::string msg;
    REQUIRE(p.add("rnr dir=tx op=ack psn=5 timer=14", msg));
    REQUIRE(p.add("ghost-ack dir=tx op=ack psn=6", msg));
    REQUIRE(p.add("unexpected-op dir=tx op=ack psn=7 mode=replace at=+2", msg));
    REQUIRE(p.add("nak-seq dir=tx op=ack psn=8 at=3", msg));
    for (uint32_t psn = 5; psn <= 8; ++psn) send(p, rec, frame(pkt::op::acknowledge, psn, 0x42));
    REQUIRE(rec.sent.size() == 5);
    const auto a = parsed(rec.sent[0]);
    CHECK(a.h.aeth.syndrome == pkt::aeth_syndrome(pkt::AethType::rnr_nak, 14));
    CHECK((a.h.bth.psn == 5 && a.h.bth.dest_qp == 0x42 && a.h.aeth.msn == 9));
    CHECK(a.h.ip4.dst == 0xC6120001);
    CHECK(rec.sent[1] == frame(pkt::op::acknowledge, 6, 0x42));  // the real ACK, then the ghost
    const auto g = parsed(rec.sent[2]);
    CHECK((g.h.bth.psn == 6 + 4096 && g.h.aeth.syndrome == 0x1F));
    const auto u = parsed(rec.sent[3]);
    CHECK((u.h.bth.opcode == pkt::op::read_response_only && u.h.bth.psn == 9));
    const auto n = parsed(rec.sent[4]);
    CHECK((n.h.aeth.syndrome == 0x60 && n.h.bth.psn == 3));
    CHECK(rec.pool_free() == 64);
}

TEST_CASE("inject: rx drop, duplicate and delay; held frames go after their time; rule changes from another thread",
          "[inject][action]") {
    port::VirtualClock clk(1000);
    RecPort rec;
    port::InjectPort p(rec, clk);
    std::string msg;
    const uint32_t d = p.add("drop dir=rx psn=1", msg);
    REQUIRE(p.add("dup dir=rx psn=2", msg));
    REQUIRE(p.add("delay dir=rx psn=3 us=50", msg));
    for (uint32_t psn = 0; psn < 5; ++psn) rec.rxq.push_back(frame(pkt::op::send_only, psn));
    port::Frame f[32];
    uint16_t n = p.rx_burst(f, 32);
    std::vector<uint32_t> got;
    for (uint16_t i = 0; i < n; ++i) got.push_back(parsed({f[i].data, f[i].data + f[i].len}).h.bth.psn), p.free(f[i]);
    CHECK(got == std::vector<uint32_t>{0, 2, 2, 4});
    CHECK(p.next_due_ns() == 1000 + 50'000);
    CHECK(p.rx_burst(f, 32) == 0);
    clk.set(1000 + 50'000);
    REQUIRE(p.rx_burst(f, 32) == 1);
    CHECK(parsed({f[0].data, f[0].data + f[0].len}).h.bth.psn == 3);
    p.free(f[0]);
    CHECK(p.next_due_ns() == UINT64_MAX);
    CHECK(p.del(d));
    CHECK_FALSE(p.del(d));
    CHECK(p.list().size() == 2);
    for (uint32_t i = 2; i < port::InjectPort::kMaxRules; ++i) REQUIRE(p.add("drop dir=tx qp=0xffffff", msg));
    port::InjectError e = port::InjectError::ok;
    CHECK(p.add("drop dir=tx", msg, &e) == 0);
    CHECK(e == port::InjectError::too_many_rules);
    CHECK(msg == "at most 64 rules");
    p.clear();
    CHECK(p.list().empty());
    CHECK(rec.pool_free() == 64);
}

TEST_CASE("inject: rules added and deleted from another thread while bursts run: every frame accounted for",
          "[inject][threads]") {
    port::VirtualClock clk;
    RecPort rec;
    port::InjectPort p(rec, clk);
    std::atomic<bool> stop{false};
    std::thread writer([&] {
        std::string msg;
        for (int i = 0; i < 2000 && !stop; ++i) {
            const uint32_t a = p.add("drop dir=tx psn=1 count=all", msg);
            const uint32_t b = p.add("dup dir=tx psn=2 count=all", msg);
            (void)p.list();
            p.del(a);
            p.del(b);
        }
    });
    const auto f0 = frame(pkt::op::send_only, 0), f1 = frame(pkt::op::send_only, 1), f2 = frame(pkt::op::send_only, 2);
    for (int i = 0; i < 20000; ++i) send(p, rec, i % 3 == 0 ? f0 : i % 3 == 1 ? f1 : f2);
    stop = true;
    writer.join();
    size_t n0 = 0, n1 = 0, n2 = 0;
    for (auto& s : rec.sent) (s == f0 ? n0 : s == f1 ? n1 : n2) += 1;
    CHECK(n0 == 6667);
    CHECK(n1 <= 6667);
    CHECK(n2 >= 6666);
    CHECK(n0 + n1 + n2 == rec.sent.size());
    CHECK(rec.pool_free() == 64);
}

// ---------------------------------------------------------------- two HCAs on the in-memory wire

namespace {

using tools::SimConfig;
using tools::SimPair;

struct Seen {
    int dir;
    uint8_t opcode;
    uint32_t psn;
    uint8_t syndrome;
    uint8_t ecn;
    uint64_t t;
};

// IBTA 9.7.5.2.8: an RNR NAK carries the PSN of the request the responder could not take. A SEND
// takes its receive WQE at its First (or Only) packet, an RDMA WRITE with Immediate at the packet
// with the immediate; so an ACK replaced without at= names the earliest such packet not yet
// acknowledged, up to the ACK's PSN (the ACK's own when there is none).
TEST_CASE("inject: a forged RNR NAK names the packet a responder could not take a receive WQE for",
          "[inject][action]") {
    port::VirtualClock clk;
    RecPort rec;
    port::InjectPort p(rec, clk);
    std::string msg;
    REQUIRE(p.add("rnr dir=tx op=ack psn=102 count=2 timer=14", msg));
    REQUIRE(p.add("rnr dir=tx op=ack psn=105", msg));
    REQUIRE(p.add("rnr dir=tx op=ack psn=107", msg));
    REQUIRE(p.add("rnr dir=tx op=ack psn=108", msg));
    REQUIRE(p.add("rnr dir=tx op=ack psn=111 at=+0", msg));
    CHECK(p.list()[4].text == "rnr dir=tx op=ack psn=111 count=1 timer=1 at=+0 mode=replace");
    namespace o = pkt::op;
    // The requester 198.18.0.2 sends to our QP 0x11 (rx); our responses go to its QP 0x22 (tx).
    auto rx = [&](uint8_t opcode, uint32_t psn, uint32_t qp = 0x11) {
        rec.rxq.push_back(frame(opcode, psn, qp, false, 64));
        port::Frame f[4];
        const uint16_t n = p.rx_burst(f, 4);
        REQUIRE(n == 1);
        p.free(f[0]);
    };
    // Our ACK of `psn` (MSN 9); what went on the wire: (PSN, AETH syndrome), its MSN in last_msn.
    uint32_t last_msn = 0;
    auto ack = [&](uint32_t psn, uint32_t qp = 0x22) {
        auto b = frame(o::acknowledge, psn, qp);
        pkt::Packet pk = parsed(b);
        std::swap(pk.h.ip4.src, pk.h.ip4.dst);
        pk.h.aeth.syndrome = 0x1F;
        size_t len = 0;
        b.resize(2048);
        REQUIRE(pkt::build(pk.h, {}, b, len) == pkt::BuildError::ok);
        b.resize(len);
        send(p, rec, b);
        const auto a = parsed(rec.sent.back());
        CHECK(a.h.ip4.dst == 0xC6120002);
        last_msn = a.h.aeth.msn;
        return std::pair<uint32_t, uint8_t>{a.h.bth.psn, a.h.aeth.syndrome};
    };
    const uint8_t rnr14 = pkt::aeth_syndrome(pkt::AethType::rnr_nak, 14), rnr1 = pkt::aeth_syndrome(pkt::AethType::rnr_nak, 1);
    // Another QP of the same requester, PSNs far away: learnt, never confused with the first.
    rx(o::send_only, 50, 0x33);
    CHECK(ack(50, 0x44) == std::pair<uint32_t, uint8_t>{50, 0x1F});
    // A SEND of 3 packets: the NAK names its First, not the ACK's PSN (its Last); twice.
    for (int i = 0; i < 2; ++i) {
        rx(o::send_first, 100), rx(o::send_middle, 101), rx(o::send_last, 102);
        CHECK(ack(102) == std::pair<uint32_t, uint8_t>{100, rnr14});
        CHECK(last_msn == 8);  // the SEND not completed: the MSN before it (IBTA 9.7.5.1)
    }
    rx(o::send_first, 100), rx(o::send_middle, 101), rx(o::send_last, 102);
    CHECK(ack(102) == std::pair<uint32_t, uint8_t>{102, 0x1F});  // count=2 spent: the real ACK
    // A WRITE (no WQE: acknowledged by the NAK), then a SEND Only: the SEND's PSN.
    rx(o::write_first, 103), rx(o::write_last, 104), rx(o::send_only, 105);
    CHECK(ack(105) == std::pair<uint32_t, uint8_t>{105, rnr1});
    CHECK(last_msn == 8);  // the WRITE completed, the SEND not
    rx(o::send_only, 105);
    CHECK(ack(105).second == 0x1F);
    // A WRITE with Immediate of 2 packets: the packet with the immediate, its Last.
    rx(o::write_first, 106), rx(o::write_last_imm, 107);
    CHECK(ack(107) == std::pair<uint32_t, uint8_t>{107, rnr1});
    CHECK(last_msn == 8);
    rx(o::write_last_imm, 107);
    CHECK(ack(107).second == 0x1F);
    // A WRITE Only needs no WQE: the ACK's PSN.
    rx(o::write_only, 108);
    CHECK(ack(108) == std::pair<uint32_t, uint8_t>{108, rnr1});
    CHECK(last_msn == 9);  // at the ACK's PSN: its MSN
    // at=+0: the ACK's PSN, as asked.
    rx(o::send_first, 109), rx(o::send_middle, 110), rx(o::send_last, 111);
    CHECK(ack(111) == std::pair<uint32_t, uint8_t>{111, rnr1});
    CHECK(rec.pool_free() == 64);

    // dir=rx: the ACK our requester receives becomes the RNR NAK, for our own SEND's First.
    RecPort rec2;
    port::InjectPort q(rec2, clk);
    REQUIRE(q.add("rnr dir=rx op=ack", msg));
    for (uint32_t psn = 200; psn <= 202; ++psn)
        send(q, rec2, frame(psn == 200 ? o::send_first : psn == 201 ? o::send_middle : o::send_last, psn, 0x11, false, 64));
    auto b = frame(o::acknowledge, 202, 0x22);
    pkt::Packet pk = parsed(b);
    std::swap(pk.h.ip4.src, pk.h.ip4.dst);
    size_t len = 0;
    b.resize(2048);
    REQUIRE(pkt::build(pk.h, {}, b, len) == pkt::BuildError::ok);
    b.resize(len);
    rec2.rxq.push_back(b);
    port::Frame f[4];
    REQUIRE(q.rx_burst(f, 4) == 1);
    const auto n = parsed({f[0].data, f[0].data + f[0].len});
    q.free(f[0]);
    CHECK((n.h.bth.psn == 200 && n.h.aeth.syndrome == rnr1 && n.h.bth.dest_qp == 0x22));
    CHECK(rec2.pool_free() == 64);
}

// Two HCAs, each on an InjectPort over its end of the wire; the wire's tap records what crossed.
struct Pair {
    explicit Pair(SimConfig c) : clock(1'000'000'000), wire(c.wire, clock), cfg(c) {
        for (int i = 0; i < 2; ++i) {
            inj[i] = std::make_unique<port::InjectPort>(wire.end(i), clock);
            SimPair::build_side(side[i], *inj[i], clock, c, i, c.wire.mac[1 - i]);
        }
        for (int i = 0; i < 2; ++i)
            REQUIRE(tools::connect_qp(side[i].qp, c, side[1 - i].qp.qpn(), side[1 - i].gid, c.sq_psn[i], c.sq_psn[1 - i]));
        wire.set_tap([this](int dir, const uint8_t* f, uint32_t len, uint64_t t, port::Event ev) {
            if (ev != port::Event::sent) return;
            pkt::Packet pk;
            const pkt::ParseError e = pkt::parse({f, len}, pk);
            if (!pkt::decoded_all(e)) return;
            seen.push_back({dir, pk.h.bth.opcode, pk.h.bth.psn, pk.op->has(pkt::Ext::aeth) ? pk.h.aeth.syndrome : uint8_t(0),
                            uint8_t(pk.h.ip4.tos & 3), t});
        });
    }
    void rule(int i, const std::string& r) {
        std::string msg;
        INFO(msg);
        REQUIRE(inj[i]->add(r, msg) != 0);
    }
    bool run_until(const std::function<bool()>& done, uint64_t max_ns = 10'000'000'000ull) {
        const uint64_t start = clock.now_ns();
        for (int n = 0; n < 5'000'000; ++n) {
            if (done()) return true;
            if (side[0].hca->poll() + side[1].hca->poll()) continue;
            const uint64_t next = std::min({wire.next_delivery_ns(), side[0].hca->next_timer_ns(), side[1].hca->next_timer_ns(),
                                            inj[0]->next_due_ns(), inj[1]->next_due_ns()});
            if (next == UINT64_MAX || next - start > max_ns) return done();
            clock.set(std::max(next, clock.now_ns() + 1));
        }
        return done();
    }
    uint64_t addr(int i, uint64_t off) { return side[i].mr.addr() + off; }
    Status post(int i, WrOpcode op, uint64_t off, uint32_t len, uint64_t roff, uint64_t wr_id) {
        Sge sge{addr(i, off), len, side[i].mr.lkey()};
        SendWr w;
        w.wr_id = wr_id;
        w.sg_list = &sge;
        w.num_sge = 1;
        w.opcode = op;
        w.send_flags = send_flag::signaled;
        w.rdma = {addr(1 - i, roff), side[1 - i].mr.rkey()};
        const SendWr* bad = nullptr;
        return side[i].qp.post_send(&w, &bad);
    }
    Status post_recv(int i, uint64_t off, uint32_t len, uint64_t wr_id) {
        Sge sge{addr(i, off), len, side[i].mr.lkey()};
        RecvWr r;
        r.wr_id = wr_id;
        r.sg_list = &sge;
        r.num_sge = 1;
        const RecvWr* bad = nullptr;
        return side[i].qp.post_recv(&r, &bad);
    }
    std::vector<Wc> cqes[2];
    bool wait_cqes(size_t a, size_t b) {
        return run_until([&] {
            Wc wc[16];
            for (int i = 0; i < 2; ++i)
                for (int n; (n = side[i].cq.poll(wc)) > 0;) cqes[i].insert(cqes[i].end(), wc, wc + n);
            return cqes[0].size() >= a && cqes[1].size() >= b;
        });
    }
    void fill(int i, size_t n, uint32_t seed) {
        std::mt19937 r(seed);
        for (size_t k = 0; k < n; ++k) side[i].mem[k] = uint8_t(r());
    }
    uint64_t ctr(int i, Counter c) { return side[i].dev->counters().get(c); }
    // "dir:OPCODE@psn" of every frame that crossed, in order.
    std::string seq() const {
        std::string s;
        for (const Seen& x : seen) s += std::to_string(x.dir) + ":" + pkt::opcode_info(x.opcode).id + "@" + std::to_string(x.psn) + " ";
        return s;
    }

    port::VirtualClock clock;
    port::MemWire wire;
    SimConfig cfg;
    std::unique_ptr<port::InjectPort> inj[2];
    SimPair::Side side[2];
    std::vector<Seen> seen;
};

SimConfig cfg0() {
    SimConfig c;
    c.wire.latency_ns = 2000;
    c.sq_psn[0] = 0;
    c.sq_psn[1] = 0x200;
    return c;
}

}  // namespace

TEST_CASE("inject on the wire: drop WRITE PSN 5 -> NAK sequence error at 5 -> Go-Back-N from 5, byte-exact",
          "[inject][wire]") {
    Pair p(cfg0());
    p.rule(0, "drop dir=tx op=WRITE_MIDDLE psn=5");
    p.fill(0, 8192, 1);
    REQUIRE(p.post(0, WrOpcode::rdma_write, 0, 8192, 65536, 1) == Status::ok);
    REQUIRE(p.wait_cqes(1, 0));
    CHECK(p.cqes[0][0].status == WcStatus::success);
    CHECK(std::memcmp(p.side[1].mem.data() + 65536, p.side[0].mem.data(), 8192) == 0);
    CHECK(p.seq() ==
          "0:RC_RDMA_WRITE_FIRST@0 0:RC_RDMA_WRITE_MIDDLE@1 0:RC_RDMA_WRITE_MIDDLE@2 0:RC_RDMA_WRITE_MIDDLE@3 "
          "0:RC_RDMA_WRITE_MIDDLE@4 0:RC_RDMA_WRITE_MIDDLE@6 0:RC_RDMA_WRITE_LAST@7 1:RC_ACKNOWLEDGE@5 "
          "0:RC_RDMA_WRITE_MIDDLE@5 0:RC_RDMA_WRITE_MIDDLE@6 0:RC_RDMA_WRITE_LAST@7 1:RC_ACKNOWLEDGE@7 ");
    for (const Seen& s : p.seen)
        if (s.dir == 1 && s.psn == 5) CHECK(s.syndrome == 0x60);  // NAK PSN sequence error
    CHECK(p.ctr(1, Counter::out_of_sequence) == 2);
    CHECK(p.ctr(0, Counter::packet_seq_err) == 1);
    const auto l = p.inj[0]->list();
    CHECK((l[0].hits == 1 && l[0].matched == 2));  // PSN 5 went twice: the drop, then the resend
}

TEST_CASE("inject on the wire: a duplicated SEND is counted as a duplicate by the responder, executed once",
          "[inject][wire]") {
    Pair p(cfg0());
    p.rule(0, "duplicate dir=tx op=send");
    p.fill(0, 64, 2);
    REQUIRE(p.post_recv(1, 1000, 64, 50) == Status::ok);
    REQUIRE(p.post_recv(1, 2000, 64, 51) == Status::ok);
    REQUIRE(p.post(0, WrOpcode::send, 0, 64, 0, 9) == Status::ok);
    REQUIRE(p.wait_cqes(1, 1));
    CHECK_FALSE(p.run_until([&] { return p.side[1].cq.poll(std::span<Wc>()) > 0; }, 100'000'000));
    CHECK(p.cqes[1].size() == 1);
    CHECK(p.cqes[1][0].wr_id == 50);
    CHECK(std::memcmp(p.side[1].mem.data() + 1000, p.side[0].mem.data(), 64) == 0);
    CHECK(p.seq().starts_with("0:RC_SEND_ONLY@0 0:RC_SEND_ONLY@0 "));
    CHECK(p.ctr(1, Counter::duplicate_request) == 1);
}

TEST_CASE("inject on the wire: ECN CE on every frame sent, the peer accepts them (ICRC masks ECN)", "[inject][wire]") {
    Pair p(cfg0());
    p.rule(0, "ecn dir=tx count=all");
    p.fill(0, 4096, 3);
    REQUIRE(p.post(0, WrOpcode::rdma_write, 0, 4096, 8192, 1) == Status::ok);
    REQUIRE(p.wait_cqes(1, 0));
    CHECK(std::memcmp(p.side[1].mem.data() + 8192, p.side[0].mem.data(), 4096) == 0);
    size_t marked = 0;
    std::vector<uint8_t> unmarked;
    for (const Seen& s : p.seen) {
        if (s.ecn == 3) ++marked;
        else unmarked.push_back(s.opcode);
        CHECK(s.ecn == (s.dir == 0 ? 3 : 0));
    }
    CHECK(marked == 4);
    // The peer's DCQCN notification point answers the marks with one CNP (they came within its
    // 50 us interval, docs/dcqcn.md), and the ACK.
    std::sort(unmarked.begin(), unmarked.end());
    CHECK(unmarked == std::vector<uint8_t>{pkt::op::acknowledge, pkt::op::cnp});
    CHECK(p.side[1].dev->counters().get(Counter::np_ecn_marked_roce_packets) == 4);
    CHECK(p.side[1].dev->counters().get(Counter::np_cnp_sent) == 1);
    CHECK(p.side[0].dev->counters().get(Counter::rp_cnp_handled) == 1);
    CHECK(p.side[1].dev->counters().rx_err[size_t(pkt::ParseError::bad_icrc)] == 0);
}

TEST_CASE("inject on the wire: a corrupt ICRC -> the peer drops it and counts rx_err_bad_icrc -> timeout resend",
          "[inject][wire]") {
    Pair p(cfg0());
    p.rule(0, "corrupt dir=tx op=WRITE_ONLY icrc");
    p.fill(0, 100, 4);
    REQUIRE(p.post(0, WrOpcode::rdma_write, 0, 100, 4096, 1) == Status::ok);
    REQUIRE(p.wait_cqes(1, 0));
    CHECK(p.cqes[0][0].status == WcStatus::success);
    CHECK(std::memcmp(p.side[1].mem.data() + 4096, p.side[0].mem.data(), 100) == 0);
    CHECK(p.side[1].dev->counters().rx_err[size_t(pkt::ParseError::bad_icrc)] == 1);
    CHECK(p.ctr(0, Counter::local_ack_timeout_err) == 1);
    CHECK(p.seq() == "0:RC_RDMA_WRITE_ONLY@0 0:RC_RDMA_WRITE_ONLY@0 1:RC_ACKNOWLEDGE@0 ");  // the tap parses the first: bad ICRC
}

TEST_CASE("inject on the wire: a forged RNR NAK -> the requester waits the RNR timer and retries; the SEND runs once",
          "[inject][wire]") {
    Pair p(cfg0());
    p.rule(1, "rnr dir=tx op=ack timer=14");  // 1.28 ms
    p.fill(0, 64, 5);
    REQUIRE(p.post_recv(1, 1000, 64, 50) == Status::ok);
    REQUIRE(p.post(0, WrOpcode::send, 0, 64, 0, 9) == Status::ok);
    REQUIRE(p.wait_cqes(1, 1));
    CHECK(p.cqes[0][0].status == WcStatus::success);
    CHECK(p.cqes[1].size() == 1);
    CHECK(std::memcmp(p.side[1].mem.data() + 1000, p.side[0].mem.data(), 64) == 0);
    REQUIRE(p.seq() == "0:RC_SEND_ONLY@0 1:RC_ACKNOWLEDGE@0 0:RC_SEND_ONLY@0 1:RC_ACKNOWLEDGE@0 ");
    CHECK(p.seen[1].syndrome == pkt::aeth_syndrome(pkt::AethType::rnr_nak, 14));
    CHECK(p.seen[3].syndrome != p.seen[1].syndrome);  // count=1: the re-ACK is the real one
    CHECK(p.seen[2].t - p.seen[1].t >= transport::rnr_timer_ns(14));
    CHECK(p.ctr(0, Counter::rcvd_rnr_err) == 1);
    CHECK(p.ctr(1, Counter::duplicate_request) == 1);
}

TEST_CASE("inject on the wire: an RNR NAK instead of the ACK of a 3-packet SEND names its First; resent from there, once",
          "[inject][wire]") {
    Pair p(cfg0());  // path MTU 1024
    p.rule(1, "rnr dir=tx op=ack timer=14");
    p.fill(0, 3000, 6);
    REQUIRE(p.post_recv(1, 4096, 3000, 50) == Status::ok);
    REQUIRE(p.post(0, WrOpcode::send, 0, 3000, 0, 9) == Status::ok);
    REQUIRE(p.wait_cqes(1, 1));
    CHECK(p.cqes[0][0].status == WcStatus::success);
    CHECK(p.cqes[1].size() == 1);
    CHECK(std::memcmp(p.side[1].mem.data() + 4096, p.side[0].mem.data(), 3000) == 0);
    REQUIRE(p.seq() == "0:RC_SEND_FIRST@0 0:RC_SEND_MIDDLE@1 0:RC_SEND_LAST@2 1:RC_ACKNOWLEDGE@0 "
                       "0:RC_SEND_FIRST@0 0:RC_SEND_MIDDLE@1 0:RC_SEND_LAST@2 1:RC_ACKNOWLEDGE@2 ");
    CHECK(p.seen[3].syndrome == pkt::aeth_syndrome(pkt::AethType::rnr_nak, 14));
    CHECK(p.seen[7].syndrome != p.seen[3].syndrome);
    CHECK(p.seen[4].t - p.seen[3].t >= transport::rnr_timer_ns(14));
    CHECK(p.ctr(0, Counter::rcvd_rnr_err) == 1);
}

TEST_CASE("inject on the wire: a ghost ACK for a PSN not yet sent is ignored by the requester", "[inject][wire]") {
    Pair p(cfg0());
    // After the NAK for PSN 2 a ghost ACK for 2 + 4096 arrives while PSNs 2..3 are outstanding.
    p.rule(0, "drop dir=tx psn=2");
    p.rule(1, "ghost-ack dir=tx op=ack");
    p.fill(0, 4096, 6);
    REQUIRE(p.post(0, WrOpcode::rdma_write, 0, 4096, 8192, 1) == Status::ok);
    REQUIRE(p.wait_cqes(1, 0));
    CHECK(p.cqes[0].size() == 1);
    CHECK(p.cqes[0][0].status == WcStatus::success);
    CHECK(std::memcmp(p.side[1].mem.data() + 8192, p.side[0].mem.data(), 4096) == 0);
    CHECK(p.seq() ==
          "0:RC_RDMA_WRITE_FIRST@0 0:RC_RDMA_WRITE_MIDDLE@1 0:RC_RDMA_WRITE_LAST@3 1:RC_ACKNOWLEDGE@2 "
          "1:RC_ACKNOWLEDGE@4098 0:RC_RDMA_WRITE_MIDDLE@2 0:RC_RDMA_WRITE_LAST@3 1:RC_ACKNOWLEDGE@3 ");
    CHECK(p.ctr(0, Counter::packet_seq_err) == 1);
    CHECK(p.ctr(0, Counter::req_cqe_error) == 0);
}

TEST_CASE("inject on the wire: forged NAKs: sequence error -> resend from its PSN; remote access -> REM_ACCESS_ERR",
          "[inject][wire]") {
    SECTION("nak-seq instead of the ACK: the requester goes back to the PSN it names") {
        Pair p(cfg0());
        p.rule(1, "nak-seq dir=tx op=ack psn=3 at=1");
        p.fill(0, 4096, 7);
        REQUIRE(p.post(0, WrOpcode::rdma_write, 0, 4096, 8192, 1) == Status::ok);
        REQUIRE(p.wait_cqes(1, 0));
        CHECK(p.cqes[0][0].status == WcStatus::success);
        CHECK(p.seq() ==
              "0:RC_RDMA_WRITE_FIRST@0 0:RC_RDMA_WRITE_MIDDLE@1 0:RC_RDMA_WRITE_MIDDLE@2 0:RC_RDMA_WRITE_LAST@3 "
              "1:RC_ACKNOWLEDGE@1 0:RC_RDMA_WRITE_MIDDLE@1 0:RC_RDMA_WRITE_MIDDLE@2 0:RC_RDMA_WRITE_LAST@3 "
              "1:RC_ACKNOWLEDGE@3 ");
        CHECK(p.ctr(1, Counter::duplicate_request) == 3);
        CHECK(p.ctr(0, Counter::packet_seq_err) == 1);
    }
    SECTION("nak-access instead of the ACK") {
        Pair p(cfg0());
        p.rule(1, "nak-access dir=tx op=ack");
        REQUIRE(p.post(0, WrOpcode::rdma_write, 0, 100, 8192, 1) == Status::ok);
        REQUIRE(p.wait_cqes(1, 0));
        CHECK(p.cqes[0][0].status == WcStatus::rem_access_err);
        CHECK(p.ctr(0, Counter::req_remote_access_errors) == 1);
    }
}

TEST_CASE("inject on the wire: reorder swaps a packet with the next to its QP; delay lets later ones overtake",
          "[inject][wire]") {
    Pair p(cfg0());
    p.rule(0, "reorder dir=tx psn=1");
    p.fill(0, 4096, 8);
    REQUIRE(p.post(0, WrOpcode::rdma_write, 0, 4096, 8192, 1) == Status::ok);
    REQUIRE(p.wait_cqes(1, 0));
    CHECK(p.cqes[0][0].status == WcStatus::success);
    CHECK(std::memcmp(p.side[1].mem.data() + 8192, p.side[0].mem.data(), 4096) == 0);
    CHECK(p.seq().starts_with("0:RC_RDMA_WRITE_FIRST@0 0:RC_RDMA_WRITE_MIDDLE@2 0:RC_RDMA_WRITE_MIDDLE@1 "));
    CHECK(p.ctr(1, Counter::out_of_sequence) >= 1);
}

TEST_CASE("inject on the wire: rx drop at the responder -> the same NAK and resend; TVer 1 dropped as bad_tver",
          "[inject][wire]") {
    Pair p(cfg0());
    p.rule(1, "drop dir=rx psn=1");
    p.rule(0, "corrupt dir=tx psn=3 bth.tver=1");
    p.fill(0, 4096, 9);
    REQUIRE(p.post(0, WrOpcode::rdma_write, 0, 4096, 8192, 1) == Status::ok);
    REQUIRE(p.wait_cqes(1, 0));
    CHECK(p.cqes[0][0].status == WcStatus::success);
    CHECK(std::memcmp(p.side[1].mem.data() + 8192, p.side[0].mem.data(), 4096) == 0);
    CHECK(p.side[1].dev->counters().rx_err[size_t(pkt::ParseError::bad_tver)] == 1);
    CHECK(p.ctr(0, Counter::packet_seq_err) == 1);
}

TEST_CASE("inject: the capture above the injection, with a note on each frame a rule touched", "[inject][capture]") {
    port::VirtualClock clk(5000);
    port::WireConfig wc;
    port::MemWire wire(wc, clk);
    port::InjectPort inj(wire.end(0), clk);
    port::NetConfig nc;
    nc.ip4 = 0xC6120001;  // the frames below go from .2 to .1: sent by end 0 they go to end 1's MAC
    port::NetPort net(inj, clk, nc);
    const std::string path = "test_inject_capture.pcap";
    {
        port::PcapWriter w(path);
        REQUIRE(w.ok());
        net.set_capture(&w);
        inj.set_capture(&w);
        std::string msg;
        REQUIRE(inj.add("drop dir=tx psn=1", msg));
        REQUIRE(inj.add("dup dir=tx psn=2", msg));
        REQUIRE(inj.add("ecn dir=tx psn=3", msg));
        REQUIRE(inj.add("rnr dir=tx psn=4 timer=3", msg));
        REQUIRE(inj.add("drop dir=rx psn=11", msg));
        REQUIRE(inj.add("dup dir=rx psn=12", msg));
        port::Frame f[5];
        for (uint32_t i = 0; i < 5; ++i) {
            REQUIRE(inj.alloc(f[i]));
            const auto b = frame(pkt::op::send_only, i);
            std::memcpy(f[i].data, b.data(), b.size());
            f[i].len = uint32_t(b.size());
            f[i].data[0] = 0x02, f[i].data[5] = 0x02;  // to end 1's MAC
        }
        REQUIRE(net.tx_burst(f, 5) == 5);
        // From end 1 to us (.1 at end 0's MAC): PSNs 10, 11, 12.
        for (uint32_t i = 10; i < 13; ++i) {
            port::Frame g;
            REQUIRE(wire.end(1).alloc(g));
            auto b = frame(pkt::op::send_only, i);
            std::memcpy(b.data(), wc.mac[0].data(), 6);
            std::memcpy(g.data, b.data(), b.size());
            g.len = uint32_t(b.size());
            REQUIRE(wire.end(1).tx_burst(&g, 1) == 1);
        }
        clk.advance(1'000'000);
        port::Frame r[32];
        const uint16_t n = net.rx_burst(r, 32);
        std::vector<uint32_t> got;
        for (uint16_t i = 0; i < n; ++i) got.push_back(parsed({r[i].data, r[i].data + r[i].len}).h.bth.psn), net.free(r[i]);
        CHECK(got == std::vector<uint32_t>{10, 12, 12});
        w.flush();
    }
    // What end 1 received: 0, 2, 2, 3 (CE), the forged RNR NAK for 4.
    // The capture: the forged RNR NAK (written by the injector first), then the HCA's five frames, then rx.
    port::PcapReader rd(path);
    REQUIRE(rd.ok());
    std::vector<uint32_t> psns;
    port::PcapFrame pf;
    while (rd.next(pf)) psns.push_back(parsed({pf.data.begin(), pf.data.end()}).h.bth.psn);
    CHECK(psns == std::vector<uint32_t>{4, 0, 1, 2, 3, 4, 11, 10, 12, 12});
    const auto notes = port::read_notes(path);
    std::map<uint64_t, std::string> want = {
        {1, "injected: #4 rnr dir=tx psn=4 count=1 timer=3 mode=replace: forged RNR NAK"},
        {3, "injected: #1 drop dir=tx psn=1 count=1: dropped: not sent"},
        {4, "injected: #2 duplicate dir=tx psn=2 count=1: sent twice"},
        {5, "injected: #3 ecn dir=tx psn=3 count=1: ECN CE marked on the wire"},
        {6, "injected: #4 rnr dir=tx psn=4 count=1 timer=3 mode=replace: replaced by a forged frame: not sent"},
        {7, "injected: #5 drop dir=rx psn=11 count=1: dropped: not delivered"},
        {10, "injected: #6 duplicate dir=rx psn=12 count=1: duplicate copy"},
    };
    CHECK(notes == want);
    std::remove(path.c_str());
    std::remove(port::notes_path(path).c_str());
}

TEST_CASE("inject on the wire: ack-withhold, nak-inval, delay and an unexpected opcode", "[inject][wire]") {
    SECTION("ack-withhold: the ACK never leaves; the requester times out, resends, the responder re-ACKs") {
        Pair p(cfg0());
        p.rule(1, "ack-withhold dir=tx");
        REQUIRE(p.post(0, WrOpcode::rdma_write, 0, 100, 8192, 1) == Status::ok);
        REQUIRE(p.wait_cqes(1, 0));
        CHECK(p.cqes[0][0].status == WcStatus::success);
        CHECK(p.seq() == "0:RC_RDMA_WRITE_ONLY@0 0:RC_RDMA_WRITE_ONLY@0 1:RC_ACKNOWLEDGE@0 ");
        CHECK(p.ctr(0, Counter::local_ack_timeout_err) == 1);
        CHECK(p.ctr(1, Counter::duplicate_request) == 1);
    }
    SECTION("nak-inval instead of the ACK: REM_INV_REQ_ERR") {
        Pair p(cfg0());
        p.rule(1, "nak-inval dir=tx op=ack");
        REQUIRE(p.post(0, WrOpcode::rdma_write, 0, 100, 8192, 1) == Status::ok);
        REQUIRE(p.wait_cqes(1, 0));
        CHECK(p.cqes[0][0].status == WcStatus::rem_inv_req_err);
        CHECK(p.ctr(0, Counter::req_remote_invalid_request) == 1);
        CHECK(p.seen.back().syndrome == 0x61);
    }
    SECTION("delay: PSN 1 held 50 us; 2 and 3 overtake it; NAK and resend of 1; the late copy a duplicate") {
        Pair p(cfg0());
        p.rule(0, "delay dir=tx psn=1 us=50");
        p.fill(0, 4096, 10);
        REQUIRE(p.post(0, WrOpcode::rdma_write, 0, 4096, 8192, 1) == Status::ok);
        REQUIRE(p.wait_cqes(1, 0));
        CHECK(p.cqes[0][0].status == WcStatus::success);
        CHECK(std::memcmp(p.side[1].mem.data() + 8192, p.side[0].mem.data(), 4096) == 0);
        CHECK(p.seq().starts_with("0:RC_RDMA_WRITE_FIRST@0 0:RC_RDMA_WRITE_MIDDLE@2 0:RC_RDMA_WRITE_LAST@3 1:RC_ACKNOWLEDGE@1 "));
        CHECK(p.inj[0]->next_due_ns() == p.seen[0].t + 50'000);
        p.run_until([] { return false; }, 200'000);  // past the hold
        std::vector<uint64_t> t1;
        for (const Seen& x : p.seen)
            if (x.dir == 0 && x.psn == 1) t1.push_back(x.t - p.seen[0].t);
        REQUIRE(t1.size() == 2);
        CHECK(t1[0] < 50'000);   // the resend after the NAK
        CHECK(t1[1] == 50'000);  // the delayed original
        CHECK(p.ctr(1, Counter::duplicate_request) == 1);
    }
    SECTION("unexpected-op: a READ RESPONSE Only after the ACK of a WRITE, for the next PSN: ignored") {
        Pair p(cfg0());
        p.rule(1, "unexpected-op dir=tx op=ack at=+1");
        REQUIRE(p.post(0, WrOpcode::rdma_write, 0, 100, 8192, 1) == Status::ok);
        REQUIRE(p.post(0, WrOpcode::rdma_write, 100, 100, 8300, 2) == Status::ok);
        REQUIRE(p.wait_cqes(2, 0));
        CHECK(p.cqes[0][0].status == WcStatus::success);
        CHECK(p.cqes[0][1].status == WcStatus::success);
        CHECK(p.seq().find("1:RC_RDMA_READ_RESPONSE_ONLY@") != std::string::npos);
    }
}
