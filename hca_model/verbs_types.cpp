#include "hca_model/verbs_types.hpp"

namespace hcaemu {

const char* name(QpType t) {
    switch (t) {
    case QpType::rc: return "RC";
    case QpType::uc: return "UC";
    case QpType::ud: return "UD";
    }
    return "?";
}

const char* qp_attr_name(unsigned bit) {
    static constexpr const char* names[] = {
        "IBV_QP_STATE", "IBV_QP_CUR_STATE", "IBV_QP_EN_SQD_ASYNC_NOTIFY", "IBV_QP_ACCESS_FLAGS",
        "IBV_QP_PKEY_INDEX", "IBV_QP_PORT", "IBV_QP_QKEY", "IBV_QP_AV", "IBV_QP_PATH_MTU",
        "IBV_QP_TIMEOUT", "IBV_QP_RETRY_CNT", "IBV_QP_RNR_RETRY", "IBV_QP_RQ_PSN",
        "IBV_QP_MAX_QP_RD_ATOMIC", "IBV_QP_ALT_PATH", "IBV_QP_MIN_RNR_TIMER", "IBV_QP_SQ_PSN",
        "IBV_QP_MAX_DEST_RD_ATOMIC", "IBV_QP_PATH_MIG_STATE", "IBV_QP_CAP", "IBV_QP_DEST_QPN"};
    if (bit < std::size(names)) return names[bit];
    if (bit == 25) return "IBV_QP_RATE_LIMIT";
    return nullptr;
}

const char* name(PortState s) {
    static constexpr const char* names[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE"};
    return uint8_t(s) < 5 ? names[uint8_t(s)] : "?";
}

const char* name(WcStatus s) {
    // ibv_wc_status_str()'s spellings
    static constexpr const char* names[kWcStatusCount] = {
        "success", "local length error", "local QP operation error", "local EE context operation error",
        "local protection error", "Work Request Flushed Error", "memory management operation error",
        "bad response error", "local access error", "remote invalid request error",
        "remote access error", "remote operation error", "transport retry counter exceeded",
        "RNR retry counter exceeded", "local RDD violation error", "remote invalid RD request",
        "aborted error", "invalid EE context number", "invalid EE context state", "fatal error",
        "response timeout error", "general error"};
    return size_t(s) < kWcStatusCount ? names[size_t(s)] : "?";
}

const char* id(WcStatus s) {
    static constexpr const char* ids[kWcStatusCount] = {
        "IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR", "IBV_WC_LOC_EEC_OP_ERR",
        "IBV_WC_LOC_PROT_ERR", "IBV_WC_WR_FLUSH_ERR", "IBV_WC_MW_BIND_ERR", "IBV_WC_BAD_RESP_ERR",
        "IBV_WC_LOC_ACCESS_ERR", "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR",
        "IBV_WC_REM_OP_ERR", "IBV_WC_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR",
        "IBV_WC_LOC_RDD_VIOL_ERR", "IBV_WC_REM_INV_RD_REQ_ERR", "IBV_WC_REM_ABORT_ERR",
        "IBV_WC_INV_EECN_ERR", "IBV_WC_INV_EEC_STATE_ERR", "IBV_WC_FATAL_ERR",
        "IBV_WC_RESP_TIMEOUT_ERR", "IBV_WC_GENERAL_ERR"};
    return size_t(s) < kWcStatusCount ? ids[size_t(s)] : "?";
}

const char* name(WcOpcode o) {
    switch (o) {
    case WcOpcode::send: return "SEND";
    case WcOpcode::rdma_write: return "RDMA_WRITE";
    case WcOpcode::rdma_read: return "RDMA_READ";
    case WcOpcode::comp_swap: return "COMP_SWAP";
    case WcOpcode::fetch_add: return "FETCH_ADD";
    case WcOpcode::bind_mw: return "BIND_MW";
    case WcOpcode::local_inv: return "LOCAL_INV";
    case WcOpcode::recv: return "RECV";
    case WcOpcode::recv_rdma_with_imm: return "RECV_RDMA_WITH_IMM";
    }
    return "?";
}

const char* name(WrOpcode o) {
    static constexpr const char* names[] = {"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM",
                                            "RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD",
                                            "LOCAL_INV", "BIND_MW", "SEND_WITH_INV"};
    return uint8_t(o) < std::size(names) ? names[uint8_t(o)] : "?";
}

const char* name(EventType e) {
    switch (e) {
    case EventType::cq_err: return "IBV_EVENT_CQ_ERR";
    case EventType::qp_fatal: return "IBV_EVENT_QP_FATAL";
    case EventType::qp_req_err: return "IBV_EVENT_QP_REQ_ERR";
    case EventType::qp_access_err: return "IBV_EVENT_QP_ACCESS_ERR";
    case EventType::comm_est: return "IBV_EVENT_COMM_EST";
    case EventType::sq_drained: return "IBV_EVENT_SQ_DRAINED";
    case EventType::device_fatal: return "IBV_EVENT_DEVICE_FATAL";
    case EventType::port_active: return "IBV_EVENT_PORT_ACTIVE";
    case EventType::port_err: return "IBV_EVENT_PORT_ERR";
    case EventType::srq_err: return "IBV_EVENT_SRQ_ERR";
    case EventType::srq_limit_reached: return "IBV_EVENT_SRQ_LIMIT_REACHED";
    case EventType::qp_last_wqe_reached: return "IBV_EVENT_QP_LAST_WQE_REACHED";
    case EventType::gid_change: return "IBV_EVENT_GID_CHANGE";
    }
    return "?";
}

}  // namespace hcaemu
