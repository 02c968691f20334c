#include "dpdk_port/mem_wire.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace hcaemu::port {

namespace {

// Who holds a pool buffer. 1 and 2: the wire, with that many copies in flight.
constexpr uint8_t kFree = 0;
constexpr uint8_t kLent = 0xFD;    // handed over: the other end's user (after its rx_burst)
constexpr uint8_t kOnRing = 0xFE;  // arrived, on an rx ring (the other end's, when handed over)
constexpr uint8_t kApp = 0xFF;     // the port's user (after alloc or rx_burst)

void check_index(int i, const char* what) {
    if (i != 0 && i != 1) throw std::out_of_range(std::string("MemWire: ") + what + " must be 0 or 1");
}

void check_probability(double p, const char* name) {
    if (!(p >= 0.0 && p <= 1.0))
        throw std::invalid_argument(std::string("MemWire: fault probability '") + name + "' must lie in [0, 1]");
}

void check_faults(const FaultConfig& f) {
    check_probability(f.loss, "loss");
    check_probability(f.duplicate, "duplicate");
    check_probability(f.reorder, "reorder");
    check_probability(f.corrupt, "corrupt");
    check_probability(f.delay, "delay");
}

// A uniform double in [0, 1) from the top 53 bits: the same on every standard library, unlike
// std::uniform_real_distribution. p = 0 never fires, p = 1 always does.
double unit(std::mt19937_64& g) { return double(g() >> 11) * 0x1.0p-53; }

bool vlan_tagged(const uint8_t* d, uint32_t len) {
    return len >= pkt::kEthLen && d[12] == uint8_t(pkt::kEthTypeVlan >> 8) && d[13] == uint8_t(pkt::kEthTypeVlan & 0xFF);
}

}  // namespace

const char* event_name(Event e) {
    switch (e) {
    case Event::sent: return "sent";
    case Event::delivered: return "delivered";
    case Event::lost: return "lost";
    case Event::too_big: return "too_big";
    case Event::rx_full: return "rx_full";
    }
    return "?";
}

// One end: a Port over its buffer pool and its rx ring.
class MemWire::EndPort final : public Port {
public:
    struct RxEntry {
        uint64_t t = 0;  // delivery time
        uint32_t slot = 0;
        uint32_t len = 0;
        bool lent = false;  // `slot` is in the sending end's pool (handed over), not this one's
    };

    EndPort(MemWire& w, int idx)
        : w_(w), idx_(idx), cap_(w.cfg_.frame_cap), n_(w.cfg_.pool_frames),
          mem_(map_pool(size_t(n_) * cap_)),
          state_(n_, kFree), ring_(w.cfg_.rx_ring) {
        free_list_.reserve(n_);
        for (uint32_t s = n_; s-- > 0;) free_list_.push_back(s);  // slot 0 comes out first
    }

    bool alloc(Frame& f) override {
        w_.deliver_due();
        uint32_t s;
        if (!take(s)) {
            ++stats_.tx_no_buffer;
            return false;
        }
        state_[s] = kApp;
        f = Frame{buf(s), 0, cap_, s};
        return true;
    }

    uint16_t tx_burst(Frame* frames, uint16_t n) override { return w_.transmit(idx_, frames, n); }

    uint16_t rx_burst(Frame* frames, uint16_t n) override {
        w_.deliver_due();
        uint16_t k = 0;
        while (k < n && ring_count_ > 0) {
            const RxEntry& e = ring_[ring_head_];
            ring_head_ = ring_head_ + 1 == ring_.size() ? 0 : ring_head_ + 1;
            --ring_count_;
            EndPort& owner = e.lent ? peer() : *this;
            owner.state_[e.slot] = e.lent ? kLent : kApp;
            frames[k++] = Frame{owner.buf(e.slot), e.len, cap_, e.slot};
            ++stats_.rx_frames;
            stats_.rx_bytes += e.len;
        }
        return k;
    }

    void free(Frame& f) override {
        // A buffer handed over by the other end goes back to its pool.
        EndPort& owner = !holds(f.data) && peer().holds(f.data) ? peer() : *this;
        owner.check_owned(f, "free", &owner == this ? kApp : kLent);
        owner.give(f.slot);
        f = Frame{};
    }

    pkt::Mac mac() const override { return w_.cfg_.mac[idx_]; }
    uint32_t mtu() const override { return w_.cfg_.mtu; }
    PortStats stats() const override { return stats_; }

    // The buffer behind `f` must be this pool's and the user's (kApp), or lent to the other
    // end's user (kLent).
    void check_owned(const Frame& f, const char* what, uint8_t holder = kApp) const {
        if (f.slot >= n_ || f.data != buf(f.slot))
            throw std::invalid_argument(std::string("MemWire ") + what + ": frame not from end " + std::to_string(idx_) + "'s pool");
        if (state_[f.slot] != holder)
            throw std::invalid_argument(std::string("MemWire ") + what + ": buffer " + std::to_string(f.slot) +
                                        " is not the user's (freed or sent already?)");
        if (f.len > cap_) throw std::invalid_argument(std::string("MemWire ") + what + ": len above the buffer's capacity");
    }

    uint8_t* buf(uint32_t s) const { return mem_.get() + size_t(s) * cap_; }
    bool holds(const uint8_t* p) const {
        const uintptr_t a = uintptr_t(p), b = uintptr_t(mem_.get());
        return a >= b && a - b < size_t(n_) * cap_;
    }
    EndPort& peer() const { return *w_.ends_[1 - idx_]; }
    uint8_t holders(uint32_t s) const { return state_[s]; }
    bool take(uint32_t& s) {
        if (free_list_.empty()) return false;
        s = free_list_.back();
        free_list_.pop_back();
        return true;
    }
    void give(uint32_t s) {
        state_[s] = kFree;
        free_list_.push_back(s);  // never beyond the reserved n_: each slot is free at most once
    }
    // One copy of wire-held buffer `s` is done with (delivered or dropped).
    void release(uint32_t s) {
        if (--state_[s] == kFree) give(s);
    }

    bool ring_full() const { return ring_count_ == ring_.size(); }
    void ring_push(const RxEntry& e) {
        size_t tail = ring_head_ + ring_count_;
        if (tail >= ring_.size()) tail -= ring_.size();
        ring_[tail] = e;
        ++ring_count_;
    }
    uint32_t ring_count() const { return uint32_t(ring_count_); }
    uint64_t ring_head_time() const { return ring_count_ ? ring_[ring_head_].t : UINT64_MAX; }
    uint32_t free_count() const { return uint32_t(free_list_.size()); }
    void set_state(uint32_t s, uint8_t v) { state_[s] = v; }

    PortStats stats_;

private:
    MemWire& w_;
    int idx_;
    uint32_t cap_;
    uint32_t n_;
    struct Unmap {
        size_t bytes;
        void operator()(uint8_t* p) const { ::munmap(p, bytes); }
    };
    // The pool is mapped, not allocated: its pages are touched only as buffers are first used
    // (a default pool is 4096 jumbo buffers, 38 MB an end), and malloc's debugging fills
    // (MALLOC_PERTURB_) do not write all of it at every construction and destruction.
    static std::unique_ptr<uint8_t, Unmap> map_pool(size_t bytes) {
        void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        return std::unique_ptr<uint8_t, Unmap>(static_cast<uint8_t*>(p), Unmap{bytes});
    }
    std::unique_ptr<uint8_t, Unmap> mem_;
    std::vector<uint8_t> state_;
    std::vector<uint32_t> free_list_;
    std::vector<RxEntry> ring_;
    size_t ring_head_ = 0;
    size_t ring_count_ = 0;
};

// One direction: frames in flight in delivery order (delivery time, then send order), its random
// generator, faults, filter and counters.
struct MemWire::Dir {
    struct Entry {
        uint64_t t;
        uint64_t order;
        uint32_t slot;  // in the sender's pool
        uint32_t len;
    };
    // std heaps keep the greatest on top: "greater" puts the earliest first.
    static bool later(const Entry& a, const Entry& b) { return a.t != b.t ? a.t > b.t : a.order > b.order; }

    // Most frames arrive in the order they were sent (one latency on a clock that never goes
    // back): they queue in `fifo`, in order by construction, at O(1) a frame. A frame due before
    // the fifo's last (reordered, or sent behind a delayed one) goes to the min-heap. The next
    // arrival is the earlier of the two fronts. Both reserved for two copies of every sender
    // buffer: they never grow.
    std::vector<Entry> fifo;
    size_t fifo_head = 0, fifo_count = 0;
    std::vector<Entry> heap;

    void reserve(size_t n) {
        fifo.resize(n);
        heap.reserve(n);
    }
    bool empty() const { return fifo_count == 0 && heap.empty(); }
    size_t size() const { return fifo_count + heap.size(); }
    // The next arrival; only when !empty().
    const Entry& front() const {
        if (fifo_count == 0) return heap.front();
        const Entry& f = fifo[fifo_head];
        return heap.empty() || later(heap.front(), f) ? f : heap.front();
    }
    Entry pop() {
        if (fifo_count && (heap.empty() || later(heap.front(), fifo[fifo_head]))) {
            const Entry e = fifo[fifo_head];
            if (++fifo_head == fifo.size()) fifo_head = 0;
            --fifo_count;
            return e;
        }
        std::pop_heap(heap.begin(), heap.end(), later);
        const Entry e = heap.back();
        heap.pop_back();
        return e;
    }
    std::mt19937_64 rng;
    FaultConfig faults;
    Filter filter;
    WireStats stats;
    uint64_t seq = 0;
    uint64_t order = 0;
    uint64_t owed = 0;  // draws skipped on a clean direction, made (discarded) before the next needed

    bool clean() const {
        return !filter && faults.loss == 0 && faults.duplicate == 0 && faults.reorder == 0 && faults.corrupt == 0 &&
               faults.delay == 0;
    }

    void push(uint64_t t, uint32_t slot, uint32_t len) {
        const Entry e{t, order++, slot, len};
        size_t last = fifo_head + fifo_count - 1;
        if (last >= fifo.size()) last -= fifo.size();
        if (fifo_count == 0 || t >= fifo[last].t) {  // not before the fifo's last: in order
            size_t tail = fifo_head + fifo_count;
            if (tail >= fifo.size()) tail -= fifo.size();
            fifo[tail] = e;
            ++fifo_count;
            return;
        }
        heap.push_back(e);
        std::push_heap(heap.begin(), heap.end(), later);
    }
};

MemWire::MemWire(const WireConfig& cfg, const Clock& clock) : cfg_(cfg), clock_(clock) {
    if (cfg.mtu == 0) throw std::invalid_argument("MemWire: mtu must be positive");
    if (uint64_t(cfg.frame_cap) < uint64_t(cfg.mtu) + pkt::kEthLen + pkt::kVlanLen)
        throw std::invalid_argument("MemWire: frame_cap must hold mtu + 18 bytes (Ethernet header and an 802.1Q tag)");
    if (cfg.pool_frames == 0 || cfg.pool_frames > (1u << 30)) throw std::invalid_argument("MemWire: pool_frames must lie in [1, 2^30]");
    if (cfg.rx_ring == 0) throw std::invalid_argument("MemWire: rx_ring must be positive");
    for (int d = 0; d < 2; ++d) {
        check_faults(cfg.faults[d]);
        ends_[d] = std::make_unique<EndPort>(*this, d);
        dirs_[d] = std::make_unique<Dir>();
        Dir& D = *dirs_[d];
        D.reserve(size_t(cfg.pool_frames) * 2);
        D.faults = cfg.faults[d];
        std::seed_seq ss{uint32_t(cfg.seed), uint32_t(cfg.seed >> 32), uint32_t(d)};
        D.rng.seed(ss);
    }
}

MemWire::~MemWire() = default;

Port& MemWire::end(int i) {
    check_index(i, "end");
    return *ends_[i];
}

void MemWire::set_faults(int dir, const FaultConfig& f) {
    check_index(dir, "direction");
    check_faults(f);
    dirs_[dir]->faults = f;
}

void MemWire::set_faults(const FaultConfig& f) {
    set_faults(0, f);
    set_faults(1, f);
}

void MemWire::set_filter(int dir, Filter f) {
    check_index(dir, "direction");
    dirs_[dir]->filter = std::move(f);
}

void MemWire::set_tap(Tap t) { tap_ = std::move(t); }

void MemWire::tap(int dir, const uint8_t* frame, uint32_t len, uint64_t t_ns, Event ev) const {
    if (tap_) tap_(dir, frame, len, t_ns, ev);
}

uint64_t MemWire::next_delivery_ns() const {
    uint64_t t = UINT64_MAX;
    for (int d = 0; d < 2; ++d) {
        if (!dirs_[d]->empty()) t = std::min(t, dirs_[d]->front().t);
        t = std::min(t, ends_[d]->ring_head_time());
    }
    return t;
}

bool MemWire::idle() const {
    return dirs_[0]->empty() && dirs_[1]->empty() && ends_[0]->ring_count() == 0 && ends_[1]->ring_count() == 0;
}

const WireStats& MemWire::stats(int dir) const {
    check_index(dir, "direction");
    return dirs_[dir]->stats;
}

uint32_t MemWire::in_flight(int dir) const {
    check_index(dir, "direction");
    return uint32_t(dirs_[dir]->size());
}

uint32_t MemWire::rx_pending(int end) const {
    check_index(end, "end");
    return ends_[end]->ring_count();
}

uint32_t MemWire::pool_free(int end) const {
    check_index(end, "end");
    return ends_[end]->free_count();
}

uint32_t MemWire::pool_frames() const { return cfg_.pool_frames; }

uint16_t MemWire::transmit(int dir, Frame* frames, uint16_t n) {
    EndPort& tx = *ends_[dir];
    // All or nothing: every frame checked (and marked the wire's, which also catches one buffer
    // twice in the burst) before any is taken.
    for (uint16_t i = 0; i < n; ++i) {
        try {
            tx.check_owned(frames[i], "tx_burst");
        } catch (...) {
            for (uint16_t j = 0; j < i; ++j) tx.set_state(frames[j].slot, kApp);
            throw;
        }
        tx.set_state(frames[i].slot, 1);
    }
    deliver_due();

    Dir& D = *dirs_[dir];
    const FaultConfig& fc = D.faults;
    const uint64_t now = clock_.now_ns();
    for (uint16_t i = 0; i < n; ++i) {
        const uint32_t slot = frames[i].slot;
        const uint32_t len = frames[i].len;
        uint8_t* data = tx.buf(slot);
        ++tx.stats_.tx_frames;
        tx.stats_.tx_bytes += len;
        const uint64_t seq = D.seq++;
        ++D.stats.sent;
        tap(dir, data, len, now, Event::sent);

        // The same draws for every frame, in this order, whatever happens to it; on a clean
        // direction (no fault can fire, no filter) they are owed and made when next needed, so
        // that frame `seq` still gets its own numbers once faults are set.
        constexpr uint64_t kDraws = 6;
        double u_loss = 1, u_dup = 1, u_reorder = 1, u_corrupt = 1, u_delay = 1;
        uint64_t r_bit = 0;
        if (D.clean()) {  // per frame: a tap may set faults between two frames
            D.owed += kDraws;
        } else {
            if (D.owed) {
                D.rng.discard(D.owed);
                D.owed = 0;
            }
            u_loss = unit(D.rng), u_dup = unit(D.rng), u_reorder = unit(D.rng);
            u_corrupt = unit(D.rng), u_delay = unit(D.rng);
            r_bit = D.rng();
        }

        const Action a = D.filter ? D.filter(data, len, seq) : Action::pass;
        const uint64_t limit = uint64_t(cfg_.mtu) + pkt::kEthLen + (vlan_tagged(data, len) ? pkt::kVlanLen : 0);
        // Drops: the filter's first, then the receiving NIC's size check, then random loss.
        if (a == Action::drop || (len <= limit && u_loss < fc.loss)) {
            ++D.stats.lost;
            tap(dir, data, len, now, Event::lost);
            tx.release(slot);
            continue;
        }
        if (len > limit) {
            ++D.stats.too_big;
            tap(dir, data, len, now, Event::too_big);
            tx.release(slot);
            continue;
        }
        uint64_t t = now + cfg_.latency_ns;
        if (u_delay < fc.delay) {
            t += fc.delay_ns;
            ++D.stats.delayed;
        }
        if (u_reorder < fc.reorder) {
            t += fc.reorder_ns;
            ++D.stats.reordered;
        }
        if ((a == Action::corrupt || u_corrupt < fc.corrupt) && len > 0) {
            const uint64_t bit = r_bit % (uint64_t(len) * 8);
            data[bit / 8] ^= uint8_t(1u << (bit % 8));
            ++D.stats.corrupted;
        }
        D.push(t, slot, len);
        if (a == Action::duplicate || u_dup < fc.duplicate) {
            D.push(t, slot, len);
            tx.set_state(slot, 2);
            ++D.stats.duplicated;
        }
    }
    return n;
}

void MemWire::deliver_due() {
    deliver(0);
    deliver(1);
}

void MemWire::deliver(int dir) {
    Dir& D = *dirs_[dir];
    EndPort& tx = *ends_[dir];
    EndPort& rx = *ends_[1 - dir];
    const uint64_t now = clock_.now_ns();
    while (!D.empty() && D.front().t <= now) {
        const Dir::Entry e = D.pop();
        const uint8_t* src = tx.buf(e.slot);
        // Handed over: the last copy in flight arrives in the sender's own buffer.
        const bool lend = cfg_.hand_over && tx.holders(e.slot) == 1;
        uint32_t rs = e.slot;
        if (rx.ring_full() || (!lend && !rx.take(rs))) {
            ++D.stats.rx_full;
            ++rx.stats_.rx_dropped;
            tap(dir, src, e.len, e.t, Event::rx_full);
            tx.release(e.slot);
            continue;
        }
        if (lend) {
            tx.set_state(e.slot, kOnRing);
        } else {
            std::memcpy(rx.buf(rs), src, e.len);
            rx.set_state(rs, kOnRing);
            tx.release(e.slot);
        }
        rx.ring_push({e.t, rs, e.len, lend});
        ++D.stats.delivered;
        tap(dir, lend ? src : rx.buf(rs), e.len, e.t, Event::delivered);
    }
}

}  // namespace hcaemu::port
