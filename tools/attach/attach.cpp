#include "tools/attach/attach.hpp"

#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

namespace hcaemu::tools {

const char* const kAttachHelp =
    "attaching to a wire (DPDK):\n"
    "  --eal \"ARGS\"        DPDK EAL arguments, e.g. \"--no-huge -m 512 --no-pci --no-shconf -l 0\n"
    "                      --vdev=net_af_packet0,iface=veth0\" (default: no hugepages, no PCI, lcore 0,\n"
    "                      and then a --vdev or a PCI device is needed)\n"
    "  --dpdk-port NAME|N  the ethdev to use (default: the only one)\n"
    "  --ip ADDR/LEN       this HCA's address, IPv4 (its GID is ::ffff:ADDR) or IPv6 (required)\n"
    "  --mac MAC           this HCA's MAC instead of the ethdev's\n"
    "  --link-mtu N        the Ethernet MTU (default 1500: RoCE active MTU 1024)\n"
    "  --pcap FILE         write every frame sent and received to FILE\n"
    "  --inject RULE       event injection (repeatable), e.g. \"drop dir=tx op=WRITE_MIDDLE psn=5\";\n"
    "                      injected frames are noted in FILE.notes (docs/inject.md)\n"
    "  --conform           check every frame on the wire against the spec's rules; the counts\n"
    "                      per rule are link counters conform_* (docs/conform.md)\n"
    "  --dcqcn NAME=VALUE[,NAME=VALUE...]  DCQCN parameters by their mlx5 names (repeatable), e.g.\n"
    "                      \"line_rate=25000,min_time_between_cnps=4\", \"rp_enable=0\" (docs/dcqcn.md)\n";

namespace {

std::atomic<InterruptCheck> g_interrupt{nullptr};

// Whole-string unsigned parse (decimal or 0x hex) within [lo, hi], as the CLI's own options.
std::optional<uint64_t> parse_uint(const std::string& s, uint64_t lo, uint64_t hi) {
    const bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    const char* b = s.data() + (hex ? 2 : 0);
    const char* e = s.data() + s.size();
    uint64_t v = 0;
    auto r = std::from_chars(b, e, v, hex ? 16 : 10);
    if (b == e || r.ec != std::errc() || r.ptr != e || v < lo || v > hi) return std::nullopt;
    return v;
}

}  // namespace

void set_interrupt_check(InterruptCheck check) { g_interrupt.store(check, std::memory_order_relaxed); }

bool interrupted() {
    const InterruptCheck c = g_interrupt.load(std::memory_order_relaxed);
    return c && c();
}

std::optional<IpPrefix> parse_ip_prefix(const std::string& s) {
    const auto slash = s.find('/');
    const std::string addr = s.substr(0, slash);
    IpPrefix r;
    in_addr a4{};
    in6_addr a6{};
    if (inet_pton(AF_INET, addr.c_str(), &a4) == 1) {
        r.v4 = true;
        r.gid = pkt::ipv4_mapped_gid(ntohl(a4.s_addr));
        r.prefix = 24;
    } else if (inet_pton(AF_INET6, addr.c_str(), &a6) == 1) {
        std::memcpy(r.gid.data(), &a6, 16);
        r.v4 = pkt::is_ipv4_mapped(r.gid);
        r.prefix = 64;
    } else {
        return std::nullopt;
    }
    if (slash != std::string::npos) {
        const auto p = parse_uint(s.substr(slash + 1), 0, r.v4 ? 32 : 128);
        if (!p) return std::nullopt;
        r.prefix = uint8_t(*p);
    }
    if (r.gid == pkt::Ip6{} || (r.v4 && pkt::ipv4_of_mapped(r.gid) == 0)) return std::nullopt;
    return r;
}

std::optional<pkt::Mac> parse_mac(const std::string& s) {
    pkt::Mac m{};
    unsigned v[6];
    char tail;
    if (s.size() != 17 ||
        std::sscanf(s.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) != 6)
        return std::nullopt;
    for (int i = 0; i < 6; ++i) m[size_t(i)] = uint8_t(v[i]);
    if (m[0] & 1) return std::nullopt;  // a multicast MAC cannot be a port's own
    return m;
}

std::string gid_to_string(const pkt::Ip6& gid) {
    char b[INET6_ADDRSTRLEN];
    if (pkt::is_ipv4_mapped(gid)) {
        const uint32_t a = htonl(pkt::ipv4_of_mapped(gid));
        inet_ntop(AF_INET, &a, b, sizeof b);
    } else {
        inet_ntop(AF_INET6, gid.data(), b, sizeof b);
    }
    return b;
}

int take_attach_option(int argc, char** argv, int& i, AttachOptions& o, std::string& err) {
    std::string a = argv[i];
    // "--name VALUE" or "--name=VALUE", as the subcommands' own long options.
    const size_t eq = a.rfind("--", 0) == 0 ? a.find('=') : std::string::npos;
    const std::string inline_value = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (eq != std::string::npos) a.resize(eq);
    if (a == "--conform" && eq == std::string::npos) {  // a flag
        o.conform = true;
        return 1;
    }
    // Not "--port": ibv_rc_pingpong and perftest take it for the TCP port.
    if (a != "--eal" && a != "--dpdk-port" && a != "--ip" && a != "--mac" && a != "--pcap" && a != "--link-mtu" &&
        a != "--inject" && a != "--dcqcn")
        return 0;
    if (eq == std::string::npos && i + 1 >= argc) {
        err = a + " needs a value";
        return -1;
    }
    const std::string v = eq == std::string::npos ? argv[++i] : inline_value;
    if (a == "--eal") {
        o.eal = v;
    } else if (a == "--dpdk-port") {
        o.port = v;
    } else if (a == "--ip") {
        if (!parse_ip_prefix(v)) {
            err = "--ip: '" + v + "' is not ADDR/LEN (IPv4 or IPv6)";
            return -1;
        }
        o.ip = v;
    } else if (a == "--mac") {
        o.mac = parse_mac(v);
        if (!o.mac) {
            err = "--mac: '" + v + "' is not a unicast MAC (xx:xx:xx:xx:xx:xx)";
            return -1;
        }
    } else if (a == "--pcap") {
        o.pcap = v;
    } else if (a == "--inject") {
        port::InjectRule r;
        std::string msg;
        if (const port::InjectError e = port::parse_inject_rule(v, r, msg); e != port::InjectError::ok) {
            err = "--inject '" + v + "': " + msg + " (" + port::name(e) + ")";
            return -1;
        }
        o.inject.push_back(v);
    } else if (a == "--dcqcn") {
        transport::DcqcnParams p;
        std::string msg;
        if (!transport::dcqcn_parse(p, v, msg)) {
            err = "--dcqcn '" + v + "': " + msg;
            return -1;
        }
        o.dcqcn += (o.dcqcn.empty() ? "" : ",") + v;
    } else {
        const auto m = parse_uint(v, 576, 9000);
        if (!m) {
            err = "--link-mtu: '" + v + "' is not in 576..9000";
            return -1;
        }
        o.link_mtu = uint32_t(*m);
    }
    return 1;
}

namespace {

// SIGINT and SIGTERM blocked in this thread for the object's life: a signal then is pending and
// arrives when the mask is restored.
class SignalsBlocked {
public:
    SignalsBlocked() {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGINT);
        sigaddset(&s, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &s, &old_);
    }
    ~SignalsBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
    SignalsBlocked(const SignalsBlocked&) = delete;
    SignalsBlocked& operator=(const SignalsBlocked&) = delete;

private:
    sigset_t old_;
};

std::vector<std::string> split_eal(const std::string& s) {
    std::vector<std::string> out{"hcaemu"};
    std::istringstream in(s);
    std::string w;
    while (in >> w) out.push_back(w);
    return out;
}

}  // namespace

Attached::~Attached() {
    // The CM agent leaves QP1 first (it unregisters from the engine), then the engine goes before
    // the device and the port it uses; the capture is flushed last.
    cm_.reset();
    hca_.reset();
    group_.reset();
    steer_.reset();  // frees the frames its rings still hold, through the NetPorts
    if (conform_) std::fputs(conform_report().c_str(), stderr);
    dev_.reset();
    nets_.clear();
    net_.reset();
    inject_.reset();
    conform_.reset();
    dpdk_.reset();
    if (eal_) port::close_all_ports();  // the vdevs no DpdkPort took (a failed open, --dpdk-port)
    if (pcap_) pcap_->flush();
}

std::unique_ptr<Attached> Attached::open(const AttachOptions& o, std::string& err) {
    std::unique_ptr<Attached> a(new Attached());
    if (o.ip.empty()) {
        err = "--ip ADDR/LEN is required: the address this HCA answers ARP/ND for and puts in its GID table";
        return nullptr;
    }
    a->ip_ = *parse_ip_prefix(o.ip);
    if (o.lcores < 1 || o.lcores > port::Steering::kMaxLcores) {
        err = "--lcores " + std::to_string(o.lcores) + ": 1 to " + std::to_string(port::Steering::kMaxLcores);
        return nullptr;
    }
    if (o.lcores > 1 && (!o.pcap.empty() || !o.inject.empty() || o.conform)) {
        err = "--lcores " + std::to_string(o.lcores) + ": --pcap, --inject and --conform see one queue; use one lcore";
        return nullptr;
    }
    // The capture file first: a bad path is the user's mistake, found before DPDK starts.
    if (!o.pcap.empty()) {
        a->pcap_ = std::make_unique<port::PcapWriter>(o.pcap);
        if (!a->pcap_->ok()) {
            err = "--pcap " + a->pcap_->error();
            return nullptr;
        }
    }
    const auto args = o.eal.empty() ? port::default_eal_args() : split_eal(o.eal);
    // The threads DPDK starts (interrupts, control) inherit a mask without SIGINT/SIGTERM: the
    // signal goes to the program's own threads, whose waits check for it (set_interrupt_check).
    const SignalsBlocked blocked;
    if (!port::eal_start(args, err)) {
        err = "DPDK EAL: " + err;
        return nullptr;
    }
    a->eal_ = true;
    a->clock_.start(port::tsc_hz());
    uint16_t id = 0;
    if (!port::find_port(o.port, id, err)) return nullptr;
    port::DpdkPortConfig pc;
    pc.mtu = o.link_mtu;
    pc.mac = o.mac;
    pc.queues = uint16_t(o.lcores);
    a->dpdk_ = port::DpdkPort::open(id, pc, err);
    if (!a->dpdk_) return nullptr;

    port::NetConfig nc;
    // Faster first tries than Linux's 1 s (a vdev link may come up just after the first request),
    // the same 3 s before giving up.
    nc.retry_ns = 250'000'000;
    nc.tries = 12;
    if (a->ip_.v4) {
        nc.ip4 = pkt::ipv4_of_mapped(a->ip_.gid);
        nc.prefix4 = a->ip_.prefix;
    } else {
        nc.ip6 = a->ip_.gid;
        nc.prefix6 = a->ip_.prefix;
    }
    // The HCA -> NetPort (ARP/ND, capture) -> InjectPort -> the ethdev: the capture shows what the
    // HCA sent and received, with notes on injected frames (docs/inject.md).
    // --conform: the monitor right above the ethdev, below the injection: it checks the wire.
    port::Port* wire = a->dpdk_.get();
    if (o.conform) {
        a->conform_ = std::make_unique<port::ConformPort>(*a->dpdk_, a->clock_);
        wire = a->conform_.get();
    }
    a->inject_ = std::make_unique<port::InjectPort>(*wire, a->clock_);
    for (const std::string& r : o.inject) {
        std::string msg;
        if (!a->inject_->add(r, msg)) {
            err = "--inject '" + r + "': " + msg;
            return nullptr;
        }
    }
    a->net_ = std::make_unique<port::NetPort>(*a->inject_, a->clock_, nc);
    if (a->pcap_) {
        a->net_->set_capture(a->pcap_.get());
        if (!o.inject.empty() || o.inject_notes) a->inject_->set_capture(a->pcap_.get());
    }

    PortConfig cfg;
    cfg.mac = a->dpdk_->mac();
    cfg.link_mtu = o.link_mtu;
    if (a->ip_.v4)
        cfg.ipv4[0] = pkt::ipv4_of_mapped(a->ip_.gid);
    else
        cfg.ipv6[0] = a->ip_.gid;
    a->dev_ = std::make_unique<Device>(DeviceAttr{}, cfg);
    if (o.lcores == 1) {
        a->hca_ = std::make_unique<transport::Hca>(*a->dev_, *a->net_, a->clock_);
        a->hca0_ = a->hca_.get();
    } else {
        // Queue k's IP side answers ARP/ND on queue k (a memif peer's queue k asks there).
        std::vector<port::Port*> nets{a->net_.get()};
        for (uint16_t k = 1; k < o.lcores; ++k) {
            a->nets_.push_back(std::make_unique<port::NetPort>(a->dpdk_->queue(k), a->clock_, nc));
            nets.push_back(a->nets_.back().get());
        }
        a->steer_ = std::make_unique<port::Steering>(nets, a->dev_->query_device().max_qp + 2);
        std::vector<port::Port*> views;
        for (uint32_t k = 0; k < o.lcores; ++k) views.push_back(&a->steer_->view(k));
        a->group_ = std::make_unique<transport::HcaGroup>(*a->dev_, views, a->clock_, transport::HcaConfig{},
                                                          a->steer_.get());
        a->hca0_ = &a->group_->hca(0);
    }
    a->cm_ = std::make_unique<cm::Agent>(*a->hca0_);
    if (!o.dcqcn.empty()) {
        transport::DcqcnParams p;
        std::string msg;
        transport::dcqcn_parse(p, o.dcqcn, msg);  // checked by take_attach_option
        for (uint32_t k = 0; k < a->lcores(); ++k) a->hca(k).set_dcqcn(p);
    }
    for (int i = 0;; ++i) {
        GidEntry e;
        if (a->dev_->query_gid(1, i, e) != Status::ok) break;
        if (e.gid == a->ip_.gid) a->gid_index_ = i;
    }
    return a;
}

namespace {

// Why a peer's GID cannot be resolved at all, or "" (RFC 4291 2.7 multicast, 2.5.2/2.5.3
// unspecified and loopback; RFC 1122 3.2.1.3 for IPv4; RFC 5771 IPv4 multicast).
std::string unreachable_reason(const pkt::Ip6& peer, const IpPrefix& own) {
    const bool v4 = pkt::is_ipv4_mapped(peer);
    if (peer == own.gid) return "";  // loopback, as a real HCA's (the port loops it back)
    if (v4) {
        const uint32_t a = pkt::ipv4_of_mapped(peer);
        if (a == 0 || a == 0xFFFFFFFFu || (a >> 28) == 0xE || (a >> 24) == 127) return "it is not a unicast address";
        if (!own.v4) return "this HCA has no IPv4 address (--ip is IPv6)";
    } else {
        static constexpr pkt::Ip6 kLoopback{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
        if (peer == pkt::Ip6{} || peer[0] == 0xFF || peer == kLoopback) return "it is not a unicast address";
        if (own.v4 && !pkt::is_link_local(peer)) return "this HCA has no IPv6 address (--ip is IPv4)";
    }
    return "";
}

}  // namespace

bool Attached::resolve(const pkt::Ip6& peer, uint64_t timeout_ms, std::string& err) {
    if (const std::string why = unreachable_reason(peer, ip_); !why.empty()) {
        err = "cannot send to " + gid_to_string(peer) + ": " + why;
        return false;
    }
    const uint64_t end = clock_.now_ns() + timeout_ms * 1'000'000;
    pkt::Mac mac{};
    for (;;) {
        const port::NeighborState s = net_->resolve(peer, mac);
        if (s == port::NeighborState::reachable) {
            if (group_) group_->set_neighbor(peer, mac);
            else hca0_->set_neighbor(peer, mac);
            return true;
        }
        if (interrupted()) {
            err = "interrupted by a signal";
            return false;
        }
        if (s == port::NeighborState::failed || clock_.now_ns() >= end) {
            err = std::string("no answer from ") + gid_to_string(peer) + " to " +
                  (pkt::is_ipv4_mapped(peer) ? "ARP" : "neighbour solicitation") + " requests";
            return false;
        }
        if (!hca0_->poll()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

std::string Attached::conform_report() const {
    if (!conform_ || !conform_->monitor().stats().violations) return "";
    const port::ConformStats s = conform_->monitor().stats();
    std::string out = "hcaemu --conform: " + std::to_string(s.violations) + " violations in " +
                      std::to_string(s.frames) + " frames on the wire:";
    for (size_t i = 0; i < port::kConfRuleCount; ++i)
        if (const uint64_t n = conform_->monitor().count(port::ConfRule(i)))
            out += std::string(" ") + port::kConfRules[i].id + "=" + std::to_string(n);
    out += "\n";
    std::array<port::Violation, port::ConformPort::kRecent> rec;
    const uint32_t n = conform_->recent(rec);
    for (uint32_t i = n > 16 ? n - 16 : 0; i < n; ++i) out += "  " + port::describe(rec[i], pkt::Lang::en) + "\n";
    return out;
}

std::string Attached::stats_text() const {
    std::string out;
    char b[96];
    const Counters c = dev_->counters_total();
    for (size_t i = 0; i < kCounterCount; ++i)
        if (c.v[i]) {
            std::snprintf(b, sizeof b, "%-28s %llu\n", kCounterName[i], static_cast<unsigned long long>(c.v[i]));
            out += b;
        }
    for (size_t i = 0; i < pkt::kParseErrorCount; ++i)
        if (c.rx_err[i]) {
            std::snprintf(b, sizeof b, "rx_err_%-21s %llu\n", pkt::name(pkt::ParseError(i)),
                          static_cast<unsigned long long>(c.rx_err[i]));
            out += b;
        }
    return out;
}

}  // namespace hcaemu::tools
