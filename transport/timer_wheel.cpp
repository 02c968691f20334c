#include "transport/timer_wheel.hpp"

#include <algorithm>
#include <bit>
#include <cassert>

namespace hcaemu::transport {

namespace {

bool list_empty(const TimerLink& head) { return head.next == &head; }

void link_before(TimerLink& pos, TimerLink& n) {
    n.prev = pos.prev;
    n.next = &pos;
    pos.prev->next = &n;
    pos.prev = &n;
}

void unlink_node(TimerLink& n) {
    n.prev->next = n.next;
    n.next->prev = n.prev;
    n.next = n.prev = &n;
}

}  // namespace

Timer::~Timer() {
    if (wheel_) wheel_->cancel(*this);
}

TimerWheel::TimerWheel(const port::Clock& clock) : clock_(clock), cur_(clock.now_ns() / kTickNs) {}

TimerWheel::~TimerWheel() {
    auto disarm_all = [](TimerLink& head) {
        while (!list_empty(head)) {
            Timer& t = static_cast<Timer&>(*head.next);
            unlink_node(t);
            t.wheel_ = nullptr;
        }
    };
    for (auto& level : slots_)
        for (TimerLink& head : level) disarm_all(head);
    disarm_all(deferred_);
}

void TimerWheel::arm(Timer& t, uint64_t deadline_ns) {
    assert(t.fn);
    if (t.wheel_) t.wheel_->cancel(t);
    t.deadline_ = deadline_ns;
    t.wheel_ = this;
    ++count_;
    if (in_expire_ && deadline_ns / kTickNs <= cur_) {
        link_before(deferred_, t);
        t.where_ = kDeferred;
    } else {
        place(t);
    }
}

void TimerWheel::arm_after(Timer& t, uint64_t delay_ns) {
    const uint64_t now = clock_.now_ns();
    arm(t, delay_ns > UINT64_MAX - now ? UINT64_MAX : now + delay_ns);
}

void TimerWheel::cancel(Timer& t) {
    if (!t.wheel_) return;
    if (t.wheel_ != this) {
        t.wheel_->cancel(t);
        return;
    }
    unlink(t);
    t.wheel_ = nullptr;
    --count_;
}

// Puts an armed timer in its slot relative to cur_; a past deadline goes to the current tick.
void TimerWheel::place(Timer& t) {
    uint64_t tick = t.deadline_ / kTickNs;
    if (tick < cur_) tick = cur_;
    const uint64_t diff = tick ^ cur_;
    const unsigned level = diff ? unsigned(std::bit_width(diff) - 1) / kBits : 0;
    const unsigned idx = unsigned(tick >> (kBits * level)) & (kSlots - 1);
    TimerLink& head = slots_[level][idx];
    TimerLink* pos = &head;
    if (level == 0) {  // one tick per slot, sorted by deadline (FIFO among equals)
        while (pos->prev != &head && static_cast<Timer*>(pos->prev)->deadline_ > t.deadline_)
            pos = pos->prev;
    }
    link_before(*pos, t);
    occupied_[level] |= uint64_t(1) << idx;
    t.where_ = uint16_t(level * kSlots + idx);
}

void TimerWheel::unlink(Timer& t) {
    const unsigned w = t.where_;
    unlink_node(t);
    if (w < kLevels * kSlots && list_empty(slots_[w / kSlots][w % kSlots]))
        occupied_[w / kSlots] &= ~(uint64_t(1) << (w % kSlots));
}

// Occupied slots of level l past the one holding cur_.
uint64_t TimerWheel::later_slots(unsigned l) const {
    const unsigned g = unsigned(cur_ >> (kBits * l)) & (kSlots - 1);
    return g == kSlots - 1 ? 0 : occupied_[l] & (~uint64_t(0) << (g + 1));
}

// The first tick after cur_ at which something happens: a level-0 slot to fire, or a higher
// slot to cascade (the tick its range starts). Timers at level L share cur_'s bits above group
// L and are later in group L, so the lowest level with a timer holds the earliest event.
bool TimerWheel::next_event(uint64_t& tick, unsigned& level) const {
    for (unsigned l = 0; l < kLevels; ++l) {
        const unsigned shift = kBits * l;
        assert(l == 0 || !(occupied_[l] >> ((cur_ >> shift) & (kSlots - 1)) & 1));
        const uint64_t later = later_slots(l);
        if (!later) continue;
        const uint64_t block = cur_ >> (shift + kBits) << (shift + kBits);
        tick = block | uint64_t(std::countr_zero(later)) << shift;
        level = l;
        return true;
    }
    return false;
}

// cur_ has just entered slot (level, group of cur_): its timers move to lower levels.
void TimerWheel::cascade(unsigned level) {
    const unsigned idx = unsigned(cur_ >> (kBits * level)) & (kSlots - 1);
    TimerLink& head = slots_[level][idx];
    occupied_[level] &= ~(uint64_t(1) << idx);
    while (!list_empty(head)) {
        Timer& t = static_cast<Timer&>(*head.next);
        unlink_node(t);
        place(t);
    }
}

// Fires the current tick's timers with deadline <= now_ns. They are first spliced to a local
// list, so callbacks may cancel or re-arm any of them (or anything else) safely.
size_t TimerWheel::fire_due(uint64_t now_ns) {
    const unsigned idx = unsigned(cur_) & (kSlots - 1);
    TimerLink& head = slots_[0][idx];
    TimerLink due;
    while (!list_empty(head) && static_cast<Timer*>(head.next)->deadline_ <= now_ns) {
        Timer& t = static_cast<Timer&>(*head.next);
        unlink_node(t);
        link_before(due, t);
        t.where_ = kDue;
    }
    if (list_empty(head)) occupied_[0] &= ~(uint64_t(1) << idx);
    size_t n = 0;
    while (!list_empty(due)) {
        Timer& t = static_cast<Timer&>(*due.next);
        unlink_node(t);
        t.wheel_ = nullptr;
        --count_;
        ++n;
        t.fn(&t, t.ctx);
    }
    return n;
}

size_t TimerWheel::expire(uint64_t now_ns) {
    if (in_expire_) return 0;
    in_expire_ = true;
    const uint64_t target = now_ns / kTickNs > cur_ ? now_ns / kTickNs : cur_;
    size_t n = 0;
    for (;;) {
        n += fire_due(now_ns);  // before target the whole tick is due (deadline < target tick)
        if (cur_ == target) break;
        uint64_t tick;
        unsigned level;
        if (!next_event(tick, level) || tick > target) {
            cur_ = target;  // nothing in between: its slot is empty
            continue;
        }
        cur_ = tick;
        if (level > 0) cascade(level);
    }
    in_expire_ = false;
    while (!list_empty(deferred_)) {
        Timer& t = static_cast<Timer&>(*deferred_.next);
        unlink_node(t);
        place(t);
    }
    return n;
}

uint64_t TimerWheel::next_deadline_ns() const {
    auto list_min = [](const TimerLink& head, uint64_t best) {
        for (const TimerLink* p = head.next; p != &head; p = p->next)
            best = std::min(best, static_cast<const Timer*>(p)->deadline_);
        return best;
    };
    const uint64_t best = list_min(deferred_, UINT64_MAX);  // non-empty only during expire()
    // Level 0 from the current tick on (sorted: the head is the earliest), else the first
    // occupied slot of the lowest level with one (the same order as next_event()).
    const unsigned g0 = unsigned(cur_) & (kSlots - 1);
    const uint64_t now_and_later = occupied_[0] & (~uint64_t(0) << g0);
    if (now_and_later) {
        const TimerLink& head = slots_[0][std::countr_zero(now_and_later)];
        return std::min(best, static_cast<const Timer*>(head.next)->deadline_);
    }
    for (unsigned l = 1; l < kLevels; ++l) {
        if (const uint64_t later = later_slots(l))
            return list_min(slots_[l][std::countr_zero(later)], best);
    }
    return best;
}

}  // namespace hcaemu::transport
