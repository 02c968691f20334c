// librdmacm.so.1 on libhcaemu: the devices, event channels, and the thread per device that moves
// the CM's events to the channels of the ids they are for.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "tools/libhcaemu/sysretry.hpp"
#include "tools/rdmacm/rdmacm.hpp"

namespace hcaemu::rdmacm {

namespace {

// Never destroyed: the library's destructor (stop_pollers) runs after static destructors.
Core& g_core = *new Core;
DeviceSource& g_source = *new DeviceSource(open_real_devices);

void signal_fd(int fd) {
    const uint64_t one = 1;
    (void)!::write(fd, &one, sizeof one);
}

bool needs_info(api::CmEventType t) {
    using T = api::CmEventType;
    return t == T::addr_resolved || t == T::route_resolved || t == T::connect_request;
}

// Under Core::mu: the event goes to the channel of the id it is for. A connect request makes the
// new id (on the listener's channel, with its context); false: nobody takes it (a connect request
// whose listener is gone: its CM id is `orphan`).
bool route(Core& c, EventW* e, uint32_t& orphan) {
    Device& d = *e->dev;
    if (e->cm.type == api::CmEventType::connect_request) {
        auto it = c.ids.find({&d, e->cm.listen_id});
        if (it == c.ids.end()) {
            orphan = e->cm.id;
            return false;
        }
        IdState& l = *it->second;
        IdW* n = new_id(l.w->id.channel, l.w->id.context, l.w->id.ps, l.w->id.qp_type, true);
        if (!n) {
            orphan = e->cm.id;
            return false;
        }
        n->st->subs.push_back({&d, e->cm.id});
        c.ids[{&d, e->cm.id}] = n->st;
        choose_device(*n->st, d);
        if (e->have_info) apply_info(&n->id, e->info, true);
        e->owner = &l;
        e->id = n;
        e->listen = l.w;
        push_event(chan_of(&l.w->id), e);
        return true;
    }
    auto it = c.ids.find({&d, e->cm.id});
    if (it == c.ids.end()) return false;  // destroyed since: its events go with it
    e->owner = it->second;
    e->id = it->second->w;
    push_event(chan_of(&e->id->id), e);
    return true;
}

// One pass: every event the CM has queued, to its channel.
size_t poll_once(Device& d) {
    std::vector<EventW*> got;
    if (api::Cm* cm = d.lock()) {
        api::CmEvent ev;
        while (cm->get_event(ev)) {
            auto* e = new EventW;
            e->cm = ev;
            e->dev = &d;
            if (needs_info(ev.type)) e->have_info = cm->query(ev.id, e->info) == 0;
            got.push_back(e);
        }
    }
    d.unlock();
    if (got.empty()) return 0;
    std::vector<uint32_t> orphans;
    {
        Core& c = core();
        const std::lock_guard g(c.mu);
        for (EventW* e : got) {
            uint32_t orphan = 0;
            if (debug())
                std::fprintf(stderr, "librdmacm (hcaemu): CM event %d status %d on id %u (listener %u)\n",
                             int(e->cm.type), e->cm.status, e->cm.id, e->cm.listen_id);
            if (!route(c, e, orphan)) {
                if (debug()) std::fprintf(stderr, "librdmacm (hcaemu): no id for it: dropped\n");
                delete e;
                if (orphan) orphans.push_back(orphan);
            }
        }
    }
    for (uint32_t id : orphans)
        (void)with_cm(d, [id](api::Cm& cm) {
            uint32_t n = 0;
            return cm.destroy_id(id, n);  // rejects the connection (the CM's rule for a dropped request)
        });
    return got.size();
}

void run_poller(Device* d) {
    while (!d->stop.load(std::memory_order_relaxed)) {
        pollfd p[2] = {{d->wake_fd, POLLIN, 0}, {d->cm_fd, POLLIN, 0}};
        const int n = ::poll(p, d->cm_fd >= 0 ? 2 : 1, d->cm_fd >= 0 ? 100 : 10);
        if (d->stop.load(std::memory_order_relaxed)) break;
        const size_t moved = poll_once(*d);
        // An fd that stays readable with nothing queued must not spin this thread.
        if (n > 0 && !moved && !(p[0].revents & POLLIN)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

}  // namespace

Core& core() { return g_core; }

namespace {
bool stale(const void* p, const char* what) {
    {
        const std::lock_guard g(core().mu);
        if (p && core().live.count(p)) return false;
    }
    core().stale_handles.fetch_add(1, std::memory_order_relaxed);
    if (debug()) std::fprintf(stderr, "rdmacm: %s %p is not a live one of this library: EINVAL\n", what, p);
    errno = EINVAL;
    return true;
}
}  // namespace

bool stale_id(const rdma_cm_id* id) { return stale(id, "rdma_cm_id"); }
bool stale_channel(const rdma_event_channel* ch) { return stale(ch, "rdma_event_channel"); }

void set_device_source(DeviceSource src) { g_source = std::move(src); }

int init() {
    Core& c = core();
    const std::lock_guard g(c.mu);
    if (c.opened) return 0;
    std::vector<std::unique_ptr<Device>> devs;
    if (!g_source(devs) || devs.empty()) return err(ENODEV);  // as librdmacm with no RDMA device
    c.devs = std::move(devs);
    c.opened = true;
    for (auto& d : c.devs) {
        api::Cm* cm = d->lock();
        d->has_cm = cm != nullptr;
        d->cm_fd = cm ? cm->fd() : -1;
        d->unlock();
        if (d->has_cm) start_poller(*d);
    }
    return 0;
}

int with_cm(Device& d, const std::function<int(api::Cm&)>& fn) {
    api::Cm* cm = d.lock();
    const int r = cm ? fn(*cm) : ENODEV;
    d.unlock();
    return r;
}

void start_poller(Device& d) {
    d.wake_fd = ::eventfd(0, EFD_CLOEXEC);
    d.poller = std::thread(run_poller, &d);
}

void stop_pollers() {
    Core& c = core();
    std::vector<Device*> ds;
    {
        const std::lock_guard g(c.mu);
        for (auto& d : c.devs) ds.push_back(d.get());
    }
    for (Device* d : ds) {
        if (!d->poller.joinable()) continue;
        d->stop = true;
        signal_fd(d->wake_fd);
        d->poller.join();
    }
}

// At exit (or dlclose), before libibverbs' own destructor stops the HCAs' progress: no poller may
// still call into a device.
__attribute__((destructor)) static void stop_at_exit() { stop_pollers(); }

ChannelW* new_channel() {
    const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    if (fd < 0) return nullptr;
    auto* c = static_cast<ChannelW*>(std::calloc(1, sizeof(ChannelW)));
    if (!c) {
        ::close(fd);
        errno = ENOMEM;
        return nullptr;
    }
    c->ch.fd = fd;
    c->q = new std::deque<EventW*>;
    const std::lock_guard g(core().mu);
    core().live.insert(&c->ch);
    return c;
}

void free_channel(ChannelW* c) {
    {
        const std::lock_guard g(core().mu);
        core().live.erase(&c->ch);
        for (EventW* e : *c->q) delete e;
        c->q->clear();
        if (!c->gate.may_free()) return;  // a thread waits in get_event: kept, dead (sysretry.hpp)
    }
    ::close(c->ch.fd);
    delete c->q;
    std::free(c);
}

void push_event(ChannelW* c, EventW* e) {
    c->q->push_back(e);
    signal_fd(c->ch.fd);
}

std::vector<IdW*> drop_events_of(IdState* st) {
    std::vector<IdW*> unreported;
    ChannelW* ch = chan_of(&st->w->id);
    for (EventW*& e : *ch->q)
        if (e && e->owner == st) {
            if (e->cm.type == api::CmEventType::connect_request) unreported.push_back(e->id);
            delete e;
            e = nullptr;  // its count in the fd stays: get_event skips it
        }
    return unreported;
}

void move_events(IdState* st, ChannelW* to) {
    ChannelW* from = chan_of(&st->w->id);
    for (EventW*& e : *from->q)
        if (e && e->owner == st) {
            push_event(to, e);
            e = nullptr;
        }
}

int get_event(ChannelW* c, EventW*& e) {
    // Another thread may destroy the channel while this one waits: the gate keeps it (sysretry.hpp).
    std::unique_lock g(core().mu);
    if (!core().live.count(&c->ch)) return err(EINVAL);  // destroyed before the call
    for (;;) {
        uint64_t v = 0;
        const uint64_t leaks = api::g_restart_leaks.load(std::memory_order_relaxed);
        const ssize_t r = api::gated_read(g, c->gate, c->ch.fd, v);
        if (debug() && api::g_restart_leaks.load(std::memory_order_relaxed) != leaks)
            std::fprintf(stderr, "librdmacm (hcaemu): the event channel's read returned a kernel restart code: read again\n");
        if (r != ssize_t(sizeof v)) return r >= 0 ? err(ENODATA) : -1;
        if (c->q->empty()) continue;
        e = c->q->front();
        c->q->pop_front();
        if (!e) continue;
        e->owner->delivered++;
        return 0;
    }
}

}  // namespace hcaemu::rdmacm
