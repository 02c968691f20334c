// libhcaemu: the verbs-like C++ API, the same whether the HCA is in this process or in the daemon
// hcaemud. Each class mirrors its hca_model counterpart (hca_model/device.hpp) and its libibverbs
// call; the structs (SendWr, RecvWr, Wc, QpAttr, AhAttr, SrqAttr, DeviceAttr, PortAttr) are
// hca_model's own.
//
//   auto ctx = hcaemu::api::open_device("unix:/run/hcaemu.sock", {}, err);   // the daemon
//   auto ctx = hcaemu::api::open_device("", attach_options, err);            // in-process
//
// Memory: the daemon's DMA engine works on the client's memory in place. Context::alloc_buffer()
// memory is a memfd already; any other private memory (malloc, mmap, stack, .bss, MAP_HUGETLB)
// has its pages replaced in place by a shared memfd's at reg_mr and copied back at the last
// dereg (remap.hpp, docs/memory.md: the costs, fork, and the rule that no thread writes those
// pages while reg_mr/dereg_mr runs). Refused, with remap::last_error() saying why: MAP_SHARED
// mappings other than a sealed memfd (not_supported), unmapped pages or write access to read-only
// pages (invalid_argument). In-process any memory may be registered.
// Threads: one thread drives a Context and its objects (as with the in-process Device).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hca_model/counters.hpp"
#include "hca_model/device.hpp"
#include "hca_model/status.hpp"
#include "hca_model/verbs_structs.hpp"

namespace hcaemu::tools {
struct AttachOptions;
}

namespace hcaemu::api {

class Cm;  // cm.hpp: rdma_cm over the IB CM on QP1

class Pd {
public:
    virtual ~Pd() = default;  // deallocates (errors ignored); destroy() reports them
    virtual Status destroy() = 0;
    virtual uint32_t handle() const = 0;
};

class Mr {
public:
    virtual ~Mr() = default;
    virtual Status destroy() = 0;
    virtual uint32_t handle() const = 0;
    virtual uint32_t lkey() const = 0;
    virtual uint32_t rkey() const = 0;
    virtual uint64_t addr() const = 0;
    virtual uint64_t length() const = 0;
    // ibv_rereg_mr (flags: hcaemu::rereg::): the same keys, a new PD, range or access; all or
    // nothing. `pd` only with change_pd, addr and length only with change_translation.
    virtual Status rereg(uint32_t flags, Pd* pd, void* addr, size_t length, uint32_t access) = 0;
};

// ibv_comp_channel: completion events of the CQs created with it.
class CompChannel {
public:
    virtual ~CompChannel() = default;
    virtual bool get_cq_event(CqEvent& ev) = 0;  // non-blocking; false when none is queued
    // Blocks up to timeout_ms for an event (ibv_get_cq_event with a deadline); false on timeout.
    virtual bool wait_cq_event(CqEvent& ev, int timeout_ms) = 0;
    virtual int fd() const = 0;                   // readable while events may be queued (epoll)
};

class Cq {
public:
    virtual ~Cq() = default;
    virtual Status destroy() = 0;
    virtual uint32_t handle() const = 0;
    virtual int poll(std::span<Wc> wc) = 0;       // completions taken, oldest first; no syscall
    virtual Status req_notify(bool solicited_only) = 0;
    virtual Status resize(int cqe) = 0;
    virtual void ack_events(uint32_t n) = 0;
    virtual int cqe() const = 0;
    // What a QpInitAttr names: hca_model's handle (in a client, a handle with no Device behind it).
    virtual const hcaemu::Cq& native() const = 0;
};

class Srq {
public:
    virtual ~Srq() = default;
    virtual Status destroy() = 0;
    virtual uint32_t handle() const = 0;
    virtual Status post_recv(const RecvWr* wr, const RecvWr** bad_wr) = 0;
    virtual Status modify(const SrqAttr& attr, uint32_t mask) = 0;
    virtual Status query(SrqAttr& attr) = 0;
    virtual const hcaemu::Srq& native() const = 0;
};

class Ah {
public:
    virtual ~Ah() = default;
    virtual Status destroy() = 0;
    virtual uint32_t handle() const = 0;
    // What SendWr::ud.ah points at.
    virtual const hcaemu::Ah* native() const = 0;
};

struct QpInitAttr {
    Cq* send_cq = nullptr;
    Cq* recv_cq = nullptr;
    Srq* srq = nullptr;
    QpCap cap;
    QpType qp_type = QpType::rc;
    bool sq_sig_all = false;
};

class Qp {
public:
    virtual ~Qp() = default;
    virtual Status destroy() = 0;
    virtual uint32_t handle() const = 0;
    virtual uint32_t qpn() const = 0;
    virtual QpState state() = 0;
    virtual ModifyResult modify(const QpAttr& attr, uint32_t mask) = 0;
    virtual Status query(QpAttr& attr, QpInitAttr* init = nullptr) = 0;
    // As hca_model: on error *bad_wr is the first WR not posted. No syscall on a daemon.
    virtual Status post_send(const SendWr* wr, const SendWr** bad_wr) = 0;
    virtual Status post_recv(const RecvWr* wr, const RecvWr** bad_wr) = 0;
};

// DMA-able memory from the device (memfd-backed and shared with the daemon, or plain memory
// in-process). Freed by the Context's destructor or free_buffer().
struct Buffer {
    uint8_t* data = nullptr;
    size_t size = 0;
};

// Counters of the whole device (not per client), for `hcaemu stat`.
struct Stats {
    std::vector<std::pair<std::string, uint64_t>> device;  // kCounterName order
    std::vector<std::pair<std::string, uint64_t>> net;     // kNetStatNames order (ARP/ND, drops)
    std::vector<std::pair<std::string, uint64_t>> link;    // the ethdev: link and port statistics
    std::vector<std::pair<std::string, uint64_t>> daemon;  // hcaemud's own (empty in-process)
};

// One object in a resource view (`hcaemu res show`), as `rdma res show` lists them: who owns it
// and its attributes as name/value pairs (numbers as decimal text, names as text).
enum class ResKind : uint8_t { pd, mr, cq, qp, srq, count };
inline constexpr const char* kResKindName[] = {"pd", "mr", "cq", "qp", "srq"};
struct ResEntry {
    uint32_t client = 0;    // the daemon's client id (0: in-process)
    uint32_t pid = 0;       // the owner's process id (SO_PEERCRED)
    std::string comm;       // the owner's name, as it said in hello
    std::vector<std::pair<std::string, std::string>> attrs;  // e.g. {"qpn","17"},{"state","RTS"}
};

class Context {
public:
    virtual ~Context() = default;
    virtual std::string name() const = 0;  // "hcaemu0"
    virtual const DeviceAttr& query_device() const = 0;
    virtual Status query_port(uint8_t port_num, PortAttr& out) = 0;
    virtual Status query_gid(uint8_t port_num, int index, GidEntry& out) = 0;
    virtual const Gid& gid() const = 0;    // the port's address as a GID
    virtual int gid_index() const = 0;     // its index in the GID table

    virtual Result<Buffer> alloc_buffer(size_t length) = 0;  // page-aligned, zeroed
    virtual void free_buffer(Buffer& b) = 0;                 // after every MR on it is gone

    virtual Result<std::unique_ptr<Pd>> alloc_pd() = 0;
    virtual Result<std::unique_ptr<Mr>> reg_mr(Pd& pd, void* addr, size_t length, uint32_t access) = 0;
    virtual Result<std::unique_ptr<CompChannel>> create_comp_channel() = 0;
    virtual Result<std::unique_ptr<Cq>> create_cq(int cqe, CompChannel* channel = nullptr, uint64_t cq_context = 0) = 0;
    virtual Result<std::unique_ptr<Qp>> create_qp(Pd& pd, QpInitAttr& init) = 0;  // init.cap: granted
    virtual Result<std::unique_ptr<Srq>> create_srq(Pd& pd, SrqAttr& attr) = 0;
    virtual Result<std::unique_ptr<Ah>> create_ah(Pd& pd, const AhAttr& attr) = 0;
    virtual bool get_async_event(AsyncEvent& ev) = 0;  // non-blocking

    // In-process: one turn of the engine loop (frames moved). On a daemon: reads the events the
    // daemon sent (completion events, async events, shutdown) without blocking; returns how many.
    virtual size_t poll() = 0;
    // True while the device has frames in flight to send (in-process); false on a daemon.
    virtual bool busy() = 0;
    // Learns the peer's MAC (ARP/ND) before connecting a QP; false and err if it never answers.
    virtual bool resolve(const Gid& peer, uint64_t timeout_ms, std::string& err) = 0;
    // False once the device is gone (the daemon shut down or closed the connection).
    virtual bool alive() const = 0;
    // The peer confirmed out of band that it needs no more frames from this device: in-process,
    // closing then skips the wait that lets a net_memif peer read our last frames (250 ms).
    // Nothing on a daemon (its port outlives the client).
    virtual void peer_finished() {}

    virtual Status read_stats(Stats& out) = 0;
    virtual Status res_list(ResKind kind, std::vector<ResEntry>& out) = 0;

    // The connection manager (cm.hpp); nullptr when the device has none.
    virtual Cm* cm() { return nullptr; }

    // Event injection rules on the device's port (docs/inject.md); not_supported by default.
    struct InjectEntry {
        uint32_t id = 0;
        std::string text;
        uint64_t matched = 0, hits = 0;
    };
    virtual Status inject_add(const std::string& rule, uint32_t& id) {
        (void)rule, (void)id;
        return Status::not_supported;
    }
    virtual Status inject_del(uint32_t id) {
        (void)id;
        return Status::not_supported;
    }
    virtual Status inject_list(std::vector<InjectEntry>& out) {
        out.clear();
        return Status::not_supported;
    }
    // An in-process HCA with --conform (HCAEMU_CONFORM=1): its violations, counted and the latest
    // described (docs/conform.md); "" when none or not monitored.
    virtual std::string conform_report() { return ""; }

    // The engine's turns that moved frames, step by step (transport/turn_profile.hpp): `on`
    // (re)starts the count, off stops it. In-process only (lcore 0's engine); not_supported by
    // default (a daemon).
    struct TurnStep {
        std::string name;
        uint64_t turns = 0;  // the turns it was timed in (rx, receive: frames came; tx: some left)
        uint64_t p50_ns = 0, p90_ns = 0, mean_ns = 0;
    };
    struct TurnReport {
        uint64_t turns = 0, frames = 0;
        std::vector<TurnStep> steps;  // rx, receive, acks_timers, requesters, tx, whole
    };
    virtual Status profile_turns(bool on) {
        (void)on;
        return Status::not_supported;
    }
    virtual Status read_turn_profile(TurnReport& out) {
        (void)out;
        return Status::not_supported;
    }
};

// "unix:PATH": the daemon listening on PATH; "" or "local": an in-process HCA attached with
// `attach` (EAL, ethdev, address). nullptr and `err` on failure.
std::unique_ptr<Context> open_device(const std::string& spec, const tools::AttachOptions& attach, std::string& err);
// The two halves of open_device, each in its own file (client.cpp, local.cpp).
std::unique_ptr<Context> open_daemon(const std::string& socket_path, std::string& err);
std::unique_ptr<Context> open_local(const tools::AttachOptions& attach, std::string& err);

}  // namespace hcaemu::api
