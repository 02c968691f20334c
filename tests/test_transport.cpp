// The transport engines over the in-memory wire in virtual time: every RC operation byte-exact,
// exactly once and in order, under seeded faults; the classic loss cases packet by packet; UC and
// UD; error completions.
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "packet/parse.hpp"
#include "tools/hcaemu/sim_pair.hpp"
#include "transport/psn.hpp"

using namespace hcaemu;
using tools::SimConfig;
using tools::SimPair;

namespace {

// One packet seen on the wire, decoded.
struct Seen {
    int dir;
    uint8_t opcode;
    uint32_t psn;
    uint8_t syndrome;
    port::Event ev;
};

struct Bench {
    explicit Bench(SimConfig c) : p(c) {
        p.wire.set_tap([this](int dir, const uint8_t* f, uint32_t len, uint64_t, port::Event ev) {
            pkt::Packet pk;
            if (pkt::parse({f, len}, pk) != pkt::ParseError::ok) return;
            if (ev == port::Event::sent || port::is_drop(ev))
                seen.push_back({dir, pk.h.bth.opcode, pk.h.bth.psn, pk.op->has(pkt::Ext::aeth) ? pk.h.aeth.syndrome : uint8_t(0), ev});
        });
    }
    SimPair p;
    std::vector<Seen> seen;

    uint8_t* mem(int i) { return p.side[i].mem.data(); }
    uint64_t addr(int i, uint64_t off = 0) { return p.side[i].mr.addr() + off; }

    void fill(int i, uint64_t off, size_t n, uint32_t seed) {
        std::mt19937 r(seed);
        for (size_t k = 0; k < n; ++k) mem(i)[off + k] = uint8_t(r());
    }

    Status post(int i, WrOpcode op, uint64_t local_off, uint32_t len, uint64_t remote_off, uint64_t wr_id,
                uint32_t flags = send_flag::signaled, uint64_t cmp = 0, uint64_t swp = 0) {
        Sge sge{addr(i, local_off), len, p.side[i].mr.lkey()};
        SendWr w;
        w.wr_id = wr_id;
        w.sg_list = &sge;
        w.num_sge = 1;
        w.opcode = op;
        w.send_flags = flags;
        w.imm_data = 0x1000 + uint32_t(wr_id);
        w.invalidate_rkey = 0xABCD;
        w.rdma = {addr(1 - i, remote_off), p.side[1 - i].mr.rkey()};
        w.atomic = {addr(1 - i, remote_off), cmp, swp, p.side[1 - i].mr.rkey()};
        if (p.cfg.type == QpType::ud) {
            w.ud.ah = &p.side[i].ah;
            w.ud.remote_qpn = p.side[1 - i].qp.qpn();
            w.ud.remote_qkey = 0x11111111;
        }
        const SendWr* bad = nullptr;
        return p.side[i].qp.post_send(&w, &bad);
    }

    Status post_recv(int i, uint64_t off, uint32_t len, uint64_t wr_id) {
        Sge sge{addr(i, off), len, p.side[i].mr.lkey()};
        RecvWr r;
        r.wr_id = wr_id;
        r.sg_list = &sge;
        r.num_sge = 1;
        const RecvWr* bad = nullptr;
        return p.side[i].qp.post_recv(&r, &bad);
    }

    std::vector<Wc> cqes[2];
    void poll_cqs() {
        Wc wc[16];
        for (int i = 0; i < 2; ++i) {
            int n;
            while ((n = p.side[i].cq.poll(wc)) > 0) cqes[i].insert(cqes[i].end(), wc, wc + n);
        }
    }
    bool wait_cqes(size_t a, size_t b, uint64_t max_ns = 60'000'000'000ull) {
        return p.run_until([&] { poll_cqs(); return cqes[0].size() >= a && cqes[1].size() >= b; }, max_ns);
    }
    size_t count(int dir, uint8_t opcode, port::Event ev = port::Event::sent) const {
        size_t n = 0;
        for (const Seen& s : seen) n += s.dir == dir && s.opcode == opcode && s.ev == ev;
        return n;
    }
};

SimConfig rc_config() {
    SimConfig c;
    c.wire.latency_ns = 2000;
    return c;
}

}  // namespace

TEST_CASE("RC WRITE of 1 MiB arrives byte-exact with one completion", "[transport][rc]") {
    Bench b(rc_config());
    b.fill(0, 0, 1 << 20, 1);
    REQUIRE(b.post(0, WrOpcode::rdma_write, 0, 1 << 20, 4096, 77) == Status::ok);
    REQUIRE(b.wait_cqes(1, 0));
    REQUIRE(b.cqes[0].size() == 1);
    CHECK(b.cqes[0][0].wr_id == 77);
    CHECK(b.cqes[0][0].status == WcStatus::success);
    CHECK(b.cqes[0][0].opcode == WcOpcode::rdma_write);
    CHECK(std::memcmp(b.mem(1) + 4096, b.mem(0), 1 << 20) == 0);
    CHECK(b.count(0, pkt::op::write_first) == 1);
    CHECK(b.count(0, pkt::op::write_middle) == 1022);
    CHECK(b.count(0, pkt::op::write_last) == 1);
}

namespace {

using namespace pkt::op;

// Expected (direction, opcode, PSN) of sent frames, in order; drops are marked.
struct Step {
    int dir;
    uint8_t opcode;
    uint32_t psn;
    bool dropped = false;
};

void check_sequence(const Bench& b, const std::vector<Step>& want) {
    std::vector<Step> got;
    for (const Seen& s : b.seen) {
        if (s.ev == port::Event::sent) got.push_back({s.dir, s.opcode, s.psn, false});
        else if (port::is_drop(s.ev) && !got.empty()) got.back().dropped = true;
    }
    std::string g, w;
    for (const Step& s : got) g += std::to_string(s.dir) + ":" + pkt::opcode_info(s.opcode).id + "@" + std::to_string(s.psn) + (s.dropped ? "(lost)" : "") + " ";
    for (const Step& s : want) w += std::to_string(s.dir) + ":" + pkt::opcode_info(s.opcode).id + "@" + std::to_string(s.psn) + (s.dropped ? "(lost)" : "") + " ";
    INFO("got:  " << g);
    INFO("want: " << w);
    CHECK(g == w);
}

// Drops frames of one direction by their sequence number (0 = first frame sent that way).
void drop_seq(SimPair& p, int dir, std::vector<uint64_t> seqs) {
    p.wire.set_filter(dir, [seqs](const uint8_t*, uint32_t, uint64_t seq) {
        for (uint64_t s : seqs)
            if (s == seq) return port::Action::drop;
        return port::Action::pass;
    });
}

}  // namespace

TEST_CASE("inline SEND and WRITE: the bytes as posted, one packet each; a 256-byte one's ICRC fused with its copy",
          "[transport][rc]") {
    SimConfig c = rc_config();
    c.max_inline = 256;
    Bench b(c);
    b.fill(0, 0, 512, 9);
    const std::vector<uint8_t> posted(b.mem(0), b.mem(0) + 512);
    REQUIRE(b.post_recv(1, 4096, 512, 50) == Status::ok);
    // 256 bytes: the payload's ICRC runs in crc32_copy from the header's (kFusedIcrcMin); 201 by
    // itself, with a 3-byte pad.
    REQUIRE(b.post(0, WrOpcode::send, 0, 256, 0, 1, send_flag::signaled | send_flag::inline_) == Status::ok);
    REQUIRE(b.post(0, WrOpcode::rdma_write, 256, 201, 8192, 2, send_flag::signaled | send_flag::inline_) == Status::ok);
    std::memset(b.mem(0), 0xEE, 512);  // inline: the data was taken at the post
    REQUIRE(b.wait_cqes(2, 1));
    REQUIRE(b.cqes[0].size() == 2);
    CHECK(b.cqes[0][0].status == WcStatus::success);
    CHECK(b.cqes[0][1].status == WcStatus::success);
    CHECK(b.cqes[1][0].status == WcStatus::success);
    CHECK(b.cqes[1][0].byte_len == 256);
    CHECK(std::memcmp(b.mem(1) + 4096, posted.data(), 256) == 0);
    CHECK(std::memcmp(b.mem(1) + 8192, posted.data() + 256, 201) == 0);
    CHECK(b.mem(1)[8192 + 201] == 0);
    // Each accepted at the first try: a wrong ICRC would have been dropped and sent again.
    check_sequence(b, {{0, send_only, 0x100}, {0, write_only, 0x101}, {1, acknowledge, 0x101}});
    CHECK(b.p.side[0].dev->counters().get(Counter::dma_bytes_read) == 0);
    CHECK(b.p.side[1].dev->counters().get(Counter::rcvd_pkts) == 2);
    CHECK(b.p.side[1].dev->counters().get(Counter::dma_bytes_written) == 457);
}

TEST_CASE("classic: one middle packet lost -> one NAK -> Go-Back-N resend", "[transport][rc][classic]") {
    Bench b(rc_config());
    b.fill(0, 0, 4096, 2);
    drop_seq(b.p, 0, {1});
    REQUIRE(b.post(0, WrOpcode::rdma_write, 0, 4096, 0, 1) == Status::ok);
    REQUIRE(b.wait_cqes(1, 0));
    CHECK(b.cqes[0][0].status == WcStatus::success);
    CHECK(std::memcmp(b.mem(1), b.mem(0), 4096) == 0);
    check_sequence(b, {{0, write_first, 0x100}, {0, write_middle, 0x101, true}, {0, write_middle, 0x102},
                       {0, write_last, 0x103}, {1, acknowledge, 0x101},  // the NAK: PSN sequence error at 0x101
                       {0, write_middle, 0x101}, {0, write_middle, 0x102}, {0, write_last, 0x103},
                       {1, acknowledge, 0x103}});
    CHECK(b.p.side[1].dev->counters().get(Counter::out_of_sequence) == 2);
    CHECK(b.p.side[0].dev->counters().get(Counter::packet_seq_err) == 1);
    // the first ACK-opcode frame from B is a NAK with syndrome 0x60
    for (const Seen& s : b.seen)
        if (s.dir == 1) {
            CHECK(s.syndrome == 0x60);
            break;
        }
}

TEST_CASE("classic: ACK lost -> timeout -> duplicate -> re-ACK", "[transport][rc][classic]") {
    Bench b(rc_config());
    drop_seq(b.p, 1, {0});
    REQUIRE(b.post(0, WrOpcode::rdma_write, 0, 100, 0, 1) == Status::ok);
    REQUIRE(b.wait_cqes(1, 0));
    CHECK(b.cqes[0][0].status == WcStatus::success);
    check_sequence(b, {{0, write_only, 0x100}, {1, acknowledge, 0x100, true}, {0, write_only, 0x100}, {1, acknowledge, 0x100}});
    CHECK(b.p.side[0].dev->counters().get(Counter::local_ack_timeout_err) == 1);
    CHECK(b.p.side[1].dev->counters().get(Counter::duplicate_request) == 1);
    // the retransmission waited the local ACK timeout: 4.096 us * 2^14
    CHECK(b.p.clock.now_ns() - 1'000'000'000 >= transport::ack_timeout_ns(14));
}

TEST_CASE("classic: RNR NAK -> wait -> retry", "[transport][rc][classic]") {
    Bench b(rc_config());
    b.fill(0, 0, 64, 3);
    REQUIRE(b.post(0, WrOpcode::send, 0, 64, 0, 9) == Status::ok);
    // No receive posted at B: run until B has sent its RNR NAK, then post one.
    REQUIRE(b.p.run_until([&] { return b.p.side[1].dev->counters().get(Counter::send_rnr_err) == 1; }));
    REQUIRE(b.post_recv(1, 1000, 64, 50) == Status::ok);
    REQUIRE(b.wait_cqes(1, 1));
    CHECK(b.cqes[0][0].wr_id == 9);
    CHECK(b.cqes[1][0].wr_id == 50);
    CHECK(b.cqes[1][0].byte_len == 64);
    CHECK(std::memcmp(b.mem(1) + 1000, b.mem(0), 64) == 0);
    check_sequence(b, {{0, send_only, 0x100}, {1, acknowledge, 0x100}, {0, send_only, 0x100}, {1, acknowledge, 0x100}});
    CHECK(b.seen[1].syndrome == pkt::aeth_syndrome(pkt::AethType::rnr_nak, 1));
    CHECK(b.p.side[0].dev->counters().get(Counter::rcvd_rnr_err) == 1);
}

TEST_CASE("classic: retry exhaustion -> RETRY_EXC_ERR and the rest flushed", "[transport][rc][classic]") {
    SimConfig c = rc_config();
    c.retry_cnt = 2;
    Bench b(c);
    b.p.wire.set_filter(0, [](const uint8_t*, uint32_t, uint64_t) { return port::Action::drop; });
    REQUIRE(b.post(0, WrOpcode::rdma_write, 0, 10, 0, 1) == Status::ok);
    REQUIRE(b.post(0, WrOpcode::send, 0, 10, 0, 2, 0) == Status::ok);  // unsignaled: flushed anyway
    REQUIRE(b.wait_cqes(2, 0));
    CHECK(b.cqes[0][0].wr_id == 1);
    CHECK(b.cqes[0][0].status == WcStatus::retry_exc_err);
    CHECK(b.cqes[0][1].wr_id == 2);
    CHECK(b.cqes[0][1].status == WcStatus::wr_flush_err);
    CHECK(b.p.side[0].qp.state() == QpState::err);
    CHECK(b.count(0, write_only) == 3);  // the original and retry_cnt = 2 retransmissions
    CHECK(b.p.side[0].dev->counters().get(Counter::retry_exceeded_err) == 1);
}

namespace {

// The responder (side 1) does not poll for `stall_ns` of virtual time, as a process the
// scheduler left off the CPU: the requester's timers run, its frames wait on side 1's rx ring.
void stall_responder(Bench& b, uint64_t stall_ns) {
    const uint64_t end = b.p.clock.now_ns() + stall_ns;
    for (int n = 0; n < 1'000'000 && b.p.clock.now_ns() < end; ++n) {
        if (b.p.side[0].hca->poll()) continue;
        const uint64_t next = std::min(b.p.side[0].hca->next_timer_ns(), end);
        b.p.clock.set(std::max(next, b.p.clock.now_ns() + 1));
    }
}

}  // namespace

// Seen with hcaemu perf read_lat over net_memif under load: the server process stalled ~0.6 s,
// the READ and its retransmissions waited in its ring. Each timeout costs one retry (IBTA 9.7):
// a stall shorter than retry_cnt + 1 timeouts is survived, each duplicate answered (C9-105).
TEST_CASE("a responder that stalls 4 ACK timeouts: READ retransmitted 4 times, all answered, one CQE",
          "[transport][rc][classic]") {
    Bench b(rc_config());  // timeout 14 (67.1 ms), retry_cnt 7
    b.fill(1, 512, 2, 31);
    REQUIRE(b.post(0, WrOpcode::rdma_read, 0, 2, 512, 5) == Status::ok);
    stall_responder(b, 300'000'000);  // 4 timeouts: 67, 134, 201, 268 ms
    CHECK(b.count(0, read_request) == 5);
    CHECK(b.count(1, read_response_only) == 0);
    CHECK(b.p.wire.rx_pending(1) + b.p.wire.in_flight(0) == 5);  // none taken yet
    REQUIRE(b.wait_cqes(1, 0));
    REQUIRE(b.p.run_until([&] { return b.p.wire.idle(); }));
    REQUIRE(b.cqes[0].size() == 1);
    CHECK(b.cqes[0][0].status == WcStatus::success);
    CHECK(std::memcmp(b.mem(0), b.mem(1) + 512, 2) == 0);
    check_sequence(b, {{0, read_request, 0x100}, {0, read_request, 0x100}, {0, read_request, 0x100},
                       {0, read_request, 0x100}, {0, read_request, 0x100}, {1, read_response_only, 0x100},
                       {1, read_response_only, 0x100}, {1, read_response_only, 0x100}, {1, read_response_only, 0x100},
                       {1, read_response_only, 0x100}});
    CHECK(b.p.side[0].dev->counters().get(Counter::local_ack_timeout_err) == 4);
    CHECK(b.p.side[1].dev->counters().get(Counter::duplicate_request) == 4);
    CHECK(b.p.side[1].dev->counters().get(Counter::rx_drop_no_qp) == 0);
    CHECK(b.p.side[0].qp.state() == QpState::rts);
    // the connection goes on
    b.fill(1, 600, 2, 32);
    REQUIRE(b.post(0, WrOpcode::rdma_read, 2, 2, 600, 6) == Status::ok);
    REQUIRE(b.wait_cqes(2, 0));
    CHECK(b.cqes[0][1].status == WcStatus::success);
    CHECK(std::memcmp(b.mem(0) + 2, b.mem(1) + 600, 2) == 0);
}

TEST_CASE("a responder that stalls past retry_cnt + 1 ACK timeouts: RETRY_EXC_ERR after 8 READs, late answers ignored",
          "[transport][rc][classic]") {
    Bench b(rc_config());
    b.fill(1, 512, 2, 33);
    REQUIRE(b.post(0, WrOpcode::rdma_read, 0, 2, 512, 5) == Status::ok);
    stall_responder(b, 600'000'000);  // > 8 x 67.1 ms
    b.poll_cqs();
    REQUIRE(b.cqes[0].size() == 1);
    CHECK(b.cqes[0][0].status == WcStatus::retry_exc_err);
    CHECK(b.cqes[0][0].opcode == WcOpcode::rdma_read);
    CHECK(b.p.side[0].qp.state() == QpState::err);
    CHECK(b.count(0, read_request) == 8);  // the original and retry_cnt = 7 retransmissions
    CHECK(b.p.side[0].dev->counters().get(Counter::local_ack_timeout_err) == 8);
    CHECK(b.p.side[0].dev->counters().get(Counter::retry_exceeded_err) == 1);
    // the responder wakes: every request answered, the requester in error takes none of them
    REQUIRE(b.p.run_until([&] { return b.p.wire.idle(); }));
    CHECK(b.count(1, read_response_only) == 8);
    CHECK(b.p.side[1].dev->counters().get(Counter::duplicate_request) == 7);
    b.poll_cqs();
    CHECK(b.cqes[0].size() == 1);
    CHECK(b.p.side[1].qp.state() == QpState::rts);
}

TEST_CASE("classic: a duplicate atomic is replayed, not executed again", "[transport][rc][classic]") {
    Bench b(rc_config());
    uint64_t v = 1000;
    std::memcpy(b.mem(1) + 64, &v, 8);
    drop_seq(b.p, 1, {0});  // the ATOMIC Acknowledge
    REQUIRE(b.post(0, WrOpcode::atomic_fetch_and_add, 0, 8, 64, 5, send_flag::signaled, 7) == Status::ok);
    REQUIRE(b.wait_cqes(1, 0));
    CHECK(b.cqes[0][0].status == WcStatus::success);
    CHECK(b.cqes[0][0].opcode == WcOpcode::fetch_add);
    std::memcpy(&v, b.mem(1) + 64, 8);
    CHECK(v == 1007);  // added once
    uint64_t orig;
    std::memcpy(&orig, b.mem(0), 8);
    CHECK(orig == 1000);
    check_sequence(b, {{0, fetch_add, 0x100}, {1, atomic_acknowledge, 0x100, true}, {0, fetch_add, 0x100}, {1, atomic_acknowledge, 0x100}});
    CHECK(b.p.side[1].dev->counters().get(Counter::duplicate_request) == 1);
}

TEST_CASE("classic: a READ response lost in the middle -> READ resumed from it", "[transport][rc][classic]") {
    Bench b(rc_config());
    b.fill(1, 8192, 4096, 4);
    drop_seq(b.p, 1, {1});
    REQUIRE(b.post(0, WrOpcode::rdma_read, 0, 4096, 8192, 3) == Status::ok);
    REQUIRE(b.wait_cqes(1, 0));
    CHECK(b.cqes[0][0].status == WcStatus::success);
    CHECK(b.cqes[0][0].byte_len == 4096);
    CHECK(std::memcmp(b.mem(0), b.mem(1) + 8192, 4096) == 0);
    check_sequence(b, {{0, read_request, 0x100}, {1, read_response_first, 0x100}, {1, read_response_middle, 0x101, true},
                       {1, read_response_middle, 0x102}, {1, read_response_last, 0x103},
                       {0, read_request, 0x101},  // the rest: VA + 1024, 3072 bytes
                       {1, read_response_middle, 0x101}, {1, read_response_middle, 0x102}, {1, read_response_last, 0x103}});
}

namespace {

struct FaultCase {
    const char* name;
    port::FaultConfig f;
};

std::vector<FaultCase> fault_cases() {
    std::vector<FaultCase> v;
    port::FaultConfig f;
    v.push_back({"none", f});
    f = {};
    f.loss = 0.2;
    v.push_back({"loss 20%", f});
    f = {};
    f.duplicate = 0.2;
    v.push_back({"duplication 20%", f});
    f = {};
    f.reorder = 0.2;
    f.reorder_ns = 7000;
    v.push_back({"reordering 20%", f});
    f = {};
    f.corrupt = 0.2;
    v.push_back({"corruption 20%", f});
    f = {};
    f.loss = f.duplicate = f.reorder = f.corrupt = 0.05;
    f.reorder_ns = 5000;
    v.push_back({"all at 5%", f});
    return v;
}

// Posts `k` operations of one kind from A to B, runs them to completion over a faulty wire, and
// checks memory byte for byte and every completion: exactly once, in order, success.
// What the wire injected over a whole fault case: checked, so that no case passes on a clean wire.
port::WireStats injected;

void check_injected(const FaultCase& fc) {
    INFO(fc.name);
    if (fc.f.loss > 0) CHECK(injected.lost > 0);
    if (fc.f.duplicate > 0) CHECK(injected.duplicated > 0);
    if (fc.f.reorder > 0) CHECK(injected.reordered > 0);
    if (fc.f.corrupt > 0) CHECK(injected.corrupted > 0);
    injected = {};
}

void exercise(WrOpcode op, uint32_t len, const FaultCase& fc, uint64_t seed, int k) {
    SimConfig c = rc_config();
    c.wire.seed = seed;
    c.wire.faults[0] = c.wire.faults[1] = fc.f;
    c.mem_bytes = size_t(k + 1) * (len + 64) * 2 + 4096;
    Bench b(c);
    INFO(name(op) << " len " << len << " faults " << fc.name << " seed " << seed);
    const bool is_send = op == WrOpcode::send || op == WrOpcode::send_with_imm;
    const bool consumes_recv = is_send || op == WrOpcode::rdma_write_with_imm;
    const bool atomic = op == WrOpcode::atomic_fetch_and_add || op == WrOpcode::atomic_cmp_and_swp;
    const uint64_t half = c.mem_bytes / 2;
    const uint32_t stride = len + 64;
    if (op == WrOpcode::rdma_read) b.fill(1, half, size_t(k) * stride, uint32_t(seed));
    else b.fill(0, 0, size_t(k) * stride, uint32_t(seed));
    uint64_t word = 5;
    std::memcpy(b.mem(1) + half, &word, 8);
    for (int i = 0; i < k; ++i) {
        if (consumes_recv) REQUIRE(b.post_recv(1, half + uint64_t(i) * stride, len + 64, 100 + uint64_t(i)) == Status::ok);
        if (atomic) {
            // a chain: each CmpSwap expects the previous one's swap value; FetchAdd adds i + 1
            const uint64_t cmp = op == WrOpcode::atomic_cmp_and_swp ? 5 + uint64_t(i) : uint64_t(i + 1);
            REQUIRE(b.post(0, op, uint64_t(i) * 64, 8, half, uint64_t(i), send_flag::signaled, cmp, 6 + uint64_t(i)) == Status::ok);
        } else {
            REQUIRE(b.post(0, op, uint64_t(i) * stride, len, half + uint64_t(i) * stride, uint64_t(i)) == Status::ok);
        }
    }
    REQUIRE(b.wait_cqes(size_t(k), consumes_recv ? size_t(k) : 0));
    b.p.run_until([] { return false; }, 200'000'000);  // let late duplicates arrive: nothing may change
    b.poll_cqs();
    REQUIRE(b.cqes[0].size() == size_t(k));
    const WcOpcode want_op = op == WrOpcode::rdma_read ? WcOpcode::rdma_read
                             : op == WrOpcode::atomic_fetch_and_add ? WcOpcode::fetch_add
                             : op == WrOpcode::atomic_cmp_and_swp ? WcOpcode::comp_swap
                             : (op == WrOpcode::rdma_write || op == WrOpcode::rdma_write_with_imm) ? WcOpcode::rdma_write
                                                                                                   : WcOpcode::send;
    for (int i = 0; i < k; ++i) {
        const Wc& w = b.cqes[0][size_t(i)];
        CHECK(w.wr_id == uint64_t(i));
        CHECK(w.status == WcStatus::success);
        CHECK(w.opcode == want_op);
        CHECK(w.byte_len == (atomic ? 8 : len));
    }
    for (int d = 0; d < 2; ++d) {
        const port::WireStats& ws = b.p.wire.stats(d);
        injected.lost += ws.lost;
        injected.duplicated += ws.duplicated;
        injected.reordered += ws.reordered;
        injected.corrupted += ws.corrupted;
    }
    if (consumes_recv) {
        REQUIRE(b.cqes[1].size() == size_t(k));
        for (int i = 0; i < k; ++i) {
            const Wc& w = b.cqes[1][size_t(i)];
            CHECK(w.wr_id == 100 + uint64_t(i));
            CHECK(w.status == WcStatus::success);
            CHECK(w.byte_len == len);
            if (op == WrOpcode::send_with_imm || op == WrOpcode::rdma_write_with_imm) {
                CHECK(w.wc_flags == wc_flag::with_imm);
                CHECK(w.imm_data == 0x1000 + uint32_t(i));
            }
            CHECK(w.opcode == (op == WrOpcode::rdma_write_with_imm ? WcOpcode::recv_rdma_with_imm : WcOpcode::recv));
        }
    } else {
        CHECK(b.cqes[1].empty());
    }
    if (atomic) {
        std::memcpy(&word, b.mem(1) + half, 8);
        if (op == WrOpcode::atomic_fetch_and_add) {
            CHECK(word == 5 + uint64_t(k) * uint64_t(k + 1) / 2);  // each add executed exactly once
            uint64_t expect = 5;
            for (int i = 0; i < k; ++i) {
                uint64_t orig;
                std::memcpy(&orig, b.mem(0) + uint64_t(i) * 64, 8);
                CHECK(orig == expect);
                expect += uint64_t(i + 1);
            }
        } else {
            CHECK(word == 5 + uint64_t(k));
            for (int i = 0; i < k; ++i) {
                uint64_t orig;
                std::memcpy(&orig, b.mem(0) + uint64_t(i) * 64, 8);
                CHECK(orig == 5 + uint64_t(i));  // every compare matched: executed once, in order
            }
        }
    } else if (op == WrOpcode::rdma_read) {
        for (int i = 0; i < k; ++i)
            CHECK(std::memcmp(b.mem(0) + uint64_t(i) * stride, b.mem(1) + half + uint64_t(i) * stride, len) == 0);
    } else {
        for (int i = 0; i < k; ++i)
            CHECK(std::memcmp(b.mem(1) + half + uint64_t(i) * stride, b.mem(0) + uint64_t(i) * stride, len) == 0);
    }
    CHECK(b.p.side[0].qp.state() == QpState::rts);
    CHECK(b.p.side[1].qp.state() == QpState::rts);
}

}  // namespace

TEST_CASE("every RC operation at every size, byte-exact, exactly once, in order, under seeded faults",
          "[transport][rc][faults]") {
    // SEND with Invalidate fails as rxe's does: hcaemu has no key a peer may invalidate (test_responder).
    const WrOpcode ops[] = {WrOpcode::send, WrOpcode::send_with_imm, WrOpcode::rdma_write, WrOpcode::rdma_write_with_imm,
                            WrOpcode::rdma_read};
    const uint32_t sizes[] = {0, 1, 1023, 1024, 1025, 5000};
    for (const FaultCase& fc : fault_cases()) {
        for (WrOpcode op : ops)
            for (uint32_t len : sizes)
                for (uint64_t seed = 1; seed <= 4; ++seed) exercise(op, len, fc, seed * 7919 + len, 6);
        check_injected(fc);
    }
}

TEST_CASE("atomics under seeded faults execute exactly once, in order", "[transport][rc][faults]") {
    for (const FaultCase& fc : fault_cases()) {
        for (uint64_t seed = 1; seed <= 10; ++seed) {
            exercise(WrOpcode::atomic_fetch_and_add, 8, fc, seed, 8);
            exercise(WrOpcode::atomic_cmp_and_swp, 8, fc, seed, 8);
        }
        check_injected(fc);
    }
}

TEST_CASE("1 MiB messages under seeded faults", "[transport][rc][faults][big]") {
    const WrOpcode ops[] = {WrOpcode::send, WrOpcode::rdma_write, WrOpcode::rdma_read};
    for (const FaultCase& fc : fault_cases()) {
        for (WrOpcode op : ops) exercise(op, 1u << 20, fc, 42, 2);
        check_injected(fc);
    }
}

TEST_CASE("24-bit PSN wraparound, with loss across the wrap", "[transport][rc]") {
    SimConfig c = rc_config();
    c.sq_psn[0] = 0xFFFFFE;
    Bench b(c);
    b.fill(0, 0, 4096, 9);
    drop_seq(b.p, 0, {2});  // PSN 0x000000
    REQUIRE(b.post(0, WrOpcode::rdma_write, 0, 4096, 0, 1) == Status::ok);
    REQUIRE(b.wait_cqes(1, 0));
    CHECK(b.cqes[0][0].status == WcStatus::success);
    CHECK(std::memcmp(b.mem(1), b.mem(0), 4096) == 0);
    check_sequence(b, {{0, write_first, 0xFFFFFE}, {0, write_middle, 0xFFFFFF}, {0, write_middle, 0, true}, {0, write_last, 1},
                       {1, acknowledge, 0}, {0, write_middle, 0}, {0, write_last, 1}, {1, acknowledge, 1}});
    for (uint64_t seed = 1; seed <= 5; ++seed) {
        SimConfig c2 = rc_config();
        c2.sq_psn[0] = 0xFFFFF0;
        c2.wire.seed = seed;
        c2.wire.faults[0].loss = c2.wire.faults[1].loss = 0.2;
        Bench b2(c2);
        b2.fill(0, 0, 40000, uint32_t(seed));
        REQUIRE(b2.post(0, WrOpcode::rdma_write, 0, 40000, 0, 1) == Status::ok);
        REQUIRE(b2.post(0, WrOpcode::rdma_read, 50000, 40000, 0, 2) == Status::ok);
        REQUIRE(b2.wait_cqes(2, 0));
        CHECK(b2.cqes[0][0].status == WcStatus::success);
        CHECK(b2.cqes[0][1].status == WcStatus::success);
        CHECK(std::memcmp(b2.mem(1), b2.mem(0), 40000) == 0);
        CHECK(std::memcmp(b2.mem(0) + 50000, b2.mem(0), 40000) == 0);
    }
}

TEST_CASE("remote access errors: NAK, REM_ACCESS_ERR, both QPs in error, nothing written", "[transport][rc]") {
    Bench b(rc_config());
    b.fill(0, 0, 2048, 5);
    // A WRITE that runs past the end of B's MR
    const uint64_t end = b.p.side[1].mem.size();
    REQUIRE(b.post(0, WrOpcode::rdma_write, 0, 2048, end - 1024, 1) == Status::ok);
    REQUIRE(b.post(0, WrOpcode::send, 0, 8, 0, 2) == Status::ok);
    REQUIRE(b.wait_cqes(2, 0));
    CHECK(b.cqes[0][0].wr_id == 1);
    CHECK(b.cqes[0][0].status == WcStatus::rem_access_err);
    CHECK(b.cqes[0][1].status == WcStatus::wr_flush_err);
    CHECK(b.p.side[0].qp.state() == QpState::err);
    CHECK(b.p.side[1].qp.state() == QpState::err);
    for (size_t i = end - 1024; i < end; ++i) REQUIRE(b.mem(1)[i] == 0);
    const Seen* reply = nullptr;
    for (const Seen& s : b.seen)
        if (s.dir == 1 && !reply) reply = &s;
    REQUIRE(reply);
    CHECK(reply->opcode == acknowledge);
    CHECK(reply->psn == 0x100);
    CHECK(reply->syndrome == pkt::aeth_syndrome(pkt::AethType::nak, uint8_t(pkt::NakCode::remote_access_error)));
    CHECK(b.p.side[1].dev->counters().get(Counter::resp_remote_access_errors) == 1);
    CHECK(b.p.side[0].dev->counters().get(Counter::req_remote_access_errors) == 1);
}

TEST_CASE("a bad R_Key on READ and an atomic outside the MR", "[transport][rc]") {
    {
        Bench b(rc_config());
        Sge sge{b.addr(0), 64, b.p.side[0].mr.lkey()};
        SendWr w;
        w.wr_id = 4;
        w.sg_list = &sge;
        w.num_sge = 1;
        w.opcode = WrOpcode::rdma_read;
        w.send_flags = send_flag::signaled;
        w.rdma = {b.addr(1), b.p.side[1].mr.rkey() ^ 0x100};
        const SendWr* bad;
        REQUIRE(b.p.side[0].qp.post_send(&w, &bad) == Status::ok);
        REQUIRE(b.wait_cqes(1, 0));
        CHECK(b.cqes[0][0].status == WcStatus::rem_access_err);
    }
    {
        // The requester refuses a misaligned atomic at post time; so the peer's check is driven by
        // a well-aligned address outside the MR instead.
        Bench b(rc_config());
        REQUIRE(b.post(0, WrOpcode::atomic_fetch_and_add, 0, 8, b.p.side[1].mem.size(), 1) == Status::ok);
        REQUIRE(b.wait_cqes(1, 0));
        CHECK(b.cqes[0][0].status == WcStatus::rem_access_err);
    }
}

TEST_CASE("a SEND longer than the receive buffer: local length error and invalid request", "[transport][rc]") {
    Bench b(rc_config());
    REQUIRE(b.post_recv(1, 0, 100, 7) == Status::ok);
    REQUIRE(b.post(0, WrOpcode::send, 0, 2000, 0, 1) == Status::ok);
    REQUIRE(b.wait_cqes(1, 1));
    CHECK(b.cqes[1][0].wr_id == 7);
    CHECK(b.cqes[1][0].status == WcStatus::loc_len_err);
    CHECK(b.cqes[0][0].status == WcStatus::rem_inv_req_err);
    CHECK(b.p.side[1].dev->counters().get(Counter::resp_local_length_error) == 1);
}

// The key of a posted receive is checked when a message lands (as rxe's post_recv checks none):
// an MR deregistered, or moved to another PD, after the post fails that WQE then.
TEST_CASE("a receive WQE whose MR became unusable after the post: LOC_PROT_ERR, NAK Remote Operational Error",
          "[transport][rc]") {
    Bench b(rc_config());
    REQUIRE(b.post_recv(1, 0, 256, 7) == Status::ok);  // valid when posted
    SECTION("deregistered: dereg succeeds with the receive posted") {
        REQUIRE(b.p.side[1].mr.destroy() == Status::ok);
    }
    SECTION("moved to another PD (rereg)") {
        auto pd2 = b.p.side[1].dev->alloc_pd();
        REQUIRE(pd2.ok());
        REQUIRE(b.p.side[1].mr.rereg(rereg::change_pd, &pd2.value, nullptr, 0, 0) == Status::ok);
    }
    REQUIRE(b.post_recv(1, 256, 256, 8) == Status::ok);  // a bad key is no posting error
    b.fill(0, 0, 64, 9);
    REQUIRE(b.post(0, WrOpcode::send, 0, 64, 0, 1) == Status::ok);
    REQUIRE(b.post(0, WrOpcode::send, 0, 64, 0, 2) == Status::ok);
    REQUIRE(b.wait_cqes(2, 2));
    REQUIRE(b.wait_cqes(0, 2));
    CHECK(b.cqes[1][0].wr_id == 7);
    CHECK(b.cqes[1][0].status == WcStatus::loc_prot_err);
    CHECK(b.cqes[1][1].wr_id == 8);
    CHECK(b.cqes[1][1].status == WcStatus::wr_flush_err);
    CHECK(b.cqes[0][0].wr_id == 1);
    CHECK(b.cqes[0][0].status == WcStatus::rem_op_err);
    CHECK(b.cqes[0][1].status == WcStatus::wr_flush_err);
    for (size_t i = 0; i < 512; ++i) REQUIRE(b.mem(1)[i] == 0);  // nothing written
    const Seen* reply = nullptr;
    for (const Seen& s : b.seen)
        if (s.dir == 1 && !reply) reply = &s;
    REQUIRE(reply);
    CHECK(reply->opcode == acknowledge);
    CHECK(reply->psn == 0x100);
    CHECK(reply->syndrome == pkt::aeth_syndrome(pkt::AethType::nak, uint8_t(pkt::NakCode::remote_op_error)));
    CHECK(b.p.side[1].qp.state() == QpState::err);
}

TEST_CASE("RNR retry exhaustion gives RNR_RETRY_EXC_ERR; rnr_retry 7 waits for ever", "[transport][rc]") {
    SimConfig c = rc_config();
    c.rnr_retry = 2;
    Bench b(c);
    REQUIRE(b.post(0, WrOpcode::send, 0, 10, 0, 1) == Status::ok);
    REQUIRE(b.wait_cqes(1, 0));
    CHECK(b.cqes[0][0].status == WcStatus::rnr_retry_exc_err);
    CHECK(b.count(0, send_only) == 3);
    CHECK(b.p.side[0].dev->counters().get(Counter::retry_rnr_exceeded_err) == 1);

    Bench inf(rc_config());  // rnr_retry = 7
    REQUIRE(inf.post(0, WrOpcode::send, 0, 10, 0, 1) == Status::ok);
    REQUIRE(inf.p.run_until([&] { return inf.count(0, send_only) >= 50; }));
    inf.poll_cqs();
    CHECK(inf.cqes[0].empty());
    REQUIRE(inf.post_recv(1, 0, 10, 3) == Status::ok);
    REQUIRE(inf.wait_cqes(1, 1));
    CHECK(inf.cqes[0][0].status == WcStatus::success);
}

TEST_CASE("UC: a lost packet drops that message only", "[transport][uc]") {
    SimConfig c = rc_config();
    c.type = QpType::uc;
    Bench b(c);
    b.fill(0, 0, 3 * 3000, 11);
    for (int i = 0; i < 3; ++i) REQUIRE(b.post_recv(1, 100000 + uint64_t(i) * 4096, 4096, 10 + uint64_t(i)) == Status::ok);
    drop_seq(b.p, 0, {4});  // the second packet of the second message
    for (int i = 0; i < 3; ++i) REQUIRE(b.post(0, WrOpcode::send, uint64_t(i) * 3000, 3000, 0, uint64_t(i)) == Status::ok);
    REQUIRE(b.wait_cqes(3, 2));
    b.p.run_until([] { return false; }, 100'000'000);
    b.poll_cqs();
    for (int i = 0; i < 3; ++i) CHECK(b.cqes[0][size_t(i)].status == WcStatus::success);  // UC completes on send
    REQUIRE(b.cqes[1].size() == 2);
    CHECK(b.cqes[1][0].wr_id == 10);
    CHECK(b.cqes[1][0].byte_len == 3000);
    CHECK(b.cqes[1][1].wr_id == 11);  // the WQE the broken message took is reused by the third
    CHECK(b.cqes[1][1].byte_len == 3000);
    CHECK(std::memcmp(b.mem(1) + 100000, b.mem(0), 3000) == 0);
    CHECK(std::memcmp(b.mem(1) + 100000 + 4096, b.mem(0) + 6000, 3000) == 0);
    CHECK(b.p.side[1].dev->counters().get(Counter::uc_dropped_messages) == 1);
    for (const Seen& s : b.seen) CHECK(s.dir == 0);  // no ACKs on UC
    // UC WRITE with immediate, byte-exact
    REQUIRE(b.post(0, WrOpcode::rdma_write_with_imm, 0, 2500, 200000, 5) == Status::ok);
    REQUIRE(b.wait_cqes(4, 3));
    CHECK(b.cqes[1][2].opcode == WcOpcode::recv_rdma_with_imm);
    CHECK(b.cqes[1][2].imm_data == 0x1005);
    CHECK(std::memcmp(b.mem(1) + 200000, b.mem(0), 2500) == 0);
}

TEST_CASE("UD: SEND with DETH, Q_Key check, source QPN and GID in the completion", "[transport][ud]") {
    SimConfig c = rc_config();
    c.type = QpType::ud;
    Bench b(c);
    b.fill(0, 0, 1024, 12);
    REQUIRE(b.post_recv(1, 0, 40 + 1024, 20) == Status::ok);
    REQUIRE(b.post(0, WrOpcode::send_with_imm, 0, 1024, 0, 1) == Status::ok);
    REQUIRE(b.wait_cqes(1, 1));
    const Wc& w = b.cqes[1][0];
    CHECK(w.status == WcStatus::success);
    CHECK(w.byte_len == 40 + 1024);
    CHECK(w.src_qp == b.p.side[0].qp.qpn());
    CHECK(w.sgid == b.p.side[0].gid);
    CHECK(w.wc_flags == (wc_flag::grh | wc_flag::with_imm));
    CHECK(w.imm_data == 0x1001);
    CHECK(std::memcmp(b.mem(1) + 40, b.mem(0), 1024) == 0);
    CHECK(b.mem(1)[20] == 0x45);  // the IPv4 header in the GRH's last 20 bytes
    CHECK(b.count(0, pkt::op::ud | send_only_imm) == 1);
    // a wrong Q_Key: dropped and counted, no completion
    REQUIRE(b.post_recv(1, 2000, 40 + 64, 21) == Status::ok);
    Sge sge{b.addr(0), 64, b.p.side[0].mr.lkey()};
    SendWr x;
    x.wr_id = 2;
    x.sg_list = &sge;
    x.num_sge = 1;
    x.send_flags = send_flag::signaled;
    x.ud = {&b.p.side[0].ah, b.p.side[1].qp.qpn(), 0x22222222};
    const SendWr* bad;
    REQUIRE(b.p.side[0].qp.post_send(&x, &bad) == Status::ok);
    REQUIRE(b.wait_cqes(2, 1));
    b.p.run_until([] { return false; }, 10'000'000);
    b.poll_cqs();
    CHECK(b.cqes[1].size() == 1);
    CHECK(b.p.side[1].dev->counters().get(Counter::qkey_violations) == 1);
    // larger than one MTU: refused at post time
    sge.length = 1025;
    CHECK(b.p.side[0].qp.post_send(&x, &bad) == Status::invalid_argument);
}

// A link the peer drains late: the port takes no frame while `refuse` is set.
struct StallPort final : port::Port {
    explicit StallPort(port::Port& p) : in(p) {}
    port::Port& in;
    bool refuse = false;
    uint64_t refused = 0;
    bool alloc(port::Frame& f) override { return in.alloc(f); }
    uint16_t tx_burst(port::Frame* f, uint16_t n) override {
        if (!refuse) return in.tx_burst(f, n);
        refused += n;
        return 0;
    }
    uint16_t rx_burst(port::Frame* f, uint16_t n) override { return in.rx_burst(f, n); }
    void free(port::Frame& f) override { in.free(f); }
    pkt::Mac mac() const override { return in.mac(); }
    uint32_t mtu() const override { return in.mtu(); }
    port::PortStats stats() const override { return in.stats(); }
};

TEST_CASE("UD: frames the port refuses wait in the transmit queue, none is lost", "[transport][ud]") {
    SimConfig c = rc_config();
    c.type = QpType::ud;
    Bench b(c);
    // Side 0's engine on a port that refuses transmits for a while (the QPs exist already).
    StallPort stall(b.p.wire.end(0));
    b.p.side[0].hca.reset();
    b.p.side[0].hca = std::make_unique<transport::Hca>(*b.p.side[0].dev, stall, b.p.clock, c.hca);
    b.p.side[0].hca->set_neighbor(b.p.side[1].gid, c.wire.mac[1]);
    constexpr int kMsgs = 80;  // more than the engine's transmit queue (32 frames)
    b.fill(0, 0, kMsgs * 64, 7);
    for (int i = 0; i < kMsgs; ++i) REQUIRE(b.post_recv(1, uint64_t(i) * 128, 40 + 64, uint64_t(i)) == Status::ok);
    stall.refuse = true;
    for (int i = 0; i < kMsgs; ++i)
        REQUIRE(b.post(0, WrOpcode::send_with_imm, uint64_t(i) * 64, 64, 0, uint64_t(i)) == Status::ok);
    // The engine is never idle while frames wait (virtual time stands still): turns, not time.
    b.p.run_until([] { return false; }, 5'000'000, 20'000);
    b.poll_cqs();
    CHECK(stall.refused > 0);
    CHECK(b.cqes[1].empty());
    stall.refuse = false;
    REQUIRE(b.wait_cqes(kMsgs, kMsgs, 1'000'000'000));
    for (int i = 0; i < kMsgs; ++i) {
        const Wc& w = b.cqes[1][size_t(i)];
        CHECK(w.status == WcStatus::success);
        CHECK(w.wr_id == uint64_t(i));
        CHECK(w.imm_data == 0x1000u + uint32_t(i));
        CHECK(std::memcmp(b.mem(1) + i * 128 + 40, b.mem(0) + i * 64, 64) == 0);
    }
    CHECK(b.count(0, pkt::op::ud | pkt::op::send_only_imm) == size_t(kMsgs));
}

TEST_CASE("ACKs carry end-to-end credits: the receive WQEs posted, encoded", "[transport][rc]") {
    CHECK(pkt::aeth_credit_code(0) == 0);
    CHECK(pkt::aeth_credit_code(4) == 4);
    CHECK(pkt::aeth_credit_code(5) == 4);   // 6 would be code 5
    CHECK(pkt::aeth_credit_code(6) == 5);
    CHECK(pkt::aeth_credit_code(100) == 13);  // 96
    CHECK(pkt::aeth_credit_code(1u << 20) == 30);
    Bench b(rc_config());
    for (int i = 0; i < 7; ++i) REQUIRE(b.post_recv(1, uint64_t(i) * 100, 100, uint64_t(i)) == Status::ok);
    REQUIRE(b.post(0, WrOpcode::send, 0, 10, 0, 1) == Status::ok);
    REQUIRE(b.wait_cqes(1, 1));
    const Seen* ack = nullptr;
    for (const Seen& s : b.seen)
        if (s.dir == 1 && s.opcode == acknowledge) ack = &s;
    REQUIRE(ack);
    CHECK(ack->syndrome == pkt::aeth_syndrome(pkt::AethType::ack, 5));  // 6 WQEs left
}

TEST_CASE("a message longer than the in-flight window (2000 packets) completes, clean and lossy", "[transport][rc]") {
    for (double loss : {0.0, 0.05}) {
        SimConfig c = rc_config();
        c.mtu = Mtu::mtu256;
        c.wire.faults[0].loss = c.wire.faults[1].loss = loss;
        Bench b(c);
        b.fill(0, 0, 512000, 21);
        REQUIRE(b.post(0, WrOpcode::rdma_write, 0, 512000, 600000, 1) == Status::ok);
        REQUIRE(b.wait_cqes(1, 0));
        CHECK(b.cqes[0][0].status == WcStatus::success);
        CHECK(std::memcmp(b.mem(1) + 600000, b.mem(0), 512000) == 0);
        if (loss == 0) CHECK(b.p.side[0].dev->counters().get(Counter::local_ack_timeout_err) == 0);
    }
}

TEST_CASE("SQD drains: the message in progress completes, SQ_DRAINED is raised, no new WQE starts", "[transport][rc]") {
    SimConfig c = rc_config();
    c.hca.tx_budget = 8;  // so that the first message is still going out when SQD comes
    Bench b(c);
    b.fill(0, 0, 64 * 1024, 22);
    REQUIRE(b.post(0, WrOpcode::rdma_write, 0, 64 * 1024, 0, 1) == Status::ok);
    REQUIRE(b.post(0, WrOpcode::rdma_write, 0, 1000, 100000, 2) == Status::ok);
    b.p.side[0].hca->poll();  // 8 of the 64 packets
    QpAttr a;
    a.qp_state = QpState::sqd;
    a.en_sqd_async_notify = true;
    REQUIRE(b.p.side[0].qp.modify(a, qp_attr::state | qp_attr::en_sqd_async_notify).ok());
    REQUIRE(b.wait_cqes(1, 0));
    b.p.run_until([] { return false; }, 10'000'000);
    b.poll_cqs();
    REQUIRE(b.cqes[0].size() == 1);
    CHECK(b.cqes[0][0].wr_id == 1);
    CHECK(std::memcmp(b.mem(1), b.mem(0), 64 * 1024) == 0);
    AsyncEvent ev;
    bool drained = false;
    while (b.p.side[0].dev->get_async_event(ev)) drained |= ev.type == EventType::sq_drained;
    CHECK(drained);
    CHECK(b.count(0, write_only) == 0);  // the second WQE did not start
    a.qp_state = QpState::rts;
    REQUIRE(b.p.side[0].qp.modify(a, qp_attr::state).ok());
    REQUIRE(b.wait_cqes(2, 0));
    CHECK(b.cqes[0][1].wr_id == 2);
}

TEST_CASE("responses leave in PSN order: READ then SEND and atomic on a clean wire, no retry needed", "[transport][rc]") {
    SimConfig c = rc_config();
    c.retry_cnt = 0;
    Bench b(c);
    b.fill(1, 0, 5000, 23);
    REQUIRE(b.post_recv(1, 20000, 100, 9) == Status::ok);
    for (int round = 0; round < 5; ++round) {
        REQUIRE(b.post(0, WrOpcode::rdma_read, 10000, 5000, 0, 10 + uint64_t(round) * 3) == Status::ok);
        REQUIRE(b.post(0, WrOpcode::atomic_fetch_and_add, 30000 + uint64_t(round) * 8, 8, 8192, 11 + uint64_t(round) * 3,
                       send_flag::signaled, 1) == Status::ok);
        REQUIRE(b.post(0, WrOpcode::rdma_write, 0, 100, 40000, 12 + uint64_t(round) * 3) == Status::ok);
    }
    REQUIRE(b.post(0, WrOpcode::send, 0, 100, 0, 99) == Status::ok);
    REQUIRE(b.wait_cqes(16, 1));
    for (const Wc& w : b.cqes[0]) CHECK(w.status == WcStatus::success);
    CHECK(b.count(0, read_request) == 5);  // no READ was asked twice
    CHECK(b.p.side[0].dev->counters().get(Counter::completer_retry_err) == 0);
    CHECK(std::memcmp(b.mem(0) + 10000, b.mem(1), 5000) == 0);
    // responses in PSN order on the wire
    uint32_t last = 0;
    bool first = true;
    for (const Seen& s : b.seen)
        if (s.dir == 1) {
            if (!first) CHECK(transport::psn_diff(s.psn, last) >= 0);
            last = s.psn;
            first = false;
        }
}

TEST_CASE("UD uses the port MTU: one packet up to it", "[transport][ud]") {
    SimConfig c = rc_config();
    c.type = QpType::ud;
    c.wire.mtu = 9000;  // active MTU 4096
    Bench b(c);
    b.fill(0, 0, 4000, 24);
    REQUIRE(b.post_recv(1, 0, 40 + 4000, 1) == Status::ok);
    REQUIRE(b.post(0, WrOpcode::send_with_imm, 0, 4000, 0, 1) == Status::ok);
    REQUIRE(b.wait_cqes(1, 1));
    CHECK(b.cqes[1].size() == 1);
    CHECK(b.cqes[1][0].byte_len == 40 + 4000);
    CHECK(b.count(0, pkt::op::ud | send_only_imm) == 1);
    CHECK(std::memcmp(b.mem(1) + 40, b.mem(0), 4000) == 0);
}

TEST_CASE("UC: a WRITE with immediate that finds no receive WQE is dropped; the next message arrives", "[transport][uc]") {
    SimConfig c = rc_config();
    c.type = QpType::uc;
    Bench b(c);
    b.fill(0, 0, 3000, 25);
    REQUIRE(b.post(0, WrOpcode::rdma_write_with_imm, 0, 3000, 50000, 1) == Status::ok);
    REQUIRE(b.wait_cqes(1, 0));
    b.p.run_until([] { return false; }, 1'000'000);
    REQUIRE(b.post_recv(1, 0, 3000, 7) == Status::ok);
    REQUIRE(b.post(0, WrOpcode::send, 0, 3000, 0, 2) == Status::ok);
    REQUIRE(b.wait_cqes(2, 1));
    CHECK(b.cqes[1][0].wr_id == 7);
    CHECK(b.cqes[1][0].opcode == WcOpcode::recv);
    CHECK(b.cqes[1][0].byte_len == 3000);
    CHECK(std::memcmp(b.mem(1), b.mem(0), 3000) == 0);
    CHECK(b.p.side[1].dev->counters().get(Counter::resp_invalid_request) == 0);
}

TEST_CASE("a path MTU above the port's active MTU is clamped to it", "[transport][rc]") {
    SimConfig c = rc_config();
    c.mtu = Mtu::mtu4096;  // the wire's 1500 gives an active MTU of 1024
    Bench b(c);
    b.fill(0, 0, 5000, 26);
    REQUIRE(b.post(0, WrOpcode::rdma_write, 0, 5000, 0, 1) == Status::ok);
    REQUIRE(b.wait_cqes(1, 0));
    CHECK(b.cqes[0][0].status == WcStatus::success);
    CHECK(b.count(0, write_middle) == 3);  // 5 packets of at most 1024 bytes
    CHECK(b.p.wire.stats(0).too_big == 0);
}

TEST_CASE("seed sweep: every RC operation interleaved in one send queue, 40 seeds x 3 fault mixes", "[transport][rc][faults]") {
    const WrOpcode ops[] = {WrOpcode::send, WrOpcode::send_with_imm, WrOpcode::rdma_write, WrOpcode::rdma_write_with_imm,
                            WrOpcode::rdma_read, WrOpcode::atomic_fetch_and_add, WrOpcode::atomic_cmp_and_swp};
    const uint32_t sizes[] = {0, 1, 1023, 1024, 1025, 3000};
    for (int mix = 0; mix < 3; ++mix)
        for (uint64_t seed = 1; seed <= 40; ++seed) {
            SimConfig c = rc_config();
            c.wire.seed = seed * 104729 + uint64_t(mix);
            port::FaultConfig f;
            if (mix == 0) f.loss = 0.2;
            if (mix == 1) f.loss = f.duplicate = f.reorder = f.corrupt = 0.05;
            if (mix == 2) f.reorder = f.duplicate = 0.2;
            f.reorder_ns = 5000;
            c.wire.faults[0] = c.wire.faults[1] = f;
            c.max_rd_atomic = uint8_t(1 + seed % 4);
            Bench b(c);
            INFO("mix " << mix << " seed " << seed);
            std::mt19937 rng{uint32_t(seed)};
            const int k = 24;
            std::vector<WrOpcode> op(k);
            std::vector<uint32_t> len(k);
            b.fill(0, 0, 200000, uint32_t(seed));
            b.fill(1, 0, 200000, uint32_t(seed) + 1);
            const std::vector<uint8_t> b0 = b.p.side[1].mem;  // B before
            size_t recvs = 0;
            for (int i = 0; i < k; ++i) {
                op[size_t(i)] = ops[rng() % 7];
                const bool at = op[size_t(i)] == WrOpcode::atomic_fetch_and_add || op[size_t(i)] == WrOpcode::atomic_cmp_and_swp;
                len[size_t(i)] = at ? 8 : sizes[rng() % 6];
                const uint64_t off = uint64_t(i) * 4096;
                if (op[size_t(i)] == WrOpcode::send || op[size_t(i)] == WrOpcode::send_with_imm ||
                    op[size_t(i)] == WrOpcode::rdma_write_with_imm)
                    REQUIRE(b.post_recv(1, 100000 + uint64_t(recvs++) * 4096, 4096, uint64_t(i)) == Status::ok);
                uint64_t word;
                std::memcpy(&word, b0.data() + off, 8);
                REQUIRE(b.post(0, op[size_t(i)], off, len[size_t(i)], off, uint64_t(i), send_flag::signaled,
                               op[size_t(i)] == WrOpcode::atomic_cmp_and_swp ? word : 3, ~word) == Status::ok);
            }
            REQUIRE(b.wait_cqes(size_t(k), recvs));
            b.p.run_until([] { return false; }, 100'000'000);
            b.poll_cqs();
            REQUIRE(b.cqes[0].size() == size_t(k));
            REQUIRE(b.cqes[1].size() == recvs);
            size_t r = 0;
            for (int i = 0; i < k; ++i) {
                const WrOpcode o = op[size_t(i)];
                const uint64_t off = uint64_t(i) * 4096;
                CHECK(b.cqes[0][size_t(i)].wr_id == uint64_t(i));
                CHECK(b.cqes[0][size_t(i)].status == WcStatus::success);
                if (o == WrOpcode::rdma_read) {
                    CHECK(std::memcmp(b.mem(0) + off, b0.data() + off, len[size_t(i)]) == 0);
                } else if (o == WrOpcode::rdma_write || o == WrOpcode::rdma_write_with_imm) {
                    CHECK(std::memcmp(b.mem(1) + off, b.mem(0) + off, len[size_t(i)]) == 0);
                } else if (o == WrOpcode::atomic_fetch_and_add || o == WrOpcode::atomic_cmp_and_swp) {
                    uint64_t before, now, back;
                    std::memcpy(&before, b0.data() + off, 8);
                    std::memcpy(&now, b.mem(1) + off, 8);
                    std::memcpy(&back, b.mem(0) + off, 8);
                    CHECK(back == before);
                    CHECK(now == (o == WrOpcode::atomic_fetch_and_add ? before + 3 : ~before));  // exactly once
                }
                if (o == WrOpcode::send || o == WrOpcode::send_with_imm || o == WrOpcode::rdma_write_with_imm) {
                    const Wc& w = b.cqes[1][r];
                    CHECK(w.wr_id == uint64_t(i));
                    CHECK(w.byte_len == len[size_t(i)]);
                    if (o != WrOpcode::rdma_write_with_imm)
                        CHECK(std::memcmp(b.mem(1) + 100000 + r * 4096, b.mem(0) + off, len[size_t(i)]) == 0);
                    ++r;
                }
            }
        }
}

namespace {

// The trace hook's story of a WQE, one string per event (frames received left out): the emitting
// side, the event, its PSN and its facts; addresses as offsets into that side's own MR and keys
// named by which of its keys they are (L_Key, R_Key).
struct StoryCtx {
    std::vector<std::string>* out;
    SimPair* p;
    int side;
};

void story_event(void* ctx, const transport::TraceEvent& ev) {
    auto* sc = static_cast<StoryCtx*>(ctx);
    using transport::TraceKind;
    if (ev.kind == TraceKind::rx) return;
    const SimPair::Side& s = sc->p->side[sc->side];
    std::string e = std::string(sc->side ? "B " : "A ") + transport::kTraceKindName[size_t(ev.kind)];
    auto key = [&] {
        if (ev.remote) return ev.key == s.mr.rkey() ? "R" : "R?";
        return ev.key == s.mr.lkey() ? "L" : "L?";
    };
    switch (ev.kind) {
    case TraceKind::tx: {
        pkt::Packet pk;
        REQUIRE(pkt::parse({ev.frame, ev.len}, pk) == pkt::ParseError::ok);
        e += std::string(" ") + pk.op->id + " psn=" + std::to_string(ev.psn);
        break;
    }
    case TraceKind::wqe_fetched:
        e += " psn=" + std::to_string(ev.psn) + " psns=" + std::to_string(ev.count) + " wr=" + std::to_string(ev.wqe->wr_id);
        break;
    case TraceKind::recv_wqe_taken: e += " psn=" + std::to_string(ev.psn) + " wr=" + std::to_string(ev.wr_id); break;
    case TraceKind::dma_read:
    case TraceKind::dma_write:
    case TraceKind::atomic_done:
        e += " psn=" + std::to_string(ev.psn) + " at=" + std::to_string(ev.addr - s.mr.addr()) + " " + key() +
             " bytes=" + std::to_string(ev.bytes);
        if (ev.kind == TraceKind::atomic_done || ev.count == 1)
            e += " old=" + std::to_string(ev.old_value) + (ev.kind == TraceKind::atomic_done ? " new=" + std::to_string(ev.new_value) : "");
        break;
    case TraceKind::ack_received: e += " psn=" + std::to_string(ev.psn) + " msn=" + std::to_string(ev.count); break;
    case TraceKind::cqe:
        e += " wr=" + std::to_string(ev.wc->wr_id) + " " + name(ev.wc->opcode) + " " + name(ev.wc->status) + " " +
             std::to_string(ev.wc->byte_len);
        break;
    default: e += " psn=" + std::to_string(ev.psn); break;
    }
    sc->out->push_back(e);
}

void check_story(std::vector<std::string>& got, const std::vector<std::string>& want) {
    std::string g, w;
    for (const auto& s : got) g += s + "\n";
    for (const auto& s : want) w += s + "\n";
    CHECK(g == w);
    got.clear();
}

}  // namespace

TEST_CASE("trace: each step of a WRITE, a SEND, a READ and a FetchAdd, with PSNs, addresses, keys and values",
          "[transport][trace]") {
    Bench b(rc_config());
    std::vector<std::string> got;
    StoryCtx ctx[2] = {{&got, &b.p, 0}, {&got, &b.p, 1}};
    for (int i = 0; i < 2; ++i) b.p.side[i].hca->set_trace(story_event, &ctx[i]);
    b.fill(0, 0, 3000, 1);

    REQUIRE(b.post(0, WrOpcode::rdma_write, 0, 3000, 8192, 1) == Status::ok);
    REQUIRE(b.wait_cqes(1, 0));
    check_story(got, {
        "A wqe-fetched psn=256 psns=3 wr=1",
        "A dma-read psn=256 at=0 L bytes=1024", "A tx RC_RDMA_WRITE_FIRST psn=256",
        "A dma-read psn=257 at=1024 L bytes=1024", "A tx RC_RDMA_WRITE_MIDDLE psn=257",
        "A dma-read psn=258 at=2048 L bytes=952", "A tx RC_RDMA_WRITE_LAST psn=258",
        "B dma-write psn=256 at=8192 R bytes=1024", "B dma-write psn=257 at=9216 R bytes=1024",
        "B dma-write psn=258 at=10240 R bytes=952", "B tx RC_ACKNOWLEDGE psn=258",
        "A ack-received psn=258 msn=1", "A cqe wr=1 RDMA_WRITE success 3000",
    });

    REQUIRE(b.post_recv(1, 16384, 200, 9) == Status::ok);
    REQUIRE(b.post(0, WrOpcode::send, 100, 100, 0, 2) == Status::ok);
    REQUIRE(b.wait_cqes(2, 1));
    check_story(got, {
        "A wqe-fetched psn=259 psns=1 wr=2",
        "A dma-read psn=259 at=100 L bytes=100", "A tx RC_SEND_ONLY psn=259",
        "B recv-wqe-taken psn=259 wr=9", "B dma-write psn=259 at=16384 L bytes=100",
        "B cqe wr=9 RECV success 100", "B tx RC_ACKNOWLEDGE psn=259",
        "A ack-received psn=259 msn=2", "A cqe wr=2 SEND success 100",
    });

    REQUIRE(b.post(0, WrOpcode::rdma_read, 24576, 2048, 8192, 3) == Status::ok);
    REQUIRE(b.wait_cqes(3, 1));
    check_story(got, {
        "A wqe-fetched psn=260 psns=2 wr=3", "A tx RC_RDMA_READ_REQUEST psn=260",
        "B dma-read psn=260 at=8192 R bytes=1024", "B tx RC_RDMA_READ_RESPONSE_FIRST psn=260",
        "B dma-read psn=261 at=9216 R bytes=1024", "B tx RC_RDMA_READ_RESPONSE_LAST psn=261",
        "A dma-write psn=260 at=24576 L bytes=1024", "A dma-write psn=261 at=25600 L bytes=1024",
        "A cqe wr=3 RDMA_READ success 2048",
    });
    CHECK(std::memcmp(b.mem(0) + 24576, b.mem(0), 2048) == 0);

    const uint64_t before = 5;
    std::memcpy(b.mem(1) + 32768, &before, 8);
    REQUIRE(b.post(0, WrOpcode::atomic_fetch_and_add, 40960, 8, 32768, 4, send_flag::signaled, 3) == Status::ok);
    REQUIRE(b.wait_cqes(4, 1));
    check_story(got, {
        "A wqe-fetched psn=262 psns=1 wr=4", "A tx RC_FETCH_ADD psn=262",
        "B atomic-done psn=262 at=32768 R bytes=8 old=5 new=8", "B tx RC_ATOMIC_ACKNOWLEDGE psn=262",
        "A dma-write psn=262 at=40960 L bytes=8 old=5", "A cqe wr=4 FETCH_ADD success 8",
    });
    for (int i = 0; i < 2; ++i) b.p.side[i].hca->set_trace(nullptr, nullptr);
}

namespace {

// A port whose transmit ring takes at most `room` frames per turn, as a DPDK ring the peer drains
// slower than this side fills it: tx_burst refuses the rest (they stay the caller's).
class TightPort final : public port::Port {
public:
    explicit TightPort(port::Port& in) : in_(in) {}
    uint32_t room = 4;
    uint32_t left = 4;
    uint64_t refused = 0;
    bool alloc(port::Frame& f) override { return in_.alloc(f); }
    uint16_t tx_burst(port::Frame* f, uint16_t n) override {
        const uint16_t k = uint16_t(std::min<uint32_t>(n, left));
        left -= k;
        refused += n - k;
        return k ? in_.tx_burst(f, k) : 0;
    }
    uint16_t rx_burst(port::Frame* f, uint16_t n) override { return in_.rx_burst(f, n); }
    void free(port::Frame& f) override { in_.free(f); }
    pkt::Mac mac() const override { return in_.mac(); }
    uint32_t mtu() const override { return in_.mtu(); }
    port::PortStats stats() const override { return in_.stats(); }

private:
    port::Port& in_;
};

}  // namespace

// Before: what the port refused was freed ("lost as on a congested wire"), and the requester
// recovered by Go-Back-N after an ACK timeout: with 1000 QPs the retries ran out.
TEST_CASE("a port that refuses frames: they wait in the HCA's queue, in order; nothing lost, nothing resent",
          "[transport][rc]") {
    SimConfig cfg = rc_config();
    port::VirtualClock clock(1'000'000'000);
    port::MemWire wire(cfg.wire, clock);
    TightPort tight(wire.end(0));
    SimPair::Side s[2];
    SimPair::build_side(s[0], tight, clock, cfg, 0, cfg.wire.mac[1]);
    SimPair::build_side(s[1], wire.end(1), clock, cfg, 1, cfg.wire.mac[0]);
    for (int i = 0; i < 2; ++i)
        REQUIRE(tools::connect_qp(s[i].qp, cfg, s[1 - i].qp.qpn(), s[1 - i].gid, cfg.sq_psn[i], cfg.sq_psn[1 - i]));
    std::mt19937 r(7);
    for (size_t k = 0; k < (512u << 10); ++k) s[0].mem[k] = uint8_t(r());
    // 8 WRITEs of 64 KiB: 512 packets, 4 a turn leave
    for (uint64_t m = 0; m < 8; ++m) {
        Sge sge{s[0].mr.addr() + (m << 16), 1u << 16, s[0].mr.lkey()};
        SendWr w;
        w.wr_id = m;
        w.sg_list = &sge;
        w.num_sge = 1;
        w.opcode = WrOpcode::rdma_write;
        w.send_flags = send_flag::signaled;
        w.rdma = {s[1].mr.addr() + (1u << 20) + (m << 16), s[1].mr.rkey()};
        const SendWr* bad = nullptr;
        REQUIRE(s[0].qp.post_send(&w, &bad) == Status::ok);
    }
    std::vector<Wc> done;
    for (int turn = 0; turn < 20000 && done.size() < 8; ++turn) {
        tight.left = tight.room;
        s[0].hca->poll();
        s[1].hca->poll();
        clock.advance(1000);
        Wc wc[8];
        const int n = s[0].cq.poll(wc);
        done.insert(done.end(), wc, wc + std::max(n, 0));
    }
    REQUIRE(done.size() == 8);
    for (uint64_t m = 0; m < 8; ++m) {
        CHECK(done[m].wr_id == m);
        CHECK(done[m].status == WcStatus::success);
    }
    CHECK(tight.refused > 0);
    CHECK(std::memcmp(s[1].mem.data() + (1u << 20), s[0].mem.data(), 512u << 10) == 0);
    const Counters& c0 = s[0].dev->counters();
    CHECK(c0.get(Counter::completer_retry_err) == 0);
    CHECK(c0.get(Counter::local_ack_timeout_err) == 0);
    CHECK(c0.get(Counter::sent_pkts) == 512);
    CHECK(s[1].dev->counters().get(Counter::duplicate_request) == 0);
    CHECK(s[1].dev->counters().get(Counter::out_of_sequence) == 0);
}

TEST_CASE("turn profile: the quantiles of its histogram", "[transport][profile]") {
    using TP = transport::TurnProfile;
    TP::Hist h;
    for (int i = 0; i < 10; ++i) h.add(20);   // bucket 16-23
    for (int i = 0; i < 10; ++i) h.add(100);  // bucket 96-103
    CHECK(h.quantile(0.4) == 20);
    CHECK(h.quantile(0.5) == 100);
    CHECK(h.sum_ns == 1200);
    CHECK(h.mean() == 60);
    for (int i = 0; i < 10; ++i) h.add(20'000);  // a coarse bucket: 19968-20223
    CHECK(h.quantile(0.7) == 20'096);
    for (int i = 0; i < 30; ++i) h.add(2'000'000);  // beyond the histogram
    CHECK(h.quantile(0.7) == TP::kBeyondNs);
    CHECK(TP::kBeyondNs >= 1'000'000);
    CHECK(TP::bucket(TP::kBeyondNs - 1) == TP::kBuckets - 2);
    CHECK(TP::Hist{}.quantile(0.5) == 0);
}

TEST_CASE("turn profile: every turn that moved frames, and its steps within the whole", "[transport][profile]") {
    SimPair p(rc_config());
    p.clock.set_tick(1);  // every clock read moves time on: each step takes time
    transport::Hca& a = *p.side[0].hca;
    CHECK(a.turn_profile() == nullptr);
    a.profile_turns(true);
    REQUIRE(a.turn_profile() != nullptr);
    std::vector<uint8_t> src(65536, 0x5A);
    std::memcpy(p.side[0].mem.data(), src.data(), src.size());
    Sge s{p.side[0].mr.addr(), 65536, p.side[0].mr.lkey()};
    SendWr w;
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = WrOpcode::rdma_write;
    w.send_flags = send_flag::signaled;
    w.rdma = {p.side[1].mr.addr(), p.side[1].mr.rkey()};
    const SendWr* bad;
    REQUIRE(p.side[0].qp.post_send(&w, &bad) == Status::ok);
    uint64_t busy = 0, frames = 0;
    Wc wc[4];
    int got = 0;
    for (int i = 0; i < 100000 && (got = p.side[0].cq.poll(wc)) == 0; ++i) {
        const size_t m = a.poll();
        busy += m != 0;
        frames += m;
        if (!m && !p.side[1].hca->poll()) p.clock.set(std::min(p.wire.next_delivery_ns(), a.next_timer_ns()));
    }
    REQUIRE(got == 1);
    REQUIRE(wc[0].status == WcStatus::success);
    CHECK(std::memcmp(p.side[1].mem.data(), src.data(), src.size()) == 0);
    const transport::TurnProfile& tp = *a.turn_profile();
    CHECK(tp.turns() == busy);
    CHECK(tp.frames == frames);
    CHECK(frames >= 65);  // 64 WRITE packets out and at least one ACK in
    using TP = transport::TurnProfile;
    uint64_t steps = 0;
    for (int k = 0; k < TP::whole; ++k) steps += tp.step[size_t(k)].sum_ns;
    CHECK(steps <= tp.step[TP::whole].sum_ns);  // t[5] - t[0]; empty bursts' steps are not counted
    CHECK(tp.step[TP::requesters].count == tp.turns());
    // the ACKs came in receive bursts; the 64 packets left in the requesters' step (the port's
    // queue of 32 full) or in a turn's last burst
    CHECK(tp.step[TP::rx].count >= 1);
    CHECK(tp.step[TP::rx].count == tp.step[TP::receive].count);
    CHECK(tp.step[TP::rx].count < tp.turns());
    CHECK(tp.step[TP::tx].count < tp.turns());
    CHECK(tp.step[TP::whole].sum_ns >= 5 * tp.turns());  // a tick a step at least
    a.profile_turns(true);  // restarts
    CHECK(a.turn_profile()->turns() == 0);
    a.profile_turns(false);
    CHECK(a.turn_profile() == nullptr);
}
