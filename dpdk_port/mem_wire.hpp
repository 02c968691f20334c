// An in-memory Ethernet wire joining two ports (ends 0 and 1): the wire of the protocol tests and
// of `hcaemu sim`, which runs two HCAs in virtual time. Frames take `latency_ns` to cross; seeded
// random faults (loss, duplication, reordering, corruption, delay) apply per direction, a filter
// injects exact faults on chosen frames, and a tap sees every frame sent, dropped and delivered.
//
// Buffers: each end owns a pool of `pool_frames` buffers of `frame_cap` bytes, allocated once at
// construction, used for both its transmit (alloc) and its receive side. tx_burst hands the
// sender's buffer to the wire; when the frame arrives (its delivery time <= clock.now_ns()) it is
// copied into a buffer of the receiver's pool and put on the receiver's rx ring (`rx_ring`
// frames), and the sender's buffer returns to the sender's pool. No allocation per frame.
// With `hand_over` the wire copies nothing (as memif's zero-copy mode): a frame arrives in the
// sender's own buffer, which returns to the sender's pool when the receiver frees it; only the
// first of a duplicated frame's two copies is copied into the receiver's pool.
//
// Arrivals are processed at every alloc, tx_burst and rx_burst on either end, in delivery-time
// order (ties in send order). A frame that arrives when the receiver's rx ring is full or, when
// it is to be copied, its pool is empty is dropped (rx_full, and the receiving port's rx_dropped).
//
// Determinism: each direction draws from its own std::mt19937_64 seeded from (seed, direction),
// the same six numbers for every frame sent (filtered or not), so the random faults of frame
// `seq` depend only on the seed, the direction, `seq` and the fault probabilities (on a direction
// with no fault and no filter the draws are skipped and made up for when faults are set).
//
// Single-threaded: the wire, its ports and the clock belong to one thread.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "dpdk_port/clock.hpp"
#include "dpdk_port/port.hpp"

namespace hcaemu::port {

// Probabilities per frame, for one direction. Each fault is drawn independently.
struct FaultConfig {
    double loss = 0;       // the frame is dropped
    double duplicate = 0;  // the frame is delivered twice: two identical copies, back to back
    double reorder = 0;    // held back reorder_ns, so that frames sent after it overtake it
    double corrupt = 0;    // one random bit of the frame (anywhere in it) is flipped
    double delay = 0;      // delivered delay_ns later
    uint64_t delay_ns = 0;
    uint64_t reorder_ns = 0;
};

constexpr uint32_t kMaxJumboMtu = 9216;

struct WireConfig {
    uint64_t latency_ns = 1000;
    uint32_t mtu = 1500;  // IP MTU; frames above mtu + 14 (+ 4 with an 802.1Q tag) are dropped
    uint32_t pool_frames = 4096;  // buffers per end, shared by its transmit and receive sides
    uint32_t frame_cap = kMaxJumboMtu + uint32_t(pkt::kEthLen + pkt::kVlanLen);  // >= mtu + 18
    uint32_t rx_ring = 1024;  // arrived frames per end waiting for rx_burst
    bool hand_over = false;   // deliver in the sender's buffer instead of a copy (above)
    uint64_t seed = 1;
    FaultConfig faults[2];  // [direction]: 0 = end 0 -> end 1, 1 = end 1 -> end 0
    pkt::Mac mac[2] = {pkt::Mac{0x02, 0, 0, 0, 0, 0x01}, pkt::Mac{0x02, 0, 0, 0, 0, 0x02}};
};

// What a filter does with one frame. Random faults still apply to frames it passes,
// duplicates or corrupts.
enum class Action { pass, drop, duplicate, corrupt };

// What the tap sees. The last three are drops, with their reason.
enum class Event { sent, delivered, lost, too_big, rx_full };
constexpr bool is_drop(Event e) { return e == Event::lost || e == Event::too_big || e == Event::rx_full; }
const char* event_name(Event e);

// Per direction. A frame counts once in `sent`; a duplicated one yields two copies, each of
// which ends delivered or rx_full. Always:
//   sent + duplicated == delivered + lost + too_big + rx_full + in_flight(dir)
struct WireStats {
    uint64_t sent = 0;        // frames taken by tx_burst
    uint64_t delivered = 0;   // copies put on the receiver's rx ring
    uint64_t lost = 0;        // dropped by the loss fault or by the filter
    uint64_t duplicated = 0;
    uint64_t reordered = 0;
    uint64_t corrupted = 0;   // corrupt is not a drop: the frame goes on with one bit flipped
    uint64_t delayed = 0;
    uint64_t too_big = 0;     // above mtu + 14 (+ 4 tagged)
    uint64_t rx_full = 0;     // the receiver's rx ring was full or its pool empty
};

class MemWire {
public:
    // Sees frame `seq` (counted per direction from 0, over every frame tx_burst takes) before
    // the random faults; an empty function removes the filter.
    using Filter = std::function<Action(const uint8_t* frame, uint32_t len, uint64_t seq)>;
    // t_ns: the send time for `sent` and the drops at send (lost, too_big); the delivery time
    // for `delivered` and `rx_full`. Bytes as sent (`sent`, `lost`, `too_big`) or as
    // delivered, after any corruption.
    using Tap = std::function<void(int dir, const uint8_t* frame, uint32_t len, uint64_t t_ns, Event ev)>;

    // Throws std::invalid_argument on a bad configuration (probability outside [0, 1],
    // frame_cap < mtu + 18, an empty pool or ring). `clock` must outlive the wire.
    MemWire(const WireConfig& cfg, const Clock& clock);
    ~MemWire();
    MemWire(const MemWire&) = delete;
    MemWire& operator=(const MemWire&) = delete;

    Port& end(int i);  // i = 0 or 1; std::out_of_range otherwise

    void set_faults(int dir, const FaultConfig& f);
    void set_faults(const FaultConfig& f);  // both directions
    void set_filter(int dir, Filter f);
    void set_tap(Tap t);

    // The earliest delivery time of a frame in either direction still in flight or waiting on
    // an rx ring (<= now when something can be received now); UINT64_MAX when none.
    uint64_t next_delivery_ns() const;
    // No frame in flight and none waiting on an rx ring.
    bool idle() const;

    const WireStats& stats(int dir) const;
    uint32_t in_flight(int dir) const;    // copies on the wire, not yet arrived
    uint32_t rx_pending(int end) const;   // frames on the end's rx ring
    uint32_t pool_free(int end) const;    // free buffers in the end's pool (handed-over ones too)
    uint32_t pool_frames() const;

private:
    class EndPort;
    struct Dir;

    void deliver_due();
    void deliver(int dir);
    uint16_t transmit(int dir, Frame* frames, uint16_t n);
    void tap(int dir, const uint8_t* frame, uint32_t len, uint64_t t_ns, Event ev) const;

    WireConfig cfg_;
    const Clock& clock_;
    std::unique_ptr<EndPort> ends_[2];
    std::unique_ptr<Dir> dirs_[2];
    Tap tap_;
};

}  // namespace hcaemu::port
