// The HCA's engine loop: one object per device that owns every QP's transport state and runs to
// completion, as a hardware pipeline does: receive a burst, dispatch each packet to the responder
// or the completer of its QP, send what the requesters and responders have due, fire timers.
// Nothing on this path allocates, locks or logs; the trace hook is a pointer test when unset.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "dpdk_port/clock.hpp"
#include "dpdk_port/port.hpp"
#include "hca_model/device.hpp"
#include "packet/build.hpp"
#include "packet/icrc.hpp"
#include "packet/mad.hpp"
#include "packet/parse.hpp"
#include "transport/qp_ctx.hpp"
#include "transport/timer_wheel.hpp"
#include "transport/turn_profile.hpp"

namespace hcaemu::transport {

struct HcaConfig {
    uint32_t max_inflight_psn = 1024;  // unacknowledged packets per QP before the requester waits
    uint32_t ackreq_interval = 32;     // AckReq at least every this many packets of a long message
    uint32_t tx_budget = 64;           // packets one QP may send per poll turn (fairness)
};

// Events worth a line in a trace (`hcaemu sim`, `hcaemu demo`), beside the packets themselves.
// The last ones tell a WQE's way through the HCA step by step (`hcaemu demo` narrates them).
enum class TraceKind : uint8_t {
    tx, rx, rx_error, retransmit, nak_sent, rnr_nak_sent, rnr_wait, ack_timeout, cqe, qp_error,
    duplicate, out_of_sequence,
    wqe_fetched,     // requester: a send WQE starts (wqe, psn = its first PSN, count = its PSNs)
    recv_wqe_taken,  // responder: a receive WQE taken for a SEND (wr_id)
    dma_read,        // bytes read from memory (addr, key, bytes): a request's or READ response's payload
    dma_write,       // bytes written to memory (addr, key, bytes): SEND/WRITE data, READ data, atomic result
    atomic_done,     // responder: an atomic executed at addr/key (old_value, new_value)
    ack_received,    // completer: an ACK for psn (count = its MSN)
};
inline constexpr std::array<const char*, 18> kTraceKindName = {
    "tx", "rx", "rx-error", "retransmit", "nak-sent", "rnr-nak-sent", "rnr-wait", "ack-timeout",
    "cqe", "qp-error", "duplicate", "out-of-sequence", "wqe-fetched", "recv-wqe-taken", "dma-read",
    "dma-write", "atomic-done", "ack-received"};

struct TraceEvent {
    TraceKind kind = TraceKind::tx;
    uint32_t qpn = 0;
    uint32_t psn = 0;
    const uint8_t* frame = nullptr;    // tx, rx, rx_error: the frame
    uint32_t len = 0;
    pkt::ParseError error = pkt::ParseError::ok;
    const Wc* wc = nullptr;            // cqe
    const SendWqe* wqe = nullptr;      // wqe_fetched
    uint64_t wr_id = 0;                // recv_wqe_taken
    uint64_t addr = 0;                 // dma_read, dma_write, atomic_done: where, with which key
    uint32_t key = 0;                  // an R_Key if `remote` (the peer's access), else an L_Key
    bool remote = false;
    uint32_t bytes = 0;
    uint32_t count = 0;                // wqe_fetched: PSNs; ack_received: MSN; dma_write: 1 for an atomic's result
    uint64_t old_value = 0;            // atomic_done, and dma_write of an atomic's result: the value before
    uint64_t new_value = 0;
};
using TraceFn = void (*)(void* ctx, const TraceEvent& ev);

// A MAD that QP1 (the GSI, IBTA 13.5) received and passed on to the agent of its class: the
// 256 bytes and where they came from (the response goes back to the source GID, QP and P_Key).
struct GsiRecv {
    std::span<const uint8_t, pkt::kMadLen> mad;
    Gid sgid{};          // the sender's GID (IPv4-mapped for RoCE v2 over IPv4)
    Gid dgid{};          // the GID it was sent to (ours)
    pkt::Mac smac{};     // the sender's MAC: the response goes there
    uint32_t src_qp = 0; // DETH SrcQP
    uint16_t pkey = 0;   // BTH P_Key
    uint8_t traffic_class = 0;
};
// Where a MAD goes: the peer's GID and QP (1 for a CM), our GID, the P_Key.
struct GsiDest {
    Gid sgid{};
    Gid dgid{};
    uint32_t dest_qp = pkt::kGsiQpn;
    uint16_t pkey = pkt::kDefaultPkey;
    uint8_t traffic_class = 0;
    uint8_t hop_limit = 64;
    const pkt::Mac* dmac = nullptr;  // known MAC (a response: the request's source); else resolved
};
using GsiFn = void (*)(void* ctx, const GsiRecv& m);

class HcaGroup;

class Hca final : public QpListener {
public:
    // Alone, the engine is the device's QpListener and owns every QP. In a group (HcaGroup, one
    // engine per data-path lcore) the group listens and routes, and this engine is lcore
    // `lcore`'s: it owns the QPs the group places there, and its poll() runs on that lcore's
    // thread, which writes the device's counters of that lcore (t_lcore).
    Hca(Device& dev, port::Port& port, const port::Clock& clock, const HcaConfig& cfg = {},
        const HcaGroup* group = nullptr, uint32_t lcore = 0);
    ~Hca() override;
    Hca(const Hca&) = delete;
    Hca& operator=(const Hca&) = delete;

    // One turn of the loop. Returns the number of frames received and sent (0 when idle).
    size_t poll();
    // The earliest timer deadline, UINT64_MAX if none: virtual time may jump there when idle.
    uint64_t next_timer_ns() const { return timers_.next_deadline_ns(); }
    bool has_work() const { return !run_.empty() || !acks_.empty() || ntx_ != 0; }
    // Times each step of the turns that move frames (turn_profile.hpp); on again restarts the
    // count, off drops it. Not a per-packet cost when off: a pointer test a step.
    void profile_turns(bool on);
    const TurnProfile* turn_profile() const { return prof_.get(); }

    // A static neighbour entry: the MAC for an IP address, consulted before the port's ARP/ND.
    void set_neighbor(const Gid& ip, const pkt::Mac& mac);
    void set_trace(TraceFn fn, void* ctx) { trace_fn_ = fn; trace_ctx_ = ctx; }
    // QP1: the agent of the CM class (0x07); nullptr removes it. MADs of any other class, and CM
    // Get/Set, are answered or dropped by the GSI itself (gsi.cpp).
    void set_cm_agent(GsiFn fn, void* ctx) { cm_fn_ = fn; cm_ctx_ = ctx; }
    // Sends one MAD from QP1 (UD SEND Only, Q_Key 0x80010000). False when no buffer or the
    // headers cannot be built (counted).
    bool send_mad(const GsiDest& d, std::span<const uint8_t, pkt::kMadLen> mad);

    Device& device() { return dev_; }
    const HcaConfig& config() const { return cfg_; }
    uint32_t lcore() const { return lcore_; }
    // The QP's transport context is this engine's (tests: each QP on its owner only).
    bool has_ctx(uint32_t qpn) const { return ctx(qpn) != nullptr; }
    // The header the QP's incoming packets were last learnt with (recv.cpp); null: no such QP.
    const pkt::IcrcFlow* rx_flow(uint32_t qpn) const {
        const QpCtx* c = ctx(qpn);
        return c ? &c->rx_flow : nullptr;
    }

    // DCQCN (transport/dcqcn.hpp, docs/dcqcn.md): its parameters, which may change at any time;
    // the observer sees each step of the RP (tests, traces); a QP's state (null: no such QP).
    void set_dcqcn(const DcqcnParams& p) { dcqcn_ = p; }
    const DcqcnParams& dcqcn() const { return dcqcn_; }
    void set_dcqcn_observer(DcqcnObserver fn, void* ctx) { dcqcn_obs_ = fn; dcqcn_obs_ctx_ = ctx; }
    void dcqcn_observe(const DcqcnEvent& ev) {
        if (dcqcn_obs_) dcqcn_obs_(dcqcn_obs_ctx_, ev);
    }
    const DcqcnQp* dcqcn_state(uint32_t qpn) const {
        const QpCtx* c = ctx(qpn);
        return c ? &c->dcqcn : nullptr;
    }

    // QpListener: the device tells the transport what software did.
    void qp_modified(QpObj& qp, QpState from) override;
    void qp_error(QpObj& qp) override;
    void qp_destroyed(QpObj& qp) override;
    void sq_doorbell(QpObj& qp) override;
    void rq_doorbell(QpObj& qp) override;

    // ---- used by the engines (requester.cpp, completer.cpp, responder.cpp)
    // dma_error: the payload's SGEs failed the MR check; build_error: the headers could not be
    // built (the packet does not fit the port's buffers).
    enum class Tx : uint8_t { ok, no_buffer, dma_error, build_error };
    // Builds one packet from `h` with `len` payload bytes that `fill` writes, and queues it.
    // With a connected QP's template `ft` (QpCtx::ftmpl), `h` must be its tmpl() with only the
    // BTH's opcode, SE, AckReq, PSN and the extension headers changed: the rest comes from `ft`.
    template <class Fill>
    Tx send(pkt::Headers& h, uint32_t len, Fill&& fill, const pkt::FrameTemplate* ft = nullptr);
    Tx send_ack(QpCtx& c, uint8_t syndrome, uint32_t psn, uint32_t msn);  // an ACK or NAK
    // The next packet queued fills the transmit queue: if the port then refuses it, the
    // requester's turn ends there (its last packet should ask for an ACK).
    bool tx_filling() const { return ntx_ + 1 >= txq_.size(); }
    void schedule(QpCtx& c);
    bool tracing() const { return trace_fn_ != nullptr; }
    void trace(const TraceEvent& ev) {
        if (trace_fn_) trace_fn_(trace_ctx_, ev);
    }
    void trace(TraceKind k, uint32_t qpn, uint32_t psn) {
        if (trace_fn_) trace_fn_(trace_ctx_, TraceEvent{.kind = k, .qpn = qpn, .psn = psn});
    }
    void trace_wc(uint32_t qpn, const Wc& wc) {
        if (trace_fn_) trace_fn_(trace_ctx_, TraceEvent{.kind = TraceKind::cqe, .qpn = qpn, .wc = &wc});
    }
    // dma_read / dma_write of `bytes` at `addr` under R_Key `rkey`, for the peer (a no-op when no
    // trace is set).
    void trace_dma(TraceKind k, uint32_t qpn, uint32_t psn, uint64_t addr, uint32_t rkey, uint32_t bytes) {
        if (trace_fn_)
            trace_fn_(trace_ctx_, TraceEvent{.kind = k, .qpn = qpn, .psn = psn, .addr = addr, .key = rkey,
                                             .remote = true, .bytes = bytes});
    }
    // The same for a local SGE list at byte offset `off`: the address and L_Key where it starts.
    void trace_dma_sges(TraceKind k, uint32_t qpn, uint32_t psn, const Sge* sges, uint32_t nsge, uint64_t off,
                        uint32_t bytes) {
        if (trace_fn_) trace_sges(k, qpn, psn, sges, nsge, off, bytes);
    }
    void retire(QpCtx& c, WcStatus status, WcOpcode op, uint32_t byte_len);  // completes the head send WQE
    // Error CQE on the head WQE; the QP to ERR (RC) or SQE (UC, UD), without an async event.
    void fatal(QpCtx& c, WcStatus status, WcOpcode op);
    // The requester cannot execute WQE n: it fails once every earlier WQE has completed.
    void req_local_error(QpCtx& c, uint64_t n, WcStatus status);
    // The clock once per poll turn (the TSC costs ~20 ns in a VM; 13% of an idle turn): the
    // first call of a turn reads it, the rest of the turn reuses it. Timers are us to s apart,
    // so a turn's time is precise enough; outside poll() every call reads the clock.
    uint64_t now() {
        if (!now_valid_) {
            now_ns_ = clock_.now_ns();
            now_valid_ = in_poll_;
        }
        return now_ns_;
    }
    // The frames queued so far leave now (the port permitting), and the clock after that: for a
    // frame whose spacing is measured on the wire (a CNP), not at this turn's start.
    uint64_t flush_now() {
        tx_flush();
        return clock_.now_ns();
    }
    uint64_t clock_now() const { return clock_.now_ns(); }  // not the turn's cached time
    TimerWheel& timers() { return timers_; }
    Counters& counters() { return dev_.counters(); }
    // The peer's MAC: the static table, then port_.neighbor() (which may start ARP/ND).
    bool resolve(const Gid& ip, pkt::Mac& mac);
    // Headers for an address vector; the Ethernet destination is broadcast while the MAC is
    // unknown. A connected QP's template then takes the MAC as soon as it is known (tmpl()); a UD
    // AH caches only a resolved MAC, never the broadcast one.
    bool headers_for(const QpObj& qp, const AhAttr& av, uint32_t dest_qpn, pkt::Headers& h,
                     const pkt::Mac* dmac = nullptr);
    // Ethernet and IP of a RoCE v2 packet from sgid to dgid (h zeroed first); QP1's MADs too.
    struct Route {
        const Gid& sgid;
        const Gid& dgid;
        uint8_t traffic_class;
        uint32_t flow_label;
        uint8_t hop_limit;
        const pkt::Mac* dmac;
    };
    void route_headers(const Route& r, pkt::Headers& h);
    // A connected QP's packet template, its destination MAC filled in once resolved.
    const pkt::Headers& tmpl(QpCtx& c);
    void set_tmpl(QpCtx& c);  // c.ftmpl from c.tmpl: whenever c.tmpl changes (control path)

    // engines
    void req_run(QpCtx& c);
    void req_restart(QpCtx& c, uint32_t psn);     // Go-Back-N from `psn`
    void comp_handle(QpCtx& c, const pkt::Packet& p);
    void comp_ack_timeout(QpCtx& c);
    void comp_rnr_done(QpCtx& c);
    void check_drained(QpCtx& c);                // SQD: raise SQ_DRAINED once nothing is outstanding
    void resp_handle(QpCtx& c, const pkt::Packet& p);
    // READ responses and atomic ACKs due, in PSN order, then the ACK owed after them; at most
    // `budget` packets. False when stopped by the budget or by buffers.
    bool resp_send_responses(QpCtx& c, uint32_t budget);
    Tx resp_send_ack(QpCtx& c, PendingAck& a);  // an owed ACK or NAK; clears `due` when sent

private:
    // ---- responder steps (responder.cpp, responder_exec.cpp), in the order rxe's responder takes
    // them. Each check passes the packet on (`next`) or ends its way with a result: the error
    // classes of the responder (IBTA 9.9, as rxe names them), answered by resp_error.
    enum class RespResult : uint8_t {
        next,               // on to the next step
        done,               // handled: executed and acknowledged, answered, or dropped and counted
        duplicate,          // PSN before the expected one: answered, never executed again
        out_of_sequence,    // PSN past the expected one: NAK PSN sequence error (class B)
        rnr,                // no receive WQE: RNR NAK (RC), the message dropped (UC)
        invalid_request,    // NAK Invalid Request, QP to ERR (class C)
        access_error,       // NAK Remote Access Error, QP to ERR (class C)
        operational_error,  // NAK Remote Operational Error, QP to ERR (class A)
    };
    RespResult resp_check_psn(QpCtx& c, const pkt::Packet& p);
    void resp_duplicate(QpCtx& c, const pkt::Packet& p);
    RespResult resp_check_op_seq(QpCtx& c, const pkt::Packet& p);
    RespResult resp_check_op_valid(QpCtx& c, const pkt::Packet& p);
    RespResult resp_check_resources(QpCtx& c, const pkt::Packet& p);
    RespResult resp_check_length(QpCtx& c, const pkt::Packet& p);
    RespResult resp_check_rkey(QpCtx& c, const pkt::Packet& p);
    RespResult resp_execute_send(QpCtx& c, const pkt::Packet& p);
    RespResult resp_execute_write(QpCtx& c, const pkt::Packet& p);
    RespResult resp_execute_read(QpCtx& c, const pkt::Packet& p);
    RespResult resp_execute_atomic(QpCtx& c, const pkt::Packet& p);
    void resp_acknowledge(QpCtx& c, const pkt::Packet& p);
    void resp_error(QpCtx& c, const pkt::Packet& p, RespResult r);
    void resp_ud(QpCtx& c, const pkt::Packet& p);
    void resp_complete(QpCtx& c, WcStatus st, WcOpcode op, uint32_t byte_len, const pkt::Packet* p);
    RespResource& resp_new_resource(QpCtx& c, const pkt::Packet& p, bool atomic, uint64_t va, uint32_t rkey,
                                    uint32_t len);
    void resp_owe_ack(QpCtx& c, uint32_t psn, uint32_t msn);  // coalesced, sent in PSN order
    void resp_nak(QpCtx& c, uint8_t syndrome, uint32_t psn);  // in PSN order, after responses due
    bool resp_send_resource(QpCtx& c, RespResource& r, uint32_t& budget);

    QpCtx* ctx(uint32_t qpn) const { return qpn < ctx_.size() ? ctx_[qpn].get() : nullptr; }
    void receive(port::Frame& f);
    void gsi_receive(const pkt::Packet& p, uint32_t len);  // gsi.cpp
    void gsi_answer_unsupported(const pkt::Packet& p, uint16_t status);
    // Offers the queued frames to the port; what it refuses stays queued, in order, for the next
    // flush. True when the queue has room.
    bool tx_flush();
    size_t run_scheduled();  // a turn's requesters and READ responders: the packets they queued
    QpCtx& fresh_ctx(QpObj& qp);
    QpCtx& make_ctx(QpObj& qp);      // a context for the QP's present state (a QP made before this Hca)
    void ctx_rtr(QpCtx& c);          // the connection, as INIT -> RTR learns it
    void ctx_rts(QpCtx& c);          // the requester's start, as RTR -> RTS sets it
    void ctx_attrs(QpCtx& c);        // what any modify may change: path MTU, P_Key
    void trace_sges(TraceKind k, uint32_t qpn, uint32_t psn, const Sge* sges, uint32_t nsge, uint64_t off,
                    uint32_t bytes);

    bool owns(const QpObj& qp) const;  // alone: every QP; in a group: those placed on lcore_

    Device& dev_;
    port::Port& port_;
    const port::Clock& clock_;
    HcaConfig cfg_;
    const HcaGroup* group_ = nullptr;
    uint32_t lcore_ = 0;
    TimerWheel timers_;
    std::vector<std::unique_ptr<QpCtx>> ctx_;  // by QPN
    std::vector<uint32_t> run_;                 // QPNs with something to send
    std::vector<uint32_t> running_;             // this turn's list, swapped with run_
    std::vector<uint32_t> acks_;                // QPNs with a coalesced ACK due
    std::array<port::Frame, 32> txq_{};
    // poll()'s receive burst: a member, so that a turn does not zero 32 Frames (a 1 KiB memset
    // per turn, 8% of an 8-byte send_bw's samples as a local array).
    std::array<port::Frame, 32> rxq_{};
    uint32_t ntx_ = 0;
    // The port took nothing at the last flush of this turn: no other one is tried until the next
    // turn (each costs the port a look at every queued frame).
    bool tx_refused_ = false;
    uint16_t ip_id_ = 0;
    static constexpr uint32_t kFusedIcrcMin = 256;  // payload bytes from which send() fuses the ICRC with the fill
    static constexpr uint32_t kTimerDefer = 64;  // turns of full receive bursts before timers run anyway
    uint32_t timer_defer_ = 0;
    uint64_t now_ns_ = 0;    // now(): this turn's time, valid while now_valid_
    bool now_valid_ = false;
    bool in_poll_ = false;
    std::unique_ptr<TurnProfile> prof_;  // profile_turns(true)
    std::vector<std::pair<Gid, pkt::Mac>> neighbors_;
    uint64_t max_msg_sz_ = 0x80000000;         // the port's max_msg_sz: the responder's message cap
    TraceFn trace_fn_ = nullptr;
    void* trace_ctx_ = nullptr;
    GsiFn cm_fn_ = nullptr;
    void* cm_ctx_ = nullptr;
    uint32_t gsi_psn_ = 0;
    DcqcnParams dcqcn_;
    DcqcnObserver dcqcn_obs_ = nullptr;
    void* dcqcn_obs_ctx_ = nullptr;
};

template <class Fill>
Hca::Tx Hca::send(pkt::Headers& h, uint32_t len, Fill&& fill, const pkt::FrameTemplate* ft) {
    // The port's queue is full: the sender waits, as a NIC's scheduler waits for room in its
    // transmit ring; nothing is built to be dropped (64+ QPs at once lost most of it, then their
    // retries ran out).
    if (ntx_ == txq_.size() && (tx_refused_ || !tx_flush())) return Tx::no_buffer;
    port::Frame& f = txq_[ntx_];  // built in its queue slot: no copy of the Frame afterwards
    if (!port_.alloc(f)) return Tx::no_buffer;
    h.ip4.id = ip_id_++;  // one IP ID per frame, as Linux numbers DF packets
    size_t hl = 0;
    const pkt::BuildError be = ft && ft->valid ? pkt::build_headers_tmpl(*ft, h, len, {f.data, f.cap}, hl)
                                               : pkt::build_headers(h, len, {f.data, f.cap}, hl);
    if (be != pkt::BuildError::ok) {
        port_.free(f);
        return Tx::build_error;
    }
    // A long payload's ICRC runs with its DMA read (one pass over the bytes), from the header's.
    uint32_t crc = 0;
    bool fused = false;
    if constexpr (std::is_invocable_r_v<bool, Fill, std::span<uint8_t>, uint32_t*>) {
        fused = len >= kFusedIcrcMin && ft && ft->valid;
        if (fused) crc = pkt::icrc_flow(ft->icrc, f.data + ft->l3, hl - ft->l3);
        if (len && !fill(std::span<uint8_t>(f.data + hl, len), fused ? &crc : nullptr)) {
            port_.free(f);
            return Tx::dma_error;
        }
    } else if (len && !fill(std::span<uint8_t>(f.data + hl, len))) {
        port_.free(f);
        return Tx::dma_error;
    }
    f.len = uint32_t(pkt::build_finish({f.data, f.cap}, hl, len, h.ipv6, {}, ft && ft->valid ? &ft->icrc : nullptr,
                                       fused ? &crc : nullptr));
    dev_.counters().add(Counter::sent_pkts);
    dev_.counters().add(Counter::sent_bytes, f.len);
    if (trace_fn_)
        trace_fn_(trace_ctx_, TraceEvent{.kind = TraceKind::tx, .qpn = h.bth.dest_qp, .psn = h.bth.psn, .frame = f.data, .len = f.len});
    if (++ntx_ == txq_.size()) tx_flush();
    return Tx::ok;
}

}  // namespace hcaemu::transport
