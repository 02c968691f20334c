// PSN arithmetic and the transport's time constants (IBTA 9.7); the timer wheel.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dpdk_port/clock.hpp"
#include "transport/psn.hpp"
#include "transport/timer_wheel.hpp"

using namespace hcaemu::transport;
using hcaemu::port::VirtualClock;

namespace {

// Independent model of the responder's check: how far psn lies behind epsn, counted backwards.
PsnClass reference_class(uint32_t psn, uint32_t epsn) {
    const uint64_t behind = (uint64_t(epsn) + (1u << 24) - psn) % (1u << 24);
    if (behind == 0) return PsnClass::expected;
    return behind <= (1u << 23) ? PsnClass::duplicate : PsnClass::out_of_sequence;
}

// "ms.hh" (the IBTA table's notation, as Linux names its IB_RNR_TIMER_* codes) to ns.
uint64_t ms_text_to_ns(const std::string& s) {
    const size_t dot = s.find('.');
    return std::stoull(s.substr(0, dot)) * 1000000 + std::stoull(s.substr(dot + 1)) * 10000;
}

// Timers in an array, each firing into a log of (index, wheel time at the expire() call).
struct Fleet {
    explicit Fleet(size_t n) : timers(new Timer[n]), size(n) {
        for (size_t i = 0; i < n; ++i) {
            timers[i].fn = &Fleet::on_fire;
            timers[i].ctx = this;
        }
    }
    static void on_fire(Timer* t, void* ctx) {
        auto* f = static_cast<Fleet*>(ctx);
        f->log.push_back({size_t(t - f->timers.get()), f->now});
    }
    Timer& operator[](size_t i) { return timers[i]; }
    std::vector<size_t> fired() const {
        std::vector<size_t> v;
        for (auto& e : log) v.push_back(e.first);
        return v;
    }
    size_t expire(TimerWheel& w, uint64_t now_ns) {
        now = now_ns;
        return w.expire(now_ns);
    }

    std::unique_ptr<Timer[]> timers;
    size_t size;
    uint64_t now = 0;
    std::vector<std::pair<size_t, uint64_t>> log;
};

}  // namespace

static_assert(psn_add(0xFFFFFF, 1) == 0);
static_assert(psn_diff(0, 0xFFFFFF) == 1);
static_assert(classify_psn(5, 5) == PsnClass::expected);
static_assert(rnr_timer_ns(0) == 655360000);
static_assert(ack_timeout_ns(14) == 67108864);

TEST_CASE("PSN add, sub and next wrap at 2^24", "[psn]") {
    CHECK(psn_add(0xFFFFFF, 1) == 0);
    CHECK(psn_add(0xFFFFFE, 3) == 1);
    CHECK(psn_add(0, 0xFFFFFF) == 0xFFFFFF);
    CHECK(psn_add(5, 1u << 24) == 5);
    CHECK(psn_add(0x7FFFFF, 0x800000) == 0xFFFFFF);
    CHECK(psn_sub(0, 1) == 0xFFFFFF);
    CHECK(psn_sub(1, 3) == 0xFFFFFE);
    CHECK(psn_sub(0x123456, 0x123456) == 0);
    CHECK(psn_next(0xFFFFFF) == 0);
    CHECK(psn_next(0xFFFFFE) == 0xFFFFFF);
    CHECK(psn_next(0) == 1);
}

TEST_CASE("PSN distance is signed across the wrap, in [-2^23, 2^23 - 1]", "[psn]") {
    CHECK(psn_diff(0, 0xFFFFFF) == 1);
    CHECK(psn_diff(0xFFFFFF, 0) == -1);
    CHECK(psn_diff(2, 0xFFFFFE) == 4);
    CHECK(psn_diff(0xFFFFFE, 2) == -4);
    CHECK(psn_diff(0x7FFFFF, 0) == 0x7FFFFF);    // the largest forward distance
    CHECK(psn_diff(0x800000, 0) == -0x800000);   // exactly half the circle counts as behind
    CHECK(psn_diff(0, 0x800000) == -0x800000);
    CHECK(psn_diff(0x123456, 0x123456) == 0);
    CHECK(psn_before(0xFFFFFF, 0));
    CHECK(psn_after(0, 0xFFFFFF));
    CHECK_FALSE(psn_before(5, 5));
    CHECK_FALSE(psn_after(5, 5));
    CHECK(psn_after(0x7FFFFF, 0));
    CHECK(psn_before(0x800000, 0));

    std::mt19937 rng(1);
    for (int i = 0; i < 100000; ++i) {
        const uint32_t a = rng() & kPsnMask, n = rng() & kPsnMask;
        const int32_t d = psn_diff(psn_add(a, n), a);
        REQUIRE(d >= -(1 << 23));
        REQUIRE(d < (1 << 23));
        REQUIRE(psn_add(a, uint32_t(d)) == psn_add(a, n));
        REQUIRE(psn_sub(psn_add(a, n), n) == a);
    }
}

TEST_CASE("packets a message takes at each path MTU (a shift: MTUs are powers of two)", "[psn]") {
    for (uint32_t mtu : {256u, 512u, 1024u, 2048u, 4096u}) {
        CHECK(mtu_packets(0, mtu) == 0);
        CHECK(mtu_packets(1, mtu) == 1);
        CHECK(mtu_packets(mtu, mtu) == 1);
        CHECK(mtu_packets(mtu + 1, mtu) == 2);
        CHECK(mtu_packets(0x80000000ull, mtu) == 0x80000000ull / mtu);  // max_msg_sz, no wrap
        CHECK(mtu_packets(0x80000001ull, mtu) == 0x80000000ull / mtu + 1);
        CHECK(msg_packets(0, mtu) == 1);  // a zero-length message still takes one packet (IBTA 9.7.1)
        CHECK(msg_packets(3 * mtu - 1, mtu) == 3);
    }
}

TEST_CASE("PSN window", "[psn]") {
    CHECK(psn_in_window(0xFFFFFE, 0xFFFFFE, 4));
    CHECK(psn_in_window(0xFFFFFF, 0xFFFFFE, 4));
    CHECK(psn_in_window(0, 0xFFFFFE, 4));
    CHECK(psn_in_window(1, 0xFFFFFE, 4));
    CHECK_FALSE(psn_in_window(2, 0xFFFFFE, 4));
    CHECK_FALSE(psn_in_window(0xFFFFFD, 0xFFFFFE, 4));
    CHECK_FALSE(psn_in_window(7, 7, 0));
    CHECK(psn_in_window(6, 7, 1u << 24));
}

TEST_CASE("responder PSN classification at the 2^23 boundary", "[psn]") {
    for (uint32_t epsn : {0u, 0x10u, 0x7FFFFFu, 0x800000u, 0xFFFFFFu, 0x123456u}) {
        INFO("ePSN " << epsn);
        CHECK(classify_psn(epsn, epsn) == PsnClass::expected);
        CHECK(classify_psn(psn_sub(epsn, 1), epsn) == PsnClass::duplicate);
        // The oldest duplicate, then the first PSN past it.
        CHECK(classify_psn(psn_sub(epsn, 1u << 23), epsn) == PsnClass::duplicate);
        CHECK(classify_psn(psn_sub(epsn, (1u << 23) + 1), epsn) == PsnClass::out_of_sequence);
        CHECK(classify_psn(psn_add(epsn, (1u << 23) - 1), epsn) == PsnClass::out_of_sequence);
        CHECK(classify_psn(psn_add(epsn, 1), epsn) == PsnClass::out_of_sequence);
    }
    // Across the wrap, spelled out.
    CHECK(classify_psn(0xFFFFFF, 0) == PsnClass::duplicate);
    CHECK(classify_psn(0x800000, 0) == PsnClass::duplicate);
    CHECK(classify_psn(0x7FFFFF, 0) == PsnClass::out_of_sequence);
    CHECK(classify_psn(0, 0xFFFFFF) == PsnClass::out_of_sequence);
    CHECK(classify_psn(0x7FFFFF, 0xFFFFFF) == PsnClass::duplicate);
    CHECK(classify_psn(0x7FFFFE, 0xFFFFFF) == PsnClass::out_of_sequence);

    std::mt19937 rng(2);
    for (int i = 0; i < 200000; ++i) {
        const uint32_t e = rng() & kPsnMask;
        const uint32_t p = i % 4 == 0 ? psn_add(e, (1u << 23) - 2 + rng() % 4) : rng() & kPsnMask;
        REQUIRE(classify_psn(p, e) == reference_class(p, e));
    }
}

TEST_CASE("RNR timer table: every code", "[psn][rnr]") {
    // IBTA 9.7.5.2.8 (RNR NAK timer field encoding), in ms, code 0 first.
    const char* const kMs[32] = {
        "655.36", "0.01",  "0.02",  "0.03",  "0.04",  "0.06",   "0.08",   "0.12",
        "0.16",   "0.24",  "0.32",  "0.48",  "0.64",  "0.96",   "1.28",   "1.92",
        "2.56",   "3.84",  "5.12",  "7.68",  "10.24", "15.36",  "20.48",  "30.72",
        "40.96",  "61.44", "81.92", "122.88", "163.84", "245.76", "327.68", "491.52",
    };
    for (unsigned code = 0; code < 32; ++code) {
        INFO("code " << code);
        CHECK(rnr_timer_ns(uint8_t(code)) == ms_text_to_ns(kMs[code]));
    }
    CHECK(rnr_timer_ns(1) == 10000);
    CHECK(rnr_timer_ns(25) == 61440000);  // Linux rxe's table has 61410 us here, a typo
    CHECK(rnr_timer_ns(31) == 491520000);
    // Codes 1..31 grow; code 0 is the longest of all.
    for (unsigned code = 2; code < 32; ++code)
        CHECK(rnr_timer_ns(uint8_t(code)) > rnr_timer_ns(uint8_t(code - 1)));
    CHECK(rnr_timer_ns(0) > rnr_timer_ns(31));
    CHECK(rnr_timer_ns(32) == rnr_timer_ns(0));  // a 5-bit field
}

TEST_CASE("local ACK timeout: 4.096 us * 2^timeout, 0 is infinite", "[psn][ack]") {
    CHECK(ack_timeout_ns(0) == UINT64_MAX);
    CHECK(ack_timeout_ns(1) == 8192);
    CHECK(ack_timeout_ns(14) == 67108864);  // 4.096 us * 16384 = 67.108864 ms
    CHECK(ack_timeout_ns(18) == 1073741824);
    CHECK(ack_timeout_ns(31) == 8796093022208ull);  // ~2.44 hours
    for (unsigned t = 1; t < 32; ++t) CHECK(ack_timeout_ns(uint8_t(t)) == 4096ull << t);
}

TEST_CASE("timers fire once, never early, in deadline order", "[timer]") {
    VirtualClock clock(1000000);
    TimerWheel w(clock);
    Fleet f(6);
    CHECK(w.next_deadline_ns() == UINT64_MAX);
    w.arm(f[0], 1005000);
    w.arm(f[1], 1003000);
    w.arm(f[2], 1003999);  // same 1 us tick as f[1] and f[3]
    w.arm(f[3], 1003001);
    w.arm(f[4], 1000010);
    w.arm(f[5], 1003000);  // equal to f[1]: after it, in arming order
    CHECK(w.size() == 6);
    CHECK(w.next_deadline_ns() == 1000010);

    CHECK(f.expire(w, 1000009) == 0);
    CHECK(f.expire(w, 1000010) == 1);
    CHECK(w.next_deadline_ns() == 1003000);
    CHECK(f.expire(w, 1002999) == 0);
    CHECK(f.expire(w, 1003000) == 2);
    CHECK(w.next_deadline_ns() == 1003001);
    CHECK(f.expire(w, 1003500) == 1);  // mid-tick: f[3] yes, f[2] not yet
    CHECK(w.next_deadline_ns() == 1003999);
    CHECK(f.expire(w, 1003998) == 0);
    CHECK(f.expire(w, 1003999) == 1);
    CHECK(f.expire(w, 1004999) == 0);
    CHECK(f.expire(w, 2000000) == 1);
    CHECK(f.expire(w, 9000000) == 0);
    CHECK(f.fired() == std::vector<size_t>{4, 1, 5, 3, 2, 0});
    CHECK(w.size() == 0);
    CHECK(w.next_deadline_ns() == UINT64_MAX);
    for (size_t i = 0; i < 6; ++i) CHECK_FALSE(f[i].armed());

    // One expire() over many ticks and levels still fires in deadline order.
    Fleet g(5);
    const uint64_t t0 = 9000000;
    w.arm(g[0], t0 + 5000000000);  // 5 s
    w.arm(g[1], t0 + 70);
    w.arm(g[2], t0 + 64000);
    w.arm(g[3], t0 + 3000000);
    w.arm(g[4], t0 + 69);
    CHECK(g.expire(w, t0 + 6000000000) == 5);
    CHECK(g.fired() == std::vector<size_t>{4, 1, 2, 3, 0});
}

TEST_CASE("cancel, re-arm and destruction", "[timer]") {
    VirtualClock clock;
    TimerWheel w(clock);
    Fleet f(4);
    w.arm(f[0], 50000);
    w.arm(f[1], 60000);
    CHECK(w.armed(f[0]));
    CHECK(f[0].armed());
    w.cancel(f[0]);
    CHECK_FALSE(w.armed(f[0]));
    w.cancel(f[0]);  // idle: no-op
    w.cancel(f[2]);
    CHECK(w.size() == 1);
    CHECK(w.next_deadline_ns() == 60000);

    w.arm(f[1], 20000);  // re-arming moves it, earlier...
    CHECK(w.size() == 1);
    CHECK(w.next_deadline_ns() == 20000);
    w.arm(f[1], 3600000000000ull);  // ...or much later (1 h)
    CHECK(w.next_deadline_ns() == 3600000000000ull);
    CHECK(f.expire(w, 1000000) == 0);
    w.arm(f[1], 1500000);
    CHECK(f.expire(w, 2000000) == 1);
    CHECK(f.expire(w, 4000000000000ull) == 0);  // fired once only
    CHECK(f.fired() == std::vector<size_t>{1});

    {
        Timer scoped(&Fleet::on_fire, &f);
        w.arm(scoped, 5000000000000ull);
        CHECK(w.size() == 1);
    }  // destroyed armed: cancelled
    CHECK(w.size() == 0);
    CHECK(w.next_deadline_ns() == UINT64_MAX);

    // A past deadline fires at the next expire().
    w.arm(f[3], 10);
    CHECK(w.next_deadline_ns() == 10);
    CHECK(f.expire(w, 4000000000001ull) == 1);

    // The wheel's destruction disarms what is left.
    auto w2 = std::make_unique<TimerWheel>(clock);
    w2->arm(f[2], 1);
    w2.reset();
    CHECK_FALSE(f[2].armed());
}

namespace {

struct Periodic {
    Timer t;
    TimerWheel* w = nullptr;
    uint64_t period = 0;
    std::vector<uint64_t> at;
    static void fire(Timer* t, void* ctx) {
        auto* p = static_cast<Periodic*>(ctx);
        p->at.push_back(t->deadline_ns());
        if (p->period) p->w->arm(*t, t->deadline_ns() + p->period);
    }
};

// A callback acting on other timers.
struct Actor {
    Timer t;
    TimerWheel* w = nullptr;
    Timer* other = nullptr;
    enum { cancel_other, rearm_other, arm_other_past } what = cancel_other;
    uint64_t other_deadline = 0;
    int fired = 0;
    static void fire(Timer*, void* ctx) {
        auto* a = static_cast<Actor*>(ctx);
        ++a->fired;
        switch (a->what) {
        case cancel_other: a->w->cancel(*a->other); break;
        case rearm_other: a->w->arm(*a->other, a->other_deadline); break;
        case arm_other_past: a->w->arm(*a->other, 0); break;
        }
    }
};

}  // namespace

TEST_CASE("callbacks re-arm and cancel themselves and others", "[timer]") {
    VirtualClock clock;
    TimerWheel w(clock);

    SECTION("a periodic timer re-arms itself: every period within one expire()") {
        Periodic p;
        p.t.fn = &Periodic::fire;
        p.t.ctx = &p;
        p.w = &w;
        p.period = 1000;
        w.arm(p.t, 1000);
        CHECK(w.expire(10500) == 10);
        CHECK(p.at ==
              std::vector<uint64_t>{1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000});
        CHECK(w.next_deadline_ns() == 11000);
        p.period = 0;
        CHECK(w.expire(11000) == 1);
        CHECK_FALSE(p.t.armed());
    }
    SECTION("re-arming at an already processed time fires on the next expire(), no livelock") {
        Periodic p;
        p.t.fn = &Periodic::fire;
        p.t.ctx = &p;
        p.w = &w;
        p.period = 0;
        struct Again {
            static void fire(Timer* t, void* ctx) {
                auto* q = static_cast<Periodic*>(ctx);
                q->at.push_back(t->deadline_ns());
                q->w->arm(*t, t->deadline_ns());  // the same, past, deadline
            }
        };
        p.t.fn = &Again::fire;
        w.arm(p.t, 5000);
        CHECK(w.expire(5000) == 1);
        CHECK(w.armed(p.t));
        CHECK(w.next_deadline_ns() == 5000);
        CHECK(w.expire(5000) == 1);
        CHECK(w.expire(9000) == 1);
        CHECK(p.at.size() == 3);
        w.cancel(p.t);
    }
    SECTION("cancel a timer due in the same tick, and one due later") {
        Fleet f(2);
        Actor a;
        a.t.fn = &Actor::fire;
        a.t.ctx = &a;
        a.w = &w;
        a.other = &f[0];
        w.arm(a.t, 5000);
        w.arm(f[0], 5000);  // same deadline, after a in order
        w.arm(f[1], 7000);
        CHECK(f.expire(w, 5000) == 1);
        CHECK(a.fired == 1);
        CHECK_FALSE(f[0].armed());
        a.other = &f[1];
        w.arm(a.t, 6000);
        CHECK(f.expire(w, 8000) == 1);
        CHECK(f.log.empty());
        CHECK(w.size() == 0);
    }
    SECTION("re-arm another timer later, earlier, or in the past") {
        Fleet f(1);
        Actor a;
        a.t.fn = &Actor::fire;
        a.t.ctx = &a;
        a.w = &w;
        a.other = &f[0];
        a.what = Actor::rearm_other;
        a.other_deadline = 9000;
        w.arm(a.t, 2000);
        w.arm(f[0], 3000);
        CHECK(f.expire(w, 4000) == 1);  // f[0] moved to 9000
        CHECK(f.expire(w, 8999) == 0);
        a.other_deadline = 8500;  // due now: in a tick not yet processed by this call
        w.arm(a.t, 8600);
        w.arm(f[0], 20000);
        CHECK(f.expire(w, 8999) == 1);  // 8500 is tick 8, already processed: next call
        CHECK(f.expire(w, 8999) == 1);
        CHECK(f.log.size() == 1);
        a.other_deadline = 10500;  // a later tick within this call's range: same call
        w.arm(a.t, 9500);
        CHECK(f.expire(w, 11000) == 2);
        CHECK(f.log.size() == 2);
        a.what = Actor::arm_other_past;
        w.arm(a.t, 12000);
        CHECK(f.expire(w, 12000) == 1);
        CHECK(w.next_deadline_ns() == 0);
        CHECK(f.expire(w, 12000) == 1);
        CHECK(f.log.size() == 3);
    }
    SECTION("a callback re-arming the timer that is firing next in the same tick") {
        Fleet f(1);
        Actor a;
        a.t.fn = &Actor::fire;
        a.t.ctx = &a;
        a.w = &w;
        a.other = &f[0];
        a.what = Actor::rearm_other;
        a.other_deadline = 100000;
        w.arm(a.t, 3000);
        w.arm(f[0], 3000);
        CHECK(f.expire(w, 3000) == 1);
        CHECK(w.next_deadline_ns() == 100000);
        CHECK(f.expire(w, 100000) == 1);
    }
}

TEST_CASE("far deadlines: one hour, the longest ACK timeout, the end of time", "[timer]") {
    VirtualClock clock(123456789);
    TimerWheel w(clock);
    Fleet f(4);
    const uint64_t hour = 3600ull * 1000000000;
    const uint64_t start = clock.now_ns();
    w.arm(f[0], start + hour);
    w.arm_after(f[1], ack_timeout_ns(31));
    w.arm_after(f[2], rnr_timer_ns(0));
    w.arm_after(f[3], UINT64_MAX);  // saturates
    CHECK(f[3].deadline_ns() == UINT64_MAX);
    CHECK(w.next_deadline_ns() == start + rnr_timer_ns(0));
    CHECK(f.expire(w, start + rnr_timer_ns(0) - 1) == 0);
    CHECK(f.expire(w, start + rnr_timer_ns(0)) == 1);
    CHECK(w.next_deadline_ns() == start + hour);
    CHECK(f.expire(w, start + hour - 1) == 0);
    CHECK(w.next_deadline_ns() == start + hour);
    CHECK(f.expire(w, start + hour) == 1);
    CHECK(w.next_deadline_ns() == start + ack_timeout_ns(31));
    CHECK(f.expire(w, start + ack_timeout_ns(31) - 1) == 0);
    CHECK(f.expire(w, start + ack_timeout_ns(31)) == 1);
    CHECK(w.next_deadline_ns() == UINT64_MAX);  // f[3], armed at the end of time
    CHECK(w.size() == 1);
    CHECK(f.expire(w, UINT64_MAX - 1) == 0);
    CHECK(f.expire(w, UINT64_MAX) == 1);
    CHECK(f.fired() == std::vector<size_t>{2, 0, 1, 3});
}

TEST_CASE("100000 random timers against a sorted reference", "[timer]") {
    std::mt19937_64 rng(42);
    VirtualClock clock(987654321);
    TimerWheel w(clock);
    const size_t n = 100000;
    Fleet f(n);
    std::vector<uint64_t> deadline(n);
    std::vector<bool> cancelled(n, false);
    std::vector<uint64_t> armed_at(n, clock.now_ns());
    std::multiset<std::pair<uint64_t, size_t>> pending;
    auto random_delay = [&]() -> uint64_t {
        switch (rng() % 4) {
        case 0: return rng() % 100000;                 // 100 us
        case 1: return rng() % 100000000;              // 100 ms
        case 2: return rng() % 10000000000ull;         // 10 s
        default: return rng() % (3ull * 3600 * 1000000000);  // 3 h
        }
    };
    for (size_t i = 0; i < n; ++i) {
        deadline[i] = clock.now_ns() + random_delay();
        w.arm(f[i], deadline[i]);
        pending.insert({deadline[i], i});
    }
    // Move some, cancel some, before and during the run.
    auto disturb = [&]() {
        const size_t i = rng() % n;
        if (!f[i].armed()) return;
        pending.erase(pending.find({deadline[i], i}));
        if (rng() % 2) {
            w.cancel(f[i]);
            cancelled[i] = true;
        } else {
            armed_at[i] = clock.now_ns();
            deadline[i] = armed_at[i] + random_delay();
            w.arm(f[i], deadline[i]);
            pending.insert({deadline[i], i});
        }
    };
    for (int k = 0; k < 5000; ++k) disturb();
    REQUIRE(w.size() == pending.size());

    uint64_t prev = clock.now_ns();
    size_t bad_next = 0, bad_count = 0, steps = 0;
    size_t logged = 0;
    while (!pending.empty()) {
        // Next deadline exact, then step: to it, a bit past it, or a random amount.
        if (w.next_deadline_ns() != pending.begin()->first) ++bad_next;
        switch (rng() % 3) {
        case 0: clock.set(w.next_deadline_ns()); break;
        case 1: clock.set(w.next_deadline_ns() + rng() % 3000); break;
        default: clock.advance(rng() % (rng() % 2 ? 2000 : 50000000)); break;
        }
        const uint64_t now = clock.now_ns();
        size_t due = 0;
        for (auto it = pending.begin(); it != pending.end() && it->first <= now; ++it) ++due;
        if (f.expire(w, now) != due) ++bad_count;
        for (; logged < f.log.size(); ++logged) {
            const size_t i = f.log[logged].first;
            auto it = pending.begin();
            // Fired in sorted order (ties in any order), never early, at the first chance.
            REQUIRE(it->first == deadline[i]);
            REQUIRE(deadline[i] <= now);
            REQUIRE((deadline[i] > prev || armed_at[i] >= prev));
            REQUIRE(pending.erase({deadline[i], i}) == 1);
        }
        prev = now;
        if (++steps % 4 == 0) disturb();
    }
    CHECK(bad_next == 0);
    CHECK(bad_count == 0);
    CHECK(w.size() == 0);
    CHECK(w.next_deadline_ns() == UINT64_MAX);
    size_t expected = 0;
    for (size_t i = 0; i < n; ++i) expected += !cancelled[i];
    CHECK(f.log.size() == expected);  // each uncancelled timer fired exactly once
    std::vector<size_t> seen(n, 0);
    for (auto& e : f.log) ++seen[e.first];
    for (size_t i = 0; i < n; ++i) REQUIRE(seen[i] == (cancelled[i] ? 0u : 1u));
}

TEST_CASE("random callbacks that re-arm and cancel others during expire", "[timer]") {
    std::mt19937_64 rng(7);
    VirtualClock clock;
    TimerWheel w(clock);
    const size_t n = 2000;
    struct World;
    struct Node {
        Timer t;
        World* world = nullptr;
        uint64_t deadline = 0;
        bool pending = false;
        size_t armed_in_call = 0;
    };
    struct World {
        std::mt19937_64* rng;
        TimerWheel* w;
        std::unique_ptr<Node[]> nodes;
        size_t n;
        uint64_t now = 0;
        size_t call = 0;
        size_t fired = 0, early = 0, late = 0, spurious = 0;
        uint64_t prev = 0;
        void arm(Node& x, uint64_t d) {
            x.deadline = d;
            x.pending = true;
            x.armed_in_call = call;
            w->arm(x.t, d);
        }
        static void fire(Timer* t, void* ctx) {
            Node& x = *static_cast<Node*>(ctx);
            World* wd = x.world;
            REQUIRE(t == &x.t);
            ++wd->fired;
            if (!x.pending) ++wd->spurious;
            if (x.deadline > wd->now) ++wd->early;
            // Due by an earlier call, and not armed (by a callback) in the call just before.
            if (x.deadline <= wd->prev && x.armed_in_call + 1 < wd->call) ++wd->late;
            x.pending = false;
            auto& r = *wd->rng;
            for (int k = 0; k < 2; ++k) {
                Node& o = wd->nodes[r() % wd->n];
                switch (r() % 4) {
                case 0: wd->w->cancel(o.t); o.pending = false; break;
                case 1: wd->arm(o, wd->now + r() % 5000); break;  // soon, maybe this call
                case 2: wd->arm(o, wd->now - std::min<uint64_t>(wd->now, r() % 5000)); break;
                default: wd->arm(o, wd->now + r() % 100000000); break;
                }
            }
        }
    } world{&rng, &w, std::unique_ptr<Node[]>(new Node[n]), n};
    for (size_t i = 0; i < n; ++i) {
        world.nodes[i].t.fn = &World::fire;
        world.nodes[i].t.ctx = &world.nodes[i];
        world.nodes[i].world = &world;
        world.arm(world.nodes[i], rng() % 1000000000);
    }
    for (int step = 0; step < 20000; ++step) {
        clock.advance(rng() % 20000);
        world.prev = world.now;
        world.now = clock.now_ns();
        ++world.call;
        w.expire(world.now);
        size_t pend = 0;
        for (size_t i = 0; i < n; ++i) pend += world.nodes[i].pending;
        REQUIRE(w.size() == pend);
    }
    CHECK(world.fired > 20000);
    CHECK(world.spurious == 0);
    CHECK(world.early == 0);
    CHECK(world.late == 0);
    uint64_t min_pending = UINT64_MAX;
    for (size_t i = 0; i < n; ++i)
        if (world.nodes[i].pending) min_pending = std::min(min_pending, world.nodes[i].deadline);
    CHECK(w.next_deadline_ns() == min_pending);
}
