// Software steering's cost per frame (port::Steering: each frame to the lcore that owns its QP, on
// a port that cannot steer by QP), beside the cost of one packet through hcaemu's data path
// measured in the same run, and what that makes of N data-path lcores: the projection the README
// states (issue 13), since a 2-core machine cannot measure N lcores on N free cores.
//
// - own:       a frame read on its owner's queue (DestQP read, the owner looked up, kept).
// - forwarded: read on another lcore's queue, passed through the (from, to) ring and received by
//              its owner: both lcores' work, on one thread (the frames hot in its cache).
// - forwarded, two threads: the same with the reader and the owner on two cores (each frame's
//              header and ring slot cross between their caches), the owner reading each frame's
//              DestQP and payload as its engine would; the time per frame of the pipeline.
// - per packet: two HCAs on one core over the in-memory wire, 64-byte RC WRITEs (bench_transport's
//              case): the wall time per packet (data and ACK, both ends, the wire's copy); one
//              end's share, the bound, is taken as half of it (the sender builds and CRCs, the
//              receiver parses and CRCs). Small packets: the case where steering weighs most.
// Projection: on N lcores fed by a sender that spreads frames evenly over N queues (memif, ring:
// the queue is the sender's choice), each lcore forwards (N-1)/N of what it reads, so each runs at
// c_end / (c_end + (N-1)/N * c_fwd) of one lcore's rate; with a NIC that steers (rte_flow, RSS on
// the UDP source port) nothing is forwarded and N lcores do N times one. Both are capped by the
// wire and assume QPs spread evenly and lcores on cores of their own.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "dpdk_port/steer.hpp"
#include "packet/build.hpp"
#include "tools/hcaemu/sim_pair.hpp"

using namespace hcaemu;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kFrameBytes = 128;

// One queue of a port with no steering of its own: its frames come from a list the bench fills,
// its buffers from one pool shared with the other queues (as a DpdkPort's queues share a mempool).
struct Pool {
    std::vector<uint8_t> mem;
    std::vector<uint32_t> free_slots;
    explicit Pool(uint32_t n) : mem(size_t(n) * kFrameBytes) {
        for (uint32_t i = n; i-- > 0;) free_slots.push_back(i);
    }
};

struct ListQueue final : port::Port {
    Pool& pool;
    std::vector<port::Frame> rx;  // frames "on the wire" for this queue
    size_t head = 0;
    explicit ListQueue(Pool& p) : pool(p) {}
    bool alloc(port::Frame& f) override {
        if (pool.free_slots.empty()) return false;
        const uint32_t s = pool.free_slots.back();
        pool.free_slots.pop_back();
        f = port::Frame{pool.mem.data() + size_t(s) * kFrameBytes, 0, kFrameBytes, s, &pool};
        return true;
    }
    uint16_t tx_burst(port::Frame*, uint16_t) override { return 0; }
    uint16_t rx_burst(port::Frame* frames, uint16_t n) override {
        uint16_t k = 0;
        for (; k < n && head < rx.size(); ++k) frames[k] = rx[head++];
        return k;
    }
    void free(port::Frame& f) override {
        pool.free_slots.push_back(f.slot);
        f.handle = nullptr;
    }
    pkt::Mac mac() const override { return {2, 0, 0, 0, 0, 1}; }
    uint32_t mtu() const override { return 1500; }
    port::PortStats stats() const override { return {}; }
};

// An 8-byte RC SEND to `qpn` (a valid RoCE v2 frame: Ethernet, IPv4, UDP 4791, BTH, payload, ICRC).
bool roce_frame(port::Frame& f, uint32_t qpn) {
    pkt::Headers h;
    h.eth.ethertype = pkt::kEthTypeIpv4;
    h.bth.opcode = pkt::op::rc | pkt::op::send_only;
    h.bth.dest_qp = qpn;
    size_t hl = 0;
    if (pkt::build_headers(h, 8, {f.data, f.cap}, hl) != pkt::BuildError::ok) return false;
    std::memset(f.data + hl, 0xA5, 8);
    f.len = uint32_t(pkt::build_finish({f.data, f.cap}, hl, 8, false));
    return true;
}

// ns per frame of reading `total` frames for QPs owned by `owner`, all arriving on queue 0.
// Frames are made once (a pool of their own) and fed again each round, as a receive ring holds them.
double steer_ns(uint32_t owner, uint32_t total) {
    constexpr uint32_t kBatch = 1024;
    Pool pool(4 * kBatch);
    ListQueue q0(pool), q1(pool);
    port::Port* inner[2] = {&q0, &q1};
    port::Steering st(inner, 4096, 4096);
    for (uint32_t qpn = 16; qpn < 16 + 64; ++qpn) st.set_owner(qpn, owner);
    std::vector<port::Frame> frames(kBatch);
    for (uint32_t i = 0; i < kBatch; ++i)
        if (!q0.alloc(frames[i]) || !roce_frame(frames[i], 16 + i % 64)) return -1;
    port::Frame out[32];
    uint64_t got = 0;
    const auto t0 = Clock::now();
    for (uint32_t done = 0; done < total; done += kBatch) {
        q0.rx = frames;  // the same buffers again: they are back in no pool (the views hold them)
        q0.head = 0;
        for (;;) {
            uint16_t n = st.view(0).rx_burst(out, 32);
            got += n;  // owner 0: its own frames; owner 1: none (all forwarded)
            const uint16_t m = st.view(1).rx_burst(out + n, uint16_t(32 - n));
            got += m;
            if (!n && !m && q0.head == q0.rx.size()) break;
            // Not freed: the buffers go round again (a NIC's receive ring refilled with them).
        }
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    return got == uint64_t(total) / kBatch * kBatch ? s * 1e9 / double(got) : -1;
}

void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort: fewer CPUs, no pinning
}

// ns per frame of `total` frames read on queue 0 by one thread (CPU 0) and received by their
// owner, lcore 1, on another (CPU 1). The frames are 4 sets the reader feeds again once the owner
// has received a whole set (a receive ring refilled with buffers the owner has finished with).
double steer_two_threads_ns(uint32_t total) {
    constexpr uint32_t kSet = 256, kSets = 4;
    Pool pool(kSet * kSets);
    ListQueue q0(pool), q1(pool);
    port::Port* inner[2] = {&q0, &q1};
    port::Steering st(inner, 4096, 4096);
    for (uint32_t qpn = 16; qpn < 16 + 64; ++qpn) st.set_owner(qpn, 1);
    std::vector<port::Frame> frames(kSet * kSets);
    for (uint32_t i = 0; i < kSet * kSets; ++i)
        if (!q0.alloc(frames[i]) || !roce_frame(frames[i], 16 + i % 64)) return -1;
    std::atomic<bool> released[kSets];
    for (auto& r : released) r.store(true);
    const uint64_t want = uint64_t(total) / kSet * kSet;
    std::atomic<bool> stop{false};
    uint64_t got = 0, sum = 0;
    const auto t0 = Clock::now();
    std::thread owner([&] {
        pin(1);
        uint32_t per_set[kSets] = {};
        port::Frame out[32];
        const auto end = Clock::now() + std::chrono::seconds(30);  // bounded in time
        while (got < want && Clock::now() < end) {
            const uint16_t n = st.view(1).rx_burst(out, 32);
            for (uint16_t i = 0; i < n; ++i) {
                sum += uint64_t(port::roce_dest_qp(out[i].data, out[i].len)) + out[i].data[out[i].len - 12];
                const uint32_t set = out[i].slot / kSet;
                if (++per_set[set] == kSet) {
                    per_set[set] = 0;
                    released[set].store(true, std::memory_order_release);
                }
            }
            got += n;
        }
        stop.store(true);
    });
    pin(0);
    port::Frame out[32];
    uint32_t next = 0;
    while (!stop.load(std::memory_order_relaxed)) {
        if (q0.head == q0.rx.size() && released[next].load(std::memory_order_acquire)) {
            released[next].store(false, std::memory_order_relaxed);
            q0.rx.assign(frames.begin() + next * kSet, frames.begin() + (next + 1) * kSet);
            q0.head = 0;
            next = (next + 1) % kSets;
        }
        if (st.view(0).rx_burst(out, 32) != 0) return -1;  // every frame is lcore 1's
    }
    owner.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (sum == 0 || got < want) std::fprintf(stderr, "two threads: %llu of %llu frames in %.1f s\n", (unsigned long long)got, (unsigned long long)want, s);
    return got >= want ? s * 1e9 / double(got) : -1;
}

// ns per packet through two HCAs on one core (64-byte RC WRITEs, 256 outstanding): data and ACKs.
double hca_ns(uint32_t count) {
    tools::SimConfig c;
    c.wire.latency_ns = 1000;
    c.sq_depth = c.rq_depth = 256;
    c.mem_bytes = 64u * 256 + 4096;
    tools::SimPair p(c);
    auto& A = p.side[0];
    auto& B = p.side[1];
    uint32_t posted = 0, done = 0, goal = 0;
    Wc wc[64];
    auto turn = [&] {
        while (posted < goal && posted - done < 256) {
            Sge s{A.mr.addr() + uint64_t(posted % 256) * 64, 64, A.mr.lkey()};
            SendWr w;
            w.sg_list = &s;
            w.num_sge = 1;
            w.opcode = WrOpcode::rdma_write;
            w.send_flags = send_flag::signaled;
            w.rdma = {B.mr.addr() + uint64_t(posted % 256) * 64, B.mr.rkey()};
            const SendWr* bad;
            if (A.qp.post_send(&w, &bad) != Status::ok) break;
            ++posted;
        }
        int n;
        while ((n = A.cq.poll(wc)) > 0) done += uint32_t(n);
        return done == goal;
    };
    goal = 256;  // warm-up
    if (!p.run_until(turn)) return -1;
    auto pkts = [&] { return A.dev->counters().get(Counter::sent_pkts) + B.dev->counters().get(Counter::sent_pkts); };
    const uint64_t p0 = pkts();
    goal += count;
    const auto t0 = Clock::now();
    if (!p.run_until(turn)) return -1;
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    return s * 1e9 / double(pkts() - p0);
}

}  // namespace

int main() {
    const uint32_t total = 8u << 20;
    const double own = steer_ns(0, total), fwd1 = steer_ns(1, total), both = hca_ns(400000);
    const double fwd = steer_two_threads_ns(total);
    const double pkt = both / 2;  // one end's share
    if (own < 0 || fwd1 < 0 || fwd < 0 || both < 0) {
        std::fprintf(stderr, "bench_steer: a run did not complete (%.1f %.1f %.1f %.1f)\n", own, fwd1, fwd, both);
        return 1;
    }
    std::printf("hcaemu steering benchmark: software steering per frame beside hcaemu's cost per packet\n\n");
    std::printf("%-44s %10s %14s\n", "figure", "ns/frame", "x per packet");
    std::printf("%-44s %10.1f\n", "per packet: two HCAs, 64 B RC WRITE", both);
    std::printf("%-44s %10.1f %14s\n", "per packet: one end (half of it, the bound)", pkt, "1");
    std::printf("%-44s %10.1f %14.3f\n", "steering: own frame (read, kept)", own, own / pkt);
    std::printf("%-44s %10.1f %14.3f\n", "steering: forwarded, one thread", fwd1, fwd1 / pkt);
    std::printf("%-44s %10.1f %14.3f\n", "steering: forwarded, two threads (CPUs 0, 1)", fwd, fwd / pkt);
    std::printf("\nProjection (not a measurement: lcores on free cores, QPs spread evenly, below the wire):\n");
    std::printf("%-8s %26s %26s\n", "lcores", "x one lcore, NIC steers", "x one lcore, software");
    for (uint32_t n : {1u, 2u, 4u, 8u}) {
        const double share = double(n - 1) / n;
        std::printf("%-8u %26.2f %26.2f\n", n, double(n), n * pkt / (pkt + share * fwd));
    }
    return 0;
}
