// The IP side of a port: ARP (RFC 826) and IPv6 neighbour discovery (RFC 4861) answered and
// resolved, everything that is not RoCE v2 for us filtered out, and pcap capture. NetPort wraps
// any Port (the DPDK port, the in-memory wire) and is a Port itself, so the HCA's engine loop
// sees only RoCE v2 frames addressed to it.
//
// Receive: rx_burst pulls a burst from the inner port, answers ARP requests and neighbour
// solicitations for our addresses, learns neighbours from ARP requests aimed at us, ARP replies,
// gratuitous ARP, solicitations aimed at us and advertisements, and frees every frame that is not
// RoCE v2 (UDP port 4791) sent to our MAC and our IP address; the RoCE v2 frames go back to the
// caller, unchanged, compacted at the front of its array. 802.1Q-tagged frames pass as RoCE v2
// when they are; tagged ARP and ND are not handled (dropped, counted as not RoCE).
//
// Resolution: resolve() never blocks. A miss sends an ARP request (IPv4-mapped GIDs) or a
// neighbour solicitation to the solicited-node multicast address (other GIDs) and returns
// resolving; rx_burst (and resolve) send the next try every retry_ns; after `tries` unanswered
// requests the entry is failed, and a resolve() at least retry_ns later starts over. A request the
// inner port refused (link down, no buffer) is no try (RFC 4861 7.2.2 counts transmissions): it
// goes again after unsent_retry_ns, and the round fails tries x retry_ns after it began even if
// fewer requests left. A reachable
// entry older than reachable_ns is asked for again and still used meanwhile (RFC 4861 7.3.3, a
// STALE entry): only `tries` unanswered requests fail it (static entries never age).
//
// Capture: every frame received (returned or dropped) and every frame sent is written once, with
// the clock's time. Frames the caller sends are copied before they go to the inner port (after
// tx_burst they belong to the wire), and only the copies of the frames the inner port took are
// written: a frame refused and offered again is written when it is taken.
//
// The neighbour table is fixed (kNeighbors entries, least recently used evicted); nothing is
// allocated after construction except the capture staging area, at set_capture().
// Single-threaded, like the port it wraps.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dpdk_port/clock.hpp"
#include "dpdk_port/pcap_file.hpp"
#include "dpdk_port/port.hpp"
#include "packet/headers.hpp"

namespace hcaemu::port {

struct NetConfig {
    std::optional<uint32_t> ip4;  // host order, as pkt::Ipv4Hdr holds addresses
    uint8_t prefix4 = 24;         // prefixes: kept for an on-link check; unused today (no router)
    std::optional<pkt::Ip6> ip6;  // also answers for the link-local fe80::EUI-64 of the MAC
    uint8_t prefix6 = 64;
    uint64_t retry_ns = 1'000'000'000;  // between ARP requests / solicitations
    uint32_t tries = 3;                 // requests sent before the entry fails
    uint64_t unsent_retry_ns = 1'000'000;  // after a request the inner port refused
    uint64_t reachable_ns = 300'000'000'000ull;
    // Frames to our own address waiting for rx_burst. One engine turn may send tx_budget frames
    // per QP to ourselves and takes back a burst of 32: the ring must hold what a client of a
    // daemon talking to another client sends in a burst (64 lost READ responses and UD SENDs).
    uint32_t loopback_frames = 4096;
};

enum class NeighborState : uint8_t { unknown, resolving, reachable, failed };
inline constexpr const char* kNeighborStateNames[] = {"unknown", "resolving", "reachable", "failed"};
inline const char* neighbor_state_name(NeighborState s) { return kNeighborStateNames[size_t(s)]; }

#define HCAEMU_NET_STATS(X)                                                                      \
    X(arp_rx_requests)      /* ARP requests for our IPv4 address */                              \
    X(arp_tx_replies)                                                                            \
    X(arp_tx_requests)                                                                           \
    X(arp_rx_replies)       /* ARP replies to us */                                              \
    X(arp_rx_gratuitous)    /* sender IP == target IP: updates an entry already known */        \
    X(arp_rx_not_ours)      /* well-formed ARP for another address: no answer */                 \
    X(nd_rx_ns)             /* neighbour solicitations for one of our addresses */               \
    X(nd_tx_na)                                                                                  \
    X(nd_tx_ns)                                                                                  \
    X(nd_rx_na)                                                                                  \
    X(nd_rx_not_ours)       /* well-formed NS/NA for another address, other ICMPv6 */            \
    X(rx_roce)              /* RoCE v2 frames for us, returned by rx_burst */                    \
    X(loopback)             /* RoCE v2 frames to our own MAC and IP: looped to rx, not sent */  \
    X(rx_dropped_not_roce)  /* neither RoCE v2 for us nor ARP/ND (the four below add up to it) */ \
    X(drop_ethertype)       /* not IPv4, IPv6 or ARP, or tagged ARP/ND */                        \
    X(drop_not_udp_4791)    /* IP but not UDP to port 4791 (TCP, other UDP, ...) */              \
    X(drop_other_mac)       /* RoCE v2 (or ARP) to another unicast MAC */                        \
    X(drop_other_ip)        /* RoCE v2 to another IP address */                                  \
    X(rx_dropped_bad)       /* malformed ARP/ND: the bad_ counters below add up to it */         \
    X(bad_truncated)        /* shorter than its headers */                                       \
    X(bad_arp_format)       /* htype != 1, ptype != 0x0800, hlen != 6, plen != 4, op not 1/2 */  \
    X(bad_nd_hop_limit)     /* RFC 4861 7.1.1/7.1.2: hop limit must be 255 */                    \
    X(bad_nd_checksum)      /* ICMPv6 checksum over the pseudo-header */                         \
    X(bad_nd_format)        /* code != 0, option of length 0, multicast target */                \
    X(resolve_started)                                                                           \
    X(resolve_reachable)                                                                         \
    X(resolve_failed)       /* `tries` requests unanswered */                                    \
    X(resolve_stale)        /* a reachable entry aged out: asked for again, used meanwhile */   \
    X(resolve_no_address)   /* no own address of that family to ask from */                     \
    X(neighbor_evictions)                                                                        \
    X(tx_no_buffer)         /* a reply or request not sent: the pool was empty or tx refused */

struct NetStats {
#define HCAEMU_X(name) uint64_t name = 0;
    HCAEMU_NET_STATS(HCAEMU_X)
#undef HCAEMU_X
};
inline constexpr const char* kNetStatNames[] = {
#define HCAEMU_X(name) #name,
    HCAEMU_NET_STATS(HCAEMU_X)
#undef HCAEMU_X
};
inline constexpr uint64_t NetStats::* kNetStatFields[] = {
#define HCAEMU_X(name) &NetStats::name,
    HCAEMU_NET_STATS(HCAEMU_X)
#undef HCAEMU_X
};
inline constexpr size_t kNetStatCount = sizeof(kNetStatNames) / sizeof(kNetStatNames[0]);

class NetPort final : public Port {
public:
    static constexpr uint32_t kNeighbors = 64;
    static constexpr uint16_t kCaptureBurst = 32;
    // A received frame whose stamp may be later than its arrival by more than this gets a note
    // (PcapWriter::note_late) in a capture with notes.
    static constexpr uint64_t kLateNoteNs = 2'000;

    // `inner` and `clock` must outlive the NetPort.
    NetPort(Port& inner, const Clock& clock, const NetConfig& cfg);
    ~NetPort() override;
    NetPort(const NetPort&) = delete;
    NetPort& operator=(const NetPort&) = delete;

    bool alloc(Frame& f) override { return inner_.alloc(f); }
    // A RoCE v2 frame to our own MAC and address is not sent: its buffer goes to a fixed ring that
    // rx_burst returns first, as an HCA loops traffic between two of its own QPs (counted
    // `loopback`, captured once). A full ring refuses the frame like a full tx queue.
    uint16_t tx_burst(Frame* frames, uint16_t n) override;
    uint16_t rx_burst(Frame* frames, uint16_t n) override;
    void free(Frame& f) override { inner_.free(f); }
    void free_burst(Frame* frames, uint16_t n) override { inner_.free_burst(frames, n); }
    pkt::Mac mac() const override { return mac_; }
    uint32_t mtu() const override { return inner_.mtu(); }
    PortStats stats() const override { return inner_.stats(); }

    // Non-blocking: reachable -> `mac` set; otherwise starts or continues resolution.
    NeighborState resolve(const pkt::Ip6& gid, pkt::Mac& mac);
    bool neighbor(const pkt::Ip6& gid, pkt::Mac& mac) override;  // resolve() == reachable
    void set_capture(PcapWriter* w);  // nullptr stops capturing
    const NetStats& net_stats() const { return st_; }
    void add_static(const pkt::Ip6& gid, const pkt::Mac& mac);

    // The entry's state without starting anything (unknown when absent).
    NeighborState state(const pkt::Ip6& gid) const;
    // When the next retry or failure is due (UINT64_MAX when nothing resolves): a virtual-time
    // loop jumps no further than this.
    uint64_t next_due_ns() const { return next_due_; }
    const pkt::Ip6& link_local() const { return ll_; }

private:
    struct Entry {
        pkt::Ip6 ip{};
        pkt::Mac mac{};
        NeighborState state = NeighborState::unknown;
        bool used = false;
        bool is_static = false;
        bool probing = false;       // reachable but aged: being asked for again
        uint32_t sent = 0;          // requests sent in this round
        uint64_t due_ns = 0;        // resolving: the next try; failed: when a restart is allowed
        uint64_t round_end_ns = 0;  // the round fails then, however few requests could be sent
        uint64_t confirmed_ns = 0;  // reachable since
        uint64_t used_ns = 0;       // LRU
    };

    // Requests due on a timer: resolving, or reachable and being verified.
    static bool waiting(const Entry& e) {
        return e.used && (e.state == NeighborState::resolving || (e.state == NeighborState::reachable && e.probing));
    }
    void handle(Frame& f);  // one received frame that is not returned: consumed here
    bool is_roce_for_us(const uint8_t* p, uint32_t len);
    void rx_arp(const uint8_t* p, uint32_t len);
    void rx_icmp6(const uint8_t* p, uint32_t len);
    bool ours6(const pkt::Ip6& a) const;
    void bad(uint64_t NetStats::* reason);
    void not_roce(uint64_t NetStats::* reason);

    Entry* find(const pkt::Ip6& ip);
    const Entry* find(const pkt::Ip6& ip) const;
    Entry& insert(const pkt::Ip6& ip);  // evicts the least recently used non-static entry
    void learn(const pkt::Ip6& ip, const pkt::Mac& mac, bool create);
    void start_round(Entry& e);
    void send_request(Entry& e);
    void run_timers();
    void recompute_due();

    bool send_arp(uint16_t op, const pkt::Mac& eth_dst, const pkt::Mac& tha, uint32_t tpa);
    bool send_nd(uint8_t type, uint8_t flags, const pkt::Ip6& src, const pkt::Ip6& dst, const pkt::Mac& eth_dst,
                 const pkt::Ip6& target);
    bool send_ns(const pkt::Ip6& target);
    bool send_na(const pkt::Ip6& src, const pkt::Ip6& dst, const pkt::Mac& eth_dst, const pkt::Ip6& target, bool solicited);
    uint16_t tx_inner(Frame* frames, uint16_t n);  // to the inner port, captured
    bool ours(const pkt::Ip6& gid) const;          // one of our addresses
    bool send_own(Frame& f);  // captures and transmits one frame of our own; frees it if refused
    void capture(const uint8_t* p, uint32_t len);
    void capture_rx(const Frame& f, uint64_t stamp, uint64_t late);

    Port& inner_;
    const Clock& clock_;
    NetConfig cfg_;
    pkt::Mac mac_;
    pkt::Ip6 ll_{};  // fe80::EUI-64 (RFC 4291 appendix A)
    NetStats st_;
    std::array<Entry, kNeighbors> table_{};
    uint64_t next_due_ = UINT64_MAX;
    PcapWriter* cap_ = nullptr;
    std::unique_ptr<uint8_t[]> stage_;  // kCaptureBurst frames of stage_cap_ bytes
    uint32_t stage_cap_ = 0;
    uint32_t stage_len_[kCaptureBurst] = {};
    uint64_t drained_ns_ = 0;  // capturing: when a poll last left the inner port's ring empty
    std::vector<Frame> loop_;  // cfg_.loopback_frames; free-running head and tail
    uint32_t loop_head_ = 0, loop_tail_ = 0;
};

// The ICMPv6 checksum (RFC 4443 2.3) of `len` bytes at `icmp` between `src` and `dst`: the one's
// complement sum over the pseudo-header (RFC 8200 8.1) and the message. A message whose checksum
// field is right sums to 0.
uint16_t icmp6_checksum(const pkt::Ip6& src, const pkt::Ip6& dst, const uint8_t* icmp, uint32_t len);
// ff02::1:ffXX:XXXX for `a` (RFC 4291 2.7.1) and its Ethernet address 33:33:ff:XX:XX:XX (RFC 2464 7).
pkt::Ip6 solicited_node(const pkt::Ip6& a);
pkt::Mac multicast_mac(const pkt::Ip6& a);
pkt::Ip6 link_local_of(const pkt::Mac& m);

}  // namespace hcaemu::port
