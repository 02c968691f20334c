// Device counters in one table, named as Linux rxe and mlx5 name them where the meaning is the
// same, plus one receive-error counter per packet-layer parse error ("rx_err_" + its name).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include "packet/errors.hpp"

namespace hcaemu {

#define HCAEMU_COUNTERS(X)                                                                       \
    X(sent_pkts)                  /* rxe: packets sent */                                        \
    X(rcvd_pkts)                  /* rxe: RoCE packets received and accepted */                  \
    X(sent_bytes)                                                                                \
    X(rcvd_bytes)                                                                                \
    X(duplicate_request)          /* mlx5/rxe: duplicate requests re-acknowledged, C9-105 */     \
    X(out_of_sequence)            /* mlx5: requests with a PSN past the expected one */          \
    X(packet_seq_err)             /* mlx5: PSN sequence error NAKs received */                   \
    X(implied_nak_seq_err)        /* mlx5: responses implying lost ones (C9-148) */              \
    X(local_ack_timeout_err)      /* mlx5: ACK timer expiries */                                 \
    X(rnr_nak_retry_err)          /* mlx5: RNR NAKs received */                                  \
    X(rcvd_rnr_err)               /* rxe: RNR NAKs received */                                   \
    X(send_rnr_err)               /* rxe: RNR NAKs sent */                                       \
    X(retry_exceeded_err)         /* rxe: retry_cnt exhausted */                                 \
    X(retry_rnr_exceeded_err)     /* rxe: rnr_retry exhausted */                                 \
    X(completer_retry_err)        /* rxe: retransmissions started by the completer */            \
    X(req_remote_access_errors)   /* mlx5: remote access error NAKs received */                  \
    X(resp_remote_access_errors)  /* mlx5: remote access errors detected as responder */         \
    X(req_remote_invalid_request) /* mlx5: invalid request NAKs received */                      \
    X(resp_local_length_error)    /* mlx5: incoming message longer than the receive WQE */       \
    X(req_cqe_error)              /* mlx5: requester completions with an error status */         \
    X(resp_cqe_error)                                                                            \
    X(req_cqe_flush_error)        /* mlx5: send WRs flushed */                                   \
    X(resp_cqe_flush_error)       /* mlx5: receive WRs flushed */                                \
    X(rx_write_requests)          /* mlx5 */                                                     \
    X(rx_read_requests)           /* mlx5 */                                                     \
    X(rx_atomic_requests)         /* mlx5 */                                                     \
    X(out_of_buffer)              /* mlx5: no receive WQE (RNR) */                               \
    X(np_ecn_marked_roce_packets) /* mlx5: RoCE packets received with ECN CE (the NP's input) */ \
    X(np_cnp_sent)                /* mlx5: CNPs sent */                                          \
    X(rp_cnp_handled)             /* mlx5: CNPs received and acted on by the RP */               \
    X(rp_cnp_ignored)             /* mlx5: CNPs received and ignored (RP off, no such QP) */     \
    X(cq_overflow)                /* CQ overflows (IBV_EVENT_CQ_ERR raised) */                   \
    X(rx_drop_no_qp)              /* DestQP is no QP of this device, or not in a receiving state */ \
    X(qkey_violations)            /* UD: DETH Q_Key is not the QP's Q_Key (IBTA ch. 10)   */          \
    X(resp_invalid_request)       /* invalid request NAKs sent (opcode sequence, length) */         \
    X(uc_dropped_messages)        /* UC: messages dropped after a lost packet */                    \
    X(resp_resources_busy)        /* READ/atomic requests dropped: every responder resource busy */ \
    X(rdma_sends)                 /* rxe */                                                      \
    X(rdma_recvs)                 /* rxe */                                                      \
    X(dma_bytes_read)             /* DMA engine: bytes read from registered memory */            \
    X(dma_bytes_written)          /* DMA engine: bytes written to registered memory */           \
    X(dma_access_errors)          /* DMA engine: accesses refused by the MR check */             \
    X(pkey_violations)            /* BTH P_Key does not match the QP's (IBTA 10.9.3; the port's bad_pkey_cntr) */ \
    X(rx_drop_addr)               /* RC/UC: IP source or destination not the QP's path (rxe check_addr) */ \
    X(rx_icrc_flow)               /* ICRCs checked from the QP's learnt header, not in full (recv.cpp) */ \
    X(gsi_rcvd_mads)              /* QP1: MADs received and handed to an agent (IBTA 13.5) */       \
    X(gsi_sent_mads)              /* QP1: MADs sent */                                              \
    X(gsi_drop_malformed)         /* QP1: not one 256-byte UD SEND Only, or BaseVersion not 1 */    \
    X(gsi_drop_qkey)              /* QP1: DETH Q_Key not 0x80010000 (IBTA 13.5, 10.2.4) */          \
    X(gsi_unsupported_answered)   /* QP1: a Get/Set of a class/method not served: GetResp + status (13.4.7) */ \
    X(gsi_drop_unsupported)       /* QP1: a Send/response/Trap of a class not served, dropped */    \
    X(gsi_tx_no_buffer)           /* QP1: a MAD not sent, no frame buffer */                        \
    X(cm_req_sent) X(cm_req_rcvd) X(cm_mra_sent) X(cm_mra_rcvd) X(cm_rej_sent) X(cm_rej_rcvd)      \
    X(cm_rep_sent) X(cm_rep_rcvd) X(cm_rtu_sent) X(cm_rtu_rcvd) X(cm_dreq_sent) X(cm_dreq_rcvd)    \
    X(cm_drep_sent) X(cm_drep_rcvd) X(cm_sidr_req_sent) X(cm_sidr_req_rcvd) X(cm_sidr_rep_sent)    \
    X(cm_sidr_rep_rcvd)                                                                          \
    X(cm_retries)                 /* CM: REQ, REP, DREQ or SIDR_REQ sent again on its timeout (IBTA 12.7.28) */ \
    X(cm_timeouts)                /* CM: max CM retries exhausted */                                \
    X(cm_duplicates)              /* CM: duplicate REQ/REP/DREQ/SIDR_REQ answered again (12.9.6) */ \
    X(cm_rx_invalid)              /* CM: MADs that fail parse_cm (bad class version, attribute, method, length) */ \
    X(cm_rx_unmatched)            /* CM: no connection for its communication IDs, dropped */        \
    X(cm_rx_wrong_state)          /* CM: a message the connection's state does not take, dropped */ \
    X(cm_stale_conn)              /* CM: REQ for a QP still connected elsewhere: REJ stale connection (12.4.2) */

enum class Counter : uint16_t {
#define HCAEMU_ENUM(n) n,
    HCAEMU_COUNTERS(HCAEMU_ENUM)
#undef HCAEMU_ENUM
    count,
};
constexpr size_t kCounterCount = size_t(Counter::count);

inline constexpr std::array<const char*, kCounterCount> kCounterName = {
#define HCAEMU_NAME(n) #n,
    HCAEMU_COUNTERS(HCAEMU_NAME)
#undef HCAEMU_NAME
};

// Data-path lcores one device may have (transport::HcaGroup), and the calling thread's: which
// slot of the device's counters and of an MR's pins it writes (0 unless an lcore's thread set
// it). initial-exec: one load, also inside the shared libraries.
inline constexpr uint32_t kMaxLcores = 8;
[[gnu::tls_model("initial-exec")]] inline thread_local uint32_t t_lcore = 0;

// The device's counters: plain integers, one set per data-path lcore (each bumped by its own
// thread only), summed when read for a report (Device::counters_total).
struct alignas(64) Counters {
    std::array<uint64_t, kCounterCount> v{};
    std::array<uint64_t, pkt::kParseErrorCount> rx_err{};  // index = pkt::ParseError
    void add(Counter c, uint64_t n = 1) { v[size_t(c)] += n; }
    uint64_t get(Counter c) const { return v[size_t(c)]; }
    void rx_error(pkt::ParseError e) { ++rx_err[size_t(e)]; }
    Counters& operator+=(const Counters& o) {
        for (size_t i = 0; i < v.size(); ++i) v[i] += o.v[i];
        for (size_t i = 0; i < rx_err.size(); ++i) rx_err[i] += o.rx_err[i];
        return *this;
    }
};

}  // namespace hcaemu
