// One client of hcaemud, through libhcaemu's API only (tools/libhcaemu/api.hpp); check_daemon.py starts
// several of them against one daemon. Clients exchange QPN, PSN, GID, addresses and keys through
// small files in a shared directory (written whole, then renamed into place). Every wait has a
// deadline. Exit 0 after the last check, 1 with a "FAIL:" line on the first wrong byte, status or
// state.
//
//   daemon_node pair    SOCK DIR a|b   both ways: SEND, WRITE, READ, CmpSwap, FetchAdd, byte-exact,
//                                       exact CQEs, the receive CQ's completion event
//   daemon_node refuse  SOCK DIR a|b   a owns objects; b names a's PD/CQ (bad_handle), uses a's lkey
//                                       (local protection error, QP in ERR) and an rkey of a's MR on
//                                       another PD (remote access error); a's memory unchanged
//   daemon_node stream  SOCK DIR a|b|c a streams WRITE+SEND to b until killed; then b sees its peer
//                                       gone (retry exceeded), recreates its QP and takes a fresh
//                                       transfer from c, byte-exact
//   daemon_node ud      SOCK DIR a|b   UD SENDs (one inline) through an AH: GRH, src_qp, payload
//                                       (DIR/stall: b says rts.b and waits for "stopped" before
//                                       posting its receives; a says sent.a once its sends completed)
//   daemon_node hold    SOCK DIR       holds objects until the daemon's shutdown reaches it
//   daemon_node hello   SOCK N         connects and disconnects N times (a log line each in hcaemud)
//   daemon_node bigmr   SOCK MIB       registers MIB MiB of written memory from one connection
//                                       while a second reads the counters: the daemon answers it
//                                       while the MR is mapped (mr_maps_pending seen at 1)
//   daemon_node churn   SOCK ROUNDS    per round: PD, MR, CQs (one on a channel), SRQ, RC QP on the
//                                       SRQ connected to itself, UD QP, AH; an RC SEND and a UD SEND
//                                       through them, byte-exact; all destroyed. Then one more
//                                       round's objects, left for the daemon to clean (tests/bench/
//                                       soak_daemon.py runs it, and SIGKILLs some mid-way)
//   daemon_node cq      SOCK           three create_cq against a fake daemon, polls, fds before/after
//   daemon_node res     SOCK           prints every object (`res KIND client pid comm k=v ...`) and
//                                       the device counters (`stat NAME VALUE`)
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "tools/libhcaemu/api.hpp"

using namespace hcaemu;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kWaitMs = 20000;

[[noreturn]] void fail(const std::string& what) {
    std::printf("FAIL: %s\n", what.c_str());
    std::fflush(stdout);
    std::_Exit(1);
}
void check(bool ok, const std::string& what) {
    if (!ok) fail(what);
}
void check_st(Status s, const std::string& what) {
    if (s != Status::ok) fail(what + ": " + name(s));
}

std::string gid_hex(const Gid& g) {
    char b[33];
    for (size_t i = 0; i < 16; ++i) std::snprintf(b + 2 * i, 3, "%02x", g[i]);
    return b;
}
Gid gid_from(const std::string& s) {
    Gid g{};
    check(s.size() == 32, "bad gid text " + s);
    for (size_t i = 0; i < 16; ++i) g[i] = uint8_t(std::stoul(s.substr(2 * i, 2), nullptr, 16));
    return g;
}

using Info = std::map<std::string, std::string>;

void publish(const std::string& dir, const std::string& name, const Info& info) {
    const std::string tmp = dir + "/." + name + ".tmp";
    {
        std::ofstream f(tmp);
        for (auto& [k, v] : info) f << k << '=' << v << '\n';
    }
    check(std::rename(tmp.c_str(), (dir + "/" + name).c_str()) == 0, "rename " + tmp);
}
Info wait_info(const std::string& dir, const std::string& name, int ms = kWaitMs) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
        std::ifstream f(dir + "/" + name);
        if (f) {
            Info info;
            std::string line;
            while (std::getline(f, line))
                if (auto eq = line.find('='); eq != std::string::npos) info[line.substr(0, eq)] = line.substr(eq + 1);
            return info;
        }
        if (Clock::now() > deadline) fail("no " + name + " from the peer within " + std::to_string(ms) + " ms");
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}
uint64_t num(const Info& i, const std::string& k) {
    auto it = i.find(k);
    check(it != i.end(), "peer info without " + k);
    return std::stoull(it->second, nullptr, 0);
}

uint8_t pattern(uint32_t seed, size_t i) { return uint8_t(seed * 31 + i * 7 + (i >> 8)); }
void fill(uint8_t* p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; ++i) p[i] = pattern(seed, i);
}
void expect_pattern(const uint8_t* p, size_t n, uint32_t seed, const std::string& what) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != pattern(seed, i))
            fail(what + ": byte " + std::to_string(i) + " is " + std::to_string(p[i]) + ", expected " +
                 std::to_string(pattern(seed, i)));
}

// Polls `cq` until `n` completions are in or the deadline passes (short sleeps: 2 cores).
void poll_n(api::Cq& cq, Wc* wc, int n, const std::string& what, int ms = kWaitMs) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    int got = 0;
    while (got < n) {
        got += cq.poll(std::span<Wc>(wc + got, size_t(n - got)));
        if (got >= n) break;
        if (Clock::now() > deadline) fail(what + ": " + std::to_string(got) + " of " + std::to_string(n) + " completions");
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}
void expect_wc(const Wc& wc, uint64_t wr_id, WcStatus st, WcOpcode op, uint32_t len, const std::string& what) {
    if (wc.wr_id != wr_id || wc.status != st || (st == WcStatus::success && (wc.opcode != op || wc.byte_len != len)))
        fail(what + ": CQE wr_id=" + std::to_string(wc.wr_id) + " status=" + id(wc.status) + " opcode=" +
             name(wc.opcode) + " byte_len=" + std::to_string(wc.byte_len) + ", expected wr_id=" + std::to_string(wr_id) +
             " " + id(st) + " " + name(op) + " " + std::to_string(len));
}

struct Node {
    std::unique_ptr<api::Context> ctx;
    api::Buffer buf;
    std::unique_ptr<api::Pd> pd;
    std::unique_ptr<api::Mr> mr;
    std::unique_ptr<api::CompChannel> ch;
    std::unique_ptr<api::Cq> scq, rcq;
    std::unique_ptr<api::Qp> qp;
    uint32_t psn = 0;
};

constexpr uint32_t kAllAccess = access::local_write | access::remote_write | access::remote_read | access::remote_atomic;

void open_ctx(Node& n, const std::string& sock) {
    std::string err;
    n.ctx = api::open_daemon(sock, err);
    check(n.ctx != nullptr, "open_daemon " + sock + ": " + err);
    check(n.ctx->alive(), "alive after open");
}

void make_qp(Node& n, uint32_t depth = 16) {
    api::QpInitAttr init;
    init.send_cq = n.scq.get();
    init.recv_cq = n.rcq.get();
    init.cap.max_send_wr = depth;
    init.cap.max_recv_wr = depth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    auto q = n.ctx->create_qp(*n.pd, init);
    check_st(q.status, "create_qp");
    check(init.cap.max_send_wr >= depth && init.cap.max_recv_wr >= depth, "granted caps below the request");
    n.qp = std::move(q.value);
    check(n.qp->state() == QpState::reset, "a new QP is in RESET");
}

void setup(Node& n, const std::string& sock, size_t bytes, uint64_t cq_context = 0, bool channel = false) {
    open_ctx(n, sock);
    auto b = n.ctx->alloc_buffer(bytes);
    check_st(b.status, "alloc_buffer");
    n.buf = b.value;
    for (size_t i = 0; i < bytes; ++i) check(n.buf.data[i] == 0, "alloc_buffer memory not zeroed");
    auto pd = n.ctx->alloc_pd();
    check_st(pd.status, "alloc_pd");
    n.pd = std::move(pd.value);
    auto mr = n.ctx->reg_mr(*n.pd, n.buf.data, bytes, kAllAccess);
    check_st(mr.status, "reg_mr");
    n.mr = std::move(mr.value);
    check(n.mr->addr() == uint64_t(uintptr_t(n.buf.data)) && n.mr->length() == bytes, "MR addr/length");
    if (channel) {
        auto c = n.ctx->create_comp_channel();
        check_st(c.status, "create_comp_channel");
        n.ch = std::move(c.value);
    }
    auto s = n.ctx->create_cq(64);
    check_st(s.status, "create_cq (send)");
    n.scq = std::move(s.value);
    auto r = n.ctx->create_cq(64, n.ch.get(), cq_context);
    check_st(r.status, "create_cq (recv)");
    n.rcq = std::move(r.value);
    make_qp(n);
}

Info my_info(const Node& n) {
    return {{"qpn", std::to_string(n.qp->qpn())},
            {"psn", std::to_string(n.psn)},
            {"gid", gid_hex(n.ctx->gid())},
            {"addr", std::to_string(uintptr_t(n.buf.data))},
            {"rkey", std::to_string(n.mr->rkey())},
            {"pid", std::to_string(::getpid())}};
}

void connect(Node& n, const Info& peer, uint8_t timeout = 14, uint8_t retry_cnt = 7) {
    std::string err;
    const Gid pg = gid_from(peer.at("gid"));
    const bool resolved = n.ctx->resolve(pg, 5000, err);
    check(resolved, "resolve the peer: " + err);
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    a.qp_access_flags = access::remote_write | access::remote_read | access::remote_atomic;
    ModifyResult m = n.qp->modify(a, qp_attr::state | qp_attr::pkey_index | qp_attr::port | qp_attr::access_flags);
    check_st(m.status, "modify to INIT");
    a.qp_state = QpState::rtr;
    a.path_mtu = Mtu::mtu1024;
    a.dest_qp_num = uint32_t(num(peer, "qpn"));
    a.rq_psn = uint32_t(num(peer, "psn"));
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    a.ah_attr.dgid = pg;
    a.ah_attr.sgid_index = uint8_t(n.ctx->gid_index());
    m = n.qp->modify(a, qp_attr::state | qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn |
                            qp_attr::max_dest_rd_atomic | qp_attr::min_rnr_timer);
    check_st(m.status, "modify to RTR");
    a.qp_state = QpState::rts;
    a.sq_psn = n.psn;
    a.timeout = timeout;
    a.retry_cnt = retry_cnt;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    m = n.qp->modify(a, qp_attr::state | qp_attr::sq_psn | qp_attr::timeout | qp_attr::retry_cnt |
                            qp_attr::rnr_retry | qp_attr::max_qp_rd_atomic);
    check_st(m.status, "modify to RTS");
    check(n.qp->state() == QpState::rts, "QP in RTS after modify (query)");
    QpAttr q;
    check_st(n.qp->query(q), "query_qp");
    check(q.dest_qp_num == a.dest_qp_num && q.sq_psn == n.psn, "query_qp: dest_qp_num and sq_psn as set");
}

void post_recv(Node& n, uint64_t wr_id, uint64_t off, uint32_t len) {
    Sge s{uintptr_t(n.buf.data) + off, len, n.mr->lkey()};
    RecvWr r{wr_id, nullptr, &s, 1};
    const RecvWr* bad = nullptr;
    check_st(n.qp->post_recv(&r, &bad), "post_recv");
    check(bad == nullptr, "post_recv bad_wr set on success");
}

void teardown(Node& n) {
    if (n.qp->handle()) check_st(n.qp->destroy(), "destroy_qp");
    check_st(n.scq->destroy(), "destroy_cq (send)");
    check_st(n.rcq->destroy(), "destroy_cq (recv)");
    check_st(n.mr->destroy(), "dereg_mr");
    check_st(n.pd->destroy(), "dealloc_pd");
    n.ctx->free_buffer(n.buf);
    check(n.buf.data == nullptr, "free_buffer clears the Buffer");
}

// ---- pair: both ways, every operation ----
namespace lay {
constexpr uint64_t send_src = 0, recv_dst = 4096, wr_src = 8192, wr_dst = 12288, rd_src = 16384, rd_dst = 20480,
                   cs = 24576, fa = 24584, cs_res = 24640, fa_res = 24648, size = 32768;
}
constexpr uint32_t kLen = 3000;  // 3 packets at MTU 1024

int run_pair(const std::string& sock, const std::string& dir, char role) {
    const char peer_role = role == 'a' ? 'b' : 'a';
    const uint32_t me = role == 'a' ? 1 : 2, them = 3 - me;
    Node n;
    n.psn = 0x100 * me;
    setup(n, sock, lay::size, 0xC0 + me, true);
    uint8_t* m = n.buf.data;
    // Memory not from alloc_buffer (.bss here) is made shared in place (tools/libhcaemu/remap.hpp); a
    // range running from an alloc_buffer mapping into other memory is refused before any request.
    static uint8_t plain[64];
    auto pm = n.ctx->reg_mr(*n.pd, plain, sizeof(plain), access::local_write);
    check_st(pm.status, "reg_mr of .bss memory");
    check_st(pm.value->destroy(), "dereg_mr of .bss memory");
    check(n.ctx->reg_mr(*n.pd, m + 4096, lay::size, access::local_write).status != Status::ok,
          "reg_mr past the end of its buffer");
    GidEntry ge;
    check_st(n.ctx->query_gid(1, n.ctx->gid_index(), ge), "query_gid");
    check(ge.gid == n.ctx->gid(), "query_gid at gid_index() is gid()");
    PortAttr pa0;
    check_st(n.ctx->query_port(1, pa0), "query_port");
    check(pa0.state == PortState::active && pa0.link_layer == 2, "query_port: active Ethernet port");
    check(n.ctx->query_device().max_qp > 0 && n.ctx->query_device().phys_port_cnt == 1, "query_device");
    fill(m + lay::send_src, kLen, 10 + me);
    fill(m + lay::wr_src, kLen, 20 + me);
    fill(m + lay::rd_src, kLen, 30 + me);
    const uint64_t cs0 = 0x1111000000000000ull + me, fa0 = 1000 + me;
    std::memcpy(m + lay::cs, &cs0, 8);
    std::memcpy(m + lay::fa, &fa0, 8);
    // A receive in RESET is refused (verbs); in INIT and later it is taken.
    Sge s0{uintptr_t(m) + lay::recv_dst, 4096, n.mr->lkey()};
    RecvWr r0{100, nullptr, &s0, 1};
    const RecvWr* bad_r = nullptr;
    check(n.qp->post_recv(&r0, &bad_r) == Status::bad_qp_state && bad_r == &r0, "post_recv in RESET refused, bad_wr set");
    check_st(n.rcq->req_notify(false), "req_notify");
    publish(dir, std::string("info.") + role, my_info(n));
    const Info peer = wait_info(dir, std::string("info.") + peer_role);
    connect(n, peer);
    post_recv(n, 100, lay::recv_dst, 4096);
    publish(dir, std::string("ready.") + role, {});
    wait_info(dir, std::string("ready.") + peer_role);

    const uint64_t pa = num(peer, "addr");
    const uint32_t rkey = uint32_t(num(peer, "rkey")), lkey = n.mr->lkey();
    const uint64_t base = uintptr_t(m);
    Sge s_wr{base + lay::wr_src, kLen, lkey}, s_send{base + lay::send_src, kLen, lkey}, s_rd{base + lay::rd_dst, kLen, lkey},
        s_cs{base + lay::cs_res, 8, lkey}, s_fa{base + lay::fa_res, 8, lkey};
    SendWr w[5];
    w[0].wr_id = 1; w[0].opcode = WrOpcode::rdma_write; w[0].sg_list = &s_wr;
    w[0].rdma = {pa + lay::wr_dst, rkey};
    w[1].wr_id = 2; w[1].opcode = WrOpcode::send; w[1].sg_list = &s_send;
    w[2].wr_id = 3; w[2].opcode = WrOpcode::rdma_read; w[2].sg_list = &s_rd;
    w[2].rdma = {pa + lay::rd_src, rkey};
    w[3].wr_id = 4; w[3].opcode = WrOpcode::atomic_cmp_and_swp; w[3].sg_list = &s_cs;
    w[3].atomic = {pa + lay::cs, 0x1111000000000000ull + them, 0xC0FFEE00ull + me, rkey};
    w[4].wr_id = 5; w[4].opcode = WrOpcode::atomic_fetch_and_add; w[4].sg_list = &s_fa;
    w[4].atomic = {pa + lay::fa, 5 + me, 0, rkey};
    for (int i = 0; i < 5; ++i) {
        w[i].num_sge = 1;
        w[i].send_flags = send_flag::signaled;
        w[i].next = i < 4 ? &w[i + 1] : nullptr;
    }
    const SendWr* bad = nullptr;
    check_st(n.qp->post_send(&w[0], &bad), "post_send of the 5 WRs");
    check(bad == nullptr, "post_send bad_wr set on success");

    // The receive CQ was armed: its event names it, with our cq_context.
    CqEvent ev;
    check(n.ch->wait_cq_event(ev, kWaitMs), "no completion event for the receive CQ");
    check(ev.cq_handle == n.rcq->handle(), "completion event for CQ " + std::to_string(ev.cq_handle) + ", not the receive CQ " +
                                               std::to_string(n.rcq->handle()));
    check(ev.cq_context == 0xC0 + me, "completion event cq_context");
    CqEvent none;
    check(!n.ch->get_cq_event(none), "a second event without a new req_notify");

    // The receive CQE is in the ring; a resize now must not lose it (the old ring drains first).
    const int cqe0 = n.rcq->cqe();
    check_st(n.rcq->resize(256), "resize_cq");
    check(n.rcq->cqe() >= 256 && n.rcq->cqe() != cqe0, "cqe() after resize: " + std::to_string(n.rcq->cqe()));
    Wc wc[5];
    poll_n(*n.rcq, wc, 1, "receive CQ");
    expect_wc(wc[0], 100, WcStatus::success, WcOpcode::recv, kLen, "the SEND received");
    check(wc[0].qp_num == n.qp->qpn(), "receive CQE qp_num");
    poll_n(*n.scq, wc, 5, "send CQ");
    expect_wc(wc[0], 1, WcStatus::success, WcOpcode::rdma_write, kLen, "WRITE");
    expect_wc(wc[1], 2, WcStatus::success, WcOpcode::send, kLen, "SEND");
    expect_wc(wc[2], 3, WcStatus::success, WcOpcode::rdma_read, kLen, "READ");
    expect_wc(wc[3], 4, WcStatus::success, WcOpcode::comp_swap, 8, "CmpSwap");
    expect_wc(wc[4], 5, WcStatus::success, WcOpcode::fetch_add, 8, "FetchAdd");
    check(n.scq->poll(std::span<Wc>(wc, 5)) == 0 && n.rcq->poll(std::span<Wc>(wc, 5)) == 0, "no extra CQE");

    // The peer's SEND arrived after its WRITE (RC order): both are in place.
    expect_pattern(m + lay::recv_dst, kLen, 10 + them, "SEND data received");
    for (size_t i = kLen; i < 4096; ++i) check(m[lay::recv_dst + i] == 0, "receive buffer past the message written");
    expect_pattern(m + lay::wr_dst, kLen, 20 + them, "WRITE data from the peer");
    check(m[lay::wr_dst + kLen] == 0, "WRITE past its length");
    expect_pattern(m + lay::rd_dst, kLen, 30 + them, "READ data from the peer");
    uint64_t v;
    std::memcpy(&v, m + lay::cs_res, 8);
    check(v == 0x1111000000000000ull + them, "CmpSwap returned " + std::to_string(v));
    std::memcpy(&v, m + lay::fa_res, 8);
    check(v == 1000 + them, "FetchAdd returned " + std::to_string(v));

    publish(dir, std::string("done.") + role, {});
    wait_info(dir, std::string("done.") + peer_role);
    std::memcpy(&v, m + lay::cs, 8);
    check(v == 0xC0FFEE00ull + them, "our CmpSwap target after the peer's swap: " + std::to_string(v));
    std::memcpy(&v, m + lay::fa, 8);
    check(v == fa0 + 5 + them, "our FetchAdd target after the peer's add: " + std::to_string(v));
    publish(dir, std::string("checked.") + role, {});
    wait_info(dir, std::string("checked.") + peer_role);  // the peer's QP stays until we are done with it
    check_st(n.qp->destroy(), "destroy_qp");
    check(n.rcq->destroy() == Status::busy, "destroy_cq with an unacknowledged event: busy");
    n.rcq->ack_events(1);
    teardown(n);
    check(n.ctx->alive(), "alive at the end");
    std::printf("OK pair %c\n", role);
    return 0;
}

// ---- refuse: another client's handles and keys ----
template <class Base>
struct Foreign;  // an API object naming a handle this process does not own
template <>
struct Foreign<api::Pd> final : api::Pd {
    explicit Foreign(uint32_t h) : h_(h) {}
    Status destroy() override { return Status::ok; }
    uint32_t handle() const override { return h_; }
    uint32_t h_;
};
template <>
struct Foreign<api::Cq> final : api::Cq {
    explicit Foreign(uint32_t h) : h_(h), native_(nullptr, h) {}
    Status destroy() override { return Status::ok; }
    uint32_t handle() const override { return h_; }
    int poll(std::span<Wc>) override { return 0; }
    Status req_notify(bool) override { return Status::ok; }
    Status resize(int) override { return Status::ok; }
    void ack_events(uint32_t) override {}
    int cqe() const override { return 0; }
    const hcaemu::Cq& native() const override { return native_; }
    uint32_t h_;
    hcaemu::Cq native_;
};

constexpr size_t kRefSize = 16384;

int run_refuse(const std::string& sock, const std::string& dir, char role) {
    if (role == 'a') {
        Node n;
        n.psn = 0x300;
        setup(n, sock, kRefSize);
        fill(n.buf.data, kRefSize, 77);
        auto pd2 = n.ctx->alloc_pd();
        check_st(pd2.status, "alloc_pd (second)");
        auto mr2 = n.ctx->reg_mr(*pd2.value, n.buf.data + kRefSize / 2, kRefSize / 2, kAllAccess);
        check_st(mr2.status, "reg_mr on the second PD");
        Info i = my_info(n);
        i["pd"] = std::to_string(n.pd->handle());
        i["cq"] = std::to_string(n.scq->handle());
        i["qp"] = std::to_string(n.qp->handle());
        i["mr"] = std::to_string(n.mr->handle());
        i["lkey"] = std::to_string(n.mr->lkey());
        i["rkey2"] = std::to_string(mr2.value->rkey());
        i["addr2"] = std::to_string(mr2.value->addr());
        publish(dir, "info.a", i);
        connect(n, wait_info(dir, "info.b"));
        publish(dir, "ready.a", {});
        wait_info(dir, "done.b");
        expect_pattern(n.buf.data, kRefSize, 77, "a's memory after b's attempts");
        Wc wc[4];
        check(n.scq->poll(wc) == 0, "a's send CQ got a completion from b's attempts");
        check_st(mr2.value->destroy(), "a: dereg_mr (second)");
        check_st(pd2.value->destroy(), "a: dealloc_pd (second)");
        teardown(n);
        std::printf("OK refuse a\n");
        return 0;
    }
    Node n;
    n.psn = 0x400;
    setup(n, sock, kRefSize);
    fill(n.buf.data, kRefSize, 88);
    const Info a = wait_info(dir, "info.a");
    publish(dir, "info.b", my_info(n));
    connect(n, a);
    wait_info(dir, "ready.a");

    // a's handles named in b's calls: refused, and b's connection stays.
    Foreign<api::Pd> fpd(uint32_t(num(a, "pd")));
    Foreign<api::Cq> fcq(uint32_t(num(a, "cq")));
    auto r1 = n.ctx->reg_mr(fpd, n.buf.data, 4096, kAllAccess);
    check(r1.status == Status::bad_handle, std::string("reg_mr on a's PD: ") + name(r1.status));
    auto r2 = n.ctx->alloc_pd();
    check_st(r2.status, "alloc_pd after a refusal");
    api::QpInitAttr init;
    init.send_cq = &fcq;
    init.recv_cq = n.rcq.get();
    init.cap.max_send_wr = init.cap.max_recv_wr = 4;
    auto r3 = n.ctx->create_qp(*n.pd, init);
    check(r3.status == Status::bad_handle, std::string("create_qp with a's CQ: ") + name(r3.status));
    init.send_cq = n.scq.get();
    auto r4 = n.ctx->create_qp(fpd, init);
    check(r4.status == Status::bad_handle, std::string("create_qp on a's PD: ") + name(r4.status));
    AhAttr ah;
    ah.dgid = n.ctx->gid();
    auto r5 = n.ctx->create_ah(fpd, ah);
    check(r5.status == Status::bad_handle, std::string("create_ah on a's PD: ") + name(r5.status));
    SrqAttr sa{4, 1, 0};
    auto r6 = n.ctx->create_srq(fpd, sa);
    check(r6.status == Status::bad_handle, std::string("create_srq on a's PD: ") + name(r6.status));
    check(n.ctx->alive(), "b's connection alive after the refusals");

    // An rkey of a's MR on a PD other than a's QP's: the responder refuses (remote access error).
    Sge s{uintptr_t(n.buf.data), 64, n.mr->lkey()};
    SendWr w;
    w.wr_id = 21;
    w.opcode = WrOpcode::rdma_write;
    w.sg_list = &s;
    w.num_sge = 1;
    w.send_flags = send_flag::signaled;
    w.rdma = {num(a, "addr2"), uint32_t(num(a, "rkey2"))};
    const SendWr* bad = nullptr;
    check_st(n.qp->post_send(&w, &bad), "post WRITE with a's other-PD rkey");
    Wc wc[4];
    poll_n(*n.scq, wc, 1, "WRITE with a foreign rkey");
    expect_wc(wc[0], 21, WcStatus::rem_access_err, WcOpcode::rdma_write, 0, "WRITE with a's other-PD rkey");
    check(n.qp->state() == QpState::err, "b's QP in ERR after a remote access error");

    // a's lkey in b's SGE: a local protection error on b's side.
    make_qp(n);
    n.psn = 0x500;
    connect(n, a);
    Sge fs{num(a, "addr"), 64, uint32_t(num(a, "lkey"))};
    w.wr_id = 22;
    w.opcode = WrOpcode::send;
    w.sg_list = &fs;
    check_st(n.qp->post_send(&w, &bad), "post SEND with a's lkey (checked by the HCA, not at post)");
    poll_n(*n.scq, wc, 1, "SEND with a's lkey");
    expect_wc(wc[0], 22, WcStatus::loc_prot_err, WcOpcode::send, 0, "SEND with a's lkey");
    check(n.qp->state() == QpState::err, "b's QP in ERR after a local protection error");
    expect_pattern(n.buf.data, kRefSize, 88, "b's own memory");
    check(n.ctx->alive(), "b alive at the end");
    publish(dir, "done.b", {});
    teardown(n);
    check_st(r2.value->destroy(), "dealloc_pd (b's second)");
    std::printf("OK refuse b\n");
    return 0;
}

// ---- stream: a killed mid-transfer ----
constexpr uint32_t kChunk = 16384;
constexpr size_t kStreamSize = 8 * kChunk;

int run_stream(const std::string& sock, const std::string& dir, char role) {
    Node n;
    n.psn = role == 'a' ? 0x600 : role == 'b' ? 0x700 : 0x800;
    if (role == 'a') {  // streams until killed (or its bound: 60 s, 10^6 messages)
        setup(n, sock, kStreamSize);
        fill(n.buf.data, kStreamSize, 5);
        publish(dir, "info.a", my_info(n));
        const Info b = wait_info(dir, "info.b");
        connect(n, b);
        publish(dir, "ready.a", {});
        const uint64_t pa = num(b, "addr");
        const uint32_t rkey = uint32_t(num(b, "rkey"));
        const auto end = Clock::now() + std::chrono::seconds(60);
        uint64_t posted = 0, done = 0;
        Wc wc[16];
        while (posted < 1000000 && Clock::now() < end) {
            while (posted - done < 8) {
                Sge s{uintptr_t(n.buf.data) + (posted % 4) * kChunk, kChunk, n.mr->lkey()};
                SendWr w;
                w.wr_id = posted;
                w.sg_list = &s;
                w.num_sge = 1;
                w.send_flags = send_flag::signaled;
                if (posted % 4 == 3) {
                    w.opcode = WrOpcode::send;
                    s.length = 64;
                } else {
                    w.opcode = WrOpcode::rdma_write;
                    w.rdma = {pa + (posted % 4) * kChunk, rkey};
                }
                const SendWr* bad = nullptr;
                check_st(n.qp->post_send(&w, &bad), "a: post_send");
                ++posted;
            }
            const int k = n.scq->poll(wc);
            for (int i = 0; i < k; ++i) check(wc[i].status == WcStatus::success, std::string("a: CQE ") + id(wc[i].status));
            done += uint64_t(k);
            if (done >= 16 && done - uint64_t(k) < 16) publish(dir, "streaming.a", {});
            if (!k) std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        std::printf("a: not killed within its bound\n");
        return 1;
    }
    if (role == 'b') {
        setup(n, sock, kStreamSize);
        publish(dir, "pid.b", {{"pid", std::to_string(::getpid())}});
        const Info a = wait_info(dir, "info.a");
        publish(dir, "info.b", my_info(n));
        connect(n, a, 10, 2);  // 4.096 us * 2^10 = 4 ms ACK timeout, 2 retries: a vanished peer is seen fast
        for (int i = 0; i < 8; ++i) post_recv(n, 1000 + uint64_t(i), 4 * kChunk + uint64_t(i) * 64, 64);
        // Receive until the test says a is dead; repost every receive taken.
        Wc wc[16];
        uint64_t recvs = 0;
        bool killed_seen = false;
        const auto end = Clock::now() + std::chrono::seconds(60);
        for (;;) {
            const int k = n.rcq->poll(wc);
            for (int i = 0; i < k; ++i) {
                check(wc[i].status == WcStatus::success, std::string("b: receive CQE ") + id(wc[i].status));
                post_recv(n, wc[i].wr_id, 4 * kChunk + (wc[i].wr_id - 1000) * 64, 64);
            }
            recvs += uint64_t(k);
            if (killed_seen) break;  // one more pass after the file: a's last messages were in before it
            killed_seen = bool(std::ifstream(dir + "/killed"));
            if (killed_seen) continue;
            check(Clock::now() < end, "b: the test never said a was killed");
            if (!k) std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        check(recvs > 0, "b received nothing before a was killed");
        // A real HCA's peer whose QP vanished: requests are never acknowledged, the retries run out.
        Sge s{uintptr_t(n.buf.data), 64, n.mr->lkey()};
        SendWr w;
        w.wr_id = 77;
        w.sg_list = &s;
        w.num_sge = 1;
        w.send_flags = send_flag::signaled;
        const SendWr* bad = nullptr;
        check_st(n.qp->post_send(&w, &bad), "b: post SEND to the vanished peer");
        poll_n(*n.scq, wc, 1, "b: SEND to the vanished peer");
        expect_wc(wc[0], 77, WcStatus::retry_exc_err, WcOpcode::send, 0, "b: SEND to the vanished peer");
        check(n.qp->state() == QpState::err, "b: QP in ERR after retry exceeded");
        int flushed = 0;
        for (int tries = 0; flushed < 8 && tries < 1000; ++tries) {
            const int k = n.rcq->poll(wc);
            for (int i = 0; i < k; ++i) check(wc[i].status == WcStatus::wr_flush_err, "b: receive not flushed");
            flushed += k;
            if (!k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        check(flushed == 8, "b: " + std::to_string(flushed) + " of 8 receives flushed");
        // Start again with a new QP and a new peer, c.
        // The new QP takes its receives from an SRQ.
        check_st(n.qp->destroy(), "b: destroy the old QP");
        SrqAttr sa{8, 1, 0};
        auto srq = n.ctx->create_srq(*n.pd, sa);
        check_st(srq.status, "b: create_srq");
        check(sa.max_wr >= 8, "b: SRQ granted max_wr");
        SrqAttr qa;
        check_st(srq.value->query(qa), "b: query_srq");
        check(qa.max_wr == sa.max_wr && qa.max_sge == sa.max_sge, "b: query_srq as granted");
        api::QpInitAttr init;
        init.send_cq = n.scq.get();
        init.recv_cq = n.rcq.get();
        init.srq = srq.value.get();
        init.cap.max_send_wr = 16;
        init.cap.max_send_sge = 1;
        auto q2 = n.ctx->create_qp(*n.pd, init);
        check_st(q2.status, "b: create_qp with an SRQ");
        n.qp = std::move(q2.value);
        n.psn = 0x900;
        std::memset(n.buf.data, 0, kStreamSize);
        publish(dir, "info.b2", my_info(n));
        const Info c = wait_info(dir, "info.c");
        connect(n, c);
        {
            Sge rs{uintptr_t(n.buf.data) + 4 * kChunk, 64, n.mr->lkey()};
            RecvWr r{500, nullptr, &rs, 1};
            const RecvWr* bad_r = nullptr;
            check(n.qp->post_recv(&r, &bad_r) == Status::invalid_argument, "b: post_recv on an SRQ QP refused");
            check_st(srq.value->post_recv(&r, &bad_r), "b: post_srq_recv");
            check(bad_r == nullptr, "b: post_srq_recv bad_wr");
        }
        publish(dir, "ready.b2", {});
        poll_n(*n.rcq, wc, 1, "b: c's SEND");
        expect_wc(wc[0], 500, WcStatus::success, WcOpcode::recv, 64, "b: c's SEND");
        expect_pattern(n.buf.data, kChunk, 9, "c's WRITE into b");
        expect_pattern(n.buf.data + 4 * kChunk, 64, 19, "c's SEND into b");
        check(n.buf.data[kChunk] == 0, "c's WRITE past its length");
        publish(dir, "done.b2", {});
        check_st(n.qp->destroy(), "b: destroy the SRQ QP");
        check_st(srq.value->destroy(), "b: destroy_srq");
        teardown(n);
        std::printf("OK stream b (%" PRIu64 " receives before a was killed)\n", recvs);
        return 0;
    }
    setup(n, sock, kStreamSize);  // c
    fill(n.buf.data, kChunk, 9);
    fill(n.buf.data + kChunk, 64, 19);
    publish(dir, "info.c", my_info(n));
    const Info b = wait_info(dir, "info.b2");
    connect(n, b);
    wait_info(dir, "ready.b2");
    Sge s1{uintptr_t(n.buf.data), kChunk, n.mr->lkey()}, s2{uintptr_t(n.buf.data) + kChunk, 64, n.mr->lkey()};
    SendWr w[2];
    w[0].wr_id = 1;
    w[0].opcode = WrOpcode::rdma_write;
    w[0].sg_list = &s1;
    w[0].rdma = {num(b, "addr"), uint32_t(num(b, "rkey"))};
    w[1].wr_id = 2;
    w[1].opcode = WrOpcode::send;
    w[1].sg_list = &s2;
    for (auto& x : w) x.num_sge = 1, x.send_flags = send_flag::signaled;
    w[0].next = &w[1];
    const SendWr* bad = nullptr;
    check_st(n.qp->post_send(w, &bad), "c: post_send");
    Wc wc[2];
    poll_n(*n.scq, wc, 2, "c: send CQ");
    expect_wc(wc[0], 1, WcStatus::success, WcOpcode::rdma_write, kChunk, "c: WRITE");
    expect_wc(wc[1], 2, WcStatus::success, WcOpcode::send, 64, "c: SEND");
    wait_info(dir, "done.b2");
    teardown(n);
    std::printf("OK stream c\n");
    return 0;
}

// ---- ud: SENDs through address handles ----
constexpr uint32_t kGrh = 40;  // a UD receive's GRH (IBTA 11.4.1.1)
constexpr uint32_t kQkey = 0x11111111;

void ud_connect(Node& n) {
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    a.qkey = kQkey;
    check_st(n.qp->modify(a, qp_attr::state | qp_attr::pkey_index | qp_attr::port | qp_attr::qkey).status, "UD to INIT");
    a.qp_state = QpState::rtr;
    check_st(n.qp->modify(a, qp_attr::state).status, "UD to RTR");
    a.qp_state = QpState::rts;
    a.sq_psn = n.psn;
    check_st(n.qp->modify(a, qp_attr::state | qp_attr::sq_psn).status, "UD to RTS");
}

int run_ud(const std::string& sock, const std::string& dir, char role) {
    Node n;
    n.psn = role == 'a' ? 0x10 : 0x20;
    open_ctx(n, sock);
    auto b = n.ctx->alloc_buffer(8192);
    check_st(b.status, "alloc_buffer");
    n.buf = b.value;
    n.pd = std::move(n.ctx->alloc_pd().value);
    check(n.pd != nullptr, "alloc_pd");
    auto mr = n.ctx->reg_mr(*n.pd, n.buf.data, 8192, access::local_write);
    check_st(mr.status, "reg_mr");
    n.mr = std::move(mr.value);
    n.scq = std::move(n.ctx->create_cq(16).value);
    n.rcq = std::move(n.ctx->create_cq(16).value);
    check(n.scq && n.rcq, "create_cq");
    api::QpInitAttr init;
    init.send_cq = n.scq.get();
    init.recv_cq = n.rcq.get();
    init.qp_type = QpType::ud;
    init.cap.max_send_wr = init.cap.max_recv_wr = 4;
    init.cap.max_inline_data = 64;
    auto q = n.ctx->create_qp(*n.pd, init);
    check_st(q.status, "create_qp UD");
    check(init.cap.max_inline_data >= 64, "UD inline granted");
    n.qp = std::move(q.value);
    ud_connect(n);
    if (role == 'b') {
        if (std::ifstream(dir + "/stall")) {  // the test stops b's daemon; the receives go to its ring only
            publish(dir, "rts.b", {});
            wait_info(dir, "stopped");
        }
        for (uint64_t i = 0; i < 2; ++i) post_recv(n, 200 + i, 1024 * i, 1024);
        publish(dir, "info.b", my_info(n));
        Wc wc[2];
        poll_n(*n.rcq, wc, 2, "b: UD receives");
        const Info a = wait_info(dir, "info.a");
        for (int i = 0; i < 2; ++i) {
            const uint32_t len = i == 0 ? 500 : 48;
            expect_wc(wc[i], 200 + uint64_t(i), WcStatus::success, WcOpcode::recv, len + kGrh, "b: UD receive");
            check(wc[i].src_qp == num(a, "qpn"), "b: UD src_qp is a's QPN");
            check(wc[i].wc_flags & wc_flag::grh, "b: UD CQE has the GRH flag");
            check(wc[i].sgid == gid_from(a.at("gid")), "b: UD CQE names a's GID");
            expect_pattern(n.buf.data + 1024 * i + kGrh, len, 40 + uint32_t(i), "b: UD payload");
        }
        publish(dir, "done.b", {});
        teardown(n);
        std::printf("OK ud b\n");
        return 0;
    }
    fill(n.buf.data, 500, 40);
    fill(n.buf.data + 1024, 48, 41);
    publish(dir, "info.a", my_info(n));
    const Info bi = wait_info(dir, "info.b");
    AhAttr aa;
    aa.dgid = gid_from(bi.at("gid"));
    aa.sgid_index = uint8_t(n.ctx->gid_index());
    auto ah = n.ctx->create_ah(*n.pd, aa);
    check_st(ah.status, "create_ah");
    Sge s1{uintptr_t(n.buf.data), 500, n.mr->lkey()}, s2{uintptr_t(n.buf.data) + 1024, 48, 0};
    SendWr w[2];
    for (int i = 0; i < 2; ++i) {
        w[i].wr_id = 300 + uint64_t(i);
        w[i].num_sge = 1;
        w[i].send_flags = send_flag::signaled;
        w[i].ud = {ah.value->native(), uint32_t(num(bi, "qpn")), kQkey};
    }
    w[0].sg_list = &s1;
    w[1].sg_list = &s2;
    w[1].send_flags |= send_flag::inline_;  // copied at post: the buffer is changed right after
    w[0].next = &w[1];
    SendWr noah = w[0];
    noah.next = nullptr;
    noah.ud.ah = nullptr;
    const SendWr* bad = nullptr;
    check(n.qp->post_send(&noah, &bad) == Status::no_ah && bad == &noah, "UD send without an AH refused");
    check_st(n.qp->post_send(w, &bad), "a: UD post_send");
    std::memset(n.buf.data + 1024, 0, 48);
    Wc wc[2];
    poll_n(*n.scq, wc, 2, "a: UD send CQ");
    expect_wc(wc[0], 300, WcStatus::success, WcOpcode::send, 500, "a: UD SEND");
    expect_wc(wc[1], 301, WcStatus::success, WcOpcode::send, 48, "a: UD SEND inline");
    publish(dir, "sent.a", {});
    wait_info(dir, "done.b");
    check_st(ah.value->destroy(), "destroy_ah");
    teardown(n);
    std::printf("OK ud a\n");
    return 0;
}

// ---- churn: every kind of object, loopback transfers through them, ROUNDS times ----
int run_churn(const std::string& sock, int rounds) {
    Node n;
    open_ctx(n, sock);
    constexpr size_t kBytes = 16384;
    constexpr uint32_t kRcLen = 3000, kUdLen = 200;
    for (int r = 0; r <= rounds; ++r) {
        const std::string at = "churn round " + std::to_string(r) + ": ";
        auto b = n.ctx->alloc_buffer(kBytes);
        check_st(b.status, at + "alloc_buffer");
        n.buf = b.value;
        uint8_t* m = n.buf.data;
        auto pd = n.ctx->alloc_pd();
        check_st(pd.status, at + "alloc_pd");
        n.pd = std::move(pd.value);
        auto mr = n.ctx->reg_mr(*n.pd, m, kBytes, kAllAccess);
        check_st(mr.status, at + "reg_mr");
        n.mr = std::move(mr.value);
        auto ch = n.ctx->create_comp_channel();
        check_st(ch.status, at + "create_comp_channel");
        n.ch = std::move(ch.value);
        auto s = n.ctx->create_cq(32);
        check_st(s.status, at + "create_cq (send)");
        n.scq = std::move(s.value);
        auto rc = n.ctx->create_cq(32, n.ch.get(), 0x5000 + uint64_t(r));
        check_st(rc.status, at + "create_cq (recv, channel)");
        n.rcq = std::move(rc.value);
        check_st(n.rcq->req_notify(false), at + "req_notify");
        SrqAttr sa{8, 1, 0};
        auto srq = n.ctx->create_srq(*n.pd, sa);
        check_st(srq.status, at + "create_srq");
        api::QpInitAttr init;
        init.send_cq = n.scq.get();
        init.recv_cq = n.rcq.get();
        init.srq = srq.value.get();
        init.cap.max_send_wr = 8;
        init.cap.max_send_sge = 1;
        auto q = n.ctx->create_qp(*n.pd, init);
        check_st(q.status, at + "create_qp RC on the SRQ");
        n.qp = std::move(q.value);
        n.psn = 0x1000 + uint32_t(r);
        connect(n, my_info(n));  // to itself: the daemon loops its own address back
        Sge rs{uintptr_t(m) + 4096, 4096, n.mr->lkey()};
        RecvWr rw{7, nullptr, &rs, 1};
        const RecvWr* bad_r = nullptr;
        check_st(srq.value->post_recv(&rw, &bad_r), at + "post_srq_recv");
        Node u;  // the UD QP, on the same PD, MR and CQs
        init = {};
        init.send_cq = n.scq.get();
        init.recv_cq = n.rcq.get();
        init.qp_type = QpType::ud;
        init.cap.max_send_wr = init.cap.max_recv_wr = 4;
        auto uq = n.ctx->create_qp(*n.pd, init);
        check_st(uq.status, at + "create_qp UD");
        u.qp = std::move(uq.value);
        u.psn = 0x2000;
        ud_connect(u);
        Sge us{uintptr_t(m) + 8192, 1024, n.mr->lkey()};
        RecvWr uw{8, nullptr, &us, 1};
        check_st(u.qp->post_recv(&uw, &bad_r), at + "post_recv UD");
        AhAttr aa;
        aa.dgid = n.ctx->gid();
        aa.sgid_index = uint8_t(n.ctx->gid_index());
        auto ah = n.ctx->create_ah(*n.pd, aa);
        check_st(ah.status, at + "create_ah");

        fill(m, kRcLen, uint32_t(r));
        fill(m + 12288, kUdLen, uint32_t(r) + 1);
        Sge s1{uintptr_t(m), kRcLen, n.mr->lkey()}, s2{uintptr_t(m) + 12288, kUdLen, n.mr->lkey()};
        SendWr w1, w2;
        w1.wr_id = 1;
        w1.opcode = WrOpcode::send;
        w1.sg_list = &s1;
        w1.num_sge = 1;
        w1.send_flags = send_flag::signaled;
        w2 = w1;
        w2.wr_id = 2;
        w2.sg_list = &s2;
        w2.ud = {ah.value->native(), u.qp->qpn(), kQkey};
        const SendWr* bad = nullptr;
        check_st(n.qp->post_send(&w1, &bad), at + "post_send RC");
        check_st(u.qp->post_send(&w2, &bad), at + "post_send UD");
        Wc wc[2];
        poll_n(*n.scq, wc, 2, at + "send CQ");
        for (const Wc& c : wc)
            expect_wc(c, c.wr_id, WcStatus::success, WcOpcode::send, c.wr_id == 1 ? kRcLen : kUdLen, at + "send CQE");
        check(wc[0].wr_id + wc[1].wr_id == 3, at + "one CQE per send");
        poll_n(*n.rcq, wc, 2, at + "receive CQ");
        for (const Wc& c : wc)
            expect_wc(c, c.wr_id, WcStatus::success, WcOpcode::recv, c.wr_id == 7 ? kRcLen : kUdLen + kGrh,
                      at + "receive CQE");
        check(wc[0].wr_id + wc[1].wr_id == 15, at + "one CQE per receive");
        expect_pattern(m + 4096, kRcLen, uint32_t(r), at + "RC SEND payload");
        expect_pattern(m + 8192 + kGrh, kUdLen, uint32_t(r) + 1, at + "UD SEND payload");
        CqEvent ev;
        check(n.ch->wait_cq_event(ev, kWaitMs) && ev.cq_handle == n.rcq->handle(), at + "completion event");
        n.rcq->ack_events(1);
        std::printf("%sok\n", at.c_str());
        if (r == rounds) {
            std::printf("churn: exiting with the objects of round %d held\n", r);
            std::fflush(stdout);
            std::_Exit(0);  // no destructor runs: the daemon cleans them up
        }
        check_st(ah.value->destroy(), at + "destroy_ah");
        check_st(u.qp->destroy(), at + "destroy_qp UD");
        check_st(n.qp->destroy(), at + "destroy_qp RC");
        check_st(srq.value->destroy(), at + "destroy_srq");
        check_st(n.scq->destroy(), at + "destroy_cq (send)");
        check_st(n.rcq->destroy(), at + "destroy_cq (recv)");
        n.ch.reset();
        check_st(n.mr->destroy(), at + "dereg_mr");
        check_st(n.pd->destroy(), at + "dealloc_pd");
        n.ctx->free_buffer(n.buf);
    }
    return 0;
}

// ---- hold: a client present when the daemon stops ----
int run_hold(const std::string& sock, const std::string& dir) {
    Node n;
    setup(n, sock, 65536);  // 64 KiB, every byte read by setup's check: the memfd has each page
    // A second MR whose memory was never touched: the memfd has no page of it, and the daemon's
    // mapping must allocate none (check_daemon reads both in the daemon's smaps).
    auto spare = n.ctx->alloc_buffer(1 << 20);
    check_st(spare.status, "alloc_buffer (untouched)");
    auto smr = n.ctx->reg_mr(*n.pd, spare.value.data, 1 << 20, access::local_write);
    check_st(smr.status, "reg_mr (untouched)");
    publish(dir, "held", {});
    const auto end = Clock::now() + std::chrono::seconds(30);
    while (n.ctx->alive()) {
        check(Clock::now() < end, "hold: the daemon's shutdown never reached us");
        n.ctx->poll();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // After the shutdown event every call fails with a typed Status, without a hang.
    auto pd = n.ctx->alloc_pd();
    check(pd.status == Status::bad_handle, std::string("alloc_pd after shutdown: ") + name(pd.status));
    Wc wc[4];
    check(n.scq->poll(wc) == 0, "hold: no completion");
    std::printf("OK hold\n");
    return 0;
}

// ---- hello: clients that come and go ----
int run_hello(const std::string& sock, int n) {
    for (int i = 0; i < n; ++i) {
        Node c;
        open_ctx(c, sock);
    }
    std::printf("OK hello\n");
    return 0;
}

// ---- bigmr: a large reg_mr does not stop the daemon answering other clients ----
uint64_t daemon_counter(const api::Stats& st, const char* name) {
    for (const auto& [k, v] : st.daemon)
        if (k == name) return v;
    check(false, std::string("no daemon counter ") + name);
    return 0;
}

int run_bigmr(const std::string& sock, uint32_t mib) {
    Node a, b;  // two connections: two clients of the daemon
    open_ctx(a, sock);
    open_ctx(b, sock);
    const size_t bytes = size_t(mib) << 20;
    auto buf = a.ctx->alloc_buffer(bytes);
    check_st(buf.status, "alloc_buffer (large)");
    std::memset(buf.value.data, 0x5a, bytes);  // every page in the memfd: the daemon faults each in
    auto pd = a.ctx->alloc_pd();
    check_st(pd.status, "alloc_pd");
    // The other client's reply shows the registration still being mapped: the io thread served
    // it meanwhile (a daemon that maps on the io thread answers only once the mapping is done).
    // The mapping takes long against a request's round trip, but the reader may still miss it:
    // a few attempts.
    int seen_in = 0, attempt = 0;
    uint64_t answered = 0;
    while (!seen_in && attempt < 5) {
        ++attempt;
        std::atomic<bool> done{false};
        Result<std::unique_ptr<api::Mr>> mr;
        std::thread t([&] {
            mr = a.ctx->reg_mr(*pd.value, buf.value.data, bytes, access::local_write);
            done.store(true);
        });
        while (!done.load()) {
            api::Stats st;
            check_st(b.ctx->read_stats(st), "read_stats during the reg_mr");
            ++answered;
            if (daemon_counter(st, "mr_maps_pending") >= 1) seen_in = attempt;
        }
        t.join();
        check_st(mr.status, "reg_mr (large)");
        check(mr.value->length() == bytes, "reg_mr (large): length");
        check_st(mr.value->destroy(), "dereg_mr (large)");
    }
    api::Stats st;
    check_st(b.ctx->read_stats(st), "read_stats after");
    check(daemon_counter(st, "mr_maps_pending") == 0, "mr_maps_pending back to 0");
    std::printf("bigmr: %u MiB registered %d time(s), %" PRIu64 " replies to the other client meanwhile, "
                "mr_maps_pending seen in attempt %d\n", mib, attempt, answered, seen_in);
    check(seen_in > 0, "the other client was never answered while the MR was being mapped");
    check_st(pd.value->destroy(), "dealloc_pd");
    a.ctx->free_buffer(buf.value);
    std::printf("OK bigmr\n");
    return 0;
}

// ---- cq: against a fake daemon (check_client_proto.py): rings that cannot be used, a good one ----
int count_fds() {
    int n = 0;
    for (int fd = 0; fd < 1024; ++fd)
        if (::fcntl(fd, F_GETFD) != -1) ++n;
    return n;
}

int run_cq(const std::string& sock) {
    Node n;
    open_ctx(n, sock);
    const int fds0 = count_fds();
    for (int i = 0; i < 3; ++i) {
        auto cq = n.ctx->create_cq(16);
        std::printf("create_cq %d %s\n", i, name(cq.status));
        if (!cq.ok()) continue;
        Wc wc[4];
        const auto end = Clock::now() + std::chrono::seconds(10);
        int got = 0;
        while (got == 0 && Clock::now() < end) {
            got = cq.value->poll(wc);
            if (!got) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        for (int k = 0; k < got; ++k)
            std::printf("wc %" PRIu64 " %s %s %u\n", wc[k].wr_id, id(wc[k].status), name(wc[k].opcode), wc[k].byte_len);
        std::printf("destroy_cq %s\n", name(cq.value->destroy()));
    }
    std::printf("fds %d %d\n", fds0, count_fds());
    return 0;
}

int run_res(const std::string& sock) {
    Node n;
    open_ctx(n, sock);
    for (size_t k = 0; k < size_t(api::ResKind::count); ++k) {
        std::vector<api::ResEntry> v;
        check_st(n.ctx->res_list(api::ResKind(k), v), std::string("res_list ") + api::kResKindName[k]);
        for (const auto& e : v) {
            std::printf("res %s %u %u %s", api::kResKindName[k], e.client, e.pid, e.comm.empty() ? "-" : e.comm.c_str());
            for (const auto& [a, b] : e.attrs) std::printf(" %s=%s", a.c_str(), b.c_str());
            std::printf("\n");
        }
    }
    api::Stats st;
    check_st(n.ctx->read_stats(st), "read_stats");
    for (const auto& [k, v] : st.device) std::printf("stat %s %" PRIu64 "\n", k.c_str(), v);
    for (const auto& [k, v] : st.daemon) std::printf("daemon %s %" PRIu64 "\n", k.c_str(), v);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "res" && argc == 3) return run_res(argv[2]);
    if (mode == "hold" && argc == 4) return run_hold(argv[2], argv[3]);
    if (mode == "hello" && argc == 4 && std::atoi(argv[3]) > 0) return run_hello(argv[2], std::atoi(argv[3]));
    if (mode == "bigmr" && argc == 4 && std::atoi(argv[3]) > 0) return run_bigmr(argv[2], uint32_t(std::atoi(argv[3])));
    if (mode == "cq" && argc == 3) return run_cq(argv[2]);
    if (mode == "churn" && argc == 4 && std::atoi(argv[3]) > 0) return run_churn(argv[2], std::atoi(argv[3]));
    if (argc != 5 || std::strlen(argv[4]) != 1) {
        std::fprintf(stderr, "usage: daemon_node pair|refuse|stream|ud SOCK DIR ROLE | hold SOCK DIR | bigmr SOCK MIB | hello SOCK N | churn SOCK ROUNDS | res SOCK\n");
        return 2;
    }
    const char role = argv[4][0];
    if (mode == "pair" && (role == 'a' || role == 'b')) return run_pair(argv[2], argv[3], role);
    if (mode == "refuse" && (role == 'a' || role == 'b')) return run_refuse(argv[2], argv[3], role);
    if (mode == "stream" && (role == 'a' || role == 'b' || role == 'c')) return run_stream(argv[2], argv[3], role);
    if (mode == "ud" && (role == 'a' || role == 'b')) return run_ud(argv[2], argv[3], role);
    std::fprintf(stderr, "daemon_node: unknown mode/role\n");
    return 2;
}
