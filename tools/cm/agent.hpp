// The CM agent: the InfiniBand Communication Manager (IBTA vol. 1 ch. 12) on the HCA's QP1, with
// the RDMA CM conventions over it (IBTA Annex A11, as Linux's cma.c/cm.c use them), behind
// api::Cm (tools/libhcaemu/cm.hpp). One agent per device; the program that drives the device's
// engine (libhcaemu in-process, hcaemud) calls poll() after each engine turn for timers and
// address resolution. MADs arrive through Hca::set_cm_agent. Control path: maps and allocation are
// fine here, nothing of it runs per data packet.
//
// States are IBTA's (12.9, figures 91-93), one per id; docs/cm.md draws them.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <random>

#include "packet/mad.hpp"
#include "tools/libhcaemu/cm.hpp"
#include "transport/hca.hpp"

namespace hcaemu::cm {

enum class CmState : uint8_t {
    idle,            // created, or bound
    addr_query,      // resolve_addr: waiting for ARP/ND
    addr_resolved,
    route_resolved,
    listen,
    req_sent,        // active: REQ out, REP awaited (REQ retried on its timeout)
    mra_req_rcvd,    // active: the peer MRA'd our REQ: waiting longer for the REP
    req_rcvd,        // passive: connect_request reported, the consumer has not answered
    mra_req_sent,    // passive: a duplicate REQ got an MRA (the consumer is slow)
    rep_sent,        // passive: REP out, RTU awaited (REP retried)
    rep_rcvd,        // active: connect_response reported, establish() sends the RTU
    established,
    dreq_sent,       // DREQ out, DREP awaited (DREQ retried)
    dreq_rcvd,       // disconnected reported, disconnect() sends the DREP
    timewait,        // IBTA 12.9.7: the QP is not reused until it ends (timewait_exit)
    sidr_req_sent,   // UD active
    sidr_req_rcvd,   // UD passive: connect_request reported
    count,
};
const char* name(CmState s);

// The Linux cma's choices, used for every REQ we send (cma.c: CMA_CM_RESPONSE_TIMEOUT,
// CMA_MAX_CM_RETRIES, CMA_IBOE_PACKET_LIFETIME) and the Q_Key of RDMA_PS_UDP (RDMA_UDP_QKEY).
struct AgentConfig {
    uint8_t cm_response_timeout = 20;  // 4.096 us * 2^20 = 4.3 s
    uint8_t max_cm_retries = 15;
    uint8_t packet_life_time = 16;     // 268 ms
    uint8_t mra_service_timeout = 20;  // the MRA we send to a duplicate REQ
    uint32_t udp_qkey = 0x01234567;
    uint64_t seed = 0;                 // 0: random comm IDs and PSNs; else reproducible (tests)
};

class Agent final : public api::Cm {
public:
    explicit Agent(transport::Hca& hca, const AgentConfig& cfg = {});
    ~Agent() override;
    Agent(const Agent&) = delete;
    Agent& operator=(const Agent&) = delete;

    // Timers (retries, TimeWait) and address resolutions due; call after each engine turn.
    void poll();
    uint64_t next_deadline_ns() const;  // UINT64_MAX: none

    int create_id(pkt::RdmaPs ps, QpType qp_type, uint64_t context, uint32_t& id) override;
    int destroy_id(uint32_t id, uint32_t& events_reported) override;
    int bind(uint32_t id, const sockaddr* addr) override;
    int resolve_addr(uint32_t id, const sockaddr* src, const sockaddr* dst, int timeout_ms) override;
    int resolve_route(uint32_t id, int timeout_ms) override;
    int query(uint32_t id, api::CmIdInfo& out) override;
    int listen(uint32_t id, int backlog) override;
    int connect(uint32_t id, const api::CmConnParam& param) override;
    int accept(uint32_t id, const api::CmConnParam& param) override;
    int reject(uint32_t id, const uint8_t* private_data, uint8_t len) override;
    int disconnect(uint32_t id) override;
    int establish(uint32_t id) override;
    int init_qp_attr(uint32_t id, QpState state, QpAttr& attr, uint32_t& mask) override;
    int set_option(uint32_t id, api::CmOption opt, uint32_t value) override;
    bool get_event(api::CmEvent& ev) override;
    int fd() const override { return efd_; }

    // For tests and `hcaemu stat`: an id's state and communication ID (0: no such id).
    CmState state(uint32_t id) const;
    uint32_t local_comm_id(uint32_t id) const;
    size_t ids() const { return ids_.size(); }

private:
    struct Id;
    using Recv = transport::GsiRecv;
    static void on_mad(void* ctx, const Recv& m);
    void receive(const Recv& m);
    // One handler per received attribute (IBTA 12.6), each the steps of 12.9's diagrams.
    void rx_req(const Recv& m, const pkt::MadHdr& h, const pkt::CmReq& r);
    void rx_dup_req(Id& c, const Recv& m);
    void rx_mra(const pkt::CmMra& r);
    void rx_rej(const pkt::CmRej& r);
    void rx_rep(const pkt::MadHdr& h, const pkt::CmRep& r);
    void rx_rtu(const pkt::CmRtu& r);
    void rx_dreq(const Recv& m, const pkt::MadHdr& h, const pkt::CmDreq& r);
    void rx_drep(const pkt::CmDrep& r);
    void rx_sidr_req(const Recv& m, const pkt::MadHdr& h, const pkt::CmSidrReq& r);
    void rx_sidr_rep(const pkt::CmSidrRep& r);
    // A message for an id in `c`'s state: true if IBTA 12.9 takes it there, else counted.
    bool takes(const Id& c, uint16_t attr);

    Id* find(uint32_t id) const;
    Id* by_comm_id(uint32_t local_comm_id) const;
    Id* listener_for(pkt::RdmaPs ps, uint16_t port, const Gid& dst) const;
    Id& new_id(pkt::RdmaPs ps, QpType t, uint64_t context);
    int bind_addr(Id& c, const sockaddr* addr);
    bool port_free(const Id& c, uint16_t port, bool wildcard, const Gid& ip) const;
    int pick_sgid(const Gid& dst, Gid& sgid, uint8_t& index) const;

    // Sending: a CM MAD to the connection's peer; `retry` arms the id's resend timer.
    void send(Id& c, const pkt::CmMad& m, bool retry, uint64_t timeout_ns = 0, uint8_t retries = 0);
    void send_to(const transport::GsiDest& d, const pkt::CmMad& m);
    void send_rej_to(const Recv& m, uint64_t tid, uint32_t local_comm, uint32_t remote_comm, uint8_t msg,
                     uint16_t reason, const uint8_t* pd, uint8_t len);
    void send_rej(Id& c, uint8_t msg, uint16_t reason, const uint8_t* pd = nullptr, uint8_t len = 0);
    void send_dreq(Id& c);
    void send_drep(Id& c, uint64_t tid);
    void count(uint16_t attr, bool sent);
    void timeout(Id& c);
    void enter_timewait(Id& c);
    void push(Id& c, api::CmEventType t, int32_t status, const api::CmConnParam* p = nullptr, uint32_t listen_id = 0);
    void stop_timer(Id& c);
    void arm(uint64_t t) { next_check_ = std::min(next_check_, t); }
    uint64_t plt_ns() const { return pkt::cm_timeout_ns(cfg_.packet_life_time); }
    uint32_t random24() { return uint32_t(rng_()) & 0xFFFFFF; }

    transport::Hca& hca_;
    AgentConfig cfg_;
    std::map<uint32_t, std::unique_ptr<Id>> ids_;
    std::deque<api::CmEvent> events_;
    std::mt19937_64 rng_;
    uint32_t next_id_ = 1;
    uint32_t comm_seq_ = 0;
    uint32_t comm_xor_ = 0;
    uint16_t next_port_ = 0;
    uint64_t ca_guid_ = 0;
    uint64_t next_check_ = UINT64_MAX;  // poll() does nothing before this (the engine turns often)
    int efd_ = -1;
};

}  // namespace hcaemu::cm
