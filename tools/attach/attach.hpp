// The node assembly the hcaemu CLI, hcaemud and libhcaemu share: DPDK's EAL from the attach
// options, one ethdev, the IP side (ARP, ND, capture) over it, a device whose GID table holds the
// given address, and the engine loop, polled by its owner's thread. No CLI options and no signal
// handling here: a program that takes SIGINT/SIGTERM says so through set_interrupt_check().
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpdk_port/clock.hpp"
#include "dpdk_port/conform.hpp"
#include "dpdk_port/dpdk.hpp"
#include "dpdk_port/inject.hpp"
#include "dpdk_port/net_port.hpp"
#include "dpdk_port/pcap_file.hpp"
#include "hca_model/device.hpp"
#include "tools/cm/agent.hpp"
#include "dpdk_port/steer.hpp"
#include "transport/hca.hpp"
#include "transport/hca_group.hpp"

namespace hcaemu::tools {

struct AttachOptions {
    std::string eal;                 // --eal "ARGS": EAL arguments (default: default_eal_args())
    std::string port;                // --dpdk-port NAME|INDEX: the ethdev (default: the only one)
    std::string ip;                  // --ip A.B.C.D/N or X:X::X/N (required)
    std::optional<pkt::Mac> mac;     // --mac: instead of the ethdev's own
    std::string pcap;                // --pcap FILE: every frame sent and received
    uint32_t link_mtu = 1500;        // --link-mtu N: the Ethernet MTU
    std::vector<std::string> inject; // --inject RULE (repeatable; HCAEMU_INJECT: "RULE; RULE"), docs/inject.md
    bool inject_notes = false;       // note injected frames in the capture even with no rule at start (hcaemud)
    bool conform = false;            // --conform (HCAEMU_CONFORM=1): the conformance monitor on the wire, docs/conform.md
    std::string dcqcn;               // --dcqcn NAME=VALUE[,...] (repeatable; HCAEMU_DCQCN), docs/dcqcn.md
    // Data-path lcores (hcaemud --lcores; not an attach option: only a program that polls every
    // lcore's engine may ask for more than one). N > 1: the ethdev with N queue pairs, an IP side
    // (NetPort) per queue, frames steered by DestQP, one engine per lcore (transport::HcaGroup).
    // --pcap, --inject and --conform watch one queue and are refused then.
    uint32_t lcores = 1;
};

// The attach options' help lines, for a subcommand's --help.
extern const char* const kAttachHelp;

// If argv[i] is an attach option, takes it (and its value, advancing i) and returns 1; 0 if it is
// not one; -1 with `err` if its value is missing or bad.
int take_attach_option(int argc, char** argv, int& i, AttachOptions& o, std::string& err);

// The libraries' blocking waits (Attached::resolve, the daemon client's resolve) give up, with
// "interrupted by a signal", once `check` returns true. The program that owns the signals
// installs it (the CLI: its SIGINT/SIGTERM flag); by default nothing interrupts a wait. `check`
// is called from any thread that waits.
using InterruptCheck = bool (*)();
void set_interrupt_check(InterruptCheck check);  // nullptr: none
bool interrupted();

// An address with a prefix length: IPv4 as its IPv4-mapped GID.
struct IpPrefix {
    pkt::Ip6 gid{};
    uint8_t prefix = 0;
    bool v4 = false;
};
std::optional<IpPrefix> parse_ip_prefix(const std::string& s);
std::optional<pkt::Mac> parse_mac(const std::string& s);
std::string gid_to_string(const pkt::Ip6& gid);  // a.b.c.d for IPv4-mapped, else IPv6 text

class Attached {
public:
    // nullptr and `err` on failure: bad EAL arguments, no such ethdev, the port will not start.
    static std::unique_ptr<Attached> open(const AttachOptions& o, std::string& err);
    ~Attached();
    Attached(const Attached&) = delete;
    Attached& operator=(const Attached&) = delete;

    Device& dev() { return *dev_; }
    transport::Hca& hca() { return *hca0_; }  // lcore 0's engine (QP1, the CM agent)
    uint32_t lcores() const { return group_ ? group_->lcores() : 1; }
    transport::Hca& hca(uint32_t k) { return group_ ? group_->hca(k) : *hca0_; }
    transport::HcaGroup* group() { return group_.get(); }      // nullptr with one lcore
    const port::Steering* steering() const { return steer_.get(); }  // nullptr with one lcore
    port::NetPort& net() { return *net_; }  // queue 0's
    port::DpdkPort& dpdk() { return *dpdk_; }  // link statistics (hcaemud's counters)
    port::InjectPort& inject() { return *inject_; }  // event injection between the ethdev and the IP side
    const port::ConformPort* conform() const { return conform_.get(); }  // nullptr without --conform
    const pkt::Ip6& gid() const { return ip_.gid; }  // our address as a GID
    int gid_index() const { return gid_index_; }       // its index in the GID table
    uint64_t now_ns() const { return clock_.now_ns(); }

    // Polls until the peer's MAC is known (ARP or ND), at most `timeout_ms`. False and `err` if
    // the peer never answered.
    bool resolve(const pkt::Ip6& peer, uint64_t timeout_ms, std::string& err);
    // One engine turn, then the CM agent's timers (cheap when none is due).
    size_t poll() {
        const size_t n = hca0_->poll();
        cm_->poll();
        return n;
    }
    cm::Agent& cm() { return *cm_; }  // the device's CM agent on QP1 (tools/cm)
    // The peer needs no more frames from us (a tool's last out-of-band barrier): the port closes
    // without waiting for a net_memif peer to read them.
    void peer_finished() { dpdk_->skip_close_drain(); }
    // Counters worth a look after a run, one "name value" per line (non-zero ones only).
    std::string stats_text() const;
    // With --conform and violations: their counts per rule and the latest 16, described ("" else).
    // The destructor prints it on stderr.
    std::string conform_report() const;

private:
    Attached() = default;
    port::TscClock clock_;  // steady_clock until the EAL has measured the TSC
    IpPrefix ip_;
    int gid_index_ = 1;
    std::unique_ptr<port::DpdkPort> dpdk_;
    std::unique_ptr<port::ConformPort> conform_;  // between the ethdev and InjectPort: sees the wire
    std::unique_ptr<port::InjectPort> inject_;
    std::unique_ptr<port::NetPort> net_;
    std::unique_ptr<port::PcapWriter> pcap_;
    std::unique_ptr<Device> dev_;
    std::vector<std::unique_ptr<port::NetPort>> nets_;  // queues 1..N-1 (--lcores N)
    std::unique_ptr<port::Steering> steer_;
    std::unique_ptr<transport::Hca> hca_;         // one lcore
    std::unique_ptr<transport::HcaGroup> group_;  // or N
    transport::Hca* hca0_ = nullptr;
    std::unique_ptr<cm::Agent> cm_;  // after the engines: it leaves QP1 before they go
    bool eal_ = false;  // the EAL started: the destructor closes every ethdev it created
};

}  // namespace hcaemu::tools
