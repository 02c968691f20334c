// Time for the data path: one interface, a real clock and a virtual one that moves only when told
// (tests and `hcaemu sim` run in virtual time: deterministic, no sleeping).
#pragma once
#include <chrono>
#include <cstdint>

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

class VirtualClock final : public Clock {
public:
    explicit VirtualClock(uint64_t start_ns = 0) : t_(start_ns) {}
    uint64_t now_ns() const override { return t_; }
    void advance(uint64_t ns) { t_ += ns; }
    void set(uint64_t ns) { t_ = ns > t_ ? ns : t_; }  // never backwards

private:
    uint64_t t_;
};

}  // namespace hcaemu::port
