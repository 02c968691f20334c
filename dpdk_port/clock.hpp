// Time for the data path: one interface, a real clock and a virtual one that moves only when told
// (tests and `hcaemu sim` run in virtual time: deterministic, no sleeping).
#pragma once
#include <chrono>
#include <cstdint>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace hcaemu::port {

class Clock {
public:
    virtual ~Clock() = default;
    virtual uint64_t now_ns() const = 0;
};

class SteadyClock final : public Clock {
public:
    uint64_t now_ns() const override {
        return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch()).count());
    }
};

// The CPU's time-stamp counter (what DPDK's rte_rdtsc reads), in ns from a rate given once: no
// system call and no vDSO on the data path (a VM's clock_gettime may leave the vDSO; its cost was
// 13% of a write_bw client's samples). Until start() it reads steady_clock; start(hz) takes the
// counter's rate (DPDK's rte_get_tsc_hz()) and continues from steady_clock's time then. Needs an
// invariant TSC (constant_tsc, nonstop_tsc), as DPDK does; other CPUs keep steady_clock.
class TscClock final : public Clock {
public:
    void start(uint64_t hz) {
#if defined(__x86_64__)
        if (hz == 0) return;
        base_ns_ = steady_.now_ns();
        base_tsc_ = __rdtsc();
        mul_ = (uint64_t(1'000'000'000) << 32) / hz;  // ns per tick, 32.32 fixed point
#else
        (void)hz;
#endif
    }
    uint64_t now_ns() const override {
#if defined(__x86_64__)
        if (mul_) {
            __extension__ using u128 = unsigned __int128;
            return base_ns_ + uint64_t(u128(__rdtsc() - base_tsc_) * mul_ >> 32);
        }
#endif
        return steady_.now_ns();
    }

private:
    SteadyClock steady_;
    uint64_t base_ns_ = 0, base_tsc_ = 0, mul_ = 0;
};

class VirtualClock final : public Clock {
public:
    explicit VirtualClock(uint64_t start_ns = 0) : t_(start_ns) {}
    uint64_t now_ns() const override { return t_ += tick_; }
    void advance(uint64_t ns) { t_ += ns; }
    void set(uint64_t ns) { t_ = ns > t_ ? ns : t_; }  // never backwards
    // Each read moves time on by `ns` (0: time stands still between set()s): models work that
    // takes time, so that when a thing is decided and when it happens differ.
    void set_tick(uint64_t ns) { tick_ = ns; }

private:
    mutable uint64_t t_;
    uint64_t tick_ = 0;
};

}  // namespace hcaemu::port
