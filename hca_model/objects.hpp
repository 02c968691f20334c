// The device's internal objects, as an HCA keeps them in its context tables. The API (device.hpp)
// hands out RAII handles to them; the transport engines reach them by QPN and key through Device.
#pragma once
#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "hca_model/counters.hpp"
#include "hca_model/verbs_structs.hpp"

namespace hcaemu {

class CompChannel;
struct QpObj;

// A count the data-path lcores change at once, each in its own slot (t_lcore): no atomic
// instruction. A slot may wrap below 0 when another lcore took what this one released; the sum
// is right. Read (summed) by the control path.
struct LcoreCount {
    std::array<uint32_t, kMaxLcores> v{};
    void inc() { ++v[t_lcore]; }
    void dec() { --v[t_lcore]; }
    uint32_t sum() const {
        uint32_t s = 0;
        for (uint32_t x : v) s += x;
        return s;
    }
};

struct PdObj {
    uint32_t handle = 0;
    uint32_t users = 0;  // MRs, QPs, SRQs and AHs created on it: dealloc is refused while > 0
};

struct MrObj {
    uint32_t handle = 0;
    PdObj* pd = nullptr;
    uint8_t* host = nullptr;  // where the bytes are in this process
    uint64_t iova = 0;        // the address peers and SGEs use: the registered address
    uint64_t length = 0;
    uint32_t access = 0;      // access::
    uint32_t lkey = 0;        // index << 8 | 8-bit variant
    uint32_t rkey = 0;
    LcoreCount pins;          // send WQEs in flight using it (mbufs may point into it): no dereg
};

// A ring of cap() entries with free-running 64-bit producer and consumer counts. Its storage is
// the next power of two, so that entry n is slot n & mask: `n % cap` was a 64-bit division
// (tens of cycles) and a message takes a dozen of them on each side.
template <class T>
struct Ring {
    std::vector<T> slot;  // storage(): a power of two, at least cap()
    uint64_t head = 0;  // next to consume
    uint64_t tail = 0;  // next to produce
    void reset(uint32_t cap) {  // empty, room for cap entries
        cap_ = cap;
        slot.assign(std::bit_ceil(std::max(cap, 1u)), T{});
        mask_ = slot.size() - 1;
        head = tail = 0;
    }
    uint32_t cap() const { return cap_; }
    uint32_t storage() const { return uint32_t(slot.size()); }
    size_t index(uint64_t n) const { return size_t(n & mask_); }  // the slot of entry n
    uint32_t count() const { return uint32_t(tail - head); }
    bool full() const { return count() == cap_; }
    bool empty() const { return head == tail; }
    T& at(uint64_t n) { return slot[index(n)]; }
    const T& at(uint64_t n) const { return slot[index(n)]; }
    void clear() { head = tail = 0; }

private:
    uint32_t cap_ = 0;
    uint64_t mask_ = 0;
};

enum class NotifyArm : uint8_t { none, next, solicited };

struct CqObj {
    uint32_t handle = 0;
    Ring<Wc> ring;
    bool overflowed = false;      // CQ in error after an overflow: no further completions
    NotifyArm arm = NotifyArm::none;
    CompChannel* channel = nullptr;
    uint64_t context = 0;         // cq_context, returned with its completion events
    uint32_t events_delivered = 0;
    uint32_t events_acked = 0;
    std::vector<QpObj*> qps;      // attached as send or receive CQ (or both)
    // Drops the unpolled CQEs of QP `qpn`, keeping the others in order (a QP entering RESET).
    void purge(uint32_t qpn) {
        uint64_t w = ring.tail;
        for (uint64_t r = ring.tail; r-- > ring.head;)
            if (ring.at(r).qp_num != qpn) ring.at(--w) = ring.at(r);
        ring.head = w;
    }
};

struct RecvWqe {
    uint64_t wr_id = 0;
    uint32_t num_sge = 0;
    uint64_t length = 0;          // sum of the SGE lengths
};

struct SrqObj {
    uint32_t handle = 0;
    PdObj* pd = nullptr;
    SrqAttr attr;                 // max_wr, max_sge, srq_limit (0 = not armed)
    Ring<RecvWqe> rq;
    std::vector<Sge> sges;        // max_sge per ring slot
    uint32_t users = 0;           // QPs attached
    std::vector<QpObj*> qps;      // the QPs attached, told when receives are posted
    bool error = false;
};

struct AhObj {
    uint32_t handle = 0;
    PdObj* pd = nullptr;
    AhAttr attr;
    pkt::Mac dmac{};              // the peer's MAC, resolved once by the transport (as an HCA's AH holds it)
    bool dmac_valid = false;
    LcoreCount users;             // UD WQEs in flight naming it
};

struct SendWqe {
    uint64_t wr_id = 0;
    WrOpcode opcode = WrOpcode::send;
    uint32_t send_flags = 0;
    bool signaled = false;
    bool is_inline = false;
    uint32_t num_sge = 0;
    uint32_t length = 0;          // message length in bytes
    uint32_t imm_data = 0;        // or the rkey to invalidate
    uint64_t remote_addr = 0;
    uint32_t rkey = 0;
    uint64_t compare_add = 0;
    uint64_t swap = 0;
    AhObj* ah = nullptr;
    uint32_t remote_qpn = 0;
    uint32_t remote_qkey = 0;
    bool pinned = false;          // the SGEs' MRs hold a pin each until the WQE retires
    MrObj* const* pinned_mrs = nullptr;  // one per SGE: a pinned MR cannot be deregistered
};

struct QpObj {
    uint32_t qpn = 0;
    uint32_t handle = 0;
    QpType type = QpType::rc;
    PdObj* pd = nullptr;
    CqObj* send_cq = nullptr;
    CqObj* recv_cq = nullptr;
    SrqObj* srq = nullptr;
    bool sq_sig_all = false;
    QpAttr attr;                  // attr.qp_state is the current state; attr.cap the granted caps
    Ring<SendWqe> sq;
    Ring<RecvWqe> rq;             // unused with an SRQ
    std::vector<Sge> sq_sges;     // cap.max_send_sge per ring slot
    std::vector<MrObj*> sq_mrs;   // the same: the MR each SGE pins (found when it was checked)
    std::vector<Sge> rq_sges;     // cap.max_recv_sge per ring slot
    std::vector<uint8_t> sq_inline;  // cap.max_inline_data per ring slot

    QpState state() const { return attr.qp_state; }
    const Sge* send_sges(uint64_t n) const { return &sq_sges[sq.index(n) * attr.cap.max_send_sge]; }
    const uint8_t* send_inline(uint64_t n) const { return &sq_inline[sq.index(n) * attr.cap.max_inline_data]; }
    const Sge* recv_sges(uint64_t n) const { return &rq_sges[rq.index(n) * attr.cap.max_recv_sge]; }
};

}  // namespace hcaemu
