// libibverbs.so.1 on libhcaemu: the device list from HCAEMU_DEVICE, opening and closing a device,
// the queries (device, port, GID, P_Key) and the progress thread of each opened HCA.
#include <endian.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tools/attach/attach.hpp"
#include "tools/verbs/verbs.hpp"

#undef ibv_get_device_list
#undef ibv_query_port

namespace hcaemu::verbs {

int set_errno(Status s) {
    errno = to_errno(s);
    return errno;
}

// ---------------------------------------------------------------- progress

void Node::start() {
    stop = false;
    owner_pid = ::getpid();
    if (!local && !probe) {
        auto ch = api->create_comp_channel();
        if (ch.ok()) {
            probe = std::move(ch.value);
            daemon_fd = probe->fd();
        }
    }
    th = std::thread([this] { local ? run_local() : run_daemon(); });
    // Not on the lcore DPDK pinned the program's thread to: a program that busy-polls memory
    // (perftest's *_lat) would leave the engine a time slice per scheduler period (~12 ms).
    if (have_cpus) (void)pthread_setaffinity_np(th.native_handle(), sizeof cpus, &cpus);
}

// A local HCA lives and dies with its program (the kernel's CM and a NIC outlive a process that
// exits). So at exit it keeps working a little longer, as they would: frames it still holds go
// out, the peer's last ACKs and DREQs are answered (a perftest -R client waits for its DREQ's
// DREP after the server exited), and the peer has time to read our last frames from the net_memif
// ring before the socket closes with the process (the PMD resets that ring unread).
void Node::drain_at_exit() {
    using Clock = std::chrono::steady_clock;
    const auto end = Clock::now() + std::chrono::milliseconds(250);
    while (Clock::now() < end) {
        size_t n = 0;
        {
            const std::lock_guard g(mu.m);
            n = turn_engine(*this, true);
        }
        if (!n) std::this_thread::sleep_for(std::chrono::microseconds(50));  // the peer needs the CPU
    }
}

void Node::halt() {
    if (!th.joinable()) return;
    stop = true;
    wake_cv.notify_one();
    th.join();
}

// The HCA is in this process: it moves frames only when its engine turns, and only this thread
// turns it, whether or not the program calls into the library (a server blocked on its TCP
// socket still ACKs). While the program busy-polls a CQ (note_empty_poll) it turns without pause;
// idle, it sleeps in steps of 100 us; a post wakes it at once. Completions the timers make
// (retries exhausted) count in mu.epoch within 16 turns (turn_engine's `force`): 1.6 ms idle.
void Node::run_local() {
    // An lcore id: the mbuf pool's per-lcore cache (dpdk.hpp); without it the PMD's receive refill
    // took 10% of an ib_write_bw -s 65536 server's samples on the pool's ring. Refused: slower only.
    std::string reg_error;
    const bool registered = port::register_thread(reg_error) >= 0;
    int idle = 0;
    uint32_t turns = 0;
    while (!stop.load(std::memory_order_relaxed)) {
        size_t n = 0;
        bool busy = false;
        {
            const std::lock_guard g(mu.m);
            n = turn_engine(*this, ++turns % 16 == 0);
            busy = api->busy();
        }
        thread_turns.fetch_add(1, std::memory_order_relaxed);
        // std::mutex is not fair: a verb waiting for it gets it before the next turn (else a
        // program posting small WRITEs waited for most of the turns: 0.07 against 0.74 Mpps).
        for (int spin = 0; spin < 1000 && mu.waiting.load(std::memory_order_relaxed); ++spin)
            std::this_thread::yield();
        if (n || busy || polled.exchange(false, std::memory_order_relaxed)) idle = 0;
        if (!n && !busy && ++idle >= 50) {
            std::unique_lock l(sleep_mu);
            sleeping = true;
            wake_cv.wait_for(l, std::chrono::microseconds(100));
            sleeping = false;
            continue;
        }
        if (!n && !busy) std::this_thread::yield();
    }
    if (registered) port::unregister_thread();
}

// The daemon makes progress; this thread reads what it sends (completion events, async events)
// as it arrives, so channels and the async fd turn readable without a verbs call.
void Node::run_daemon() {
    while (!stop.load(std::memory_order_relaxed)) {
        if (daemon_fd >= 0) {
            pollfd p{daemon_fd, POLLIN, 0};
            (void)::poll(&p, 1, 20);
        } else {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        const std::lock_guard g(mu);
        api->poll();
        drain();
        if (!api->alive()) {  // the daemon is gone: IBV_EVENT_DEVICE_FATAL, once
            ibv_async_event e{};
            e.event_type = IBV_EVENT_DEVICE_FATAL;
            e.element.port_num = 1;
            post_async(nullptr, e);
            return;
        }
    }
}

namespace {

void signal_fd(int fd) {
    const uint64_t one = 1;
    (void)!::write(fd, &one, sizeof one);
}

}  // namespace

void Node::post_async(ibv_context* owner, const ibv_async_event& e) {
    for (Ctx* c : ctxs)
        if (!owner || c->ibv == owner) {
            if (e.event_type == IBV_EVENT_DEVICE_FATAL) {
                if (c->fatal_sent) continue;
                c->fatal_sent = true;
            }
            c->async.push_back(e);
            signal_fd(c->ibv->async_fd);
        }
}

void Node::drain() {
    for (ChanW* w : chans) {
        CqEvent ev;
        while (w->api->get_cq_event(ev)) {
            // Acked to the api at once: what holds ibv_destroy_cq back is the events the program
            // took with ibv_get_cq_event and has not acked (libibverbs' rule), not queued ones.
            auto* cq = reinterpret_cast<ibv_cq*>(ev.cq_context);
            wrap_of<CqW>(cq)->api->ack_events(1);
            w->q->push_back(cq);
            signal_fd(w->ch.fd);
        }
    }
    AsyncEvent ev;
    while (api->get_async_event(ev)) {
        ibv_async_event e{};
        e.event_type = ibv_event_type(ev.type);
        ibv_context* owner = nullptr;
        switch (ev.type) {
        case EventType::cq_err:
            if (auto it = cqs.find(ev.element); it != cqs.end()) e.element.cq = it->second, owner = it->second->context;
            else continue;
            break;
        case EventType::srq_err:
        case EventType::srq_limit_reached:
            if (auto it = srqs.find(ev.element); it != srqs.end()) e.element.srq = it->second, owner = it->second->context;
            else continue;
            break;
        case EventType::device_fatal:
        case EventType::port_active:
        case EventType::port_err:
        case EventType::gid_change:
            e.element.port_num = int(ev.element);
            break;
        default:  // the QP events carry its QPN
            if (auto it = qps.find(ev.element); it != qps.end()) e.element.qp = it->second, owner = it->second->context;
            else continue;
            break;
        }
        post_async(owner, e);
    }
}

// ---------------------------------------------------------------- devices

namespace {

// One entry of HCAEMU_DEVICE. A `local` HCA is opened once per process (DPDK's EAL starts once)
// and kept until exit; each open of a `unix:` device is a connection of its own.
struct Dev {
    ibv_device dev{};
    std::string spec;
    int index = 0;
    std::shared_ptr<Node> local_node;
    int opens = 0;
};

// Never destroyed: static destructors run before this library's destructor below (exit()'s
// handlers precede _dl_fini), which must still find them.
std::mutex& g_mu = *new std::mutex;
std::vector<std::unique_ptr<Dev>>& g_devs = *new std::vector<std::unique_ptr<Dev>>;  // its local nodes too
bool g_scanned = false;
std::vector<std::weak_ptr<Node>>& g_nodes = *new std::vector<std::weak_ptr<Node>>;  // every node opened, for the unload below

// At exit (or dlclose) before DPDK's own destructors (they run after ours: we depend on them):
// no progress thread may still turn an engine, whether or not the program closed its devices.
__attribute__((destructor)) void stop_progress_at_exit() {
    std::vector<std::shared_ptr<Node>> live;
    {
        const std::lock_guard g(g_mu);
        // Not in a child that forked: the thread and the engine are the parent's; turning the
        // engine's copy here would take frames from the parent's net_memif rings (shared memory).
        for (auto& w : g_nodes)
            if (auto n = w.lock(); n && n->owner_pid == ::getpid()) live.push_back(std::move(n));
    }
    for (auto& n : live) n->halt();
    for (auto& n : live)
        if (n->local && n->api && n->had_qp) n->drain_at_exit();
    // A local HCA is never destroyed: HCAEMU_CONFORM's report goes out here.
    for (auto& n : live)
        if (n->local && n->api) std::fputs(n->api->conform_report().c_str(), stderr);
}

Dev* dev_of(ibv_device* d) {
    for (auto& p : g_devs)
        if (&p->dev == d) return p.get();
    return nullptr;
}

void scan() {
    if (g_scanned) return;
    g_scanned = true;
    const char* env = std::getenv("HCAEMU_DEVICE");
    if (!env) return;
    std::string all = env;
    bool have_local = false;
    size_t pos = 0;
    while (pos <= all.size()) {
        const size_t comma = all.find(',', pos);
        std::string spec = all.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        pos = comma == std::string::npos ? all.size() + 1 : comma + 1;
        if (spec.empty()) continue;
        const bool is_local = spec == "local";
        if (!is_local && (spec.rfind("unix:", 0) != 0 || spec.size() == 5)) {
            std::fprintf(stderr, "libibverbs (hcaemu): HCAEMU_DEVICE: ignoring '%s': use unix:PATH or local\n", spec.c_str());
            continue;
        }
        if (is_local && have_local) {
            std::fprintf(stderr, "libibverbs (hcaemu): HCAEMU_DEVICE: one 'local' HCA per process (DPDK's EAL starts once)\n");
            continue;
        }
        have_local |= is_local;
        auto d = std::make_unique<Dev>();
        d->spec = spec;
        d->index = int(g_devs.size());
        d->dev.node_type = IBV_NODE_CA;
        d->dev.transport_type = IBV_TRANSPORT_IB;
        std::snprintf(d->dev.name, sizeof d->dev.name, "hcaemu%d", d->index);
        std::snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs-hcaemu%d", d->index);
        g_devs.push_back(std::move(d));
    }
}

// The attach options of a `local` HCA, from the variables named as the CLI's options:
// HCAEMU_EAL (--eal), HCAEMU_DPDK_PORT, HCAEMU_IP, HCAEMU_MAC, HCAEMU_PCAP, HCAEMU_LINK_MTU, HCAEMU_INJECT,
// HCAEMU_DCQCN, HCAEMU_CONFORM.
bool attach_from_env(tools::AttachOptions& o, std::string& err) {
    static const struct {
        const char* var;
        const char* opt;
    } kVars[] = {{"HCAEMU_EAL", "--eal"},   {"HCAEMU_DPDK_PORT", "--dpdk-port"}, {"HCAEMU_IP", "--ip"},
                 {"HCAEMU_MAC", "--mac"},   {"HCAEMU_PCAP", "--pcap"},           {"HCAEMU_LINK_MTU", "--link-mtu"},
                 {"HCAEMU_DCQCN", "--dcqcn"}};
    // HCAEMU_CONFORM=1: --conform (docs/conform.md).
    if (const char* cf = std::getenv("HCAEMU_CONFORM"); cf && std::string(cf) == "1") o.conform = true;
    // HCAEMU_INJECT: rules separated by ';', each as one --inject (docs/inject.md).
    if (const char* inj = std::getenv("HCAEMU_INJECT"))
        for (std::string rule : port::split_inject_rules(inj)) {
            std::string opt = "--inject";
            char* argv[] = {opt.data(), rule.data(), nullptr};
            int i = 0;
            std::string e;
            if (tools::take_attach_option(2, argv, i, o, e) != 1) {
                err = "HCAEMU_INJECT: " + e;
                return false;
            }
        }
    for (const auto& v : kVars) {
        const char* val = std::getenv(v.var);
        if (!val) continue;
        std::string opt = v.opt, value = val;
        char* argv[] = {opt.data(), value.data(), nullptr};
        int i = 0;
        std::string e;
        if (tools::take_attach_option(2, argv, i, o, e) != 1) {
            err = std::string(v.var) + ": " + e;
            return false;
        }
    }
    if (o.ip.empty()) {
        err = "HCAEMU_IP=ADDR/LEN is required for the local HCA (its address, as --ip)";
        return false;
    }
    return true;
}

std::shared_ptr<Node> open_node(Dev& d) {
    if (d.local_node) return d.local_node;
    std::string err;
    tools::AttachOptions o;
    std::unique_ptr<api::Context> c;
    cpu_set_t cpus;
    const bool have_cpus = sched_getaffinity(0, sizeof cpus, &cpus) == 0;
    if (d.spec == "local") {
        if (attach_from_env(o, err)) c = api::open_device("local", o, err);
        // DPDK's EAL pinned this (the program's) thread to its main lcore: give it back the CPUs
        // it had. Pinned, a busy-polling thread waited up to a second for its one CPU on a loaded
        // machine while the other was free.
        if (c && have_cpus) (void)sched_setaffinity(0, sizeof cpus, &cpus);
    } else {
        c = api::open_device(d.spec, o, err);
    }
    if (!c) {
        std::fprintf(stderr, "libibverbs (hcaemu): %s: %s\n", d.dev.name, err.c_str());
        return nullptr;
    }
    // DPDK's EAL pinned this thread (the program's) to its lcore. Pinned, a program that busy-polls
    // waits for that one CPU while it holds the node's lock, and the progress thread with it: seen
    // for seconds facing rxe on a loaded machine. The program keeps the CPUs it had.
    if (have_cpus && d.spec == "local") (void)sched_setaffinity(0, sizeof cpus, &cpus);
    auto n = std::make_shared<Node>();
    n->api = std::move(c);
    n->local = d.spec == "local";
    n->cpus = cpus;
    n->have_cpus = have_cpus;
    std::erase_if(g_nodes, [](const std::weak_ptr<Node>& w) { return w.expired(); });
    g_nodes.push_back(n);
    if (n->local) d.local_node = n;
    return n;
}

}  // namespace

}  // namespace hcaemu::verbs

using namespace hcaemu;
using namespace hcaemu::verbs;

extern "C" {

ibv_device** ibv_get_device_list(int* num_devices) {
    const std::lock_guard g(g_mu);
    scan();
    auto** l = static_cast<ibv_device**>(std::calloc(g_devs.size() + 1, sizeof(ibv_device*)));
    if (!l) {
        errno = ENOMEM;
        return nullptr;
    }
    for (size_t i = 0; i < g_devs.size(); ++i) l[i] = &g_devs[i]->dev;
    if (num_devices) *num_devices = int(g_devs.size());
    return l;
}

void ibv_free_device_list(ibv_device** list) { std::free(list); }

const char* ibv_get_device_name(ibv_device* device) { return device ? device->name : nullptr; }

int ibv_get_device_index(ibv_device* device) {
    const std::lock_guard g(g_mu);
    Dev* d = dev_of(device);
    return d ? d->index : -1;
}

__be64 ibv_get_device_guid(ibv_device* device) {
    std::shared_ptr<Node> n;
    {
        const std::lock_guard g(g_mu);
        Dev* d = dev_of(device);
        if (!d) return 0;
        n = open_node(*d);
    }
    if (!n) return 0;
    const std::lock_guard g(n->mu);
    return htobe64(n->api->query_device().node_guid);
}

namespace {

uint64_t inode_of(int fd) {
    struct stat st{};
    return fstat(fd, &st) == 0 ? uint64_t(st.st_ino) : 0;
}

// A context on node `n` whose cmd_fd is `cmd_fd` (owned: closed by ibv_close_device).
ibv_context* new_context(ibv_device* device, const std::shared_ptr<Node>& n, int cmd_fd) {
    auto* w = static_cast<CtxW*>(std::calloc(1, sizeof(CtxW)));
    auto* c = new Ctx;
    c->node = n;
    w->impl = c;
    ibv_context& ic = w->vc.context;
    c->ibv = &ic;
    c->cmd_ino = inode_of(cmd_fd);
    ic.device = device;
    ic.cmd_fd = cmd_fd;
    ic.async_fd = ::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    ic.num_comp_vectors = 1;
    pthread_mutex_init(&ic.mutex, nullptr);
    ic.abi_compat = __VERBS_ABI_IS_EXTENDED;
    w->vc.sz = sizeof(verbs_context);
    fill_ops(w->vc);
    {
        const std::lock_guard g(n->mu);
        n->ctxs.push_back(c);
    }
    {
        const std::lock_guard g(g_mu);  // one starter, against a concurrent open or close
        if (!n->th.joinable()) n->start();
    }
    return &ic;
}

}  // namespace

// cmd_fd: a memfd of the context's own (a kernel provider's is /dev/infiniband/uverbsN), so a
// dup of it passed to ibv_import_device names this context's HCA connection.
ibv_context* ibv_open_device(ibv_device* device) {
    std::shared_ptr<Node> n;
    {
        const std::lock_guard g(g_mu);
        Dev* d = dev_of(device);
        if (!d) {
            errno = ENODEV;
            return nullptr;
        }
        n = open_node(*d);
        if (!n) {
            errno = ENODEV;
            return nullptr;
        }
        ++d->opens;
    }
    return new_context(device, n, memfd_create("hcaemu-verbs-context", MFD_CLOEXEC));
}

// Another context on the connection of the context whose cmd_fd `fd` duplicates; its objects
// (ibv_import_pd, ibv_import_mr) are shared. The fd becomes the new context's cmd_fd.
ibv_context* ibv_import_device(int fd) {
    const uint64_t ino = inode_of(fd);
    std::shared_ptr<Node> n;
    ibv_device* device = nullptr;
    {
        const std::lock_guard g(g_mu);
        for (auto& wn : g_nodes) {
            auto cand = wn.lock();
            if (!cand || !ino) continue;
            const std::lock_guard gn(cand->mu);
            for (Ctx* c : cand->ctxs)
                if (c->cmd_ino == ino) {
                    n = cand;
                    device = c->ibv->device;
                }
        }
        Dev* d = device ? dev_of(device) : nullptr;
        if (!d) {
            errno = EINVAL;  // not a context's cmd_fd (the kernel: EBADF or EINVAL)
            return nullptr;
        }
        ++d->opens;
    }
    return new_context(device, n, fd);
}

int ibv_close_device(ibv_context* context) {
    CtxW* w = ctxw(context);
    Ctx* c = w->impl;
    std::shared_ptr<Node> n = c->node;
    bool last = false, keep = false;
    {
        const std::lock_guard g(n->mu);
        std::erase(n->ctxs, c);
        last = n->ctxs.empty();
        keep = !c->gate.may_free();  // a thread waits in ibv_get_async_event: kept, dead (sysretry.hpp)
    }
    {
        // The last context of an HCA stops its progress thread; a local HCA itself stays until exit.
        const std::lock_guard g(g_mu);
        if (last) n->halt();
        if (Dev* d = dev_of(context->device)) --d->opens;
    }
    if (keep) return 0;  // its Ctx keeps the node (and its mutex) for the waiter
    ::close(context->async_fd);
    if (context->cmd_fd >= 0) ::close(context->cmd_fd);
    pthread_mutex_destroy(&context->mutex);
    delete c;
    std::free(w);
    return 0;
}

}  // extern "C"
