// The transport's timers (ACK timeout, RNR wait, ...): a hierarchical timer wheel, 1 us ticks.
//
// Why hierarchical: deadlines run from microseconds (RNR 10 us) to hours (ACK timeout up to
// 4.096 us * 2^31, about 2.4 h). Ten levels of 64 slots hold every tick a uint64 ns deadline can
// reach (60 bits >= 2^64 / 1000), so there is no overflow list to rescan, and each level is one
// 64-bit occupancy mask: the next event is a count-trailing-zeros, and expire() jumps over empty
// time (an hour of virtual time costs a few steps, not 3.6e9 ticks).
//
// A timer sits at the level of the highest 6-bit group in which its tick differs from the
// wheel's current tick, and moves down (cascades) when the current tick enters its slot.
// Level 0 slots are one tick each and kept sorted by deadline. Deadlines are kept exact (ns):
// expire(now) fires exactly the timers with deadline <= now, in deadline order.
//
// Timers are intrusive nodes embedded in their owner: arm, cancel and expire never allocate.
// Single-threaded (one wheel per data-path thread), no locks.
#pragma once
#include <cstddef>
#include <cstdint>

#include "dpdk_port/clock.hpp"

namespace hcaemu::transport {

class TimerWheel;

// Links of an intrusive circular list; a lone link points at itself.
struct TimerLink {
    TimerLink* next = this;
    TimerLink* prev = this;

    TimerLink() = default;
    TimerLink(const TimerLink&) = delete;
    TimerLink& operator=(const TimerLink&) = delete;
};

// One timer, embedded in its owner (a QP's ACK timer, its RNR timer...). fn(timer, ctx) runs
// from TimerWheel::expire() once the deadline has passed; it may arm or cancel any timer,
// itself included. Destroying an armed timer cancels it. Not copyable, not movable.
class Timer : private TimerLink {
public:
    using Fn = void (*)(Timer*, void* ctx);

    Timer() = default;
    Timer(Fn f, void* c) : fn(f), ctx(c) {}
    ~Timer();

    uint64_t deadline_ns() const { return deadline_; }  // of the last arm()
    bool armed() const { return wheel_ != nullptr; }

    Fn fn = nullptr;
    void* ctx = nullptr;

private:
    friend class TimerWheel;
    uint64_t deadline_ = 0;
    TimerWheel* wheel_ = nullptr;  // the wheel it is armed on, null when idle
    uint16_t where_ = 0;           // slot (level * 64 + index) or one of TimerWheel's lists
};

class TimerWheel {
public:
    static constexpr uint64_t kTickNs = 1000;

    explicit TimerWheel(const port::Clock& clock);
    ~TimerWheel();  // disarms whatever is still armed
    TimerWheel(const TimerWheel&) = delete;
    TimerWheel& operator=(const TimerWheel&) = delete;

    const port::Clock& clock() const { return clock_; }

    // Arms t to fire once at deadline_ns (absolute, the clock's ns); an armed t moves (also
    // from another wheel). A deadline already past fires on the next expire().
    void arm(Timer& t, uint64_t deadline_ns);
    // arm(t, clock().now_ns() + delay_ns), saturating.
    void arm_after(Timer& t, uint64_t delay_ns);
    void cancel(Timer& t);  // no-op when idle
    bool armed(const Timer& t) const { return t.wheel_ == this; }

    // Fires every timer whose deadline is <= now_ns, in deadline order, never early; returns how
    // many fired. A timer armed by a callback for a time already processed (deadline <= now in
    // the tick being handled) fires on the next call, so a callback that re-arms at `now`
    // cannot livelock this one. Not reentrant: a callback's call returns 0.
    size_t expire(uint64_t now_ns);
    size_t expire() { return expire(clock_.now_ns()); }

    // Earliest armed deadline (exact), UINT64_MAX when none is armed: how far `sim` may jump
    // virtual time. O(1) when the earliest timer is in level 0 (the current 64 us), otherwise
    // O(timers sharing its slot).
    uint64_t next_deadline_ns() const;

    size_t size() const { return count_; }  // armed timers

private:
    static constexpr unsigned kBits = 6;
    static constexpr unsigned kSlots = 1u << kBits;
    static constexpr unsigned kLevels = 10;
    static_assert((UINT64_MAX / kTickNs) >> (kBits * kLevels) == 0, "levels cover every tick");
    static constexpr uint16_t kDue = 0xFFFE;       // spliced out by expire(), about to fire
    static constexpr uint16_t kDeferred = 0xFFFD;  // armed by a callback for a processed tick

    void place(Timer& t);
    void unlink(Timer& t);
    uint64_t later_slots(unsigned level) const;
    bool next_event(uint64_t& tick, unsigned& level) const;
    void cascade(unsigned level);
    size_t fire_due(uint64_t now_ns);

    const port::Clock& clock_;
    uint64_t cur_;  // current tick (us): every earlier tick has been processed
    size_t count_ = 0;
    bool in_expire_ = false;
    uint64_t occupied_[kLevels] = {};  // bit i: slots_[level][i] is not empty
    TimerLink slots_[kLevels][kSlots];
    TimerLink deferred_;
};

}  // namespace hcaemu::transport
