#include "dpdk_port/steer.hpp"

#include <stdexcept>

#include "packet/headers.hpp"

namespace hcaemu::port {

namespace {

inline uint16_t be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

template <class T>
void bump(std::atomic<T>& a, T n = 1) {  // one writer: no read-modify-write instruction needed
    a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

}  // namespace

int64_t roce_dest_qp(const uint8_t* p, uint32_t len) {
    uint32_t off = 12;
    if (len < off + 2) return -1;
    uint16_t type = be16(p + off);
    off += 2;
    if (type == pkt::kEthTypeVlan) {
        if (len < off + 4) return -1;
        type = be16(p + off + 2);
        off += 4;
    }
    if (type == pkt::kEthTypeIpv4) {
        if (len < off + 20) return -1;
        const uint32_t ihl = uint32_t(p[off] & 0x0f) * 4;
        if (ihl < 20 || p[off + 9] != pkt::kIpProtoUdp) return -1;
        off += ihl;
    } else if (type == pkt::kEthTypeIpv6) {
        if (len < off + 40 || p[off + 6] != pkt::kIpProtoUdp) return -1;
        off += 40;
    } else {
        return -1;
    }
    if (len < off + 8 + 12 || be16(p + off + 2) != pkt::kRoceV2Port) return -1;
    const uint8_t* bth = p + off + 8;
    return int64_t(uint32_t(bth[5]) << 16 | uint32_t(bth[6]) << 8 | bth[7]);
}

// One (from, to) ring: `from`'s thread is the only producer, `to`'s the only consumer. Each side
// keeps the other's index from its last look and reads the shared one only when that says full
// or empty.
struct Steering::Ring {
    explicit Ring(uint32_t cap) : mask(cap - 1), slots(cap) {}
    const uint32_t mask;
    std::vector<Frame> slots;
    alignas(64) std::atomic<uint32_t> head{0};  // written by the producer
    uint32_t tail_seen = 0;                     // the producer's copy of tail
    alignas(64) std::atomic<uint32_t> tail{0};  // written by the consumer
    uint32_t head_seen = 0;                     // the consumer's copy of head

    bool push(const Frame& f) {
        const uint32_t h = head.load(std::memory_order_relaxed);
        if (h - tail_seen > mask) {
            tail_seen = tail.load(std::memory_order_acquire);
            if (h - tail_seen > mask) return false;
        }
        slots[h & mask] = f;
        head.store(h + 1, std::memory_order_release);
        return true;
    }
    uint16_t pop(Frame* out, uint16_t n) {
        const uint32_t t = tail.load(std::memory_order_relaxed);
        if (head_seen == t) {
            head_seen = head.load(std::memory_order_acquire);
            if (head_seen == t) return 0;
        }
        uint32_t avail = head_seen - t;
        if (avail > n) avail = n;
        for (uint32_t i = 0; i < avail; ++i) out[i] = slots[(t + i) & mask];
        tail.store(t + avail, std::memory_order_release);
        return uint16_t(avail);
    }
};

class Steering::View final : public Port {
public:
    View(Steering& s, uint32_t k, Port& inner) : s_(s), k_(k), inner_(inner) {}

    bool alloc(Frame& f) override { return inner_.alloc(f); }
    uint16_t tx_burst(Frame* frames, uint16_t n) override { return inner_.tx_burst(frames, n); }
    void free(Frame& f) override { inner_.free(f); }
    void free_burst(Frame* frames, uint16_t n) override { inner_.free_burst(frames, n); }
    pkt::Mac mac() const override { return inner_.mac(); }
    uint32_t mtu() const override { return inner_.mtu(); }
    PortStats stats() const override { return inner_.stats(); }
    bool neighbor(const pkt::Ip6& gid, pkt::Mac& mac) override { return inner_.neighbor(gid, mac); }

    // Frames other lcores passed here first (they were read earlier), then this queue's own.
    uint16_t rx_burst(Frame* frames, uint16_t n) override {
        uint16_t got = 0;
        for (uint32_t j = 0; j < s_.n_ && got < n; ++j)
            if (j != k_) got = uint16_t(got + s_.ring(j, k_).pop(frames + got, uint16_t(n - got)));
        if (got) bump(received, uint64_t(got));
        if (got == n) return got;
        const uint16_t read = inner_.rx_burst(frames + got, uint16_t(n - got));
        uint16_t kept = got;
        for (uint16_t i = got; i < got + read; ++i) {
            Frame& f = frames[i];
            const int64_t qpn = roce_dest_qp(f.data, f.len);
            const uint32_t o = qpn < 0 ? k_ : s_.owner(uint32_t(qpn));
            if (qpn < 0) bump(unparsed);
            if (o == k_) {
                frames[kept++] = f;
            } else if (s_.ring(k_, o).push(f)) {
                bump(forwarded);
            } else {
                bump(ring_full);
                inner_.free(f);
            }
        }
        bump(own, uint64_t(kept - got));
        return kept;
    }

    Steering& s_;
    const uint32_t k_;
    Port& inner_;
    std::atomic<uint64_t> own{0}, unparsed{0}, forwarded{0}, received{0}, ring_full{0};
};

Steering::Steering(std::span<Port* const> inner, uint32_t max_qpn, uint32_t ring_frames)
    : n_(uint32_t(inner.size())), owner_(size_t(max_qpn) + 1) {
    if (n_ == 0 || n_ > kMaxLcores) throw std::invalid_argument("Steering: 1 to 8 lcores");
    if (ring_frames == 0 || (ring_frames & (ring_frames - 1)) != 0)
        throw std::invalid_argument("Steering: ring_frames must be a power of two");
    rings_.resize(size_t(n_) * n_);
    for (uint32_t a = 0; a < n_; ++a)
        for (uint32_t b = 0; b < n_; ++b)
            if (a != b) rings_[a * n_ + b] = std::make_unique<Ring>(ring_frames);
    for (uint32_t k = 0; k < n_; ++k) views_.push_back(std::make_unique<View>(*this, k, *inner[k]));
}

Steering::~Steering() {
    for (uint32_t a = 0; a < n_; ++a)
        for (uint32_t b = 0; b < n_; ++b) {
            if (a == b) continue;
            Frame f;
            while (ring(a, b).pop(&f, 1)) views_[b]->free(f);
        }
}

void Steering::set_owner(uint32_t qpn, uint32_t lcore) {
    if (qpn < owner_.size() && lcore < n_) owner_[qpn].store(uint8_t(lcore), std::memory_order_relaxed);
}

Port& Steering::view(uint32_t k) { return *views_.at(k); }

SteerStats Steering::stats(uint32_t k) const {
    const View& v = *views_.at(k);
    auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    // rx_own counts the unparsed frames too (they stay here); report them apart.
    return SteerStats{ld(v.own) - ld(v.unparsed), ld(v.unparsed), ld(v.forwarded), ld(v.received), ld(v.ring_full)};
}

}  // namespace hcaemu::port
