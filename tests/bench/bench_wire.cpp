// The wire's own limit: a bare DPDK burst loop over one port (net_memif between two processes, as
// `hcaemu perf` uses it), no HCA. One process per end, one lcore each. Modes:
//   sink  receive and free, counting frames and bytes; prints the rate between the first and the
//         last frame received (the bound for one-way traffic: hcaemu's WRITE and SEND streams)
//   echo  receive and transmit the same mbufs back (rx -> tx), for `ping` and `send --echo`; with
//         --burst-times 1 it also prints its receive and transmit bursts' median and 90th
//         percentile (three TSC reads an echo more: off for the bound perf_memif.py measures)
//   send  transmit bursts of --burst frames of --size bytes for --seconds (frames the PMD refuses
//         are freed and not counted); also frees whatever comes back
//   ping  one --size frame out, wait for it to come back, --count times after --warmup: prints
//         the half round trip (median, 99th and 99.9th percentile, max), as perftest's latency
//         tests halve theirs
// The receiving end exits after --idle-ms without a frame once one has arrived, or after
// --max-seconds in all; the sending end waits --idle-ms + 300 ms before it exits, so that the
// receiving end leaves its loop first. Every loop is bounded in time. Usage:
//   bench_wire MODE --eal "EAL ARGS" [--size N] [--seconds S] [--count N] [--warmup N] [--burst N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
}

#include "dpdk_port/dpdk.hpp"
#include "dpdk_port/prefault.hpp"
#include "transport/turn_profile.hpp"

namespace {

struct Opts {
    std::string mode, eal;
    uint32_t size = 64;
    uint32_t mtu = 1500;  // the link MTU: sizes the mbufs as hcaemu's port does
    double seconds = 2.0;
    uint64_t count = 100000;
    uint64_t warmup = 2000;
    uint16_t burst = 32;
    double max_seconds = 60.0;
    uint32_t idle_ms = 2000;  // a loaded machine may not run us for a second
    bool burst_times = false;
};

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "bench_wire: %s\n", what);
    std::exit(1);
}

bool parse(int argc, char** argv, Opts& o) {
    if (argc < 2) return false;
    o.mode = argv[1];
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        const char* v = argv[i + 1];
        if (k == "--eal") o.eal = v;
        else if (k == "--size") o.size = uint32_t(std::strtoul(v, nullptr, 10));
        else if (k == "--mtu") o.mtu = uint32_t(std::strtoul(v, nullptr, 10));
        else if (k == "--seconds") o.seconds = std::strtod(v, nullptr);
        else if (k == "--count") o.count = std::strtoull(v, nullptr, 10);
        else if (k == "--warmup") o.warmup = std::strtoull(v, nullptr, 10);
        else if (k == "--burst") o.burst = uint16_t(std::strtoul(v, nullptr, 10));
        else if (k == "--max-seconds") o.max_seconds = std::strtod(v, nullptr);
        else if (k == "--idle-ms") o.idle_ms = uint32_t(std::strtoul(v, nullptr, 10));
        else if (k == "--burst-times" && (std::string(v) == "0" || std::string(v) == "1")) o.burst_times = v[0] == '1';
        else return false;
    }
    return (o.mode == "sink" || o.mode == "echo" || o.mode == "send" || o.mode == "ping") && o.size >= 60 &&
           o.mtu >= 68 && o.mtu <= 9000 && o.size <= o.mtu + 18 && o.burst >= 1 && o.burst <= 64;
}

constexpr uint16_t kPort = 0;
uint64_t g_hz = 0;

double secs(uint64_t cycles) { return double(cycles) / double(g_hz); }

// A RoCE v2-looking header (Ethernet, IPv4, UDP to 4791) at the front of every frame sent.
void fill(rte_mbuf* m, uint32_t size) {
    static const uint8_t kHdr[42] = {0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, 0x45, 0, 0, 0, 0, 0,
                                     0x40, 0, 0x40, 0x11, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2, 0xc0, 0, 0x12, 0xb7};
    std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), kHdr, sizeof kHdr);
    m->data_len = uint16_t(size);
    m->pkt_len = size;
}

void wait_link(double max_s) {
    const uint64_t end = rte_rdtsc() + uint64_t(max_s * double(g_hz));
    rte_eth_link l{};
    while (rte_rdtsc() < end) {
        if (rte_eth_link_get_nowait(kPort, &l) == 0 && l.link_status == RTE_ETH_LINK_UP) return;
        rte_delay_us_sleep(1000);
    }
    die("the link did not come up (is the other end running?)");
}

int run_rx(const Opts& o, bool echo) {
    rte_mbuf* mb[64];
    uint64_t frames = 0, bytes = 0, first = 0, last = 0, dropped = 0;
    const uint64_t start = rte_rdtsc(), hard_end = start + uint64_t(o.max_seconds * double(g_hz));
    const uint64_t idle = uint64_t(o.idle_ms) * g_hz / 1000;
    // echo --burst-times 1: the PMD's own time for a receive burst that brought frames and for the
    // transmit burst that sends them back, as hcaemu perf --stats' turn profile shows its rx and tx
    const bool timed = echo && o.burst_times;
    using Hist = hcaemu::transport::TurnProfile::Hist;
    static Hist rx_ns, tx_ns;
    uint64_t bursts = 0;
    const auto ns = [](uint64_t cycles) { return cycles * 1'000'000'000 / g_hz; };
    for (uint64_t turn = 0;; ++turn) {
        const uint64_t t0 = timed ? rte_rdtsc() : 0;
        const uint16_t n = rte_eth_rx_burst(kPort, 0, mb, o.burst);
        if (n) {
            last = rte_rdtsc();
            if (!frames) first = last;
            frames += n;
            for (uint16_t i = 0; i < n; ++i) bytes += mb[i]->pkt_len;
            const uint64_t t1 = timed ? rte_rdtsc() : 0;
            uint16_t sent = echo ? rte_eth_tx_burst(kPort, 0, mb, n) : 0;
            if (timed) {
                tx_ns.add(ns(rte_rdtsc() - t1));
                rx_ns.add(ns(last - t0));
                ++bursts;
            }
            if (sent < n) {
                dropped += n - sent;
                rte_pktmbuf_free_bulk(mb + sent, n - sent);
            }
        } else if ((turn & 1023) == 0) {
            const uint64_t t = rte_rdtsc();
            if ((frames && t - last > idle) || t > hard_end) break;
        }
    }
    const double s = secs(last - first);
    std::printf("%s: %llu frames, %llu bytes in %.6f s: %.4f Mpps %.3f Gbit/s %.4f GB/s %s\n",
                o.mode.c_str(), (unsigned long long)frames, (unsigned long long)bytes, s,
                s > 0 ? double(frames) / s / 1e6 : 0.0, s > 0 ? double(bytes) * 8 / s / 1e9 : 0.0,
                s > 0 ? double(bytes) / s / 1e9 : 0.0, echo ? (" (" + std::to_string(dropped) + " not echoed)").c_str() : "");
    if (timed && bursts)
        std::printf("echo: %llu bursts: receive ns p50 %llu p90 %llu, transmit ns p50 %llu p90 %llu\n",
                    (unsigned long long)bursts, (unsigned long long)rx_ns.quantile(0.5),
                    (unsigned long long)rx_ns.quantile(0.9), (unsigned long long)tx_ns.quantile(0.5),
                    (unsigned long long)tx_ns.quantile(0.9));
    return frames ? 0 : 1;
}

int run_send(const Opts& o, rte_mempool* pool) {
    rte_mbuf* mb[64];
    uint64_t sent = 0, refused = 0, back = 0;
    const uint64_t start = rte_rdtsc(), end = start + uint64_t(o.seconds * double(g_hz));
    uint64_t t = start;
    for (uint64_t turn = 0; t < end; ++turn) {
        if (rte_pktmbuf_alloc_bulk(pool, mb, o.burst) == 0) {
            for (uint16_t i = 0; i < o.burst; ++i) fill(mb[i], o.size);
            const uint16_t k = rte_eth_tx_burst(kPort, 0, mb, o.burst);
            sent += k;
            if (k < o.burst) {
                refused += o.burst - k;
                rte_pktmbuf_free_bulk(mb + k, o.burst - k);
            }
        }
        const uint16_t r = rte_eth_rx_burst(kPort, 0, mb, 64);
        back += r;
        if (r) rte_pktmbuf_free_bulk(mb, r);
        if ((turn & 15) == 0) t = rte_rdtsc();
    }
    const double s = secs(rte_rdtsc() - start);
    std::printf("send: %llu frames of %u bytes in %.6f s: %.4f Mpps offered, %llu refused by the PMD, %llu came back\n",
                (unsigned long long)sent, o.size, s, double(sent) / s / 1e6, (unsigned long long)refused,
                (unsigned long long)back);
    return 0;
}

int run_ping(const Opts& o, rte_mempool* pool) {
    std::vector<uint64_t> rtt;
    rtt.reserve(o.count);
    rte_mbuf* mb[64];
    uint64_t lost = 0;
    const uint64_t timeout = g_hz;  // 1 s: the frame is taken for lost
    const uint64_t hard_end = rte_rdtsc() + uint64_t(o.max_seconds * double(g_hz));
    for (uint64_t i = 0; i < o.warmup + o.count && rte_rdtsc() < hard_end; ++i) {
        rte_mbuf* m = rte_pktmbuf_alloc(pool);
        if (!m) die("mempool empty");
        fill(m, o.size);
        std::memcpy(rte_pktmbuf_mtod(m, uint8_t*) + 42, &i, 8);  // the sequence number: late echoes are told apart
        const uint64_t t0 = rte_rdtsc();
        if (rte_eth_tx_burst(kPort, 0, &m, 1) != 1) {
            rte_pktmbuf_free(m);
            continue;
        }
        bool mine = false;
        uint64_t t1 = t0;
        while (!mine && t1 - t0 < timeout) {
            const uint16_t r = rte_eth_rx_burst(kPort, 0, mb, 64);
            t1 = rte_rdtsc();
            for (uint16_t k = 0; k < r; ++k) {
                uint64_t seq = 0;
                std::memcpy(&seq, rte_pktmbuf_mtod(mb[k], uint8_t*) + 42, 8);
                mine = mine || seq == i;
            }
            if (r) rte_pktmbuf_free_bulk(mb, r);
        }
        if (!mine) {
            ++lost;
            continue;
        }
        if (i >= o.warmup) rtt.push_back(t1 - t0);
    }
    if (rtt.empty()) die("no frame came back");
    std::sort(rtt.begin(), rtt.end());
    const auto at = [&](double q) { return secs(rtt[std::min(rtt.size() - 1, size_t(q * double(rtt.size())))]) / 2 * 1e6; };
    double sum = 0;
    for (uint64_t x : rtt) sum += secs(x);
    std::printf("ping: %zu round trips of %u-byte frames (%llu not back within 1 s): half round trip usec: median %.3f average %.3f "
                "99%% %.3f 99.9%% %.3f max %.3f\n",
                rtt.size(), o.size, (unsigned long long)lost, at(0.5), sum / double(rtt.size()) / 2 * 1e6, at(0.99),
                at(0.999), secs(rtt.back()) / 2 * 1e6);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Opts o;
    if (!parse(argc, argv, o)) {
        std::fprintf(stderr,
                     "usage: bench_wire sink|echo|send|ping --eal \"EAL ARGS\" [--mtu 68..9000] [--size 60..MTU+18] [--seconds S] "
                     "[--count N] [--warmup N] [--burst 1..64] [--max-seconds S] [--idle-ms MS] [--burst-times 0|1]\n");
        return 2;
    }
    std::vector<std::string> words{"bench_wire"};
    for (size_t p = 0; p < o.eal.size();) {
        const size_t q = o.eal.find(' ', p);
        const std::string w = o.eal.substr(p, q == std::string::npos ? std::string::npos : q - p);
        if (!w.empty()) words.push_back(w);
        if (q == std::string::npos) break;
        p = q + 1;
    }
    std::vector<char*> av;
    for (auto& w : words) av.push_back(w.data());
    av.push_back(nullptr);
    if (rte_eal_init(int(words.size()), av.data()) < 0) die("rte_eal_init failed");
    g_hz = rte_get_tsc_hz();
    if (rte_eth_dev_count_avail() != 1) die("want exactly one port (a --vdev)");
    // The pool as hcaemu's DpdkPort makes it for this link MTU (one mbuf a frame: MTU + 18, at least
    // DPDK's default 2048; rings and 2048 more), so that the bound touches as much memory a frame,
    // and mapped ahead as DpdkPort maps it (so are memif's regions, below).
    const uint32_t room = std::max<uint32_t>(o.mtu + 18, RTE_MBUF_DEFAULT_DATAROOM) + RTE_PKTMBUF_HEADROOM;
    rte_mempool* pool = rte_pktmbuf_pool_create("wire", 1024 + 1024 + 2048, 256, 0, uint16_t(room), 0);
    if (!pool) die("mempool");
    hcaemu::port::prefault_pool(pool);
    rte_eth_conf conf{};
    if (rte_eth_dev_configure(kPort, 1, 1, &conf) != 0 || rte_eth_rx_queue_setup(kPort, 0, 1024, 0, nullptr, pool) != 0 ||
        rte_eth_tx_queue_setup(kPort, 0, 1024, 0, nullptr) != 0 || rte_eth_dev_start(kPort) != 0)
        die("port setup");
    wait_link(20);
    // Before the first frame; the peer leaves only at the end (no fault guard needed here).
    for (const hcaemu::port::Mapped& m : hcaemu::port::find_mappings("/memfd:memif_region_"))
        hcaemu::port::prefault(m.p, m.n);
    int rc = 0;
    if (o.mode == "sink" || o.mode == "echo") rc = run_rx(o, o.mode == "echo");
    else if (o.mode == "send") rc = run_send(o, pool);
    else rc = run_ping(o, pool);
    std::fflush(stdout);
    // No stop or close: DPDK 22.11's memif frees the shared regions from its interrupt thread when
    // the peer goes, without a lock against a burst or a close of ours (see dpdk_port/dpdk.cpp).
    // The sending end waits until the receiving end has seen it idle and left its loop, then both
    // exit without touching the port again.
    if (o.mode == "send" || o.mode == "ping") rte_delay_us_sleep((o.idle_ms + 300) * 1000u);
    std::_Exit(rc);
    return rc;
}
