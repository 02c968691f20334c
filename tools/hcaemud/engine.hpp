// hcaemud's data side: the threads that own the Device and the engine loop (tools/attach/attach.hpp
// Attached), run the control operations the io thread queues, take WQEs from the clients' rings
// (the doorbells), write completions into their CQ rings and route events. One lane per
// data-path lcore (--lcores N): lane k takes the rings of the QPs its engine owns, fills the CQ
// rings of their CQs and polls its engine; lane 0 (the thread that calls run()) also runs the
// commands, with the other lanes parked at a turn's end (an epoch handshake), and routes events.
// The io thread only calls submit(), stop() and reads the counters.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/attach/attach.hpp"
#include "tools/libhcaemu/proto.hpp"
#include "tools/libhcaemu/shm.hpp"

namespace hcaemu::daemon {

// hcaemud's own counters (CounterSet::daemon). Written by both threads: relaxed atomics.
#define HCAEMUD_COUNTERS(X) \
    X(clients_connected)    \
    X(clients_total)        \
    X(clients_refused)      /* --max-clients reached: closed at accept */ \
    X(clients_cleaned)      /* disconnected clients whose objects were destroyed */ \
    X(objects_cleaned)      /* objects destroyed for them */ \
    X(requests)             /* requests received (valid or not) */ \
    X(requests_failed)      /* valid requests whose verbs call returned a Status other than ok */ \
    X(err_bad_magic) X(err_bad_version) X(err_bad_length) X(err_unknown_op) X(err_no_hello) \
    X(err_bad_field) X(err_bad_fd) X(err_fd_unexpected) X(err_limit) X(err_shutting_down) \
    X(bad_handle)           /* handles that were not the sender's (Status::bad_handle) */ \
    X(rings_in_error)       /* rings set to kRingError: prod beyond cap, a changed header */ \
    X(bad_wqes)             /* WQEs refused at the doorbell: completed in error, QP to ERR */ \
    X(cq_rings_bad)         /* CQ rings whose cons the client moved beyond prod */ \
    X(cq_events_sent) X(async_events_sent) X(cm_events_sent) X(events_dropped) X(fds_closed) \
    X(lane_conflicts)       /* --lcores: QPs refused whose CQs or SRQ are used on two lcores */ \
    X(lane_pauses)          /* --lcores: command batches run with the other lcores parked */ \
    X(mr_bytes_prefaulted)  /* client memory faulted in by the worker at reg_mr/rereg_mr */ \
    X(mr_maps_pending)      /* now: reg_mr/rereg_mr memfds being mapped by the worker */ \
    X(notes_dropped)        /* log lines not written: stderr full for too long, or closed */

enum class DCounter : uint32_t {
#define HCAEMUD_X(n) n,
    HCAEMUD_COUNTERS(HCAEMUD_X)
#undef HCAEMUD_X
    count
};
inline constexpr const char* kDCounterName[] = {
#define HCAEMUD_X(n) #n,
    HCAEMUD_COUNTERS(HCAEMUD_X)
#undef HCAEMUD_X
};

struct DCounters {
    std::atomic<uint64_t> v[size_t(DCounter::count)] = {};
    void inc(DCounter c, uint64_t n = 1) { v[size_t(c)].fetch_add(n, std::memory_order_relaxed); }
    void dec(DCounter c) { v[size_t(c)].fetch_sub(1, std::memory_order_relaxed); }
    uint64_t get(DCounter c) const { return v[size_t(c)].load(std::memory_order_relaxed); }
    void error(ctl::Error e) { inc(DCounter(size_t(DCounter::err_bad_magic) + size_t(e) - 1)); }
};

// A message for a client: bytes, and at most one fd to pass (closed once sent).
struct Msg {
    std::vector<uint8_t> bytes;
    int fd = -1;
};

// Closes an fd a client passed. A socket gets SO_LINGER {1, 0} first so that close() cannot block
// on unsent data (socket(7)); other kinds are closed as they are (a FUSE file could still delay it).
inline void close_client_fd(int fd) {
    struct stat st{};
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) {
        const linger l{1, 0};
        (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    close(fd);
}

// A shared mapping, unmapped with its owner.
struct Mapping {
    void* p = nullptr;
    size_t len = 0;
    Mapping() = default;
    Mapping(void* a, size_t l) : p(a), len(l) {}
    Mapping(Mapping&& o) noexcept : p(o.p), len(o.len) { o.p = nullptr; }
    Mapping& operator=(Mapping&& o) noexcept {
        std::swap(p, o.p);
        std::swap(len, o.len);
        return *this;
    }
    ~Mapping() {
        if (p) munmap(p, len);
    }
};

// A client's memory for reg_mr or rereg_mr, mapped by the worker (worker.hpp). Handed to the engine
// and back: the engine takes the mapping for the MR and leaves in it what the worker is to unmap
// (the old translation of a rereg_mr or dereg_mr, or the new one of a failed request).
struct Region {
    Mapping map;
    uint8_t* at = nullptr;  // the region's first byte inside `map`
};

// The requests that bring a memfd (reg_mr, and rereg_mr with a new translation) and the range of
// it they name; false for every other request. `body` is the op's whole body (length checked).
bool memfd_range(ctl::Op op, const uint8_t* body, uint64_t& offset, uint64_t& length);

// The worker: maps [offset, offset + length) of a client's checked memfd, closes the fd and faults
// in the pages the memfd holds (dpdk_port/prefault.hpp prefault_data; none of a hugetlb memfd),
// as a NIC driver pins at reg_mr in the caller's context: the data path's first DMA to them takes
// no fault. The bytes faulted in, or -1: mmap failed.
int64_t map_client_region(int fd, uint64_t offset, uint64_t length, Region& out);

struct Client;
struct QpE;
struct SrqE;
struct CqE;
struct MrE;
struct AhE;

class Engine {
public:
    // `send` delivers a message to a client from the data thread (it posts to the io thread).
    using SendFn = std::function<void(uint32_t client, Msg&& m)>;
    Engine(tools::Attached& att, DCounters& ctr, uint32_t max_objects, SendFn send);
    ~Engine();

    // io thread: queues fn to run on the data thread between two poll turns.
    void submit(std::function<void()> fn);
    // The loop; returns after stop(), every client's objects destroyed.
    void run();
    // One turn of run() without the command queue: the engine loop, the doorbells, the CQ rings,
    // the events. Returns the work done (0 when idle). The fuzz target drives the engine with it.
    size_t turn();
    void stop() { stop_.store(true, std::memory_order_release); }

    // ---- data thread only (called from the closures) ----
    void add_client(uint32_t id, uint32_t pid, const std::string& comm);
    // Every object destroyed, QPs flushed. Returns the client's memory (its MRs', its rings'), for
    // the caller to unmap off the data path (hcaemud: its worker thread).
    std::vector<Mapping> remove_client(uint32_t id);
    void all_qps_to_error();          // shutdown: every QP to ERR (flush)
    void flush_to_rings();            // shutdown: the CQEs (flushes) into the rings, events out
    // Runs one request (its header and memfd checked, the memfd mapped by the worker); the
    // reply. `region` as Region says.
    Msg request(uint32_t client, const ctl::Hdr& h, const uint8_t* body, Region& region);
    uint32_t max_objects() const { return max_objects_; }

    // The data thread's log lines (a client gone) are written by another thread, so that the data
    // path never waits on stderr. `wake` runs on the data thread when a line is queued: it has the
    // io thread take them (log.hpp writes them without blocking). Unset (the fuzz target, the
    // destructor), they go to stderr at once by write_now, or are dropped and counted.
    void set_note_wake(std::function<void()> wake) { note_wake_ = std::move(wake); }
    std::vector<std::string> take_notes();  // the queued lines, in order

private:
    // One lcore's share: the QPs its engine owns, the CQs and SRQs they use.
    struct Lane {
        std::vector<QpE*> qps;   // for the doorbells
        std::vector<QpE*> busy;  // those with WQEs in their rings not yet taken or retired (turn_rings)
        size_t busy_next = 0, idle_next = 0;  // where the walks over busy and qps go on
        std::vector<CqE*> cqs;
        std::vector<SrqE*> srqs;
        alignas(64) std::atomic<uint64_t> parked{0};  // the pause epoch this lane is parked in
        std::atomic<bool> exited{false};              // its thread left lane_run (stop): never runs again
    };
    size_t lane_turn(uint32_t k);
    void lane_run(uint32_t k);       // lanes 1..N-1: turns until stop(), parking when asked
    void pause_lanes();              // lane 0: the others parked at a turn's end, before commands
    void resume_lanes();
    void place_qp(QpE* q, CqE* scq, CqE* rcq, SrqE* srq);  // on its engine's lane, with its CQs and SRQ
    template <class E>
    void move_to_lane(E* e, uint32_t k);  // a CQ or SRQ between lanes' lists (control path)
    void turn_rings(Lane& l, size_t& work, bool srqs_only = false);
    void publish_qp(uint32_t qpn);     // its rings' cons, before a completion of it is moved
    void visit(QpE& q, size_t& work);  // a QP's SQ and RQ ring
    void forget_qp(QpE* q);            // off qps_ and its lane (destroyed)
    void move_cqes(Lane& l, size_t& work);
    void route_events();
    void route_cm_events();
    void retry_zombies();
    void take_send(Client& c, QpE& q, size_t& work);
    // `from_device`: asked by the device (rq_fill) in the middle of a packet: a bad WQE is left
    // in the ring for the next turn instead of moving the QP to ERR there.
    void take_recv(QpE* q, SrqE* s, size_t& work, bool from_device = false);
    static void rq_fill(void* ctx, QpObj& qp);  // Device::set_rq_fill
    void ring_error(QpE* q, SrqE* s);

    tools::Attached& att_;
    Device& dev_;
    DCounters& ctr_;
    uint32_t max_objects_;
    SendFn send_;
    std::function<void()> note_wake_;
    std::mutex notes_mu_;
    std::vector<std::string> notes_;
    void note(std::string line);
    std::atomic<bool> stop_{false};
    std::atomic<bool> pending_{false};
    std::mutex qm_;
    std::vector<std::function<void()>> queue_;
    std::map<uint32_t, std::unique_ptr<Client>> clients_;
    std::vector<Client*> client_list_;  // the same clients, for the per-turn event walk
    std::vector<QpE*> qps_;    // live QPs with rings (every lane's)
    std::vector<std::unique_ptr<Lane>> lanes_;  // one per data-path lcore
    std::atomic<uint64_t> pause_epoch_{0};      // odd: lanes 1..N-1 park (lane 0 runs commands)
    static constexpr size_t kBusySlice = 64, kIdleSlice = 32;  // QPs looked at per turn_rings
    std::vector<QpE*> by_qpn_;  // live QPs by QPN (null: none or not a client's): move_cqes' lookup
    std::vector<SrqE*> srqs_;  // every lane's (rq_fill looks an SRQ up here)
    std::vector<AhE*> ahs_;           // by AH index (handle >> 8): the UD doorbell's lookup
    std::map<uint32_t, uint32_t> qpn_owner_, cq_owner_, srq_owner_;  // for async events
    std::map<uint32_t, uint32_t> cm_owner_;  // CM id -> client (the agent's ids are the device's)
    std::vector<std::unique_ptr<MrE>> zombie_mrs_;  // dereg refused (in flight): retried
    std::vector<Pd> zombie_pds_;

    friend struct Ops;
};

}  // namespace hcaemu::daemon
