// The in-memory wire: byte-exact delivery in order at exactly the latency, each seeded fault and
// its counter, determinism per seed, the filter, the size check, pool and rx ring exhaustion, the
// tap, virtual-time stepping with next_delivery_ns, no allocation per frame, misuse.
#include <catch2/catch.hpp>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dpdk_port/mem_wire.hpp"

using namespace hcaemu;
using namespace hcaemu::port;

namespace {

// Heap allocations made by this test program: every unaligned operator new is replaced below,
// the nothrow forms too (Catch2 uses them), so that each delete meets a malloc (ASan checks).
uint64_t g_allocs = 0;

}  // namespace

void* operator new(std::size_t n) {
    ++g_allocs;
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    ++g_allocs;
    return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return ::operator new(n, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

WireConfig small_config() {
    WireConfig c;
    c.latency_ns = 1000;
    c.mtu = 1500;
    c.frame_cap = 1518;
    c.pool_frames = 64;
    c.rx_ring = 64;
    return c;
}

// A frame from end `from` to the other end, `len` bytes, carrying `id` after the Ethernet header
// (after the tag when tagged) and a pattern derived from it.
std::vector<uint8_t> make_frame(uint32_t len, uint32_t id, bool vlan = false, int from = 0) {
    std::vector<uint8_t> f(len);
    const WireConfig c;
    std::memcpy(f.data(), c.mac[1 - from].data(), 6);
    std::memcpy(f.data() + 6, c.mac[from].data(), 6);
    size_t off = 12;
    if (vlan) {
        f[off++] = 0x81;
        f[off++] = 0x00;
        f[off++] = 0x00;
        f[off++] = 0x05;  // VID 5
    }
    f[off++] = 0x08;
    f[off++] = 0x00;
    for (int i = 0; i < 4; ++i) f[off++] = uint8_t(id >> (24 - 8 * i));
    for (size_t i = off; i < len; ++i) f[i] = uint8_t(i * 7 + id * 13);
    return f;
}

uint32_t frame_id(const std::vector<uint8_t>& f, bool vlan = false) {
    const size_t off = vlan ? 18 : 14;
    return uint32_t(f[off]) << 24 | uint32_t(f[off + 1]) << 16 | uint32_t(f[off + 2]) << 8 | f[off + 3];
}

// Allocates on `p`, fills, sends. Returns false when the pool is empty.
bool send(Port& p, const std::vector<uint8_t>& bytes) {
    Frame f;
    if (!p.alloc(f)) return false;
    REQUIRE(f.cap >= bytes.size());
    std::memcpy(f.data, bytes.data(), bytes.size());
    f.len = uint32_t(bytes.size());
    REQUIRE(p.tx_burst(&f, 1) == 1);
    return true;
}

// Everything `p` can receive now, copied out; the buffers go back with free().
std::vector<std::vector<uint8_t>> drain(Port& p, uint16_t burst = 32) {
    std::vector<std::vector<uint8_t>> out;
    Frame fs[64];
    for (;;) {
        const uint16_t k = p.rx_burst(fs, burst);
        for (uint16_t i = 0; i < k; ++i) {
            out.emplace_back(fs[i].data, fs[i].data + fs[i].len);
            p.free(fs[i]);
        }
        if (k < burst) break;
    }
    return out;
}

void check_accounting(const MemWire& w) {
    for (int d = 0; d < 2; ++d) {
        const WireStats& s = w.stats(d);
        INFO("direction " << d);
        CHECK(s.sent + s.duplicated == s.delivered + s.lost + s.too_big + s.rx_full + w.in_flight(d));
    }
}

// Nothing in flight or waiting, and every buffer back in its pool.
void check_all_returned(const MemWire& w) {
    check_accounting(w);
    CHECK(w.idle());
    CHECK(w.next_delivery_ns() == UINT64_MAX);
    CHECK(w.pool_free(0) == w.pool_frames());
    CHECK(w.pool_free(1) == w.pool_frames());
}

struct TapRecord {
    int dir;
    uint32_t len;
    uint64_t t;
    Event ev;
    uint32_t id;
    bool operator==(const TapRecord&) const = default;
};

}  // namespace

TEST_CASE("no faults: byte-exact, in order, at exactly the latency") {
    VirtualClock clk(5000);
    WireConfig cfg = small_config();
    cfg.hand_over = GENERATE(false, true);
    cfg.mac[0] = {0x02, 0xAA, 0, 0, 0, 0x10};
    MemWire w(cfg, clk);
    CHECK(w.end(0).mac() == cfg.mac[0]);
    CHECK(w.end(1).mac() == cfg.mac[1]);
    CHECK(w.end(0).mtu() == 1500);
    CHECK(w.end(1).mtu() == 1500);
    CHECK(w.idle());
    CHECK(w.next_delivery_ns() == UINT64_MAX);

    // Ten frames of varied sizes in one burst, one frame the other way.
    std::vector<std::vector<uint8_t>> sent;
    Frame fs[10];
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < 10; ++i) {
        sent.push_back(make_frame(60 + i * 145, i));
        REQUIRE(w.end(0).alloc(fs[i]));
        CHECK(fs[i].len == 0);
        CHECK(fs[i].cap == 1518);
        std::memcpy(fs[i].data, sent[i].data(), sent[i].size());
        fs[i].len = uint32_t(sent[i].size());
        bytes += sent[i].size();
    }
    CHECK(w.end(0).tx_burst(fs, 10) == 10);
    const auto back = make_frame(100, 77, false, 1);
    REQUIRE(send(w.end(1), back));
    CHECK(w.in_flight(0) == 10);
    CHECK(w.in_flight(1) == 1);
    CHECK(w.pool_free(0) == 64 - 10);  // held by the wire until delivery
    CHECK(w.next_delivery_ns() == 6000);

    clk.advance(999);
    CHECK(drain(w.end(1)).empty());
    CHECK(drain(w.end(0)).empty());
    CHECK(w.stats(0).delivered == 0);
    CHECK(w.next_delivery_ns() == 6000);

    clk.advance(1);  // 6000: exactly the latency
    const auto got = drain(w.end(1), 4);  // in bursts of 4: 4, 4, 2
    REQUIRE(got.size() == 10);
    for (size_t i = 0; i < 10; ++i) CHECK(got[i] == sent[i]);
    const auto got_back = drain(w.end(0));
    REQUIRE(got_back.size() == 1);
    CHECK(got_back[0] == back);

    CHECK(w.stats(0).sent == 10);
    CHECK(w.stats(0).delivered == 10);
    CHECK(w.stats(1).sent == 1);
    CHECK(w.stats(1).delivered == 1);
    const PortStats a = w.end(0).stats(), b = w.end(1).stats();
    CHECK(a.tx_frames == 10);
    CHECK(a.tx_bytes == bytes);
    CHECK(a.rx_frames == 1);
    CHECK(a.rx_bytes == 100);
    CHECK(b.tx_frames == 1);
    CHECK(b.tx_bytes == 100);
    CHECK(b.rx_frames == 10);
    CHECK(b.rx_bytes == bytes);
    CHECK(a.rx_dropped == 0);
    CHECK(b.rx_dropped == 0);
    for (int d = 0; d < 2; ++d) {
        const WireStats& s = w.stats(d);
        CHECK(s.lost + s.duplicated + s.reordered + s.corrupted + s.delayed + s.too_big + s.rx_full == 0);
    }
    check_all_returned(w);
}

TEST_CASE("each frame arrives latency after its own send time") {
    VirtualClock clk(0);
    MemWire w(small_config(), clk);
    REQUIRE(send(w.end(0), make_frame(64, 0)));  // at 0
    clk.set(300);
    REQUIRE(send(w.end(0), make_frame(64, 1)));  // at 300
    clk.set(600);
    REQUIRE(send(w.end(0), make_frame(64, 2)));  // at 600
    CHECK(w.next_delivery_ns() == 1000);
    clk.set(1299);
    auto got = drain(w.end(1));
    REQUIRE(got.size() == 1);
    CHECK(frame_id(got[0]) == 0);
    CHECK(w.next_delivery_ns() == 1300);
    clk.set(1300);
    got = drain(w.end(1));
    REQUIRE(got.size() == 1);
    CHECK(frame_id(got[0]) == 1);
    clk.set(5000);
    got = drain(w.end(1));
    REQUIRE(got.size() == 1);
    CHECK(frame_id(got[0]) == 2);
    check_all_returned(w);
}

TEST_CASE("loss: 1 drops every frame, 0 none, per direction") {
    VirtualClock clk;
    WireConfig cfg = small_config();
    cfg.faults[0].loss = 1.0;  // end 0 -> end 1 only
    MemWire w(cfg, clk);
    std::vector<TapRecord> lost;
    w.set_tap([&](int dir, const uint8_t*, uint32_t len, uint64_t t, Event ev) {
        if (ev == Event::lost) lost.push_back({dir, len, t, ev, 0});
    });
    for (uint32_t i = 0; i < 100; ++i) {
        REQUIRE(send(w.end(0), make_frame(80, i)));
        REQUIRE(send(w.end(1), make_frame(80, i, false, 1)));
        clk.advance(1000);
        CHECK(drain(w.end(1)).empty());
        CHECK(drain(w.end(0)).size() == 1);
    }
    CHECK(w.stats(0).sent == 100);
    CHECK(w.stats(0).lost == 100);
    CHECK(w.stats(0).delivered == 0);
    CHECK(w.stats(1).sent == 100);
    CHECK(w.stats(1).lost == 0);
    CHECK(w.stats(1).delivered == 100);
    CHECK(lost.size() == 100);
    CHECK(lost.front() == TapRecord{0, 80, 0, Event::lost, 0});
    CHECK(lost.back() == TapRecord{0, 80, 99000, Event::lost, 0});
    check_all_returned(w);

    w.set_faults(0, FaultConfig{});  // loss = 0 from now on
    std::vector<std::vector<uint8_t>> got;
    for (uint32_t i = 0; i < 100; ++i) {
        REQUIRE(send(w.end(0), make_frame(80, i)));
        clk.advance(100);
        for (auto& g : drain(w.end(1))) got.push_back(std::move(g));
    }
    clk.advance(1000);
    for (auto& g : drain(w.end(1))) got.push_back(std::move(g));
    REQUIRE(got.size() == 100);
    for (uint32_t i = 0; i < 100; ++i) CHECK(frame_id(got[i]) == i);
    CHECK(w.stats(0).lost == 100);
    check_all_returned(w);
}

TEST_CASE("loss 0.2 over 10000 frames lies in 1800..2200, the same count on every run") {
    auto run = [](uint64_t seed) {
        VirtualClock clk;
        WireConfig cfg = small_config();
        cfg.seed = seed;
        cfg.faults[0].loss = 0.2;
        MemWire w(cfg, clk);
        uint64_t received = 0;
        for (uint32_t i = 0; i < 10000; ++i) {
            REQUIRE(send(w.end(0), make_frame(60, i)));
            clk.advance(1000);
            received += drain(w.end(1)).size();
        }
        CHECK(w.stats(0).sent == 10000);
        CHECK(w.stats(0).lost + received == 10000);
        CHECK(w.stats(0).delivered == received);
        check_all_returned(w);
        return w.stats(0).lost;
    };
    const uint64_t lost = run(1);
    INFO("lost " << lost);
    CHECK(lost >= 1800);  // mean 2000, sd 40: the band is 5 sd each side
    CHECK(lost <= 2200);
    CHECK(run(1) == lost);
    const uint64_t lost2 = run(2);
    CHECK(lost2 >= 1800);
    CHECK(lost2 <= 2200);
}

namespace {

// Every fault at once, both directions, traffic both ways: the tap's record of everything.
std::vector<TapRecord> chaos_run(uint64_t seed, WireStats* s0 = nullptr) {
    VirtualClock clk;
    WireConfig cfg = small_config();
    cfg.seed = seed;
    FaultConfig f;
    f.loss = 0.1;
    f.duplicate = 0.1;
    f.reorder = 0.1;
    f.reorder_ns = 3000;
    f.corrupt = 0.1;
    f.delay = 0.1;
    f.delay_ns = 1500;
    cfg.faults[0] = cfg.faults[1] = f;
    MemWire w(cfg, clk);
    std::vector<TapRecord> rec;
    w.set_tap([&](int dir, const uint8_t* d, uint32_t len, uint64_t t, Event ev) {
        uint32_t h = 2166136261u;  // FNV-1a of the bytes: tells corrupted copies apart
        for (uint32_t i = 0; i < len; ++i) h = (h ^ d[i]) * 16777619u;
        rec.push_back({dir, len, t, ev, h});
    });
    for (uint32_t i = 0; i < 500; ++i) {
        REQUIRE(send(w.end(0), make_frame(60 + i % 200, i)));
        REQUIRE(send(w.end(1), make_frame(60 + i % 100, i, false, 1)));
        clk.advance(200);
        drain(w.end(0));
        drain(w.end(1));
    }
    clk.advance(10000);
    drain(w.end(0));
    drain(w.end(1));
    check_all_returned(w);
    if (s0) *s0 = w.stats(0);
    return rec;
}

}  // namespace

TEST_CASE("the same seed gives the identical sequence; another seed differs") {
    WireStats s;
    const auto a = chaos_run(7, &s);
    const auto b = chaos_run(7);
    const auto c = chaos_run(8);
    CHECK(a.size() > 2000);
    CHECK(a == b);
    CHECK(a != c);
    // Every fault fired, about 10% of 500 frames each.
    for (uint64_t n : {s.lost, s.duplicated, s.reordered, s.corrupted, s.delayed}) {
        CHECK(n >= 25);
        CHECK(n <= 80);
    }
}

TEST_CASE("faults set after clean frames: frame seq meets the fate it meets with faults from the start") {
    // A clean direction skips its draws (owed); setting faults makes them up first. Frames
    // 300..999 lost with loss 0.3 set before frame 300 are those lost with it set from frame 0.
    auto lost_seqs = [](bool from_start) {
        VirtualClock clk;
        WireConfig cfg = small_config();
        cfg.seed = 11;
        FaultConfig f;
        f.loss = 0.3;
        if (from_start) cfg.faults[0] = f;
        MemWire w(cfg, clk);
        std::vector<uint32_t> lost;
        uint64_t before = 0;
        for (uint32_t i = 0; i < 1000; ++i) {
            if (i == 300 && !from_start) w.set_faults(0, f);
            REQUIRE(send(w.end(0), make_frame(60, i)));
            if (w.stats(0).lost != before) lost.push_back(i);
            before = w.stats(0).lost;
            clk.advance(1000);
            drain(w.end(1));
        }
        check_all_returned(w);
        return lost;
    };
    const auto all = lost_seqs(true), late = lost_seqs(false);
    std::vector<uint32_t> tail;
    for (uint32_t i : all)
        if (i >= 300) tail.push_back(i);
    CHECK(tail.size() > 150);  // about 210
    CHECK(late == tail);
}

TEST_CASE("reorder: a held-back frame is overtaken by later ones") {
    VirtualClock clk;
    MemWire w(small_config(), clk);
    FaultConfig f;
    f.reorder = 1.0;
    f.reorder_ns = 500;
    w.set_faults(0, f);
    REQUIRE(send(w.end(0), make_frame(64, 0)));  // at 0, held back to 1500
    w.set_faults(0, FaultConfig{});
    clk.set(100);
    REQUIRE(send(w.end(0), make_frame(64, 1)));  // 1100
    clk.set(200);
    REQUIRE(send(w.end(0), make_frame(64, 2)));  // 1200
    CHECK(w.stats(0).reordered == 1);
    CHECK(w.next_delivery_ns() == 1100);
    clk.set(1499);
    auto got = drain(w.end(1));
    REQUIRE(got.size() == 2);
    CHECK(frame_id(got[0]) == 1);
    CHECK(frame_id(got[1]) == 2);
    CHECK(w.next_delivery_ns() == 1500);
    clk.set(1500);
    got = drain(w.end(1));
    REQUIRE(got.size() == 1);
    CHECK(frame_id(got[0]) == 0);
    check_all_returned(w);
}

TEST_CASE("random reorder at p = 0.5: the counter matches the frames overtaken") {
    VirtualClock clk;
    WireConfig cfg = small_config();
    cfg.faults[0].reorder = 0.5;
    cfg.faults[0].reorder_ns = 250;  // overtaken by the next two frames, sent 100 ns apart
    MemWire w(cfg, clk);
    std::vector<uint64_t> sent_at;
    std::vector<std::pair<uint64_t, uint32_t>> arrivals;
    w.set_tap([&](int, const uint8_t* d, uint32_t len, uint64_t t, Event ev) {
        if (ev == Event::delivered) arrivals.emplace_back(t, frame_id(std::vector<uint8_t>(d, d + len)));
    });
    for (uint32_t i = 0; i < 200; ++i) {
        sent_at.push_back(clk.now_ns());
        REQUIRE(send(w.end(0), make_frame(64, i)));
        clk.advance(100);
        drain(w.end(1));
    }
    clk.advance(2000);
    drain(w.end(1));
    REQUIRE(arrivals.size() == 200);
    uint64_t held = 0, inversions = 0;
    for (size_t k = 0; k < arrivals.size(); ++k) {
        const auto [t, id] = arrivals[k];
        const uint64_t extra = t - sent_at[id] - 1000;
        CHECK((extra == 0 || extra == 250));
        held += extra == 250;
        if (k > 0) inversions += id < arrivals[k - 1].second;
        if (k > 0) CHECK(t >= arrivals[k - 1].first);  // delivery-time order
    }
    CHECK(held == w.stats(0).reordered);
    CHECK(held >= 70);
    CHECK(held <= 130);
    CHECK(inversions > 0);
    check_all_returned(w);
}

TEST_CASE("delivery order is (arrival time, send order) with thousands in flight, delays and reorders mixed") {
    // Frames in order go through the wire's fifo, the others through its heap (mem_wire.cpp): the
    // merged sequence must be the one order, with each frame at exactly its own time.
    VirtualClock clk;
    WireConfig cfg = small_config();
    cfg.pool_frames = 4096;
    cfg.rx_ring = 4096;
    cfg.faults[0].delay = 0.2;
    cfg.faults[0].delay_ns = 5000;
    cfg.faults[0].reorder = 0.3;
    cfg.faults[0].reorder_ns = 700;
    cfg.hand_over = GENERATE(false, true);
    MemWire w(cfg, clk);
    std::vector<uint64_t> sent_at;
    std::vector<std::pair<uint64_t, uint32_t>> arrivals;
    w.set_tap([&](int, const uint8_t* d, uint32_t len, uint64_t t, Event ev) {
        if (ev == Event::delivered) arrivals.emplace_back(t, frame_id(std::vector<uint8_t>(d, d + len)));
    });
    for (uint32_t i = 0; i < 3000; ++i) {
        sent_at.push_back(clk.now_ns());
        REQUIRE(send(w.end(0), make_frame(64, i)));
        clk.advance(i % 7 == 0 ? 0 : 37);  // some sent at the same instant: ties
        if (i % 50 == 49) drain(w.end(1));
    }
    clk.advance(10000);
    drain(w.end(1));
    REQUIRE(arrivals.size() == 3000);
    std::set<uint32_t> ids;
    uint64_t bad_time = 0, bad_order = 0, delayed = 0, held = 0;
    for (size_t k = 0; k < arrivals.size(); ++k) {
        const auto [t, id] = arrivals[k];
        ids.insert(id);
        const uint64_t extra = t - sent_at[id] - 1000;
        bad_time += !(extra == 0 || extra == 700 || extra == 5000 || extra == 5700);
        delayed += extra >= 5000;
        held += extra == 700 || extra == 5700;
        if (k > 0) bad_order += arrivals[k - 1] >= arrivals[k];  // (t, send order) strictly rising
    }
    CHECK(ids.size() == 3000);
    CHECK(bad_time == 0);
    CHECK(bad_order == 0);
    CHECK(delayed == w.stats(0).delayed);
    CHECK(held == w.stats(0).reordered);
    CHECK(delayed > 400);
    CHECK(held > 600);
    check_all_returned(w);
}

TEST_CASE("duplicate: two identical copies, back to back") {
    VirtualClock clk;
    WireConfig cfg = small_config();
    cfg.hand_over = GENERATE(false, true);
    cfg.faults[0].duplicate = 1.0;
    MemWire w(cfg, clk);
    const auto f = make_frame(300, 42);
    REQUIRE(send(w.end(0), f));
    CHECK(w.in_flight(0) == 2);
    CHECK(w.pool_free(0) == 63);  // one buffer for both copies
    clk.advance(1000);
    const auto got = drain(w.end(1));
    REQUIRE(got.size() == 2);
    CHECK(got[0] == f);
    CHECK(got[1] == f);
    CHECK(w.stats(0).sent == 1);
    CHECK(w.stats(0).duplicated == 1);
    CHECK(w.stats(0).delivered == 2);
    CHECK(w.end(1).stats().rx_frames == 2);
    check_all_returned(w);

    // The filter duplicates exactly seq 3: frame id 2, the third of this run (seq counts on).
    w.set_faults(0, FaultConfig{});
    w.set_filter(0, [](const uint8_t*, uint32_t, uint64_t seq) { return seq == 3 ? Action::duplicate : Action::pass; });
    for (uint32_t i = 0; i < 4; ++i) REQUIRE(send(w.end(0), make_frame(64, i)));
    clk.advance(1000);
    std::vector<uint32_t> ids;
    for (const auto& g : drain(w.end(1))) ids.push_back(frame_id(g));
    CHECK(ids == std::vector<uint32_t>{0, 1, 2, 2, 3});
    CHECK(w.stats(0).duplicated == 2);
    check_all_returned(w);
}

TEST_CASE("corrupt flips exactly one bit, anywhere in the frame") {
    VirtualClock clk;
    WireConfig cfg = small_config();
    cfg.hand_over = GENERATE(false, true);
    cfg.faults[0].corrupt = 1.0;
    MemWire w(cfg, clk);
    std::set<uint64_t> bits;
    bool in_header = false, in_last_byte = false;
    for (uint32_t i = 0; i < 300; ++i) {
        const auto f = make_frame(60 + i % 5, i);
        REQUIRE(send(w.end(0), f));
        clk.advance(1000);
        const auto got = drain(w.end(1));
        REQUIRE(got.size() == 1);
        REQUIRE(got[0].size() == f.size());
        int flipped = 0;
        for (size_t k = 0; k < f.size(); ++k) {
            const int n = std::popcount(unsigned(f[k] ^ got[0][k]));
            flipped += n;
            if (n) {
                bits.insert(k * 8 + std::countr_zero(unsigned(f[k] ^ got[0][k])));
                in_header |= k < pkt::kEthLen;
                in_last_byte |= k == f.size() - 1;
            }
        }
        CHECK(flipped == 1);
    }
    CHECK(w.stats(0).corrupted == 300);
    CHECK(w.stats(0).delivered == 300);  // corrupt is not a drop
    CHECK(w.stats(0).lost == 0);
    CHECK(bits.size() > 150);  // of about 500 bit positions
    CHECK(in_header);
    CHECK(in_last_byte);
    check_all_returned(w);

    // The filter corrupts exactly seq 301, and nothing else.
    w.set_faults(0, FaultConfig{});
    w.set_filter(0, [](const uint8_t*, uint32_t, uint64_t seq) { return seq == 301 ? Action::corrupt : Action::pass; });
    std::vector<std::vector<uint8_t>> sent;
    for (uint32_t i = 0; i < 3; ++i) {
        sent.push_back(make_frame(128, i));
        REQUIRE(send(w.end(0), sent.back()));
    }
    clk.advance(1000);
    const auto got = drain(w.end(1));
    REQUIRE(got.size() == 3);
    CHECK(got[0] == sent[0]);
    CHECK(got[1] != sent[1]);
    CHECK(got[2] == sent[2]);
    CHECK(w.stats(0).corrupted == 301);
    check_all_returned(w);
}

TEST_CASE("delay adds delay_ns; with reorder both add") {
    VirtualClock clk;
    WireConfig cfg = small_config();
    cfg.faults[1].delay = 1.0;
    cfg.faults[1].delay_ns = 700;
    MemWire w(cfg, clk);
    std::vector<uint64_t> times;
    w.set_tap([&](int, const uint8_t*, uint32_t, uint64_t t, Event ev) {
        if (ev == Event::delivered) times.push_back(t);
    });
    REQUIRE(send(w.end(1), make_frame(64, 0, false, 1)));
    CHECK(w.next_delivery_ns() == 1700);
    clk.set(1699);
    CHECK(drain(w.end(0)).empty());
    clk.set(1700);
    CHECK(drain(w.end(0)).size() == 1);
    CHECK(w.stats(1).delayed == 1);
    CHECK(w.stats(0).delayed == 0);

    FaultConfig f;
    f.delay = 1.0;
    f.delay_ns = 700;
    f.reorder = 1.0;
    f.reorder_ns = 50;
    w.set_faults(f);
    REQUIRE(send(w.end(0), make_frame(64, 1)));  // at 1700
    clk.set(3450);
    CHECK(drain(w.end(1)).size() == 1);
    CHECK(times == std::vector<uint64_t>{1700, 3450});
    CHECK(w.stats(0).delayed == 1);
    CHECK(w.stats(0).reordered == 1);
    check_all_returned(w);
}

TEST_CASE("the filter drops exactly the chosen seq, before the random faults") {
    VirtualClock clk;
    MemWire w(small_config(), clk);
    std::vector<uint64_t> seen;
    w.set_filter(0, [&](const uint8_t* d, uint32_t len, uint64_t seq) {
        CHECK(frame_id(std::vector<uint8_t>(d, d + len)) == seq);  // the bytes as sent
        seen.push_back(seq);
        return seq == 3 ? Action::drop : Action::pass;
    });
    for (uint32_t i = 0; i < 10; ++i) {
        REQUIRE(send(w.end(0), make_frame(64, i)));
        REQUIRE(send(w.end(1), make_frame(64, i, false, 1)));  // no filter that way
    }
    clk.advance(1000);
    std::vector<uint32_t> ids;
    for (const auto& g : drain(w.end(1))) ids.push_back(frame_id(g));
    CHECK(ids == std::vector<uint32_t>{0, 1, 2, 4, 5, 6, 7, 8, 9});
    CHECK(drain(w.end(0)).size() == 10);
    CHECK(seen == std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    CHECK(w.stats(0).lost == 1);
    CHECK(w.stats(1).lost == 0);

    // With random loss = 1 the filter still sees every frame first.
    w.set_faults(0, FaultConfig{1.0});
    for (uint32_t i = 10; i < 13; ++i) REQUIRE(send(w.end(0), make_frame(64, i)));
    CHECK(seen.size() == 13);
    CHECK(seen.back() == 12);
    CHECK(w.stats(0).lost == 4);
    w.set_filter(0, nullptr);
    w.set_faults(0, FaultConfig{});
    REQUIRE(send(w.end(0), make_frame(64, 13)));
    CHECK(seen.size() == 13);
    clk.advance(1000);
    CHECK(drain(w.end(1)).size() == 1);
    check_all_returned(w);
}

TEST_CASE("frames above mtu + 14 (+ 4 tagged) are dropped and counted") {
    VirtualClock clk;
    WireConfig cfg = small_config();
    cfg.frame_cap = 2048;  // room for frames the far end will refuse
    MemWire w(cfg, clk);
    std::vector<TapRecord> drops;
    w.set_tap([&](int dir, const uint8_t*, uint32_t len, uint64_t t, Event ev) {
        if (is_drop(ev)) drops.push_back({dir, len, t, ev, 0});
    });
    REQUIRE(send(w.end(0), make_frame(1514, 0)));
    REQUIRE(send(w.end(0), make_frame(1515, 1)));
    REQUIRE(send(w.end(0), make_frame(1518, 2, true)));
    REQUIRE(send(w.end(0), make_frame(1519, 3, true)));
    REQUIRE(send(w.end(1), make_frame(1518, 4, false, 1)));  // 1518 untagged: too big
    clk.advance(1000);
    const auto got = drain(w.end(1));
    REQUIRE(got.size() == 2);
    CHECK(frame_id(got[0]) == 0);
    CHECK(frame_id(got[1], true) == 2);
    CHECK(drain(w.end(0)).empty());
    CHECK(w.stats(0).too_big == 2);
    CHECK(w.stats(1).too_big == 1);
    CHECK(w.stats(0).lost == 0);
    CHECK(drops == std::vector<TapRecord>{{0, 1515, 0, Event::too_big, 0}, {0, 1519, 0, Event::too_big, 0},
                                          {1, 1518, 0, Event::too_big, 0}});
    check_all_returned(w);

    WireConfig jumbo = small_config();
    jumbo.mtu = 9000;
    jumbo.frame_cap = 9100;
    MemWire j(jumbo, clk);
    CHECK(j.end(0).mtu() == 9000);
    REQUIRE(send(j.end(0), make_frame(9014, 0)));
    REQUIRE(send(j.end(0), make_frame(9015, 1)));
    clk.advance(1000);
    CHECK(drain(j.end(1)).size() == 1);
    CHECK(j.stats(0).too_big == 1);
    check_all_returned(j);
}

TEST_CASE("an empty pool refuses alloc and recovers after frees and deliveries") {
    VirtualClock clk;
    WireConfig cfg = small_config();
    cfg.pool_frames = 8;
    cfg.rx_ring = 8;
    MemWire w(cfg, clk);
    Frame fs[9];
    for (int i = 0; i < 8; ++i) REQUIRE(w.end(0).alloc(fs[i]));
    std::set<uint32_t> slots;
    for (int i = 0; i < 8; ++i) slots.insert(fs[i].slot);
    CHECK(slots.size() == 8);
    CHECK(w.pool_free(0) == 0);
    CHECK_FALSE(w.end(0).alloc(fs[8]));
    CHECK_FALSE(w.end(0).alloc(fs[8]));
    CHECK(w.end(0).stats().tx_no_buffer == 2);
    CHECK(w.pool_free(1) == 8);  // the other end's pool is its own
    w.end(0).free(fs[7]);
    REQUIRE(w.end(0).alloc(fs[7]));

    // In flight, the buffers stay the wire's: still no buffer until they arrive.
    for (int i = 0; i < 8; ++i) {
        const auto f = make_frame(64, uint32_t(i));
        std::memcpy(fs[i].data, f.data(), f.size());
        fs[i].len = 64;
    }
    CHECK(w.end(0).tx_burst(fs, 8) == 8);
    CHECK_FALSE(w.end(0).alloc(fs[8]));
    CHECK(w.end(0).stats().tx_no_buffer == 3);
    clk.advance(1000);
    Frame rx[8];
    REQUIRE(w.end(1).rx_burst(rx, 8) == 8);
    CHECK(w.pool_free(0) == 8);  // back to the sender at arrival
    CHECK(w.pool_free(1) == 0);  // the receiver's buffers are the user's until free()
    CHECK_FALSE(w.end(1).alloc(fs[8]));
    CHECK(w.end(1).stats().tx_no_buffer == 1);
    for (auto& f : rx) w.end(1).free(f);
    REQUIRE(w.end(0).alloc(fs[8]));
    w.end(0).free(fs[8]);
    check_all_returned(w);
}

TEST_CASE("a full rx ring or an empty receiver pool drops and counts") {
    VirtualClock clk;
    WireConfig cfg = small_config();
    cfg.pool_frames = 32;
    cfg.rx_ring = 4;
    MemWire w(cfg, clk);
    std::vector<TapRecord> rec;
    w.set_tap([&](int dir, const uint8_t* d, uint32_t len, uint64_t t, Event ev) {
        if (ev != Event::sent) rec.push_back({dir, len, t, ev, frame_id(std::vector<uint8_t>(d, d + len))});
    });
    for (uint32_t i = 0; i < 10; ++i) REQUIRE(send(w.end(0), make_frame(64, i)));
    clk.advance(5000);
    CHECK(w.next_delivery_ns() == 1000);
    const auto got = drain(w.end(1));
    REQUIRE(got.size() == 4);
    for (uint32_t i = 0; i < 4; ++i) CHECK(frame_id(got[i]) == i);
    CHECK(w.stats(0).delivered == 4);
    CHECK(w.stats(0).rx_full == 6);
    CHECK(w.end(1).stats().rx_dropped == 6);
    REQUIRE(rec.size() == 10);
    for (uint32_t i = 0; i < 10; ++i)
        CHECK(rec[i] == TapRecord{0, 64, 1000, i < 4 ? Event::delivered : Event::rx_full, i});
    check_all_returned(w);

    // The receiver holds every buffer of its pool: arrivals have nowhere to go.
    Frame held[32];
    for (auto& f : held) REQUIRE(w.end(1).alloc(f));
    for (uint32_t i = 0; i < 3; ++i) REQUIRE(send(w.end(0), make_frame(64, i)));
    clk.advance(1000);
    CHECK(drain(w.end(1)).empty());
    CHECK(w.stats(0).rx_full == 9);
    CHECK(w.end(1).stats().rx_dropped == 9);
    for (auto& f : held) w.end(1).free(f);
    REQUIRE(send(w.end(0), make_frame(64, 99)));
    clk.advance(1000);
    const auto after = drain(w.end(1));
    REQUIRE(after.size() == 1);
    CHECK(frame_id(after[0]) == 99);
    check_all_returned(w);
}

TEST_CASE("hand_over: a frame arrives in the sender's buffer, which returns at the receiver's free") {
    VirtualClock clk;
    WireConfig cfg = small_config();
    cfg.hand_over = true;
    cfg.pool_frames = 8;
    MemWire w(cfg, clk);
    std::vector<const uint8_t*> tapped;
    w.set_tap([&](int, const uint8_t* d, uint32_t, uint64_t, Event ev) {
        if (ev == Event::delivered) tapped.push_back(d);
    });
    Frame fs[8];
    std::vector<std::vector<uint8_t>> sent;
    for (uint32_t i = 0; i < 8; ++i) {
        REQUIRE(w.end(0).alloc(fs[i]));
        sent.push_back(make_frame(64 + i, i));
        std::memcpy(fs[i].data, sent[i].data(), sent[i].size());
        fs[i].len = uint32_t(sent[i].size());
    }
    const std::vector<Frame> before(fs, fs + 8);
    REQUIRE(w.end(0).tx_burst(fs, 8) == 8);
    clk.advance(1000);
    Frame rx[8];
    REQUIRE(w.end(1).rx_burst(rx, 8) == 8);
    for (uint32_t i = 0; i < 8; ++i) {
        CHECK(rx[i].data == before[i].data);  // no copy: the very buffer sent
        CHECK(tapped[i] == before[i].data);
        CHECK(rx[i].len == sent[i].size());
        CHECK(std::vector<uint8_t>(rx[i].data, rx[i].data + rx[i].len) == sent[i]);
    }
    CHECK(w.pool_free(0) == 0);  // the sender's buffers, held by the receiver's user
    CHECK(w.pool_free(1) == 8);  // the receiver's pool untouched
    Frame spare;
    CHECK_FALSE(w.end(0).alloc(spare));
    // Misuse of a lent buffer: the receiver may not send it, nor free it twice; the sender may not
    // free it either.
    CHECK_THROWS_AS(w.end(1).tx_burst(&rx[0], 1), std::invalid_argument);
    CHECK_THROWS_AS(w.end(0).free(rx[0]), std::invalid_argument);
    Frame twice = rx[0];
    w.end(1).free(rx[0]);
    CHECK(w.pool_free(0) == 1);
    CHECK_THROWS_AS(w.end(1).free(twice), std::invalid_argument);
    for (uint32_t i = 1; i < 8; ++i) w.end(1).free(rx[i]);
    check_all_returned(w);

    // The receiver holds its whole pool: handed-over frames still arrive (nothing to copy into).
    Frame held[8];
    for (auto& f : held) REQUIRE(w.end(1).alloc(f));
    REQUIRE(send(w.end(0), sent[3]));
    clk.advance(1000);
    const auto got = drain(w.end(1));
    REQUIRE(got.size() == 1);
    CHECK(got[0] == sent[3]);
    CHECK(w.stats(0).rx_full == 0);
    // ... but the first of a duplicated frame's copies needs one of its buffers: dropped.
    w.set_filter(0, [](const uint8_t*, uint32_t, uint64_t) { return Action::duplicate; });
    REQUIRE(send(w.end(0), sent[4]));
    clk.advance(1000);
    const auto dup = drain(w.end(1));
    REQUIRE(dup.size() == 1);
    CHECK(dup[0] == sent[4]);
    CHECK(w.stats(0).rx_full == 1);
    for (auto& f : held) w.end(1).free(f);
    check_all_returned(w);

    // A full rx ring drops a handed-over frame, and its buffer goes back to the sender at once.
    WireConfig small = cfg;
    small.rx_ring = 2;
    MemWire v(small, clk);
    for (uint32_t i = 0; i < 5; ++i) REQUIRE(send(v.end(0), sent[i]));
    clk.advance(1000);
    Frame one;
    REQUIRE(v.end(1).rx_burst(&one, 1) == 1);  // all five arrive: two on the ring, three dropped
    CHECK(std::vector<uint8_t>(one.data, one.data + one.len) == sent[0]);
    CHECK(v.stats(0).rx_full == 3);
    CHECK(v.pool_free(0) == 6);  // the dropped three returned; one lent, one on the ring
    v.end(1).free(one);
    const auto rest = drain(v.end(1));
    REQUIRE(rest.size() == 1);
    CHECK(rest[0] == sent[1]);
    check_all_returned(v);
}

TEST_CASE("the tap sees each frame sent, dropped and delivered, with its time") {
    VirtualClock clk(100);
    MemWire w(small_config(), clk);
    std::vector<TapRecord> rec;
    w.set_tap([&](int dir, const uint8_t* d, uint32_t len, uint64_t t, Event ev) {
        rec.push_back({dir, len, t, ev, frame_id(std::vector<uint8_t>(d, d + len))});
    });
    w.set_filter(0, [](const uint8_t*, uint32_t, uint64_t seq) { return seq == 1 ? Action::drop : Action::pass; });
    REQUIRE(send(w.end(0), make_frame(64, 0)));
    REQUIRE(send(w.end(0), make_frame(65, 1)));
    REQUIRE(send(w.end(0), make_frame(1515, 2)));
    clk.set(150);
    REQUIRE(send(w.end(1), make_frame(66, 3, false, 1)));
    clk.set(2000);
    drain(w.end(1));
    drain(w.end(0));
    const std::vector<TapRecord> want{
        {0, 64, 100, Event::sent, 0},      {0, 65, 100, Event::sent, 1},     {0, 65, 100, Event::lost, 1},
        {0, 1515, 100, Event::sent, 2},    {0, 1515, 100, Event::too_big, 2}, {1, 66, 150, Event::sent, 3},
        {0, 64, 1100, Event::delivered, 0}, {1, 66, 1150, Event::delivered, 3},
    };
    CHECK(rec == want);
    CHECK(std::string(event_name(Event::rx_full)) == "rx_full");
    CHECK(is_drop(Event::lost));
    CHECK_FALSE(is_drop(Event::delivered));
    check_all_returned(w);
}

TEST_CASE("virtual time steps straight to next_delivery_ns: a ping-pong of 10 round trips") {
    VirtualClock clk;
    WireConfig cfg = small_config();
    cfg.latency_ns = 2500;
    MemWire w(cfg, clk);
    REQUIRE(send(w.end(0), make_frame(64, 0)));
    uint32_t steps = 0, last = 0;
    for (;;) {
        const uint64_t t = w.next_delivery_ns();
        if (t == UINT64_MAX) break;
        REQUIRE(t > clk.now_ns());  // whatever was due has been received: no spinning
        REQUIRE(++steps <= 20);
        clk.set(t);
        for (int e = 0; e < 2; ++e)
            for (const auto& g : drain(w.end(e))) {
                last = frame_id(g);
                if (last < 19) REQUIRE(send(w.end(e), make_frame(64, last + 1, false, e)));  // the reply
            }
    }
    CHECK(steps == 20);
    CHECK(last == 19);
    CHECK(clk.now_ns() == 20 * 2500);
    CHECK(w.stats(0).delivered == 10);
    CHECK(w.stats(1).delivered == 10);
    check_all_returned(w);
}

TEST_CASE("no heap allocation per frame, whatever the faults") {
    VirtualClock clk;
    WireConfig cfg = small_config();
    cfg.hand_over = GENERATE(false, true);
    FaultConfig f;
    f.loss = 0.1;
    f.duplicate = 0.2;
    f.reorder = 0.2;
    f.reorder_ns = 800;
    f.corrupt = 0.2;
    f.delay = 0.2;
    f.delay_ns = 300;
    cfg.faults[0] = cfg.faults[1] = f;
    MemWire w(cfg, clk);
    uint64_t events[5] = {};
    w.set_tap([&events](int, const uint8_t*, uint32_t, uint64_t, Event ev) { ++events[int(ev)]; });
    w.set_filter(1, [](const uint8_t*, uint32_t, uint64_t seq) { return seq % 7 == 0 ? Action::duplicate : Action::pass; });
    const auto bytes = make_frame(1000, 1);

    const uint64_t before = g_allocs;
    uint64_t received = 0;
    bool ok = true;
    for (int i = 0; i < 2000; ++i) {
        for (int e = 0; e < 2; ++e) {
            Frame fr[4];
            uint16_t k = 0;
            while (k < 4 && w.end(e).alloc(fr[k])) {
                std::memcpy(fr[k].data, bytes.data(), bytes.size());
                fr[k].len = uint32_t(bytes.size()) - uint32_t(i % 3);
                ++k;
            }
            ok &= w.end(e).tx_burst(fr, k) == k;
        }
        clk.advance(500);
        for (int e = 0; e < 2; ++e) {
            Frame rx[16];
            const uint16_t k = w.end(e).rx_burst(rx, 16);
            for (uint16_t j = 0; j < k; ++j) w.end(e).free(rx[j]);
            received += k;
        }
        (void)w.next_delivery_ns();
    }
    const uint64_t allocs = g_allocs - before;
    CHECK(allocs == 0);
    CHECK(ok);
    CHECK(received > 10000);
    CHECK(events[int(Event::sent)] == w.stats(0).sent + w.stats(1).sent);
    clk.advance(100000);
    drain(w.end(0));
    drain(w.end(1));
    check_all_returned(w);
}

TEST_CASE("misuse is refused: foreign, freed or doubled buffers, bad configurations") {
    VirtualClock clk;
    MemWire w(small_config(), clk);
    Frame a, b;
    REQUIRE(w.end(0).alloc(a));
    REQUIRE(w.end(1).alloc(b));
    CHECK_THROWS_AS(w.end(0).free(b), std::invalid_argument);     // the other end's buffer
    CHECK_THROWS_AS(w.end(1).tx_burst(&a, 1), std::invalid_argument);
    Frame pair[2] = {a, a};
    pair[0].len = pair[1].len = 64;
    CHECK_THROWS_AS(w.end(0).tx_burst(pair, 2), std::invalid_argument);  // one buffer twice
    Frame too_long = a;
    too_long.len = a.cap + 1;
    CHECK_THROWS_AS(w.end(0).tx_burst(&too_long, 1), std::invalid_argument);
    CHECK(w.stats(0).sent == 0);  // nothing taken
    Frame copy = a;
    w.end(0).free(a);
    CHECK_THROWS_AS(w.end(0).free(copy), std::invalid_argument);  // twice
    CHECK_THROWS_AS(w.end(0).tx_burst(&copy, 1), std::invalid_argument);  // after free
    w.end(1).free(b);
    Frame c;
    REQUIRE(w.end(0).alloc(c));
    c.len = 64;
    Frame sent = c;
    REQUIRE(w.end(0).tx_burst(&c, 1) == 1);
    CHECK_THROWS_AS(w.end(0).free(sent), std::invalid_argument);  // the wire's now
    clk.advance(1000);
    drain(w.end(1));
    check_all_returned(w);

    CHECK_THROWS_AS(w.end(2), std::out_of_range);
    CHECK_THROWS_AS(w.end(-1), std::out_of_range);
    CHECK_THROWS_AS(w.set_faults(2, FaultConfig{}), std::out_of_range);
    CHECK_THROWS_AS(w.set_faults(FaultConfig{1.5}), std::invalid_argument);
    CHECK_THROWS_AS(w.set_faults(0, FaultConfig{0, -0.1}), std::invalid_argument);

    WireConfig bad = small_config();
    bad.frame_cap = 1517;  // mtu 1500 + 18 does not fit
    CHECK_THROWS_AS(MemWire(bad, clk), std::invalid_argument);
    bad = small_config();
    bad.pool_frames = 0;
    CHECK_THROWS_AS(MemWire(bad, clk), std::invalid_argument);
    bad = small_config();
    bad.rx_ring = 0;
    CHECK_THROWS_AS(MemWire(bad, clk), std::invalid_argument);
    bad = small_config();
    bad.faults[1].corrupt = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_AS(MemWire(bad, clk), std::invalid_argument);
    WireConfig def;  // the defaults are valid: jumbo-capable buffers
    CHECK(def.frame_cap == 9216 + 18);
    CHECK_NOTHROW(MemWire(def, clk));
}
