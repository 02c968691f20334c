// librdmacm.so.1 on libhcaemu's connection manager (api::Cm, cm.hpp): what the rdma_* entry points
// share. The CM owns addresses, ports, MADs and the CM state of each id; this library owns event
// channels, rdma_cm_id structs, QPs and their modify_qp calls, as librdmacm does over the kernel's
// rdma_ucm. docs/rdmacm.md says how events and progress work.
//
// One rdma_cm_id maps to one CM id on the device it is bound to, or, bound to a wildcard address
// before a device is chosen, to one CM id on every device (`subs`). Every api::Cm call is made
// with its device's lock held (Device::lock); the library's own state is under Core::mu. Lock
// order: a device's lock is never held while Core::mu is taken, nor the reverse.
#pragma once
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "tools/libhcaemu/cm.hpp"
#include "tools/libhcaemu/sysretry.hpp"

namespace hcaemu::rdmacm {

// One RDMA device as this library uses it: its ibv_context (from our libibverbs, or a test's) and
// the way to its CM.
struct Device {
    ibv_context* verbs = nullptr;
    // Takes the device's lock and returns its CM (nullptr: the device has none; unlock anyway).
    std::function<api::Cm*()> lock;
    std::function<void()> unlock;
    sockaddr_storage ip{};   // the port's address (AF_INET or AF_INET6), to choose a device by address
    ibv_pd* pd = nullptr;    // rdma_cm_id::pd of the ids on it (librdmacm's per-device PD)
    uint8_t max_init_depth = 0, max_resp_res = 0;
    bool has_cm = false;
    int cm_fd = -1;
    // The thread that moves the CM's events to the event channels.
    std::thread poller;
    int wake_fd = -1;
    std::atomic<bool> stop{false};
};

// Where the devices come from: our libibverbs (devices.cpp), or a test's fakes. Called once, at
// the first call that needs devices; false: no devices (ENODEV).
using DeviceSource = std::function<bool(std::vector<std::unique_ptr<Device>>&)>;
void set_device_source(DeviceSource src);   // before any rdma_* call (tests)
bool open_real_devices(std::vector<std::unique_ptr<Device>>& out);  // devices.cpp

struct IdState;
struct EventW;

// rdma_event_channel with its queue: each queued event is one count of the eventfd `ch.fd`
// (EFD_SEMAPHORE), so poll/epoll and blocking or O_NONBLOCK reads behave as the kernel's file.
struct ChannelW {
    rdma_event_channel ch;
    std::deque<EventW*>* q;   // under Core::mu; a null entry is an event dropped after queuing
    api::ReaderGate gate;     // under Core::mu: threads inside get_event (free_channel)
};

struct IdW {
    rdma_cm_id id;
    IdState* st;
};

struct Sub {
    Device* dev;
    uint32_t cm;   // the CM's id on dev
};

struct IdState {
    IdW* w = nullptr;
    std::vector<Sub> subs;    // under Core::mu for the map; the owner's thread for the rest
    Device* dev = nullptr;    // the device chosen (bound, resolved or from a connect request)
    bool sync = false;        // created without a channel: it has its own, and calls wait for their event
    std::mutex mut;
    std::condition_variable cv;
    uint32_t delivered = 0;   // events rdma_get_cm_event returned (under Core::mu)
    uint32_t completed = 0;   // of those, acked (under mut)
    uint8_t initiator_depth = 0, responder_resources = 0;
    bool connect_error = false;
    std::vector<uint8_t> connect_data;                 // rdma_create_ep: ai_connect
    std::unique_ptr<ibv_qp_init_attr> qp_init_attr;    // rdma_create_ep passive: for rdma_get_request
    std::vector<std::pair<api::CmOption, uint32_t>> options;  // set before a CM id existed
    ibv_ece local_ece{}, remote_ece{};
};

// An event as rdma_get_cm_event returns it, with what it needs to finish it in the caller's thread.
struct EventW {
    rdma_cm_event ev{};
    uint8_t private_data[api::kCmMaxPrivate]{};
    IdState* owner = nullptr;  // the id whose ack count it is (connect_request: the listener)
    IdW* id = nullptr;         // event.id
    IdW* listen = nullptr;     // connect_request: event.listen_id
    Device* dev = nullptr;
    api::CmEvent cm;
    api::CmIdInfo info;
    bool have_info = false;
};

struct Core {
    std::mutex mu;
    bool opened = false;
    std::vector<std::unique_ptr<Device>> devs;
    std::map<std::pair<Device*, uint32_t>, IdState*> ids;   // by (device, CM id), under mu
    // The ids and channels this library made and has not freed, under mu: a call with any other
    // pointer (freed or never made) fails with EINVAL and is counted instead of being dereferenced.
    std::unordered_set<const void*> live;
    std::atomic<uint64_t> stale_handles{0};
};

Core& core();
// ucma_init: the devices opened and their pollers started; 0 or -1 with errno ENODEV.
int init();

// Calls `fn(cm)` with the device's lock held; ENODEV when it has no CM. Returns fn's errno (0 or positive).
int with_cm(Device& d, const std::function<int(api::Cm&)>& fn);

// Event channels (events.cpp).
ChannelW* new_channel();
void free_channel(ChannelW* c);
void push_event(ChannelW* c, EventW* e);         // under Core::mu
// Under Core::mu: its queued events become null entries; the ids of the connect requests among them
// (never reported) are returned, for the caller to destroy.
std::vector<IdW*> drop_events_of(IdState* st);
void move_events(IdState* st, ChannelW* to);     // under Core::mu (rdma_migrate_id)
int get_event(ChannelW* c, EventW*& e);          // blocking as the fd is; 0 or -1/errno
void start_poller(Device& d);
void stop_pollers();

// The id layer (ids.cpp).
// mu_held: the caller holds Core::mu (the id is registered as live under it).
IdW* new_id(rdma_event_channel* channel, void* context, rdma_port_space ps, ibv_qp_type qp_type, bool mu_held = false);
void free_id(IdW* w);
// True (errno EINVAL, counted) when `id` / `ch` is not a live id / channel of this library.
// perftest 4.5's rdma_cm client retries with ids read from memory it freed (docs/rdmacm.md).
bool stale_id(const rdma_cm_id* id);
bool stale_channel(const rdma_event_channel* ch);
inline IdState& st_of(rdma_cm_id* id) { return *reinterpret_cast<IdW*>(id)->st; }
inline ChannelW* chan_of(rdma_cm_id* id) { return reinterpret_cast<ChannelW*>(id->channel); }
// Makes a CM id for `st` on `d` (options applied) and registers it; 0 or an errno.
int add_sub(IdState& st, Device& d, uint32_t& cm_id);
void remove_subs(IdState& st, const Device* keep);  // destroys the CM ids (except keep's)
void choose_device(IdState& st, Device& d);          // id->verbs, id->pd
void apply_info(rdma_cm_id* id, const api::CmIdInfo& info, bool route);
int query_into(IdState& st);                          // the first sub's query into the id
// librdmacm's QP moves (ucma_modify_qp_*) from rdma_init_qp_attr; 0 or -1/errno. No QP: 0.
int qp_init_attr(rdma_cm_id* id, ibv_qp_attr* attr, int* mask);
int modify_qp_rtr(rdma_cm_id* id, uint8_t resp_res);
int modify_qp_rts(rdma_cm_id* id, uint8_t init_depth);
int modify_qp_err(rdma_cm_id* id);
int conn_resp(IdState& st);  // the active side: RTR, RTS, then the CM's establish (RTU)
// The rdma_get_cm_event step that runs in the caller's thread (QP moves, sync migrate, ...):
// false when the event is to be skipped.
bool finish_event(EventW& e);
void ack(IdState& st);
int complete(rdma_cm_id* id);  // ucma_complete: a sync id waits for its event

// Conversions (convert.cpp).
bool gid_to_sockaddr(const Gid& g, sockaddr_storage& out);
socklen_t addr_len(const sockaddr* a);  // ucma_addrlen: 0 for a family other than IPv4/IPv6
bool is_wildcard(const sockaddr* a);
api::CmEventType to_cm(rdma_cm_event_type t);

bool debug();  // HCAEMU_RDMACM_DEBUG=1: QP moves and CM events on stderr

inline int err(int e) {
    errno = e;
    return -1;
}

}  // namespace hcaemu::rdmacm
