// Steering: each received frame to the data-path lcore that owns its destination QP, on a port
// with one RX queue per lcore but no steering of its own (net_memif, net_ring, af_packet, tap:
// a frame arrives on the queue its sender chose). Lcore k's view reads queue k, keeps the frames
// of its own QPs and hands each other frame to its owner through a single-producer,
// single-consumer ring for the pair (k, owner): no lock and no atomic read-modify-write per frame,
// and only the BTH's DestQP is read. A NIC with rte_flow would steer on DestQP itself; then
// every frame is already its queue's and the views only pass frames through.
//
// Ownership is a table by QPN written by the control path (set_owner, before the QP's first
// packet) and read by every lcore. Frames whose DestQP cannot be read (short, not IPv4/IPv6 UDP)
// stay on the lcore that read them: its engine drops and counts them as for one lcore. A full
// ring drops the frame (counted), as a NIC's full queue does; RC retransmits it.
//
// Buffers: a frame read on queue k and handled by lcore j is freed through j's view, so the inner
// ports must share one pool (DpdkPort's queues do). Each view belongs to one thread.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dpdk_port/port.hpp"

namespace hcaemu::port {

// A view's counters: written by its own thread only (relaxed stores), readable from any.
struct SteerStats {
    uint64_t rx_own = 0;        // frames read on this lcore's queue that are its own
    uint64_t rx_unparsed = 0;   // frames whose DestQP could not be read: kept here
    uint64_t forwarded = 0;     // frames read here and passed to their owner's ring
    uint64_t received = 0;      // frames other lcores passed to this one
    uint64_t ring_full = 0;     // frames read here and dropped: the owner's ring was full
};

// The destination QP of a RoCE v2 frame (Ethernet, optional 802.1Q tag, IPv4 or IPv6, UDP 4791,
// BTH), or -1 when the frame is too short or not that.
int64_t roce_dest_qp(const uint8_t* p, uint32_t len);

class Steering {
public:
    static constexpr uint32_t kMaxLcores = 8;
    // `inner[k]`: lcore k's queue. `max_qpn`: the largest QPN the table holds (owner 0 beyond).
    // `ring_frames`: each (from, to) ring's size, a power of two.
    Steering(std::span<Port* const> inner, uint32_t max_qpn, uint32_t ring_frames = 4096);
    ~Steering();  // frees what is still in the rings
    Steering(const Steering&) = delete;
    Steering& operator=(const Steering&) = delete;

    uint32_t lcores() const { return n_; }
    // Control path: the QP's frames go to `lcore` from the next burst read on. Any thread.
    void set_owner(uint32_t qpn, uint32_t lcore);
    uint32_t owner(uint32_t qpn) const {
        return qpn < owner_.size() ? owner_[qpn].load(std::memory_order_relaxed) : 0;
    }
    // Lcore k's port: rx_burst returns its own frames (those passed to it first), tx, alloc and
    // free go to queue k.
    Port& view(uint32_t k);
    SteerStats stats(uint32_t k) const;

private:
    class View;
    struct Ring;
    Ring& ring(uint32_t from, uint32_t to) { return *rings_[from * n_ + to]; }
    friend class View;

    uint32_t n_;
    std::vector<std::atomic<uint8_t>> owner_;
    std::vector<std::unique_ptr<Ring>> rings_;  // [from * n + to], from != to
    std::vector<std::unique_ptr<View>> views_;
};

}  // namespace hcaemu::port
