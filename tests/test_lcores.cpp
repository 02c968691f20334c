// N data-path lcores: frames steered to the lcore that owns their destination QP
// (dpdk_port/steer.hpp), and one device served by an engine per lcore (transport/hca_group.hpp):
// each QP's traffic handled by its owner only, byte-exact, with two threads over a 2-queue DPDK
// ring pair.
#include <catch2/catch.hpp>

#include "catch_run.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "dpdk_port/clock.hpp"
#include "dpdk_port/dpdk.hpp"
#include "dpdk_port/steer.hpp"
#include "packet/build.hpp"
#include "tools/hcaemu/sim_pair.hpp"
#include "transport/hca_group.hpp"

using namespace hcaemu;

namespace {

// A port whose buffers come from one pool shared with its siblings (as a DpdkPort's queues
// share a mempool): frames are put on its rx list by the test.
struct Pool {
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<uint32_t> free_slots;
    explicit Pool(uint32_t n) : bufs(n, std::vector<uint8_t>(256)) {
        for (uint32_t i = 0; i < n; ++i) free_slots.push_back(i);
    }
};

struct FakeQueue final : port::Port {
    Pool& pool;
    std::vector<port::Frame> rx;
    explicit FakeQueue(Pool& p) : pool(p) {}
    bool alloc(port::Frame& f) override {
        if (pool.free_slots.empty()) return false;
        const uint32_t s = pool.free_slots.back();
        pool.free_slots.pop_back();
        f = port::Frame{pool.bufs[s].data(), 0, 256, s, &pool};
        return true;
    }
    uint16_t tx_burst(port::Frame*, uint16_t) override { return 0; }
    uint16_t rx_burst(port::Frame* frames, uint16_t n) override {
        uint16_t k = 0;
        for (; k < n && k < rx.size(); ++k) frames[k] = rx[k];
        rx.erase(rx.begin(), rx.begin() + k);
        return k;
    }
    void free(port::Frame& f) override {
        REQUIRE(f.handle == &pool);
        pool.free_slots.push_back(f.slot);
        f.handle = nullptr;
    }
    pkt::Mac mac() const override { return {2, 0, 0, 0, 0, 1}; }
    uint32_t mtu() const override { return 1500; }
    port::PortStats stats() const override { return {}; }
};

// A RoCE v2 frame to `qpn` whose payload's first byte is `tag`.
void roce_frame(port::Frame& f, uint32_t qpn, uint8_t tag, bool ipv6 = false, bool vlan = false) {
    pkt::Headers h;
    h.eth.ethertype = ipv6 ? pkt::kEthTypeIpv6 : pkt::kEthTypeIpv4;
    h.ipv6 = ipv6;
    h.eth.vlan = vlan;
    h.bth.opcode = pkt::op::rc | pkt::op::send_only;
    h.bth.dest_qp = qpn;
    size_t hl = 0;
    REQUIRE(pkt::build_headers(h, 4, {f.data, f.cap}, hl) == pkt::BuildError::ok);
    std::memset(f.data + hl, tag, 4);
    f.len = uint32_t(pkt::build_finish({f.data, f.cap}, hl, 4, ipv6));
}

}  // namespace

TEST_CASE("roce_dest_qp reads DestQP behind IPv4, IPv6 and an 802.1Q tag; anything else is -1", "[steer]") {
    std::vector<uint8_t> buf(256);
    port::Frame f{buf.data(), 0, 256, 0, nullptr};
    for (int variant = 0; variant < 4; ++variant) {
        roce_frame(f, 0xabcdef, 1, variant & 1, variant & 2);
        CHECK(port::roce_dest_qp(f.data, f.len) == 0xabcdef);
        CHECK(port::roce_dest_qp(f.data, f.len - 5) == 0xabcdef);  // the payload is not read
    }
    roce_frame(f, 77, 1);
    const uint32_t bth_end = 14 + 20 + 8 + 12;
    CHECK(port::roce_dest_qp(f.data, bth_end) == 77);
    CHECK(port::roce_dest_qp(f.data, bth_end - 1) == -1);  // cut inside the BTH
    CHECK(port::roce_dest_qp(f.data, 13) == -1);
    buf[14 + 20 + 2] ^= 0x01;  // UDP destination port 4790
    CHECK(port::roce_dest_qp(f.data, f.len) == -1);
    buf[14 + 20 + 2] ^= 0x01;
    buf[14 + 9] = 6;  // TCP
    CHECK(port::roce_dest_qp(f.data, f.len) == -1);
    buf[14 + 9] = 17;
    buf[14] = 0x44;  // IHL 4: shorter than an IPv4 header
    CHECK(port::roce_dest_qp(f.data, f.len) == -1);
    buf[12] = 0x08;
    buf[13] = 0x06;  // ARP
    CHECK(port::roce_dest_qp(f.data, f.len) == -1);
}

TEST_CASE("steering: each frame comes out of its owner's view, in order; a full ring drops and counts", "[steer]") {
    Pool pool(64);
    FakeQueue q0(pool), q1(pool);
    port::Port* inner[2] = {&q0, &q1};
    port::Steering st(inner, 1000, 4);
    st.set_owner(10, 1);
    st.set_owner(11, 0);
    st.set_owner(2000, 1);  // beyond the table: ignored, owner 0
    CHECK(st.owner(10) == 1);
    CHECK(st.owner(11) == 0);
    CHECK(st.owner(12) == 0);
    CHECK(st.owner(2000) == 0);
    auto push = [&](FakeQueue& q, uint32_t qpn, uint8_t tag) {
        port::Frame f;
        REQUIRE(q.alloc(f));
        roce_frame(f, qpn, tag);
        q.rx.push_back(f);
    };
    // Queue 0 reads frames for QPs 10 (lcore 1) and 11 (lcore 0), and one it cannot parse.
    push(q0, 10, 1);
    push(q0, 11, 2);
    push(q0, 10, 3);
    port::Frame junk;
    REQUIRE(q0.alloc(junk));
    junk.len = 10;
    q0.rx.push_back(junk);
    push(q1, 10, 4);  // read by its owner
    port::Frame out[8];
    REQUIRE(st.view(0).rx_burst(out, 8) == 2);
    CHECK(port::roce_dest_qp(out[0].data, out[0].len) == 11);
    CHECK(out[1].len == 10);  // the unparsed frame stays where it was read
    st.view(0).free_burst(out, 2);
    // Lcore 1: first what lcore 0 passed (read earlier), then its own queue.
    REQUIRE(st.view(1).rx_burst(out, 8) == 3);
    for (int i = 0; i < 3; ++i) {
        CHECK(port::roce_dest_qp(out[i].data, out[i].len) == 10);
        CHECK(out[i].data[out[i].len - 4 - 4] == uint8_t(i == 0 ? 1 : i == 1 ? 3 : 4));  // payload, before the ICRC
    }
    st.view(1).free_burst(out, 3);
    CHECK(pool.free_slots.size() == 64);
    port::SteerStats s0 = st.stats(0), s1 = st.stats(1);
    CHECK(s0.rx_own == 1);
    CHECK(s0.rx_unparsed == 1);
    CHECK(s0.forwarded == 2);
    CHECK(s1.received == 2);
    CHECK(s1.rx_own == 1);
    // The ring 0 -> 1 holds 4: six frames for lcore 1 read on queue 0 lose two, freed at once.
    for (uint8_t t = 0; t < 6; ++t) push(q0, 10, t);
    CHECK(st.view(0).rx_burst(out, 8) == 0);
    CHECK(st.stats(0).ring_full == 2);
    CHECK(pool.free_slots.size() == 64 - 4);
    REQUIRE(st.view(1).rx_burst(out, 8) == 4);
    for (uint8_t t = 0; t < 4; ++t) CHECK(out[t].data[out[t].len - 8] == t);
    st.view(1).free_burst(out, 4);
    // What the rings still hold when the steering goes is freed.
    push(q0, 10, 9);
    CHECK(st.view(0).rx_burst(out, 8) == 0);
    CHECK(pool.free_slots.size() == 63);
}

namespace {

// One side: a device served by two engines over the two queues of a DPDK port, through steering.
struct Node {
    std::unique_ptr<port::DpdkPort> port;
    std::unique_ptr<Device> dev;
    std::unique_ptr<port::Steering> steer;
    std::unique_ptr<transport::HcaGroup> group;
    Pd pd;
    std::vector<uint8_t> mem;
    Mr mr;
    Cq cq[2];  // one per lcore
    std::vector<Qp> qps;
    Gid gid{};
};

// QP i's CQ (both send and receive): cq[cq_of(i)].
void build_node(Node& n, uint16_t port_id, int index, uint32_t nqps, const port::Clock& clock, size_t mem_bytes,
                uint32_t (*cq_of)(uint32_t)) {
    std::string err;
    port::DpdkPortConfig pc;
    pc.queues = 2;
    pc.extra_mbufs = 8192;
    pc.mac = pkt::Mac{0x02, 0, 0, 0x18, 1, uint8_t(index + 1)};
    n.port = port::DpdkPort::open(port_id, pc, err);
    INFO(err);
    REQUIRE(n.port);
    PortConfig dc;
    dc.mac = n.port->mac();
    dc.ipv4[0] = 0xC6120101u + uint32_t(index);  // 198.18.1.1, 198.18.1.2
    n.gid = pkt::ipv4_mapped_gid(dc.ipv4[0]);
    DeviceAttr da;
    n.dev = std::make_unique<Device>(da, dc);
    port::Port* qs[2] = {&n.port->queue(0), &n.port->queue(1)};
    n.steer = std::make_unique<port::Steering>(qs, da.max_qp + 2);
    port::Port* views[2] = {&n.steer->view(0), &n.steer->view(1)};
    n.group = std::make_unique<transport::HcaGroup>(*n.dev, views, clock, transport::HcaConfig{}, n.steer.get());
    n.pd = std::move(n.dev->alloc_pd().value);
    n.mem.assign(mem_bytes, 0);
    n.mr = std::move(n.dev->reg_mr(n.pd, n.mem.data(), n.mem.size(),
                                   access::local_write | access::remote_write | access::remote_read)
                         .value);
    for (auto& c : n.cq) c = std::move(n.dev->create_cq(8192).value);
    for (uint32_t i = 0; i < nqps; ++i) {
        QpInitAttr ia;
        ia.send_cq = ia.recv_cq = &n.cq[cq_of(i)];
        ia.qp_type = QpType::rc;
        ia.cap = {16, 16, 1, 1, 0};
        auto q = n.dev->create_qp(n.pd, ia);
        REQUIRE(q.ok());
        n.qps.push_back(std::move(q.value));
    }
}

}  // namespace

TEST_CASE("two lcores per HCA over a 2-queue DPDK ring pair: 1024 QPs, each on its owner only, byte-exact",
          "[lcores][dpdk]") {
    constexpr uint32_t kQps = 1024, kMsgs = 4, kSlot = 4096;  // per QP: kMsgs SENDs A->B, kMsgs WRITEs B->A
    uint16_t pa = 0, pb = 0;
    std::string err;
    REQUIRE(port::make_ring_pair("lc", pa, pb, err, 2));
    port::SteadyClock clock;
    Node n[2];
    const size_t mem = size_t(kQps) * kMsgs * kSlot;
    // A's QP i and B's QP i are a connection. A's QP i uses CQ i % 2, B's CQ (i / 2) % 2, and each
    // goes to the lcore of its CQ: half the connections cross lcores, so that frames take both
    // steering paths.
    build_node(n[0], pa, 0, kQps, clock, mem, [](uint32_t i) { return i % 2; });
    build_node(n[1], pb, 1, kQps, clock, mem, [](uint32_t i) { return (i / 2) % 2; });
    for (int s = 0; s < 2; ++s) n[s].group->set_neighbor(n[1 - s].gid, n[1 - s].port->mac());

    // A: every QP placed by hand. B: QP 0 and QP 2 by hand (CQ 0 to lcore 0, CQ 1 to lcore 1);
    // the others follow their CQ when they leave RESET. A placement that would split a CQ over
    // two lcores is refused.
    for (uint32_t i = 0; i < kQps; ++i) REQUIRE(n[0].group->place(n[0].qps[i].qpn(), i % 2));
    REQUIRE(n[1].group->place(n[1].qps[0].qpn(), 0));
    REQUIRE(n[1].group->place(n[1].qps[2].qpn(), 1));
    CHECK_FALSE(n[1].group->place(n[1].qps[1].qpn(), 1));  // CQ 0 is lcore 0's
    CHECK_FALSE(n[1].group->place(n[1].qps[3].qpn(), 0));  // CQ 1 is lcore 1's
    CHECK_FALSE(n[1].group->place(n[1].qps[4].qpn(), 2));  // no lcore 2
    for (uint32_t i = 0; i < kQps; ++i) REQUIRE(n[1].group->owner(n[1].qps[i].qpn()) == (i / 2) % 2);

    tools::SimConfig sc;
    for (uint32_t i = 0; i < kQps; ++i)
        for (int s = 0; s < 2; ++s)
            REQUIRE(tools::connect_qp(n[s].qps[i], sc, n[1 - s].qps[i].qpn(), n[1 - s].gid, 0x100 + i, 0x100 + i));
    // Every QP's context is its owner's engine's only.
    for (int s = 0; s < 2; ++s)
        for (uint32_t i = 0; i < kQps; ++i) {
            const uint32_t qpn = n[s].qps[i].qpn(), o = n[s].group->owner(qpn);
            CHECK(n[s].group->hca(o).has_ctx(qpn));
            CHECK_FALSE(n[s].group->hca(1 - o).has_ctx(qpn));
        }
    CHECK_FALSE(n[0].group->place(n[0].qps[0].qpn(), 1));  // not in RESET any more

    std::mt19937 rng(13);
    for (int s = 0; s < 2; ++s)
        for (auto& b : n[s].mem) b = uint8_t(rng());
    std::vector<uint8_t> a0 = n[0].mem, b0 = n[1].mem;
    auto len_of = [](uint32_t i, uint32_t m) { return 1 + (i * 7919 + m * 104729) % 3000; };  // 1 to 3 packets
    // B's receives, before the lcores start.
    for (uint32_t i = 0; i < kQps; ++i)
        for (uint32_t m = 0; m < kMsgs; ++m) {
            Sge sge{n[1].mr.addr() + (uint64_t(i) * kMsgs + m) * kSlot, kSlot, n[1].mr.lkey()};
            RecvWr r;
            r.wr_id = uint64_t(i) << 8 | m;
            r.sg_list = &sge;
            r.num_sge = 1;
            const RecvWr* bad;
            REQUIRE(n[1].qps[i].post_recv(&r, &bad) == Status::ok);
        }

    // Each engine checks that every frame it receives is for a QP it owns.
    struct Seen {
        transport::HcaGroup* g;
        uint32_t k;
        uint64_t frames = 0, foreign = 0;
    };
    Seen seen[2][2];
    for (int s = 0; s < 2; ++s)
        for (uint32_t k = 0; k < 2; ++k) {
            seen[s][k] = Seen{n[s].group.get(), k};
            n[s].group->hca(k).set_trace(
                [](void* ctx, const transport::TraceEvent& ev) {
                    auto* x = static_cast<Seen*>(ctx);
                    if (ev.kind != transport::TraceKind::rx) return;
                    ++x->frames;
                    if (x->g->owner(ev.qpn) != x->k) ++x->foreign;
                },
                &seen[s][k]);
        }

    std::atomic<bool> failed{false};
    std::atomic<int> lanes_done{0};  // an engine keeps serving its QPs until every lane has all its completions
    struct Result {
        uint64_t a_done = 0, b_recv = 0, b_done = 0, bad = 0;
    };
    Result res[2];
    auto lcore = [&](uint32_t k) {
        std::string e;
        const int id = port::register_thread(e);  // a mempool cache; without one the pool still works
        t_lcore = k;  // this thread is lcore k's: its posts pin MRs in slot k (as hcaemud's lanes)
        Result& r = res[k];
        const uint64_t want_a = uint64_t(kQps / 2) * kMsgs;  // A's SENDs of this lcore's QPs
        uint64_t want_b = 0;
        for (uint32_t i = 0; i < kQps; ++i) want_b += n[1].group->owner(n[1].qps[i].qpn()) == k ? kMsgs : 0;
        // Post everything on the owner's thread: A's SENDs, B's WRITEs back into A's slots + half.
        for (uint32_t i = 0; i < kQps; ++i)
            for (uint32_t m = 0; m < kMsgs; ++m) {
                const uint64_t slot = (uint64_t(i) * kMsgs + m) * kSlot;
                if (n[0].group->owner(n[0].qps[i].qpn()) == k) {
                    Sge sge{n[0].mr.addr() + slot, len_of(i, m), n[0].mr.lkey()};
                    SendWr w;
                    w.wr_id = uint64_t(i) << 8 | m;
                    w.sg_list = &sge;
                    w.num_sge = 1;
                    w.opcode = WrOpcode::send;
                    w.send_flags = send_flag::signaled;
                    const SendWr* bad;
                    if (n[0].qps[i].post_send(&w, &bad) != Status::ok) ++r.bad;
                }
                if (n[1].group->owner(n[1].qps[i].qpn()) == k) {
                    Sge sge{n[1].mr.addr() + slot + 3072, 1024, n[1].mr.lkey()};
                    SendWr w;
                    w.wr_id = uint64_t(i) << 8 | m;
                    w.sg_list = &sge;
                    w.num_sge = 1;
                    w.opcode = WrOpcode::rdma_write;
                    w.send_flags = send_flag::signaled;
                    w.rdma = {n[0].mr.addr() + slot + 3072, n[0].mr.rkey()};
                    const SendWr* bad;
                    if (n[1].qps[i].post_send(&w, &bad) != Status::ok) ++r.bad;
                }
            }
        const auto t0 = std::chrono::steady_clock::now();
        Wc wc[32];
        bool mine_done = false;
        while (lanes_done.load() < 2 && !failed.load() &&
               std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
            if (!mine_done && r.a_done >= want_a && r.b_recv + r.b_done >= 2 * want_b) {
                mine_done = true;
                ++lanes_done;
            }
            n[0].group->hca(k).poll();
            n[1].group->hca(k).poll();
            int got;
            while ((got = n[0].cq[k].poll(wc)) > 0)
                for (int j = 0; j < got; ++j) {
                    if (wc[j].status != WcStatus::success) ++r.bad;
                    ++r.a_done;
                }
            while ((got = n[1].cq[k].poll(wc)) > 0)
                for (int j = 0; j < got; ++j) {
                    const uint32_t i = uint32_t(wc[j].wr_id >> 8), m = uint32_t(wc[j].wr_id & 0xff);
                    if (wc[j].status != WcStatus::success) ++r.bad;
                    if (wc[j].opcode == WcOpcode::recv) {
                        ++r.b_recv;
                        if (wc[j].byte_len != len_of(i, m)) ++r.bad;
                    } else {
                        ++r.b_done;
                    }
                }
            if (r.bad) failed = true;
        }
        if (id >= 0) port::unregister_thread();
    };
    std::thread t1(lcore, 1);
    lcore(0);
    t1.join();
    // A lane stops once every lane has its completions, but a frame the other lcore forwarded
    // last (an ACK, a retransmission) may still wait in its ring. Serve all four engines from
    // here, each with its own counter slot, until every ring is empty (bounded).
    auto rings_empty = [&] {
        for (int s = 0; s < 2; ++s)
            for (uint32_t k = 0; k < 2; ++k)
                if (n[s].steer->stats(k).received != n[s].steer->stats(1 - k).forwarded) return false;
        return true;
    };
    for (const auto t2 = std::chrono::steady_clock::now();
         !rings_empty() && std::chrono::steady_clock::now() - t2 < std::chrono::seconds(5);) {
        for (uint32_t k = 0; k < 2; ++k) {
            t_lcore = k;
            n[0].group->hca(k).poll();
            n[1].group->hca(k).poll();
        }
    }
    t_lcore = 0;
    for (uint32_t k = 0; k < 2; ++k) {
        INFO("lcore " << k);
        CHECK(res[k].bad == 0);
        CHECK(res[k].a_done == uint64_t(kQps / 2) * kMsgs);
    }
    CHECK(res[0].b_recv + res[1].b_recv == uint64_t(kQps) * kMsgs);
    CHECK(res[0].b_done + res[1].b_done == uint64_t(kQps) * kMsgs);
    // Byte-exact: B's receive slots hold A's messages, A's slots hold B's WRITEs; nothing else moved.
    for (uint32_t i = 0; i < kQps; ++i)
        for (uint32_t m = 0; m < kMsgs; ++m) {
            const size_t slot = (size_t(i) * kMsgs + m) * kSlot, l = len_of(i, m);
            INFO("QP " << i << " message " << m);
            REQUIRE(std::memcmp(n[1].mem.data() + slot, a0.data() + slot, l) == 0);
            REQUIRE(std::memcmp(n[1].mem.data() + slot + l, b0.data() + slot + l, 3072 - std::min<size_t>(l, 3072)) == 0);
            REQUIRE(std::memcmp(n[0].mem.data() + slot + 3072, b0.data() + slot + 3072, 1024) == 0);
            REQUIRE(std::memcmp(n[0].mem.data() + slot, a0.data() + slot, 3072) == 0);
        }
    // Each engine saw frames, all of them its own QPs'; frames crossed lcores through the rings
    // (B's lcore of QP i is not always A's), and none was dropped on the way.
    for (int s = 0; s < 2; ++s)
        for (uint32_t k = 0; k < 2; ++k) {
            INFO("side " << s << " lcore " << k);
            CHECK(seen[s][k].frames > 0);
            CHECK(seen[s][k].foreign == 0);
            const port::SteerStats st = n[s].steer->stats(k);
            CHECK(st.forwarded > 0);
            CHECK(st.received == n[s].steer->stats(1 - k).forwarded);  // nothing left in a ring, nothing lost
            CHECK(st.rx_unparsed == 0);
            // A ring full drops the frame as a NIC's full queue does: RC sent it again (the data
            // above is whole). Reported, not a failure: it depends on how the two threads ran.
            std::printf("side %d lcore %u: own %llu forwarded %llu received %llu ring_full %llu\n", s, k,
                        (unsigned long long)st.rx_own, (unsigned long long)st.forwarded,
                        (unsigned long long)st.received, (unsigned long long)st.ring_full);
            // The device's counters of lcore k count what lcore k's engine accepted.
            CHECK(n[s].dev->counters(k).get(Counter::rcvd_pkts) > 0);
            CHECK(n[s].dev->counters(k).get(Counter::rcvd_pkts) <= seen[s][k].frames);
            CHECK(n[s].dev->counters(k).get(Counter::sent_pkts) > 0);
        }
    for (int s = 0; s < 2; ++s) {
        const Counters t = n[s].dev->counters_total();
        CHECK(t.get(Counter::rx_drop_no_qp) == 0);
        CHECK(t.get(Counter::rcvd_pkts) == n[s].dev->counters(0).get(Counter::rcvd_pkts) +
                                               n[s].dev->counters(1).get(Counter::rcvd_pkts));
    }
}

int main(int argc, char** argv) {
    std::string err;
    if (!port::eal_start(port::default_eal_args(), err)) {
        std::fprintf(stderr, "EAL: %s\n", err.c_str());
        return 1;
    }
    return run_catch(argc, argv);
}
