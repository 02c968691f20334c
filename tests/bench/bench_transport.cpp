// Transport throughput: two HCAs over the in-memory wire on one core, RC WRITE, SEND and READ,
// clean wire. Each figure is printed beside two bounds measured in the same run, as ratios: the
// byte rate against memcpy of the same working set (a wire, two DMA engines, two ICRCs and the
// protocol, against one plain copy), the packet rate against the same wire's bare frame rate at
// the case's data frame size (bursts of 32 sent and received, no HCA). The wire hands each frame
// over in the sender's buffer, as a NIC's wire copies nothing (`--copy`: into the receiver's pool).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "packet/headers.hpp"
#include "tools/hcaemu/sim_pair.hpp"

using namespace hcaemu;
using Clock = std::chrono::steady_clock;

namespace {

struct RunResult {
    double seconds = 0;
    uint64_t packets = 0;
    bool ok = false;
};

// Every buffer of both ends' pools written once, then freed in the order that keeps the pool's
// own (slot 0 first). The warm-up's 256 messages touch fewer buffers than the timed part has in
// flight: the first use of the others page-faulted in the timed part (6% of a `perf record`'s
// samples of `send 8`, though the rates did not move with this: it keeps the faults out of profiles).
void prefault(port::MemWire& w) {
    std::vector<port::Frame> all;
    for (int e = 0; e < 2; ++e) {
        all.clear();
        for (port::Frame f; w.end(e).alloc(f);) {
            std::memset(f.data, 0, f.cap);
            all.push_back(f);
        }
        for (size_t i = all.size(); i-- > 0;) w.end(e).free(all[i]);
    }
}

bool g_copy = false;  // --copy: the wire copies each frame into the receiver's pool

void configure(port::WireConfig& w, Mtu mtu) {
    w.latency_ns = 1000;
    w.mtu = mtu_bytes(mtu) > 1024 ? 9000 : 1500;  // the link MTU a RoCE MTU above 1024 needs
    w.hand_over = !g_copy;
}

// The timed part, a function of its own: tests/bench/count_instr.py counts inside it alone.
[[gnu::noinline]] bool timed_part(tools::SimPair& p, const std::function<bool()>& turn) { return p.run_until(turn); }

RunResult run(WrOpcode op, uint32_t size, uint32_t count, Mtu mtu) {
    tools::SimConfig c;
    configure(c.wire, mtu);
    c.mtu = mtu;
    c.sq_depth = c.rq_depth = 256;
    c.mem_bytes = size_t(size) * 256 + 4096;
    tools::SimPair p(c);
    prefault(p.wire);
    auto& A = p.side[0];
    auto& B = p.side[1];
    uint32_t posted = 0, done = 0, recvs = 0, goal = 0;
    const bool send = op == WrOpcode::send;
    Wc wc[64];
    auto turn = [&] {
        while (send && recvs < goal && recvs - done < 256) {
            Sge s{B.mr.addr() + uint64_t(recvs % 256) * size, size, B.mr.lkey()};
            RecvWr r;
            r.sg_list = &s;
            r.num_sge = 1;
            const RecvWr* bad;
            if (B.qp.post_recv(&r, &bad) != Status::ok) break;
            ++recvs;
        }
        while (posted < goal && posted - done < 256) {
            Sge s{A.mr.addr() + uint64_t(posted % 256) * size, size, A.mr.lkey()};
            SendWr w;
            w.sg_list = &s;
            w.num_sge = 1;
            w.opcode = op;
            w.send_flags = send_flag::signaled;
            w.rdma = {B.mr.addr() + uint64_t(posted % 256) * size, B.mr.rkey()};
            const SendWr* bad;
            if (A.qp.post_send(&w, &bad) != Status::ok) break;
            ++posted;
        }
        int n;
        while ((n = A.cq.poll(wc)) > 0) done += uint32_t(n);
        while (send && B.cq.poll(wc) > 0) {
        }
        return done == goal;
    };
    // Warm-up, not timed: one pass over the 256 slots, so that the buffers, the wire's pools and
    // the tables are touched (page faults, first cache misses) before the clock starts.
    goal = std::min<uint32_t>(count, 256);
    RunResult r;
    if (!p.run_until(turn)) return r;
    const uint64_t pkts0 = A.dev->counters().get(Counter::sent_pkts) + B.dev->counters().get(Counter::sent_pkts);
    goal += count;
    const auto t0 = Clock::now();
    r.ok = timed_part(p, turn);
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    r.packets = A.dev->counters().get(Counter::sent_pkts) + B.dev->counters().get(Counter::sent_pkts) - pkts0;
    return r;
}

// The in-memory wire alone, configured as run()'s: bursts of 32 frames of `len` bytes allocated and
// their first 8 bytes written at end 0, sent, received at end 1 after the latency (virtual time),
// their first byte read, freed. Frames a second of real time, for >= 0.2 s.
double wire_mpps(uint32_t len, Mtu mtu) {
    port::VirtualClock clock;
    port::WireConfig wc;
    configure(wc, mtu);
    port::MemWire wire(wc, clock);
    prefault(wire);
    port::Port& a = wire.end(0);
    port::Port& b = wire.end(1);
    constexpr uint16_t kBurst = 32;
    port::Frame f[kBurst];
    uint64_t frames = 0, sum = 0;
    const auto t0 = Clock::now();
    do {
        for (int rep = 0; rep < 64; ++rep) {
            uint16_t n = 0;
            while (n < kBurst && a.alloc(f[n])) {
                std::memcpy(f[n].data, &frames, 8);
                f[n].len = len;
                ++n;
            }
            const uint16_t sent = a.tx_burst(f, n);
            for (uint16_t i = sent; i < n; ++i) a.free(f[i]);
            clock.advance(wc.latency_ns);
            const uint16_t got = b.rx_burst(f, kBurst);
            for (uint16_t i = 0; i < got; ++i) sum += f[i].data[0];
            b.free_burst(f, got);
            frames += got;
        }
    } while (std::chrono::duration<double>(Clock::now() - t0).count() < 0.2);
    asm volatile("" ::"r"(sum));
    return double(frames) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e6;
}

// The case's data frames: Ethernet, IPv4, UDP, BTH, a RETH on WRITE, the payload up to the RoCE
// MTU, the ICRC. (READ requests are smaller and its responses carry an AETH instead.)
uint32_t data_frame_len(WrOpcode op, uint32_t size, Mtu mtu) {
    const size_t hdr = pkt::kEthLen + pkt::kIpv4Len + pkt::kUdpLen + pkt::kBthLen + pkt::kIcrcLen;
    return uint32_t(hdr + (op == WrOpcode::rdma_write ? pkt::kRethLen : 0) + std::min(size, mtu_bytes(mtu)));
}

double memcpy_gbs(size_t bytes) {
    std::vector<uint8_t> a(bytes, 1), b(bytes);
    const auto t0 = Clock::now();
    size_t done = 0;
    int reps = 0;
    do {
        std::memcpy(b.data(), a.data(), bytes);
        asm volatile("" ::"r"(b.data()) : "memory");
        done += bytes;
        ++reps;
    } while (std::chrono::duration<double>(Clock::now() - t0).count() < 0.2 || reps < 3);
    return double(done) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
}

}  // namespace

// Usage: bench_transport [--copy] [OPERATION [SIZE [MTU]]]: only the cases named (to profile one).
int main(int argc, char** argv) {
    if (argc > 1 && !std::strcmp(argv[1], "--copy")) {
        g_copy = true;
        --argc, ++argv;
    }
    std::printf("hcaemu transport benchmark: two HCAs on one core over the in-memory wire, clean wire, %s\n\n",
                g_copy ? "each frame copied by the wire" : "each frame handed over by the wire");
    std::printf("%-10s %9s %5s %8s %10s %10s %9s %11s %7s %9s\n", "operation", "size", "mtu", "count", "Mpps", "GB/s",
                "x memcpy", "memcpy GB/s", "x wire", "wire Mpps");
    struct Case {
        WrOpcode op;
        const char* name;
        uint32_t size, count;
        Mtu mtu;
    };
    const Case cases[] = {{WrOpcode::rdma_write, "write", 64, 200000, Mtu::mtu1024},
                          {WrOpcode::rdma_write, "write", 4096, 50000, Mtu::mtu1024},
                          {WrOpcode::rdma_write, "write", 1 << 20, 1000, Mtu::mtu1024},
                          {WrOpcode::rdma_write, "write", 1 << 20, 1000, Mtu::mtu4096},
                          {WrOpcode::send, "send", 8, 200000, Mtu::mtu1024},
                          {WrOpcode::send, "send", 4096, 50000, Mtu::mtu1024},
                          {WrOpcode::rdma_read, "read", 4096, 50000, Mtu::mtu1024},
                          {WrOpcode::rdma_read, "read", 1 << 20, 1000, Mtu::mtu1024}};
    int rc = 0, ran = 0;
    for (const Case& k : cases) {
        if ((argc > 1 && std::strcmp(argv[1], k.name)) || (argc > 2 && std::strtoul(argv[2], nullptr, 0) != k.size) ||
            (argc > 3 && std::strtoul(argv[3], nullptr, 0) != mtu_bytes(k.mtu)))
            continue;
        ++ran;
        const RunResult r = run(k.op, k.size, k.count, k.mtu);
        const double bytes = double(k.size) * k.count;
        const double gbs = bytes / r.seconds / 1e9;
        // The same working set: the slots the WRs cycle through (each side's buffer).
        const double bound = memcpy_gbs(size_t(k.size) * std::min<uint32_t>(k.count, 256));
        const double mpps = double(r.packets) / r.seconds / 1e6;
        const double wire = wire_mpps(data_frame_len(k.op, k.size, k.mtu), k.mtu);
        std::printf("%-10s %9u %5u %8u %10.2f %10.3f %9.3f %11.2f %7.3f %9.2f%s\n", k.name, k.size, mtu_bytes(k.mtu), k.count, mpps,
                    gbs, gbs / bound, bound, mpps / wire, wire, r.ok ? "" : "  (did not finish)");
        if (!r.ok) rc = 1;
    }
    if (!ran) {  // a name, size or MTU no case has: a usage error, not an empty table
        std::fprintf(stderr,
                     "bench_transport: no case '%s%s%s%s%s' (write 64|4096|1048576 [1024|4096], send 8|4096, "
                     "read 4096|1048576; MTU 1024 but for write 1048576 4096)\n",
                     argv[1], argc > 2 ? " " : "", argc > 2 ? argv[2] : "", argc > 3 ? " " : "", argc > 3 ? argv[3] : "");
        return 2;
    }
    std::printf("\nMpps counts the packets of both HCAs (data, ACKs, responses); GB/s counts payload.\n"
                "'x memcpy' compares with one memcpy of the same working set in this run; 'x wire' the\n"
                "packet rate with the wire's bare rate at the case's data frame size in this run.\n");
    return rc;
}
