// The shared-memory data plane between libhcaemu and hcaemud, as an HCA shares queues with its
// driver in host memory: each QP's send and receive queue, each SRQ and each CQ is a ring in a
// memfd that the daemon creates (sealed against shrinking) and passes to the client.
//
// A ring: a RingHdr, then `cap` entries of `entry_size` bytes at kRingEntries. Both counters run
// free (64-bit, never wrap in practice); entry n lives at slot n % cap.
//   SQ, RQ, SRQ: the client writes entries and then stores `prod` (release): the doorbell. The
//     daemon polls `prod`, copies each new entry once (then checks it: the client may be
//     hostile) and stores `cons` when a WQE retires (completed or flushed): the slot is free again.
//     A client may have at most cap WQEs outstanding: prod - cons <= cap.
//   CQ: the daemon writes CQEs and stores `prod`; the client polls without a syscall and stores
//     `cons` when it has taken them. A full ring holds further completions back in the daemon;
//     when they overflow the CQ, the daemon sets kRingOverflow (IBV_EVENT_CQ_ERR).
// The daemon keeps its own copy of cap and entry_size and never trusts the header's.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hca_model/verbs_structs.hpp"

namespace hcaemu::shm {

constexpr uint32_t kRingMagic = 0x474E4952;  // "RING"
enum class RingKind : uint32_t { sq = 1, rq = 2, srq = 3, cq = 4 };
constexpr uint32_t kRingOverflow = 1u << 0;  // flags: CQ overflowed
constexpr uint32_t kRingError = 1u << 1;     // flags: the QP/SRQ went to error (hostile ring, fatal error)

struct RingHdr {
    uint32_t magic;
    uint32_t kind;        // RingKind
    uint32_t cap;         // entries
    uint32_t entry_size;  // bytes, a multiple of 16
    alignas(64) std::atomic<uint64_t> prod;
    alignas(64) std::atomic<uint64_t> cons;
    alignas(64) std::atomic<uint32_t> flags;
};
constexpr size_t kRingEntries = 256;  // entries start here
static_assert(sizeof(RingHdr) <= kRingEntries);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

struct Sge {
    uint64_t addr;
    uint32_t length;
    uint32_t lkey;
};
static_assert(sizeof(Sge) == 16);

// A send WQE: this header, then an area of max(max_send_sge * 16, max_inline_data rounded up to
// 16) bytes holding num_sge Sge, or inline_len bytes of inline data (send_flags has inline).
struct SendWqe {
    uint64_t wr_id;
    uint8_t opcode;        // WrOpcode
    uint8_t rsv0[3];
    uint32_t send_flags;   // send_flag::
    uint32_t num_sge;
    uint32_t inline_len;
    uint32_t imm_data;
    uint32_t invalidate_rkey;
    uint64_t remote_addr;  // RDMA or atomic
    uint32_t rkey;
    uint32_t ah;           // UD: the AH handle
    uint64_t compare_add;
    uint64_t swap;
    uint32_t remote_qpn;
    uint32_t remote_qkey;
    uint64_t rsv1;
};
static_assert(sizeof(SendWqe) == 80);

// A receive WQE (RQ and SRQ): this header, then max_recv_sge (max_sge for an SRQ) Sge.
struct RecvWqe {
    uint64_t wr_id;
    uint32_t num_sge;
    uint32_t rsv;
};
static_assert(sizeof(RecvWqe) == 16);

// A CQE: ibv_wc's fields.
struct Cqe {
    uint64_t wr_id;
    uint8_t status;         // WcStatus
    uint8_t opcode;         // WcOpcode
    uint8_t sl;
    uint8_t dlid_path_bits;
    uint32_t vendor_err;
    uint32_t byte_len;
    uint32_t imm_data;
    uint32_t qp_num;
    uint32_t src_qp;
    uint32_t wc_flags;
    uint16_t pkey_index;
    uint16_t slid;
    uint8_t sgid[16];
    uint8_t rsv[8];
};
static_assert(sizeof(Cqe) == 64);

// A completion into its ring format (the daemon) and back (libhcaemu).
inline Cqe to_cqe(const Wc& w) {
    Cqe c{};
    c.wr_id = w.wr_id;
    c.status = uint8_t(w.status);
    c.opcode = uint8_t(w.opcode);
    c.sl = w.sl;
    c.dlid_path_bits = w.dlid_path_bits;
    c.vendor_err = w.vendor_err;
    c.byte_len = w.byte_len;
    c.imm_data = w.imm_data;
    c.qp_num = w.qp_num;
    c.src_qp = w.src_qp;
    c.wc_flags = w.wc_flags;
    c.pkey_index = w.pkey_index;
    c.slid = w.slid;
    static_assert(sizeof(w.sgid) == sizeof(c.sgid));
    std::memcpy(c.sgid, w.sgid.data(), sizeof(c.sgid));
    return c;
}
inline Wc to_wc(const Cqe& c) {
    Wc w;
    w.wr_id = c.wr_id;
    w.status = WcStatus(c.status);
    w.opcode = WcOpcode(c.opcode);
    w.sl = c.sl;
    w.dlid_path_bits = c.dlid_path_bits;
    w.vendor_err = c.vendor_err;
    w.byte_len = c.byte_len;
    w.imm_data = c.imm_data;
    w.qp_num = c.qp_num;
    w.src_qp = c.src_qp;
    w.wc_flags = c.wc_flags;
    w.pkey_index = c.pkey_index;
    w.slid = c.slid;
    std::memcpy(w.sgid.data(), c.sgid, sizeof(c.sgid));
    return w;
}

constexpr size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
constexpr uint32_t send_entry_size(uint32_t max_send_sge, uint32_t max_inline) {
    const size_t area = max_send_sge * sizeof(Sge) > round_up(max_inline, 16) ? max_send_sge * sizeof(Sge)
                                                                              : round_up(max_inline, 16);
    return uint32_t(sizeof(SendWqe) + area);
}
constexpr uint32_t recv_entry_size(uint32_t max_sge) { return uint32_t(sizeof(RecvWqe) + max_sge * sizeof(Sge)); }
// Bytes of one ring, rounded to whole pages so that rings can follow each other in one memfd.
constexpr size_t ring_bytes(uint32_t cap, uint32_t entry_size) {
    return round_up(kRingEntries + size_t(cap) * entry_size, 4096);
}

}  // namespace hcaemu::shm
