// libibverbs.so.1 on libhcaemu: what the verbs entry points share. Every ibv_* object the library
// hands out is the first member of a wrapper (standard layout, so the ibv pointer converts back)
// that holds its api:: object. docs/verbs.md says how progress, memory and events work.
#pragma once
#include <infiniband/verbs.h>
#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "tools/libhcaemu/api.hpp"
#include "tools/libhcaemu/sysretry.hpp"

// libibverbs exports that the installed headers do not declare (rdma-core's marshall.h and
// driver.h, the fork range calls, the sysfs helpers).
struct ib_uverbs_ah_attr;
struct ib_uverbs_qp_attr;
struct ibv_sa_path_rec;
struct ib_user_path_rec;
extern "C" {
void ibv_copy_ah_attr_from_kern(ibv_ah_attr*, ib_uverbs_ah_attr*);
void ibv_copy_qp_attr_from_kern(ibv_qp_attr*, ib_uverbs_qp_attr*);
void ibv_copy_path_rec_from_kern(ibv_sa_path_rec*, ib_user_path_rec*);
void ibv_copy_path_rec_to_kern(ib_user_path_rec*, ibv_sa_path_rec*);
int ibv_dontfork_range(void*, size_t);
int ibv_dofork_range(void*, size_t);
void ibv_register_driver(const char*, void*);
const char* ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);
}

namespace hcaemu::verbs {

struct Ctx;
struct ChanW;

// The node's mutex. Every unlock counts one in `epoch`: a thread that found a CQ empty while
// holding it at epoch E knows, as long as `epoch` is still E, that nothing can have been added
// (a local HCA makes completions only under this mutex), and polls again without the mutex.
struct NodeMutex {
    std::mutex m;
    std::atomic<uint64_t> epoch{1};
    std::atomic<uint32_t> waiting{0};  // verbs waiting for `m`: the progress thread lets them in
    void lock() { lock_raw(); }
    void lock_raw() {  // as lock(); unlock with m.unlock() when nothing was completed
        if (m.try_lock()) return;
        waiting.fetch_add(1, std::memory_order_relaxed);
        m.lock();
        waiting.fetch_sub(1, std::memory_order_relaxed);
    }
    bool try_lock() { return m.try_lock(); }
    void unlock() {
        epoch.fetch_add(1, std::memory_order_release);
        m.unlock();
    }
};

// One api::Context and the thread that makes progress on it. `mu` serialises every use of `api`
// (api objects are single-threaded): the progress thread holds it for one engine turn at a time,
// a verb for its own call. A program's thread that busy-polls holds it as little as it can
// (still_empty): one that held it for an engine turn on every empty poll was preempted holding
// it, pinned to a loaded CPU, and the progress thread, waiting for it, could not ACK for up to a
// second (the peer's retries ran out).
struct Node {
    std::unique_ptr<api::Context> api;
    bool local = false;
    NodeMutex mu;
    std::vector<Ctx*> ctxs;                        // the ibv contexts on it (under mu)
    std::vector<ChanW*> chans;                     // completion channels to feed (under mu)
    std::unordered_map<uint32_t, ibv_qp*> qps;     // by QPN, for async events (under mu)
    std::unordered_map<uint32_t, ibv_cq*> cqs;     // by api handle
    std::unordered_map<uint32_t, ibv_srq*> srqs;   // by api handle
    std::unordered_map<uint32_t, ibv_pd*> pds;     // by api handle, for ibv_import_pd (under mu)
    std::unordered_map<uint32_t, ibv_mr*> mrs;     // by api handle, for ibv_import_mr (under mu)
    // Imported wrappers beyond the first per api object (PD, MR): the object is deleted with its
    // last wrapper, so a wrapper that outlives the destroy finds EINVAL, not freed memory (under mu).
    std::unordered_map<const void*, uint32_t> imports;
    std::thread th;
    std::atomic<bool> stop{false};
    std::atomic<bool> sleeping{false};
    std::atomic<bool> polled{false};               // a program's poll found a CQ empty: keep turning
    std::atomic<uint64_t> thread_turns{0};         // local: the progress thread's engine turns
    std::mutex sleep_mu;
    std::condition_variable wake_cv;
    cpu_set_t cpus{};                              // the process's CPUs before DPDK pinned it
    bool have_cpus = false;
    int daemon_fd = -1;                            // unix: the connection's socket
    std::unique_ptr<api::CompChannel> probe;       // unix: the channel whose fd() is that socket

    bool had_qp = false;                           // local: a QP was created (under mu): drain at exit
    pid_t owner_pid = 0;                           // the process that started the progress thread

    void start();
    void halt();
    void drain_at_exit();
    void wake() {
        if (sleeping.load(std::memory_order_relaxed)) wake_cv.notify_one();
    }
    // A poll found its CQ empty: the progress thread stays awake (no 100 us sleeps) while the
    // program busy-polls.
    void note_empty_poll() {
        if (!polled.load(std::memory_order_relaxed)) polled.store(true, std::memory_order_relaxed);
        wake();
    }
    void drain();  // under mu: completion and async events to their channels and contexts
    void post_async(ibv_context* owner, const ibv_async_event& e);  // under mu; owner null: all

private:
    void run_local();
    void run_daemon();
};

struct Ctx {
    std::shared_ptr<Node> node;
    ibv_context* ibv = nullptr;
    uint64_t cmd_ino = 0;  // the inode of its cmd_fd (a memfd of its own): ibv_import_device finds it
    std::deque<ibv_async_event> async;  // under node->mu
    bool fatal_sent = false;
    api::ReaderGate gate{};  // under node->mu: threads inside ibv_get_async_event
};

// ibv_context lives at the end of verbs_context; the wrapper puts our pointer after it.
struct CtxW {
    verbs_context vc;
    Ctx* impl;
};
static_assert(std::is_standard_layout_v<CtxW>);

inline CtxW* ctxw(ibv_context* c) {
    auto* vc = reinterpret_cast<verbs_context*>(reinterpret_cast<char*>(c) - offsetof(verbs_context, context));
    return reinterpret_cast<CtxW*>(vc);
}
inline Ctx& ctx_of(ibv_context* c) { return *ctxw(c)->impl; }
inline Node& node_of(ibv_context* c) { return *ctxw(c)->impl->node; }

struct PdW {
    ibv_pd pd;
    api::Pd* api;
    bool imported;  // ibv_import_pd: the object is the original's, shared (Node::imports)
};
struct MrW {
    ibv_mr mr;
    api::Mr* api;
    bool imported;
};
struct ChanW {
    ibv_comp_channel ch;
    api::CompChannel* api;
    std::deque<ibv_cq*>* q;  // events taken from api, waiting for ibv_get_cq_event (under node mu)
    api::ReaderGate gate;    // under node mu: threads inside ibv_get_cq_event
};
// ibv_cq is the head of ibv_cq_ex (verbs.h's ibv_cq_ex_to_cq casts): every CQ is an ibv_cq_ex,
// whose poll functions are set when it was made by ibv_create_cq_ex.
struct CqW {
    ibv_cq_ex cq;
    api::Cq* api;
    uint32_t delivered;  // events ibv_get_cq_event returned (under cq.mutex), as the kernel counts them
    Wc cur;              // the completion start_poll/next_poll stand on
    std::atomic<uint64_t> empty_at;  // local: the node's epoch at which a poll found it empty
    pthread_mutex_t poll_mu;  // held from a successful ibv_start_poll to ibv_end_poll
};
inline ibv_cq* as_cq(CqW* w) { return reinterpret_cast<ibv_cq*>(&w->cq); }
struct SrqW {
    ibv_srq srq;
    api::Srq* api;
};
struct WrBatch;  // qp_ex.cpp: the WRs an ibv_wr_start ... ibv_wr_complete batch builds
// ibv_qp is the head of ibv_qp_ex: every QP is an ibv_qp_ex, with the ibv_wr_* functions set
// (and `batch` made) when ibv_create_qp_ex asked for send_ops_flags.
struct QpW {
    ibv_qp_ex qp;
    api::Qp* api;
    WrBatch* batch;
};
inline ibv_qp* as_qp(QpW* w) { return &w->qp.qp_base; }
struct AhW {
    ibv_ah ah;
    api::Ah* api;
    Gid dgid;
};
static_assert(std::is_standard_layout_v<PdW> && std::is_standard_layout_v<MrW> &&
              std::is_standard_layout_v<ChanW> && std::is_standard_layout_v<CqW> &&
              std::is_standard_layout_v<SrqW> && std::is_standard_layout_v<QpW> && std::is_standard_layout_v<AhW>);

template <class W, class T>
W* wrap_of(T* p) {
    return reinterpret_cast<W*>(p);
}

// errno from a Status, and the `return -1`/`return NULL` libibverbs conventions.
int set_errno(Status s);

// Fills the verbs_context ops (objects.cpp).
void fill_ops(verbs_context& vc);
void fill_query_ops(verbs_context& vc);  // query.cpp
// ibv_create_cq and ibv_create_cq_ex (objects.cpp); the poll-cq-ex functions (cq_ex.cpp).
ibv_cq* create_cq_common(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                         int comp_vector);
void fill_cq_ex_ops(ibv_cq_ex& cq);
// Local: true when `w` was found empty and nothing happened under the node's mutex since (the
// poll returns 0 without taking it). The progress thread is kept turning; if it has not turned
// during 64 such polls (no CPU), this thread turns the engine once itself when the mutex is free.
bool still_empty(Node& n, CqW& w);
// Local, under n.mu: one engine turn and a drain; counts in the epoch when it may have completed
// something (moved frames, QPs with work before or after, or `force`). Frames moved.
size_t turn_engine(Node& n, bool force);
// Under n.mu, when a poll found `w` empty: local, the epoch noted for still_empty; unix,
// libhcaemu's poll() (a yield every 64th call, the daemon's events).
void found_empty(Node& n, CqW& w);
void to_ibv_wc(const Wc& c, ibv_wc& o);
// The ibv_wr_* API of a QP made with send_ops_flags: false (errno set) if it asks for an
// operation hcaemu lacks or memory runs out; free_wr_api at destroy.
bool setup_wr_api(QpW& w, uint64_t send_ops_flags, const ibv_qp_cap& cap);
void free_wr_api(QpW& w);
// Converters shared by device.cpp and objects.cpp.
void to_ibv(const AhAttr& a, ibv_ah_attr& o);
void to_ibv_qp_attr(const QpAttr& a, ibv_qp_attr& o);
bool from_ibv(const ibv_ah_attr& a, AhAttr& o);

}  // namespace hcaemu::verbs
