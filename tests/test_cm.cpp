// The CM agent (tools/cm) on the in-memory wire: two HCAs in virtual time, each with QP1 and an
// agent, driven through api::Cm as librdmacm drives it. Every MAD on the wire is captured and
// checked field by field against what IBTA ch. 12 and Linux's cm.c/cma.c put there, with its TID,
// and each step's id state and counters. Every captured MAD must pass the dissector's strict check.
#include <catch2/catch.hpp>

#include <arpa/inet.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "dpdk_port/pcap_file.hpp"
#include "packet/mad_dissect.hpp"
#include "tools/cm/agent.hpp"
#include "tools/hcaemu/sim_pair.hpp"

using namespace hcaemu;
using api::CmEvent;
using api::CmEventType;
using cm::CmState;

namespace {

constexpr uint32_t kIp[2] = {0xC6120001, 0xC6120002};  // 198.18.0.1 (client), 198.18.0.2 (server)
constexpr uint16_t kPort = 7471;
constexpr uint64_t kGuid[2] = {0x000000fffe000001ULL, 0x000000fffe000002ULL};  // modified EUI-64 of the wire's MACs

struct Frame {
    int dir;
    uint64_t t;
    std::vector<uint8_t> bytes;
};

sockaddr_in sin4(uint32_t ip, uint16_t port) {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_addr.s_addr = htonl(ip);
    s.sin_port = htons(port);
    return s;
}
const sockaddr* sa(const sockaddr_in& s) { return reinterpret_cast<const sockaddr*>(&s); }

struct Bench {
    port::VirtualClock clock{1'000'000'000};
    port::MemWire wire;
    tools::SimConfig cfg;
    tools::SimPair::Side side[2];
    std::unique_ptr<cm::Agent> agent[2];
    std::vector<Frame> sent;  // every frame put on the wire, in order

    explicit Bench(QpType t = QpType::rc, bool v6 = false) : wire(port::WireConfig{}, clock) {
        cfg.type = t;
        if (v6)
            for (int i = 0; i < 2; ++i)
                cfg.ipv6[i] = Gid{0xfd, 0, 0, 0, 0, 0, 0, 0x18, 0, 0, 0, 0, 0, 0, 0, uint8_t(1 + i)};
        for (int i = 0; i < 2; ++i) {
            tools::SimPair::build_side(side[i], wire.end(i), clock, cfg, i, port::WireConfig{}.mac[1 - i]);
            cm::AgentConfig ac;
            ac.seed = 100 + uint64_t(i);
            agent[i] = std::make_unique<cm::Agent>(*side[i].hca, ac);
        }
        wire.set_tap([this](int dir, const uint8_t* f, uint32_t len, uint64_t t_ns, port::Event ev) {
            if (ev == port::Event::sent) sent.push_back({dir, t_ns, std::vector<uint8_t>(f, f + len)});
        });
    }
    // HCAEMU_CM_PCAP=FILE: every frame of the test case, for the tshark cross-check
    // (check_mad_decoders.py --cm-test runs one case so).
    ~Bench() {
        const char* path = std::getenv("HCAEMU_CM_PCAP");
        if (!path) return;
        port::PcapWriter w(path);
        for (const auto& f : sent) w.write(f.bytes, f.t);
    }
    api::Cm& cm(int i) { return *agent[i]; }

    // Polls both sides and jumps virtual time when idle, until `done` or `max_ns` pass.
    bool run(const std::function<bool()>& done, uint64_t max_ns = 200'000'000'000ull) {
        const uint64_t end = clock.now_ns() + max_ns;
        for (int n = 0; n < 1'000'000; ++n) {
            if (done()) return true;
            size_t moved = 0;
            for (int i = 0; i < 2; ++i) {
                moved += side[i].hca->poll();
                agent[i]->poll();
            }
            if (moved) continue;
            const uint64_t next = std::min({wire.next_delivery_ns(), side[0].hca->next_timer_ns(),
                                            side[1].hca->next_timer_ns(), agent[0]->next_deadline_ns(),
                                            agent[1]->next_deadline_ns()});
            if (next == UINT64_MAX || next > end) return done();
            clock.set(std::max(next, clock.now_ns() + 1));
        }
        return done();
    }
    void settle() { run([] { return false; }, 1'000'000); }  // 1 ms: frames in flight arrive

    // The next event of side i, running the wire until one comes.
    std::optional<CmEvent> event(int i, uint64_t max_ns = 200'000'000'000ull) {
        CmEvent ev;
        if (run([&] { return cm(i).get_event(ev); }, max_ns)) return ev;
        return std::nullopt;
    }

    // The CM MADs sent in direction `dir` (0: client -> server), parsed.
    std::vector<pkt::CmMad> mads(int dir, uint16_t attr = 0) const {
        std::vector<pkt::CmMad> v;
        for (const auto& f : sent) {
            if (f.dir != dir) continue;
            pkt::Packet p;
            if (pkt::parse(f.bytes, p) != pkt::ParseError::ok || p.h.bth.dest_qp != 1) continue;
            pkt::CmMad m;
            if (pkt::parse_cm(p.payload(), m) != pkt::MadError::ok) continue;
            if (!attr || m.hdr.attr_id == attr) v.push_back(m);
        }
        return v;
    }
    uint64_t counter(int i, Counter c) const { return side[i].dev->counters().get(c); }

    // Injects a raw frame at end `from` (as if that side had sent it).
    void inject(int from, std::span<const uint8_t> bytes) {
        port::Frame f;
        REQUIRE(wire.end(from).alloc(f));
        std::memcpy(f.data, bytes.data(), bytes.size());
        f.len = uint32_t(bytes.size());
        REQUIRE(wire.end(from).tx_burst(&f, 1) == 1);
    }
    // A MAD from side `from`'s QP1 to the other's, with our GSI headers around it.
    void inject_mad(int from, std::span<const uint8_t, pkt::kMadLen> mad, uint32_t qkey = pkt::kGsiQkey) {
        pkt::Headers h;
        h.eth.src = port::WireConfig{}.mac[from];
        h.eth.dst = port::WireConfig{}.mac[1 - from];
        h.eth.ethertype = pkt::kEthTypeIpv4;
        h.ip4.src = kIp[from];
        h.ip4.dst = kIp[1 - from];
        h.bth.pkey = 0xFFFF;
        std::array<uint8_t, 512> out;
        size_t len = 0;
        REQUIRE(pkt::build_gsi_frame(h, 1, mad, out, len) == pkt::BuildError::ok);
        if (qkey != pkt::kGsiQkey) {  // DETH Q_Key rewritten, ICRC rebuilt by building again
            h.bth.opcode = pkt::op::ud | pkt::op::send_only;
            h.bth.dest_qp = 1;
            h.deth.qkey = qkey;
            h.deth.src_qp = 1;
            REQUIRE(pkt::build(h, mad, out, len) == pkt::BuildError::ok);
        }
        inject(from, std::span<const uint8_t>(out.data(), len));
    }

    // Every MAD sent passes the strict check of `hcaemu dissect --strict` (check_gmp).
    void all_strict() const {
        size_t n = 0;
        for (const auto& f : sent) {
            pkt::Packet p;
            const auto e = pkt::parse(f.bytes, p);
            if (!pkt::is_gsi_frame(p, e)) continue;
            ++n;
            const auto c = pkt::check_gmp(p);
            INFO("frame at " << f.t << " error " << pkt::name(c.error));
            CHECK(c.ok());
        }
        CHECK(n > 0);
    }
};

// Where two MADs differ: the header and attribute field names of the first differing bytes.
std::string diff(const pkt::CmMad& a, const pkt::CmMad& b) {
    std::array<uint8_t, pkt::kMadLen> x, y;
    pkt::build_cm(a, x);
    pkt::build_cm(b, y);
    std::string s;
    for (size_t i = 0; i < x.size(); ++i)
        if (x[i] != y[i]) s += " @" + std::to_string(i) + ":" + std::to_string(x[i]) + "/" + std::to_string(y[i]);
    return s.empty() ? "same bytes" : s;
}
#define CHECK_MAD(a, ...)           \
    do {                            \
        CHECK(diff((a), (__VA_ARGS__)) == "same bytes"); \
    } while (0)

api::CmConnParam conn(uint32_t qpn, const char* pd, uint8_t rr = 4, uint8_t id = 2) {
    api::CmConnParam p;
    p.qp_num = qpn;
    p.responder_resources = rr;
    p.initiator_depth = id;
    p.retry_count = 6;
    p.rnr_retry_count = 5;
    p.private_data_len = uint8_t(std::strlen(pd));
    std::memcpy(p.private_data, pd, p.private_data_len);
    return p;
}

bool modify(Qp& qp, api::Cm& cm, uint32_t id, QpState s) {
    QpAttr a;
    uint32_t mask = 0;
    if (cm.init_qp_attr(id, s, a, mask) != 0) return false;
    return qp.modify(a, mask).ok();
}

// Server listening on 198.18.0.2:7471 and client resolved to it. Returns {client id, listen id}.
std::pair<uint32_t, uint32_t> prepare(Bench& b, pkt::RdmaPs ps = pkt::RdmaPs::tcp, QpType t = QpType::rc) {
    uint32_t lid = 0, cid = 0;
    REQUIRE(b.cm(1).create_id(ps, t, 0xAAAA, lid) == 0);
    const auto any = sin4(0, kPort);
    REQUIRE(b.cm(1).bind(lid, sa(any)) == 0);
    REQUIRE(b.cm(1).listen(lid, 8) == 0);
    REQUIRE(b.cm(0).create_id(ps, t, 0xCCCC, cid) == 0);
    const auto dst = sin4(kIp[1], kPort);
    REQUIRE(b.cm(0).resolve_addr(cid, nullptr, sa(dst), 2000) == 0);
    auto ev = b.event(0);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::addr_resolved);
    CHECK(ev->id == cid);
    CHECK(ev->context == 0xCCCC);
    REQUIRE(b.cm(0).resolve_route(cid, 2000) == 0);
    ev = b.event(0);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::route_resolved);
    CHECK(b.agent[0]->state(cid) == CmState::route_resolved);
    return {cid, lid};
}

// The REQ the client's agent must have sent for `conn(qpn, "hello")`, every field as cm.c/cma.c set it.
pkt::CmMad expected_req(Bench& b, uint32_t cid, uint32_t qpn, uint32_t psn, uint16_t sport) {
    pkt::CmReq r;
    r.local_comm_id = b.agent[0]->local_comm_id(cid);
    r.service_id = 0x0000000001060000ULL | kPort;  // RDMA_PS_TCP << 16 | port
    r.local_ca_guid = kGuid[0];
    r.local_qpn = qpn;
    r.responder_resources = 4;
    r.initiator_depth = 2;
    r.remote_cm_response_timeout = 20;
    r.starting_psn = psn;
    r.local_cm_response_timeout = 20;
    r.retry_count = 6;
    r.pkey = 0xFFFF;
    r.path_mtu = 3;  // 1024: the wire's 1500-byte MTU
    r.rnr_retry_count = 5;
    r.max_cm_retries = 15;
    r.primary.local_lid = r.primary.remote_lid = 0xFFFF;
    r.primary.local_gid = pkt::ipv4_mapped_gid(kIp[0]);
    r.primary.remote_gid = pkt::ipv4_mapped_gid(kIp[1]);
    r.primary.packet_rate = 3;
    r.primary.hop_limit = 64;
    r.primary.local_ack_timeout = 17;  // cm.c cm_ack_timeout(ca_ack_delay 15, packet lifetime 16)
    std::array<uint8_t, pkt::kCmaHdrLen> ch;
    pkt::build_cma_hdr(pkt::cma_hdr_ipv4(kIp[0], sport, kIp[1]), ch);
    std::memcpy(r.private_data.data(), ch.data(), ch.size());
    std::memcpy(r.private_data.data() + 36, "hello", 5);
    pkt::MadHdr h;
    h.tid = uint64_t(1) << 32 | r.local_comm_id;
    return {h, r};
}

struct Conn {
    uint32_t cid = 0, lid = 0, sid = 0;
};

// Connects client QP to server QP through the CM, checking each MAD and state on the way.
Conn establish(Bench& b) {
    Conn c;
    std::tie(c.cid, c.lid) = prepare(b);
    Qp& cq = b.side[0].qp;
    Qp& sq = b.side[1].qp;
    REQUIRE(modify(cq, b.cm(0), c.cid, QpState::init));
    REQUIRE(b.cm(0).connect(c.cid, conn(cq.qpn(), "hello")) == 0);
    CHECK(b.agent[0]->state(c.cid) == CmState::req_sent);
    auto ev = b.event(1);
    REQUIRE(ev);
    REQUIRE(ev->type == CmEventType::connect_request);
    c.sid = ev->id;
    CHECK(ev->listen_id == c.lid);
    CHECK(ev->context == 0xAAAA);
    CHECK(ev->param.qp_num == cq.qpn());
    CHECK(ev->param.private_data_len == 56);  // 92 - the CMA header
    CHECK(std::memcmp(ev->param.private_data, "hello\0", 6) == 0);
    CHECK(ev->param.responder_resources == 2);  // the REQ's initiator depth, from the server's side
    CHECK(ev->param.initiator_depth == 4);
    CHECK(b.agent[1]->state(c.sid) == CmState::req_rcvd);
    api::CmIdInfo info;
    REQUIRE(b.cm(1).query(c.sid, info) == 0);
    const auto* dst = reinterpret_cast<const sockaddr_in*>(&info.dst);
    const auto* src = reinterpret_cast<const sockaddr_in*>(&info.src);
    CHECK(ntohl(dst->sin_addr.s_addr) == kIp[0]);
    CHECK(ntohl(src->sin_addr.s_addr) == kIp[1]);
    CHECK(ntohs(src->sin_port) == kPort);

    // The server's QP from init_qp_attr: INIT with remote access, RTR to the client's QP and PSN.
    QpAttr a;
    uint32_t mask = 0;
    REQUIRE(b.cm(1).init_qp_attr(c.sid, QpState::init, a, mask) == 0);
    CHECK(mask == (qp_attr::state | qp_attr::access_flags | qp_attr::pkey_index | qp_attr::port));
    CHECK(a.qp_access_flags == (access::remote_write | access::remote_read | access::remote_atomic));
    REQUIRE(sq.modify(a, mask).ok());
    REQUIRE(b.cm(1).init_qp_attr(c.sid, QpState::rtr, a, mask) == 0);
    CHECK(mask == (qp_attr::state | qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn |
                   qp_attr::max_dest_rd_atomic | qp_attr::min_rnr_timer));
    CHECK(a.dest_qp_num == cq.qpn());
    CHECK(a.ah_attr.dgid == pkt::ipv4_mapped_gid(kIp[0]));
    CHECK(a.ah_attr.sgid_index == 1);
    CHECK(a.path_mtu == Mtu::mtu1024);
    const uint32_t client_psn = a.rq_psn;
    REQUIRE(sq.modify(a, mask).ok());
    // librdmacm's rdma_accept moves the QP to RTS before the accept that sends the REP: the
    // starting PSN exists from the REQ on, and the REP carries that one.
    QpAttr rts;
    REQUIRE(b.cm(1).init_qp_attr(c.sid, QpState::rts, rts, mask) == 0);
    const uint32_t server_rts_psn = rts.sq_psn;

    // The REQ, byte for byte. Its Starting PSN is the one the client expects to receive, the
    // server's send PSN (as Linux's cm.c: tests/data/cm_rxe).
    const auto reqs = b.mads(0, pkt::cm_attr::req);
    REQUIRE(reqs.size() == 1);
    api::CmIdInfo ci;
    REQUIRE(b.cm(0).query(c.cid, ci) == 0);
    const uint16_t sport = ntohs(reinterpret_cast<const sockaddr_in*>(&ci.src)->sin_port);
    CHECK(sport >= 32768);
    CHECK(sport <= 60999);
    CHECK_MAD(reqs[0], expected_req(b, c.cid, cq.qpn(), server_rts_psn, sport));

    REQUIRE(b.cm(1).accept(c.sid, conn(sq.qpn(), "world", 3, 1)) == 0);
    CHECK(b.agent[1]->state(c.sid) == CmState::rep_sent);
    ev = b.event(0);
    REQUIRE(ev);
    REQUIRE(ev->type == CmEventType::connect_response);
    CHECK(ev->id == c.cid);
    CHECK(ev->param.qp_num == sq.qpn());
    CHECK(ev->param.private_data_len == 196);
    CHECK(std::memcmp(ev->param.private_data, "world\0", 6) == 0);
    CHECK(b.agent[0]->state(c.cid) == CmState::rep_rcvd);

    REQUIRE(modify(cq, b.cm(0), c.cid, QpState::init));
    REQUIRE(b.cm(0).init_qp_attr(c.cid, QpState::rtr, a, mask) == 0);
    CHECK(a.dest_qp_num == sq.qpn());
    CHECK(a.max_dest_rd_atomic == 1);  // min(ours 4, the REP's initiator depth 1)
    const uint32_t server_psn = a.rq_psn;
    CHECK(server_psn == server_rts_psn);
    REQUIRE(cq.modify(a, mask).ok());
    REQUIRE(b.cm(0).init_qp_attr(c.cid, QpState::rts, a, mask) == 0);
    CHECK(mask == (qp_attr::state | qp_attr::sq_psn | qp_attr::timeout | qp_attr::retry_cnt | qp_attr::rnr_retry |
                   qp_attr::max_qp_rd_atomic));
    CHECK(a.sq_psn == client_psn);
    CHECK(a.timeout == 17);
    CHECK(a.retry_cnt == 6);
    CHECK(a.rnr_retry == 5);
    CHECK(a.max_rd_atomic == 2);  // min(ours 2, the REP's responder resources 3)
    REQUIRE(cq.modify(a, mask).ok());

    // The REP, byte for byte: the REQ's TID, comm IDs both ways.
    const auto reps = b.mads(1, pkt::cm_attr::rep);
    REQUIRE(reps.size() == 1);
    pkt::CmRep er;
    er.local_comm_id = b.agent[1]->local_comm_id(c.sid);
    er.remote_comm_id = b.agent[0]->local_comm_id(c.cid);
    er.local_qpn = sq.qpn();
    er.starting_psn = client_psn;  // the PSN the server expects: the client's send PSN
    er.responder_resources = 3;
    er.initiator_depth = 1;
    er.target_ack_delay = 15;
    er.rnr_retry_count = 5;
    er.local_ca_guid = kGuid[1];
    std::memcpy(er.private_data.data(), "world", 5);
    CHECK_MAD(reps[0], pkt::CmMad{reqs[0].hdr, er});

    REQUIRE(b.cm(0).establish(c.cid) == 0);
    CHECK(b.agent[0]->state(c.cid) == CmState::established);
    ev = b.event(1);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::established);
    CHECK(ev->id == c.sid);
    CHECK(b.agent[1]->state(c.sid) == CmState::established);
    const auto rtus = b.mads(0, pkt::cm_attr::rtu);
    REQUIRE(rtus.size() == 1);
    pkt::CmRtu eu;
    eu.local_comm_id = er.remote_comm_id;
    eu.remote_comm_id = er.local_comm_id;
    CHECK_MAD(rtus[0], pkt::CmMad{reqs[0].hdr, eu});

    REQUIRE(b.cm(1).init_qp_attr(c.sid, QpState::rts, a, mask) == 0);
    CHECK(a.sq_psn == server_psn);
    CHECK(a.max_rd_atomic == 1);
    REQUIRE(sq.modify(a, mask).ok());
    return c;
}

// One SEND from the client's QP to the server's: the connection the CM made carries data.
void send_one(Bench& b) {
    auto& s = b.side[1];
    auto& c = b.side[0];
    Sge rs{uint64_t(s.mem.data()), 64, s.mr.lkey()};
    RecvWr rw;
    rw.wr_id = 7;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    const RecvWr* bad_r = nullptr;
    REQUIRE(s.qp.post_recv(&rw, &bad_r) == Status::ok);
    std::memcpy(c.mem.data(), "payload over the CM's QP", 24);
    Sge ss{uint64_t(c.mem.data()), 24, c.mr.lkey()};
    SendWr sw;
    sw.wr_id = 8;
    sw.sg_list = &ss;
    sw.num_sge = 1;
    sw.send_flags = send_flag::signaled;
    const SendWr* bad = nullptr;
    REQUIRE(c.qp.post_send(&sw, &bad) == Status::ok);
    Wc wc[2];
    int got = 0;
    REQUIRE(b.run([&] { return (got += s.cq.poll({wc, 1})) > 0; }));
    CHECK(wc[0].status == WcStatus::success);
    CHECK(wc[0].byte_len == 24);
    CHECK(std::memcmp(s.mem.data(), "payload over the CM's QP", 24) == 0);
}

}  // namespace

TEST_CASE("cm: connect, accept, establish; data flows; the client disconnects", "[cm][exchange]") {
    Bench b;
    const Conn c = establish(b);
    send_one(b);

    REQUIRE(b.cm(0).disconnect(c.cid) == 0);
    CHECK(b.agent[0]->state(c.cid) == CmState::dreq_sent);
    auto ev = b.event(1);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::disconnected);
    CHECK(ev->status == 0);
    CHECK(b.agent[1]->state(c.sid) == CmState::dreq_rcvd);
    REQUIRE(b.cm(1).disconnect(c.sid) == 0);  // the DREP
    CHECK(b.agent[1]->state(c.sid) == CmState::timewait);
    ev = b.event(0);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::disconnected);
    CHECK(b.agent[0]->state(c.cid) == CmState::timewait);

    const auto dreqs = b.mads(0, pkt::cm_attr::dreq);
    REQUIRE(dreqs.size() == 1);
    pkt::CmDreq ed;
    ed.local_comm_id = b.agent[0]->local_comm_id(c.cid);
    ed.remote_comm_id = b.agent[1]->local_comm_id(c.sid);
    ed.remote_qpn = b.side[1].qp.qpn();
    pkt::MadHdr dh;
    dh.tid = uint64_t(1) << 32 | ed.local_comm_id;
    CHECK_MAD(dreqs[0], pkt::CmMad{dh, ed});
    const auto dreps = b.mads(1, pkt::cm_attr::drep);
    REQUIRE(dreps.size() == 1);
    pkt::CmDrep ep;
    ep.local_comm_id = ed.remote_comm_id;
    ep.remote_comm_id = ed.local_comm_id;
    CHECK_MAD(dreps[0], pkt::CmMad{dh, ep});

    // TimeWait ends on both sides.
    ev = b.event(0);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::timewait_exit);
    ev = b.event(1);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::timewait_exit);
    CHECK(b.agent[0]->state(c.cid) == CmState::idle);

    for (int i = 0; i < 2; ++i) {
        const int o = 1 - i;
        CHECK(b.counter(i, Counter::cm_req_sent) == (i == 0 ? 1 : 0));
        CHECK(b.counter(o, Counter::cm_req_rcvd) == (i == 0 ? 1 : 0));
    }
    CHECK(b.counter(1, Counter::cm_rep_sent) == 1);
    CHECK(b.counter(0, Counter::cm_rep_rcvd) == 1);
    CHECK(b.counter(0, Counter::cm_rtu_sent) == 1);
    CHECK(b.counter(1, Counter::cm_rtu_rcvd) == 1);
    CHECK(b.counter(0, Counter::cm_dreq_sent) == 1);
    CHECK(b.counter(1, Counter::cm_dreq_rcvd) == 1);
    CHECK(b.counter(1, Counter::cm_drep_sent) == 1);
    CHECK(b.counter(0, Counter::cm_drep_rcvd) == 1);
    CHECK(b.counter(0, Counter::cm_retries) == 0);
    CHECK(b.counter(1, Counter::gsi_rcvd_mads) == 3);  // REQ, RTU, DREQ
    CHECK(b.counter(0, Counter::gsi_rcvd_mads) == 2);  // REP, DREP
    CHECK(b.counter(0, Counter::gsi_sent_mads) == 3);
    b.all_strict();
    uint32_t n = 0;
    CHECK(b.cm(0).destroy_id(c.cid, n) == 0);
    CHECK(n == 5);  // addr_resolved, route_resolved, connect_response, disconnected, timewait_exit
}

TEST_CASE("cm: the server disconnects; the client answers DREP", "[cm]") {
    Bench b;
    const Conn c = establish(b);
    REQUIRE(b.cm(1).disconnect(c.sid) == 0);
    auto ev = b.event(0);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::disconnected);
    CHECK(b.agent[0]->state(c.cid) == CmState::dreq_rcvd);
    REQUIRE(b.cm(0).disconnect(c.cid) == 0);
    ev = b.event(1);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::disconnected);
    CHECK(b.agent[1]->state(c.sid) == CmState::timewait);
    CHECK(b.counter(1, Counter::cm_dreq_sent) == 1);
    CHECK(b.counter(0, Counter::cm_drep_sent) == 1);
    b.all_strict();
}

TEST_CASE("cm: REQ to a port nobody listens on: REJ reason 8 (invalid service ID)", "[cm]") {
    Bench b;
    uint32_t cid = 0;
    REQUIRE(b.cm(0).create_id(pkt::RdmaPs::tcp, QpType::rc, 1, cid) == 0);
    const auto dst = sin4(kIp[1], 9999);
    REQUIRE(b.cm(0).resolve_addr(cid, nullptr, sa(dst), 2000) == 0);
    REQUIRE(b.event(0)->type == CmEventType::addr_resolved);
    REQUIRE(b.cm(0).resolve_route(cid, 2000) == 0);
    REQUIRE(b.event(0)->type == CmEventType::route_resolved);
    REQUIRE(b.cm(0).connect(cid, conn(b.side[0].qp.qpn(), "x")) == 0);
    auto ev = b.event(0);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::rejected);
    CHECK(ev->status == 8);
    CHECK(ev->param.private_data_len == 148);
    CHECK(b.agent[0]->state(cid) == CmState::idle);
    const auto rejs = b.mads(1, pkt::cm_attr::rej);
    REQUIRE(rejs.size() == 1);
    pkt::CmRej er;
    er.local_comm_id = 0;  // cm.c: a REJ to a REQ without a connection of ours
    er.remote_comm_id = b.agent[0]->local_comm_id(cid);
    er.message_rejected = 0;
    er.reason = pkt::rej_reason::invalid_service_id;
    pkt::MadHdr h;
    h.tid = uint64_t(1) << 32 | er.remote_comm_id;
    CHECK_MAD(rejs[0], pkt::CmMad{h, er});
    CHECK(b.counter(1, Counter::cm_rej_sent) == 1);
    CHECK(b.counter(0, Counter::cm_rej_rcvd) == 1);
    CHECK(b.agent[1]->ids() == 0);
    b.all_strict();
}

TEST_CASE("cm: the consumer rejects with private data: REJ 28", "[cm]") {
    Bench b;
    auto [cid, lid] = prepare(b);
    REQUIRE(b.cm(0).connect(cid, conn(b.side[0].qp.qpn(), "hello")) == 0);
    auto ev = b.event(1);
    REQUIRE(ev);
    REQUIRE(ev->type == CmEventType::connect_request);
    const uint32_t sid = ev->id;
    const uint8_t why[4] = {'n', 'o', 'p', 'e'};
    REQUIRE(b.cm(1).reject(sid, why, 4) == 0);
    CHECK(b.agent[1]->state(sid) == CmState::idle);
    ev = b.event(0);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::rejected);
    CHECK(ev->status == 28);
    CHECK(std::memcmp(ev->param.private_data, "nope\0", 5) == 0);
    const auto rejs = b.mads(1, pkt::cm_attr::rej);
    REQUIRE(rejs.size() == 1);
    pkt::CmRej er;
    er.local_comm_id = b.agent[1]->local_comm_id(sid);
    er.remote_comm_id = b.agent[0]->local_comm_id(cid);
    er.reason = pkt::rej_reason::consumer_defined;
    std::memcpy(er.private_data.data(), why, 4);
    pkt::MadHdr h;
    h.tid = uint64_t(1) << 32 | er.remote_comm_id;
    CHECK_MAD(rejs[0], pkt::CmMad{h, er});
    CHECK(b.cm(1).reject(sid, why, 4) == EINVAL);  // already rejected
    (void)lid;
    b.all_strict();
}

TEST_CASE("cm: REQ lost: retried every (2 x packet lifetime + CM response timeout), max CM retries times, then unreachable -ETIMEDOUT", "[cm]") {
    Bench b;
    auto [cid, lid] = prepare(b);
    b.wire.set_filter(0, [](const uint8_t*, uint32_t, uint64_t) { return port::Action::drop; });
    b.sent.clear();
    REQUIRE(b.cm(0).connect(cid, conn(b.side[0].qp.qpn(), "hello")) == 0);
    auto ev = b.event(0, 400'000'000'000ull);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::unreachable);
    CHECK(ev->status == -ETIMEDOUT);
    CHECK(b.agent[0]->state(cid) == CmState::idle);
    const uint64_t period = 2 * pkt::cm_timeout_ns(16) + pkt::cm_timeout_ns(20);
    std::vector<uint64_t> at;
    for (const auto& f : b.sent)
        if (f.dir == 0) at.push_back(f.t);
    REQUIRE(at.size() == 16);  // the REQ and its 15 retries
    for (size_t i = 1; i < at.size(); ++i) CHECK(at[i] - at[i - 1] == period);
    const auto reqs = b.mads(0, pkt::cm_attr::req);
    for (const auto& r : reqs) CHECK(r == reqs[0]);  // the same REQ, the same TID
    CHECK(b.counter(0, Counter::cm_req_sent) == 16);
    CHECK(b.counter(0, Counter::cm_retries) == 15);
    CHECK(b.counter(0, Counter::cm_timeouts) == 1);
    CHECK(b.counter(1, Counter::cm_req_rcvd) == 0);
    (void)lid;
}

TEST_CASE("cm: duplicate REQ: MRA while the consumer decides, the REP again once sent", "[cm]") {
    Bench b;
    auto [cid, lid] = prepare(b);
    b.sent.clear();
    REQUIRE(b.cm(0).connect(cid, conn(b.side[0].qp.qpn(), "hello")) == 0);
    auto ev = b.event(1);
    REQUIRE(ev);
    REQUIRE(ev->type == CmEventType::connect_request);
    const uint32_t sid = ev->id;
    REQUIRE(b.sent.size() == 1);
    const auto req_frame = b.sent[0].bytes;

    b.inject(0, req_frame);  // the same REQ again
    b.settle();
    CHECK(b.counter(1, Counter::cm_duplicates) == 1);
    CHECK(b.agent[1]->state(sid) == CmState::mra_req_sent);
    CHECK(b.agent[1]->ids() == 2);  // no second connection
    const auto mras = b.mads(1, pkt::cm_attr::mra);
    REQUIRE(mras.size() == 1);
    pkt::CmMra em;
    em.local_comm_id = b.agent[1]->local_comm_id(sid);
    em.remote_comm_id = b.agent[0]->local_comm_id(cid);
    em.message_mraed = 0;
    em.service_timeout = 20;
    pkt::MadHdr h;
    h.tid = uint64_t(1) << 32 | em.remote_comm_id;
    CHECK_MAD(mras[0], pkt::CmMad{h, em});
    CHECK(b.agent[0]->state(cid) == CmState::mra_req_rcvd);
    CHECK(b.counter(0, Counter::cm_mra_rcvd) == 1);
    CHECK(b.cm(1).get_event(*ev) == false);  // one connect_request only

    REQUIRE(b.cm(1).accept(sid, conn(b.side[1].qp.qpn(), "")) == 0);
    ev = b.event(0);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::connect_response);
    b.inject(0, req_frame);  // and again, now that the REP is out: the REP again
    b.settle();
    CHECK(b.counter(1, Counter::cm_duplicates) == 2);
    const auto reps = b.mads(1, pkt::cm_attr::rep);
    REQUIRE(reps.size() == 2);
    CHECK(reps[1] == reps[0]);
    CHECK(b.counter(0, Counter::cm_duplicates) == 1);  // the client took the second REP as a duplicate
    CHECK(b.agent[0]->state(cid) == CmState::rep_rcvd);
    (void)lid;
    b.all_strict();
}

TEST_CASE("cm: duplicate DREQ in TimeWait: DREP again", "[cm]") {
    Bench b;
    const Conn c = establish(b);
    REQUIRE(b.cm(0).disconnect(c.cid) == 0);
    REQUIRE(b.event(1)->type == CmEventType::disconnected);
    REQUIRE(b.cm(1).disconnect(c.sid) == 0);
    REQUIRE(b.event(0)->type == CmEventType::disconnected);
    std::vector<uint8_t> dreq;
    for (const auto& f : b.sent) {
        pkt::Packet p;
        if (f.dir == 0 && pkt::parse(f.bytes, p) == pkt::ParseError::ok && p.payload_len == 256 &&
            (p.payload()[16] << 8 | p.payload()[17]) == pkt::cm_attr::dreq)
            dreq = f.bytes;
    }
    REQUIRE(!dreq.empty());
    CHECK(b.agent[1]->state(c.sid) == CmState::timewait);
    b.inject(0, dreq);
    b.settle();
    CHECK(b.counter(1, Counter::cm_duplicates) == 1);
    const auto dreps = b.mads(1, pkt::cm_attr::drep);
    REQUIRE(dreps.size() == 2);
    CHECK(dreps[1] == dreps[0]);
    CHECK(b.counter(1, Counter::cm_drep_sent) == 2);
    // The client in TimeWait drops the extra DREP: a duplicate, not a wrong state.
    CHECK(b.counter(0, Counter::cm_rx_wrong_state) == 0);
    CHECK(b.counter(0, Counter::cm_duplicates) == 1);
    b.all_strict();
}

TEST_CASE("cm: both sides disconnect at once: each DREPs the other's DREQ, the DREPs are duplicates", "[cm]") {
    Bench b;
    const Conn c = establish(b);
    REQUIRE(b.cm(0).disconnect(c.cid) == 0);  // both DREQs leave before either arrives
    REQUIRE(b.cm(1).disconnect(c.sid) == 0);
    const auto e0 = b.event(0), e1 = b.event(1);
    REQUIRE(e0);
    REQUIRE(e1);
    CHECK(e0->type == CmEventType::disconnected);
    CHECK(e0->status == 0);
    CHECK(e1->type == CmEventType::disconnected);
    CHECK(e1->status == 0);
    b.settle();
    for (int i = 0; i < 2; ++i) {
        CHECK(b.mads(i, pkt::cm_attr::dreq).size() == 1);
        CHECK(b.mads(i, pkt::cm_attr::drep).size() == 1);
        CHECK(b.counter(i, Counter::cm_rx_wrong_state) == 0);
        CHECK(b.counter(i, Counter::cm_duplicates) == 1);  // the peer's DREP, in TimeWait
    }
    CHECK(b.agent[0]->state(c.cid) == CmState::timewait);
    CHECK(b.agent[1]->state(c.sid) == CmState::timewait);
    CHECK(!b.event(0, 1'000'000));  // one DISCONNECTED each
    b.all_strict();
}

TEST_CASE("cm: a REQ from a QP still connected: REJ stale connection", "[cm]") {
    Bench b;
    const Conn c = establish(b);
    // The client's REQ again with a new Local Comm ID: the same remote QP asks again.
    auto reqs = b.mads(0, pkt::cm_attr::req);
    REQUIRE(reqs.size() == 1);
    auto& r = std::get<pkt::CmReq>(reqs[0].msg);
    r.local_comm_id ^= 0x5A5A;
    reqs[0].hdr.tid ^= 0x5A5A;
    std::array<uint8_t, pkt::kMadLen> m;
    pkt::build_cm(reqs[0], m);
    b.inject_mad(0, m);
    b.settle();
    CHECK(b.counter(1, Counter::cm_stale_conn) == 1);
    const auto rejs = b.mads(1, pkt::cm_attr::rej);
    REQUIRE(rejs.size() == 1);
    const auto& rej = std::get<pkt::CmRej>(rejs[0].msg);
    CHECK(rej.reason == pkt::rej_reason::stale_conn);
    CHECK(rej.remote_comm_id == r.local_comm_id);
    CHECK(rejs[0].hdr.tid == reqs[0].hdr.tid);
    // IBTA 12.4.2: the old connection is left too (DREQ), the consumer told.
    auto ev = b.event(1);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::disconnected);
    CHECK(ev->id == c.sid);
    CHECK(b.agent[1]->state(c.sid) == CmState::dreq_sent);
}

TEST_CASE("cm: SIDR resolves a UD service: the peer's QPN and Q_Key", "[cm]") {
    Bench b(QpType::ud);
    auto [cid, lid] = prepare(b, pkt::RdmaPs::udp, QpType::ud);
    QpAttr a;
    uint32_t mask = 0;
    REQUIRE(b.cm(0).init_qp_attr(cid, QpState::init, a, mask) == 0);
    CHECK(mask == (qp_attr::state | qp_attr::pkey_index | qp_attr::port | qp_attr::qkey));
    CHECK(a.qkey == 0x01234567);
    REQUIRE(b.cm(0).connect(cid, conn(b.side[0].qp.qpn(), "sidr?")) == 0);
    CHECK(b.agent[0]->state(cid) == CmState::sidr_req_sent);
    auto ev = b.event(1);
    REQUIRE(ev);
    REQUIRE(ev->type == CmEventType::connect_request);
    CHECK(ev->listen_id == lid);
    CHECK(ev->param.ah.dgid == pkt::ipv4_mapped_gid(kIp[0]));
    CHECK(ev->param.private_data_len == 216 - 36);
    CHECK(std::memcmp(ev->param.private_data, "sidr?", 5) == 0);
    const uint32_t sid = ev->id;
    REQUIRE(b.cm(1).accept(sid, conn(b.side[1].qp.qpn(), "ok")) == 0);
    ev = b.event(0);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::established);
    CHECK(ev->param.qp_num == b.side[1].qp.qpn());
    CHECK(ev->param.qkey == 0x01234567);
    CHECK(ev->param.ah.dgid == pkt::ipv4_mapped_gid(kIp[1]));
    CHECK(std::memcmp(ev->param.private_data, "ok\0", 3) == 0);

    const auto sreq = b.mads(0, pkt::cm_attr::sidr_req);
    REQUIRE(sreq.size() == 1);
    pkt::CmSidrReq er;
    er.request_id = b.agent[0]->local_comm_id(cid);
    er.pkey = 0xFFFF;
    er.service_id = 0x0000000001110000ULL | kPort;  // RDMA_PS_UDP
    api::CmIdInfo ci;
    REQUIRE(b.cm(0).query(cid, ci) == 0);
    std::array<uint8_t, pkt::kCmaHdrLen> ch;
    pkt::build_cma_hdr(pkt::cma_hdr_ipv4(kIp[0], ntohs(reinterpret_cast<const sockaddr_in*>(&ci.src)->sin_port), kIp[1]), ch);
    std::memcpy(er.private_data.data(), ch.data(), ch.size());
    std::memcpy(er.private_data.data() + 36, "sidr?", 5);
    pkt::MadHdr h;
    h.tid = uint64_t(1) << 32 | er.request_id;
    CHECK_MAD(sreq[0], pkt::CmMad{h, er});
    const auto srep = b.mads(1, pkt::cm_attr::sidr_rep);
    REQUIRE(srep.size() == 1);
    pkt::CmSidrRep ep;
    ep.request_id = er.request_id;
    ep.qpn = b.side[1].qp.qpn();
    ep.service_id = er.service_id;
    ep.qkey = 0x01234567;
    std::memcpy(ep.private_data.data(), "ok", 2);
    CHECK_MAD(srep[0], pkt::CmMad{h, ep});
    CHECK(b.counter(0, Counter::cm_sidr_req_sent) == 1);
    CHECK(b.counter(1, Counter::cm_sidr_rep_sent) == 1);
    b.all_strict();
}

TEST_CASE("cm: SIDR to a port nobody listens on: status unsupported, unreachable", "[cm]") {
    Bench b(QpType::ud);
    uint32_t cid = 0;
    REQUIRE(b.cm(0).create_id(pkt::RdmaPs::udp, QpType::ud, 1, cid) == 0);
    const auto dst = sin4(kIp[1], 4242);
    REQUIRE(b.cm(0).resolve_addr(cid, nullptr, sa(dst), 100) == 0);
    REQUIRE(b.event(0)->type == CmEventType::addr_resolved);
    REQUIRE(b.cm(0).resolve_route(cid, 100) == 0);
    REQUIRE(b.event(0)->type == CmEventType::route_resolved);
    REQUIRE(b.cm(0).connect(cid, conn(b.side[0].qp.qpn(), "")) == 0);
    auto ev = b.event(0);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::unreachable);
    CHECK(ev->status == int32_t(pkt::CmSidrStatus::unsupported));
}

TEST_CASE("cm: bind, ephemeral ports, listen on the wildcard address", "[cm]") {
    Bench b;
    api::Cm& cm = b.cm(1);
    uint32_t a = 0, c = 0, d = 0, e = 0;
    REQUIRE(cm.create_id(pkt::RdmaPs::tcp, QpType::rc, 0, a) == 0);
    REQUIRE(cm.create_id(pkt::RdmaPs::tcp, QpType::rc, 0, c) == 0);
    REQUIRE(cm.create_id(pkt::RdmaPs::udp, QpType::ud, 0, d) == 0);
    CHECK(cm.create_id(pkt::RdmaPs::tcp, QpType::ud, 0, e) == EINVAL);
    CHECK(cm.create_id(pkt::RdmaPs::ib, QpType::rc, 0, e) == EOPNOTSUPP);
    const auto mine = sin4(kIp[1], 5000);
    const auto any = sin4(0, 5000);
    const auto other = sin4(0xC6120009, 5000);  // 198.18.0.9: no port of ours
    CHECK(cm.bind(a, sa(other)) == EADDRNOTAVAIL);
    REQUIRE(cm.bind(a, sa(mine)) == 0);
    CHECK(cm.bind(a, sa(mine)) == EINVAL);       // bound already
    CHECK(cm.bind(c, sa(any)) == EADDRINUSE);    // the wildcard overlaps 198.18.0.2:5000
    REQUIRE(cm.bind(d, sa(any)) == 0);           // another port space
    const auto eph = sin4(kIp[1], 0);
    REQUIRE(cm.bind(c, sa(eph)) == 0);
    api::CmIdInfo info;
    REQUIRE(cm.query(c, info) == 0);
    const uint16_t p = ntohs(reinterpret_cast<const sockaddr_in*>(&info.src)->sin_port);
    CHECK(p >= 32768);
    CHECK(p <= 60999);
    REQUIRE(cm.listen(a, 4) == 0);
    CHECK(b.agent[1]->state(a) == CmState::listen);
    uint32_t n = 0;
    REQUIRE(cm.destroy_id(a, n) == 0);
    CHECK(cm.destroy_id(a, n) == EINVAL);
    uint32_t w = 0;
    REQUIRE(cm.create_id(pkt::RdmaPs::tcp, QpType::rc, 0, w) == 0);
    REQUIRE(cm.listen(w, 4) == 0);  // unbound: the wildcard address, an ephemeral port
    REQUIRE(cm.query(w, info) == 0);
    CHECK(info.src.ss_family == AF_INET6);
    CHECK(cm.connect(w, api::CmConnParam{}) == EINVAL);
    CHECK(cm.accept(12345, api::CmConnParam{}) == EINVAL);
}

TEST_CASE("cm: address resolution times out: addr_error -ETIMEDOUT", "[cm]") {
    Bench b;
    uint32_t cid = 0;
    REQUIRE(b.cm(0).create_id(pkt::RdmaPs::tcp, QpType::rc, 0, cid) == 0);
    const auto dst = sin4(0xC6120007, kPort);  // no neighbour entry, and the wire has no ARP
    REQUIRE(b.cm(0).resolve_addr(cid, nullptr, sa(dst), 50) == 0);
    CHECK(b.agent[0]->state(cid) == CmState::addr_query);
    auto ev = b.event(0);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::addr_error);
    CHECK(ev->status == -ETIMEDOUT);
}

TEST_CASE("cm: hostile MADs are answered or dropped, each counted", "[cm]") {
    Bench b;
    const Conn c = establish(b);
    const uint64_t rx_before = b.counter(1, Counter::gsi_rcvd_mads);
    std::array<uint8_t, pkt::kMadLen> m{};
    auto hdr = [&](uint8_t cls, uint8_t ver, uint8_t method, uint16_t attr, uint64_t tid) {
        m.fill(0);
        m[0] = 1;
        m[1] = cls;
        m[2] = ver;
        m[3] = method;
        for (int i = 0; i < 8; ++i) m[size_t(8 + i)] = uint8_t(tid >> (56 - 8 * i));
        m[16] = uint8_t(attr >> 8);
        m[17] = uint8_t(attr);
    };
    b.sent.clear();
    SECTION("a Get of a class not served: GetResp, status 'class or method not supported'") {
        hdr(0x04, 1, pkt::mad_method::get, 0x0012, 0x1122334455667788ULL);  // PerfMgt PortCounters
        b.inject_mad(0, m);
        b.settle();
        CHECK(b.counter(1, Counter::gsi_unsupported_answered) == 1);
        REQUIRE(b.sent.size() == 2);
        pkt::Packet p;
        REQUIRE(pkt::parse(b.sent[1].bytes, p) == pkt::ParseError::ok);
        CHECK(p.h.bth.dest_qp == 1);
        CHECK(p.h.deth.qkey == pkt::kGsiQkey);
        auto want = m;
        want[3] = pkt::mad_method::get_resp;
        want[5] = 0x08;  // IBTA 13.4.7 code 2
        CHECK(std::equal(want.begin(), want.end(), p.payload().begin()));
    }
    SECTION("a CM Get (ClassPortInfo): GetResp, 'method/attribute combination not supported'") {
        hdr(pkt::kMgmtClassCm, 2, pkt::mad_method::get, pkt::cm_attr::class_port_info, 7);
        b.inject_mad(0, m);
        b.settle();
        REQUIRE(b.sent.size() == 2);
        pkt::Packet p;
        REQUIRE(pkt::parse(b.sent[1].bytes, p) == pkt::ParseError::ok);
        CHECK(p.payload()[3] == pkt::mad_method::get_resp);
        CHECK((p.payload()[4] << 8 | p.payload()[5]) == 0x000C);
    }
    SECTION("a Send of a class not served: dropped") {
        hdr(0x04, 1, pkt::mad_method::send, 0x0012, 9);
        b.inject_mad(0, m);
        b.settle();
        CHECK(b.counter(1, Counter::gsi_drop_unsupported) == 1);
        CHECK(b.sent.size() == 1);
    }
    SECTION("a wrong Q_Key: dropped, a Q_Key violation") {
        hdr(pkt::kMgmtClassCm, 2, pkt::mad_method::send, pkt::cm_attr::rtu, 9);
        b.inject_mad(0, m, 0x80010001);
        b.settle();
        CHECK(b.counter(1, Counter::gsi_drop_qkey) == 1);
        CHECK(b.counter(1, Counter::qkey_violations) == 1);
        CHECK(b.counter(1, Counter::gsi_rcvd_mads) == rx_before);
    }
    SECTION("a short MAD: dropped, malformed") {
        pkt::Headers h;
        h.eth.src = port::WireConfig{}.mac[0];
        h.eth.dst = port::WireConfig{}.mac[1];
        h.eth.ethertype = pkt::kEthTypeIpv4;
        h.ip4.src = kIp[0];
        h.ip4.dst = kIp[1];
        h.bth.opcode = pkt::op::ud | pkt::op::send_only;
        h.bth.dest_qp = 1;
        h.bth.pkey = 0xFFFF;
        h.deth.qkey = pkt::kGsiQkey;
        h.deth.src_qp = 1;
        std::array<uint8_t, 512> out;
        size_t len = 0;
        REQUIRE(pkt::build(h, std::span<const uint8_t>(m.data(), 200), out, len) == pkt::BuildError::ok);
        b.inject(0, std::span<const uint8_t>(out.data(), len));
        b.settle();
        CHECK(b.counter(1, Counter::gsi_drop_malformed) == 1);
    }
    SECTION("an unknown CM attribute, class version 1: cm_rx_invalid (version 1 REQ: REJ 31)") {
        hdr(pkt::kMgmtClassCm, 2, pkt::mad_method::send, 0x0020, 9);
        b.inject_mad(0, m);
        hdr(pkt::kMgmtClassCm, 1, pkt::mad_method::send, pkt::cm_attr::req, 10);
        m[27] = 0x42;  // Local Comm ID 0x42
        b.inject_mad(0, m);
        b.settle();
        CHECK(b.counter(1, Counter::cm_rx_invalid) == 2);
        const auto rejs = b.mads(1, pkt::cm_attr::rej);
        REQUIRE(rejs.size() == 1);
        CHECK(std::get<pkt::CmRej>(rejs[0].msg).reason == pkt::rej_reason::invalid_class_version);
        CHECK(std::get<pkt::CmRej>(rejs[0].msg).remote_comm_id == 0x42);
        CHECK(rejs[0].hdr.tid == 10);
    }
    SECTION("an RTU for no connection: unmatched; a DREP to an established one: wrong state") {
        pkt::CmRtu u;
        u.local_comm_id = 1;
        u.remote_comm_id = 0xDEAD;
        std::array<uint8_t, pkt::kMadLen> mm;
        pkt::build_cm(pkt::CmMad{pkt::MadHdr{}, u}, mm);
        b.inject_mad(0, mm);
        pkt::CmDrep d;
        d.local_comm_id = b.agent[0]->local_comm_id(c.cid);
        d.remote_comm_id = b.agent[1]->local_comm_id(c.sid);
        pkt::build_cm(pkt::CmMad{pkt::MadHdr{}, d}, mm);
        b.inject_mad(0, mm);
        pkt::CmRep r;  // a REP to the server, which sent no REQ: wrong state
        r.remote_comm_id = b.agent[1]->local_comm_id(c.sid);
        pkt::build_cm(pkt::CmMad{pkt::MadHdr{}, r}, mm);
        b.inject_mad(0, mm);
        b.settle();
        CHECK(b.counter(1, Counter::cm_rx_unmatched) == 1);
        CHECK(b.counter(1, Counter::cm_rx_wrong_state) == 2);
        CHECK(b.agent[1]->state(c.sid) == CmState::established);
        CHECK(b.sent.size() == 3);  // nothing answered
    }
}

TEST_CASE("cm: over IPv6 GIDs: the REQ's CMA header and GIDs are IPv6, the QPs connect", "[cm]") {
    Bench b(QpType::rc, true);
    uint32_t lid = 0, cid = 0;
    REQUIRE(b.cm(1).create_id(pkt::RdmaPs::tcp, QpType::rc, 0, lid) == 0);
    sockaddr_in6 any{};
    any.sin6_family = AF_INET6;
    any.sin6_port = htons(kPort);
    REQUIRE(b.cm(1).bind(lid, reinterpret_cast<const sockaddr*>(&any)) == 0);
    REQUIRE(b.cm(1).listen(lid, 1) == 0);
    REQUIRE(b.cm(0).create_id(pkt::RdmaPs::tcp, QpType::rc, 0, cid) == 0);
    sockaddr_in6 dst = any;
    std::memcpy(&dst.sin6_addr, b.cfg.ipv6[1].data(), 16);
    REQUIRE(b.cm(0).resolve_addr(cid, nullptr, reinterpret_cast<const sockaddr*>(&dst), 2000) == 0);
    REQUIRE(b.event(0)->type == CmEventType::addr_resolved);
    REQUIRE(b.cm(0).resolve_route(cid, 2000) == 0);
    REQUIRE(b.event(0)->type == CmEventType::route_resolved);
    REQUIRE(modify(b.side[0].qp, b.cm(0), cid, QpState::init));
    REQUIRE(b.cm(0).connect(cid, conn(b.side[0].qp.qpn(), "six")) == 0);
    auto ev = b.event(1);
    REQUIRE(ev);
    REQUIRE(ev->type == CmEventType::connect_request);
    const uint32_t sid = ev->id;
    api::CmIdInfo info;
    REQUIRE(b.cm(1).query(sid, info) == 0);
    CHECK(info.dst.ss_family == AF_INET6);
    CHECK(info.dgid == b.cfg.ipv6[0]);
    CHECK(info.sgid_index == 2);
    const auto reqs = b.mads(0, pkt::cm_attr::req);
    REQUIRE(reqs.size() == 1);
    const auto& r = std::get<pkt::CmReq>(reqs[0].msg);
    CHECK(r.primary.local_gid == b.cfg.ipv6[0]);
    CHECK(r.primary.remote_gid == b.cfg.ipv6[1]);
    pkt::CmaHdr ch;
    REQUIRE(pkt::parse_cma_hdr(r.private_data, ch) == pkt::MadError::ok);
    CHECK(ch.ip_version == 6);
    CHECK(ch.src_ip == b.cfg.ipv6[0]);
    CHECK(ch.dst_ip == b.cfg.ipv6[1]);
    REQUIRE(modify(b.side[1].qp, b.cm(1), sid, QpState::init));
    REQUIRE(modify(b.side[1].qp, b.cm(1), sid, QpState::rtr));
    REQUIRE(b.cm(1).accept(sid, conn(b.side[1].qp.qpn(), "")) == 0);
    REQUIRE(b.event(0)->type == CmEventType::connect_response);
    for (QpState st : {QpState::init, QpState::rtr, QpState::rts}) REQUIRE(modify(b.side[0].qp, b.cm(0), cid, st));
    REQUIRE(b.cm(0).establish(cid) == 0);
    REQUIRE(b.event(1)->type == CmEventType::established);
    REQUIRE(modify(b.side[1].qp, b.cm(1), sid, QpState::rts));
    send_one(b);
    for (const auto& f : b.sent) {  // every frame, MADs too, over IPv6
        pkt::Packet p;
        REQUIRE(pkt::parse(f.bytes, p) == pkt::ParseError::ok);
        CHECK(p.h.ipv6);
    }
    b.all_strict();
}

TEST_CASE("cm: RTU lost: the REP again after the REQ's Local CM Response Timeout, the RTU again to it", "[cm]") {
    Bench b;
    auto [cid, lid] = prepare(b);
    b.sent.clear();
    // Direction 0 (neighbours are static: nothing before): the REQ (0), the RTU (1, dropped), the RTU again (2).
    b.wire.set_filter(0, [](const uint8_t*, uint32_t, uint64_t seq) {
        return seq == 1 ? port::Action::drop : port::Action::pass;
    });
    REQUIRE(b.cm(0).connect(cid, conn(b.side[0].qp.qpn(), "hello")) == 0);
    auto ev = b.event(1);
    REQUIRE(ev);
    const uint32_t sid = ev->id;
    REQUIRE(b.cm(1).accept(sid, conn(b.side[1].qp.qpn(), "")) == 0);
    REQUIRE(b.event(0)->type == CmEventType::connect_response);
    REQUIRE(b.cm(0).establish(cid) == 0);
    ev = b.event(1);
    REQUIRE(ev);
    CHECK(ev->type == CmEventType::established);
    std::vector<uint64_t> rep_at, rtu_at;
    for (const auto& f : b.sent) {
        pkt::Packet p;
        if (pkt::parse(f.bytes, p) != pkt::ParseError::ok || p.payload_len != 256) continue;
        const uint16_t attr = uint16_t(p.payload()[16] << 8 | p.payload()[17]);
        if (attr == pkt::cm_attr::rep) rep_at.push_back(f.t);
        if (attr == pkt::cm_attr::rtu) rtu_at.push_back(f.t);
    }
    REQUIRE(rep_at.size() == 2);
    CHECK(rep_at[1] - rep_at[0] == pkt::cm_timeout_ns(20));  // the REQ's Local CM Response Timeout
    CHECK(rtu_at.size() == 2);
    CHECK(b.counter(1, Counter::cm_retries) == 1);
    CHECK(b.counter(0, Counter::cm_duplicates) == 1);
    CHECK(b.counter(1, Counter::cm_rtu_rcvd) == 1);
    (void)lid;
}
