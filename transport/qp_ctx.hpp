// The transport's per-QP state: what an HCA keeps in its QP context beside the WQE rings. One
// context per QPN, created when the QP leaves RESET, reset when it returns there.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "hca_model/objects.hpp"
#include "packet/build.hpp"
#include "packet/headers.hpp"
#include "packet/icrc.hpp"
#include "transport/dcqcn.hpp"
#include "transport/timer_wheel.hpp"

namespace hcaemu::transport {

class Hca;

// Per send WQE: its PSN range, fixed when its first packet goes out (IBTA 9.7.1).
struct WqeTrack {
    uint32_t first_psn = 0;
    uint32_t npsn = 0;          // PSNs the message takes: its packets, or its READ responses
    uint32_t read_rcvd = 0;     // READ: response bytes placed so far
    bool started = false;
};

// An ACK or NAK the responder owes, waiting for its turn: responses leave in PSN order, so one
// owed behind READ responses or an atomic ACK goes out after them (rxe serves a READ before it
// looks at the next request).
struct PendingAck {
    bool due = false;
    bool nak = false;           // `syndrome` is a NAK's; an ACK's (its credits) is made when sent
    uint8_t syndrome = 0;
    uint32_t psn = 0;
    uint32_t msn = 0;           // the MSN as it was when `psn` was executed
};

// A responder resource (max_dest_rd_atomic of them, IBTA 9.7.5.1): what a READ or atomic
// request asked, kept so that a duplicate is answered from here, and an atomic never re-executed.
// The ring is also the queue of responses in PSN order: `sending` marks those still to go.
struct RespResource {
    bool valid = false;
    bool atomic = false;
    uint32_t first_psn = 0;
    uint32_t npsn = 0;
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint32_t length = 0;
    uint64_t orig = 0;          // atomic: the value before, sent again for a duplicate
    uint32_t msn = 0;           // MSN the responses carry
    // Responses still to send (READ: the next PSN and its byte offset; atomic: its ACK).
    uint32_t next_psn = 0;
    uint32_t next_off = 0;
    bool sending = false;
    uint32_t replays = 0;       // duplicates that asked while the responses were due: sent again after
    uint32_t replay_psn = 0;    // from the earliest PSN they asked
    PendingAck before;          // an ACK or NAK owed for earlier PSNs, sent before these responses
};

struct QpCtx {
    QpObj* qp = nullptr;
    Hca* hca = nullptr;
    pkt::Headers tmpl;          // Ethernet, IP, UDP and BTH fields fixed for this QP's packets
    pkt::FrameTemplate ftmpl;   // tmpl as bytes (Hca::set_tmpl): per packet only what changes is written
    bool dmac_unresolved = false;  // tmpl.eth.dst is broadcast until the peer's MAC is known
    uint32_t mtu = 1024;        // path MTU in bytes
    uint16_t pkey = 0xFFFF;     // the P_Key at the QP's pkey_index: sent in BTH, matched on receive
    // The header of the packets that come to this QP, learnt from the last one whose header
    // differed (recv.cpp): a packet that repeats it has its ICRC checked from there. Speed only:
    // a packet that does not match is checked in full.
    pkt::IcrcFlow rx_flow;
    uint8_t rx_flow_misses = 0;  // UD: accepted packets in a row that did not match it

    // ---- requester (requester.cpp)
    std::vector<WqeTrack> track;  // one per SQ slot
    uint64_t next_wqe = 0;      // the WQE to send next: sq.head <= next_wqe <= sq.tail
    uint32_t next_off = 0;      // bytes of next_wqe sent so far
    uint32_t psn = 0;           // PSN of the next new packet
    uint32_t una = 0;           // the oldest unacknowledged PSN (== psn when none is outstanding)
    uint32_t rd_atomic_out = 0; // READ and atomic WQEs sent and not retired (<= max_rd_atomic)
    uint32_t since_ackreq = 0;  // packets since one asked for an ACK
    bool scheduled = false;     // on the Hca's run list
    bool drained_sent = false;  // SQD: the drain was reported
    // A WQE the requester could not execute: it completes with failed_status once every earlier
    // WQE has completed (UINT64_MAX: none).
    uint64_t failed_wqe = UINT64_MAX;
    WcStatus failed_status = WcStatus::success;

    // ---- completer (completer.cpp)
    uint32_t retry_left = 0;    // retry_cnt left for this run of timeouts
    uint32_t rnr_left = 0;      // rnr_retry left; 7 = infinite (IBTA 9.7)
    bool rnr_wait = false;      // sending stopped until the RNR timer fires
    bool restarted = false;     // a Go-Back-N restart from restart_psn awaits its first response
    uint32_t restart_psn = 0;
    Timer ack_timer;            // local ACK timeout (IBTA 9.7)
    Timer rnr_timer;

    // ---- responder (responder.cpp)
    uint32_t epsn = 0;          // expected PSN
    uint32_t msn = 0;           // messages completed, 24 bits
    bool nak_sent = false;      // one NAK per sequence error (IBTA 9.7.5.1)
    enum class InMsg : uint8_t { none, send, write } in_msg = InMsg::none;
    bool uc_dropping = false;   // UC: the rest of a message with a lost packet is dropped
    bool have_wqe = false;      // a receive WQE taken for the SEND in progress
    RecvWqe rwqe;
    std::vector<Sge> rsges;     // the device's max_sge, sized with the context: no per-packet allocation
    uint64_t recv_off = 0;      // bytes placed into the receive WQE
    uint64_t write_va = 0;      // RDMA WRITE in progress: next address, key, bytes left
    uint32_t write_rkey = 0;
    uint32_t write_left = 0;
    uint32_t write_len = 0;     // the whole WRITE's length, for WRITE with immediate
    // rxe's ack_psn: the last SEND or WRITE packet executed and the MSN then. A duplicate SEND or
    // WRITE is acknowledged with it, never with a READ's or an atomic's PSN.
    uint32_t done_psn = 0;
    uint32_t done_msn = 0;
    PendingAck ack;             // the coalesced ACK (or a NAK behind responses) due this burst
    bool ack_listed = false;    // on the Hca's list of QPs with an ACK due
    std::vector<RespResource> res;  // ring of max_dest_rd_atomic
    uint32_t res_next = 0;
    uint32_t res_pending = 0;   // resources in `res` with responses still to send

    // ---- DCQCN (dcqcn.cpp): the NP's CNP pacing, the RP's rate limiter
    DcqcnQp dcqcn;
};

}  // namespace hcaemu::transport
