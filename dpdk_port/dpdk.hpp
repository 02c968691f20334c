// The DPDK port: the Port interface over one DPDK ethdev (a NIC by PCI address, or a vdev such as
// net_ring, net_memif, net_af_packet, net_tap), one RX and one TX queue, a mempool sized from the
// queue depths, bursts as DPDK's poll-mode drivers move them.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpdk_port/port.hpp"

struct rte_mempool;
struct rte_mbuf;

namespace hcaemu::port {

class DpdkQueue;

// EAL arguments that work on a machine without hugepages or NICs: no PCI scan, no shared
// configuration files, anonymous memory. (--no-huge cannot be combined with --in-memory in
// DPDK 22.11.)
std::vector<std::string> default_eal_args(int lcore = 0);

// Starts DPDK's EAL once per process. Later calls return the first call's result: the EAL cannot
// be started twice. `error` says why it failed.
bool eal_start(const std::vector<std::string>& args, std::string& error);
// A thread the EAL did not start that moves frames (a library's progress thread, hcaemud's data
// thread) registers for an lcore id: mempools keep a per-lcore cache, and without one every mbuf
// a PMD takes or frees is a compare-and-swap on the pool's ring. The id on success; -1 and `error`
// when the EAL refuses (not started, no lcore id left). unregister_thread() before it ends.
int register_thread(std::string& error);
void unregister_thread();
// The time-stamp counter's rate the EAL measured (rte_get_tsc_hz()), for port::TscClock; 0 before eal_start.
uint64_t tsc_hz();

// The port to use, from what the EAL arguments created: a port number ("0"), an ethdev name
// ("net_memif0", a PCI address), or "" for the only port there is. False and `error` (naming the
// ports there are) when there is no such port, or none, or "" with several.
bool find_port(const std::string& name_or_index, uint16_t& id, std::string& error);

// "0 net_memif0 (net_memif), 1 ..." or "none": for error messages and --help.
std::string describe_ports();

// Stops and closes every ethdev still open, e.g. the vdevs the EAL arguments created that no
// DpdkPort took (a wrong port name, a failed open): a net_memif server removes its socket file
// then, a net_tap its interface. For a process's exit path, after its DpdkPorts are gone.
void close_all_ports();
// Stops one ethdev and closes it, except a net_memif server, which is stopped, its socket file
// removed, and left open until the process exits (DPDK 22.11's memif close leaves a freed handle
// in the interrupt thread). True when it was closed.
bool close_ethdev(uint16_t id);

struct DpdkPortConfig {
    uint16_t rx_desc = 1024;
    uint16_t tx_desc = 1024;
    // The largest IP packet; frames up to mtu + 18 bytes (one VLAN tag). Sets the link MTU
    // (rte_eth_dev_set_mtu) and the mbuf data room, and is checked against the vdev's own limits:
    // net_memif bsize, net_af_packet framesz (see open()).
    uint32_t mtu = 1500;
    uint32_t extra_mbufs = 2048;  // beyond the rings: frames the HCA holds (built, in flight)
    std::optional<pkt::Mac> mac;  // the port's MAC instead of the device's (vdevs often have none)
    // RX/TX queue pairs, one per data-path lcore (queue(q)); refused above the PMD's own limit.
    // The pool is shared by the queues and sized for all of them.
    uint16_t queues = 1;
};

// Link events as the port saw them (from the interrupt thread, hence atomics).
struct LinkStats {
    uint64_t up_events = 0;     // link went up (a memif peer connected)
    uint64_t down_events = 0;   // link went down (the peer disconnected or died)
    uint64_t polls_while_down = 0;  // rx_burst/tx_burst calls answered 0 without touching the PMD
    uint64_t reconnects = 0;  // a memif client's restarts: at a link down, then 200 ms after a failed one, 5 s after a connect
    uint64_t burst_faults = 0;      // memif bursts cut short by a fault in the PMD (peer's memory gone)
    uint64_t frames_lost_in_fault = 0;  // tx frames of those bursts, left to the PMD (never reused)
    // Memory mapped ahead of its first touch (prefault.hpp), so that no burst takes a page fault
    // on a buffer's first use: the pool's at open, each memif connection's shared regions at link up.
    uint64_t prefaulted_pool_bytes = 0;
    uint64_t prefaulted_link_bytes = 0;
    // The PMD's own counters (rte_eth_stats_get): frames it counts in and out, its errors, and
    // receives it refused for want of an mbuf. Beside tx_frames/rx_frames they show frames lost
    // inside the driver.
    uint64_t pmd_ipackets = 0;
    uint64_t pmd_opackets = 0;
    uint64_t pmd_ierrors = 0;
    uint64_t pmd_oerrors = 0;
    uint64_t pmd_imissed = 0;
    uint64_t pmd_rx_nombuf = 0;
};

class DpdkPort final : public Port {
public:
    // Configures and starts ethdev `port_id`. nullptr and `error` on failure: the message names
    // the limit that failed and the devarg that lifts it.
    //
    // MTU: rte_eth_dev_set_mtu(mtu). PMDs without an MTU (net_ring, net_memif: -ENOTSUP) are
    // accepted; net_memif then needs bsize >= mtu + 18, or frames would arrive chained. DPDK 22.11's
    // net_af_packet and net_tap report a 1518/1522-byte max frame, so ethdev refuses any MTU above
    // 1500: for net_af_packet, whose data path has no limit but framesz, the kernel interface's
    // MTU is set instead (SIOCSIFMTU) and framesz must be >= mtu + 80; net_tap, whose tx path
    // drops frames above the ethdev MTU, is refused.
    //
    // Link: where the link is the peer's presence (net_memif) or the PMD signals link changes
    // (RTE_ETH_DEV_INTR_LSC), rx_burst/tx_burst return 0 without calling the PMD while the link is
    // down, and count it; link changes are counted (link_stats). Other ports are always "up".
    // A memif client whose server went away restarts the ethdev (so connects again) from its bursts:
    // at once, then every 200 ms while no server listens; never within 5 s of a start that connected
    // (the handshake runs in the interrupt thread and must not be cut short). memif bursts run under a fault guard (fault_guard.hpp):
    // the PMD's interrupt thread unmaps the peer's memory on disconnect while a burst may be inside
    // the PMD; such a fault ends the burst with 0 frames, is counted, and the link is taken as down.
    static std::unique_ptr<DpdkPort> open(uint16_t port_id, const DpdkPortConfig& cfg, std::string& error);
    ~DpdkPort() override;  // close()
    // Stops and closes the ethdev (a vdev's port id is released) and frees the pool. Idempotent.
    void close();
    DpdkPort(const DpdkPort&) = delete;
    DpdkPort& operator=(const DpdkPort&) = delete;

    // Queue q's own Port (q < queues()): bursts on RX/TX queue q, its own alloc stash and
    // PortStats, buffers from the shared pool (a frame taken on one queue may be freed through
    // any). One thread per queue. queue(0) is this object. The link is the port's: a queue other
    // than 0 answers 0 while it is down and never restarts a memif client (queue 0 does); memif
    // bursts are fault-guarded on every queue.
    Port& queue(uint16_t q);
    uint16_t queues() const { return nqueues_; }

    // Queue 0 (the single-queue port): stats() counts queue 0's frames only.
    bool alloc(Frame& f) override;
    uint16_t tx_burst(Frame* frames, uint16_t n) override;
    uint16_t rx_burst(Frame* frames, uint16_t n) override;
    void free(Frame& f) override;
    void free_burst(Frame* frames, uint16_t n) override;  // rte_pktmbuf_free_bulk
    pkt::Mac mac() const override { return mac_; }
    uint32_t mtu() const override { return mtu_; }
    PortStats stats() const override { return stats_; }
    uint16_t port_id() const { return port_; }
    const std::string& driver() const { return driver_; }
    // How the MTU is enforced: "ethdev", "kernel interface NAME", or "none (PMD has no MTU)".
    const std::string& mtu_how() const { return mtu_how_; }
    // The link now (watched ports), or as the PMD reports it (others; may be a system call).
    bool link_up();
    bool watches_link() const { return watch_link_; }
    // The peer said out of band that it needs no more of our frames: close() skips the wait that
    // lets a net_memif peer read the last ones.
    void skip_close_drain() { close_drain_ = false; }
    LinkStats link_stats() const;

private:
    DpdkPort() = default;
    friend struct LscHook;  // the link-change callback (dpdk.cpp)
    friend class DpdkQueue;  // queues 1..N-1 (dpdk.cpp)
    // Fault counts of one queue's bursts: written by its thread only, read by link_stats().
    struct FaultCount {
        std::atomic<uint64_t> faults{0}, lost{0};
    };
    // One queue's bursts and allocation, shared by queue 0 (this object) and the others.
    bool alloc_on(rte_mbuf** stash, unsigned& nstash, PortStats& st, Frame& f);
    uint16_t tx_on(uint16_t q, Frame* frames, uint16_t n, PortStats& st, FaultCount& fc);
    uint16_t rx_on(uint16_t q, Frame* frames, uint16_t n, PortStats& st, FaultCount& fc);
    void update_link();
    void prefault_memif();
    bool link_ok();  // per burst: false while a watched link is down
    void reconnect();  // memif client: stop and start the ethdev, which connects again
    void on_burst_fault();
    static constexpr uint32_t kLinkCheckEvery = 16;  // bursts between link reads (no LSC)
    // alloc() takes mbufs from the pool kStash at a time (rte_pktmbuf_alloc_bulk): one mempool
    // get per burst of frames instead of one per frame.
    static constexpr unsigned kStash = 32;
    uint16_t port_ = 0;
    rte_mempool* pool_ = nullptr;
    rte_mbuf* stash_[kStash] = {};
    unsigned nstash_ = 0;
    pkt::Mac mac_{};
    uint32_t mtu_ = 1500;
    PortStats stats_;
    bool started_ = false;
    bool open_ = false;
    bool lsc_ = false;
    bool watch_link_ = false;
    uint32_t until_link_check_ = kLinkCheckEvery;
    std::string driver_;
    std::string mtu_how_;
    std::atomic<bool> link_{true};
    std::atomic<uint64_t> up_events_{0};
    std::atomic<uint64_t> down_events_{0};
    uint64_t prefaulted_pool_ = 0;
    std::atomic<uint64_t> prefaulted_link_{0};
    uint64_t polls_while_down_ = 0;
    bool memif_ = false;
    bool memif_client_ = false;
    bool close_drain_ = true;
    uint64_t next_reconnect_tsc_ = 0;
    uint64_t reconnects_ = 0;
    FaultCount faults0_;  // queue 0's
    std::atomic<bool> reconnect_now_{false};  // a fault on queue 1..N-1: queue 0 reconnects at once
    uint16_t nqueues_ = 1;
    std::vector<std::unique_ptr<DpdkQueue>> more_;  // queues 1..N-1
};

// Two ethdevs joined by pairs of rings in this process (DPDK's net_ring): the embedded default
// link, needing no NIC. With `queues` > 1, queue q of one end is joined to queue q of the other.
// Returns their port ids.
bool make_ring_pair(const std::string& name, uint16_t& a, uint16_t& b, std::string& error, uint16_t queues = 1);

// prefault() (prefault.hpp) on every chunk of a mempool's memory; the bytes populated. A pool's
// creation writes only the mbufs' headers (rooms larger than a page leave most pages untouched),
// and DPDK without hugepages backs them with a memfd, page by page.
uint64_t prefault_pool(rte_mempool* mp);

}  // namespace hcaemu::port
