// The one interface every wire implements: the DPDK port (a NIC or a vdev), the in-memory wire of
// the tests and `hcaemu sim`, and any later one. Bursts of frame buffers, as DPDK's PMDs move them;
// buffers come from the port's own pool, so the data path allocates nothing.
#pragma once
#include <cstdint>

#include "packet/headers.hpp"

namespace hcaemu::port {

// One frame buffer: `cap` bytes at `data`, of which `len` hold the frame (Ethernet header first,
// no FCS). `slot` identifies the buffer in its port's pool.
struct Frame {
    uint8_t* data = nullptr;
    uint32_t len = 0;
    uint32_t cap = 0;
    uint32_t slot = 0;
    void* handle = nullptr;  // the port's own buffer object (a DPDK rte_mbuf)
};

struct PortStats {
    uint64_t tx_frames = 0;
    uint64_t tx_bytes = 0;
    uint64_t rx_frames = 0;
    uint64_t rx_bytes = 0;
    uint64_t tx_no_buffer = 0;   // alloc() found the pool empty
    uint64_t rx_dropped = 0;     // the port dropped a received frame (queue full, not for us)
};

class Port {
public:
    virtual ~Port() = default;
    // A buffer to build one frame in. False when the pool is empty (back-pressure: try later).
    virtual bool alloc(Frame& f) = 0;
    // Hands frames to the wire. Returns how many were taken, from the front; the rest stay the
    // caller's (to send again or free).
    virtual uint16_t tx_burst(Frame* frames, uint16_t n) = 0;
    // Up to n received frames, oldest first. Each goes back with free() once handled.
    virtual uint16_t rx_burst(Frame* frames, uint16_t n) = 0;
    virtual void free(Frame& f) = 0;
    // free() of n frames at once: a port with a pool puts them back in one bulk operation.
    virtual void free_burst(Frame* frames, uint16_t n) {
        for (uint16_t i = 0; i < n; ++i) free(frames[i]);
    }

    virtual pkt::Mac mac() const = 0;
    virtual uint32_t mtu() const = 0;  // Ethernet MTU: the largest IP packet
    virtual PortStats stats() const = 0;
    // The MAC of a neighbour (a RoCE v2 GID: an IPv6 address, or ::ffff:a.b.c.d). True when known;
    // false otherwise, and a port that resolves addresses (NetPort: ARP, ND) starts asking.
    virtual bool neighbor(const pkt::Ip6& gid, pkt::Mac& mac) {
        (void)gid;
        (void)mac;
        return false;
    }
};

}  // namespace hcaemu::port
