// The verbs-like C++ API of one HCA. Anyone who knows libibverbs recognises each call:
//   Device           ibv_open_device, ibv_query_device, ibv_query_port, ibv_query_gid,
//                    ibv_get_async_event
//   Pd               ibv_alloc_pd / ibv_dealloc_pd
//   Mr               ibv_reg_mr / ibv_rereg_mr / ibv_dereg_mr
//   CompChannel      ibv_create_comp_channel, ibv_get_cq_event, ibv_ack_cq_events
//   Cq               ibv_create_cq, ibv_poll_cq, ibv_req_notify_cq, ibv_resize_cq, ibv_destroy_cq
//   Qp               ibv_create_qp, ibv_modify_qp, ibv_query_qp, ibv_post_send, ibv_post_recv
//   Srq              ibv_create_srq, ibv_modify_srq, ibv_query_srq, ibv_post_srq_recv
//   Ah               ibv_create_ah / ibv_destroy_ah
// Handles are RAII: destruction destroys the object (errors ignored); destroy() reports them.
// Every call returns a typed Status; nothing throws. One thread drives a Device (the poll loop
// that owns it, or a test): no locks.
#pragma once
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <span>

#include "hca_model/counters.hpp"
#include "hca_model/dma.hpp"
#include "hca_model/objects.hpp"
#include "hca_model/qp_state.hpp"
#include "hca_model/status.hpp"
#include "hca_model/table.hpp"

namespace hcaemu {

class Device;

// Base of the RAII handles: a device and a handle; movable, not copyable.
class Handle {
public:
    Handle() = default;
    Handle(Device* d, uint32_t h) : dev_(d), h_(h) {}
    Handle(Handle&& o) noexcept : dev_(o.dev_), h_(o.h_) { o.dev_ = nullptr; }
    Handle& operator=(Handle&& o) noexcept {
        std::swap(dev_, o.dev_);
        std::swap(h_, o.h_);
        return *this;
    }
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    explicit operator bool() const { return dev_ != nullptr; }
    uint32_t handle() const { return h_; }
    Device* device() const { return dev_; }

protected:
    ~Handle() = default;
    Device* dev_ = nullptr;
    uint32_t h_ = 0;
};

class Pd : public Handle {
public:
    using Handle::Handle;
    Pd(Pd&&) noexcept = default;
    Pd& operator=(Pd&& o) noexcept { reset(); Handle::operator=(std::move(o)); return *this; }
    ~Pd() { reset(); }
    Status destroy();  // EBUSY while MRs, QPs, SRQs or AHs use it
private:
    void reset() { if (dev_) (void)destroy(); }
};

namespace rereg {  // enum ibv_rereg_mr_flags
constexpr uint32_t change_translation = 1u << 0, change_pd = 1u << 1, change_access = 1u << 2;
}

class Mr : public Handle {
public:
    using Handle::Handle;
    Mr(Mr&&) noexcept = default;
    Mr& operator=(Mr&& o) noexcept { reset(); Handle::operator=(std::move(o)); return *this; }
    ~Mr() { reset(); }
    uint32_t lkey() const;
    uint32_t rkey() const;
    uint64_t addr() const;
    uint64_t length() const;
    uint32_t access() const;
    // ibv_rereg_mr: the same keys name the region with its new PD, pages or access; all or nothing.
    // `iova`: the new translation's address for SGEs and peers (default: addr itself).
    Status rereg(uint32_t flags, const Pd* pd, void* addr, size_t length, uint32_t access,
                 std::optional<uint64_t> iova = std::nullopt);
    Status destroy();  // EBUSY while a request in flight uses it
private:
    void reset() { if (dev_) (void)destroy(); }
};

class Cq;

struct CqEvent {
    uint32_t cq_handle = 0;
    uint64_t cq_context = 0;
};

// Completion events of the CQs created with it. fd() is an eventfd that is readable while events
// are queued, for epoll.
class CompChannel {
public:
    CompChannel();
    ~CompChannel();
    CompChannel(const CompChannel&) = delete;
    CompChannel& operator=(const CompChannel&) = delete;
    bool get_cq_event(CqEvent& ev);  // non-blocking; false when none is queued
    int fd() const { return fd_; }
    size_t pending() const {
        const std::lock_guard<std::mutex> g(mu_);
        return q_.size();
    }
    void push(const CqEvent& ev);
    size_t cqs() const { return cqs_.size(); }  // CQs reporting here

private:
    friend class Device;
    mutable std::mutex mu_;  // push() comes from the lcore of the CQ, get from the application
    std::deque<CqEvent> q_;
    std::vector<CqObj*> cqs_;  // destroying the channel detaches them (no event is lost in a freed one)
    int fd_ = -1;
};

class Cq : public Handle {
public:
    using Handle::Handle;
    Cq(Cq&&) noexcept = default;
    Cq& operator=(Cq&& o) noexcept { reset(); Handle::operator=(std::move(o)); return *this; }
    ~Cq() { reset(); }
    int poll(std::span<Wc> wc);                   // completions taken, oldest first
    Status req_notify(bool solicited_only);
    Status resize(int cqe);                       // EINVAL below the completions it holds
    void ack_events(uint32_t n);
    int cqe() const;                              // capacity
    Status destroy();                             // EBUSY while QPs use it or events are unacked
private:
    void reset() { if (dev_) (void)destroy(); }
};

class Srq : public Handle {
public:
    using Handle::Handle;
    Srq(Srq&&) noexcept = default;
    Srq& operator=(Srq&& o) noexcept { reset(); Handle::operator=(std::move(o)); return *this; }
    ~Srq() { reset(); }
    Status post_recv(const RecvWr* wr, const RecvWr** bad_wr);
    Status modify(const SrqAttr& attr, uint32_t mask);  // srq_attr::
    Status query(SrqAttr& attr) const;
    Status destroy();                             // EBUSY while QPs use it
private:
    void reset() { if (dev_) (void)destroy(); }
};

class Ah : public Handle {
public:
    using Handle::Handle;
    Ah(Ah&&) noexcept = default;
    Ah& operator=(Ah&& o) noexcept { reset(); Handle::operator=(std::move(o)); return *this; }
    ~Ah() { reset(); }
    Status destroy();                             // EBUSY while UD WQEs in flight name it
private:
    void reset() { if (dev_) (void)destroy(); }
};

// Result of modify_qp: the status and, for mask errors, the offending attribute bits.
struct ModifyResult {
    Status status = Status::ok;
    uint32_t bits = 0;
    bool ok() const { return status == Status::ok; }
};

class Qp : public Handle {
public:
    using Handle::Handle;
    Qp(Qp&&) noexcept = default;
    Qp& operator=(Qp&& o) noexcept { reset(); Handle::operator=(std::move(o)); return *this; }
    ~Qp() { reset(); }
    uint32_t qpn() const;
    QpState state() const;
    ModifyResult modify(const QpAttr& attr, uint32_t mask);
    Status query(QpAttr& attr, QpInitAttr* init = nullptr) const;
    // On error *bad_wr points at the first WR not posted; the ones before it are posted.
    Status post_send(const SendWr* wr, const SendWr** bad_wr);
    Status post_recv(const RecvWr* wr, const RecvWr** bad_wr);
    Status destroy();
private:
    void reset() { if (dev_) (void)destroy(); }
};

// The transport's view of the command interface: the device tells it what software did to a QP,
// as a real HCA's firmware tells its pipelines. Calls come on the thread that drives the device.
class QpListener {
public:
    virtual ~QpListener() = default;
    virtual void qp_modified(QpObj& qp, QpState from) = 0;  // after a successful modify_qp
    virtual void qp_error(QpObj& qp) = 0;       // entering ERR, before the device flushes the queues
    virtual void qp_destroyed(QpObj& qp) = 0;   // before the QP goes away
    virtual void sq_doorbell(QpObj& qp) = 0;    // post_send added WQEs
    virtual void rq_doorbell(QpObj& qp) = 0;    // post_recv (or post_srq_recv for an SRQ QP) added WQEs
};

struct AsyncEvent {
    EventType type = EventType::port_active;
    uint32_t element = 0;  // QPN, CQ handle, SRQ handle or port number, by type
};

class Device {
public:
    explicit Device(const DeviceAttr& attr = {}, const PortConfig& port = {});
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    const DeviceAttr& query_device() const { return attr_; }
    Status query_port(uint8_t port_num, PortAttr& out) const;
    Status query_gid(uint8_t port_num, int index, GidEntry& out) const;
    Status query_pkey(uint8_t port_num, int index, uint16_t& out) const;  // ibv_query_pkey
    // The P_Key at a table index, 0 (no partition: matches nothing) past the table.
    uint16_t pkey(uint32_t index) const { return index < pkeys_.size() ? pkeys_[index] : 0; }
    void set_link_mtu(uint32_t mtu);  // the port's Ethernet MTU changed: active_mtu follows

    Result<Pd> alloc_pd();
    Result<Mr> reg_mr(const Pd& pd, void* addr, size_t length, uint32_t access);
    // ibv_reg_mr_iova: the bytes are at `host` in this process while SGEs and peers name them by
    // `iova` (the daemon registers a client's memory mapped at another address than the client's).
    Result<Mr> reg_mr(const Pd& pd, void* host, size_t length, uint64_t iova, uint32_t access);
    Result<Cq> create_cq(int cqe, CompChannel* channel = nullptr, uint64_t cq_context = 0);
    Result<Qp> create_qp(const Pd& pd, QpInitAttr& init);  // init.cap is updated to what was granted
    Result<Srq> create_srq(const Pd& pd, SrqAttr& attr);
    Result<Ah> create_ah(const Pd& pd, const AhAttr& attr);

    bool get_async_event(AsyncEvent& ev);  // non-blocking
    void set_listener(QpListener* l) { listener_ = l; }
    // Where receives wait before the device has them (hcaemud: a client's ring). take_recv asks it
    // when the queue is empty, so that a receive posted before a packet arrived is seen by that
    // packet, as on an HCA (a UD SEND found the queue empty when the daemon had read the rings
    // just before the receive was posted, and was dropped).
    using RqFill = void (*)(void* ctx, QpObj& qp);
    void set_rq_fill(RqFill fn, void* ctx) {
        rq_fill_ = fn;
        rq_fill_ctx_ = ctx;
    }

    // The calling thread's lcore's counters (t_lcore): what the data path bumps. A report sums
    // them all (counters_total); with one lcore the two are the same.
    Counters& counters() { return counters_[t_lcore]; }
    const Counters& counters() const { return counters_[t_lcore]; }
    const Counters& counters(uint32_t lcore) const { return counters_[lcore]; }
    Counters counters_total() const;
    DmaEngine& dma() { return dma_; }

    // ---- for the transport engines and the handles (not a verbs call) ----
    QpObj* qp_by_qpn(uint32_t qpn) const { return qps_.at(qpn); }
    MrObj* mr_by_key(uint32_t key) const { return find(mrs_, key); }  // lkey or rkey; nullptr if stale or unknown
    MrObj* mr(uint32_t handle) const { return find(mrs_, handle); }
    CqObj* cq(uint32_t handle) const { return find(cqs_, handle); }
    QpObj* qp(uint32_t handle) const { return find(qps_, handle); }
    SrqObj* srq(uint32_t handle) const { return find(srqs_, handle); }
    AhObj* ah(uint32_t handle) const { return find(ahs_, handle); }
    PdObj* pd(uint32_t handle) const { return find(pds_, handle); }
    // Adds a completion (CQ overflow handling, notification, events). False if the CQ overflowed.
    bool complete(CqObj* cq, const Wc& wc, bool solicited = false);
    // The same, with `fill(Wc&)` writing the completion's fields straight into its CQ slot when
    // no event or overflow is due: stores only. A Wc built of narrow stores and copied whole
    // was read back in 16-byte loads that store forwarding cannot serve (a stall of tens of
    // cycles a CQE, complete()'s 7% of an 8-byte SEND's samples).
    template <class Fill>
    bool complete_with(CqObj* c, bool solicited, Fill&& fill) {
        if (!c->overflowed && !c->ring.full() && c->arm == NotifyArm::none) [[likely]] {
            Wc& w = c->ring.at(c->ring.tail);
            w = Wc{};
            fill(w);
            ++c->ring.tail;
            return true;
        }
        Wc w;
        fill(w);
        return complete(c, w, solicited);
    }
    // Moves a QP to ERR as the HCA does on a fatal error, flushing its WRs; raises `event`.
    void qp_to_error(QpObj* qp, EventType event);
    // The same without an async event: for an error that a completion already reports (retry or
    // RNR retries exhausted, a NAK, a local error), as rxe moves such a QP to ERR.
    void qp_to_error(QpObj* qp);
    // UC and UD: a completion error on the send side moves the QP to SQE (IBTA 10.3.1): the send
    // queue is flushed, receives go on; Modify QP SQE -> RTS resumes sending.
    void qp_to_sqe(QpObj* qp);
    // Retires the oldest send WQE: unpins its MRs and AH and, when it is signaled or `status` is
    // an error (errors always complete, IBTA ch. 10), writes a CQE with `status`, `opcode` and
    // `byte_len` (wr_id and qp_num from the WQE) to the send CQ. Completions leave in posting
    // order because only the head retires.
    void retire_send(QpObj* qp, WcStatus status, WcOpcode opcode, uint32_t byte_len);
    // Takes the next receive WQE of a QP (its RQ or its SRQ) for an incoming message, copying its
    // SGEs into `sges` (room for the queue's max_sge); raises the SRQ limit event when the SRQ
    // drops below its limit. False when none is posted (the responder then answers RNR NAK).
    bool take_recv(QpObj* qp, RecvWqe& wqe, std::span<Sge> sges);
    void raise(EventType type, uint32_t element);  // an async event; any thread

    // Object counts, for resource views.
    uint32_t num_pds() const { return pds_.size(); }
    uint32_t num_mrs() const { return mrs_.size(); }
    uint32_t num_cqs() const { return cqs_.size(); }
    uint32_t num_qps() const { return qps_.size(); }
    uint32_t num_srqs() const { return srqs_.size(); }
    uint32_t num_ahs() const { return ahs_.size(); }
    // The tables' own heap bytes (Table::bytes), all six.
    size_t table_bytes() const {
        return pds_.bytes() + mrs_.bytes() + cqs_.bytes() + qps_.bytes() + srqs_.bytes() + ahs_.bytes();
    }
    // Read-only views of the tables, for resource listings (control path only).
    const Table<PdObj>& pd_table() const { return pds_; }
    const Table<MrObj>& mr_table() const { return mrs_; }
    const Table<CqObj>& cq_table() const { return cqs_; }
    const Table<QpObj>& qp_table() const { return qps_; }
    const Table<SrqObj>& srq_table() const { return srqs_; }

private:
    friend class Pd;
    friend class Mr;
    friend class Cq;
    friend class Qp;
    friend class Srq;
    friend class Ah;

    template <class T>
    static uint32_t make_handle(const Table<T>& t, uint32_t i) { return i << 8 | t.gen(i); }
    template <class T>
    static T* find(const Table<T>& t, uint32_t h) {
        T* o = t.at(h >> 8);
        return o && t.gen(h >> 8) == (h & 0xFF) ? o : nullptr;
    }

    Status dealloc_pd(uint32_t h);
    Status dereg_mr(uint32_t h);
    Status rereg_mr(uint32_t h, uint32_t flags, const Pd* pd, void* addr, size_t length, uint32_t access,
                    std::optional<uint64_t> iova = std::nullopt);
    Status destroy_cq(uint32_t h);
    Status resize_cq(uint32_t h, int cqe);
    Status destroy_qp(uint32_t h);
    ModifyResult modify_qp(uint32_t h, const QpAttr& attr, uint32_t mask);
    Status post_send(uint32_t h, const SendWr* wr, const SendWr** bad_wr);
    Status post_recv(uint32_t h, const RecvWr* wr, const RecvWr** bad_wr);
    Status post_srq_recv(uint32_t h, const RecvWr* wr, const RecvWr** bad_wr);
    Status modify_srq(uint32_t h, const SrqAttr& attr, uint32_t mask);
    Status destroy_srq(uint32_t h);
    Status destroy_ah(uint32_t h);

    // A send WR that is not inline: its SGEs to sges[i] and their MRs to mrs[i] (cap entries each,
    // the WQE's slot, not yet posted); `len` its total either way.
    Status validate_send(const QpObj& qp, const SendWr& wr, Sge* sges, MrObj** mrs, uint64_t& len) const;
    Status check_send_sges(const PdObj* pd, const Sge* sgl, int n, bool write, Sge* dst, MrObj** mrs,
                           uint64_t& len) const;
    Status validate_attr(const QpObj& qp, const QpAttr& attr, uint32_t mask) const;
    void flush(QpObj* qp, bool sq = true, bool rq = true);  // outstanding WRs complete with IBV_WC_WR_FLUSH_ERR
    static Status sge_list_status(const Sge* sgl, int n, uint32_t max_sge);
    static uint64_t sge_total(const Sge* sgl, int n);
    Status fill_recv(RecvWqe& w, const RecvWr& wr, Sge* dst, uint32_t max_sge) const;
    void release(QpObj* qp, SendWqe& w);  // unpin what a send WQE holds
    void rebuild_gids();
    void to_error(QpObj* qp, const EventType* event);

    DeviceAttr attr_;
    PortConfig port_cfg_;
    PortAttr port_;
    std::vector<GidEntry> gids_;
    std::vector<uint16_t> pkeys_;
    Table<PdObj> pds_;
    Table<MrObj> mrs_;
    Table<CqObj> cqs_;
    Table<QpObj> qps_;   // index = QPN
    Table<SrqObj> srqs_;
    Table<AhObj> ahs_;
    std::mutex ev_mu_;
    std::deque<AsyncEvent> events_;
    QpListener* listener_ = nullptr;
    RqFill rq_fill_ = nullptr;
    void* rq_fill_ctx_ = nullptr;
    std::array<Counters, kMaxLcores> counters_;
    DmaEngine dma_;
};

}  // namespace hcaemu
