// The DPDK port: the Port interface over one DPDK ethdev (a NIC by PCI address, or a vdev such as
// net_ring, net_memif, net_af_packet, net_tap), one RX and one TX queue, a mempool sized from the
// queue depths, bursts as DPDK's poll-mode drivers move them.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpdk_port/port.hpp"

struct rte_mempool;

namespace hcaemu::port {

// EAL arguments that work on a machine without hugepages or NICs: no PCI scan, no shared
// configuration files, anonymous memory. (--no-huge cannot be combined with --in-memory in
// DPDK 22.11.)
std::vector<std::string> default_eal_args(int lcore = 0);

// Starts DPDK's EAL once per process. Later calls return the first call's result: the EAL cannot
// be started twice. `error` says why it failed.
bool eal_start(const std::vector<std::string>& args, std::string& error);

struct DpdkPortConfig {
    uint16_t rx_desc = 1024;
    uint16_t tx_desc = 1024;
    uint32_t mtu = 1500;          // the largest IP packet; frames up to mtu + 18 bytes
    uint32_t extra_mbufs = 2048;  // beyond the rings: frames the HCA holds (built, in flight)
    std::optional<pkt::Mac> mac;  // the port's MAC instead of the device's (vdevs often have none)
};

class DpdkPort final : public Port {
public:
    // Configures and starts ethdev `port_id`. nullptr and `error` on failure.
    static std::unique_ptr<DpdkPort> open(uint16_t port_id, const DpdkPortConfig& cfg, std::string& error);
    ~DpdkPort() override;  // stops and closes the ethdev, frees the pool
    DpdkPort(const DpdkPort&) = delete;
    DpdkPort& operator=(const DpdkPort&) = delete;

    bool alloc(Frame& f) override;
    uint16_t tx_burst(Frame* frames, uint16_t n) override;
    uint16_t rx_burst(Frame* frames, uint16_t n) override;
    void free(Frame& f) override;
    pkt::Mac mac() const override { return mac_; }
    uint32_t mtu() const override { return mtu_; }
    PortStats stats() const override { return stats_; }
    uint16_t port_id() const { return port_; }

private:
    DpdkPort() = default;
    uint16_t port_ = 0;
    rte_mempool* pool_ = nullptr;
    pkt::Mac mac_{};
    uint32_t mtu_ = 1500;
    PortStats stats_;
    bool started_ = false;
};

// Two ethdevs joined by a pair of rings in this process (DPDK's net_ring): the embedded default
// link, needing no NIC. Returns their port ids.
bool make_ring_pair(const std::string& name, uint16_t& a, uint16_t& b, std::string& error);

}  // namespace hcaemu::port
