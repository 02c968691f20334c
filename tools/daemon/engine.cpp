// hcaemud's data thread: control operations, doorbells, CQ rings, events. See engine.hpp and
// tools/lib/PROTOCOL.md.
#include "tools/daemon/engine.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>

#include "tools/lib/api.hpp"
#include "tools/lib/inspect.hpp"

namespace hcaemu::daemon {

namespace {

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

// The daemon's own view of one ring: its copy of cap and entry size (never the header's).
struct RingV {
    shm::RingHdr* h = nullptr;
    uint8_t* ents = nullptr;
    shm::RingKind kind = shm::RingKind::sq;
    uint32_t cap = 0;
    uint32_t esz = 0;
    uint64_t taken = 0;     // SQ/RQ/SRQ: entries taken; CQ: CQEs written (our prod)
    uint64_t cons_pub = 0;  // SQ/RQ/SRQ: the cons last stored
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
// client can neither cut the mapping under us (SIGBUS) nor grow it.
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
    m = Mapping(p, bytes);
    return true;
}

constexpr size_t kMaxEntry = 1024;  // the largest WQE the device's limits allow fits (checked at create)

}  // namespace

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
    Client* owner = nullptr;
    Mapping map;
    Qp qp;
    QpObj* obj = nullptr;
    RingV sq, rq;
    bool has_rq = false;
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
    size_t objects() const { return pds.size() + mrs.size() + cqs.size() + qps.size() + srqs.size() + ahs.size(); }
};

Engine::Engine(tools::Attached& att, DCounters& ctr, uint32_t max_objects, SendFn send)
    : att_(att), dev_(att.dev()), ctr_(ctr), max_objects_(max_objects), send_(std::move(send)) {}

Engine::~Engine() {
    while (!clients_.empty()) remove_client(clients_.begin()->first);
}

void Engine::submit(std::function<void()> fn) {
    std::lock_guard<std::mutex> g(qm_);
    queue_.push_back(std::move(fn));
    pending_.store(true, std::memory_order_release);
}

size_t Engine::turn() {
    // The doorbells before the port: a receive a client posted before a SEND reached us is in
    // the device when the SEND is processed, as on an HCA (UD would drop the SEND, RC NAK it
    // RNR). A turn delayed after the rings were read can still see a SEND whose receive came
    // in during that delay. And again after it, before the CQEs: each ring's cons must cover
    // the WQEs whose completions the client is about to see (it posts into the slots they
    // free at once: a tx depth of 1 found its SQ ring full).
    size_t work = 0;
    turn_rings(work);
    work += att_.poll();
    turn_rings(work);
    move_cqes(work);
    route_events();
    if (!zombie_mrs_.empty() || !zombie_pds_.empty()) retry_zombies();
    return work;
}

void Engine::run() {
    std::vector<std::function<void()>> batch;
    uint32_t idle = 0;
    while (!stop_.load(std::memory_order_acquire)) {
        size_t work = turn();
        // The command queue: one relaxed load per turn while nothing is queued.
        if (pending_.load(std::memory_order_relaxed)) {
            {
                std::lock_guard<std::mutex> g(qm_);
                batch.swap(queue_);
                pending_.store(false, std::memory_order_relaxed);
            }
            for (auto& f : batch) f();
            batch.clear();
            work = 1;
        }
        // Back-off when idle, so that daemons and busy-polling clients share a small machine:
        // after 64 empty turns, yield the CPU each turn (a client waiting for its completion runs
        // at once, and the data path resumes as soon as nothing else wants the core); after
        // 20000, sleep 50 us per turn; after 40000 (a second or more), 500 us; busy-poll again at
        // the first work.
        if (work) {
            idle = 0;
        } else if (++idle > 20000) {
            const timespec ts{0, idle > 40000 ? 500'000 : 50'000};
            nanosleep(&ts, nullptr);
        } else if (idle > 64) {
            sched_yield();
        }
    }
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

void Engine::take_recv(QpE* q, SrqE* sq, size_t& work) {
    RingV& r = q ? q->rq : sq->r;
    auto outstanding = [&] { return q ? q->obj->rq.count() : sq->obj->rq.count(); };
    auto full = [&] { return q ? q->obj->rq.full() : sq->obj->rq.full(); };
    const uint64_t cons = r.taken - outstanding();
    if (cons != r.cons_pub) {
        r.h->cons.store(cons, std::memory_order_release);
        r.cons_pub = cons;
    }
    const uint64_t prod = r.h->prod.load(std::memory_order_acquire);
    if (prod == r.taken) return;
    if (!r.header_ok() || prod - cons > r.cap || prod - r.taken > r.cap) return ring_error(q, sq);
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

void Engine::turn_rings(size_t& work) {
    for (QpE* q : qps_) {
        if (!q->sq.error) take_send(*q->owner, *q, work);
        if (q->has_rq && !q->rq.error) take_recv(q, nullptr, work);
    }
    for (SrqE* s : srqs_)
        if (!s->r.error) take_recv(nullptr, s, work);
}

void Engine::move_cqes(size_t& work) {
    Wc wc[32];
    for (CqE* c : cqs_) {
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

void Engine::route_events() {
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
    move_cqes(work);
    route_events();
}

void Engine::remove_client(uint32_t id) {
    auto cit = clients_.find(id);
    if (cit == clients_.end()) return;
    Client& c = *cit->second;
    uint64_t n = 0;
    // QPs to ERR (flushed WRs have nobody to go to), then destroyed: peers see them vanish.
    for (auto& [h, q] : c.qps) {
        to_err(q->qp);
        std::erase(qps_, q.get());
        qpn_owner_.erase(q->qpn);
        (void)q->qp.destroy();
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
        srq_owner_.erase(h);
        (void)s->srq.destroy();
        ++n;
    }
    c.srqs.clear();
    CqEvent ev;
    while (c.ch.get_cq_event(ev))
        if (auto it = c.cqs.find(ev.cq_handle); it != c.cqs.end()) it->second->cq.ack_events(1);
    for (auto& [h, q] : c.cqs) {
        std::erase(cqs_, q.get());
        cq_owner_.erase(h);
        (void)q->cq.destroy();
        ++n;
    }
    c.cqs.clear();
    for (auto& [h, m] : c.mrs) {
        ++n;
        if (m->mr.destroy() == Status::busy) zombie_mrs_.push_back(std::move(m));  // a request in flight
    }
    c.mrs.clear();
    for (auto& [h, p] : c.pds) {
        ++n;
        if (p->pd.destroy() == Status::busy) zombie_pds_.push_back(std::move(p->pd));
    }
    c.pds.clear();
    std::fprintf(stderr, "hcaemud: client %u (pid %u, %s) gone: %llu object(s) destroyed\n", c.id, c.pid, c.comm.c_str(),
                 static_cast<unsigned long long>(n));
    std::erase(client_list_, &c);
    clients_.erase(cit);
    ctr_.inc(DCounter::objects_cleaned, n);
    ctr_.inc(DCounter::clients_cleaned);
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

// A bool field must hold 0 or 1 before the bytes become a struct with a bool in it.
bool bools_ok(const uint8_t* b, std::initializer_list<size_t> offs) {
    for (size_t o : offs)
        if (b[o] > 1) return false;
    return true;
}
constexpr size_t kAhBool = offsetof(AhAttr, is_global);
constexpr size_t kQpAttrBools[] = {offsetof(QpAttr, ah_attr) + kAhBool, offsetof(QpAttr, alt_ah_attr) + kAhBool,
                                   offsetof(QpAttr, en_sqd_async_notify), offsetof(QpAttr, sq_draining)};

void put(char* dst, size_t n, const std::string& s) {
    std::memset(dst, 0, n);
    std::memcpy(dst, s.data(), std::min(s.size(), n - 1));
}

// Maps [offset, offset + length) of a client's memfd (checked by the io thread) and closes the fd.
// Whole pages of the fd's own size: 4096 for a memfd, the huge page size for a hugetlb memfd
// (st_blksize; hugetlbfs maps only whole huge pages).
bool map_region(int fd, uint64_t offset, uint64_t length, Mapping& out, uint8_t*& at) {
    struct stat sb{};
    uint64_t page = 4096;
    if (fstat(fd, &sb) == 0 && sb.st_blksize > 4096 && sb.st_blksize <= (1 << 30) &&
        (sb.st_blksize & (sb.st_blksize - 1)) == 0)
        page = uint64_t(sb.st_blksize);
    const uint64_t start = offset & ~(page - 1);
    const uint64_t span = ((offset - start) + length + page - 1) & ~(page - 1);
    void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(start));
    close(fd);
    if (m == MAP_FAILED) return false;
    out = Mapping(m, span);
    at = static_cast<uint8_t*>(m) + (offset - start);
    return true;
}

struct ResBuilder {
    ctl::ResObj o{};
    void add(const char* name, const std::string& v) {
        if (o.nattr >= ctl::kResAttrs) return;
        put(o.a[o.nattr].name, sizeof o.a[0].name, name);
        put(o.a[o.nattr].value, sizeof o.a[0].value, v);
        ++o.nattr;
    }
    void add(const char* name, uint64_t v) { add(name, std::to_string(v)); }
    void add(const api::ResAttrs& attrs) {
        for (const auto& [n, v] : attrs) add(n.c_str(), v);
    }
};

}  // namespace

Msg Engine::request(uint32_t cid, const ctl::Hdr& h, const uint8_t* b, int fd) {
    using ctl::Op;
    auto cit = clients_.find(cid);
    if (cit == clients_.end()) {
        if (fd >= 0) close_client_fd(fd);
        return reply(h, Status::bad_handle);
    }
    Client& c = *cit->second;
    auto bad = [&] {
        ctr_.inc(DCounter::bad_handle);
        return reply(h, Status::bad_handle);
    };
    auto field = [&] {
        ctr_.error(ctl::Error::bad_field);
        Msg m = reply(h, Status::invalid_argument);
        reinterpret_cast<ctl::ReplyHdr*>(m.bytes.data())->error = uint8_t(ctl::Error::bad_field);
        return m;
    };
    auto limit = [&] {
        ctr_.error(ctl::Error::limit);
        Msg m = reply(h, Status::no_resources);
        reinterpret_cast<ctl::ReplyHdr*>(m.bytes.data())->error = uint8_t(ctl::Error::limit);
        return m;
    };
    auto failed = [&](Status s) {
        if (s != Status::ok) ctr_.inc(DCounter::requests_failed);
        return reply(h, s);
    };
    auto pd_of = [&](uint32_t handle) -> PdE* {
        auto it = c.pds.find(handle);
        return it == c.pds.end() ? nullptr : it->second.get();
    };
    auto cq_of = [&](uint32_t handle) -> CqE* {
        auto it = c.cqs.find(handle);
        return it == c.cqs.end() ? nullptr : it->second.get();
    };
    auto bad_fd = [&] {
        ctr_.error(ctl::Error::bad_fd);
        Msg e = reply(h, Status::invalid_argument);
        reinterpret_cast<ctl::ReplyHdr*>(e.bytes.data())->error = uint8_t(ctl::Error::bad_fd);
        return e;
    };
    const bool full = c.objects() >= max_objects_;

    switch (Op(h.op)) {
    case Op::hello: {  // the io thread added the client; this is the reply
        ctl::HelloRep r;
        r.client_id = cid;
        r.max_objects = max_objects_;
        std::memcpy(r.gid, att_.gid().data(), 16);
        r.gid_index = att_.gid_index();
        return reply(h, Status::ok, &r, sizeof r);
    }
    case Op::query_device: {
        const DeviceAttr& a = dev_.query_device();
        ctl::DeviceAttrW w{};
        put(w.fw_ver, sizeof w.fw_ver, a.fw_ver);
        w.node_guid = a.node_guid;
        w.sys_image_guid = a.sys_image_guid;
        w.max_mr_size = a.max_mr_size;
        w.page_size_cap = a.page_size_cap;
        w.vendor_id = a.vendor_id;
        w.vendor_part_id = a.vendor_part_id;
        w.hw_ver = a.hw_ver;
        w.max_qp = a.max_qp;
        w.max_qp_wr = a.max_qp_wr;
        w.device_cap_flags = a.device_cap_flags;
        w.max_sge = a.max_sge;
        w.max_sge_rd = a.max_sge_rd;
        w.max_cq = a.max_cq;
        w.max_cqe = a.max_cqe;
        w.max_mr = a.max_mr;
        w.max_pd = a.max_pd;
        w.max_qp_rd_atom = a.max_qp_rd_atom;
        w.max_res_rd_atom = a.max_res_rd_atom;
        w.max_qp_init_rd_atom = a.max_qp_init_rd_atom;
        w.max_ah = a.max_ah;
        w.max_srq = a.max_srq;
        w.max_srq_wr = a.max_srq_wr;
        w.max_srq_sge = a.max_srq_sge;
        w.max_inline_data = a.max_inline_data;
        w.max_pkeys = a.max_pkeys;
        w.atomic_cap = uint8_t(a.atomic_cap);
        w.local_ca_ack_delay = a.local_ca_ack_delay;
        w.phys_port_cnt = a.phys_port_cnt;
        return reply(h, Status::ok, &w, sizeof w);
    }
    case Op::query_port: {
        const auto r = body_as<ctl::PortReq>(b);
        PortAttr pa;
        const Status s = dev_.query_port(r.port_num, pa);
        return s == Status::ok ? reply(h, s, &pa, sizeof pa) : failed(s);
    }
    case Op::query_gid: {
        const auto r = body_as<ctl::GidReq>(b);
        GidEntry g;
        const Status s = dev_.query_gid(r.port_num, r.index, g);
        return s == Status::ok ? reply(h, s, &g, sizeof g) : failed(s);
    }
    case Op::alloc_pd: {
        if (full) return limit();
        auto r = dev_.alloc_pd();
        if (!r.ok()) return failed(r.status);
        ctl::HandleRep rep;
        rep.handle = r->handle();
        auto e = std::make_unique<PdE>();
        e->pd = std::move(r.value);
        c.pds[rep.handle] = std::move(e);
        return reply(h, Status::ok, &rep, sizeof rep);
    }
    case Op::dealloc_pd: {
        const auto r = body_as<ctl::HandleReq>(b);
        PdE* p = pd_of(r.handle);
        if (!p) return bad();
        const Status s = p->pd.destroy();
        if (s == Status::ok) c.pds.erase(r.handle);
        return failed(s);
    }
    case Op::reg_mr: {
        const auto r = body_as<ctl::RegMrReq>(b);
        // The io thread checked the memfd (sealed, range inside it) and passed it; we map it.
        PdE* p = pd_of(r.pd);
        if (!p) {
            close_client_fd(fd);
            return bad();
        }
        if (full) {
            close_client_fd(fd);
            return limit();
        }
        auto e = std::make_unique<MrE>();
        uint8_t* at = nullptr;
        if (!map_region(fd, r.offset, r.length, e->map, at)) return bad_fd();
        auto res = dev_.reg_mr(p->pd, at, r.length, r.iova, r.access);
        if (!res.ok()) return failed(res.status);
        ctl::RegMrRep rep;
        rep.handle = res->handle();
        rep.lkey = res->lkey();
        rep.rkey = res->rkey();
        e->mr = std::move(res.value);
        e->iova = r.iova;
        e->length = r.length;
        e->access = r.access;
        c.mrs[rep.handle] = std::move(e);
        return reply(h, Status::ok, &rep, sizeof rep);
    }
    case Op::rereg_mr: {
        const auto r = body_as<ctl::ReregMrReq>(b);
        auto it = c.mrs.find(r.handle);
        PdE* p = (r.flags & rereg::change_pd) ? pd_of(r.pd) : nullptr;
        if (it == c.mrs.end() || ((r.flags & rereg::change_pd) && !p)) {
            if (fd >= 0) close_client_fd(fd);
            return bad();
        }
        MrE& m = *it->second;
        Mapping map;
        uint8_t* at = nullptr;
        if (fd >= 0 && !map_region(fd, r.offset, r.length, map, at)) return bad_fd();
        const Status s = m.mr.rereg(r.flags, p ? &p->pd : nullptr, at, r.length, r.access, r.iova);
        if (s != Status::ok) return failed(s);  // `map` (if any) is unmapped; the MR is as it was
        if (fd >= 0) {
            m.map = std::move(map);  // the old pages are unmapped now, no longer named by the MR
            m.iova = r.iova;
            m.length = r.length;
        }
        if (r.flags & rereg::change_access) m.access = r.access;
        ctl::RegMrRep rep;
        rep.handle = r.handle;
        rep.lkey = m.mr.lkey();
        rep.rkey = m.mr.rkey();
        return reply(h, Status::ok, &rep, sizeof rep);
    }
    case Op::dereg_mr: {
        const auto r = body_as<ctl::HandleReq>(b);
        auto it = c.mrs.find(r.handle);
        if (it == c.mrs.end()) return bad();
        const Status s = it->second->mr.destroy();
        if (s == Status::ok) c.mrs.erase(it);
        return failed(s);
    }
    case Op::create_cq:
    case Op::resize_cq: {
        const bool create = Op(h.op) == Op::create_cq;
        int cqe = 0;
        CqE* old = nullptr;
        ctl::CreateCqReq cr{};
        if (create) {
            cr = body_as<ctl::CreateCqReq>(b);
            if (cr.events > 1) return field();
            if (full) return limit();
            cqe = cr.cqe;
        } else {
            const auto rr = body_as<ctl::ResizeCqReq>(b);
            old = cq_of(rr.handle);
            if (!old) return bad();
            cqe = rr.cqe;
        }
        if (cqe < 1 || uint32_t(cqe) > dev_.query_device().max_cqe) return failed(Status::invalid_argument);
        Cq cq;
        if (create) {
            auto res = dev_.create_cq(cqe, cr.events ? &c.ch : nullptr, cr.cq_context);
            if (!res.ok()) return failed(res.status);
            cq = std::move(res.value);
        } else {
            // As ibv_resize_cq: never below the CQEs still to poll, in the client's ring and ours.
            const uint64_t cons = std::min(old->r.h->cons.load(std::memory_order_acquire), old->r.taken);
            const uint64_t queued = std::min<uint64_t>(old->r.taken - cons, old->r.cap) + old->obj->ring.count();
            if (uint64_t(cqe) < queued) return failed(Status::invalid_argument);
            const Status s = old->cq.resize(cqe);
            if (s != Status::ok) return failed(s);
        }
        const uint32_t cap = uint32_t(create ? cq.cqe() : old->cq.cqe());
        const size_t bytes = shm::ring_bytes(cap, sizeof(shm::Cqe));
        int rfd = -1;
        Mapping map;
        if (!make_ring_fd("hcaemu-cq", bytes, rfd, map)) return failed(Status::no_resources);  // the CQ's RAII handle destroys it
        RingV rv = init_ring(static_cast<uint8_t*>(map.p), shm::RingKind::cq, cap, sizeof(shm::Cqe));
        ctl::CreateCqRep rep;
        rep.cqe = int32_t(cap);
        rep.ring_bytes = bytes;
        if (create) {
            auto e = std::make_unique<CqE>();
            e->handle = cq.handle();
            e->owner = &c;
            e->obj = dev_.cq(cq.handle());
            e->cq = std::move(cq);
            e->map = std::move(map);
            e->r = rv;
            e->context = cr.cq_context;
            e->events = cr.events;
            rep.handle = e->handle;
            cqs_.push_back(e.get());
            cq_owner_[e->handle] = cid;
            c.cqs[e->handle] = std::move(e);
        } else {
            // The old ring gets nothing more: the client drains it up to its prod, then polls this one.
            old->map = std::move(map);
            old->r = rv;
            rep.handle = old->handle;
        }
        Msg m = reply(h, Status::ok, &rep, sizeof rep);
        m.fd = rfd;
        return m;
    }
    case Op::destroy_cq: {
        const auto r = body_as<ctl::DestroyCqReq>(b);
        CqE* q = cq_of(r.handle);
        if (!q) return bad();
        route_events();  // its pending events go out (and are acked) first
        const Status s = q->cq.destroy();
        if (s == Status::ok) {
            std::erase(cqs_, q);
            cq_owner_.erase(r.handle);
            c.cqs.erase(r.handle);
        }
        return failed(s);
    }
    case Op::req_notify_cq: {
        const auto r = body_as<ctl::NotifyReq>(b);
        if (r.solicited_only > 1) return field();
        CqE* q = cq_of(r.handle);
        if (!q) return bad();
        if (!q->events) return failed(Status::invalid_argument);  // created without a channel
        return failed(q->cq.req_notify(r.solicited_only));
    }
    case Op::create_qp: {
        const auto r = body_as<ctl::CreateQpReq>(b);
        if (r.qp_type != uint8_t(QpType::rc) && r.qp_type != uint8_t(QpType::uc) && r.qp_type != uint8_t(QpType::ud))
            return field();
        if (r.sq_sig_all > 1) return field();
        PdE* p = pd_of(r.pd);
        CqE* scq = cq_of(r.send_cq);
        CqE* rcq = cq_of(r.recv_cq);
        SrqE* srq = nullptr;
        if (r.srq) {
            auto it = c.srqs.find(r.srq);
            if (it == c.srqs.end()) return bad();
            srq = it->second.get();
        }
        if (!p || !scq || !rcq) return bad();
        if (full) return limit();
        const DeviceAttr& da = dev_.query_device();
        if (r.cap.max_send_sge > da.max_sge || r.cap.max_recv_sge > da.max_sge || r.cap.max_inline_data > da.max_inline_data)
            return failed(Status::invalid_argument);
        QpInitAttr ia;
        ia.send_cq = &scq->cq;
        ia.recv_cq = &rcq->cq;
        ia.srq = srq ? &srq->srq : nullptr;
        ia.cap = r.cap;
        ia.qp_type = QpType(r.qp_type);
        ia.sq_sig_all = r.sq_sig_all;
        auto res = dev_.create_qp(p->pd, ia);
        if (!res.ok()) return failed(res.status);
        const QpCap cap = ia.cap;
        const uint32_t sesz = shm::send_entry_size(cap.max_send_sge, cap.max_inline_data);
        const uint32_t resz = shm::recv_entry_size(cap.max_recv_sge);
        if (sesz > kMaxEntry || resz > kMaxEntry || cap.max_send_sge > 64 || cap.max_recv_sge > 64)
            return failed(Status::invalid_argument);
        const size_t sq_bytes = shm::ring_bytes(cap.max_send_wr, sesz);
        const size_t rq_bytes = srq ? 0 : shm::ring_bytes(cap.max_recv_wr, resz);
        int rfd = -1;
        Mapping map;
        if (!make_ring_fd("hcaemu-qp", sq_bytes + rq_bytes, rfd, map)) return failed(Status::no_resources);
        auto e = std::make_unique<QpE>();
        e->owner = &c;
        e->handle = res->handle();
        e->qpn = res->qpn();
        e->obj = dev_.qp(e->handle);
        e->qp = std::move(res.value);
        e->sq = init_ring(static_cast<uint8_t*>(map.p), shm::RingKind::sq, cap.max_send_wr, sesz);
        e->has_rq = !srq;
        if (!srq) e->rq = init_ring(static_cast<uint8_t*>(map.p) + sq_bytes, shm::RingKind::rq, cap.max_recv_wr, resz);
        e->map = std::move(map);
        e->init = r;
        e->init.cap = cap;
        e->cap = cap;
        ctl::CreateQpRep rep;
        rep.handle = e->handle;
        rep.qpn = e->qpn;
        rep.cap = cap;
        rep.sq_offset = 0;
        rep.rq_offset = srq ? 0 : sq_bytes;
        rep.ring_bytes = sq_bytes + rq_bytes;
        qps_.push_back(e.get());
        qpn_owner_[e->qpn] = cid;
        c.qps[e->handle] = std::move(e);
        Msg m = reply(h, Status::ok, &rep, sizeof rep);
        m.fd = rfd;
        return m;
    }
    case Op::destroy_qp: {
        const auto r = body_as<ctl::HandleReq>(b);
        auto it = c.qps.find(r.handle);
        if (it == c.qps.end()) return bad();
        QpE* q = it->second.get();
        const Status s = q->qp.destroy();
        if (s == Status::ok) {
            std::erase(qps_, q);
            qpn_owner_.erase(q->qpn);
            c.qps.erase(it);
        }
        return failed(s);
    }
    case Op::modify_qp: {
        if (!bools_ok(b + offsetof(ctl::ModifyQpReq, attr), {kQpAttrBools[0], kQpAttrBools[1], kQpAttrBools[2], kQpAttrBools[3]}))
            return field();
        const auto r = body_as<ctl::ModifyQpReq>(b);
        auto it = c.qps.find(r.handle);
        if (it == c.qps.end()) return bad();
        // A controlled Q_Key (high-order bit set) is for privileged consumers only (IBTA 10.2.4);
        // the daemon's clients are not, and Linux's uverbs modify_qp answers EPERM to one without
        // CAP_NET_RAW. (A send WR's Q_Key with that bit means "the QP's own": that stays allowed.)
        if ((r.mask & qp_attr::qkey) && (r.attr.qkey & 0x80000000u)) return failed(Status::permission_denied);
        const ModifyResult mr = it->second->qp.modify(r.attr, r.mask);
        if (!mr.ok()) ctr_.inc(DCounter::requests_failed);
        return reply(h, mr.status, nullptr, 0, mr.bits);
    }
    case Op::query_qp: {
        const auto r = body_as<ctl::HandleReq>(b);
        auto it = c.qps.find(r.handle);
        if (it == c.qps.end()) return bad();
        ctl::QueryQpRep rep{};
        const Status s = it->second->qp.query(rep.attr);
        rep.init = it->second->init;
        return s == Status::ok ? reply(h, s, &rep, sizeof rep) : failed(s);
    }
    case Op::create_srq: {
        const auto r = body_as<ctl::CreateSrqReq>(b);
        PdE* p = pd_of(r.pd);
        if (!p) return bad();
        if (full) return limit();
        SrqAttr a = r.attr;
        if (a.max_sge > 64) return failed(Status::invalid_argument);
        auto res = dev_.create_srq(p->pd, a);
        if (!res.ok()) return failed(res.status);
        const uint32_t esz = shm::recv_entry_size(a.max_sge);
        if (esz > kMaxEntry) return failed(Status::invalid_argument);
        const size_t bytes = shm::ring_bytes(a.max_wr, esz);
        int rfd = -1;
        Mapping map;
        if (!make_ring_fd("hcaemu-srq", bytes, rfd, map)) return failed(Status::no_resources);
        auto e = std::make_unique<SrqE>();
        e->owner = &c;
        e->handle = res->handle();
        e->obj = dev_.srq(e->handle);
        e->srq = std::move(res.value);
        e->r = init_ring(static_cast<uint8_t*>(map.p), shm::RingKind::srq, a.max_wr, esz);
        e->map = std::move(map);
        e->max_sge = a.max_sge;
        ctl::CreateSrqRep rep;
        rep.handle = e->handle;
        rep.attr = a;
        rep.ring_bytes = bytes;
        srqs_.push_back(e.get());
        srq_owner_[e->handle] = cid;
        c.srqs[e->handle] = std::move(e);
        Msg m = reply(h, Status::ok, &rep, sizeof rep);
        m.fd = rfd;
        return m;
    }
    case Op::destroy_srq: {
        const auto r = body_as<ctl::HandleReq>(b);
        auto it = c.srqs.find(r.handle);
        if (it == c.srqs.end()) return bad();
        SrqE* s = it->second.get();
        const Status st = s->srq.destroy();
        if (st == Status::ok) {
            std::erase(srqs_, s);
            srq_owner_.erase(r.handle);
            c.srqs.erase(it);
        }
        return failed(st);
    }
    case Op::modify_srq: {
        const auto r = body_as<ctl::ModifySrqReq>(b);
        auto it = c.srqs.find(r.handle);
        if (it == c.srqs.end()) return bad();
        // The ring was sized at creation: a larger max_wr cannot be granted.
        if ((r.mask & srq_attr::max_wr) && r.attr.max_wr > it->second->r.cap) return failed(Status::invalid_argument);
        return failed(it->second->srq.modify(r.attr, r.mask));
    }
    case Op::query_srq: {
        const auto r = body_as<ctl::HandleReq>(b);
        auto it = c.srqs.find(r.handle);
        if (it == c.srqs.end()) return bad();
        SrqAttr a;
        const Status s = it->second->srq.query(a);
        return s == Status::ok ? reply(h, s, &a, sizeof a) : failed(s);
    }
    case Op::create_ah: {
        if (!bools_ok(b + offsetof(ctl::CreateAhReq, attr), {kAhBool})) return field();
        const auto r = body_as<ctl::CreateAhReq>(b);
        PdE* p = pd_of(r.pd);
        if (!p) return bad();
        if (full) return limit();
        auto res = dev_.create_ah(p->pd, r.attr);
        if (!res.ok()) return failed(res.status);
        ctl::HandleRep rep;
        rep.handle = res->handle();
        auto e = std::make_unique<AhE>();
        e->ah = std::move(res.value);
        e->owner = &c;
        if ((rep.handle >> 8) >= ahs_.size()) ahs_.resize((rep.handle >> 8) + 1, nullptr);
        ahs_[rep.handle >> 8] = e.get();
        c.ahs[rep.handle] = std::move(e);
        return reply(h, Status::ok, &rep, sizeof rep);
    }
    case Op::destroy_ah: {
        const auto r = body_as<ctl::HandleReq>(b);
        auto it = c.ahs.find(r.handle);
        if (it == c.ahs.end()) return bad();
        const Status s = it->second->ah.destroy();
        if (s == Status::ok) {
            ahs_[r.handle >> 8] = nullptr;
            c.ahs.erase(it);
        }
        return failed(s);
    }
    case Op::read_counters: {
        const auto r = body_as<ctl::CountersReq>(b);
        if (r.set >= uint8_t(ctl::CounterSet::count)) return field();
        api::Counts all;
        switch (ctl::CounterSet(r.set)) {
        case ctl::CounterSet::device: all = api::device_counts(dev_.counters()); break;
        case ctl::CounterSet::net: all = api::net_counts(att_.net().net_stats()); break;
        case ctl::CounterSet::link: all = api::link_counts(att_.dpdk()); break;
        default:
            for (size_t i = 0; i < size_t(DCounter::count); ++i) all.emplace_back(kDCounterName[i], ctr_.get(DCounter(i)));
            // Gauges: the objects the device holds now, every client's and those waiting to be freed.
            all.emplace_back("dev_pds", dev_.num_pds());
            all.emplace_back("dev_mrs", dev_.num_mrs());
            all.emplace_back("dev_cqs", dev_.num_cqs());
            all.emplace_back("dev_qps", dev_.num_qps());
            all.emplace_back("dev_srqs", dev_.num_srqs());
            all.emplace_back("dev_ahs", dev_.num_ahs());
            // Bytes malloc has handed out and not had back, every thread's arena (a leak shows
            // here; RSS also grows with fragmentation and with pages touched for the first time),
            // and the part of them that grows with the highest handle index ever used, by design:
            // the device's tables hand out fresh indices until each has used all of its max once.
            {
                const struct mallinfo2 mi = mallinfo2();
                all.emplace_back("malloc_in_use", uint64_t(mi.uordblks + mi.hblkhd));
                all.emplace_back("table_bytes", uint64_t(dev_.table_bytes() + ahs_.capacity() * sizeof(AhE*)));
            }
            break;
        }
        auto rep = std::make_unique<ctl::CountersRep>();
        rep->total = uint32_t(all.size());
        for (size_t i = r.start; i < all.size() && rep->n < ctl::kCountersPerPage; ++i) {
            put(rep->v[rep->n].name, sizeof rep->v[0].name, all[i].first);
            rep->v[rep->n].value = all[i].second;
            ++rep->n;
        }
        return reply(h, Status::ok, rep.get(), sizeof(ctl::CountersRep));
    }
    case Op::res_list: {
        const auto r = body_as<ctl::ResListReq>(b);
        if (r.kind >= uint8_t(api::ResKind::count)) return field();
        // Only the page returned is built; the objects before it and after it are only counted.
        auto rep = std::make_unique<ctl::ResListRep>();
        uint64_t idx = 0;
        auto skip = [&](size_t k) {  // a whole client's list outside the page
            if (idx + k > r.start && rep->n < ctl::kResPerPage) return false;
            idx += k;
            return true;
        };
        auto want = [&] { return idx++ >= r.start && rep->n < ctl::kResPerPage; };
        auto keep = [&](const ResBuilder& rb) { rep->o[rep->n++] = rb.o; };
        for (auto& kv : clients_) {  // not a structured binding: clang 14 cannot capture one
            const uint32_t id = kv.first;
            Client* cl = kv.second.get();
            auto base = [&] {
                ResBuilder rb;
                rb.o.client = id;
                rb.o.pid = cl->pid;
                put(rb.o.comm, sizeof rb.o.comm, cl->comm);
                return rb;
            };
            switch (api::ResKind(r.kind)) {
            case api::ResKind::pd:
                if (skip(cl->pds.size())) break;
                for (auto& [hd, p] : cl->pds) {
                    if (!want()) continue;
                    ResBuilder rb = base();
                    if (const PdObj* o = dev_.pd(hd)) rb.add(api::res_attrs(*o));
                    keep(rb);
                }
                break;
            case api::ResKind::mr:
                if (skip(cl->mrs.size())) break;
                for (auto& [hd, m] : cl->mrs) {
                    if (!want()) continue;
                    ResBuilder rb = base();
                    if (const MrObj* o = dev_.mr(hd)) rb.add(api::res_attrs(*o));
                    keep(rb);
                }
                break;
            case api::ResKind::cq:
                if (skip(cl->cqs.size())) break;
                for (auto& [hd, q] : cl->cqs) {
                    if (!want()) continue;
                    ResBuilder rb = base();
                    rb.add(api::res_attrs(*q->obj));
                    // completions in the shared ring that the client has not taken yet
                    rb.add("in_ring", q->r.taken - q->r.h->cons.load(std::memory_order_relaxed));
                    keep(rb);
                }
                break;
            case api::ResKind::qp:
                if (skip(cl->qps.size())) break;
                for (auto& [hd, q] : cl->qps) {
                    if (!want()) continue;
                    ResBuilder rb = base();
                    rb.add(api::res_attrs(*q->obj));
                    keep(rb);
                }
                break;
            default:
                if (skip(cl->srqs.size())) break;
                for (auto& [hd, s] : cl->srqs) {
                    if (!want()) continue;
                    ResBuilder rb = base();
                    rb.add(api::res_attrs(*s->obj));
                    keep(rb);
                }
                break;
            }
        }
        rep->total = uint32_t(idx);
        return reply(h, Status::ok, rep.get(), sizeof(ctl::ResListRep));
    }
    case Op::resolve: {
        const auto r = body_as<ctl::ResolveReq>(b);
        Gid g;
        std::memcpy(g.data(), r.gid, 16);
        pkt::Mac mac{};
        const port::NeighborState st = att_.net().resolve(g, mac);
        ctl::ResolveRep rep;
        rep.state = uint8_t(st == port::NeighborState::reachable ? ctl::Neighbor::resolved
                            : st == port::NeighborState::failed  ? ctl::Neighbor::failed
                                                                 : ctl::Neighbor::pending);
        if (st == port::NeighborState::reachable) std::memcpy(rep.mac, mac.data(), 6);
        return reply(h, Status::ok, &rep, sizeof rep);
    }
    default:
        break;
    }
    if (fd >= 0) close_client_fd(fd);
    return reply(h, Status::not_supported);
}

}  // namespace hcaemu::daemon
