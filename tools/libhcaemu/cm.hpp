// libhcaemu's connection manager: rdma_cm over the IB CM (IBTA ch. 12) on the device's QP1, the
// same whether the HCA is in this process or in hcaemud. It is shaped as the kernel's rdma_ucm
// commands are (one call per ucma command), so that librdmacm.so.1 (tools/rdmacm) is a thin layer:
// librdmacm owns event channels, rdma_cm_id structs, QPs and their modify_qp calls; the CM owns
// addresses, ports, MADs, timers and the CM state of each id.
//
//   api::Cm* cm = ctx->cm();                       // nullptr: the device has no CM
//   uint32_t id; cm->create_id(pkt::RdmaPs::tcp, QpType::rc, 0xC0FFEE, id);
//   cm->resolve_addr(id, nullptr, dst, 2000);      // -> addr_resolved (ARP/ND through the port)
//   cm->resolve_route(id, 2000);                   // -> route_resolved
//   ... create the QP, modify it to INIT with init_qp_attr(id, QpState::init, ...)
//   cm->connect(id, param);                        // REQ -> REP: connect_response
//   ... modify to RTR and RTS with init_qp_attr, then cm->establish(id)   // RTU: established
//
// Every call returns 0 or a positive errno, as librdmacm would set errno: EINVAL (bad id, bad
// state for the call), EADDRINUSE / EADDRNOTAVAIL (bind), ENODEV (an address no port of this
// device has), ENOMEM, EOPNOTSUPP (multicast, RDMA_PS_IB's native service IDs, ...).
// Threads: as api::Context (one thread at a time). Ids are numbers (non-zero) of this Context.
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

#include "hca_model/verbs_structs.hpp"
#include "packet/mad.hpp"

namespace hcaemu::api {

// enum rdma_cm_event_type, same values.
enum class CmEventType : uint8_t {
    addr_resolved = 0, addr_error, route_resolved, route_error, connect_request, connect_response,
    connect_error, unreachable, rejected, established, disconnected, device_removal, multicast_join,
    multicast_error, addr_change, timewait_exit,
};

constexpr size_t kCmMaxPrivate = 224;  // the largest private data of a CM MAD (RTU, DREP: IBTA Table 111, 113)

// struct rdma_conn_param / rdma_ud_param as a call or an event carries it. In calls, qp_num is the
// caller's QP (connect, accept); in events, the peer's (connect_request: the REQ's local QPN;
// connect_response / established for UD: the SIDR_REP's QPN). Private data in events is the
// consumer's: the CMA header (pkt::CmaHdr) of an IP port space's REQ / SIDR_REQ is removed.
struct CmConnParam {
    uint8_t private_data[kCmMaxPrivate]{};
    uint8_t private_data_len = 0;
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t flow_control = 0;
    uint8_t retry_count = 7;
    uint8_t rnr_retry_count = 7;
    bool srq = false;
    uint32_t qp_num = 0;
    uint32_t qkey = 0;   // UD (SIDR): the Q_Key
    AhAttr ah;           // UD events (connect_request, established): where the peer is
};

struct CmEvent {
    CmEventType type = CmEventType::addr_error;
    // As rdma_cm_event.status: 0, a negative errno (-ETIMEDOUT, -ECONNREFUSED, -EHOSTUNREACH ...),
    // or for `rejected` the REJ's reason (IBTA Table 109: 8 invalid service ID when nobody
    // listens, 28 consumer reject ...), for UD the SIDR_REP status.
    int32_t status = 0;
    uint32_t id = 0;          // the id the event is for (connect_request: the new id)
    uint32_t listen_id = 0;   // connect_request: the listening id it came through
    uint64_t context = 0;     // the id's context (create_id; a new id inherits its listener's)
    CmConnParam param;        // connect_request, connect_response, established, rejected, disconnected
};

// What rdma_cm_id's route and addresses hold after resolution or a connect_request (ucma query).
struct CmIdInfo {
    sockaddr_storage src{};   // bound / resolved source (the port's IP and the id's port)
    sockaddr_storage dst{};
    Gid sgid{};               // RoCE v2: the GIDs derived from the IP addresses
    Gid dgid{};
    uint8_t sgid_index = 0;
    uint8_t port_num = 1;
    uint16_t pkey = 0xFFFF;
    bool route_resolved = false;
    Mtu path_mtu = Mtu::mtu1024;
    uint8_t traffic_class = 0, hop_limit = 64;
    uint8_t dmac[6]{};        // the neighbour's MAC learnt by ARP/ND
    pkt::RdmaPs ps = pkt::RdmaPs::tcp;
    QpType qp_type = QpType::rc;
};

enum class CmOption : uint8_t {
    tos,          // RDMA_OPTION_ID_TOS: the traffic class of the path
    reuseaddr,    // RDMA_OPTION_ID_REUSEADDR
    afonly,       // RDMA_OPTION_ID_AFONLY
    ack_timeout,  // RDMA_OPTION_ID_ACK_TIMEOUT: the QP's local ACK timeout code
};

class Cm {
public:
    virtual ~Cm() = default;
    virtual int create_id(pkt::RdmaPs ps, QpType qp_type, uint64_t context, uint32_t& id) = 0;
    // Leaves the connection as the state requires (DREQ, REJ timeout), drops the id's queued
    // events; `events_reported`: how many events the id had (ucma's destroy reply).
    virtual int destroy_id(uint32_t id, uint32_t& events_reported) = 0;
    virtual int bind(uint32_t id, const sockaddr* addr) = 0;   // port 0: an ephemeral port
    // src may be nullptr (the port's own address). Event addr_resolved or addr_error.
    virtual int resolve_addr(uint32_t id, const sockaddr* src, const sockaddr* dst, int timeout_ms) = 0;
    virtual int resolve_route(uint32_t id, int timeout_ms) = 0;  // event route_resolved / route_error
    virtual int query(uint32_t id, CmIdInfo& out) = 0;
    virtual int listen(uint32_t id, int backlog) = 0;
    // RC: a REQ (param.qp_num: the caller's QP, its starting PSN chosen by the CM and returned by
    // init_qp_attr), retried as the REQ's timeout fields say. UD: a SIDR_REQ.
    virtual int connect(uint32_t id, const CmConnParam& param) = 0;
    // RC: a REP (RTU -> established). UD: a SIDR_REP (status success).
    virtual int accept(uint32_t id, const CmConnParam& param) = 0;
    virtual int reject(uint32_t id, const uint8_t* private_data, uint8_t len) = 0;  // REJ 28 / SIDR reject
    virtual int disconnect(uint32_t id) = 0;  // DREQ, or DREP to a DREQ received
    virtual int establish(uint32_t id) = 0;   // the active side's RTU (rdma_establish, ucma notify)
    // rdma_init_qp_attr: the attributes and mask (hcaemu::qp_attr:: bits) for the QP's move to
    // `state` (INIT, RTR, RTS) from what the id resolved and negotiated. Passive side: librdmacm's
    // rdma_accept moves the QP to RTR and RTS with these before it calls accept(), so the starting
    // PSN the REP carries (RTS's sq_psn) is chosen by the time connect_request is reported.
    virtual int init_qp_attr(uint32_t id, QpState state, QpAttr& attr, uint32_t& mask) = 0;
    virtual int set_option(uint32_t id, CmOption opt, uint32_t value) = 0;
    virtual bool get_event(CmEvent& ev) = 0;  // non-blocking; false when none is queued
    // Readable while events may be queued (poll/epoll). Events arrive as the Context makes
    // progress (Context::poll; librdmacm's progress thread does it).
    virtual int fd() const = 0;
};

}  // namespace hcaemu::api
