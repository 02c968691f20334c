// hcaemu's librdmacm (tools/rdmacm) against a fake api::Cm written here: the id layer and the
// event routing through the library's own rdma_* functions (rdmacm_core, without its version
// script). The fake is a CM on one device that connects its ids to each other (a loopback
// fabric): a connect to a port someone listens on queues the listener's connect request, accept
// the connect response, establish the passive side's established, disconnect both sides'
// disconnected; no listener: rejected with reason 8 (IBTA Table 109, invalid service ID).
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <thread>

#include "tools/rdmacm/rdmacm.hpp"

using namespace hcaemu;

namespace {

constexpr const char* kIp = "198.18.0.1";

sockaddr_in addr4(const char* ip, uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

Gid gid_of(const sockaddr_storage& s) {
    Gid g{};
    g[10] = g[11] = 0xff;
    std::memcpy(g.data() + 12, &reinterpret_cast<const sockaddr_in*>(&s)->sin_addr, 4);
    return g;
}

class FakeCm final : public api::Cm {
public:
    struct Id {
        pkt::RdmaPs ps;
        QpType qp_type;
        uint64_t context;
        sockaddr_storage src{}, dst{};
        bool bound = false, listening = false, route = false;
        uint32_t peer = 0;
        std::map<api::CmOption, uint32_t> options;
    };
    std::map<uint32_t, Id> ids;
    std::deque<api::CmEvent> events;
    uint32_t next = 1;
    uint16_t next_port = 40000;
    int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    uint32_t destroyed = 0;
    sockaddr_storage own{};

    explicit FakeCm(const char* ip = kIp) {
        const sockaddr_in a = addr4(ip, 0);
        std::memcpy(&own, &a, sizeof a);
    }
    ~FakeCm() override { ::close(efd); }

    void push(api::CmEventType t, uint32_t id, int32_t status = 0, const api::CmConnParam* p = nullptr,
              uint32_t listen = 0) {
        api::CmEvent e;
        e.type = t;
        e.id = id;
        e.status = status;
        e.listen_id = listen;
        e.context = ids.count(id) ? ids[id].context : 0;
        if (p) e.param = *p;
        events.push_back(e);
        const uint64_t one = 1;
        (void)!::write(efd, &one, sizeof one);
    }
    static uint16_t port(const sockaddr_storage& s) { return ntohs(reinterpret_cast<const sockaddr_in*>(&s)->sin_port); }

    int create_id(pkt::RdmaPs ps, QpType qt, uint64_t context, uint32_t& id) override {
        id = next++;
        ids[id] = Id{ps, qt, context, {}, {}, false, false, false, 0, {}};
        return 0;
    }
    int destroy_id(uint32_t id, uint32_t& reported) override {
        if (!ids.erase(id)) return EINVAL;
        std::erase_if(events, [&](const api::CmEvent& e) { return e.id == id; });
        reported = 0;
        ++destroyed;
        return 0;
    }
    int bind(uint32_t id, const sockaddr* addr) override {
        auto it = ids.find(id);
        if (it == ids.end() || it->second.bound) return EINVAL;
        sockaddr_storage a{};
        std::memcpy(&a, addr, sizeof(sockaddr_in));
        const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
        if (in->sin_addr.s_addr != htonl(INADDR_ANY) &&
            in->sin_addr.s_addr != reinterpret_cast<sockaddr_in*>(&own)->sin_addr.s_addr)
            return ENODEV;
        if (!port(a)) reinterpret_cast<sockaddr_in*>(&a)->sin_port = htons(next_port++);
        for (auto& [n, o] : ids)
            if (n != id && o.bound && o.ps == it->second.ps && port(o.src) == port(a)) return EADDRINUSE;
        it->second.src = a;
        it->second.bound = true;
        return 0;
    }
    int resolve_addr(uint32_t id, const sockaddr*, const sockaddr* dst, int) override {
        auto it = ids.find(id);
        if (it == ids.end()) return EINVAL;
        if (!it->second.bound) {
            sockaddr_storage a = own;
            reinterpret_cast<sockaddr_in*>(&a)->sin_port = htons(next_port++);
            it->second.src = a;
            it->second.bound = true;
        }
        std::memcpy(&it->second.dst, dst, sizeof(sockaddr_in));
        push(api::CmEventType::addr_resolved, id);
        return 0;
    }
    int resolve_route(uint32_t id, int) override {
        auto it = ids.find(id);
        if (it == ids.end()) return EINVAL;
        it->second.route = true;
        push(api::CmEventType::route_resolved, id);
        return 0;
    }
    int query(uint32_t id, api::CmIdInfo& out) override {
        auto it = ids.find(id);
        if (it == ids.end()) return EINVAL;
        out = {};
        out.src = it->second.src;
        out.dst = it->second.dst;
        out.sgid = gid_of(it->second.src);
        if (it->second.dst.ss_family) out.dgid = gid_of(it->second.dst);
        out.route_resolved = it->second.route;
        out.path_mtu = Mtu::mtu1024;
        return 0;
    }
    int listen(uint32_t id, int) override {
        auto it = ids.find(id);
        if (it == ids.end() || !it->second.bound) return EINVAL;
        it->second.listening = true;
        return 0;
    }
    int connect(uint32_t id, const api::CmConnParam& p) override {
        auto it = ids.find(id);
        if (it == ids.end()) return EINVAL;
        for (auto& [n, o] : ids)
            if (o.listening && port(o.src) == port(it->second.dst)) {
                const uint32_t child = next++;
                sockaddr_storage src = own;  // the address the request came to, the listener's port
                reinterpret_cast<sockaddr_in*>(&src)->sin_port = htons(port(o.src));
                ids[child] = Id{o.ps, o.qp_type, o.context, src, it->second.src, true, false, true, id, {}};
                it->second.peer = child;
                push(api::CmEventType::connect_request, child, 0, &p, n);
                return 0;
            }
        push(api::CmEventType::rejected, id, 8);  // invalid service ID: nobody listens
        return 0;
    }
    int accept(uint32_t id, const api::CmConnParam& p) override {
        auto it = ids.find(id);
        if (it == ids.end() || !it->second.peer) return EINVAL;
        if (it->second.qp_type != QpType::ud) {
            push(api::CmEventType::connect_response, it->second.peer, 0, &p);
            return 0;
        }
        api::CmConnParam u = p;  // a SIDR_REP: where the passive side's QP is
        u.qkey = p.qkey;
        u.ah.dgid = gid_of(it->second.src);
        u.ah.hop_limit = 64;
        u.ah.port_num = 1;
        push(api::CmEventType::established, it->second.peer, 0, &u);
        return 0;
    }
    int reject(uint32_t id, const uint8_t* pd, uint8_t len) override {
        auto it = ids.find(id);
        if (it == ids.end() || !it->second.peer) return EINVAL;
        api::CmConnParam p;
        if (pd) std::memcpy(p.private_data, pd, len);
        p.private_data_len = len;
        push(api::CmEventType::rejected, it->second.peer, 28, &p);  // consumer reject
        return 0;
    }
    int disconnect(uint32_t id) override {
        auto it = ids.find(id);
        if (it == ids.end()) return EINVAL;
        const uint32_t peer = it->second.peer ? it->second.peer : find_peer(id);
        push(api::CmEventType::disconnected, id);
        if (peer && ids.count(peer)) push(api::CmEventType::disconnected, peer);
        return 0;
    }
    int establish(uint32_t id) override {
        const uint32_t peer = find_peer(id);
        if (!peer) return EINVAL;
        push(api::CmEventType::established, peer);
        return 0;
    }
    int init_qp_attr(uint32_t, QpState, QpAttr&, uint32_t&) override { return EINVAL; }
    int set_option(uint32_t id, api::CmOption opt, uint32_t value) override {
        auto it = ids.find(id);
        if (it == ids.end()) return EINVAL;
        it->second.options[opt] = value;
        return 0;
    }
    bool get_event(api::CmEvent& ev) override {
        if (events.empty()) return false;
        ev = events.front();
        events.pop_front();
        if (events.empty()) {
            uint64_t v;
            (void)!::read(efd, &v, sizeof v);
        }
        return true;
    }
    int fd() const override { return efd; }

    uint32_t find_peer(uint32_t id) {
        for (auto& [n, o] : ids)
            if (o.peer == id) return n;
        return 0;
    }
};

// The one fake device, made before the library's first call (its device source).
// Two fake devices, fake0 (198.18.0.1) and fake1 (198.18.1.1), each its own CM and lock.
struct Fixture {
    FakeCm cm, cm2{"198.18.1.1"};
    std::mutex mu, mu2;
    ibv_device dev{}, dev2{};
    ibv_context ctx{}, ctx2{};
    Fixture() {
        dev.transport_type = dev2.transport_type = IBV_TRANSPORT_IB;
        std::strcpy(dev.name, "fake0");
        std::strcpy(dev2.name, "fake1");
        ctx.device = &dev;
        ctx2.device = &dev2;
        rdmacm::set_device_source([this](std::vector<std::unique_ptr<rdmacm::Device>>& out) {
            out.push_back(device(ctx, cm, mu));
            out.push_back(device(ctx2, cm2, mu2));
            return true;
        });
    }
    static std::unique_ptr<rdmacm::Device> device(ibv_context& c, FakeCm& f, std::mutex& m) {
        auto d = std::make_unique<rdmacm::Device>();
        d->verbs = &c;
        d->lock = [&f, &m] {
            m.lock();
            return static_cast<api::Cm*>(&f);
        };
        d->unlock = [&m] { m.unlock(); };
        d->ip = f.own;
        d->max_init_depth = d->max_resp_res = 16;
        return d;
    }
    std::lock_guard<std::mutex> hold() { return std::lock_guard<std::mutex>(mu); }
    std::lock_guard<std::mutex> hold2() { return std::lock_guard<std::mutex>(mu2); }
};

Fixture& fx() {
    static Fixture f;
    return f;
}

// The next event on `ch` within 2 s, of type `want`.
rdma_cm_event* expect_event(rdma_event_channel* ch, rdma_cm_event_type want) {
    pollfd p{ch->fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 2000) == 1);
    rdma_cm_event* ev = nullptr;
    REQUIRE(rdma_get_cm_event(ch, &ev) == 0);
    INFO(rdma_event_str(ev->event));
    REQUIRE(ev->event == want);
    return ev;
}

std::string priv(const void* p, uint8_t len) { return p ? std::string(static_cast<const char*>(p), len) : ""; }

}  // namespace

TEST_CASE("rdmacm: bind picks the device by address; a second bind to the port is EADDRINUSE") {
    fx();
    rdma_event_channel* ch = rdma_create_event_channel();
    REQUIRE(ch);
    rdma_cm_id *a = nullptr, *b = nullptr, *c = nullptr, *w = nullptr;
    REQUIRE(rdma_create_id(ch, &a, nullptr, RDMA_PS_TCP) == 0);
    REQUIRE(rdma_create_id(ch, &b, nullptr, RDMA_PS_TCP) == 0);
    REQUIRE(rdma_create_id(ch, &c, nullptr, RDMA_PS_TCP) == 0);
    REQUIRE(rdma_create_id(ch, &w, nullptr, RDMA_PS_TCP) == 0);
    CHECK(a->qp_type == IBV_QPT_RC);
    sockaddr_in s = addr4(kIp, 7471);
    REQUIRE(rdma_bind_addr(a, reinterpret_cast<sockaddr*>(&s)) == 0);
    CHECK(a->verbs == &fx().ctx);
    CHECK(ntohs(rdma_get_src_port(a)) == 7471);
    CHECK(a->route.addr.src_sin.sin_addr.s_addr == s.sin_addr.s_addr);
    CHECK(a->port_num == 1);
    errno = 0;
    CHECK(rdma_bind_addr(b, reinterpret_cast<sockaddr*>(&s)) == -1);
    CHECK(errno == EADDRINUSE);
    sockaddr_in other = addr4("198.18.9.9", 7472);
    errno = 0;
    CHECK(rdma_bind_addr(c, reinterpret_cast<sockaddr*>(&other)) == -1);
    CHECK(errno == EADDRNOTAVAIL);
    CHECK(c->verbs == nullptr);
    sockaddr_in any = addr4("0.0.0.0", 0);
    REQUIRE(rdma_bind_addr(w, reinterpret_cast<sockaddr*>(&any)) == 0);
    CHECK(w->verbs == nullptr);  // a wildcard binds to no device, as the kernel's
    CHECK(ntohs(rdma_get_src_port(w)) >= 40000);
    errno = 0;
    CHECK(rdma_bind_addr(w, reinterpret_cast<sockaddr*>(&any)) == -1);  // bound already
    CHECK(errno == EINVAL);
    {
        // The library's lock order is its own lock, then a device's: no call into it while
        // holding fake1's (ThreadSanitizer's lock-order check).
        const uint16_t wport = ntohs(rdma_get_src_port(w));
        auto g = fx().hold2();  // the wildcard: a CM id on fake1 too, on the same port
        REQUIRE(fx().cm2.ids.size() == 1);
        CHECK(FakeCm::port(fx().cm2.ids.begin()->second.src) == wport);
    }
    sockaddr_in on1 = addr4("198.18.1.1", 7471);  // the same port on fake1's address: free there
    rdma_cm_id* d1 = nullptr;
    REQUIRE(rdma_create_id(ch, &d1, nullptr, RDMA_PS_TCP) == 0);
    REQUIRE(rdma_bind_addr(d1, reinterpret_cast<sockaddr*>(&on1)) == 0);
    CHECK(d1->verbs == &fx().ctx2);
    const uint32_t before = fx().cm.destroyed, before2 = fx().cm2.destroyed;
    for (rdma_cm_id* id : {a, b, c, w, d1}) CHECK(rdma_destroy_id(id) == 0);
    CHECK(fx().cm.destroyed == before + 2);    // a's and w's CM ids (b's and c's failed binds left none)
    CHECK(fx().cm2.destroyed == before2 + 2);  // w's and d1's
    {
        auto g = fx().hold();
        CHECK(fx().cm.ids.empty());
    }
    rdma_destroy_event_channel(ch);
}

TEST_CASE("rdmacm: the channel fd is readable only with an event queued; non-blocking reads EAGAIN") {
    fx();
    rdma_event_channel* ch = rdma_create_event_channel();
    REQUIRE(ch);
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ee{};
    ee.events = EPOLLIN;
    REQUIRE(::epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ee) == 0);
    CHECK(::epoll_wait(ep, &ee, 1, 50) == 0);
    REQUIRE(::fcntl(ch->fd, F_SETFL, ::fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0);
    rdma_cm_event* ev = nullptr;
    errno = 0;
    CHECK(rdma_get_cm_event(ch, &ev) == -1);
    CHECK(errno == EAGAIN);

    rdma_cm_id* id = nullptr;
    int ctx_tag = 7;
    REQUIRE(rdma_create_id(ch, &id, &ctx_tag, RDMA_PS_TCP) == 0);
    sockaddr_in dst = addr4("198.18.0.2", 7000);
    REQUIRE(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000) == 0);
    CHECK(id->verbs == &fx().ctx);
    CHECK(::epoll_wait(ep, &ee, 1, 2000) == 1);  // the poller thread delivered it, no call made
    ev = expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
    CHECK(ev->id == id);
    CHECK(ev->status == 0);
    CHECK(ev->id->context == &ctx_tag);
    CHECK(id->route.addr.dst_sin.sin_addr.s_addr == dst.sin_addr.s_addr);
    CHECK(id->route.addr.src_sin.sin_addr.s_addr == addr4(kIp, 0).sin_addr.s_addr);
    CHECK(id->route.addr.addr.ibaddr.sgid.raw[15] == 1);  // ::ffff:198.18.0.1
    CHECK(rdma_ack_cm_event(ev) == 0);
    CHECK(::epoll_wait(ep, &ee, 1, 20) == 0);
    errno = 0;
    CHECK(rdma_get_cm_event(ch, &ev) == -1);
    CHECK(errno == EAGAIN);
    REQUIRE(rdma_resolve_route(id, 2000) == 0);
    ev = expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
    REQUIRE(id->route.num_paths == 1);
    CHECK(id->route.path_rec->mtu == IBV_MTU_1024);
    CHECK(id->route.path_rec->dgid.raw[15] == 2);
    rdma_ack_cm_event(ev);
    CHECK(rdma_destroy_id(id) == 0);
    ::close(ep);
    rdma_destroy_event_channel(ch);
}

// rping: its main thread destroys the channel while its CM thread waits in rdma_get_cm_event. The
// waiter stays blocked for good, as on the kernel's channel: the fd stays open (a read again after
// a leaked restart code must not get EBADF, nor read a file opened since on the same number), and
// a wake-up on it does not return either.
TEST_CASE("rdmacm: a channel destroyed while a thread waits in rdma_get_cm_event keeps that thread blocked") {
    fx();
    rdma_event_channel* ch = rdma_create_event_channel();
    REQUIRE(ch);
    const int fd = ch->fd;
    static std::atomic<int> returned{0};
    std::thread t([ch] {
        rdma_cm_event* ev = nullptr;
        (void)rdma_get_cm_event(ch, &ev);
        returned = 1;
    });
    const auto readers = [ch] {
        const std::lock_guard g(rdmacm::core().mu);
        return reinterpret_cast<rdmacm::ChannelW*>(ch)->gate.readers;
    };
    for (int i = 0; i < 2000 && readers() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(readers() == 1);
    rdma_destroy_event_channel(ch);
    CHECK(::fcntl(fd, F_GETFD) != -1);  // still the channel's: not closed under the waiter
    rdma_cm_event* ev = nullptr;
    errno = 0;
    CHECK(rdma_get_cm_event(ch, &ev) == -1);  // destroyed for every new call
    CHECK(errno == EINVAL);
    const uint64_t one = 1;
    REQUIRE(::write(fd, &one, sizeof one) == ssize_t(sizeof one));  // the waiter's read returns
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(returned == 0);
    CHECK(readers() == 1);
    t.detach();  // blocked until the process ends
}

// perftest 4.5-0.17's client, its data connection REJected, retries with the ids of a `nodes` array
// it has freed and destroys its channel twice (check_rdmacm.py, perftest_rej): such pointers are
// EINVAL, counted, never dereferenced.
TEST_CASE("rdmacm: a freed id or channel, or bytes that are none, fail with EINVAL and are counted") {
    fx();
    rdma_event_channel* ch = rdma_create_event_channel();
    REQUIRE(ch);
    rdma_cm_id* id = nullptr;
    REQUIRE(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) == 0);
    REQUIRE(rdma_destroy_id(id) == 0);
    const uint64_t before = rdmacm::core().stale_handles.load();
    sockaddr_in dst = addr4("198.18.0.2", 7000);
    // What perftest read as an id: a sockaddr_in's bytes (198.18.7.1:40003), not a canonical address.
    auto* junk = reinterpret_cast<rdma_cm_id*>(uintptr_t(0x010712c6439c0002ULL));
    for (rdma_cm_id* bad : {id, junk}) {
        errno = 0;
        CHECK(rdma_resolve_addr(bad, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000) == -1);
        CHECK(errno == EINVAL);
        errno = 0;
        CHECK(rdma_destroy_id(bad) == -1);
        CHECK(errno == EINVAL);
        errno = 0;
        CHECK(rdma_connect(bad, nullptr) == -1);
        CHECK(errno == EINVAL);
        CHECK(rdma_get_src_port(bad) == 0);
        rdma_destroy_qp(bad);  // void: nothing happens
    }
    rdma_destroy_event_channel(ch);
    rdma_destroy_event_channel(ch);  // twice: the second is ignored
    rdma_cm_event* ev = nullptr;
    errno = 0;
    CHECK(rdma_get_cm_event(ch, &ev) == -1);
    CHECK(errno == EINVAL);
    rdma_cm_id* on_freed = nullptr;
    errno = 0;
    CHECK(rdma_create_id(ch, &on_freed, nullptr, RDMA_PS_TCP) == -1);
    CHECK(errno == EINVAL);
    CHECK(on_freed == nullptr);
    CHECK(rdmacm::core().stale_handles.load() - before == 13);
}

TEST_CASE("rdmacm: connect, accept, establish and disconnect route to both ids with private data") {
    fx();
    rdma_event_channel* sch = rdma_create_event_channel();
    rdma_event_channel* cch = rdma_create_event_channel();
    REQUIRE((sch && cch));
    rdma_cm_id *listen = nullptr, *client = nullptr;
    int stag = 1, ctag = 2;
    REQUIRE(rdma_create_id(sch, &listen, &stag, RDMA_PS_TCP) == 0);
    REQUIRE(rdma_create_id(cch, &client, &ctag, RDMA_PS_TCP) == 0);
    sockaddr_in any = addr4("0.0.0.0", 7480);
    REQUIRE(rdma_bind_addr(listen, reinterpret_cast<sockaddr*>(&any)) == 0);
    REQUIRE(rdma_listen(listen, 4) == 0);
    sockaddr_in dst = addr4(kIp, 7480);
    REQUIRE(rdma_resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000) == 0);
    rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
    REQUIRE(rdma_resolve_route(client, 2000) == 0);
    rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));

    rdma_conn_param cp{};
    cp.private_data = "hello";
    cp.private_data_len = 5;
    cp.responder_resources = 4;
    cp.initiator_depth = 4;
    CHECK(rdma_connect(client, nullptr) == -1);  // RDMA_PS_TCP without a QP or a parameter
    CHECK(errno == EINVAL);
    REQUIRE(rdma_connect(client, &cp) == 0);
    rdma_cm_event* ev = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
    CHECK(ev->listen_id == listen);
    rdma_cm_id* conn = ev->id;
    REQUIRE(conn != listen);
    CHECK(conn->context == &stag);  // a new id inherits its listener's context
    CHECK(conn->channel == sch);
    CHECK(conn->verbs == &fx().ctx);
    CHECK(priv(ev->param.conn.private_data, ev->param.conn.private_data_len) == "hello");
    CHECK(ev->param.conn.responder_resources == 4);
    CHECK(ntohs(rdma_get_src_port(conn)) == 7480);
    CHECK(conn->route.addr.dst_sin.sin_addr.s_addr == client->route.addr.src_sin.sin_addr.s_addr);

    // rdma_destroy_id of the listener waits for the ack of the event it reported
    std::atomic<bool> gone{false};
    std::thread t([&] {
        rdma_destroy_id(listen);
        gone = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(!gone);
    rdma_conn_param ap{};
    ap.private_data = "world!";
    ap.private_data_len = 6;
    REQUIRE(rdma_accept(conn, &ap) == 0);
    rdma_ack_cm_event(ev);
    t.join();
    CHECK(gone);

    ev = expect_event(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);  // no QP: the program establishes
    CHECK(ev->id == client);
    CHECK(priv(ev->param.conn.private_data, ev->param.conn.private_data_len) == "world!");
    rdma_ack_cm_event(ev);
    REQUIRE(rdma_establish(client) == 0);
    rdma_ack_cm_event(expect_event(sch, RDMA_CM_EVENT_ESTABLISHED));

    REQUIRE(rdma_disconnect(client) == 0);
    ev = expect_event(cch, RDMA_CM_EVENT_DISCONNECTED);
    CHECK(ev->id == client);
    rdma_ack_cm_event(ev);
    ev = expect_event(sch, RDMA_CM_EVENT_DISCONNECTED);
    CHECK(ev->id == conn);
    rdma_ack_cm_event(ev);
    CHECK(rdma_destroy_id(conn) == 0);
    CHECK(rdma_destroy_id(client) == 0);
    rdma_destroy_event_channel(sch);
    rdma_destroy_event_channel(cch);
}

TEST_CASE("rdmacm: a wildcard listener takes requests on every device; resolve picks the device by address") {
    fx();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id *listen = nullptr, *client = nullptr, *far = nullptr;
    REQUIRE(rdma_create_id(ch, &listen, nullptr, RDMA_PS_TCP) == 0);
    REQUIRE(rdma_create_id(ch, &client, nullptr, RDMA_PS_TCP) == 0);
    REQUIRE(rdma_create_id(ch, &far, nullptr, RDMA_PS_TCP) == 0);
    REQUIRE(rdma_listen(listen, 1) == 0);  // unbound: bound to 0.0.0.0, any port, on both devices
    CHECK(listen->verbs == nullptr);
    const uint16_t port = ntohs(rdma_get_src_port(listen));
    CHECK(port != 0);
    sockaddr_in dst = addr4("198.18.1.1", port);  // fake1's own address
    REQUIRE(rdma_resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000) == 0);
    CHECK(client->verbs == &fx().ctx2);
    sockaddr_in dst2 = addr4("198.18.1.77", 9);  // fake1's /24
    REQUIRE(rdma_resolve_addr(far, nullptr, reinterpret_cast<sockaddr*>(&dst2), 2000) == 0);
    CHECK(far->verbs == &fx().ctx2);
    for (int i = 0; i < 2; ++i) rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
    rdma_conn_param cp{};
    cp.retry_count = 7;
    REQUIRE(rdma_connect(client, &cp) == 0);
    rdma_cm_event* ev = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
    CHECK(ev->listen_id == listen);
    CHECK(ev->id->verbs == &fx().ctx2);  // the new id is on the device the request came through
    CHECK(ev->id->route.addr.src_sin.sin_addr.s_addr == dst.sin_addr.s_addr);
    rdma_cm_id* conn = ev->id;
    rdma_ack_cm_event(ev);
    for (rdma_cm_id* id : {conn, listen, client, far}) CHECK(rdma_destroy_id(id) == 0);
    rdma_destroy_event_channel(ch);
}

TEST_CASE("rdmacm: rejects reach the active side with their reason and private data") {
    fx();
    rdma_event_channel* ch = rdma_create_event_channel();
    REQUIRE(ch);
    rdma_cm_id *listen = nullptr, *client = nullptr;
    REQUIRE(rdma_create_id(ch, &listen, nullptr, RDMA_PS_TCP) == 0);
    REQUIRE(rdma_create_id(ch, &client, nullptr, RDMA_PS_TCP) == 0);
    sockaddr_in dst = addr4(kIp, 7490);
    REQUIRE(rdma_resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000) == 0);
    rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
    rdma_conn_param cp{};
    cp.retry_count = 7;
    REQUIRE(rdma_connect(client, &cp) == 0);  // nobody listens on 7490
    rdma_cm_event* ev = expect_event(ch, RDMA_CM_EVENT_REJECTED);
    CHECK(ev->id == client);
    CHECK(ev->status == 8);
    rdma_ack_cm_event(ev);

    sockaddr_in s = addr4(kIp, 7490);
    REQUIRE(rdma_bind_addr(listen, reinterpret_cast<sockaddr*>(&s)) == 0);
    REQUIRE(rdma_listen(listen, 1) == 0);
    REQUIRE(rdma_connect(client, &cp) == 0);
    ev = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
    rdma_cm_id* conn = ev->id;
    REQUIRE(rdma_reject(conn, "no", 2) == 0);
    rdma_ack_cm_event(ev);
    ev = expect_event(ch, RDMA_CM_EVENT_REJECTED);
    CHECK(ev->id == client);
    CHECK(ev->status == 28);
    CHECK(priv(ev->param.conn.private_data, ev->param.conn.private_data_len) == "no");
    rdma_ack_cm_event(ev);
    for (rdma_cm_id* id : {conn, listen, client}) CHECK(rdma_destroy_id(id) == 0);
    rdma_destroy_event_channel(ch);
}

TEST_CASE("rdmacm: a synchronous id waits for its own events; migrate moves queued events") {
    fx();
    rdma_cm_id* id = nullptr;
    REQUIRE(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_UDP) == 0);
    CHECK(id->qp_type == IBV_QPT_UD);
    REQUIRE(id->channel);
    sockaddr_in dst = addr4("198.18.0.3", 9);
    REQUIRE(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000) == 0);
    REQUIRE(id->event);
    CHECK(id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED);
    REQUIRE(rdma_resolve_route(id, 2000) == 0);  // acks the previous one, waits for this one
    CHECK(id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED);
    CHECK(rdma_destroy_id(id) == 0);  // acks id->event itself

    rdma_event_channel* a = rdma_create_event_channel();
    rdma_event_channel* b = rdma_create_event_channel();
    REQUIRE((a && b));
    REQUIRE(rdma_create_id(a, &id, nullptr, RDMA_PS_TCP) == 0);
    REQUIRE(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000) == 0);
    pollfd p{a->fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 2000) == 1);
    REQUIRE(rdma_migrate_id(id, b) == 0);
    CHECK(id->channel == b);
    rdma_cm_event* ev = expect_event(b, RDMA_CM_EVENT_ADDR_RESOLVED);
    CHECK(ev->id == id);
    rdma_ack_cm_event(ev);
    REQUIRE(::fcntl(a->fd, F_SETFL, O_NONBLOCK) == 0);
    errno = 0;
    CHECK(rdma_get_cm_event(a, &ev) == -1);  // the moved event is no longer on `a`
    CHECK(errno == EAGAIN);
    CHECK(rdma_destroy_id(id) == 0);
    rdma_destroy_event_channel(a);
    rdma_destroy_event_channel(b);
}

TEST_CASE("rdmacm: UD (RDMA_PS_UDP): the request and the SIDR reply carry param.ud") {
    fx();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id *listen = nullptr, *client = nullptr;
    REQUIRE(rdma_create_id(ch, &listen, nullptr, RDMA_PS_UDP) == 0);
    REQUIRE(rdma_create_id(ch, &client, nullptr, RDMA_PS_UDP) == 0);
    sockaddr_in s = addr4(kIp, 7174);
    REQUIRE(rdma_bind_addr(listen, reinterpret_cast<sockaddr*>(&s)) == 0);
    REQUIRE(rdma_listen(listen, 1) == 0);
    REQUIRE(rdma_resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&s), 2000) == 0);
    rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
    rdma_conn_param cp{};
    cp.private_data = "ud?";
    cp.private_data_len = 3;
    REQUIRE(rdma_connect(client, &cp) == 0);
    rdma_cm_event* ev = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
    rdma_cm_id* conn = ev->id;
    CHECK(conn->qp_type == IBV_QPT_UD);
    CHECK(priv(ev->param.ud.private_data, ev->param.ud.private_data_len) == "ud?");
    rdma_ack_cm_event(ev);
    rdma_conn_param ap{};
    ap.qp_num = 0x123456;
    ap.private_data = "ud!";
    ap.private_data_len = 3;
    REQUIRE(rdma_accept(conn, &ap) == 0);  // UD: returns at once, no RTU
    ev = expect_event(ch, RDMA_CM_EVENT_ESTABLISHED);
    CHECK(ev->id == client);
    CHECK(ev->param.ud.qp_num == 0x123456);
    CHECK(ev->param.ud.qkey == RDMA_UDP_QKEY);  // the library asks for RDMA_PS_UDP's Q_Key
    CHECK(ev->param.ud.ah_attr.is_global == 1);
    CHECK(ev->param.ud.ah_attr.grh.dgid.raw[10] == 0xff);
    CHECK(ev->param.ud.ah_attr.grh.dgid.raw[15] == 1);
    CHECK(ev->param.ud.ah_attr.grh.hop_limit == 64);
    CHECK(ev->param.ud.ah_attr.port_num == 1);
    CHECK(priv(ev->param.ud.private_data, ev->param.ud.private_data_len) == "ud!");
    rdma_ack_cm_event(ev);
    for (rdma_cm_id* id : {conn, listen, client}) CHECK(rdma_destroy_id(id) == 0);
    rdma_destroy_event_channel(ch);
}

TEST_CASE("rdmacm: options reach the CM id, also one made after them") {
    fx();
    rdma_cm_id* id = nullptr;
    rdma_event_channel* ch = rdma_create_event_channel();
    REQUIRE(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) == 0);
    uint8_t tos = 0x20;
    int one = 1;
    REQUIRE(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos) == 0);
    CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &one, sizeof one) == -1);
    CHECK(errno == EINVAL);
    CHECK(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &one, sizeof one) == -1);
    CHECK(errno == ENOSYS);
    sockaddr_in s = addr4(kIp, 7500);
    REQUIRE(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&s)) == 0);
    REQUIRE(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one) == 0);
    {
        auto g = fx().hold();
        REQUIRE(fx().cm.ids.size() == 1);
        auto& o = fx().cm.ids.begin()->second.options;
        CHECK(o[api::CmOption::tos] == 0x20);
        CHECK(o[api::CmOption::reuseaddr] == 1);
    }
    CHECK(rdma_destroy_id(id) == 0);
    rdma_destroy_event_channel(ch);
}

TEST_CASE("rdmacm: unsupported calls answer ENOSYS / EINVAL, never crash") {
    fx();
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    REQUIRE(rdma_create_id(ch, &id, nullptr, RDMA_PS_UDP) == 0);
    sockaddr_in mc = addr4("239.1.1.1", 0);
    errno = 0;
    CHECK(rdma_join_multicast(id, reinterpret_cast<sockaddr*>(&mc), nullptr) == -1);
    CHECK(errno == ENOSYS);
    sockaddr_storage ib{};
    ib.ss_family = AF_IB;
    errno = 0;
    CHECK(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&ib)) == -1);  // no AF_IB
    CHECK(errno == EINVAL);
    errno = 0;
    CHECK(rsocket(AF_INET, SOCK_STREAM, 0) == -1);
    CHECK(errno == ENOSYS);
    errno = 0;
    CHECK(rsend(3, "x", 1, 0) == -1);
    CHECK(errno == EBADF);
    pollfd p{ch->fd, POLLIN, 0};
    CHECK(rpoll(&p, 1, 0) == 0);  // an ordinary fd polls as with poll(2)
    ibv_qp_attr qa{};
    int mask = 0;
    qa.qp_state = IBV_QPS_INIT;
    errno = 0;
    CHECK(rdma_init_qp_attr(id, &qa, &mask) == -1);  // not bound to a device yet
    CHECK(errno == EINVAL);
    CHECK(std::string(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT)) == "RDMA_CM_EVENT_TIMEWAIT_EXIT");
    CHECK(std::string(rdma_event_str(rdma_cm_event_type(99))) == "UNKNOWN EVENT");
    int n = -1;
    ibv_context** devs = rdma_get_devices(&n);
    REQUIRE(devs);
    CHECK(n == 2);
    CHECK(devs[0] == &fx().ctx);
    CHECK(devs[1] == &fx().ctx2);
    CHECK(devs[2] == nullptr);
    rdma_free_devices(devs);
    CHECK(rdma_destroy_id(id) == 0);
    rdma_destroy_event_channel(ch);
}

TEST_CASE("rdmacm: rdma_getaddrinfo maps hints as librdmacm does") {
    fx();
    rdma_addrinfo hints{}, *res = nullptr;
    hints.ai_port_space = RDMA_PS_TCP;
    REQUIRE(rdma_getaddrinfo("198.18.0.7", "7471", &hints, &res) == 0);
    CHECK(res->ai_family == AF_INET);
    CHECK(res->ai_qp_type == IBV_QPT_RC);
    CHECK(res->ai_port_space == RDMA_PS_TCP);
    CHECK(!(res->ai_flags & RAI_PASSIVE));
    REQUIRE(res->ai_dst_len == sizeof(sockaddr_in));
    const auto* d = reinterpret_cast<sockaddr_in*>(res->ai_dst_addr);
    CHECK(ntohs(d->sin_port) == 7471);
    CHECK(d->sin_addr.s_addr == addr4("198.18.0.7", 0).sin_addr.s_addr);
    CHECK(res->ai_src_addr == nullptr);
    rdma_freeaddrinfo(res);

    hints = {};
    hints.ai_flags = RAI_PASSIVE;
    hints.ai_port_space = RDMA_PS_UDP;
    REQUIRE(rdma_getaddrinfo(nullptr, "7472", &hints, &res) == 0);
    CHECK(res->ai_flags & RAI_PASSIVE);
    CHECK(res->ai_qp_type == IBV_QPT_UD);
    REQUIRE(res->ai_src_addr);
    CHECK(ntohs(reinterpret_cast<sockaddr_in*>(res->ai_src_addr)->sin_port) == 7472);
    CHECK(res->ai_dst_addr == nullptr);
    rdma_freeaddrinfo(res);

    errno = 0;
    CHECK(rdma_getaddrinfo(nullptr, nullptr, nullptr, &res) == -1);
    CHECK(errno == EINVAL);
    hints = {};
    hints.ai_flags = RAI_NUMERICHOST;  // no name look-up leaves the machine
    CHECK(rdma_getaddrinfo("not-an-address", "1", &hints, &res) == EAI_NONAME);  // getaddrinfo's code
}
