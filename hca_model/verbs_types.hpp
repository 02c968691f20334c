// Verbs vocabulary with libibverbs' numeric values (verbs.h), so that anyone who knows ibv_* reads
// hcaemu's API directly, and the daemon's wire protocol can carry the same numbers. Every enum has
// a name array, as rxe keeps them.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace hcaemu {

enum class QpType : uint8_t { rc = 2, uc = 3, ud = 4 };  // IBV_QPT_*
const char* name(QpType t);

enum class QpState : uint8_t { reset = 0, init, rtr, rts, sqd, sqe, err };  // IBV_QPS_*
constexpr size_t kQpStateCount = 7;
inline constexpr std::array<const char*, kQpStateCount> kQpStateName = {"RESET", "INIT", "RTR", "RTS",
                                                                        "SQD", "SQE", "ERR"};
inline const char* name(QpState s) { return size_t(s) < kQpStateCount ? kQpStateName[size_t(s)] : "?"; }

// enum ibv_qp_attr_mask
namespace qp_attr {
constexpr uint32_t state = 1u << 0, cur_state = 1u << 1, en_sqd_async_notify = 1u << 2,
                   access_flags = 1u << 3, pkey_index = 1u << 4, port = 1u << 5, qkey = 1u << 6,
                   av = 1u << 7, path_mtu = 1u << 8, timeout = 1u << 9, retry_cnt = 1u << 10,
                   rnr_retry = 1u << 11, rq_psn = 1u << 12, max_qp_rd_atomic = 1u << 13,
                   alt_path = 1u << 14, min_rnr_timer = 1u << 15, sq_psn = 1u << 16,
                   max_dest_rd_atomic = 1u << 17, path_mig_state = 1u << 18, cap = 1u << 19,
                   dest_qpn = 1u << 20, rate_limit = 1u << 25;
constexpr uint32_t all_known = ((1u << 21) - 1) | rate_limit;
}  // namespace qp_attr
// Names of the mask bits, lowest first ("IBV_QP_STATE", ...); nullptr for unused bits.
const char* qp_attr_name(unsigned bit);

// enum ibv_access_flags
namespace access {
constexpr uint32_t local_write = 1u << 0, remote_write = 1u << 1, remote_read = 1u << 2,
                   remote_atomic = 1u << 3, mw_bind = 1u << 4, zero_based = 1u << 5;
// Zero-based MRs (addressed from 0 rather than their VA) are not supported: refused with EINVAL.
constexpr uint32_t supported = local_write | remote_write | remote_read | remote_atomic;
// Whether the HCA may write into an MR with these rights (so its pages must be writable).
constexpr bool writes_memory(uint32_t a) { return a & (local_write | remote_write | remote_atomic); }
}  // namespace access

enum class Mtu : uint8_t { mtu256 = 1, mtu512 = 2, mtu1024 = 3, mtu2048 = 4, mtu4096 = 5 };  // IBV_MTU_*
constexpr uint32_t mtu_bytes(Mtu m) { return 128u << uint8_t(m); }

enum class PortState : uint8_t { nop = 0, down = 1, init = 2, armed = 3, active = 4 };  // IBV_PORT_*
const char* name(PortState s);

// enum ibv_wc_status
enum class WcStatus : uint8_t {
    success, loc_len_err, loc_qp_op_err, loc_eec_op_err, loc_prot_err, wr_flush_err, mw_bind_err,
    bad_resp_err, loc_access_err, rem_inv_req_err, rem_access_err, rem_op_err, retry_exc_err,
    rnr_retry_exc_err, loc_rdd_viol_err, rem_inv_rd_req_err, rem_abort_err, inv_eecn_err,
    inv_eec_state_err, fatal_err, resp_timeout_err, general_err,
};
constexpr size_t kWcStatusCount = 22;
const char* name(WcStatus s);  // as ibv_wc_status_str() spells them: "success", "WR flushed", ...
const char* id(WcStatus s);    // the enum spelling: "IBV_WC_SUCCESS", ...

// enum ibv_wc_opcode
enum class WcOpcode : uint8_t {
    send = 0, rdma_write = 1, rdma_read = 2, comp_swap = 3, fetch_add = 4, bind_mw = 5,
    local_inv = 6, recv = 128, recv_rdma_with_imm = 129,
};
const char* name(WcOpcode o);

// enum ibv_wc_flags
namespace wc_flag {
constexpr uint32_t grh = 1u << 0, with_imm = 1u << 1, ip_csum_ok = 1u << 2, with_inv = 1u << 3;
}

// P_Key matching (IBTA 10.9.3): the 15-bit keys equal and not 0 (0x0000 and 0x8000 are no
// partition), and at least one of the two a full member (bit 15); two limited members never match.
constexpr bool pkey_match(uint16_t a, uint16_t b) {
    return (a & 0x7FFF) != 0 && (a & 0x7FFF) == (b & 0x7FFF) && ((a | b) & 0x8000) != 0;
}

// enum ibv_wr_opcode
enum class WrOpcode : uint8_t {
    rdma_write = 0, rdma_write_with_imm = 1, send = 2, send_with_imm = 3, rdma_read = 4,
    atomic_cmp_and_swp = 5, atomic_fetch_and_add = 6, local_inv = 7, bind_mw = 8,
    send_with_inv = 9,
};
const char* name(WrOpcode o);

constexpr bool is_atomic(WrOpcode op) { return op == WrOpcode::atomic_cmp_and_swp || op == WrOpcode::atomic_fetch_and_add; }
// READ and atomics: the requests that wait for response data and count against max_rd_atomic.
constexpr bool is_rd_atomic(WrOpcode op) { return op == WrOpcode::rdma_read || is_atomic(op); }
// Which work requests each transport carries (IBTA 9.4: the operations each service supports).
constexpr bool opcode_allowed(QpType t, WrOpcode op) {
    switch (op) {
    case WrOpcode::send:
    case WrOpcode::send_with_imm: return true;
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm: return t != QpType::ud;
    case WrOpcode::rdma_read:
    case WrOpcode::atomic_cmp_and_swp:
    case WrOpcode::atomic_fetch_and_add:
    case WrOpcode::send_with_inv: return t == QpType::rc;
    default: return false;  // LOCAL_INV and BIND_MW need memory windows: not supported
    }
}

// The completion opcode of a send work request.
constexpr WcOpcode wc_opcode_for(WrOpcode op) {
    switch (op) {
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm: return WcOpcode::rdma_write;
    case WrOpcode::rdma_read: return WcOpcode::rdma_read;
    case WrOpcode::atomic_cmp_and_swp: return WcOpcode::comp_swap;
    case WrOpcode::atomic_fetch_and_add: return WcOpcode::fetch_add;
    case WrOpcode::local_inv: return WcOpcode::local_inv;
    case WrOpcode::bind_mw: return WcOpcode::bind_mw;
    default: return WcOpcode::send;
    }
}

// enum ibv_send_flags
namespace send_flag {
constexpr uint32_t fence = 1u << 0, signaled = 1u << 1, solicited = 1u << 2, inline_ = 1u << 3;
}

// enum ibv_event_type (the subset an RoCE HCA raises)
enum class EventType : uint8_t {
    cq_err = 0, qp_fatal = 1, qp_req_err = 2, qp_access_err = 3, comm_est = 4, sq_drained = 5,
    device_fatal = 8, port_active = 9, port_err = 10, srq_err = 14, srq_limit_reached = 15,
    qp_last_wqe_reached = 16, gid_change = 18,
};
const char* name(EventType e);

enum class AtomicCap : uint8_t { none = 0, hca = 1, glob = 2 };  // IBV_ATOMIC_*

}  // namespace hcaemu
