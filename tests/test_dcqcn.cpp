// DCQCN over the in-memory wire in virtual time. Side 0 sends through a "switch" port that marks
// ECN CE (on chosen frames, or when its queue in front of a bottleneck link is above a threshold);
// side 1 is the notification point, side 0 the reaction point. Checked: CNPs exactly one per
// interval per QP and byte-exact, counters on both ends against the wire, the RP's rate sequence
// against the DCQCN equations computed here, two flows converging under marking and recovering
// after it stops, data byte-exact throughout.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <vector>

#include "packet/icrc.hpp"
#include "packet/parse.hpp"
#include "tools/hcaemu/sim_pair.hpp"

using namespace hcaemu;
using tools::SimConfig;
using tools::SimPair;
using transport::DcqcnEvent;
using transport::DcqcnEventKind;
using transport::DcqcnParams;

namespace {

constexpr size_t kIpOff = 14;  // no VLAN tag

void set_ce(uint8_t* f) {
    uint8_t* ip = f + kIpOff;
    ip[1] |= 3;
    ip[10] = ip[11] = 0;
    uint32_t s = 0;
    for (int i = 0; i < 20; i += 2) s += uint32_t(ip[i] << 8 | ip[i + 1]);
    while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
    ip[10] = uint8_t(~s >> 8);
    ip[11] = uint8_t(~s);
}

// The switch in front of side 0: frames leave at `link_mbps` (0: at once) in order; one is marked
// CE when `mark(frame, seq)` says so, or when the bytes queued before it exceed `threshold`.
class MarkingPort final : public port::Port {
public:
    MarkingPort(port::Port& inner, const port::Clock& clock) : in_(inner), clock_(clock) {}
    std::function<bool(const uint8_t*, uint32_t, uint64_t)> mark;
    uint64_t link_mbps = 0;
    uint64_t threshold = UINT64_MAX;
    bool marking = true;
    uint64_t marked = 0;

    bool alloc(port::Frame& f) override {
        pump();
        return in_.alloc(f);
    }
    uint16_t tx_burst(port::Frame* fs, uint16_t n) override {
        pump();
        const uint64_t now = clock_.now_ns();
        for (uint16_t i = 0; i < n; ++i) {
            port::Frame& f = fs[i];
            const bool m = marking && ((mark && mark(f.data, f.len, seq_)) || queued_ > threshold);
            ++seq_;
            if (m && f.len > kIpOff + 20 && f.data[12] == 0x08 && f.data[13] == 0x00) {
                set_ce(f.data);
                ++marked;
            }
            uint64_t dep = now;
            if (link_mbps) {
                last_dep_ = std::max(last_dep_, now) + (uint64_t(f.len) * 8000 + link_mbps - 1) / link_mbps;
                dep = last_dep_;
            }
            q_.push_back({f, dep});
            queued_ += f.len;
        }
        pump();
        return n;
    }
    uint16_t rx_burst(port::Frame* fs, uint16_t n) override {
        pump();
        return in_.rx_burst(fs, n);
    }
    void free(port::Frame& f) override { in_.free(f); }
    pkt::Mac mac() const override { return in_.mac(); }
    uint32_t mtu() const override { return in_.mtu(); }
    port::PortStats stats() const override { return in_.stats(); }

    void pump() {
        const uint64_t now = clock_.now_ns();
        while (!q_.empty() && q_.front().dep <= now) {
            port::Frame f = q_.front().f;
            queued_ -= f.len;
            q_.pop_front();
            if (in_.tx_burst(&f, 1) != 1) in_.free(f);
        }
    }
    uint64_t next_ns() const { return q_.empty() ? UINT64_MAX : q_.front().dep; }
    uint64_t queued() const { return queued_; }

private:
    struct Q {
        port::Frame f;
        uint64_t dep;
    };
    port::Port& in_;
    const port::Clock& clock_;
    std::deque<Q> q_;
    uint64_t queued_ = 0, last_dep_ = 0, seq_ = 0;
};

// A frame on the wire, decoded.
struct Seen {
    int dir;
    port::Event ev;
    uint64_t t;
    uint8_t opcode;
    uint32_t qp;
    uint32_t psn;
    bool ce;
    uint32_t len;
    std::vector<uint8_t> bytes;  // CNPs only
};

struct Bench {
    SimConfig cfg;
    port::VirtualClock clock{1'000'000'000};
    port::MemWire wire;
    MarkingPort sw;
    SimPair::Side side[2];
    std::vector<Qp> extra[2];  // more QPs, connected pairwise: extra[0][k] <-> extra[1][k]
    std::vector<Seen> seen;
    std::vector<DcqcnEvent> events;  // side 0's RP
    std::vector<Wc> cqes[2];

    static SimConfig config() {
        SimConfig c;
        c.wire.latency_ns = 2000;
        c.mem_bytes = 8u << 20;
        return c;
    }

    explicit Bench(const DcqcnParams& p, SimConfig c = config())
        : cfg(c), wire(c.wire, clock), sw(wire.end(0), clock) {
        SimPair::build_side(side[0], sw, clock, cfg, 0, cfg.wire.mac[1]);
        SimPair::build_side(side[1], wire.end(1), clock, cfg, 1, cfg.wire.mac[0]);
        for (int i = 0; i < 2; ++i) {
            side[i].hca->set_dcqcn(p);
            std::mt19937 r(uint32_t(7 + i));
            for (auto& b : side[i].mem) b = uint8_t(r());
        }
        for (int i = 0; i < 2; ++i)
            REQUIRE(tools::connect_qp(side[i].qp, cfg, side[1 - i].qp.qpn(), side[1 - i].gid, cfg.sq_psn[i],
                                      cfg.sq_psn[1 - i]));
        side[0].hca->set_dcqcn_observer([](void* ctx, const DcqcnEvent& e) { static_cast<Bench*>(ctx)->events.push_back(e); },
                                        this);
        wire.set_tap([this](int dir, const uint8_t* f, uint32_t len, uint64_t t, port::Event ev) {
            if (ev != port::Event::sent && ev != port::Event::delivered && !port::is_drop(ev)) return;
            pkt::Packet pk;
            if (pkt::parse({f, len}, pk) != pkt::ParseError::ok) return;
            Seen s{dir, ev, t, pk.h.bth.opcode, pk.h.bth.dest_qp, pk.h.bth.psn, (f[kIpOff + 1] & 3) == 3, len, {}};
            if (pk.h.bth.opcode == pkt::op::cnp) s.bytes.assign(f, f + len);
            seen.push_back(std::move(s));
        });
    }

    Qp& add_qp_pair() {
        for (int i = 0; i < 2; ++i) {
            QpInitAttr ia;
            ia.send_cq = &side[i].cq;
            ia.recv_cq = &side[i].cq;
            ia.qp_type = QpType::rc;
            ia.cap = {cfg.sq_depth, cfg.rq_depth, cfg.max_sge, cfg.max_sge, 64};
            extra[i].push_back(std::move(side[i].dev->create_qp(side[i].pd, ia).value));
        }
        const size_t k = extra[0].size() - 1;
        for (int i = 0; i < 2; ++i)
            REQUIRE(tools::connect_qp(extra[i][k], cfg, extra[1 - i][k].qpn(), side[1 - i].gid, 0x500, 0x500));
        return extra[0][k];
    }

    Status write(Qp& qp, uint64_t off, uint32_t len, uint64_t wr_id) {
        Sge sge{side[0].mr.addr() + off, len, side[0].mr.lkey()};
        SendWr w;
        w.wr_id = wr_id;
        w.sg_list = &sge;
        w.num_sge = 1;
        w.opcode = WrOpcode::rdma_write;
        w.send_flags = send_flag::signaled;
        w.rdma = {side[1].mr.addr() + off, side[1].mr.rkey()};
        const SendWr* bad = nullptr;
        return qp.post_send(&w, &bad);
    }

    void poll_cqs() {
        Wc wc[16];
        for (int i = 0; i < 2; ++i) {
            int n;
            while ((n = side[i].cq.poll(wc)) > 0) cqes[i].insert(cqes[i].end(), wc, wc + n);
        }
    }

    // Polls both sides; when nothing moves, virtual time jumps to the next delivery, timer or
    // departure from the switch. Until done() or `max_ns` of virtual time.
    bool run(const std::function<bool()>& done, uint64_t max_ns) {
        const uint64_t end = clock.now_ns() + max_ns;
        for (uint64_t n = 0; n < 200'000'000; ++n) {
            if (done()) return true;
            sw.pump();
            const size_t moved = side[0].hca->poll() + side[1].hca->poll();
            if (moved) continue;
            const uint64_t next = std::min({wire.next_delivery_ns(), side[0].hca->next_timer_ns(),
                                            side[1].hca->next_timer_ns(), sw.next_ns()});
            if (next == UINT64_MAX || next > end) return done();
            clock.set(std::max(next, clock.now_ns() + 1));
        }
        return done();
    }

    const Counters& ctr(int i) const { return side[i].dev->counters(); }
    size_t count(int dir, port::Event ev, uint8_t opcode) const {
        return size_t(std::count_if(seen.begin(), seen.end(),
                                    [&](const Seen& s) { return s.dir == dir && s.ev == ev && s.opcode == opcode; }));
    }
};

DcqcnParams params() {
    DcqcnParams p;
    p.line_rate = 10000;  // 10 Gb/s: a sender without a limiter, and the switch's link
    return p;
}

// The NP's rule, computed from the wire: per QP, a CNP for a CE-marked data packet that arrives
// at least `interval` after the previous CNP; the times the CNPs go out.
std::vector<std::pair<uint32_t, uint64_t>> expected_cnps(const Bench& b, uint64_t interval_ns) {
    std::vector<std::pair<uint32_t, uint64_t>> out;
    std::vector<std::pair<uint32_t, uint64_t>> last;  // dest QP of the data -> last CNP time
    for (const Seen& s : b.seen) {
        if (s.dir != 0 || s.ev != port::Event::delivered || !s.ce) continue;
        auto it = std::find_if(last.begin(), last.end(), [&](auto& l) { return l.first == s.qp; });
        if (it != last.end() && s.t - it->second < interval_ns) continue;
        if (it == last.end()) last.push_back({s.qp, s.t});
        else it->second = s.t;
        out.push_back({s.qp, s.t});
    }
    return out;
}

}  // namespace

TEST_CASE("NP: exactly one CNP per interval per QP, to the sender's QP, byte-exact; the data goes on", "[dcqcn][np]") {
    DcqcnParams p = params();
    p.rp_enable = false;  // the sender keeps its pace: the NP alone is under test
    Bench b(p);
    Qp& q2 = b.add_qp_pair();
    b.sw.mark = [](const uint8_t*, uint32_t, uint64_t) { return true; };  // every frame of side 0
    b.sw.link_mbps = 10000;  // spread over time: 10 Gb/s
    // Two QPs, 2 MiB each, interleaved: 2048 packets each, ~3.5 ms on the link.
    REQUIRE(b.write(b.side[0].qp, 0, 1 << 20, 1) == Status::ok);
    REQUIRE(b.write(q2, 4 << 20, 1 << 20, 2) == Status::ok);
    REQUIRE(b.write(b.side[0].qp, 1 << 20, 1 << 20, 3) == Status::ok);
    REQUIRE(b.write(q2, 5 << 20, 1 << 20, 4) == Status::ok);
    REQUIRE(b.run([&] { b.poll_cqs(); return b.cqes[0].size() == 4; }, 1'000'000'000));
    for (const Wc& wc : b.cqes[0]) CHECK(wc.status == WcStatus::success);
    CHECK(std::memcmp(b.side[1].mem.data(), b.side[0].mem.data(), 2 << 20) == 0);
    CHECK(std::memcmp(b.side[1].mem.data() + (4 << 20), b.side[0].mem.data() + (4 << 20), 2 << 20) == 0);

    const auto want = expected_cnps(b, 50'000);
    std::vector<std::pair<uint32_t, uint64_t>> got;
    for (const Seen& s : b.seen)
        if (s.dir == 1 && s.ev == port::Event::sent && s.opcode == pkt::op::cnp) got.push_back({s.qp, s.t});
    // The CNP names the sender's QP; side 1's QP receiving the data is the peer of that QP.
    const uint32_t q1_tx = b.side[0].qp.qpn(), q2_tx = q2.qpn();
    const uint32_t q1_rx = b.side[1].qp.qpn(), q2_rx = b.extra[1][0].qpn();
    std::vector<std::pair<uint32_t, uint64_t>> want_tx;
    for (auto [qp, t] : want) want_tx.push_back({qp == q1_rx ? q1_tx : qp == q2_rx ? q2_tx : 0, t});
    REQUIRE(want_tx.size() > 60);  // ~3.5 ms of marked traffic, 2 QPs, one CNP per 50 us each
    CHECK(got == want_tx);
    size_t n1 = 0, n2 = 0;
    for (auto& g : got) (g.first == q1_tx ? n1 : n2) += 1;
    CHECK(n1 > 30);
    CHECK(n2 > 30);

    // Counters on both ends against the wire.
    const size_t marked_data = size_t(std::count_if(b.seen.begin(), b.seen.end(), [](const Seen& s) {
        return s.dir == 0 && s.ev == port::Event::delivered && s.ce;
    }));
    CHECK(marked_data == b.sw.marked);
    CHECK(b.ctr(1).get(Counter::np_ecn_marked_roce_packets) == marked_data);
    CHECK(b.ctr(1).get(Counter::np_cnp_sent) == got.size());
    CHECK(b.ctr(0).get(Counter::rp_cnp_ignored) == got.size());  // the RP is off on side 0
    CHECK(b.ctr(0).get(Counter::rp_cnp_handled) == 0);
    for (size_t e = 0; e < pkt::kParseErrorCount; ++e) CHECK(b.ctr(0).rx_err[e] == 0);
    CHECK(b.ctr(0).get(Counter::rx_drop_no_qp) == 0);

    // The first CNP byte by byte (IBTA Annex A17.9.3): Ethernet, IPv4 with DSCP 48 and ECN 0,
    // UDP to 4791, BTH opcode 0x81 with BECN, P_Key 0xFFFF, DestQP the sender's QP, PSN 0, 16
    // reserved zero bytes, the ICRC.
    const Seen* cnp = nullptr;
    for (const Seen& s : b.seen)
        if (s.dir == 1 && s.ev == port::Event::sent && s.opcode == pkt::op::cnp) {
            cnp = &s;
            break;
        }
    REQUIRE(cnp);
    const std::vector<uint8_t>& f = cnp->bytes;
    REQUIRE(f.size() == 14 + 20 + 8 + 12 + 16 + 4);
    std::vector<uint8_t> w(f.size(), 0);
    std::memcpy(&w[0], b.cfg.wire.mac[0].data(), 6);
    std::memcpy(&w[6], b.cfg.wire.mac[1].data(), 6);
    w[12] = 0x08;
    uint8_t* ip = &w[14];
    const uint8_t ip_hdr[20] = {0x45, 0xC0, 0, 60, f[18], f[19], 0x40, 0, f[22], 17, 0, 0, 198, 18, 0, 2, 198, 18, 0, 1};
    std::memcpy(ip, ip_hdr, 20);
    uint32_t s = 0;
    for (int i = 0; i < 20; i += 2) s += uint32_t(ip[i] << 8 | ip[i + 1]);
    while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
    ip[10] = uint8_t(~s >> 8);
    ip[11] = uint8_t(~s);
    uint8_t* udp = ip + 20;
    udp[0] = f[34];  // source port: the QP's flow hash (as its other packets)
    udp[1] = f[35];
    udp[2] = 0x12;
    udp[3] = 0xB7;  // 4791
    udp[5] = 8 + 12 + 16 + 4;
    uint8_t* bth = udp + 8;
    const uint8_t bth_want[12] = {0x81, 0, 0xFF, 0xFF, 0x40, uint8_t(q1_tx >> 16), uint8_t(q1_tx >> 8), uint8_t(q1_tx), 0, 0, 0, 0};
    std::memcpy(bth, bth_want, 12);
    const uint32_t crc = pkt::icrc(ip, 20 + 8 + 12 + 16, false);
    for (int i = 0; i < 4; ++i) w[f.size() - 4 + size_t(i)] = uint8_t(crc >> (8 * i));
    CHECK(f == w);
    CHECK(f[22] == 64);  // TTL: the QP's hop limit
}

TEST_CASE("NP: min_time_between_cnps 0 answers every marked packet; np_enable 0 none, still counted", "[dcqcn][np]") {
    for (const bool np_on : {true, false}) {
        DcqcnParams p = params();
        p.rp_enable = false;
        p.np_enable = np_on;
        p.min_time_between_cnps = 0;
        Bench b(p);
        // Mark the 3rd, 4th and 10th frame of side 0.
        b.sw.mark = [](const uint8_t*, uint32_t, uint64_t seq) { return seq == 2 || seq == 3 || seq == 9; };
        REQUIRE(b.write(b.side[0].qp, 0, 16 * 1024, 1) == Status::ok);
        REQUIRE(b.run([&] { b.poll_cqs(); return b.cqes[0].size() == 1; }, 1'000'000'000));
        CHECK(std::memcmp(b.side[1].mem.data(), b.side[0].mem.data(), 16 * 1024) == 0);
        CHECK(b.ctr(1).get(Counter::np_ecn_marked_roce_packets) == 3);
        CHECK(b.ctr(1).get(Counter::np_cnp_sent) == (np_on ? 3u : 0u));
        CHECK(b.count(1, port::Event::sent, pkt::op::cnp) == (np_on ? 3u : 0u));
        CHECK(b.ctr(0).get(Counter::rp_cnp_ignored) == (np_on ? 3u : 0u));
        CHECK(b.ctr(1).get(Counter::rcvd_pkts) == 16);  // every data packet was processed, marked or not
    }
}
