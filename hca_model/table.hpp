// Object tables of the device: slots addressed by index with an 8-bit generation, as an HCA's
// context tables are. A handle or key carries index and generation, so a stale one never matches
// a slot's new occupant (until the generation wraps, 256 reuses later). Fresh indices are handed
// out until all `max` have been used once; only then are freed ones reused, oldest first, so that
// a number (a QPN, a key index) comes back as late as possible.
// Control path only: allocation happens at create time, lookup is O(1) and allocation-free.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace hcaemu {

template <class T>
class Table {
public:
    // Indices [0, reserved) are never handed out (QPN 0 and 1 are the IBTA's special QPs).
    Table(uint32_t max, uint32_t reserved = 0) : max_(max), next_(reserved), limit_(reserved + max) {}

    // Stores `obj`; returns its index, or -1 when `max` objects exist.
    int64_t insert(std::unique_ptr<T> obj) {
        if (count_ >= max_) return -1;
        uint32_t i;
        if (next_ < limit_) {
            i = next_++;
            if (slots_.size() <= i) slots_.resize(i + 1);
        } else {
            i = free_.front();
            free_.pop_front();
        }
        slots_[i].obj = std::move(obj);
        ++count_;
        return i;
    }

    T* at(uint32_t i) const { return i < slots_.size() ? slots_[i].obj.get() : nullptr; }
    uint8_t gen(uint32_t i) const { return i < slots_.size() ? slots_[i].gen : 0; }
    // Bumps the generation of a live slot (MR re-registration: new keys, same slot).
    uint8_t bump(uint32_t i) { return ++slots_[i].gen; }

    void erase(uint32_t i) {
        slots_[i].obj.reset();
        ++slots_[i].gen;
        free_.push_back(i);
        --count_;
    }

    uint32_t size() const { return count_; }
    uint32_t capacity() const { return uint32_t(slots_.size()); }
    // Heap bytes the table holds beside its objects: the slots and the free list. They grow with
    // the highest index used (at most `max`), not with the objects alive.
    size_t bytes() const { return slots_.capacity() * sizeof(Slot) + free_.size() * sizeof(uint32_t); }

    template <class F>
    void for_each(F&& f) const {
        for (uint32_t i = 0; i < slots_.size(); ++i)
            if (slots_[i].obj) f(i, *slots_[i].obj);
    }

private:
    struct Slot {
        std::unique_ptr<T> obj;
        uint8_t gen = 0;
    };
    std::vector<Slot> slots_;
    std::deque<uint32_t> free_;
    uint32_t max_;
    uint32_t next_;
    uint32_t limit_;
    uint32_t count_ = 0;
};

}  // namespace hcaemu
