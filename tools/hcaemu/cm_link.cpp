// rdma_cm connections for hcaemu's tools (see cm_link.hpp).
#include "tools/hcaemu/cm_link.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "tools/hcaemu/stop.hpp"

namespace hcaemu::tools {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

CmLink::CmLink(api::Context& ctx, api::Cm& cm, uint64_t timeout_ms, std::function<bool()> idle)
    : ctx_(ctx), cm_(cm), timeout_ms_(timeout_ms), idle_(std::move(idle)) {}

CmLink::~CmLink() {
    for (const uint32_t id : std::vector<uint32_t>(ids_)) destroy(id);
}

bool CmLink::address(const std::string& host, uint16_t port, sockaddr_storage& out) {
    out = {};
    auto* s4 = reinterpret_cast<sockaddr_in*>(&out);
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&out);
    if (host.empty()) {  // the wildcard: IPv4 and IPv6
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(port);
        return true;
    }
    if (inet_pton(AF_INET, host.c_str(), &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons(port);
        return true;
    }
    if (inet_pton(AF_INET6, host.c_str(), &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(port);
        return true;
    }
    return false;
}

bool CmLink::turn() { return idle_ ? idle_() : ctx_.poll() != 0; }

void CmLink::drain() {
    api::CmEvent ev;
    while (cm_.get_event(ev)) {
        if (ev.type == api::CmEventType::disconnected) disconnected_.insert(ev.id);
        else kept_.push_back(ev);
    }
}

bool CmLink::wait(uint32_t id, api::CmEvent& ev, uint64_t timeout_ms) {
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        drain();
        const auto it = std::find_if(kept_.begin(), kept_.end(), [id](const api::CmEvent& e) {
            return e.type == api::CmEventType::connect_request ? e.listen_id == id : e.id == id;
        });
        if (it != kept_.end()) {
            ev = *it;
            kept_.erase(it);
            return true;
        }
        if (disconnected_.count(id)) {
            ev = {};
            ev.type = api::CmEventType::disconnected;
            ev.id = id;
            return true;
        }
        if (stop_requested() || Clock::now() >= end) return false;
        if (!turn()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}

bool CmLink::expect(uint32_t id, api::CmEventType want, api::CmEvent& ev, const char* what, std::string& err) {
    if (!wait(id, ev, timeout_ms_)) return err = std::string("rdma_cm: no ") + what + " event", false;
    if (ev.type == want) return true;
    err = std::string("rdma_cm: ") + what + " expected, got event " + std::to_string(int(ev.type)) + " status " +
          std::to_string(ev.status);
    return false;
}

bool CmLink::modify(api::Qp& qp, uint32_t id, QpState st) {
    QpAttr a;
    uint32_t mask = 0;
    return cm_.init_qp_attr(id, st, a, mask) == 0 && qp.modify(a, mask).ok();
}

bool CmLink::listen(const sockaddr_storage& addr, int backlog, uint32_t& listen_id, std::string& err) {
    if (const int e = cm_.create_id(pkt::RdmaPs::tcp, QpType::rc, 0, listen_id))
        return err = std::string("rdma_create_id: ") + std::strerror(e), false;
    ids_.push_back(listen_id);
    if (const int e = cm_.bind(listen_id, reinterpret_cast<const sockaddr*>(&addr)))
        return err = std::string("rdma_bind_addr: ") + std::strerror(e), false;
    if (const int e = cm_.listen(listen_id, backlog)) return err = std::string("rdma_listen: ") + std::strerror(e), false;
    return true;
}

bool CmLink::accept(uint32_t listen_id, api::Qp& qp, api::CmConnParam p, uint32_t& id, uint32_t& peer_qpn,
                    std::string& err, const AtInit& at_init) {
    api::CmEvent ev;
    if (!expect(listen_id, api::CmEventType::connect_request, ev, "connect request", err)) return false;
    id = ev.id;
    ids_.push_back(id);
    peer_qpn = ev.param.qp_num;
    p.qp_num = qp.qpn();
    if (!modify(qp, id, QpState::init)) return err = "Failed to modify QP to INIT", false;
    if (at_init && !at_init()) return err = "Couldn't post receives", false;
    if (!modify(qp, id, QpState::rtr)) return err = "Failed to modify QP to RTR", false;
    if (const int e = cm_.accept(id, p)) return err = std::string("rdma_accept: ") + std::strerror(e), false;
    if (!expect(id, api::CmEventType::established, ev, "established", err)) return false;
    if (!modify(qp, id, QpState::rts)) return err = "Failed to modify QP to RTS", false;
    return true;
}

bool CmLink::connect(const sockaddr_storage& dst, api::Qp& qp, api::CmConnParam p, uint32_t& id, uint32_t& peer_qpn,
                     int& rejected, std::string& err, const AtInit& at_init) {
    rejected = 0;
    if (const int e = cm_.create_id(pkt::RdmaPs::tcp, QpType::rc, 0, id))
        return err = std::string("rdma_create_id: ") + std::strerror(e), false;
    ids_.push_back(id);
    const auto* sa = reinterpret_cast<const sockaddr*>(&dst);
    const int ms = int(std::min<uint64_t>(timeout_ms_, 1u << 30));
    api::CmEvent ev;
    if (const int e = cm_.resolve_addr(id, nullptr, sa, ms)) return err = std::string("rdma_resolve_addr: ") + std::strerror(e), false;
    if (!expect(id, api::CmEventType::addr_resolved, ev, "address resolved", err)) return false;
    if (const int e = cm_.resolve_route(id, ms)) return err = std::string("rdma_resolve_route: ") + std::strerror(e), false;
    if (!expect(id, api::CmEventType::route_resolved, ev, "route resolved", err)) return false;
    if (!modify(qp, id, QpState::init)) return err = "Failed to modify QP to INIT", false;
    if (at_init && !at_init()) return err = "Couldn't post receives", false;
    p.qp_num = qp.qpn();
    if (const int e = cm_.connect(id, p)) return err = std::string("rdma_connect: ") + std::strerror(e), false;
    if (!wait(id, ev, timeout_ms_)) return err = "rdma_cm: no answer to the connect", false;
    if (ev.type == api::CmEventType::rejected) {
        rejected = ev.status;
        return err = "rdma_connect: rejected, reason " + std::to_string(ev.status), false;
    }
    if (ev.type != api::CmEventType::connect_response)
        return err = "rdma_connect: event " + std::to_string(int(ev.type)) + " status " + std::to_string(ev.status), false;
    peer_qpn = ev.param.qp_num;
    if (!modify(qp, id, QpState::init) || !modify(qp, id, QpState::rtr) || !modify(qp, id, QpState::rts))
        return err = "Failed to modify QP to RTR/RTS", false;
    if (const int e = cm_.establish(id)) return err = std::string("rdma_establish: ") + std::strerror(e), false;
    return true;
}

bool CmLink::connect_retry(const sockaddr_storage& dst, api::Qp& qp, const api::CmConnParam& p, uint32_t& id,
                           uint32_t& peer_qpn, std::string& err, const AtInit& at_init) {
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms_);
    for (;;) {
        int rejected = 0;
        if (connect(dst, qp, p, id, peer_qpn, rejected, err, at_init)) return true;
        destroy(id);
        if (rejected != 8 || stop_requested() || Clock::now() >= end) return false;
        // The QP goes back to RESET for the next REQ: the CM moves it from there again.
        QpAttr a;
        a.qp_state = QpState::reset;
        if (!qp.modify(a, qp_attr::state).ok()) return err = "Failed to modify QP to RESET", false;
        const auto pause = Clock::now() + std::chrono::milliseconds(100);
        while (Clock::now() < pause && !stop_requested())
            if (!turn()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

void CmLink::psns(uint32_t id, uint32_t& sq_psn, uint32_t& rq_psn) {
    QpAttr a;
    uint32_t mask = 0;
    (void)cm_.init_qp_attr(id, QpState::rts, a, mask);
    sq_psn = a.sq_psn;
    (void)cm_.init_qp_attr(id, QpState::rtr, a, mask);
    rq_psn = a.rq_psn;
}

bool CmLink::info(uint32_t id, api::CmIdInfo& out) { return cm_.query(id, out) == 0; }

bool CmLink::peer_disconnected(uint32_t id) {
    drain();
    return disconnected_.count(id) != 0;
}

void CmLink::disconnect(uint32_t id) {
    if (std::find(ids_.begin(), ids_.end(), id) == ids_.end()) return;
    (void)cm_.disconnect(id);
    api::CmEvent ev;
    const auto end = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < end && !stop_requested()) {
        if (peer_disconnected(id)) {
            (void)cm_.disconnect(id);  // the DREP, if the peer's DREQ came first
            break;
        }
        if (!turn()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    for (int i = 0; i < 100; ++i) turn();  // the last MAD leaves
    destroy(id);
}

void CmLink::destroy(uint32_t id) {
    const auto it = std::find(ids_.begin(), ids_.end(), id);
    if (it == ids_.end()) return;
    ids_.erase(it);
    uint32_t n = 0;
    (void)cm_.destroy_id(id, n);
    std::erase_if(kept_, [id](const api::CmEvent& e) { return e.id == id; });
    disconnected_.erase(id);
}

// ---------------------------------------------------------------- CmStream

CmStream::~CmStream() {
    link_.destroy(id_);
    qp_.reset();
    cq_.reset();
    mr_.reset();
    pd_.reset();
    if (mem_.data) ctx_.free_buffer(mem_);
}

bool CmStream::setup(std::string& err) {
    auto b = ctx_.alloc_buffer(4096);
    if (!b.ok()) return err = "cannot allocate the out-of-band buffer", false;
    mem_ = b.value;
    auto pd = ctx_.alloc_pd();
    if (!pd.ok()) return err = "alloc_pd failed", false;
    pd_ = std::move(pd.value);
    auto mr = ctx_.reg_mr(*pd_, mem_.data, mem_.size, access::local_write);
    if (!mr.ok()) return err = "reg_mr failed", false;
    mr_ = std::move(mr.value);
    auto cq = ctx_.create_cq(int(kRecvs + 2));
    if (!cq.ok()) return err = "create_cq failed", false;
    cq_ = std::move(cq.value);
    api::QpInitAttr ia;
    ia.send_cq = ia.recv_cq = cq_.get();
    ia.qp_type = QpType::rc;
    ia.cap = {1, kRecvs, 1, 1, 0};
    auto qp = ctx_.create_qp(*pd_, ia);
    if (!qp.ok()) return err = "create_qp failed", false;
    qp_ = std::move(qp.value);
    return true;
}

bool CmStream::post_recv(uint32_t slot) {
    Sge sge{uint64_t(uintptr_t(mem_.data + slot * kMaxMsg)), kMaxMsg, mr_->lkey()};
    RecvWr wr;
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const RecvWr* bad = nullptr;
    return qp_->post_recv(&wr, &bad) == Status::ok;
}

bool CmStream::accept(const sockaddr_storage& addr, std::string& err) {
    if (!setup(err)) return false;
    uint32_t listen_id = 0, peer_qpn = 0;
    if (!link_.listen(addr, 1, listen_id, err)) return false;
    const auto post = [this] {
        for (uint32_t i = 0; i < kRecvs; ++i)
            if (!post_recv(i)) return false;
        return true;
    };
    const bool ok = link_.accept(listen_id, *qp_, api::CmConnParam{}, id_, peer_qpn, err, post);
    link_.destroy(listen_id);  // perftest's rdma_server_connect: one client, the listener goes
    return ok;
}

bool CmStream::connect(const sockaddr_storage& addr, std::string& err) {
    if (!setup(err)) return false;
    uint32_t peer_qpn = 0;
    const auto post = [this] {
        for (uint32_t i = 0; i < kRecvs; ++i)
            if (!post_recv(i)) return false;
        return true;
    };
    return link_.connect_retry(addr, *qp_, api::CmConnParam{}, id_, peer_qpn, err, post);
}

void CmStream::close() {
    link_.disconnect(id_);
    id_ = 0;
}

bool CmStream::turn() { return idle_ ? idle_() : ctx_.poll() != 0; }

bool CmStream::poll_cq(std::string& err) {
    Wc wc[kRecvs + 2];
    const int n = cq_->poll(wc);
    for (int i = 0; i < n; ++i) {
        if (wc[i].status != WcStatus::success) {
            // a flush: the peer disconnected (its DREQ moved our QP to ERR)
            peer_closed_ = wc[i].status == WcStatus::wr_flush_err || link_.peer_disconnected(id_);
            err = std::string("out-of-band QP: completion status ") + std::to_string(int(wc[i].status));
            return false;
        }
        if (wc[i].wr_id == kSendId) send_done_ = true;
        else got_.emplace_back(uint32_t(wc[i].wr_id), wc[i].byte_len);
    }
    return true;
}

bool CmStream::write_all(std::span<const uint8_t> buf, uint64_t timeout_ms, std::string& err) {
    if (buf.size() > kMaxMsg) return err = "out-of-band message longer than perftest's receive", false;
    uint8_t* slot = mem_.data + kRecvs * kMaxMsg;
    if (!buf.empty()) std::memcpy(slot, buf.data(), buf.size());
    Sge sge{uint64_t(uintptr_t(slot)), uint32_t(buf.size()), mr_->lkey()};
    SendWr wr;
    wr.wr_id = kSendId;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = WrOpcode::send;
    wr.send_flags = send_flag::signaled;
    const SendWr* bad = nullptr;
    send_done_ = false;
    if (qp_->post_send(&wr, &bad) != Status::ok) return err = "out-of-band QP: post_send failed", false;
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!send_done_) {
        if (!poll_cq(err)) return false;
        if (send_done_) break;
        if (stop_requested()) return err = "interrupted", false;
        if (Clock::now() >= end) return err = "timed out sending", false;
        if (!turn()) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return true;
}

bool CmStream::read_exact(std::span<uint8_t> buf, uint64_t timeout_ms, std::string& err) {
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (got_.empty()) {
        if (!poll_cq(err)) return false;
        if (!got_.empty()) break;
        if (link_.peer_disconnected(id_)) {
            peer_closed_ = true;
            return err = "the peer disconnected", false;
        }
        if (stop_requested()) return err = "interrupted", false;
        if (Clock::now() >= end) return err = "timed out", false;
        if (!turn()) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    const auto [slot, len] = got_.front();
    got_.pop_front();
    if (len != buf.size())
        return err = "a message of " + std::to_string(len) + " bytes, " + std::to_string(buf.size()) + " expected", false;
    if (len) std::memcpy(buf.data(), mem_.data + slot * kMaxMsg, len);
    if (!post_recv(slot)) return err = "out-of-band QP: post_recv failed", false;
    return true;
}

}  // namespace hcaemu::tools
