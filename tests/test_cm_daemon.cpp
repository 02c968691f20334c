// api::Cm through hcaemud (Op::cm, Ev::cm_event): two clients of one daemon (net_ring0 loops frames
// back) connect RC QPs with the CM, send through them, disconnect from both sides; a client's ids
// and QPs are its own (another's id or QP number is refused); a client's listener dies with it
// (the next REQ gets REJ 8). The MADs themselves are checked byte by byte in test_cm.
#include <arpa/inet.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <optional>

#include "tests/daemon_proc.hpp"
#include "tools/libhcaemu/api.hpp"
#include "tools/libhcaemu/cm.hpp"

using namespace hcaemu;
using api::CmEventType;

namespace {

constexpr uint16_t kPort = 7471;

struct Side {
    std::unique_ptr<api::Context> ctx;
    std::unique_ptr<api::Pd> pd;
    std::unique_ptr<api::Cq> cq;
    std::unique_ptr<api::Qp> qp;
    api::Buffer buf;
    std::unique_ptr<api::Mr> mr;
    api::Cm* cm = nullptr;
};

bool open(test::Daemon& d, Side& s, std::string& err) {
    s.ctx = api::open_daemon(d.sock(), err);
    if (!s.ctx) return false;
    s.cm = s.ctx->cm();
    s.pd = std::move(s.ctx->alloc_pd().value);
    s.cq = std::move(s.ctx->create_cq(64).value);
    api::QpInitAttr init;
    init.send_cq = init.recv_cq = s.cq.get();
    init.cap = {16, 16, 1, 1, 0};
    s.qp = std::move(s.ctx->create_qp(*s.pd, init).value);
    s.buf = s.ctx->alloc_buffer(4096).value;
    s.mr = std::move(s.ctx->reg_mr(*s.pd, s.buf.data, 4096, access::local_write).value);
    return s.cm && s.qp && s.mr;
}

std::optional<api::CmEvent> event(Side& s, int ms = 5000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    api::CmEvent ev;
    while (std::chrono::steady_clock::now() < end) {
        if (s.cm->get_event(ev)) return ev;
        s.ctx->poll();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return std::nullopt;
}

bool to(Side& s, uint32_t id, QpState st) {
    QpAttr a;
    uint32_t mask = 0;
    return s.cm->init_qp_attr(id, st, a, mask) == 0 && s.qp->modify(a, mask).ok();
}

sockaddr_in sin4(const Gid& g, uint16_t port) {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    std::memcpy(&s.sin_addr, g.data() + 12, 4);
    s.sin_port = htons(port);
    return s;
}

}  // namespace

TEST_CASE("cm through hcaemud: connect, send, disconnect; ids and QPs are the client's", "[cm][daemon]") {
    test::Daemon d("cm");
    REQUIRE(d.ok());
    std::string err;
    Side a, b;
    REQUIRE(open(d, a, err));
    REQUIRE(open(d, b, err));
    const auto addr = sin4(a.ctx->gid(), kPort);

    uint32_t lid = 0, cid = 0;
    REQUIRE(b.cm->create_id(pkt::RdmaPs::tcp, QpType::rc, 0xB0B, lid) == 0);
    REQUIRE(b.cm->bind(lid, reinterpret_cast<const sockaddr*>(&addr)) == 0);
    REQUIRE(b.cm->listen(lid, 4) == 0);
    REQUIRE(a.cm->create_id(pkt::RdmaPs::tcp, QpType::rc, 0xA0A, cid) == 0);
    CHECK(a.cm->bind(cid, reinterpret_cast<const sockaddr*>(&addr)) == EADDRINUSE);
    uint32_t n = 0;
    CHECK(a.cm->destroy_id(lid, n) == EINVAL);  // B's id: not A's
    CHECK(a.cm->listen(lid, 1) == EINVAL);

    REQUIRE(a.cm->resolve_addr(cid, nullptr, reinterpret_cast<const sockaddr*>(&addr), 2000) == 0);
    auto ev = event(a);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::addr_resolved);
    CHECK(ev->context == 0xA0A);
    REQUIRE(a.cm->resolve_route(cid, 2000) == 0);
    REQUIRE(event(a)->type == CmEventType::route_resolved);
    REQUIRE(to(a, cid, QpState::init));

    api::CmConnParam p;
    p.qp_num = b.qp->qpn();  // B's QP: not A's to name
    CHECK(a.cm->connect(cid, p) == EINVAL);
    p.qp_num = a.qp->qpn();
    p.responder_resources = p.initiator_depth = 1;
    std::memcpy(p.private_data, "from a", 6);
    p.private_data_len = 6;
    REQUIRE(a.cm->connect(cid, p) == 0);

    ev = event(b);
    REQUIRE(ev);
    REQUIRE(ev->type == CmEventType::connect_request);
    CHECK(ev->listen_id == lid);
    CHECK(ev->context == 0xB0B);
    CHECK(ev->param.qp_num == a.qp->qpn());
    CHECK(std::memcmp(ev->param.private_data, "from a", 6) == 0);
    const uint32_t sid = ev->id;
    REQUIRE(to(b, sid, QpState::init));
    REQUIRE(to(b, sid, QpState::rtr));
    api::CmConnParam bp;
    bp.qp_num = b.qp->qpn();
    bp.responder_resources = bp.initiator_depth = 1;
    REQUIRE(b.cm->accept(sid, bp) == 0);

    ev = event(a);
    REQUIRE(ev);
    REQUIRE(ev->type == CmEventType::connect_response);
    CHECK(ev->param.qp_num == b.qp->qpn());
    REQUIRE(to(a, cid, QpState::init));
    REQUIRE(to(a, cid, QpState::rtr));
    REQUIRE(to(a, cid, QpState::rts));
    REQUIRE(a.cm->establish(cid) == 0);
    ev = event(b);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::established);
    REQUIRE(to(b, sid, QpState::rts));

    // A SEND over the connection the CM made.
    Sge rs{uint64_t(b.buf.data), 64, b.mr->lkey()};
    RecvWr rw;
    rw.wr_id = 1;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    const RecvWr* br = nullptr;
    REQUIRE(b.qp->post_recv(&rw, &br) == Status::ok);
    std::memcpy(a.buf.data, "over the cm", 11);
    Sge ss{uint64_t(a.buf.data), 11, a.mr->lkey()};
    SendWr sw;
    sw.wr_id = 2;
    sw.sg_list = &ss;
    sw.num_sge = 1;
    sw.send_flags = send_flag::signaled;
    const SendWr* bs = nullptr;
    REQUIRE(a.qp->post_send(&sw, &bs) == Status::ok);
    Wc wc{};
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int got = 0;
    while (!got && std::chrono::steady_clock::now() < end) got = b.cq->poll({&wc, 1});
    REQUIRE(got == 1);
    CHECK(wc.status == WcStatus::success);
    CHECK(wc.byte_len == 11);
    CHECK(std::memcmp(b.buf.data, "over the cm", 11) == 0);

    // B disconnects: A hears it, answers; both see disconnected.
    REQUIRE(b.cm->disconnect(sid) == 0);
    ev = event(a);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::disconnected);
    REQUIRE(a.cm->disconnect(cid) == 0);
    ev = event(b);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::disconnected);

    // The device's CM counters, through the daemon's read_stats.
    api::Stats st;
    REQUIRE(a.ctx->read_stats(st) == Status::ok);
    auto get = [&](const char* name) {
        for (auto& [k, v] : st.device)
            if (k == name) return v;
        return uint64_t(~0ull);
    };
    CHECK(get("cm_req_sent") == 1);
    CHECK(get("cm_req_rcvd") == 1);
    CHECK(get("cm_rep_sent") == 1);
    CHECK(get("cm_rtu_rcvd") == 1);
    CHECK(get("cm_dreq_sent") == 1);
    CHECK(get("cm_drep_rcvd") == 1);

    // B goes away with its listener: a new REQ to that port gets REJ 8.
    b = Side{};
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the daemon cleans up B
    uint32_t c2 = 0;
    REQUIRE(a.cm->create_id(pkt::RdmaPs::tcp, QpType::rc, 0, c2) == 0);
    REQUIRE(a.cm->resolve_addr(c2, nullptr, reinterpret_cast<const sockaddr*>(&addr), 2000) == 0);
    REQUIRE(event(a)->type == CmEventType::addr_resolved);
    REQUIRE(a.cm->resolve_route(c2, 2000) == 0);
    REQUIRE(event(a)->type == CmEventType::route_resolved);
    p.qp_num = a.qp->qpn();
    REQUIRE(a.cm->connect(c2, p) == 0);
    ev = event(a);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::rejected);
    CHECK(ev->status == 8);
    CHECK(a.cm->destroy_id(c2, n) == 0);
    CHECK(n == 3);
}
