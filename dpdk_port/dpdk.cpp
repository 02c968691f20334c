#include "dpdk_port/dpdk.hpp"

#include <atomic>

extern "C" {
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <rte_alarm.h>
#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_devargs.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
}

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "dpdk_port/fault_guard.hpp"
#include "dpdk_port/prefault.hpp"

namespace hcaemu::port {

namespace {

// The value of devarg `key` in "a=1,key=2" (vdev arguments), or `dflt`.
uint32_t devarg_u32(const std::string& args, const std::string& key, uint32_t dflt) {
    size_t pos = 0;
    while (pos <= args.size()) {
        size_t end = args.find(',', pos);
        if (end == std::string::npos) end = args.size();
        const std::string item = args.substr(pos, end - pos);
        if (item.size() > key.size() && item.compare(0, key.size(), key) == 0 && item[key.size()] == '=') {
            uint32_t v = 0;
            const char* b = item.data() + key.size() + 1;
            const char* e = item.data() + item.size();
            auto r = std::from_chars(b, e, v);
            if (r.ec == std::errc() && r.ptr == e) return v;
            return dflt;
        }
        pos = end + 1;
    }
    return dflt;
}

// The text of devarg `key`, or `dflt`.
std::string devarg_str(const std::string& args, const std::string& key, const std::string& dflt) {
    size_t pos = 0;
    while (pos <= args.size()) {
        size_t end = args.find(',', pos);
        if (end == std::string::npos) end = args.size();
        if (end - pos > key.size() && args.compare(pos, key.size(), key) == 0 && args[pos + key.size()] == '=')
            return args.substr(pos + key.size() + 1, end - pos - key.size() - 1);
        pos = end + 1;
    }
    return dflt;
}

// True when the vdev arguments hold `key=value` exactly.
bool devarg_is(const std::string& args, const std::string& key, const std::string& value) {
    const std::string item = key + "=" + value;
    size_t pos = 0;
    while (pos <= args.size()) {
        size_t end = args.find(',', pos);
        if (end == std::string::npos) end = args.size();
        if (args.compare(pos, end - pos, item) == 0) return true;
        pos = end + 1;
    }
    return false;
}

// Sets a kernel interface's MTU and reads it back (netdevice(7): SIOCSIFMTU, SIOCGIFMTU).
bool set_kernel_mtu(uint32_t if_index, uint32_t mtu, std::string& name, std::string& error) {
    char buf[IF_NAMESIZE] = {};
    if (!if_indextoname(if_index, buf)) {
        error = "no kernel interface with index " + std::to_string(if_index) + ": " + std::strerror(errno);
        return false;
    }
    name = buf;
    const int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (s < 0) {
        error = std::string("socket: ") + std::strerror(errno);
        return false;
    }
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, buf, IF_NAMESIZE);
    ifr.ifr_mtu = int(mtu);
    bool ok = ioctl(s, SIOCSIFMTU, &ifr) == 0;
    if (!ok) error = "setting MTU " + std::to_string(mtu) + " on " + name + ": " + std::strerror(errno);
    if (ok) {
        ok = ioctl(s, SIOCGIFMTU, &ifr) == 0 && uint32_t(ifr.ifr_mtu) == mtu;
        if (!ok) error = "MTU of " + name + " did not become " + std::to_string(mtu);
    }
    ::close(s);
    return ok;
}

// Waits (at most 1 s) until the EAL's interrupt thread has finished the callback it may be running.
// It runs one at a time, so an alarm set now fires after it. net_memif's disconnect runs there and
// sets the link down before it frees the peer's regions: closing the port on seeing the link down
// would free them a second time (`EAL: Error: Invalid memory`, seen in vdev_memif).
void sync_interrupt_thread() {
    static constexpr auto fire = [](void* arg) { static_cast<std::atomic<bool>*>(arg)->store(true); };
    std::atomic<bool> fired{false};
    if (rte_eal_alarm_set(1, fire, &fired) != 0) return;
    for (int i = 0; i < 10000 && !fired.load(); ++i) usleep(100);
    if (!fired.load()) rte_eal_alarm_cancel(fire, &fired);  // waits for a running callback
}

// Runs fn(arg) in the EAL's interrupt thread, as an alarm callback, and waits for it (at most 5 s;
// false if it did not run). net_memif's disconnect on a peer's message runs in that thread, and
// DPDK 22.11's memif_disconnect frees the regions without a lock: a stop or close of ours run
// anywhere else can interleave with it and free them twice (SIGSEGV in rte_eth_dev_stop at a
// perf client's exit, seen under load). Run there, the two are serialised.
bool run_in_interrupt_thread(void (*fn)(void*), void* arg) {
    struct Call {
        void (*fn)(void*);
        void* arg;
        std::atomic<bool> done{false};
    };
    static constexpr auto run = [](void* p) {
        auto* c = static_cast<Call*>(p);
        c->fn(c->arg);
        c->done.store(true, std::memory_order_release);
    };
    Call c{fn, arg};
    if (rte_eal_alarm_set(1, run, &c) != 0) return false;
    for (int i = 0; i < 50000 && !c.done.load(std::memory_order_acquire); ++i) usleep(100);
    if (!c.done.load(std::memory_order_acquire)) rte_eal_alarm_cancel(run, &c);  // waits for a running one
    return c.done.load(std::memory_order_acquire);
}

std::string port_name(uint16_t id) {
    char name[RTE_ETH_NAME_MAX_LEN] = {};
    if (rte_eth_dev_get_name_by_port(id, name) != 0) return "?";
    return name;
}

}  // namespace

struct LscHook {
    // Runs in DPDK's interrupt thread when the PMD reports a link change.
    static int on_lsc(uint16_t, rte_eth_event_type, void* arg, void*) {
        static_cast<DpdkPort*>(arg)->update_link();
        return 0;
    }
};

std::string describe_ports() {
    std::string out;
    uint16_t id;
    RTE_ETH_FOREACH_DEV(id) {
        rte_eth_dev_info di{};
        const bool info = rte_eth_dev_info_get(id, &di) == 0 && di.driver_name;
        if (!out.empty()) out += ", ";
        out += std::to_string(id) + " " + port_name(id);
        if (info) out += std::string(" (") + di.driver_name + ")";
    }
    return out.empty() ? "none" : out;
}

void close_all_ports() {
    uint16_t id;
    RTE_ETH_FOREACH_DEV(id) close_ethdev(id);
}

bool close_ethdev(uint16_t id) {
    rte_eth_dev_info di{};
    if (rte_eth_dev_info_get(id, &di) != 0) return false;
    const rte_devargs* da = di.device ? rte_dev_devargs(di.device) : nullptr;
    const std::string args = da && da->args ? da->args : "";
    const bool memif = di.driver_name && std::string(di.driver_name) == "net_memif";
    const bool memif_server = memif && !devarg_is(args, "role", "client");
    struct Op {
        uint16_t id;
        bool close;
    } op{id, !memif_server};
    static constexpr auto stop_close = [](void* p) {
        const auto* o = static_cast<const Op*>(p);
        (void)rte_eth_dev_stop(o->id);  // -EINVAL/-EBUSY when never started: close anyway
        if (o->close) rte_eth_dev_close(o->id);
    };
    // memif: in the interrupt thread, beside the PMD's own disconnects (run_in_interrupt_thread).
    if (!memif || !run_in_interrupt_thread(stop_close, &op)) stop_close(&op);
    if (!memif_server) return true;
    // DPDK 22.11's memif close frees the listener socket's interrupt handle without unregistering
    // its callback (memif_socket_remove_device): the interrupt thread's next rebuild of its epoll
    // set reads the freed handle (SIGSEGV in rte_intr_fd_get at a server's exit, seen in CI). So a
    // server is only stopped (its peer is disconnected), the interrupt thread is let finish that,
    // and the socket file the close would have removed is removed here. The ethdev stays until exit.
    sync_interrupt_thread();
    if (devarg_is(args, "socket-abstract", "no")) {
        const std::string path = devarg_str(args, "socket", "/run/memif.sock");  // the PMD's default
        if (!path.empty()) ::unlink(path.c_str());
    }
    return false;
}

namespace {
// The devices the EAL arguments asked for (--vdev NAME..., -a/--allow PCI), for find_port's message.
std::string g_asked_devices;
}  // namespace

bool find_port(const std::string& name_or_index, uint16_t& id, std::string& error) {
    const uint16_t n = rte_eth_dev_count_avail();
    if (name_or_index.empty()) {
        if (n == 1) {
            uint16_t p;
            RTE_ETH_FOREACH_DEV(p) {
                id = p;
                return true;
            }
        }
        error = n == 0 ? g_asked_devices.empty()
                             ? "no DPDK port: give one with the EAL arguments (--vdev=net_memif0,... or a PCI device)"
                             : "no DPDK port: DPDK could not create" + g_asked_devices + " (its messages above say why)"
                       : "several DPDK ports, name one: " + describe_ports();
        return false;
    }
    uint32_t num = 0;
    const char* b = name_or_index.data();
    const char* e = b + name_or_index.size();
    auto r = std::from_chars(b, e, num);
    if (r.ec == std::errc() && r.ptr == e) {
        if (num <= UINT16_MAX && rte_eth_dev_is_valid_port(uint16_t(num))) {
            id = uint16_t(num);
            return true;
        }
    } else if (rte_eth_dev_get_port_by_name(name_or_index.c_str(), &id) == 0) {
        return true;
    }
    error = "no DPDK port '" + name_or_index + "'; ports: " + describe_ports();
    return false;
}

std::vector<std::string> default_eal_args(int lcore) {
    return {"hcaemu", "--no-huge", "-m", "512", "--no-pci", "--no-shconf", "-l", std::to_string(lcore),
            "--log-level", "lib.eal:error"};
}

namespace {

// A net_memif server binds its socket file and removes it when closed; a server that was killed
// leaves it, and the next one cannot bind ("Address already in use", the vdev is not created).
// Before the EAL starts: a socket file of a memif server vdev that nobody accepts on is removed
// (and said so), one where a server listens is refused here, with its path.
bool prepare_memif_sockets(const std::vector<std::string>& args, std::string& error) {
    for (size_t i = 0; i < args.size(); ++i) {
        std::string v;
        if (args[i].rfind("--vdev=", 0) == 0)
            v = args[i].substr(7);
        else if (args[i] == "--vdev" && i + 1 < args.size())
            v = args[i + 1];
        if (v.rfind("net_memif", 0) != 0) continue;
        const size_t comma = v.find(',');
        const std::string name = v.substr(0, comma), dev = comma == std::string::npos ? "" : v.substr(comma + 1);
        if (devarg_is(dev, "role", "client") || !devarg_is(dev, "socket-abstract", "no")) continue;
        const std::string path = devarg_str(dev, "socket", "/run/memif.sock");
        struct stat st{};
        sockaddr_un sa{};
        if (path.empty() || path.size() >= sizeof sa.sun_path || ::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode))
            continue;  // nothing there (or not a socket: the PMD's own error says so)
        sa.sun_family = AF_UNIX;
        std::memcpy(sa.sun_path, path.c_str(), path.size());
        const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        const int r = ::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
        const int err = errno;
        if (r == 0) {
            // A live server sends its hello at once; close only after it: a server whose hello
            // finds the connection gone dies of SIGPIPE (the PMD's sendmsg has no MSG_NOSIGNAL).
            pollfd pfd{fd, POLLIN, 0};
            if (::poll(&pfd, 1, 1000) == 1) {
                char hello[256];
                (void)::recv(fd, hello, sizeof hello, MSG_DONTWAIT);
            }
        }
        ::close(fd);
        if (r == 0) {
            error = name + ": socket " + path + " is in use: another memif server listens on it";
            return false;
        }
        if (err == ECONNREFUSED && ::unlink(path.c_str()) == 0)
            std::fprintf(stderr, "%s: removed the stale socket file %s (no memif server listens on it)\n",
                         name.c_str(), path.c_str());
    }
    return true;
}

}  // namespace

bool eal_start(const std::vector<std::string>& args, std::string& error) {
    static bool started = false;
    static std::string first_error = "not started";
    static bool tried = false;
    if (tried) {
        error = first_error;
        return started;
    }
    tried = true;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        std::string d;
        if (a.rfind("--vdev=", 0) == 0 || a.rfind("--allow=", 0) == 0)
            d = a.substr(a.find('=') + 1);
        else if ((a == "--vdev" || a == "-a" || a == "--allow") && i + 1 < args.size())
            d = args[i + 1];
        else if (a.rfind("-a", 0) == 0 && a.size() > 2)
            d = a.substr(2);
        if (!d.empty()) g_asked_devices += " " + d.substr(0, d.find(','));
    }
    if (!prepare_memif_sockets(args, first_error)) {
        error = first_error;
        return false;
    }
    std::vector<std::string> copy = args;  // rte_eal_init may reorder argv: keep our own strings
    std::vector<char*> argv;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int r = rte_eal_init(int(copy.size()), argv.data());
    if (r < 0) {
        first_error = std::string("rte_eal_init failed: ") + rte_strerror(rte_errno);
        error = first_error;
        return false;
    }
    started = true;
    first_error.clear();
    return true;
}

uint64_t tsc_hz() { return rte_get_tsc_hz(); }

int register_thread(std::string& error) {
    if (rte_thread_register() != 0) {
        error = std::string("rte_thread_register: ") + rte_strerror(rte_errno);
        return -1;
    }
    return int(rte_lcore_id());
}

void unregister_thread() { rte_thread_unregister(); }

// Queue q >= 1 of a DpdkPort: its own stash, counters and fault counts, the port's pool and link.
// It reads the link, never updates it nor restarts a memif client (queue 0 does, from its thread).
class DpdkQueue final : public Port {
public:
    DpdkQueue(DpdkPort& p, uint16_t q) : p_(p), q_(q) {}
    ~DpdkQueue() override { release(); }
    DpdkQueue(const DpdkQueue&) = delete;
    DpdkQueue& operator=(const DpdkQueue&) = delete;
    void release() {  // before the pool goes
        if (nstash_) rte_pktmbuf_free_bulk(stash_, nstash_);
        nstash_ = 0;
    }

    bool alloc(Frame& f) override { return p_.alloc_on(stash_, nstash_, stats_, f); }
    uint16_t tx_burst(Frame* frames, uint16_t n) override {
        return link() ? p_.tx_on(q_, frames, n, stats_, fc) : 0;
    }
    uint16_t rx_burst(Frame* frames, uint16_t n) override {
        return link() ? p_.rx_on(q_, frames, n, stats_, fc) : 0;
    }
    void free(Frame& f) override { p_.free(f); }  // the pool is the port's: no per-queue state
    void free_burst(Frame* frames, uint16_t n) override { p_.free_burst(frames, n); }
    pkt::Mac mac() const override { return p_.mac(); }
    uint32_t mtu() const override { return p_.mtu(); }
    PortStats stats() const override { return stats_; }

    DpdkPort::FaultCount fc;

private:
    bool link() const { return !p_.watch_link_ || p_.link_.load(std::memory_order_acquire); }
    DpdkPort& p_;
    const uint16_t q_;
    rte_mbuf* stash_[DpdkPort::kStash] = {};
    unsigned nstash_ = 0;
    PortStats stats_;
};

Port& DpdkPort::queue(uint16_t q) { return q == 0 ? static_cast<Port&>(*this) : *more_.at(q - 1u); }

std::unique_ptr<DpdkPort> DpdkPort::open(uint16_t port_id, const DpdkPortConfig& cfg, std::string& error) {
    if (!rte_eth_dev_is_valid_port(port_id)) {
        error = "no DPDK port " + std::to_string(port_id) + "; ports: " + describe_ports();
        return nullptr;
    }
    rte_eth_dev_info di{};
    int e = rte_eth_dev_info_get(port_id, &di);
    if (e != 0) {
        error = "port " + std::to_string(port_id) + " info: " + rte_strerror(-e);
        return nullptr;
    }
    std::unique_ptr<DpdkPort> p(new DpdkPort());
    p->port_ = port_id;
    p->mtu_ = cfg.mtu;
    p->driver_ = di.driver_name ? di.driver_name : "";
    const std::string where = port_name(port_id) + " (" + p->driver_ + ")";
    const rte_devargs* da = di.device ? rte_dev_devargs(di.device) : nullptr;
    const std::string args = da && da->args ? da->args : "";
    const uint32_t frame = cfg.mtu + 18;  // Ethernet header, one VLAN tag
    // One mbuf holds a whole frame: mtu + Ethernet + one VLAN tag, after the headroom.
    uint32_t room = std::max<uint32_t>(frame, RTE_MBUF_DEFAULT_DATAROOM);
    if (p->driver_ == "net_memif") {
        p->memif_ = true;
        p->memif_client_ = devarg_is(args, "role", "client");  // the PMD's default role is server
        if (!install_fault_guard()) {
            error = where + ": cannot install the SIGSEGV/SIGBUS guard for memif bursts: " + std::strerror(errno);
            return nullptr;
        }
        // memif splits a frame over buffers of bsize bytes (default 2048) and hands chained mbufs.
        const uint32_t bsize = devarg_u32(args, "bsize", 2048);
        if (bsize < frame) {
            error = where + ": bsize=" + std::to_string(bsize) + " is smaller than the largest frame (" +
                    std::to_string(frame) + " bytes for mtu " + std::to_string(cfg.mtu) +
                    "); give bsize>=" + std::to_string(frame) + " (bsize=10240 carries mtu 9000)";
            return nullptr;
        }
    } else if (p->driver_ == "net_af_packet") {
        // TPACKET_V2 rx ring: the kernel puts the frame 66 bytes into each framesz slot (52-byte
        // header + sockaddr_ll, aligned to 16, less the 14-byte MAC header) and cuts what is longer;
        // the PMD's rx queue wants mbufs of framesz - 32 bytes.
        const uint32_t framesz = devarg_u32(args, "framesz", 2048);
        if (framesz < cfg.mtu + 80) {
            error = where + ": framesz=" + std::to_string(framesz) + " carries frames up to " +
                    std::to_string(framesz > 66 ? framesz - 66 : 0) + " bytes; mtu " + std::to_string(cfg.mtu) +
                    " needs framesz>=" + std::to_string(cfg.mtu + 80) +
                    " (a multiple of 16, at most blocksz, a multiple of the page size: framesz=10240,blocksz=20480 "
                    "for mtu 9000)";
            return nullptr;
        }
        // The kernel fills each block with whole frames; the PMD addresses frame i at i * framesz,
        // so the two only agree when blocksz is a multiple of framesz (the PMD does not check).
        const uint32_t blocksz = devarg_u32(args, "blocksz", uint32_t(getpagesize()));
        if (blocksz % framesz != 0) {
            error = where + ": blocksz=" + std::to_string(blocksz) + " is not a multiple of framesz=" +
                    std::to_string(framesz) + ": the PMD would read frames where the kernel did not put them";
            return nullptr;
        }
        room = std::max(room, framesz - 32);
    }
    room += RTE_PKTMBUF_HEADROOM;
    if (room > UINT16_MAX) {
        error = where + ": mtu " + std::to_string(cfg.mtu) + " needs mbufs of " + std::to_string(room) +
                " bytes; DPDK's limit is 65535";
        return nullptr;
    }
    if (cfg.queues == 0 || cfg.queues > di.max_rx_queues || cfg.queues > di.max_tx_queues) {
        error = where + ": " + std::to_string(cfg.queues) + " queue pairs: the PMD has 1 to " +
                std::to_string(std::min(di.max_rx_queues, di.max_tx_queues));
        return nullptr;
    }
    const uint32_t n = uint32_t(cfg.queues) * (uint32_t(cfg.rx_desc) + cfg.tx_desc) + cfg.extra_mbufs;
    const std::string name = "hcaemu_pool_" + std::to_string(port_id);
    const int socket = rte_eth_dev_socket_id(port_id) < 0 ? 0 : rte_eth_dev_socket_id(port_id);
    p->pool_ = rte_pktmbuf_pool_create(name.c_str(), n, 256, 0, uint16_t(room), socket);
    if (!p->pool_) {
        error = where + ": mempool of " + std::to_string(n) + " mbufs of " + std::to_string(room) +
                " bytes: " + rte_strerror(rte_errno);
        return nullptr;
    }
    p->prefaulted_pool_ = prefault_pool(p->pool_);
    rte_eth_conf conf{};
    p->lsc_ = di.dev_flags && (*di.dev_flags & RTE_ETH_DEV_INTR_LSC);
    if (p->lsc_) conf.intr_conf.lsc = 1;
    // net_memif's link is its peer connection but it raises no link interrupt (no
    // RTE_ETH_DEV_INTR_LSC in 22.11): the bursts read its link status, which costs no system call.
    p->watch_link_ = p->lsc_ || p->driver_ == "net_memif";
    e = rte_eth_dev_configure(port_id, cfg.queues, cfg.queues, &conf);
    if (e != 0) {
        error = where + ": configure: " + rte_strerror(-e);
        return nullptr;
    }
    p->open_ = true;  // from here close() undoes it
    const int m = rte_eth_dev_set_mtu(port_id, uint16_t(cfg.mtu));
    if (m == 0) {
        p->mtu_how_ = "ethdev";
    } else if (m == -ENOTSUP) {
        p->mtu_how_ = "none (PMD has no MTU)";  // net_ring; net_memif (bsize checked above)
    } else if (m == -EINVAL && p->driver_ == "net_af_packet" && di.if_index != 0 && cfg.mtu > 1500) {
        std::string ifname;
        std::string why;
        if (!set_kernel_mtu(di.if_index, cfg.mtu, ifname, why)) {
            error = where + ": MTU " + std::to_string(cfg.mtu) + ": the PMD allows frames up to " +
                    std::to_string(di.max_rx_pktlen) + " bytes, and the kernel interface refused: " + why;
            return nullptr;
        }
        p->mtu_how_ = "kernel interface " + ifname;
    } else {
        error = where + ": the PMD refuses MTU " + std::to_string(cfg.mtu) + " (" + rte_strerror(-m) +
                "; its largest frame is " + std::to_string(di.max_rx_pktlen) + " bytes)";
        return nullptr;
    }
    for (uint16_t q = 0; q < cfg.queues && e == 0; ++q) {
        e = rte_eth_rx_queue_setup(port_id, q, cfg.rx_desc, unsigned(socket), nullptr, p->pool_);
        if (e == 0) e = rte_eth_tx_queue_setup(port_id, q, cfg.tx_desc, unsigned(socket), nullptr);
    }
    if (e != 0) {
        error = where + ": queue setup: " + rte_strerror(-e);
        return nullptr;
    }
    p->nqueues_ = cfg.queues;
    for (uint16_t q = 1; q < cfg.queues; ++q) p->more_.push_back(std::make_unique<DpdkQueue>(*p, q));
    if (p->watch_link_) p->link_.store(false);
    if (p->lsc_) {
        e = rte_eth_dev_callback_register(port_id, RTE_ETH_EVENT_INTR_LSC, &LscHook::on_lsc, p.get());
        if (e != 0) {
            error = where + ": link callback: " + rte_strerror(-e);
            return nullptr;
        }
    }
    e = rte_eth_dev_start(port_id);
    // A memif client's start is its connect: with no server listening yet (or its backlog full on
    // a loaded machine) it fails, and is tried again as after a disconnect (reconnect()).
    if (e != 0 && !p->memif_client_) {
        error = where + ": start: " + rte_strerror(-e);
        return nullptr;
    }
    p->started_ = e == 0;
    // The first handshake's time, or the next connect attempt's.
    p->next_reconnect_tsc_ = rte_get_timer_cycles() + (p->started_ ? 5 * rte_get_timer_hz() : rte_get_timer_hz() / 5);
    if (p->watch_link_) p->update_link();  // a peer may have connected before the callback was there
    rte_ether_addr a;
    if (p->driver_ == "net_tap") {
        // net_tap gives the kernel's end of the tap the port's MAC (at creation and at every MAC
        // change). Here the two ends are two nodes: with one MAC they would share the IPv6
        // link-local address (RFC 4291 2.5.1), and the port would answer the kernel's duplicate
        // address detection for it (RFC 4862 5.4). So the port keeps a MAC of its own: --mac, or
        // the kernel's with the last bit flipped; the kernel's is left alone.
        rte_eth_macaddr_get(port_id, &a);
        std::memcpy(p->mac_.data(), a.addr_bytes, 6);
        p->mac_[5] ^= 1;
        if (cfg.mac) p->mac_ = *cfg.mac;
    } else if (cfg.mac) {
        std::memcpy(a.addr_bytes, cfg.mac->data(), 6);
        rte_eth_dev_default_mac_addr_set(port_id, &a);  // where the driver can; frames carry it anyway
        p->mac_ = *cfg.mac;
    } else {
        rte_eth_macaddr_get(port_id, &a);
        std::memcpy(p->mac_.data(), a.addr_bytes, 6);
    }
    return p;
}

void DpdkPort::update_link() {
    rte_eth_link l{};
    if (rte_eth_link_get_nowait(port_, &l) != 0) return;
    const bool up = l.link_status == RTE_ETH_LINK_UP;
    if (link_.exchange(up, std::memory_order_acq_rel) != up) {
        (up ? up_events_ : down_events_).fetch_add(1);
        if (up && memif_) prefault_memif();
        if (!up && memif_client_) next_reconnect_tsc_ = 0;  // the server went away: reconnect now
    }
}

// A new connection's shared regions (rings and buffers, mapped by the PMD at connect), before the
// first burst: once per connect, on the thread that reads the link. Under the fault guard, as a
// burst: the interrupt thread unmaps them if the peer leaves meanwhile.
void DpdkPort::prefault_memif() {
    for (const Mapped& m : find_mappings("/memfd:memif_region_")) {
        uint64_t got = 0;
        if (!guarded([&] { return prefault(m.p, m.n); }, got)) return;
        prefaulted_link_.fetch_add(got, std::memory_order_relaxed);
    }
}

uint64_t prefault_pool(rte_mempool* mp) {
    uint64_t bytes = 0;
    rte_mempool_mem_iter(
        mp,
        [](rte_mempool*, void* opaque, rte_mempool_memhdr* h, unsigned) {
            *static_cast<uint64_t*>(opaque) += prefault(h->addr, h->len);
        },
        &bytes);
    return bytes;
}

bool DpdkPort::link_up() {
    if (watch_link_) {
        if (!lsc_) update_link();
        return link_.load(std::memory_order_acquire);
    }
    rte_eth_link l{};
    return rte_eth_link_get_nowait(port_, &l) == 0 && l.link_status == RTE_ETH_LINK_UP;
}

LinkStats DpdkPort::link_stats() const {
    uint64_t faults = faults0_.faults.load(std::memory_order_relaxed);
    uint64_t lost = faults0_.lost.load(std::memory_order_relaxed);
    for (const auto& q : more_) {
        faults += q->fc.faults.load(std::memory_order_relaxed);
        lost += q->fc.lost.load(std::memory_order_relaxed);
    }
    LinkStats l{up_events_.load(), down_events_.load(), polls_while_down_, reconnects_, faults, lost};
    l.prefaulted_pool_bytes = prefaulted_pool_;
    l.prefaulted_link_bytes = prefaulted_link_.load(std::memory_order_relaxed);
    rte_eth_stats e{};
    if (open_ && rte_eth_stats_get(port_, &e) == 0) {
        l.pmd_ipackets = e.ipackets;
        l.pmd_opackets = e.opackets;
        l.pmd_ierrors = e.ierrors;
        l.pmd_oerrors = e.oerrors;
        l.pmd_imissed = e.imissed;
        l.pmd_rx_nombuf = e.rx_nombuf;
    }
    return l;
}

void DpdkPort::reconnect() {
    // net_memif (22.11) connects a client only in dev_start; its disconnect (interrupt thread) frees
    // the regions and leaves the port stopped in all but name. Let that callback finish first, or
    // dev_stop's own disconnect would free them again (see close()).
    ++reconnects_;
    sync_interrupt_thread();
    if (started_) rte_eth_dev_stop(port_);
    started_ = rte_eth_dev_start(port_) == 0;  // fails while no server listens: tried again later
    // A start that connected leaves the handshake to the interrupt thread: it must not be cut short
    // by the next restart (a stop in the middle of it crashed hcaemu pingpong's client).
    // 5 s covers it; a link that goes down after being up restarts at once (update_link).
    next_reconnect_tsc_ = rte_get_timer_cycles() + (started_ ? 5 * rte_get_timer_hz() : rte_get_timer_hz() / 5);
    update_link();
}

void DpdkPort::on_burst_fault() {
    // The peer's memory is gone: down until the PMD says up again (a reconnect re-initialises the
    // queues). The interrupt thread's own down event is counted when it is read. Any queue's
    // thread: queue 0 reconnects a memif client at its next burst.
    if (link_.exchange(false, std::memory_order_acq_rel)) {
        down_events_.fetch_add(1);
        if (memif_client_) reconnect_now_.store(true, std::memory_order_release);
    }
}

void DpdkPort::close() {
    // -EAGAIN while the callback runs: wait for it (bounded), it must not outlive this object.
    for (int i = 0; lsc_ && i < 10000; ++i) {
        if (rte_eth_dev_callback_unregister(port_, RTE_ETH_EVENT_INTR_LSC, &LscHook::on_lsc, this) != -EAGAIN) break;
        usleep(100);
    }
    lsc_ = false;
    // net_memif: frames still in the shared ring are lost when we disconnect, and a busy peer may
    // not have read our last ones (an ACK it then waits for in vain; a UD SEND is lost for good).
    // Give it time, without polling: 100 ms was not enough on a loaded machine (ibv_ud_pingpong's
    // client never got the server's last SEND). The PMD shows nothing of the peer's progress.
    if (memif_ && started_ && close_drain_ && link_.load(std::memory_order_acquire)) usleep(250'000);
    if (watch_link_ && open_) sync_interrupt_thread();
    if (open_) (void)close_ethdev(port_);  // stops it; a memif server stays open (see close_ethdev)
    else if (started_) rte_eth_dev_stop(port_);
    started_ = false;
    open_ = false;
    if (nstash_) rte_pktmbuf_free_bulk(stash_, nstash_);
    nstash_ = 0;
    for (auto& q : more_) q->release();
    if (pool_) rte_mempool_free(pool_);
    pool_ = nullptr;
}

DpdkPort::~DpdkPort() { close(); }

bool DpdkPort::link_ok() {
    if (watch_link_ && !lsc_ && --until_link_check_ == 0) {
        until_link_check_ = kLinkCheckEvery;
        update_link();
    }
    if (link_.load(std::memory_order_acquire)) return true;
    ++polls_while_down_;
    if (memif_client_) {  // only while down: no cost on the data path
        if (reconnect_now_.exchange(false, std::memory_order_acq_rel)) next_reconnect_tsc_ = 0;
        const uint64_t now = rte_get_timer_cycles();
        if (now >= next_reconnect_tsc_) reconnect();
    }
    return false;
}

bool DpdkPort::alloc(Frame& f) { return alloc_on(stash_, nstash_, stats_, f); }

bool DpdkPort::alloc_on(rte_mbuf** stash, unsigned& nstash, PortStats& st, Frame& f) {
    if (nstash == 0) {
        if (rte_pktmbuf_alloc_bulk(pool_, stash, kStash) == 0) {
            nstash = kStash;
        } else if (rte_mbuf* one = rte_pktmbuf_alloc(pool_)) {  // fewer than kStash left
            stash[nstash++] = one;
        } else {
            ++st.tx_no_buffer;
            return false;
        }
    }
    rte_mbuf* m = stash[--nstash];
    f.handle = m;
    f.data = rte_pktmbuf_mtod(m, uint8_t*);
    f.cap = rte_pktmbuf_tailroom(m);
    f.len = 0;
    return true;
}

uint16_t DpdkPort::tx_burst(Frame* frames, uint16_t n) {
    if (!link_ok()) return 0;
    return tx_on(0, frames, n, stats_, faults0_);
}

uint16_t DpdkPort::tx_on(uint16_t q, Frame* frames, uint16_t n, PortStats& st, FaultCount& fc) {
    rte_mbuf* mb[64];
    uint16_t k = n > 64 ? 64 : n;
    for (uint16_t i = 0; i < k; ++i) {
        auto* m = static_cast<rte_mbuf*>(frames[i].handle);
        m->data_len = uint16_t(frames[i].len);
        m->pkt_len = frames[i].len;
        mb[i] = m;
    }
    uint16_t sent = 0;
    if (!memif_) {
        sent = rte_eth_tx_burst(port_, q, mb, k);
    } else if (!guarded([&] { return rte_eth_tx_burst(port_, q, mb, k); }, sent)) {
        // Which mbufs the PMD had already freed is unknown: all k are left to it (a bounded leak
        // of the pool) rather than risk a double free.
        fc.faults.store(fc.faults.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        fc.lost.store(fc.lost.load(std::memory_order_relaxed) + k, std::memory_order_relaxed);
        on_burst_fault();
        for (uint16_t i = 0; i < k; ++i) frames[i].handle = nullptr;
        return k;
    }
    for (uint16_t i = 0; i < sent; ++i) {
        ++st.tx_frames;
        st.tx_bytes += frames[i].len;
        frames[i].handle = nullptr;  // the driver owns it now
    }
    return sent;
}

uint16_t DpdkPort::rx_burst(Frame* frames, uint16_t n) {
    if (!link_ok()) return 0;
    return rx_on(0, frames, n, stats_, faults0_);
}

uint16_t DpdkPort::rx_on(uint16_t q, Frame* frames, uint16_t n, PortStats& st, FaultCount& fc) {
    rte_mbuf* mb[64];
    const uint16_t want = n > 64 ? 64 : n;
    uint16_t got = 0;
    if (!memif_) {
        got = rte_eth_rx_burst(port_, q, mb, want);
    } else if (!guarded([&] { return rte_eth_rx_burst(port_, q, mb, want); }, got)) {
        fc.faults.store(fc.faults.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        on_burst_fault();  // mbufs the PMD had taken for this burst stay taken
        return 0;
    }
    uint16_t k = 0;
    for (uint16_t i = 0; i < got; ++i) {
        rte_mbuf* m = mb[i];
        if (m->nb_segs != 1) {  // the parser needs a contiguous frame: scattered ones are dropped
            ++st.rx_dropped;
            rte_pktmbuf_free(m);
            continue;
        }
        // cap: the room from the frame's first byte to the buffer's end (not the headroom too).
        frames[k] = Frame{rte_pktmbuf_mtod(m, uint8_t*), m->pkt_len, uint32_t(m->buf_len - m->data_off), 0, m};
        ++st.rx_frames;
        st.rx_bytes += m->pkt_len;
        ++k;
    }
    return k;
}

void DpdkPort::free(Frame& f) {
    if (f.handle) rte_pktmbuf_free(static_cast<rte_mbuf*>(f.handle));
    f.handle = nullptr;
}

void DpdkPort::free_burst(Frame* frames, uint16_t n) {
    rte_mbuf* mb[64];
    while (n) {
        unsigned k = 0;
        for (; n && k < 64; --n, ++frames) {
            if (frames->handle) mb[k++] = static_cast<rte_mbuf*>(frames->handle);
            frames->handle = nullptr;
        }
        rte_pktmbuf_free_bulk(mb, k);
    }
}

bool make_ring_pair(const std::string& name, uint16_t& a, uint16_t& b, std::string& error, uint16_t queues) {
    if (queues == 0 || queues > 16) {
        error = "ring pair: 1 to 16 queues";
        return false;
    }
    std::vector<rte_ring*> ab(queues), ba(queues);  // queue q: a -> b, b -> a
    for (uint16_t q = 0; q < queues; ++q) {
        const std::string sfx = queues == 1 ? "" : std::to_string(q);
        ab[q] = rte_ring_create((name + "_ab" + sfx).c_str(), 4096, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
        ba[q] = rte_ring_create((name + "_ba" + sfx).c_str(), 4096, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
        if (!ab[q] || !ba[q]) {
            error = "ring: " + std::string(rte_strerror(rte_errno));
            return false;
        }
    }
    const int pa = rte_eth_from_rings((name + "_a").c_str(), ba.data(), queues, ab.data(), queues, 0);
    const int pb = rte_eth_from_rings((name + "_b").c_str(), ab.data(), queues, ba.data(), queues, 0);
    if (pa < 0 || pb < 0) {
        error = "net_ring: " + std::string(rte_strerror(rte_errno));
        return false;
    }
    a = uint16_t(pa);
    b = uint16_t(pb);
    return true;
}

}  // namespace hcaemu::port
