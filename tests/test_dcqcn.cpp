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
    struct In {
        uint64_t t;
        uint32_t len;
        uint32_t dest_qp;
    };
    std::vector<In> input;  // each frame side 0 sent, when

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
            const size_t bth = kIpOff + 20 + 8;
            input.push_back({now, f.len, f.len > bth + 8 ? uint32_t(f.data[bth + 5] << 16 | f.data[bth + 6] << 8 | f.data[bth + 7]) : 0});
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

    // A WRITE from side `from` (0 unless said) to the same offset on the other side.
    Status write(Qp& qp, uint64_t off, uint32_t len, uint64_t wr_id, int from = 0) {
        Sge sge{side[from].mr.addr() + off, len, side[from].mr.lkey()};
        SendWr w;
        w.wr_id = wr_id;
        w.sg_list = &sge;
        w.num_sge = 1;
        w.opcode = WrOpcode::rdma_write;
        w.send_flags = send_flag::signaled;
        w.rdma = {side[1 - from].mr.addr() + off, side[1 - from].mr.rkey()};
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

// The interval is what the wire shows: when every clock read costs time (a turn's work), the
// CNPs still leave at least min_time_between_cnps apart, counted from when the previous one left.
TEST_CASE("NP: CNPs to one QP leave at least the interval apart on the wire when the HCA's work takes time",
          "[dcqcn][np]") {
    DcqcnParams p = params();
    p.rp_enable = false;
    Bench b(p);
    b.sw.mark = [](const uint8_t*, uint32_t, uint64_t) { return true; };
    b.sw.link_mbps = 10000;
    b.clock.set_tick(150);  // each clock read: 150 ns later
    REQUIRE(b.write(b.side[0].qp, 0, 1 << 20, 1) == Status::ok);
    // The NP sends data of its own: some of its turns are long (a burst of WRITE packets after
    // the marked packet that decided a CNP), some short.
    REQUIRE(b.write(b.side[1].qp, 2 << 20, 1 << 20, 9, 1) == Status::ok);
    REQUIRE(b.run([&] { b.poll_cqs(); return b.cqes[0].size() == 1 && b.cqes[1].size() == 1; }, 1'000'000'000));
    CHECK(b.cqes[0][0].status == WcStatus::success);
    CHECK(b.cqes[1][0].status == WcStatus::success);
    CHECK(std::memcmp(b.side[1].mem.data(), b.side[0].mem.data(), 1 << 20) == 0);
    CHECK(std::memcmp(b.side[1].mem.data() + (2 << 20), b.side[0].mem.data() + (2 << 20), 1 << 20) == 0);
    std::vector<uint64_t> t;
    for (const Seen& s : b.seen)
        if (s.dir == 1 && s.ev == port::Event::sent && s.opcode == pkt::op::cnp) t.push_back(s.t);
    REQUIRE(t.size() >= 10);  // ~1 ms of marked traffic
    CHECK(t.size() == b.ctr(1).get(Counter::np_cnp_sent));
    uint64_t least = UINT64_MAX;
    for (size_t i = 1; i < t.size(); ++i) least = std::min(least, t[i] - t[i - 1]);
    INFO(t.size() << " CNPs, the closest two " << least << " ns apart");
    CHECK(least >= 50'000);
    CHECK(least < 60'000);  // and not much more: marked packets keep coming
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

namespace {

// The RP as the DCQCN paper and mlx5 define it, computed here from the CNPs side 0 received (on
// the wire) and the times and causes (cut, timer, byte counter) of the RP's steps; each step's
// rate, target, alpha and stage kind must be the model's.
struct RpModel {
    const DcqcnParams& p;
    bool on = false, flag = false;
    uint32_t rate = 0, target = 0, alpha = 0, ts = 0, bs = 0;
    uint64_t anext = 0;
    size_t cuts = 0, fr = 0, ai = 0, hai = 0, releases = 0;

    void sync(uint64_t t) {
        while (anext <= t) {
            uint32_t a = alpha * p.dce_tcp_g / 1024;
            if (flag) a = std::min<uint32_t>(a + (1024 - p.dce_tcp_g), 1023);
            alpha = a;
            flag = false;
            anext += uint64_t(p.dce_tcp_rtt) * 1000;
        }
    }
    void cnp(uint64_t t) {
        if (!on) {
            on = true;
            rate = target = p.line_rate;
            alpha = p.initial_alpha_value;
            flag = false;
            anext = t + uint64_t(p.dce_tcp_rtt) * 1000;
            ts = bs = 0;
            return;
        }
        sync(t);
        flag = true;
    }
    void check(const DcqcnEvent& e) {
        INFO("event " << int(e.kind) << " at " << e.t_ns << " by_bytes " << e.by_bytes);
        switch (e.kind) {
        case DcqcnEventKind::start:
            REQUIRE(on);
            CHECK(e.rate == p.line_rate);
            break;
        case DcqcnEventKind::cut: {
            sync(e.t_ns);
            if (bs > 0 || ts > 0) target = rate;  // clamp_tgt_rate_after_time_inc (default); bytes always clamp
            const uint32_t by_alpha = uint32_t(uint64_t(rate) * alpha / 2048);  // alpha/2 (rpg_gd 11)
            const uint32_t cut = std::min(by_alpha, rate / 2);                  // rpg_min_dec_fac 50%
            rate = std::max(rate - cut, 1u);
            ts = bs = 0;
            ++cuts;
            break;
        }
        case DcqcnEventKind::fast_recovery:
        case DcqcnEventKind::additive:
        case DcqcnEventKind::hyper: {
            const uint32_t b = p.rpg_byte_reset ? bs : ts;
            DcqcnEventKind k = DcqcnEventKind::fast_recovery;
            if (ts > p.rpg_threshold && b > p.rpg_threshold) k = DcqcnEventKind::hyper, target += p.rpg_hai_rate, ++hai;
            else if (ts >= p.rpg_threshold || b >= p.rpg_threshold) k = DcqcnEventKind::additive, target += p.rpg_ai_rate, ++ai;
            else ++fr;
            CHECK(e.kind == k);
            target = std::min(target, p.line_rate);
            rate = (rate + target + 1) / 2;
            (e.by_bytes ? bs : ts) += 1;
            break;
        }
        case DcqcnEventKind::release:
            CHECK(rate == p.line_rate);
            CHECK(target == p.line_rate);
            on = false;
            ++releases;
            return;
        }
        CHECK(e.rate == rate);
        CHECK(e.target == target);
        if (e.kind == DcqcnEventKind::cut) CHECK(e.alpha == alpha);
    }
};

// Runs side 0 backlogged (1 MiB WRITEs, 8 in flight) while the switch marks what side 0 sends in
// the windows [from, to) (virtual ns after the start), until the limiter is released again.
void run_marked_windows(Bench& b, std::vector<std::pair<uint64_t, uint64_t>> windows, uint64_t max_ns) {
    const uint64_t t0 = b.clock.now_ns();
    b.sw.mark = [&b, windows, t0](const uint8_t*, uint32_t, uint64_t) {
        const uint64_t t = b.clock.now_ns() - t0;
        for (auto [f, to] : windows)
            if (t >= f && t < to) return true;
        return false;
    };
    uint64_t posted = 0;
    const uint64_t last = windows.back().second;
    REQUIRE(b.run(
        [&] {
            b.poll_cqs();
            while (posted < b.cqes[0].size() + 8) REQUIRE(b.write(b.side[0].qp, 0, 1 << 20, ++posted) == Status::ok);
            return b.clock.now_ns() - t0 > last && !b.events.empty() && b.events.back().kind == DcqcnEventKind::release;
        },
        max_ns));
    b.sw.mark = nullptr;
    REQUIRE(b.run([&] { b.poll_cqs(); return b.cqes[0].size() == posted; }, 1'000'000'000));
    for (const Wc& wc : b.cqes[0]) CHECK(wc.status == WcStatus::success);
    CHECK(std::memcmp(b.side[1].mem.data(), b.side[0].mem.data(), 1 << 20) == 0);
}

RpModel check_rp(const Bench& b, const DcqcnParams& p) {
    // CNPs as side 0 received them, and the RP's steps, in time order (a CNP first at a tie: the
    // engine receives before its timers fire).
    struct In {
        uint64_t t;
        int order;
        const DcqcnEvent* e;
    };
    std::vector<In> in;
    for (const Seen& s : b.seen)
        if (s.dir == 1 && s.ev == port::Event::delivered && s.opcode == pkt::op::cnp) in.push_back({s.t, 0, nullptr});
    for (const DcqcnEvent& e : b.events) in.push_back({e.t_ns, 1, &e});
    std::stable_sort(in.begin(), in.end(), [](const In& x, const In& y) { return x.t != y.t ? x.t < y.t : x.order < y.order; });
    RpModel m{p};
    uint64_t last_cnp = 0, last_reset = 0;
    for (const In& i : in) {
        if (!i.e) {
            m.cnp(i.t);
            last_cnp = i.t;
            continue;
        }
        m.check(*i.e);
        if (i.e->kind == DcqcnEventKind::cut) {
            // rate_reduce_monitor_period after the CNP that asked for it, on the 1 us timer tick
            CHECK(i.t >= last_cnp);
            last_reset = i.t;
        }
        if (i.e->kind == DcqcnEventKind::start) last_reset = i.t;
        if (!i.e->by_bytes && (i.e->kind == DcqcnEventKind::fast_recovery || i.e->kind == DcqcnEventKind::additive ||
                               i.e->kind == DcqcnEventKind::hyper)) {
            CHECK(i.t - last_reset >= uint64_t(p.rpg_time_reset) * 1000);  // rpg_time_reset after the cut or the last one
            CHECK(i.t - last_reset < uint64_t(p.rpg_time_reset) * 1000 + 2000);
            last_reset = i.t;
        }
    }
    return m;
}

// Bytes side 0 sent (into the switch) between two times: the limiter's rate in practice.
double sent_mbps(const Bench& b, uint64_t from, uint64_t to, uint32_t dest_qp = 0) {
    uint64_t bytes = 0;
    for (const auto& i : b.sw.input)
        if (i.t >= from && i.t < to && (!dest_qp || i.dest_qp == dest_qp)) bytes += i.len;
    return double(bytes) * 8000.0 / double(to - from);
}

}  // namespace

TEST_CASE("RP by the timer: cut by alpha/2, alpha updates, fast recovery, additive and hyper increase, release",
          "[dcqcn][rp]") {
    DcqcnParams p = params();
    p.rpg_byte_reset = 0;  // the timer alone drives the increases
    Bench b(p);
    b.sw.link_mbps = 10000;
    // Marks for 200 us (CNPs every 50 us), then one marked burst after two timer increases.
    run_marked_windows(b, {{200'000, 400'000}, {1'300'000, 1'310'000}}, 2'000'000'000);
    const RpModel m = check_rp(b, p);
    const size_t cnps = b.count(1, port::Event::delivered, pkt::op::cnp);
    INFO("CNPs " << cnps << " cuts " << m.cuts << " fr " << m.fr << " ai " << m.ai << " hai " << m.hai);
    CHECK(cnps >= 5);
    CHECK(m.cuts == cnps);  // each CNP cut the rate once (50 us apart, longer than the 4 us period)
    CHECK(m.fr >= 1);
    CHECK(m.ai >= 1);
    CHECK(m.hai >= 1);
    CHECK(m.releases == 1);
    CHECK(b.ctr(0).get(Counter::rp_cnp_handled) == cnps);
    CHECK(b.ctr(1).get(Counter::np_cnp_sent) == cnps);
    CHECK(!b.side[0].hca->dcqcn_state(b.side[0].qp.qpn())->on);
    // The limiter holds side 0 to the rate: between consecutive steps 300 us apart the bytes it
    // sent match the rate set at the first of them (within 3%).
    size_t checked = 0;
    for (size_t i = 0; i + 1 < b.events.size(); ++i) {
        const DcqcnEvent& e = b.events[i];
        const uint64_t t1 = b.events[i + 1].t_ns;
        if (e.kind == DcqcnEventKind::release || t1 - e.t_ns < 250'000) continue;
        const double r = sent_mbps(b, e.t_ns + 10'000, t1);
        INFO("rate " << e.rate << " Mb/s, wire " << r << " Mb/s");
        CHECK(r > 0.97 * e.rate);
        CHECK(r < 1.03 * e.rate);
        ++checked;
    }
    CHECK(checked >= 8);
}

TEST_CASE("RP by the byte counter and the timer: the stage rule with both counters", "[dcqcn][rp]") {
    DcqcnParams p = params();  // rpg_time_reset 300 us, rpg_threshold 1
    p.rpg_byte_reset = 150'000;  // ~150 us of traffic at 8 Gb/s: both counters take turns
    Bench b(p);
    b.sw.link_mbps = 10000;
    run_marked_windows(b, {{200'000, 400'000}, {1'300'000, 1'310'000}}, 2'000'000'000);
    const RpModel m = check_rp(b, p);
    size_t by_bytes = 0;
    for (const DcqcnEvent& e : b.events) by_bytes += e.by_bytes;
    INFO("cuts " << m.cuts << " fr " << m.fr << " ai " << m.ai << " hai " << m.hai << " by bytes " << by_bytes);
    CHECK(by_bytes > 10);
    CHECK(m.fr >= 1);
    CHECK(m.ai >= 1);
    CHECK(m.hai >= 1);
    CHECK(m.releases == 1);
}

TEST_CASE("two flows through a marking bottleneck converge to fair shares, and recover when the marking stops",
          "[dcqcn][rp][converge]") {
    DcqcnParams p = params();
    Bench b(p);
    b.sw.link_mbps = 10000;     // the bottleneck: as fast as each sender's line
    b.sw.threshold = 100'000;   // marks CE above 100 kB queued (a step at K, as DCTCP's switches)
    Qp& qb = b.add_qp_pair();
    const uint32_t qa_rx = b.side[1].qp.qpn(), qb_rx = b.extra[1][0].qpn();
    const uint64_t t0 = b.clock.now_ns();
    uint64_t posted[2] = {0, 0}, done[2] = {0, 0};
    size_t seen_cqes = 0;
    bool b_on = false;
    auto feed = [&] {
        b.poll_cqs();
        for (; seen_cqes < b.cqes[0].size(); ++seen_cqes) {
            REQUIRE(b.cqes[0][seen_cqes].status == WcStatus::success);
            ++done[b.cqes[0][seen_cqes].wr_id >> 32];
        }
        // Flow A from the start, flow B from 3 ms: 1 MiB WRITEs, 8 in flight each.
        b_on = b_on || b.clock.now_ns() - t0 >= 3'000'000;
        while (posted[0] < done[0] + 8) REQUIRE(b.write(b.side[0].qp, 0, 1 << 20, ++posted[0]) == Status::ok);
        while (b_on && posted[1] < done[1] + 8) REQUIRE(b.write(qb, 4 << 20, 1 << 20, (1ull << 32) | ++posted[1]) == Status::ok);
    };
    const uint64_t mark_end = 60'000'000;
    REQUIRE(b.run([&] { feed(); return b.clock.now_ns() - t0 >= mark_end; }, 2'000'000'000));
    // Converged: over the last 20 ms each flow has about half of the bottleneck.
    const double ra = sent_mbps(b, t0 + 40'000'000, t0 + mark_end, qa_rx);
    const double rb = sent_mbps(b, t0 + 40'000'000, t0 + mark_end, qb_rx);
    INFO("flow A " << ra << " Mb/s, flow B " << rb << " Mb/s, CNPs " << b.ctr(1).get(Counter::np_cnp_sent));
    CHECK(ra > 3500);
    CHECK(rb > 3500);
    CHECK(std::abs(ra - rb) < 0.1 * (ra + rb));
    CHECK(ra + rb > 8500);
    CHECK(b.side[0].hca->dcqcn_state(b.side[0].qp.qpn())->on);
    CHECK(b.side[0].hca->dcqcn_state(qb.qpn())->on);
    // The marking stops: both flows go back to the line rate and their limiters are released.
    b.sw.marking = false;
    const uint64_t t1 = b.clock.now_ns();
    REQUIRE(b.run(
        [&] {
            feed();
            return !b.side[0].hca->dcqcn_state(b.side[0].qp.qpn())->on && !b.side[0].hca->dcqcn_state(qb.qpn())->on;
        },
        200'000'000));
    const uint64_t recovered = b.clock.now_ns() - t1;
    INFO("recovered in " << recovered << " ns");
    CHECK(recovered < 50'000'000);
    // Everything posted completes, byte-exact.
    b_on = false;
    const uint64_t want0 = posted[0], want1 = posted[1];
    REQUIRE(b.run([&] { b.poll_cqs(); return b.cqes[0].size() == want0 + want1; }, 1'000'000'000));
    for (const Wc& wc : b.cqes[0]) CHECK(wc.status == WcStatus::success);
    CHECK(std::memcmp(b.side[1].mem.data(), b.side[0].mem.data(), 1 << 20) == 0);
    CHECK(std::memcmp(b.side[1].mem.data() + (4 << 20), b.side[0].mem.data() + (4 << 20), 1 << 20) == 0);
    CHECK(b.ctr(0).get(Counter::rp_cnp_handled) == b.ctr(1).get(Counter::np_cnp_sent));
    CHECK(b.ctr(1).get(Counter::np_cnp_sent) == b.count(1, port::Event::sent, pkt::op::cnp));
    CHECK(b.ctr(1).get(Counter::np_ecn_marked_roce_packets) == b.sw.marked);
}

TEST_CASE("DCQCN parameters by mlx5 name: aliases, ranges, typed errors, the text listing", "[dcqcn][params]") {
    DcqcnParams p;
    std::string err;
    REQUIRE(transport::dcqcn_parse(p, "rpg_ai_rate=7,rp_hai_rate=70 time_reset=55,np_min_time_between_cnps=4", err));
    CHECK(p.rpg_ai_rate == 7);
    CHECK(p.rpg_hai_rate == 70);
    CHECK(p.rpg_time_reset == 55);
    CHECK(p.min_time_between_cnps == 4);
    REQUIRE(transport::dcqcn_parse(p, "rp_dce_tcp_g=1000,np_enable=0,clamp_tgt_rate=1,rp_clamp_tgt_rate_ati=0", err));
    CHECK(!p.clamp_tgt_rate_after_time_inc);
    CHECK(p.dce_tcp_g == 1000);
    CHECK(!p.np_enable);
    CHECK(p.clamp_tgt_rate);
    const DcqcnParams before = p;
    CHECK(!transport::dcqcn_parse(p, "rpg_gd=16", err));
    CHECK(err == "rpg_gd: 16 is outside 1..15");
    CHECK(!transport::dcqcn_parse(p, "dce_tcp_g=1024", err));
    CHECK(err == "dce_tcp_g: 1024 is outside 0..1023");
    CHECK(!transport::dcqcn_parse(p, "bogus=1", err));
    CHECK(err == "unknown DCQCN parameter 'bogus'");
    CHECK(!transport::dcqcn_parse(p, "rpg_ai_rate", err));
    CHECK(err == "'rpg_ai_rate' is not NAME=VALUE");
    CHECK(!transport::dcqcn_parse(p, "rpg_ai_rate=0x10", err));
    CHECK(err == "'rpg_ai_rate=0x10': the value is not a decimal number");
    CHECK(!transport::dcqcn_parse(p, "rpg_ai_rate=99999999999999999999999", err));
    CHECK(err == "'rpg_ai_rate=99999999999999999999999': the value is too large");
    CHECK(p.rpg_ai_rate == before.rpg_ai_rate);  // a bad value is not applied
    const std::string t = transport::dcqcn_text(DcqcnParams{});
    CHECK(t.find("min_time_between_cnps 50\n") != std::string::npos);
    CHECK(t.find("rpg_byte_reset 32767\n") != std::string::npos);
    CHECK(t.find("dce_tcp_g 1019\n") != std::string::npos);
    CHECK(t.find("np_enable 1\n") == 0);
}
