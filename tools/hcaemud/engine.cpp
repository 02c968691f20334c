// hcaemud's data thread: control operations, doorbells, CQ rings, events. See engine.hpp and
// tools/libhcaemu/PROTOCOL.md.
#include "tools/hcaemud/engine.hpp"
#include "tools/hcaemud/log_line.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>
#include <set>
#include <thread>
#include <type_traits>

#include "dpdk_port/prefault.hpp"
#include "tools/libhcaemu/api.hpp"
#include "tools/libhcaemu/inspect.hpp"
#include "tools/libhcaemu/proto_attr.hpp"

namespace hcaemu::daemon {

namespace {

// The daemon's own view of one ring: its copy of cap and entry size (never the header's).
struct RingV {
    shm::RingHdr* h = nullptr;
    uint8_t* ents = nullptr;
    shm::RingKind kind = shm::RingKind::sq;
    uint32_t cap = 0;
    uint32_t esz = 0;
    uint64_t taken = 0;     // SQ/RQ/SRQ: entries taken; CQ: CQEs written (our prod)
    uint64_t cons_pub = 0;  // SQ/RQ/SRQ: the cons last stored
    uint64_t prod_seen = 0; // SQ/RQ/SRQ: the prod last loaded
    bool error = false;
    // The client may write anything into the header; its words are read atomically.
    bool header_ok() const {
        return __atomic_load_n(&h->magic, __ATOMIC_RELAXED) == shm::kRingMagic &&
               __atomic_load_n(&h->kind, __ATOMIC_RELAXED) == uint32_t(kind) &&
               __atomic_load_n(&h->cap, __ATOMIC_RELAXED) == cap &&
               __atomic_load_n(&h->entry_size, __ATOMIC_RELAXED) == esz;
    }
    void set_flag(uint32_t f) { h->flags.fetch_or(f, std::memory_order_release); }
};

RingV init_ring(uint8_t* base, shm::RingKind kind, uint32_t cap, uint32_t esz) {
    auto* h = new (base) shm::RingHdr{};
    h->magic = shm::kRingMagic;
    h->kind = uint32_t(kind);
    h->cap = cap;
    h->entry_size = esz;
    RingV r;
    r.h = h;
    r.ents = base + shm::kRingEntries;
    r.kind = kind;
    r.cap = cap;
    r.esz = esz;
    return r;
}

// A memfd of `bytes`, mapped, sealed against any size change (F_SEAL_SHRINK|GROW|SEAL): the
// client can neither cut the mapping under us (SIGBUS) nor grow it. Mapped whole at once
// (prefault.hpp): the lanes' first use of each ring page takes no fault.
bool make_ring_fd(const char* name, size_t bytes, int& fd, Mapping& m) {
    fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return false;
    void* p = MAP_FAILED;
    if (ftruncate(fd, off_t(bytes)) == 0) p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        if (p != MAP_FAILED) munmap(p, bytes);
        close(fd);
        fd = -1;
        return false;
    }
    port::prefault(p, bytes);
    m = Mapping(p, bytes);
    return true;
}

constexpr size_t kMaxEntry = 1024;  // the largest WQE the device's limits allow fits (checked at create)

}  // namespace

bool memfd_range(ctl::Op op, const uint8_t* body, uint64_t& offset, uint64_t& length) {
    if (op == ctl::Op::reg_mr) {
        ctl::RegMrReq r;
        std::memcpy(&r, body, sizeof r);
        offset = r.offset, length = r.length;
        return true;
    }
    if (op == ctl::Op::rereg_mr) {
        ctl::ReregMrReq r;
        std::memcpy(&r, body, sizeof r);
        offset = r.offset, length = r.length;
        return r.flags & rereg::change_translation;
    }
    return false;
}

// Whole pages of the fd's own size: 4096 for a memfd, the huge page size for a hugetlb memfd
// (st_blksize; hugetlbfs maps only whole huge pages).
int64_t map_client_region(int fd, uint64_t offset, uint64_t length, Region& out) {
    struct stat sb{};
    uint64_t page = 4096;
    if (fstat(fd, &sb) == 0 && sb.st_blksize > 4096 && sb.st_blksize <= (1 << 30) &&
        (sb.st_blksize & (sb.st_blksize - 1)) == 0)
        page = uint64_t(sb.st_blksize);
    const uint64_t start = offset & ~(page - 1);
    const uint64_t span = ((offset - start) + length + page - 1) & ~(page - 1);
    void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(start));
    if (m == MAP_FAILED) {
        close(fd);
        return -1;
    }
    out.map = Mapping(m, span);
    out.at = static_cast<uint8_t*>(m) + (offset - start);
    // Only the pages the client's memfd has: a client cannot make the daemon allocate its memory,
    // nor spend time on a sparse file's holes. Not huge pages: hugetlbfs reports no holes, and a
    // huge page's first touch is one fault per 2 MiB or 1 GiB.
    const uint64_t got = page == 4096 ? port::prefault_data(fd, start, m, span) : 0;
    close(fd);
    return int64_t(got);
}

struct PdE {
    Pd pd;
};
struct MrE {
    Mapping map;  // declared first: unmapped after the MR is gone
    Mr mr;
    uint64_t iova = 0, length = 0;
    uint32_t access = 0;
};
struct CqE {
    uint32_t handle = 0;
    uint32_t lane = 0;  // the lane that fills its ring: its QPs' (lane 0 while it has none)
    Client* owner = nullptr;
    Mapping map;
    Cq cq;
    CqObj* obj = nullptr;
    RingV r;
    uint64_t context = 0;
    bool events = false;
};
struct SrqE {
    uint32_t handle = 0;
    uint32_t lane = 0;  // its QPs' lane
    Client* owner = nullptr;
    Mapping map;
    Srq srq;
    SrqObj* obj = nullptr;
    RingV r;
    uint32_t max_sge = 0;
};
struct AhE {
    Ah ah;
    Client* owner = nullptr;
};
struct QpE {
    uint32_t handle = 0, qpn = 0;
    uint32_t lane = 0;  // its engine's lcore (never changes)
    Client* owner = nullptr;
    Mapping map;
    Qp qp;
    QpObj* obj = nullptr;
    RingV sq, rq;
    bool has_rq = false;
    bool busy = false;  // on its Lane::busy: its rings have WQEs not yet taken or not yet retired
    ctl::CreateQpReq init{};
    QpCap cap;
};

struct Client {
    uint32_t id = 0, pid = 0;
    std::string comm;
    CompChannel ch;
    std::map<uint32_t, std::unique_ptr<PdE>> pds;
    std::map<uint32_t, std::unique_ptr<MrE>> mrs;
    std::map<uint32_t, std::unique_ptr<CqE>> cqs;
    std::map<uint32_t, std::unique_ptr<QpE>> qps;
    std::map<uint32_t, std::unique_ptr<SrqE>> srqs;
    std::map<uint32_t, std::unique_ptr<AhE>> ahs;
    std::set<uint32_t> cm_ids;  // its ids of the device's CM agent: destroyed with the client
    size_t objects() const {
        return pds.size() + mrs.size() + cqs.size() + qps.size() + srqs.size() + ahs.size() + cm_ids.size();
    }
};

Engine::Engine(tools::Attached& att, DCounters& ctr, uint32_t max_objects, SendFn send)
    : att_(att), dev_(att.dev()), ctr_(ctr), max_objects_(max_objects), send_(std::move(send)) {
    for (uint32_t k = 0; k < att.lcores(); ++k) lanes_.push_back(std::make_unique<Lane>());
    dev_.set_rq_fill(&Engine::rq_fill, this);
}

Engine::~Engine() {
    note_wake_ = nullptr;  // the io thread is gone: what is left is written here, if it can be
    for (std::string& l : take_notes()) note(std::move(l));
    while (!clients_.empty()) remove_client(clients_.begin()->first);
    dev_.set_rq_fill(nullptr, nullptr);
}

// A packet found the QP's (or its SRQ's) receive queue empty: the client's ring first, as an HCA
// sees every receive posted before the packet arrived.
void Engine::rq_fill(void* ctx, QpObj& qp) {
    auto* en = static_cast<Engine*>(ctx);
    size_t work = 0;
    if (qp.srq) {
        for (SrqE* s : en->srqs_)
            if (s->obj == qp.srq && !s->r.error) en->take_recv(nullptr, s, work, true);
        return;
    }
    QpE* q = qp.qpn < en->by_qpn_.size() ? en->by_qpn_[qp.qpn] : nullptr;
    if (q && q->has_rq && !q->rq.error) en->take_recv(q, nullptr, work, true);
}

void Engine::submit(std::function<void()> fn) {
    std::lock_guard<std::mutex> g(qm_);
    queue_.push_back(std::move(fn));
    pending_.store(true, std::memory_order_release);
}

size_t Engine::turn() { return lane_turn(0); }

size_t Engine::lane_turn(uint32_t k) {
    // The doorbells before the port: a receive a client posted before a SEND reached us is in
    // the device when the SEND is processed, as on an HCA (UD would drop the SEND, RC NAK it
    // RNR). A turn delayed after the rings were read can still see a SEND whose receive came
    // in during that delay. And again after it, before the CQEs: each ring's cons must cover
    // the WQEs whose completions the client is about to see (it posts into the slots they
    // free at once: a tx depth of 1 found its SQ ring full).
    Lane& l = *lanes_[k];
    size_t work = 0;
    turn_rings(l, work);
    work += k == 0 ? att_.poll() : att_.hca(k).poll();  // lane 0: the CM agent's timers too
    turn_rings(l, work, true);
    move_cqes(l, work);
    if (k != 0) return work;
    route_events();
    if (!zombie_mrs_.empty() || !zombie_pds_.empty()) retry_zombies();
    return work;
}

namespace {

// Back-off when idle, so that daemons and busy-polling clients share a small machine: after 64
// empty turns, yield the CPU each turn (a client waiting for its completion runs at once, and the
// data path resumes as soon as nothing else wants the core); after 20000, sleep 50 us per turn;
// after 40000 (a second or more), 500 us; busy-poll again at the first work.
void back_off(size_t work, uint32_t& idle) {
    if (work) {
        idle = 0;
    } else if (++idle > 20000) {
        const timespec ts{0, idle > 40000 ? 500'000 : 50'000};
        nanosleep(&ts, nullptr);
    } else if (idle > 64) {
        sched_yield();
    }
}

}  // namespace

// Lanes 1..N-1. At an odd pause epoch a lane parks at its turn's end and says so (parked =
// epoch), until the epoch moves on: lane 0 then runs commands that change the tables and the
// lanes' lists, and touches the parked lanes' engines (modify, destroy) itself. The epoch's
// release/acquire order makes each side see the other's writes.
void Engine::lane_run(uint32_t k) {
    Lane& l = *lanes_[k];
    t_lcore = k;
    uint32_t idle = 0;
    while (!stop_.load(std::memory_order_acquire)) {
        const uint64_t e = pause_epoch_.load(std::memory_order_acquire);
        if (e & 1) {
            l.parked.store(e, std::memory_order_release);
            while (pause_epoch_.load(std::memory_order_acquire) == e && !stop_.load(std::memory_order_acquire))
                sched_yield();
            continue;
        }
        back_off(lane_turn(k), idle);
    }
    l.exited.store(true, std::memory_order_release);
}

void Engine::pause_lanes() {
    if (lanes_.size() == 1) return;
    const uint64_t e = pause_epoch_.load(std::memory_order_relaxed) + 1;  // odd
    pause_epoch_.store(e, std::memory_order_release);
    for (size_t k = 1; k < lanes_.size(); ++k)
        while (lanes_[k]->parked.load(std::memory_order_acquire) != e &&
               !lanes_[k]->exited.load(std::memory_order_acquire))
            sched_yield();
    ctr_.inc(DCounter::lane_pauses);
}

void Engine::resume_lanes() {
    if (lanes_.size() == 1) return;
    pause_epoch_.store(pause_epoch_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

void Engine::run() {
    // Lanes 1..N-1 on threads of their own, each with an lcore id for the mempool's cache.
    std::vector<std::thread> lanes;
    for (uint32_t k = 1; k < lanes_.size(); ++k)
        lanes.emplace_back([this, k] {
            std::string err;
            const int id = port::register_thread(err);  // without one, the pool works uncached
            lane_run(k);
            if (id >= 0) port::unregister_thread();
        });
    std::vector<std::function<void()>> batch;
    uint32_t idle = 0;
    t_lcore = 0;
    while (!stop_.load(std::memory_order_acquire)) {
        size_t work = turn();
        // The command queue: one relaxed load per turn while nothing is queued.
        if (pending_.load(std::memory_order_relaxed)) {
            {
                std::lock_guard<std::mutex> g(qm_);
                batch.swap(queue_);
                pending_.store(false, std::memory_order_relaxed);
            }
            pause_lanes();
            for (auto& f : batch) f();
            resume_lanes();
            batch.clear();
            work = 1;
        }
        back_off(work, idle);
    }
    for (auto& t : lanes) t.join();  // they saw stop_
    // Run what is still queued (replies go nowhere once the io loop stops), then clean up.
    {
        std::lock_guard<std::mutex> g(qm_);
        batch.swap(queue_);
    }
    for (auto& f : batch) f();
    while (!clients_.empty()) remove_client(clients_.begin()->first);
}

// ---------------------------------------------------------------- doorbells

void Engine::ring_error(QpE* q, SrqE* s) {
    ctr_.inc(DCounter::rings_in_error);
    if (q) {
        q->sq.error = true;
        q->sq.set_flag(shm::kRingError);
        if (q->has_rq) {
            q->rq.error = true;
            q->rq.set_flag(shm::kRingError);
        }
        dev_.qp_to_error(q->obj, EventType::qp_fatal);
    } else {
        s->r.error = true;
        s->r.set_flag(shm::kRingError);
        s->obj->error = true;
        dev_.raise(EventType::srq_err, s->handle);
    }
}

namespace {

WcStatus wc_status_for(Status s) {
    return s == Status::bad_lkey ? WcStatus::loc_prot_err : WcStatus::loc_qp_op_err;
}

// The QP to ERR as verbs' modify_qp does it (flush, no async event): a bad WQE is reported by
// its error completion, as rxe reports a WQE it cannot execute.
void to_err(Qp& qp) {
    QpAttr a;
    a.qp_state = QpState::err;
    (void)qp.modify(a, qp_attr::state);
}

// The same for a bad send WQE, except that UC and UD go to SQE: their send queue is flushed and
// their receive side works on (IBTA 10.3.1).
void send_error(Device& dev, Qp& qp, QpObj* o) {
    if (o->type != QpType::rc && (o->state() == QpState::rts || o->state() == QpState::sqd)) dev.qp_to_sqe(o);
    else to_err(qp);
}

}  // namespace

void Engine::take_send(Client& c, QpE& q, size_t& work) {
    RingV& r = q.sq;
    QpObj* o = q.obj;
    const uint64_t cons = r.taken - o->sq.count();
    if (cons != r.cons_pub) {
        r.h->cons.store(cons, std::memory_order_release);
        r.cons_pub = cons;
    }
    const uint64_t prod = r.h->prod.load(std::memory_order_acquire);
    r.prod_seen = prod;
    if (prod == r.taken) return;
    if (!r.header_ok() || prod - cons > r.cap || prod - r.taken > r.cap) return ring_error(&q, nullptr);
    // Sends wait in the ring until the QP can take them (RTS; SQD queues, SQE/ERR flush).
    const QpState st = o->state();
    if (st == QpState::reset || st == QpState::init || st == QpState::rtr) return;
    alignas(16) uint8_t buf[kMaxEntry];
    Sge sges[64];
    while (r.taken != prod && !o->sq.full()) {
        std::memcpy(buf, r.ents + (r.taken % r.cap) * r.esz, r.esz);  // copied once, then checked
        ++r.taken;
        ++work;
        shm::SendWqe w;
        std::memcpy(&w, buf, sizeof w);
        SendWr wr;
        wr.wr_id = w.wr_id;
        Status s = Status::ok;
        if (w.opcode > uint8_t(WrOpcode::send_with_inv)) {
            s = Status::invalid_argument;
        } else {
            wr.opcode = WrOpcode(w.opcode);
            wr.send_flags = w.send_flags;
            wr.imm_data = w.imm_data;
            wr.invalidate_rkey = w.invalidate_rkey;
            wr.rdma.remote_addr = w.remote_addr;
            wr.rdma.rkey = w.rkey;
            wr.atomic.remote_addr = w.remote_addr;
            wr.atomic.rkey = w.rkey;
            wr.atomic.compare_add = w.compare_add;
            wr.atomic.swap = w.swap;
            wr.ud.remote_qpn = w.remote_qpn;
            wr.ud.remote_qkey = w.remote_qkey;
            const uint8_t* area = buf + sizeof(shm::SendWqe);
            const size_t area_len = r.esz - sizeof(shm::SendWqe);
            if (w.send_flags & send_flag::inline_) {
                if (w.inline_len > q.cap.max_inline_data || w.inline_len > area_len) {
                    s = Status::inline_too_large;
                } else if (w.inline_len) {
                    sges[0] = {uint64_t(reinterpret_cast<uintptr_t>(area)), w.inline_len, 0};
                    wr.sg_list = sges;
                    wr.num_sge = 1;
                }
            } else if (w.num_sge > q.cap.max_send_sge || w.num_sge * sizeof(shm::Sge) > area_len) {
                s = Status::too_many_sge;
            } else {
                for (uint32_t i = 0; i < w.num_sge; ++i) {
                    shm::Sge g;
                    std::memcpy(&g, area + i * sizeof g, sizeof g);
                    sges[i] = {g.addr, g.length, g.lkey};
                }
                wr.sg_list = sges;
                wr.num_sge = int(w.num_sge);
            }
            if (s == Status::ok && o->type == QpType::ud) {
                const uint32_t i = w.ah >> 8;  // only the sender's own AHs
                AhE* a = i < ahs_.size() ? ahs_[i] : nullptr;
                if (!a || a->owner != &c || a->ah.handle() != w.ah) s = Status::no_ah;
                else wr.ud.ah = &a->ah;
            }
        }
        if (s == Status::ok) {
            const SendWr* bad = nullptr;
            s = q.qp.post_send(&wr, &bad);
        }
        if (s != Status::ok) {
            ctr_.inc(DCounter::bad_wqes);
            send_error(dev_, q.qp, o);
            Wc wc;
            wc.wr_id = w.wr_id;
            wc.status = wc_status_for(s);
            wc.opcode = w.opcode <= uint8_t(WrOpcode::send_with_inv) ? wc_opcode_for(WrOpcode(w.opcode)) : WcOpcode::send;
            wc.qp_num = q.qpn;
            (void)dev_.complete(o->send_cq, wc);
        }
    }
    const uint64_t nc = r.taken - o->sq.count();
    if (nc != r.cons_pub) {
        r.h->cons.store(nc, std::memory_order_release);
        r.cons_pub = nc;
    }
}

void Engine::take_recv(QpE* q, SrqE* sq, size_t& work, bool from_device) {
    RingV& r = q ? q->rq : sq->r;
    auto outstanding = [&] { return q ? q->obj->rq.count() : sq->obj->rq.count(); };
    auto full = [&] { return q ? q->obj->rq.full() : sq->obj->rq.full(); };
    const uint64_t cons = r.taken - outstanding();
    if (cons != r.cons_pub) {
        r.h->cons.store(cons, std::memory_order_release);
        r.cons_pub = cons;
    }
    const uint64_t prod = r.h->prod.load(std::memory_order_acquire);
    r.prod_seen = prod;
    if (prod == r.taken) return;
    if (!r.header_ok() || prod - cons > r.cap || prod - r.taken > r.cap) {
        if (!from_device) ring_error(q, sq);  // (in a packet: at the next turn)
        return;
    }
    if (q && q->obj->state() == QpState::reset) return;  // receives wait until INIT
    const uint32_t max_sge = q ? q->cap.max_recv_sge : sq->max_sge;
    alignas(16) uint8_t buf[kMaxEntry];
    Sge sges[64];
    while (r.taken != prod && !full()) {
        std::memcpy(buf, r.ents + (r.taken % r.cap) * r.esz, r.esz);
        ++r.taken;
        ++work;
        shm::RecvWqe w;
        std::memcpy(&w, buf, sizeof w);
        RecvWr wr;
        wr.wr_id = w.wr_id;
        Status s = Status::ok;
        if (w.num_sge > max_sge || sizeof w + w.num_sge * sizeof(shm::Sge) > r.esz) {
            s = Status::too_many_sge;
        } else {
            for (uint32_t i = 0; i < w.num_sge; ++i) {
                shm::Sge g;
                std::memcpy(&g, buf + sizeof w + i * sizeof g, sizeof g);
                sges[i] = {g.addr, g.length, g.lkey};
            }
            wr.sg_list = sges;
            wr.num_sge = int(w.num_sge);
            const RecvWr* bad = nullptr;
            s = q ? q->qp.post_recv(&wr, &bad) : sq->srq.post_recv(&wr, &bad);
        }
        if (s != Status::ok && from_device) {  // handled at the next turn, outside the packet
            --r.taken;
            return;
        }
        if (s != Status::ok) {
            ctr_.inc(DCounter::bad_wqes);
            if (!q) {  // an SRQ has no CQ of its own: it goes to error (IBV_EVENT_SRQ_ERR)
                ctr_.dec(DCounter::rings_in_error);  // ring_error counts it; it is a WQE here
                ring_error(nullptr, sq);
                return;
            }
            to_err(q->qp);
            Wc wc;
            wc.wr_id = w.wr_id;
            wc.status = wc_status_for(s);
            wc.opcode = WcOpcode::recv;
            wc.qp_num = q->qpn;
            (void)dev_.complete(q->obj->recv_cq, wc);
        }
    }
    const uint64_t nc = r.taken - outstanding();
    if (nc != r.cons_pub) {
        r.h->cons.store(nc, std::memory_order_release);
        r.cons_pub = nc;
    }
}

namespace {

// A ring to watch every turn: entries the client wrote that are not yet taken (the QP's state or
// its full queue holds them back), or taken WQEs not yet retired (their retirement moves cons).
bool unsettled(const RingV& r) { return !r.error && (r.prod_seen != r.taken || r.taken != r.cons_pub); }

// cons for the WQEs retired: taken less those the device still holds (`outstanding`).
void publish_cons(RingV& r, uint64_t outstanding) {
    const uint64_t cons = r.taken - outstanding;
    if (r.error || cons == r.cons_pub) return;
    r.h->cons.store(cons, std::memory_order_release);
    r.cons_pub = cons;
}

}  // namespace

void Engine::visit(QpE& q, size_t& work) {
    if (!q.sq.error) take_send(*q.owner, q, work);
    if (q.has_rq && !q.rq.error) take_recv(&q, nullptr, work);
}

// The rings with work in them (busy_), up to kBusySlice QPs a call in turn, and every ring of
// kIdleSlice QPs in turn: a call costs O(slices), not O(QPs) (with 1024 QPs the walk over all of
// them, twice a turn, was most of the daemon's time, then the walk over 1024 busy ones). A WQE
// posted into a ring is seen within busy_.size() / kBusySlice calls (an idle ring: qps_.size() /
// kIdleSlice); with up to that many QPs, at once. A ring's cons moves here for WQEs retired
// without a completion, and in move_cqes for those with one, before the client can see it.
// `srqs_only`: the pass after the engine's turn (SRQs are few and have no CQ of their own).
void Engine::turn_rings(Lane& l, size_t& work, bool srqs_only) {
    for (size_t k = srqs_only ? 0 : std::min(l.busy.size(), kBusySlice); k > 0 && !l.busy.empty(); --k) {
        if (l.busy_next >= l.busy.size()) l.busy_next = 0;
        QpE* q = l.busy[l.busy_next];
        if (unsettled(q->sq)) take_send(*q->owner, *q, work);
        if (q->has_rq && unsettled(q->rq)) take_recv(q, nullptr, work);
        if (unsettled(q->sq) || (q->has_rq && unsettled(q->rq))) {
            ++l.busy_next;
            continue;
        }
        q->busy = false;
        l.busy[l.busy_next] = l.busy.back();  // visited next
        l.busy.pop_back();
    }
    for (size_t k = srqs_only ? 0 : std::min(l.qps.size(), kIdleSlice); k > 0; --k) {
        if (l.idle_next >= l.qps.size()) l.idle_next = 0;
        QpE* q = l.qps[l.idle_next++];
        visit(*q, work);
        if (!q->busy && (unsettled(q->sq) || (q->has_rq && unsettled(q->rq)))) {
            q->busy = true;
            l.busy.push_back(q);
        }
    }
    for (SrqE* s : l.srqs)
        if (!s->r.error) take_recv(nullptr, s, work);
}

// A completion of QP `qpn` is about to be moved into its CQ ring: its rings' cons first, so that
// the client, seeing it, finds the slots free (a tx depth of 1 posts into the one it frees).
void Engine::publish_qp(uint32_t qpn) {
    QpE* q = qpn < by_qpn_.size() ? by_qpn_[qpn] : nullptr;
    if (!q) return;
    publish_cons(q->sq, q->obj->sq.count());
    if (q->has_rq) publish_cons(q->rq, q->obj->rq.count());
}

void Engine::forget_qp(QpE* q) {
    std::erase(qps_, q);
    Lane& l = *lanes_[q->lane];
    std::erase(l.qps, q);
    if (q->qpn < by_qpn_.size() && by_qpn_[q->qpn] == q) by_qpn_[q->qpn] = nullptr;
    if (q->busy) std::erase(l.busy, q);
    q->busy = false;
}

template <class E>
void Engine::move_to_lane(E* e, uint32_t k) {
    if (e->lane == k) return;
    auto& from = [&]() -> std::vector<E*>& {
        if constexpr (std::is_same_v<E, CqE>) return lanes_[e->lane]->cqs;
        else return lanes_[e->lane]->srqs;
    }();
    std::erase(from, e);
    e->lane = k;
    if constexpr (std::is_same_v<E, CqE>) lanes_[k]->cqs.push_back(e);
    else lanes_[k]->srqs.push_back(e);
}

// A new QP goes to its engine's lane (HcaGroup: with the QPs of its CQs and SRQ, else the least loaded),
// and its CQs and SRQ with it.
void Engine::place_qp(QpE* q, CqE* scq, CqE* rcq, SrqE* srq) {
    q->lane = att_.group() ? att_.group()->owner(q->qpn) : 0;
    qps_.push_back(q);
    lanes_[q->lane]->qps.push_back(q);
    move_to_lane(scq, q->lane);
    move_to_lane(rcq, q->lane);
    if (srq) move_to_lane(srq, q->lane);
}

void Engine::move_cqes(Lane& l, size_t& work) {
    Wc wc[32];
    for (CqE* c : l.cqs) {
        CqObj* o = c->obj;
        if (o->overflowed && !(c->r.h->flags.load(std::memory_order_relaxed) & shm::kRingOverflow))
            c->r.set_flag(shm::kRingOverflow);
        if (o->ring.empty() || c->r.error) continue;
        const uint64_t cons = c->r.h->cons.load(std::memory_order_acquire);
        if (c->r.taken - cons > c->r.cap) {  // cons moved past prod, or back
            ctr_.inc(DCounter::cq_rings_bad);
            c->r.error = true;
            c->r.set_flag(shm::kRingError);
            continue;
        }
        const uint64_t room = c->r.cap - (c->r.taken - cons);
        if (!room) continue;
        const int n = c->cq.poll(std::span<Wc>(wc, std::min<uint64_t>(room, 32)));
        for (int i = 0; i < n; ++i) {
            publish_qp(wc[i].qp_num);
            const shm::Cqe e = shm::to_cqe(wc[i]);
            std::memcpy(c->r.ents + (c->r.taken % c->r.cap) * sizeof e, &e, sizeof e);
            ++c->r.taken;
        }
        if (n > 0) {
            c->r.h->prod.store(c->r.taken, std::memory_order_release);
            work += size_t(n);
        }
    }
}

namespace {

Msg event_msg(ctl::Ev ev, const void* body, size_t n) {
    Msg m;
    m.bytes.resize(sizeof(ctl::Hdr) + n);
    ctl::Hdr h;
    h.op = uint16_t(ev);
    h.len = uint32_t(m.bytes.size());
    std::memcpy(m.bytes.data(), &h, sizeof h);
    std::memcpy(m.bytes.data() + sizeof h, body, n);
    return m;
}

}  // namespace

// The CM agent's events to the client that owns the id; a connect_request's new id becomes the
// listener owner's. Events of ids nobody owns (destroyed meanwhile) are dropped.
void Engine::route_cm_events() {
    api::CmEvent ev;
    while (att_.cm().get_event(ev)) {
        if (ev.type == api::CmEventType::connect_request) {
            auto l = cm_owner_.find(ev.listen_id);
            auto cit = l == cm_owner_.end() ? clients_.end() : clients_.find(l->second);
            if (cit == clients_.end()) {  // the listener is gone: leave the new connection
                uint32_t n = 0;
                (void)att_.cm().destroy_id(ev.id, n);
                continue;
            }
            cm_owner_[ev.id] = cit->first;
            cit->second->cm_ids.insert(ev.id);
        }
        auto o = cm_owner_.find(ev.id);
        if (o == cm_owner_.end()) continue;
        ctl::CmEventMsg m;
        m.ev = ev;
        send_(o->second, event_msg(ctl::Ev::cm_event, &m, sizeof m));
        ctr_.inc(DCounter::cm_events_sent);
    }
}

void Engine::route_events() {
    route_cm_events();
    // Completion events, after the CQEs that caused them are in the rings (move_cqes ran).
    for (Client* c : client_list_) {
        if (!c->ch.pending()) continue;
        const uint32_t id = c->id;
        CqEvent ev;
        while (c->ch.get_cq_event(ev)) {
            auto it = c->cqs.find(ev.cq_handle);
            if (it == c->cqs.end()) continue;
            it->second->cq.ack_events(1);  // the client acks its own; the daemon's copy is done
            ctl::CqEventMsg m;
            m.cq = ev.cq_handle;
            m.cq_context = ev.cq_context;
            send_(id, event_msg(ctl::Ev::cq_event, &m, sizeof m));
            ctr_.inc(DCounter::cq_events_sent);
        }
    }
    AsyncEvent ae;
    while (dev_.get_async_event(ae)) {
        ctl::AsyncEventMsg m;
        m.type = uint8_t(ae.type);
        m.element = ae.element;
        const Msg msg = event_msg(ctl::Ev::async_event, &m, sizeof m);
        const std::map<uint32_t, uint32_t>* owners = nullptr;
        switch (ae.type) {
        case EventType::cq_err: owners = &cq_owner_; break;
        case EventType::srq_err:
        case EventType::srq_limit_reached: owners = &srq_owner_; break;
        case EventType::port_active:
        case EventType::port_err:
        case EventType::device_fatal:
        case EventType::gid_change: break;
        default: owners = &qpn_owner_; break;
        }
        if (!owners) {
            for (Client* c : client_list_) {
                Msg copy = msg;
                send_(c->id, std::move(copy));
                ctr_.inc(DCounter::async_events_sent);
            }
        } else if (auto it = owners->find(ae.element); it != owners->end()) {
            Msg copy = msg;
            send_(it->second, std::move(copy));
            ctr_.inc(DCounter::async_events_sent);
        }
    }
}

void Engine::retry_zombies() {
    for (size_t i = 0; i < zombie_mrs_.size();) {
        if (zombie_mrs_[i]->mr.destroy() == Status::busy) {
            ++i;
            continue;
        }
        zombie_mrs_.erase(zombie_mrs_.begin() + long(i));  // unmapped now that the MR is gone
    }
    for (size_t i = 0; i < zombie_pds_.size();) {
        if (zombie_pds_[i].destroy() == Status::busy) ++i;
        else zombie_pds_.erase(zombie_pds_.begin() + long(i));
    }
}

// ---------------------------------------------------------------- clients

void Engine::add_client(uint32_t id, uint32_t pid, const std::string& comm) {
    auto c = std::make_unique<Client>();
    c->id = id;
    c->pid = pid;
    c->comm = comm;
    client_list_.push_back(c.get());
    clients_[id] = std::move(c);
}

void Engine::all_qps_to_error() {
    for (QpE* q : qps_) to_err(q->qp);
}

void Engine::flush_to_rings() {
    size_t work = 0;
    for (auto& l : lanes_) move_cqes(*l, work);  // the other lanes are parked (a command) or gone
    route_events();
}

std::vector<Mapping> Engine::remove_client(uint32_t id) {
    std::vector<Mapping> maps;
    auto cit = clients_.find(id);
    if (cit == clients_.end()) return maps;
    Client& c = *cit->second;
    uint64_t n = 0;
    // Its CM ids leave their connections (DREQ, REJ) as destroy_id does.
    for (uint32_t cmid : c.cm_ids) {
        uint32_t ignored = 0;
        (void)att_.cm().destroy_id(cmid, ignored);
        cm_owner_.erase(cmid);
        ++n;
    }
    c.cm_ids.clear();
    // QPs to ERR (flushed WRs have nobody to go to), then destroyed: peers see them vanish.
    for (auto& [h, q] : c.qps) {
        to_err(q->qp);
        forget_qp(q.get());
        qpn_owner_.erase(q->qpn);
        (void)q->qp.destroy();
        maps.push_back(std::move(q->map));
        ++n;
    }
    c.qps.clear();
    for (auto& [h, a] : c.ahs) {
        if ((h >> 8) < ahs_.size()) ahs_[h >> 8] = nullptr;
        (void)a->ah.destroy();
        ++n;
    }
    c.ahs.clear();
    for (auto& [h, s] : c.srqs) {
        std::erase(srqs_, s.get());
        std::erase(lanes_[s->lane]->srqs, s.get());
        srq_owner_.erase(h);
        (void)s->srq.destroy();
        maps.push_back(std::move(s->map));
        ++n;
    }
    c.srqs.clear();
    CqEvent ev;
    while (c.ch.get_cq_event(ev))
        if (auto it = c.cqs.find(ev.cq_handle); it != c.cqs.end()) it->second->cq.ack_events(1);
    for (auto& [h, q] : c.cqs) {
        std::erase(lanes_[q->lane]->cqs, q.get());
        cq_owner_.erase(h);
        (void)q->cq.destroy();
        maps.push_back(std::move(q->map));
        ++n;
    }
    c.cqs.clear();
    for (auto& [h, m] : c.mrs) {
        ++n;
        if (m->mr.destroy() == Status::busy) zombie_mrs_.push_back(std::move(m));  // a request in flight
        else maps.push_back(std::move(m->map));
    }
    c.mrs.clear();
    for (auto& [h, p] : c.pds) {
        ++n;
        if (p->pd.destroy() == Status::busy) zombie_pds_.push_back(std::move(p->pd));
    }
    c.pds.clear();
    char line[256];
    std::snprintf(line, sizeof line, "hcaemud: client %u (pid %u, %s) gone: %llu object(s) destroyed\n", c.id, c.pid,
                  c.comm.c_str(), static_cast<unsigned long long>(n));
    note(line);
    std::erase(client_list_, &c);
    clients_.erase(cit);
    ctr_.inc(DCounter::objects_cleaned, n);
    ctr_.inc(DCounter::clients_cleaned);
    return maps;
}

void Engine::note(std::string line) {
    if (!note_wake_) {
        if (write_now(2, line) != WriteNow::done) ctr_.inc(DCounter::notes_dropped);
        return;
    }
    {
        std::lock_guard<std::mutex> g(notes_mu_);
        notes_.push_back(std::move(line));
    }
    note_wake_();
}

std::vector<std::string> Engine::take_notes() {
    std::vector<std::string> lines;
    std::lock_guard<std::mutex> g(notes_mu_);
    lines.swap(notes_);
    return lines;
}

// ---------------------------------------------------------------- requests

namespace {

Msg reply(const ctl::Hdr& req, Status s, const void* body = nullptr, size_t n = 0, uint32_t detail = 0) {
    Msg m;
    m.bytes.resize(sizeof(ctl::ReplyHdr) + n);
    ctl::ReplyHdr r;
    r.h.op = uint16_t(req.op | ctl::kReplyBit);
    r.h.len = uint32_t(m.bytes.size());
    r.h.seq = req.seq;
    r.status = uint8_t(s);
    r.detail = detail;
    std::memcpy(m.bytes.data(), &r, sizeof r);
    if (n) std::memcpy(m.bytes.data() + sizeof r, body, n);
    return m;
}

template <class T>
T body_as(const uint8_t* b) {
    T t;
    std::memcpy(&t, b, sizeof t);
    return t;
}

struct ResBuilder {
    ctl::ResObj o{};
    void add(const char* name, const std::string& v) {
        if (o.nattr >= ctl::kResAttrs) return;
        ctl::put_str(o.a[o.nattr].name, name);
        ctl::put_str(o.a[o.nattr].value, v);
        ++o.nattr;
    }
    void add(const char* name, uint64_t v) { add(name, std::to_string(v)); }
    void add(const api::ResAttrs& attrs) {
        for (const auto& [n, v] : attrs) add(n.c_str(), v);
    }
};

}  // namespace

// One handler per op (the table below); each answers one valid request of its op. A friend of
// Engine: the handlers are the engine's own request code, split by op.
struct Ops {
    // The request being answered: its sender, its bytes, and the replies any handler may give,
    // each counted as the protocol says.
    struct Req {
        Client& c;
        uint32_t cid;
        const ctl::Hdr& h;
        const uint8_t* b;
        Region& region;  // reg_mr, rereg_mr: the memory; what is left in it the worker unmaps
        DCounters& ctr;
        bool full;  // the client holds --max-objects objects

        template <class T>
        T body() const { return body_as<T>(b); }
        // The body with its bool fields checked (proto_attr.hpp); false: one is not 0 or 1.
        template <class T>
        bool decode(T& out) const { return ctl::decode(b, out); }
        Msg ok(const void* body = nullptr, size_t n = 0) const { return reply(h, Status::ok, body, n); }
        Msg with_fd(const void* body, size_t n, int rfd) const {
            Msg m = reply(h, Status::ok, body, n);
            m.fd = rfd;
            return m;
        }
        Msg error(ctl::Error e, Status s) const {
            ctr.error(e);
            Msg m = reply(h, s);
            reinterpret_cast<ctl::ReplyHdr*>(m.bytes.data())->error = uint8_t(e);
            return m;
        }
        Msg bad() const {
            ctr.inc(DCounter::bad_handle);
            return reply(h, Status::bad_handle);
        }
        Msg field() const { return error(ctl::Error::bad_field, Status::invalid_argument); }
        Msg bad_fd() const { return error(ctl::Error::bad_fd, Status::invalid_argument); }
        Msg limit() const { return error(ctl::Error::limit, Status::no_resources); }
        Msg failed(Status s) const {
            if (s != Status::ok) ctr.inc(DCounter::requests_failed);
            return reply(h, s);
        }
    };
    // The sender's object of that handle in one of its maps, or nullptr.
    template <class M>
    static auto* find(M& m, uint32_t handle) {
        auto it = m.find(handle);
        return it == m.end() ? nullptr : it->second.get();
    }

    static Msg hello(Engine& en, const Req& in);
    static Msg query_device(Engine& en, const Req& in);
    static Msg query_port(Engine& en, const Req& in);
    static Msg query_gid(Engine& en, const Req& in);
    static Msg alloc_pd(Engine& en, const Req& in);
    static Msg dealloc_pd(Engine& en, const Req& in);
    static Msg reg_mr(Engine& en, const Req& in);
    static Msg rereg_mr(Engine& en, const Req& in);
    static Msg dereg_mr(Engine& en, const Req& in);
    static Msg create_cq(Engine& en, const Req& in);
    static Msg resize_cq(Engine& en, const Req& in);
    static Msg cq_ring(Engine& en, const Req& in, Cq* created, CqE* old, const ctl::CqInit& cr);
    static Msg destroy_cq(Engine& en, const Req& in);
    static Msg req_notify_cq(Engine& en, const Req& in);
    static Msg create_qp(Engine& en, const Req& in);
    static Msg destroy_qp(Engine& en, const Req& in);
    static Msg modify_qp(Engine& en, const Req& in);
    static Msg query_qp(Engine& en, const Req& in);
    static Msg create_srq(Engine& en, const Req& in);
    static Msg destroy_srq(Engine& en, const Req& in);
    static Msg modify_srq(Engine& en, const Req& in);
    static Msg query_srq(Engine& en, const Req& in);
    static Msg create_ah(Engine& en, const Req& in);
    static Msg destroy_ah(Engine& en, const Req& in);
    static Msg read_counters(Engine& en, const Req& in);
    static void lane_counts(Engine& en, api::Counts& all);
    static api::Counts daemon_counts(Engine& en);
    static Msg res_list(Engine& en, const Req& in);
    static void res_of_client(Engine& en, uint32_t id, Client& cl, api::ResKind kind, uint32_t start, uint64_t& idx,
                              ctl::ResListRep& rep);
    static Msg resolve(Engine& en, const Req& in);
    static Msg inject(Engine& en, const Req& in);
    static Msg cm(Engine& en, const Req& in);
    static bool cm_fields_ok(Engine& en, const Req& in, const ctl::CmCallReq& r);
};

namespace {

using Handler = Msg (*)(Engine&, const Ops::Req&);
constexpr auto kHandlers = [] {
    using ctl::Op;
    std::array<Handler, size_t(Op::count)> t{};
    t[size_t(Op::hello)] = &Ops::hello;
    t[size_t(Op::query_device)] = &Ops::query_device;
    t[size_t(Op::query_port)] = &Ops::query_port;
    t[size_t(Op::query_gid)] = &Ops::query_gid;
    t[size_t(Op::alloc_pd)] = &Ops::alloc_pd;
    t[size_t(Op::dealloc_pd)] = &Ops::dealloc_pd;
    t[size_t(Op::reg_mr)] = &Ops::reg_mr;
    t[size_t(Op::dereg_mr)] = &Ops::dereg_mr;
    t[size_t(Op::create_cq)] = &Ops::create_cq;
    t[size_t(Op::destroy_cq)] = &Ops::destroy_cq;
    t[size_t(Op::resize_cq)] = &Ops::resize_cq;
    t[size_t(Op::req_notify_cq)] = &Ops::req_notify_cq;
    t[size_t(Op::create_qp)] = &Ops::create_qp;
    t[size_t(Op::destroy_qp)] = &Ops::destroy_qp;
    t[size_t(Op::modify_qp)] = &Ops::modify_qp;
    t[size_t(Op::query_qp)] = &Ops::query_qp;
    t[size_t(Op::create_srq)] = &Ops::create_srq;
    t[size_t(Op::destroy_srq)] = &Ops::destroy_srq;
    t[size_t(Op::modify_srq)] = &Ops::modify_srq;
    t[size_t(Op::query_srq)] = &Ops::query_srq;
    t[size_t(Op::create_ah)] = &Ops::create_ah;
    t[size_t(Op::destroy_ah)] = &Ops::destroy_ah;
    t[size_t(Op::read_counters)] = &Ops::read_counters;
    t[size_t(Op::res_list)] = &Ops::res_list;
    t[size_t(Op::resolve)] = &Ops::resolve;
    t[size_t(Op::rereg_mr)] = &Ops::rereg_mr;
    t[size_t(Op::inject)] = &Ops::inject;
    t[size_t(Op::cm)] = &Ops::cm;
    return t;
}();

}  // namespace

Msg Engine::request(uint32_t cid, const ctl::Hdr& h, const uint8_t* b, Region& region) {
    auto cit = clients_.find(cid);
    const Handler fn = h.op < kHandlers.size() ? kHandlers[h.op] : nullptr;
    if (cit == clients_.end() || !fn) return reply(h, cit == clients_.end() ? Status::bad_handle : Status::not_supported);
    Client& c = *cit->second;
    return fn(*this, Ops::Req{c, cid, h, b, region, ctr_, c.objects() >= max_objects_});
}

Msg Ops::hello(Engine& en, const Req& in) {  // the io thread added the client; this is the reply
    ctl::HelloRep r;
    r.client_id = in.cid;
    r.max_objects = en.max_objects_;
    std::memcpy(r.gid, en.att_.gid().data(), 16);
    r.gid_index = en.att_.gid_index();
    return in.ok(&r, sizeof r);
}

Msg Ops::query_device(Engine& en, const Req& in) {
    const ctl::DeviceAttrW w = ctl::encode(en.dev_.query_device());
    return in.ok(&w, sizeof w);
}

Msg Ops::query_port(Engine& en, const Req& in) {
    const auto r = in.body<ctl::PortReq>();
    PortAttr pa;
    const Status s = en.dev_.query_port(r.port_num, pa);
    return s == Status::ok ? in.ok(&pa, sizeof pa) : in.failed(s);
}

Msg Ops::query_gid(Engine& en, const Req& in) {
    const auto r = in.body<ctl::GidReq>();
    GidEntry g;
    const Status s = en.dev_.query_gid(r.port_num, r.index, g);
    return s == Status::ok ? in.ok(&g, sizeof g) : in.failed(s);
}

Msg Ops::alloc_pd(Engine& en, const Req& in) {
    if (in.full) return in.limit();
    auto r = en.dev_.alloc_pd();
    if (!r.ok()) return in.failed(r.status);
    ctl::HandleRep rep;
    rep.handle = r->handle();
    auto e = std::make_unique<PdE>();
    e->pd = std::move(r.value);
    in.c.pds[rep.handle] = std::move(e);
    return in.ok(&rep, sizeof rep);
}

Msg Ops::dealloc_pd(Engine&, const Req& in) {
    const auto r = in.body<ctl::HandleReq>();
    PdE* p = find(in.c.pds, r.handle);
    if (!p) return in.bad();
    const Status s = p->pd.destroy();
    if (s == Status::ok) in.c.pds.erase(r.handle);
    return in.failed(s);
}

Msg Ops::reg_mr(Engine& en, const Req& in) {
    const auto r = in.body<ctl::RegMrReq>();
    // The io thread checked the memfd (sealed, range inside it), the worker mapped it and faulted it in.
    PdE* p = find(in.c.pds, r.pd);
    if (!p) return in.bad();
    if (in.full) return in.limit();
    if (!in.region.map.p) return in.bad_fd();
    auto res = en.dev_.reg_mr(p->pd, in.region.at, r.length, r.iova, r.access);
    if (!res.ok()) return in.failed(res.status);
    auto e = std::make_unique<MrE>();
    e->map = std::move(in.region.map);
    ctl::RegMrRep rep;
    rep.handle = res->handle();
    rep.lkey = res->lkey();
    rep.rkey = res->rkey();
    e->mr = std::move(res.value);
    e->iova = r.iova;
    e->length = r.length;
    e->access = r.access;
    in.c.mrs[rep.handle] = std::move(e);
    return in.ok(&rep, sizeof rep);
}

Msg Ops::rereg_mr(Engine&, const Req& in) {
    const auto r = in.body<ctl::ReregMrReq>();
    const bool move = r.flags & rereg::change_translation;
    auto it = in.c.mrs.find(r.handle);
    PdE* p = (r.flags & rereg::change_pd) ? find(in.c.pds, r.pd) : nullptr;
    if (it == in.c.mrs.end() || ((r.flags & rereg::change_pd) && !p)) return in.bad();
    if (move && !in.region.map.p) return in.bad_fd();
    MrE& m = *it->second;
    const Status s = m.mr.rereg(r.flags, p ? &p->pd : nullptr, move ? in.region.at : nullptr, r.length, r.access,
                                r.iova);
    if (s != Status::ok) return in.failed(s);  // the new mapping (if any) goes back; the MR is as it was
    if (move) {
        std::swap(m.map, in.region.map);  // the old pages, no longer named by the MR, go back to be unmapped
        m.iova = r.iova;
        m.length = r.length;
    }
    if (r.flags & rereg::change_access) m.access = r.access;
    ctl::RegMrRep rep;
    rep.handle = r.handle;
    rep.lkey = m.mr.lkey();
    rep.rkey = m.mr.rkey();
    return in.ok(&rep, sizeof rep);
}

Msg Ops::dereg_mr(Engine&, const Req& in) {
    const auto r = in.body<ctl::HandleReq>();
    auto it = in.c.mrs.find(r.handle);
    if (it == in.c.mrs.end()) return in.bad();
    const Status s = it->second->mr.destroy();
    if (s == Status::ok) {
        in.region.map = std::move(it->second->map);  // unmapped by the worker, off the data path
        in.c.mrs.erase(it);
    }
    return in.failed(s);
}

Msg Ops::create_cq(Engine& en, const Req& in) {
    ctl::CqInit cr;
    if (!ctl::decode(in.body<ctl::CreateCqReq>(), cr)) return in.field();
    if (in.full) return in.limit();
    if (cr.cqe < 1 || uint32_t(cr.cqe) > en.dev_.query_device().max_cqe) return in.failed(Status::invalid_argument);
    auto res = en.dev_.create_cq(cr.cqe, cr.events ? &in.c.ch : nullptr, cr.cq_context);
    if (!res.ok()) return in.failed(res.status);
    return cq_ring(en, in, &res.value, nullptr, cr);
}

Msg Ops::resize_cq(Engine& en, const Req& in) {
    const auto rr = in.body<ctl::ResizeCqReq>();
    CqE* old = find(in.c.cqs, rr.handle);
    if (!old) return in.bad();
    if (rr.cqe < 1 || uint32_t(rr.cqe) > en.dev_.query_device().max_cqe) return in.failed(Status::invalid_argument);
    // A command reaches the device after the doorbells rung before it: the WQEs posted so far
    // run first (bounded), so that their completions count below.
    // (Its lane's, parked meanwhile with --lcores.)
    size_t work = 0;
    en.turn_rings(*en.lanes_[old->lane], work);
    transport::Hca& h = en.att_.hca(old->lane);
    for (int i = 0; i < 256 && h.has_work(); ++i) (void)(old->lane ? h.poll() : en.att_.poll());
    t_lcore = 0;  // h.poll() made this thread write lane old->lane's counters
    // As ibv_resize_cq: never below the CQEs still to poll, in the client's ring and ours.
    const uint64_t cons = std::min(old->r.h->cons.load(std::memory_order_acquire), old->r.taken);
    const uint64_t queued = std::min<uint64_t>(old->r.taken - cons, old->r.cap) + old->obj->ring.count();
    if (uint64_t(rr.cqe) < queued) return in.failed(Status::invalid_argument);
    const Status s = old->cq.resize(rr.cqe);
    if (s != Status::ok) return in.failed(s);
    return cq_ring(en, in, nullptr, old, {});
}

// The ring of a CQ just created (`created`) or resized (`old`), and the reply that passes it.
Msg Ops::cq_ring(Engine& en, const Req& in, Cq* created, CqE* old, const ctl::CqInit& cr) {
    const uint32_t cap = uint32_t(created ? created->cqe() : old->cq.cqe());
    const size_t bytes = shm::ring_bytes(cap, sizeof(shm::Cqe));
    int rfd = -1;
    Mapping map;
    if (!make_ring_fd("hcaemu-cq", bytes, rfd, map)) return in.failed(Status::no_resources);  // the CQ's RAII handle destroys it
    RingV rv = init_ring(static_cast<uint8_t*>(map.p), shm::RingKind::cq, cap, sizeof(shm::Cqe));
    ctl::CreateCqRep rep;
    rep.cqe = int32_t(cap);
    rep.ring_bytes = bytes;
    if (created) {
        auto e = std::make_unique<CqE>();
        e->handle = created->handle();
        e->owner = &in.c;
        e->obj = en.dev_.cq(created->handle());
        e->cq = std::move(*created);
        e->map = std::move(map);
        e->r = rv;
        e->context = cr.cq_context;
        e->events = cr.events;
        rep.handle = e->handle;
        en.lanes_[0]->cqs.push_back(e.get());  // lane 0's until a QP uses it
        en.cq_owner_[e->handle] = in.cid;
        in.c.cqs[e->handle] = std::move(e);
    } else {
        // The old ring gets nothing more: the client drains it up to its prod, then polls this one.
        old->map = std::move(map);
        old->r = rv;
        rep.handle = old->handle;
    }
    return in.with_fd(&rep, sizeof rep, rfd);
}

Msg Ops::destroy_cq(Engine& en, const Req& in) {
    const auto r = in.body<ctl::DestroyCqReq>();
    CqE* q = find(in.c.cqs, r.handle);
    if (!q) return in.bad();
    en.route_events();  // its pending events go out (and are acked) first
    const Status s = q->cq.destroy();
    if (s == Status::ok) {
        std::erase(en.lanes_[q->lane]->cqs, q);
        en.cq_owner_.erase(r.handle);
        in.c.cqs.erase(r.handle);
    }
    return in.failed(s);
}

Msg Ops::req_notify_cq(Engine&, const Req& in) {
    const auto r = in.body<ctl::NotifyReq>();
    if (r.solicited_only > 1) return in.field();
    CqE* q = find(in.c.cqs, r.handle);
    if (!q) return in.bad();
    if (!q->events) return in.failed(Status::invalid_argument);  // created without a channel
    return in.failed(q->cq.req_notify(r.solicited_only));
}

Msg Ops::create_qp(Engine& en, const Req& in) {
    const auto req = in.body<ctl::CreateQpReq>();
    ctl::QpInit r;
    if (!ctl::decode(req, r)) return in.field();
    Client& c = in.c;
    PdE* p = find(c.pds, r.pd);
    CqE* scq = find(c.cqs, r.send_cq);
    CqE* rcq = find(c.cqs, r.recv_cq);
    SrqE* srq = nullptr;
    if (r.srq) {
        srq = find(c.srqs, r.srq);
        if (!srq) return in.bad();
    }
    if (!p || !scq || !rcq) return in.bad();
    if (in.full) return in.limit();
    const DeviceAttr& da = en.dev_.query_device();
    if (r.cap.max_send_sge > da.max_sge || r.cap.max_recv_sge > da.max_sge || r.cap.max_inline_data > da.max_inline_data)
        return in.failed(Status::invalid_argument);
    QpInitAttr ia;
    ia.send_cq = &scq->cq;
    ia.recv_cq = &rcq->cq;
    ia.srq = srq ? &srq->srq : nullptr;
    ia.cap = r.cap;
    ia.qp_type = r.qp_type;
    ia.sq_sig_all = r.sq_sig_all;
    auto res = en.dev_.create_qp(p->pd, ia);
    if (!res.ok()) return in.failed(res.status);
    // --lcores: each CQ and SRQ is filled by one lcore (no lock on its ring); a QP whose CQs or
    // SRQ are already used on two lcores has no lane (the QP handle destroys it).
    if (transport::HcaGroup* g = en.att_.group(); g && !g->place(res->qpn(), g->owner(res->qpn()))) {
        in.ctr.inc(DCounter::lane_conflicts);
        return in.failed(Status::invalid_argument);
    }
    const QpCap cap = ia.cap;
    const uint32_t sesz = shm::send_entry_size(cap.max_send_sge, cap.max_inline_data);
    const uint32_t resz = shm::recv_entry_size(cap.max_recv_sge);
    if (sesz > kMaxEntry || resz > kMaxEntry || cap.max_send_sge > 64 || cap.max_recv_sge > 64)
        return in.failed(Status::invalid_argument);
    const size_t sq_bytes = shm::ring_bytes(cap.max_send_wr, sesz);
    const size_t rq_bytes = srq ? 0 : shm::ring_bytes(cap.max_recv_wr, resz);
    int rfd = -1;
    Mapping map;
    if (!make_ring_fd("hcaemu-qp", sq_bytes + rq_bytes, rfd, map)) return in.failed(Status::no_resources);
    auto e = std::make_unique<QpE>();
    e->owner = &c;
    e->handle = res->handle();
    e->qpn = res->qpn();
    e->obj = en.dev_.qp(e->handle);
    e->qp = std::move(res.value);
    e->sq = init_ring(static_cast<uint8_t*>(map.p), shm::RingKind::sq, cap.max_send_wr, sesz);
    e->has_rq = !srq;
    if (!srq) e->rq = init_ring(static_cast<uint8_t*>(map.p) + sq_bytes, shm::RingKind::rq, cap.max_recv_wr, resz);
    e->map = std::move(map);
    e->init = req;
    e->init.cap = cap;
    e->cap = cap;
    ctl::CreateQpRep rep;
    rep.handle = e->handle;
    rep.qpn = e->qpn;
    rep.cap = cap;
    rep.sq_offset = 0;
    rep.rq_offset = srq ? 0 : sq_bytes;
    rep.ring_bytes = sq_bytes + rq_bytes;
    en.place_qp(e.get(), scq, rcq, srq);
    if (e->qpn >= en.by_qpn_.size()) en.by_qpn_.resize(size_t(e->qpn) + 1, nullptr);  // control path
    en.by_qpn_[e->qpn] = e.get();
    en.qpn_owner_[e->qpn] = in.cid;
    c.qps[e->handle] = std::move(e);
    return in.with_fd(&rep, sizeof rep, rfd);
}

Msg Ops::destroy_qp(Engine& en, const Req& in) {
    const auto r = in.body<ctl::HandleReq>();
    auto it = in.c.qps.find(r.handle);
    if (it == in.c.qps.end()) return in.bad();
    QpE* q = it->second.get();
    const Status s = q->qp.destroy();
    if (s == Status::ok) {
        en.forget_qp(q);
        en.qpn_owner_.erase(q->qpn);
        in.c.qps.erase(it);
    }
    return in.failed(s);
}

Msg Ops::modify_qp(Engine&, const Req& in) {
    ctl::ModifyQpReq r;
    if (!in.decode(r)) return in.field();
    QpE* q = find(in.c.qps, r.handle);
    if (!q) return in.bad();
    // A controlled Q_Key (high-order bit set) is for privileged consumers only (IBTA 10.2.4);
    // the daemon's clients are not, and Linux's uverbs modify_qp answers EPERM to one without
    // CAP_NET_RAW. (A send WR's Q_Key with that bit means "the QP's own": that stays allowed.)
    if ((r.mask & qp_attr::qkey) && (r.attr.qkey & 0x80000000u)) return in.failed(Status::permission_denied);
    const ModifyResult mr = q->qp.modify(r.attr, r.mask);
    if (!mr.ok()) in.ctr.inc(DCounter::requests_failed);
    return reply(in.h, mr.status, nullptr, 0, mr.bits);
}

Msg Ops::query_qp(Engine&, const Req& in) {
    const auto r = in.body<ctl::HandleReq>();
    QpE* q = find(in.c.qps, r.handle);
    if (!q) return in.bad();
    ctl::QueryQpRep rep{};
    const Status s = q->qp.query(rep.attr);
    rep.init = q->init;
    return s == Status::ok ? in.ok(&rep, sizeof rep) : in.failed(s);
}

Msg Ops::create_srq(Engine& en, const Req& in) {
    const auto r = in.body<ctl::CreateSrqReq>();
    PdE* p = find(in.c.pds, r.pd);
    if (!p) return in.bad();
    if (in.full) return in.limit();
    SrqAttr a = r.attr;
    if (a.max_sge > 64) return in.failed(Status::invalid_argument);
    auto res = en.dev_.create_srq(p->pd, a);
    if (!res.ok()) return in.failed(res.status);
    const uint32_t esz = shm::recv_entry_size(a.max_sge);
    if (esz > kMaxEntry) return in.failed(Status::invalid_argument);
    const size_t bytes = shm::ring_bytes(a.max_wr, esz);
    int rfd = -1;
    Mapping map;
    if (!make_ring_fd("hcaemu-srq", bytes, rfd, map)) return in.failed(Status::no_resources);
    auto e = std::make_unique<SrqE>();
    e->owner = &in.c;
    e->handle = res->handle();
    e->obj = en.dev_.srq(e->handle);
    e->srq = std::move(res.value);
    e->r = init_ring(static_cast<uint8_t*>(map.p), shm::RingKind::srq, a.max_wr, esz);
    e->map = std::move(map);
    e->max_sge = a.max_sge;
    ctl::CreateSrqRep rep;
    rep.handle = e->handle;
    rep.attr = a;
    rep.ring_bytes = bytes;
    en.srqs_.push_back(e.get());
    en.lanes_[0]->srqs.push_back(e.get());  // lane 0's until a QP uses it
    en.srq_owner_[e->handle] = in.cid;
    in.c.srqs[e->handle] = std::move(e);
    return in.with_fd(&rep, sizeof rep, rfd);
}

Msg Ops::destroy_srq(Engine& en, const Req& in) {
    const auto r = in.body<ctl::HandleReq>();
    auto it = in.c.srqs.find(r.handle);
    if (it == in.c.srqs.end()) return in.bad();
    SrqE* s = it->second.get();
    const Status st = s->srq.destroy();
    if (st == Status::ok) {
        std::erase(en.srqs_, s);
        std::erase(en.lanes_[s->lane]->srqs, s);
        en.srq_owner_.erase(r.handle);
        in.c.srqs.erase(it);
    }
    return in.failed(st);
}

Msg Ops::modify_srq(Engine&, const Req& in) {
    const auto r = in.body<ctl::ModifySrqReq>();
    SrqE* s = find(in.c.srqs, r.handle);
    if (!s) return in.bad();
    // The ring was sized at creation: a larger max_wr cannot be granted.
    if ((r.mask & srq_attr::max_wr) && r.attr.max_wr > s->r.cap) return in.failed(Status::invalid_argument);
    return in.failed(s->srq.modify(r.attr, r.mask));
}

Msg Ops::query_srq(Engine&, const Req& in) {
    const auto r = in.body<ctl::HandleReq>();
    SrqE* s = find(in.c.srqs, r.handle);
    if (!s) return in.bad();
    SrqAttr a;
    const Status st = s->srq.query(a);
    return st == Status::ok ? in.ok(&a, sizeof a) : in.failed(st);
}

Msg Ops::create_ah(Engine& en, const Req& in) {
    ctl::CreateAhReq r;
    if (!in.decode(r)) return in.field();
    PdE* p = find(in.c.pds, r.pd);
    if (!p) return in.bad();
    if (in.full) return in.limit();
    auto res = en.dev_.create_ah(p->pd, r.attr);
    if (!res.ok()) return in.failed(res.status);
    ctl::HandleRep rep;
    rep.handle = res->handle();
    auto e = std::make_unique<AhE>();
    e->ah = std::move(res.value);
    e->owner = &in.c;
    if ((rep.handle >> 8) >= en.ahs_.size()) en.ahs_.resize((rep.handle >> 8) + 1, nullptr);
    en.ahs_[rep.handle >> 8] = e.get();
    in.c.ahs[rep.handle] = std::move(e);
    return in.ok(&rep, sizeof rep);
}

Msg Ops::destroy_ah(Engine& en, const Req& in) {
    const auto r = in.body<ctl::HandleReq>();
    auto it = in.c.ahs.find(r.handle);
    if (it == in.c.ahs.end()) return in.bad();
    const Status s = it->second->ah.destroy();
    if (s == Status::ok) {
        en.ahs_[r.handle >> 8] = nullptr;
        in.c.ahs.erase(it);
    }
    return in.failed(s);
}

// CounterSet::daemon: hcaemud's own counters, then gauges.
api::Counts Ops::daemon_counts(Engine& en) {
    api::Counts all;
    for (size_t i = 0; i < size_t(DCounter::count); ++i) all.emplace_back(kDCounterName[i], en.ctr_.get(DCounter(i)));
    // Gauges: the objects the device holds now, every client's and those waiting to be freed.
    Device& dev = en.dev_;
    all.emplace_back("dev_pds", dev.num_pds());
    all.emplace_back("dev_mrs", dev.num_mrs());
    all.emplace_back("dev_cqs", dev.num_cqs());
    all.emplace_back("dev_qps", dev.num_qps());
    all.emplace_back("dev_srqs", dev.num_srqs());
    all.emplace_back("dev_ahs", dev.num_ahs());
    // Bytes malloc has handed out and not had back, every thread's arena (a leak shows
    // here; RSS also grows with fragmentation and with pages touched for the first time),
    // and the part of them that grows with the highest handle index ever used, by design:
    // the device's tables hand out fresh indices until each has used all of its max once.
    const struct mallinfo2 mi = mallinfo2();
    all.emplace_back("malloc_in_use", uint64_t(mi.uordblks + mi.hblkhd));
    all.emplace_back("table_bytes", uint64_t(dev.table_bytes() + en.ahs_.capacity() * sizeof(AhE*)));
    return all;
}

// --lcores N > 1: per lcore, its engine's frames (the device's counters of that lcore), its QPs,
// and what steering did with the frames read on its queue (port::SteerStats).
void Ops::lane_counts(Engine& en, api::Counts& all) {
    const port::Steering* st = en.att_.steering();
    if (!st) return;
    for (uint32_t k = 0; k < en.lanes_.size(); ++k) {
        const std::string p = "lcore" + std::to_string(k) + "_";
        const Counters& c = en.dev_.counters(k);
        const port::SteerStats s = st->stats(k);
        all.emplace_back(p + "qps", en.lanes_[k]->qps.size());
        all.emplace_back(p + "rcvd_pkts", c.get(Counter::rcvd_pkts));
        all.emplace_back(p + "sent_pkts", c.get(Counter::sent_pkts));
        all.emplace_back(p + "rx_drop_no_qp", c.get(Counter::rx_drop_no_qp));
        all.emplace_back(p + "steer_rx_own", s.rx_own);
        all.emplace_back(p + "steer_forwarded", s.forwarded);
        all.emplace_back(p + "steer_received", s.received);
        all.emplace_back(p + "steer_ring_full", s.ring_full);
        all.emplace_back(p + "steer_rx_unparsed", s.rx_unparsed);
    }
}

Msg Ops::read_counters(Engine& en, const Req& in) {
    const auto r = in.body<ctl::CountersReq>();
    if (r.set >= uint8_t(ctl::CounterSet::count)) return in.field();
    api::Counts all;
    switch (ctl::CounterSet(r.set)) {
    case ctl::CounterSet::device: all = api::device_counts(en.dev_.counters_total()); break;
    case ctl::CounterSet::net: all = api::net_counts(en.att_.net().net_stats()); break;
    case ctl::CounterSet::link:
        all = api::link_counts(en.att_.dpdk());
        api::add_conform_counts(en.att_, all);
        lane_counts(en, all);
        break;
    default: all = daemon_counts(en); break;
    }
    auto rep = std::make_unique<ctl::CountersRep>();
    rep->total = uint32_t(all.size());
    for (size_t i = r.start; i < all.size() && rep->n < ctl::kCountersPerPage; ++i) {
        ctl::put_str(rep->v[rep->n].name, all[i].first);
        rep->v[rep->n].value = all[i].second;
        ++rep->n;
    }
    return in.ok(rep.get(), sizeof(ctl::CountersRep));
}

Msg Ops::res_list(Engine& en, const Req& in) {
    const auto r = in.body<ctl::ResListReq>();
    if (r.kind >= uint8_t(api::ResKind::count)) return in.field();
    // Only the page returned is built; the objects before it and after it are only counted.
    auto rep = std::make_unique<ctl::ResListRep>();
    uint64_t idx = 0;
    for (auto& [id, cl] : en.clients_) res_of_client(en, id, *cl, api::ResKind(r.kind), r.start, idx, *rep);
    rep->total = uint32_t(idx);
    return in.ok(rep.get(), sizeof(ctl::ResListRep));
}

// One client's objects of `kind` into the page that starts at object `start`; idx counts the
// objects seen so far (every client's).
void Ops::res_of_client(Engine& en, uint32_t id, Client& cl, api::ResKind kind, uint32_t start, uint64_t& idx,
                        ctl::ResListRep& rep) {
    auto skip = [&](size_t k) {  // a whole client's list outside the page
        if (idx + k > start && rep.n < ctl::kResPerPage) return false;
        idx += k;
        return true;
    };
    auto want = [&] { return idx++ >= start && rep.n < ctl::kResPerPage; };
    auto keep = [&](const ResBuilder& rb) { rep.o[rep.n++] = rb.o; };
    auto base = [&] {
        ResBuilder rb;
        rb.o.client = id;
        rb.o.pid = cl.pid;
        ctl::put_str(rb.o.comm, cl.comm);
        return rb;
    };
    Device& dev = en.dev_;
    switch (kind) {
    case api::ResKind::pd:
        if (skip(cl.pds.size())) break;
        for (auto& [hd, p] : cl.pds) {
            if (!want()) continue;
            ResBuilder rb = base();
            if (const PdObj* o = dev.pd(hd)) rb.add(api::res_attrs(*o));
            keep(rb);
        }
        break;
    case api::ResKind::mr:
        if (skip(cl.mrs.size())) break;
        for (auto& [hd, m] : cl.mrs) {
            if (!want()) continue;
            ResBuilder rb = base();
            if (const MrObj* o = dev.mr(hd)) rb.add(api::res_attrs(*o));
            keep(rb);
        }
        break;
    case api::ResKind::cq:
        if (skip(cl.cqs.size())) break;
        for (auto& [hd, q] : cl.cqs) {
            if (!want()) continue;
            ResBuilder rb = base();
            rb.add(api::res_attrs(*q->obj));
            // completions in the shared ring that the client has not taken yet
            rb.add("in_ring", q->r.taken - q->r.h->cons.load(std::memory_order_relaxed));
            if (en.lanes_.size() > 1) rb.add("lcore", q->lane);  // the lcore that fills it
            keep(rb);
        }
        break;
    case api::ResKind::qp:
        if (skip(cl.qps.size())) break;
        for (auto& [hd, q] : cl.qps) {
            if (!want()) continue;
            ResBuilder rb = base();
            rb.add(api::res_attrs(*q->obj));
            if (en.lanes_.size() > 1) rb.add("lcore", q->lane);  // the lcore whose engine runs it
            keep(rb);
        }
        break;
    default:
        if (skip(cl.srqs.size())) break;
        for (auto& [hd, s] : cl.srqs) {
            if (!want()) continue;
            ResBuilder rb = base();
            rb.add(api::res_attrs(*s->obj));
            keep(rb);
        }
        break;
    }
}

Msg Ops::resolve(Engine& en, const Req& in) {
    const auto r = in.body<ctl::ResolveReq>();
    Gid g;
    std::memcpy(g.data(), r.gid, 16);
    pkt::Mac mac{};
    const port::NeighborState st = en.att_.net().resolve(g, mac);
    ctl::ResolveRep rep;
    rep.state = uint8_t(st == port::NeighborState::reachable ? ctl::Neighbor::resolved
                        : st == port::NeighborState::failed  ? ctl::Neighbor::failed
                                                             : ctl::Neighbor::pending);
    if (st == port::NeighborState::reachable) std::memcpy(rep.mac, mac.data(), 6);
    return in.ok(&rep, sizeof rep);
}

// Event injection rules on the port (docs/inject.md). Hostile input: an unknown cmd, a rule text
// without its NUL, a non-zero reserved field: bad_field; a rule that does not parse: failed
// (invalid_argument), as is a del of no such rule (bad_handle); kMaxRules: limit.
Msg Ops::inject(Engine& en, const Req& in) {
    const auto r = in.body<ctl::InjectReq>();
    if (r.cmd >= uint8_t(ctl::InjectCmd::count) || r.rsv[0] || r.rsv[1] || r.rsv[2] || r.rsv2) return in.field();
    if (en.att_.lcores() > 1) return in.failed(Status::not_supported);  // the injection sees queue 0 only
    port::InjectPort& ip = en.att_.inject();
    ctl::InjectRep rep;
    switch (ctl::InjectCmd(r.cmd)) {
    case ctl::InjectCmd::add: {
        if (r.id || r.start || !std::memchr(r.rule, 0, sizeof r.rule)) return in.field();
        std::string msg;
        port::InjectError e = port::InjectError::ok;
        rep.id = ip.add(r.rule, msg, &e);
        if (!rep.id) return e == port::InjectError::too_many_rules ? in.limit() : in.failed(Status::invalid_argument);
        return in.ok(&rep, sizeof rep);
    }
    case ctl::InjectCmd::del:
        if (r.start || r.rule[0]) return in.field();
        return ip.del(r.id) ? in.ok(&rep, sizeof rep) : in.failed(Status::bad_handle);
    default: {
        if (r.id || r.rule[0]) return in.field();
        const auto all = ip.list();
        rep.total = uint32_t(all.size());
        for (size_t i = r.start; i < all.size() && rep.n < ctl::kInjectPerPage; ++i) {
            ctl::InjectRuleW& w = rep.r[rep.n++];
            w.id = all[i].id;
            w.matched = all[i].matched;
            w.hits = all[i].hits;
            std::snprintf(w.text, sizeof w.text, "%s", all[i].text.c_str());
        }
        return in.ok(&rep, offsetof(ctl::InjectRep, r) + rep.n * sizeof(ctl::InjectRuleW));
    }
    }
}

namespace {

bool sockaddr_ok(const sockaddr_storage& a) {
    if (a.ss_family == AF_INET) {
        const uint8_t* b = reinterpret_cast<const uint8_t*>(&a);
        for (size_t i = sizeof(sockaddr_in); i < sizeof a; ++i)
            if (b[i]) return false;
        return true;
    }
    return a.ss_family == AF_INET6;
}

bool zero_addr(const sockaddr_storage& a) {
    const uint8_t* b = reinterpret_cast<const uint8_t*>(&a);
    return std::all_of(b, b + sizeof a, [](uint8_t x) { return x == 0; });
}

}  // namespace

// Every field of a CM request against its command (proto.hpp CmCallReq): the ones the command
// does not use are 0, addresses are AF_INET/AF_INET6, enums in range, a QP number is one of the
// client's QPs.
bool Ops::cm_fields_ok(Engine& en, const Req& in, const ctl::CmCallReq& r) {
    using C = ctl::CmCmd;
    const C cmd = C(r.cmd);
    if (r.rsv || r.rsv2) return false;
    if (cmd != C::create_id && (r.qp_type || r.ps || r.context)) return false;
    const bool uses_src = cmd == C::bind || (cmd == C::resolve_addr && r.arg8 == 1);
    if (uses_src ? !sockaddr_ok(r.src) : !zero_addr(r.src)) return false;
    if (cmd == C::resolve_addr ? !sockaddr_ok(r.dst) : !zero_addr(r.dst)) return false;
    switch (cmd) {
    case C::create_id: return !r.id && !r.arg8 && !r.arg32;
    case C::resolve_addr: return r.arg8 <= 1;
    case C::init_qp_attr: return r.arg8 < kQpStateCount && !r.arg32;
    case C::set_option: return r.arg8 <= uint8_t(api::CmOption::ack_timeout);
    case C::resolve_route:
    case C::listen: return !r.arg8;
    default: break;
    }
    if (r.arg8 || r.arg32) return false;
    const bool uses_param = cmd == C::connect || cmd == C::accept || cmd == C::reject;
    if (!uses_param) return r.param.private_data_len == 0 && r.param.qp_num == 0;
    if (r.param.private_data_len > api::kCmMaxPrivate) return false;
    if (cmd == C::reject) return true;
    auto o = en.qpn_owner_.find(r.param.qp_num);  // the client's own QP only
    return o != en.qpn_owner_.end() && o->second == in.cid;
}

Msg Ops::cm(Engine& en, const Req& in) {
    // The one bool of the body, before it is read as one (proto_attr.hpp's rule).
    if (in.b[offsetof(ctl::CmCallReq, param) + offsetof(api::CmConnParam, srq)] > 1) return in.field();
    const auto r = in.body<ctl::CmCallReq>();
    if (r.cmd >= uint8_t(ctl::CmCmd::count) || !cm_fields_ok(en, in, r)) return in.field();
    ctl::CmCallRep rep;
    api::Cm& cm = en.att_.cm();
    if (ctl::CmCmd(r.cmd) == ctl::CmCmd::create_id) {
        if (in.full) return in.limit();
        rep.err = cm.create_id(pkt::RdmaPs(r.ps), QpType(r.qp_type), r.context, rep.id);
        if (!rep.err) {
            en.cm_owner_[rep.id] = in.cid;
            in.c.cm_ids.insert(rep.id);
        }
        return in.ok(&rep, sizeof rep);
    }
    if (!in.c.cm_ids.count(r.id)) return in.bad();  // not an id of this client
    const auto* src = reinterpret_cast<const sockaddr*>(&r.src);
    switch (ctl::CmCmd(r.cmd)) {
    case ctl::CmCmd::destroy_id:
        rep.err = cm.destroy_id(r.id, rep.events_reported);
        in.c.cm_ids.erase(r.id);
        en.cm_owner_.erase(r.id);
        break;
    case ctl::CmCmd::bind: rep.err = cm.bind(r.id, src); break;
    case ctl::CmCmd::resolve_addr:
        rep.err = cm.resolve_addr(r.id, r.arg8 ? src : nullptr, reinterpret_cast<const sockaddr*>(&r.dst), r.arg32);
        break;
    case ctl::CmCmd::resolve_route: rep.err = cm.resolve_route(r.id, r.arg32); break;
    case ctl::CmCmd::query: rep.err = cm.query(r.id, rep.info); break;
    case ctl::CmCmd::listen: rep.err = cm.listen(r.id, r.arg32); break;
    case ctl::CmCmd::connect: rep.err = cm.connect(r.id, r.param); break;
    case ctl::CmCmd::accept: rep.err = cm.accept(r.id, r.param); break;
    case ctl::CmCmd::reject: rep.err = cm.reject(r.id, r.param.private_data, r.param.private_data_len); break;
    case ctl::CmCmd::disconnect: rep.err = cm.disconnect(r.id); break;
    case ctl::CmCmd::establish: rep.err = cm.establish(r.id); break;
    case ctl::CmCmd::init_qp_attr: rep.err = cm.init_qp_attr(r.id, QpState(r.arg8), rep.attr, rep.mask); break;
    case ctl::CmCmd::set_option: rep.err = cm.set_option(r.id, api::CmOption(r.arg8), uint32_t(r.arg32)); break;
    default: return in.field();
    }
    if (rep.err) en.ctr_.inc(DCounter::requests_failed);
    return in.ok(&rep, sizeof rep);
}

}  // namespace hcaemu::daemon
