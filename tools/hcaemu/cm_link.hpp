// rdma_cm connections for hcaemu's tools (`pingpong -R`, `perf -R`) over api::Cm (cm.hpp), in
// perftest -R's order: the server binds, listens and accepts (its QP to INIT and RTR before the
// REP, RTS after the RTU); the client resolves the address and the route, moves its QP to INIT,
// connects, and on the REP moves it to RTR and RTS and sends the RTU. Every QP attribute comes from
// the CM (init_qp_attr), as librdmacm's rdma_accept / rdma_connect take them.
//
// One Context's CM has one event queue: events for another id than the one waited for are kept
// for later (a DREQ on one connection while another is set up), disconnects are remembered.
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tools/libhcaemu/api.hpp"
#include "tools/libhcaemu/cm.hpp"
#include "tools/hcaemu/oob_stream.hpp"

namespace hcaemu::tools {

class CmLink {
public:
    // `idle`: one turn of whatever must run while waiting (true: it did some work); default the
    // Context's poll(). Every wait ends after `timeout_ms` or at SIGINT/SIGTERM (stop.hpp).
    CmLink(api::Context& ctx, api::Cm& cm, uint64_t timeout_ms, std::function<bool()> idle = {});
    ~CmLink();  // the ids still held are destroyed
    CmLink(const CmLink&) = delete;
    CmLink& operator=(const CmLink&) = delete;

    // HOST as an IPv4 or IPv6 address with `port`; an empty HOST: the IPv6 wildcard (takes IPv4
    // too). False when HOST is not an address.
    static bool address(const std::string& host, uint16_t port, sockaddr_storage& out);

    // Server. A listening id on `addr` (RDMA_PS_TCP, RC); false and `err` (rdma_bind_addr: ...).
    bool listen(const sockaddr_storage& addr, int backlog, uint32_t& listen_id, std::string& err);
    // The next connect request on `listen_id`: `qp` to INIT and RTR, the REP, the RTU, RTS.
    // `peer_qpn`: the REQ's QPN. `p.qp_num` is set from `qp`. `at_init`: called with the QP in
    // INIT (receives posted before the peer can send); false fails the accept.
    using AtInit = std::function<bool()>;
    bool accept(uint32_t listen_id, api::Qp& qp, api::CmConnParam p, uint32_t& id, uint32_t& peer_qpn,
                std::string& err, const AtInit& at_init = {});
    // Client. `rejected`: the REJ's reason when the peer rejected (8, IBTA's invalid service ID:
    // nobody listens on that port), else 0.
    bool connect(const sockaddr_storage& dst, api::Qp& qp, api::CmConnParam p, uint32_t& id, uint32_t& peer_qpn,
                 int& rejected, std::string& err, const AtInit& at_init = {});
    // connect, again 100 ms later while the peer rejects with reason 8 (its listener not there
    // yet), until the timeout: perftest's own retry, without its stale ids.
    bool connect_retry(const sockaddr_storage& dst, api::Qp& qp, const api::CmConnParam& p, uint32_t& id,
                       uint32_t& peer_qpn, std::string& err, const AtInit& at_init = {});

    // The PSNs the CM chose for a connected id: ours (RTS's sq_psn) and the peer's (RTR's rq_psn),
    // and the GIDs of both ends.
    void psns(uint32_t id, uint32_t& sq_psn, uint32_t& rq_psn);
    bool info(uint32_t id, api::CmIdInfo& out);
    // Takes the CM's queued events (kept for their waiters); true once `id` saw `disconnected`.
    bool peer_disconnected(uint32_t id);
    // DREQ (or the DREP to the peer's), the disconnected event (2 s at most), then the id goes.
    void disconnect(uint32_t id);
    void destroy(uint32_t id);

private:
    // The next event for `id` (a connect request: for the listener `id`), turning the device;
    // false after the timeout or a signal.
    bool wait(uint32_t id, api::CmEvent& ev, uint64_t timeout_ms);
    bool expect(uint32_t id, api::CmEventType want, api::CmEvent& ev, const char* what, std::string& err);
    void drain();
    bool turn();
    bool modify(api::Qp& qp, uint32_t id, QpState st);

    api::Context& ctx_;
    api::Cm& cm_;
    uint64_t timeout_ms_;
    std::function<bool()> idle_;
    std::deque<api::CmEvent> kept_;
    std::set<uint32_t> disconnected_;
    std::vector<uint32_t> ids_;
};

// perftest -R's out-of-band link (its -z, implied by -R): an RC QP connected by rdma_cm on the
// test's port, each message one SEND of its bytes into a 56-byte receive (perftest's
// sizeof(struct pingpong_dest)). Waits turn the device through the idle function.
class CmStream : public OobStream {
public:
    static constexpr uint32_t kMaxMsg = 56;
    CmStream(api::Context& ctx, CmLink& link) : ctx_(ctx), link_(link) {}
    ~CmStream() override;
    CmStream(const CmStream&) = delete;
    CmStream& operator=(const CmStream&) = delete;

    // Server: listens on `addr`, accepts one connection, stops listening. Client: connects to
    // `addr`, again while nobody listens there yet (REJ 8), until the link's timeout.
    bool accept(const sockaddr_storage& addr, std::string& err);
    bool connect(const sockaddr_storage& addr, std::string& err);
    void close();  // DREQ / DREP, bounded (CmLink::disconnect)

    bool read_exact(std::span<uint8_t> buf, uint64_t timeout_ms, std::string& err) override;
    bool write_all(std::span<const uint8_t> buf, uint64_t timeout_ms, std::string& err) override;
    void set_idle(std::function<bool()> fn) override { idle_ = std::move(fn); }
    bool peer_closed() const override { return peer_closed_; }

private:
    static constexpr uint32_t kRecvs = 4;        // receive slots, kMaxMsg bytes each
    static constexpr uint64_t kSendId = ~0ull;
    bool setup(std::string& err);
    bool post_recv(uint32_t slot);
    // Takes completions: receives queued, the send's status noted; false on an error completion.
    bool poll_cq(std::string& err);
    bool turn();

    api::Context& ctx_;
    CmLink& link_;
    std::function<bool()> idle_;
    api::Buffer mem_{};
    std::unique_ptr<api::Pd> pd_;
    std::unique_ptr<api::Mr> mr_;
    std::unique_ptr<api::Cq> cq_;
    std::unique_ptr<api::Qp> qp_;
    uint32_t id_ = 0;
    std::deque<std::pair<uint32_t, uint32_t>> got_;  // received: (slot, bytes)
    bool send_done_ = false;
    bool peer_closed_ = false;
};

}  // namespace hcaemu::tools
