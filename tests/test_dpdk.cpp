// The DPDK port on DPDK's net_ring vdev (two ethdevs joined by rings, in this process): frames
// move byte-exact, the pool runs dry and recovers, and two HCAs run RC traffic over it in real
// time. EAL without hugepages, as on any machine (`default_eal_args`).
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

extern "C" {
#include <rte_bus_vdev.h>
#include <rte_ethdev.h>
#include <rte_mempool.h>
}

#include <filesystem>

#include <sys/mman.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpdk_port/clock.hpp"
#include "dpdk_port/dpdk.hpp"
#include "dpdk_port/prefault.hpp"
#include "tools/hcaemu/sim_pair.hpp"
#include "transport/hca.hpp"

using namespace hcaemu;

namespace {

struct RingPair {
    std::unique_ptr<port::DpdkPort> a, b;
    explicit RingPair(const char* name, uint32_t extra = 2048) {
        uint16_t pa = 0, pb = 0;
        std::string err;
        REQUIRE(port::make_ring_pair(name, pa, pb, err));
        port::DpdkPortConfig c;
        c.extra_mbufs = extra;
        c.mac = pkt::Mac{0x02, 0, 0, 0x18, 0, 0x01};
        a = port::DpdkPort::open(pa, c, err);
        INFO(err);
        REQUIRE(a);
        c.mac = pkt::Mac{0x02, 0, 0, 0x18, 0, 0x02};
        b = port::DpdkPort::open(pb, c, err);
        REQUIRE(b);
    }
};

}  // namespace

TEST_CASE("DPDK ring pair: frames cross byte-exact, in order, in bursts", "[dpdk]") {
    RingPair rp("t1");
    std::vector<port::Frame> out(32);
    for (uint32_t i = 0; i < 32; ++i) {
        REQUIRE(rp.a->alloc(out[i]));
        REQUIRE(out[i].cap >= 1518);
        out[i].len = 60 + i;
        for (uint32_t k = 0; k < out[i].len; ++k) out[i].data[k] = uint8_t(i * 7 + k);
    }
    const uint32_t cap = out[0].cap;  // both pools alike: a received frame has the same room from its data
    REQUIRE(rp.a->tx_burst(out.data(), 32) == 32);
    port::Frame in[64];
    const uint16_t n = rp.b->rx_burst(in, 64);
    REQUIRE(n == 32);
    for (uint32_t i = 0; i < 32; ++i) {
        REQUIRE(in[i].len == 60 + i);
        CHECK(in[i].cap == cap);
        for (uint32_t k = 0; k < in[i].len; ++k) REQUIRE(in[i].data[k] == uint8_t(i * 7 + k));
        rp.b->free(in[i]);
    }
    CHECK(rp.a->stats().tx_frames == 32);
    CHECK(rp.b->stats().rx_frames == 32);
    CHECK(rp.b->rx_burst(in, 64) == 0);
    CHECK(rp.a->mac() == pkt::Mac{0x02, 0, 0, 0x18, 0, 0x01});
    CHECK(rp.b->mac() == pkt::Mac{0x02, 0, 0, 0x18, 0, 0x02});
}

TEST_CASE("DPDK port: an exhausted pool refuses alloc, then recovers", "[dpdk]") {
    RingPair rp("t2", 64);
    std::vector<port::Frame> held;
    port::Frame f;
    while (held.size() < 100000 && rp.a->alloc(f)) held.push_back(f);
    CHECK(held.size() < 100000);
    CHECK(rp.a->stats().tx_no_buffer == 1);
    for (auto& h : held) rp.a->free(h);
    CHECK(rp.a->alloc(f));
    rp.a->free(f);
}

namespace {
// Pages of [p, p + n) the kernel has mapped (mincore).
size_t resident_pages(void* p, size_t n) {
    const size_t pg = size_t(getpagesize());
    std::vector<unsigned char> v((n + pg - 1) / pg);
    REQUIRE(mincore(p, n, v.data()) == 0);
    size_t k = 0;
    for (unsigned char c : v) k += c & 1;
    return k;
}
}  // namespace

TEST_CASE("prefault: every page mapped before its first touch, contents untouched; the pool's at open", "[dpdk]") {
    const size_t pg = size_t(getpagesize()), n = 64 * pg;
    // Private anonymous memory, a few pages written first: all mapped after, none changed.
    auto* a = static_cast<uint8_t*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(a != MAP_FAILED);
    for (size_t i = 0; i < 8 * pg; ++i) a[i] = uint8_t(i * 7 + 1);
    CHECK(resident_pages(a, n) < 64);  // 8, or more where the kernel faults in larger folios
    CHECK(port::prefault(a + 100, n - 200) == n);  // whole pages around the range
    CHECK(resident_pages(a, n) == 64);
    bool same = true;
    for (size_t i = 0; i < n; ++i) same &= a[i] == (i < 8 * pg ? uint8_t(i * 7 + 1) : 0);
    CHECK(same);
    CHECK(port::prefault(a, 0) == 0);
    // Read-only memory is refused, not written.
    REQUIRE(mprotect(a, n, PROT_READ) == 0);
    CHECK(port::prefault(a, n) == 0);
    munmap(a, n);

    // A shared memfd found by its name in /proc/self/maps (as memif's regions are).
    const int fd = memfd_create("hcaemu_prefault_test", 0);
    REQUIRE(fd >= 0);
    REQUIRE(ftruncate(fd, off_t(n)) == 0);
    auto* m = static_cast<uint8_t*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    REQUIRE(m != MAP_FAILED);
    m[5 * pg] = 0xA5;
    CHECK(resident_pages(m, n) < 64);
    const auto found = port::find_mappings("/memfd:hcaemu_prefault_test");
    REQUIRE(found.size() == 1);
    CHECK(found[0].p == m);
    CHECK(found[0].n == n);
    CHECK(port::prefault(found[0].p, found[0].n) == n);
    CHECK(resident_pages(m, n) == 64);
    CHECK(m[5 * pg] == 0xA5);
    CHECK(port::find_mappings("/memfd:hcaemu_no_such_mapping").empty());
    munmap(m, n);
    close(fd);

    // The port's pool: every mbuf's data room, at open; no link regions on net_ring.
    RingPair rp("tpf", 64);
    const port::LinkStats ls = rp.a->link_stats();
    const uint64_t mbufs = 1024 + 1024 + 64;  // rx and tx descriptors, extra
    CHECK(ls.prefaulted_pool_bytes >= mbufs * (RTE_MBUF_DEFAULT_DATAROOM + RTE_PKTMBUF_HEADROOM));
    CHECK(ls.prefaulted_pool_bytes % pg == 0);
    CHECK(ls.prefaulted_link_bytes == 0);
    // ... and those bytes are the whole pool's, page-rounded. (Its pages' residency tells
    // nothing here: the pool's creation writes an mbuf header into every page already; what the
    // prefault adds for it is the write access below the kernel's tables, which mincore cannot see.)
    rte_mempool* mp = rte_mempool_lookup(("hcaemu_pool_" + std::to_string(rp.a->port_id())).c_str());
    REQUIRE(mp);
    uint64_t pool_bytes = 0;
    rte_mempool_mem_iter(
        mp,
        [](rte_mempool*, void* opaque, rte_mempool_memhdr* h, unsigned) {
            const uintptr_t page = uintptr_t(getpagesize());
            const uintptr_t lo = uintptr_t(h->addr) & ~(page - 1);
            const uintptr_t hi = (uintptr_t(h->addr) + h->len + page - 1) & ~(page - 1);
            *static_cast<uint64_t*>(opaque) += hi - lo;
        },
        &pool_bytes);
    CHECK(pool_bytes == ls.prefaulted_pool_bytes);
}

namespace {
// The Rss (kB) of this process's mapping that starts at p, from /proc/self/smaps.
long mapping_rss_kb(const void* p) {
    char start[32];
    std::snprintf(start, sizeof start, "%lx-", static_cast<unsigned long>(reinterpret_cast<uintptr_t>(p)));
    std::FILE* f = std::fopen("/proc/self/smaps", "r");
    REQUIRE(f);
    char line[512];
    bool in = false;
    long rss = -1;
    while (std::fgets(line, sizeof line, f)) {
        if (std::strchr(line, '-') && std::strncmp(line, start, std::strlen(start)) == 0) in = true;
        else if (in && std::sscanf(line, "Rss: %ld kB", &rss) == 1) break;
    }
    std::fclose(f);
    return rss;
}
}  // namespace

TEST_CASE("prefault: a peer's writes meanwhile are never lost (each page's touch is an atomic OR of 0)", "[dpdk]") {
    // A memif region or a client's MR is written by its owner while this process prefaults it. A
    // plain load and store of the touched word would put back a value the owner had just changed
    // (a mutant doing so lost increments on 1 to 6 of the 16 pages in each of 8 runs of 1 s).
    const size_t pg = size_t(getpagesize()), pages = 16, n = pages * pg;
    auto* a = static_cast<uint8_t*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    REQUIRE(a != MAP_FAILED);
    auto word = [&](size_t i) { return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(a + i * pg)); };
    std::atomic<bool> started{false}, done{false};
    uint64_t rounds = 0;
    std::thread owner([&] {
        started.store(true);
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        while (std::chrono::steady_clock::now() < end) {
            for (int k = 0; k < 1000; ++k, ++rounds)
                for (size_t i = 0; i < pages; ++i) word(i).fetch_add(1, std::memory_order_relaxed);
        }
        done.store(true);
    });
    while (!started.load()) std::this_thread::yield();
    uint64_t calls = 0, populated = 0;
    while (!done.load()) {
        populated += port::prefault(a, n);
        ++calls;
    }
    owner.join();
    CHECK(calls > 0);
    CHECK(populated == calls * n);
    size_t exact = 0;
    for (size_t i = 0; i < pages; ++i) exact += word(i).load() == rounds;
    INFO(calls << " prefault calls during the owner's " << rounds << " rounds");
    CHECK(exact == pages);
    munmap(a, n);
}

TEST_CASE("prefault_data: a second mapping of a memfd gets the memfd's pages, and no new one", "[dpdk]") {
    const size_t pg = size_t(getpagesize()), n = 64 * pg;
    const int fd = memfd_create("hcaemu_prefault_data", 0);
    REQUIRE(fd >= 0);
    REQUIRE(ftruncate(fd, off_t(n)) == 0);
    // The owner's view: pages 0, 1 and 5 written, the rest never touched (no memory).
    auto* own = static_cast<uint8_t*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    REQUIRE(own != MAP_FAILED);
    own[0] = 1, own[pg + 7] = 2, own[5 * pg + 9] = 3;
    struct stat st{};
    REQUIRE(fstat(fd, &st) == 0);
    const uint64_t had = uint64_t(st.st_blocks) * 512;
    CHECK(had >= 3 * pg);
    CHECK(had < n);
    REQUIRE(lseek(fd, 77, SEEK_SET) == 77);
    // Another view (as the daemon maps a client's memfd): nothing in its page tables yet.
    auto* v = static_cast<uint8_t*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    REQUIRE(v != MAP_FAILED);
    CHECK(mapping_rss_kb(v) == 0);
    CHECK(port::prefault_data(fd, 0, v, n) == had);
    CHECK(mapping_rss_kb(v) == long(had / 1024));  // every page the memfd has is mapped here now
    REQUIRE(fstat(fd, &st) == 0);
    CHECK(uint64_t(st.st_blocks) * 512 == had);  // and no page was allocated
    CHECK(lseek(fd, 0, SEEK_CUR) == 77);          // nor the shared file offset moved
    CHECK((v[0] == 1 && v[pg + 7] == 2 && v[5 * pg + 9] == 3));
    munmap(v, n);
    // A window from page 4 on: only page 5 of it, at its place in the window.
    v = static_cast<uint8_t*>(mmap(nullptr, 4 * pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(4 * pg)));
    REQUIRE(v != MAP_FAILED);
    CHECK(port::prefault_data(fd, 4 * pg, v, 4 * pg) == pg);
    CHECK(mapping_rss_kb(v) == long(pg / 1024));
    munmap(v, 4 * pg);
    munmap(own, n);
    close(fd);

    // A sparse terabyte (as libhcaemu's per-process memfd, offset = address) with one page of
    // data: mapped whole, faulted in at the cost of its data, not of its size.
    const int sp = memfd_create("hcaemu_prefault_sparse", 0);
    REQUIRE(sp >= 0);
    const uint64_t tb = uint64_t(1) << 40;
    REQUIRE(ftruncate(sp, off_t(tb)) == 0);
    REQUIRE(pwrite(sp, "x", 1, off_t(tb / 2 + 5)) == 1);
    auto* big = static_cast<uint8_t*>(mmap(nullptr, tb, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, sp, 0));
    REQUIRE(big != MAP_FAILED);
    CHECK(port::prefault_data(sp, 0, big, tb) == pg);
    CHECK(mapping_rss_kb(big) == long(pg / 1024));
    CHECK(big[tb / 2 + 5] == 'x');
    munmap(big, tb);
    close(sp);
    CHECK(port::prefault_data(-1, 0, nullptr, pg) == 0);  // no file: nothing
}

TEST_CASE("DPDK port: frames taken in bulk and freed in bulk all go back to the pool", "[dpdk]") {
    RingPair rp("t2b", 64);
    std::vector<port::Frame> held;
    port::Frame f;
    while (held.size() < 100000 && rp.a->alloc(f)) held.push_back(f);
    const size_t all = held.size();
    REQUIRE(all > 64);
    CHECK(rp.a->stats().tx_no_buffer == 1);
    for (size_t i = 0; i < held.size(); i += 50) {  // free_burst leaves no handle behind
        const auto k = uint16_t(std::min<size_t>(50, held.size() - i));
        rp.a->free_burst(&held[i], k);
        for (uint16_t j = 0; j < k; ++j) CHECK(held[i + j].handle == nullptr);
    }
    held.clear();
    while (held.size() < 100000 && rp.a->alloc(f)) held.push_back(f);
    CHECK(held.size() == all);  // none lost in the alloc stash or the bulk put
    CHECK(rp.a->stats().tx_no_buffer == 2);
    rp.a->free_burst(held.data(), uint16_t(std::min<size_t>(held.size(), 60000)));
    for (size_t i = 60000; i < held.size(); ++i) rp.a->free(held[i]);
}

TEST_CASE("two HCAs over the DPDK ring pair: RC WRITE, READ, SEND and atomics, byte-exact", "[dpdk][transport]") {
    RingPair rp("t3");
    port::SteadyClock clock;
    tools::SimConfig cfg;
    port::DpdkPort* ports[2] = {rp.a.get(), rp.b.get()};
    cfg.mem_bytes = 1 << 20;
    tools::SimPair::Side s[2];
    for (int i = 0; i < 2; ++i) tools::SimPair::build_side(s[i], *ports[i], clock, cfg, i, ports[1 - i]->mac());
    for (int i = 0; i < 2; ++i)
        REQUIRE(tools::connect_qp(s[i].qp, cfg, s[1 - i].qp.qpn(), s[1 - i].gid, 100 + uint32_t(i), 101 - uint32_t(i)));
    std::mt19937 rng(5);
    for (size_t k = 0; k < 300000; ++k) s[0].mem[k] = uint8_t(rng());
    for (size_t k = 0; k < 300000; ++k) s[1].mem[500000 + k] = uint8_t(rng());
    uint64_t word = 41;
    std::memcpy(&s[1].mem[900000], &word, 8);
    Sge rsge{s[1].mr.addr() + 950000, 5000, s[1].mr.lkey()};
    RecvWr r;
    r.sg_list = &rsge;
    r.num_sge = 1;
    const RecvWr* rbad;
    REQUIRE(s[1].qp.post_recv(&r, &rbad) == Status::ok);
    auto post = [&](WrOpcode op, uint64_t loff, uint32_t len, uint64_t roff, uint64_t id) {
        Sge sge{s[0].mr.addr() + loff, len, s[0].mr.lkey()};
        SendWr w;
        w.wr_id = id;
        w.sg_list = &sge;
        w.num_sge = 1;
        w.opcode = op;
        w.send_flags = send_flag::signaled;
        w.rdma = {s[1].mr.addr() + roff, s[1].mr.rkey()};
        w.atomic = {s[1].mr.addr() + roff, 1, 0, s[1].mr.rkey()};
        const SendWr* bad;
        REQUIRE(s[0].qp.post_send(&w, &bad) == Status::ok);
    };
    post(WrOpcode::rdma_write, 0, 300000, 0, 1);
    post(WrOpcode::rdma_read, 400000, 300000, 500000, 2);
    post(WrOpcode::send, 0, 5000, 0, 3);
    post(WrOpcode::atomic_fetch_and_add, 800000, 8, 900000, 4);
    std::vector<Wc> wa, wb;
    const auto t0 = std::chrono::steady_clock::now();
    Wc wc[16];
    while ((wa.size() < 4 || wb.size() < 1) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
        s[0].hca->poll();
        s[1].hca->poll();
        int n;
        while ((n = s[0].cq.poll(wc)) > 0) wa.insert(wa.end(), wc, wc + n);
        while ((n = s[1].cq.poll(wc)) > 0) wb.insert(wb.end(), wc, wc + n);
    }
    REQUIRE(wa.size() == 4);
    REQUIRE(wb.size() == 1);
    for (size_t i = 0; i < 4; ++i) {
        CHECK(wa[i].wr_id == i + 1);
        CHECK(wa[i].status == WcStatus::success);
    }
    CHECK(wb[0].byte_len == 5000);
    CHECK(std::memcmp(s[1].mem.data(), s[0].mem.data(), 300000) == 0);
    CHECK(std::memcmp(s[0].mem.data() + 400000, s[1].mem.data() + 500000, 300000) == 0);
    CHECK(std::memcmp(s[1].mem.data() + 950000, s[0].mem.data(), 5000) == 0);
    std::memcpy(&word, &s[1].mem[900000], 8);
    CHECK(word == 42);
    uint64_t orig;
    std::memcpy(&orig, &s[0].mem[800000], 8);
    CHECK(orig == 41);
    // 293 WRITE packets, a READ request, 5 SEND packets, a FetchAdd; 293 READ responses and ACKs back
    CHECK(ports[0]->stats().tx_frames >= 300);
    CHECK(ports[1]->stats().tx_frames >= 294);
}

TEST_CASE("find_port: by name, by number; errors name the ports there are", "[dpdk]") {
    uint16_t a = 0, b = 0, id = 0;
    std::string err;
    REQUIRE(port::make_ring_pair("fp", a, b, err));
    CHECK(port::find_port("net_ring_fp_a", id, err));
    CHECK(id == a);
    CHECK(port::find_port(std::to_string(b), id, err));
    CHECK(id == b);
    CHECK_FALSE(port::find_port("", id, err));
    CHECK(err.rfind("several DPDK ports, name one: ", 0) == 0);
    const std::string listed_a = std::to_string(a) + " net_ring_fp_a (net_ring)";
    const std::string listed_b = std::to_string(b) + " net_ring_fp_b (net_ring)";
    CHECK(err.find(listed_a) != std::string::npos);
    CHECK(err.find(listed_b) != std::string::npos);
    CHECK_FALSE(port::find_port("net_nosuch0", id, err));
    CHECK(err.rfind("no DPDK port 'net_nosuch0'; ports: ", 0) == 0);
    CHECK(err.find(listed_a) != std::string::npos);
    CHECK_FALSE(port::find_port("65535", id, err));
    CHECK_FALSE(port::find_port("70000", id, err));
    CHECK(err.rfind("no DPDK port '70000'", 0) == 0);

    // close(): the port is stopped and released, the pool freed; a second close() does nothing.
    port::DpdkPortConfig c;
    auto pa = port::DpdkPort::open(a, c, err);
    REQUIRE(pa);
    CHECK(pa->mtu_how() == "none (PMD has no MTU)");
    CHECK_FALSE(pa->watches_link());
    const std::string pool = "hcaemu_pool_" + std::to_string(a);
    CHECK(rte_mempool_lookup(pool.c_str()) != nullptr);
    pa->close();
    CHECK(rte_mempool_lookup(pool.c_str()) == nullptr);
    CHECK_FALSE(rte_eth_dev_is_valid_port(a));
    pa->close();
    pa.reset();
    CHECK_FALSE(port::find_port("net_ring_fp_a", id, err));
    auto pb = port::DpdkPort::open(b, c, err);
    REQUIRE(pb);
    pb.reset();
    CHECK_FALSE(rte_eth_dev_is_valid_port(b));
}

TEST_CASE("net_memif: bsize below the largest frame is refused; with no peer the link is down", "[dpdk][memif]") {
    char tmpl[] = "/tmp/hcaemu-memif-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    const std::string dir = tmpl;
    const std::string args = "role=server,socket=" + dir + "/s.sock,socket-abstract=no";
    REQUIRE(rte_vdev_init("net_memif7", args.c_str()) == 0);
    uint16_t id = 0;
    std::string err;
    REQUIRE(port::find_port("net_memif7", id, err));
    port::DpdkPortConfig c;
    c.mtu = 9000;
    CHECK(port::DpdkPort::open(id, c, err) == nullptr);
    CHECK(err == "net_memif7 (net_memif): bsize=2048 is smaller than the largest frame (9018 bytes for mtu 9000); "
                 "give bsize>=9018 (bsize=10240 carries mtu 9000)");
    c.mtu = 1500;  // 1518-byte frames fit the default 2048-byte buffers
    auto p = port::DpdkPort::open(id, c, err);
    INFO(err);
    REQUIRE(p);
    CHECK(p->driver() == "net_memif");
    CHECK(p->mtu_how() == "none (PMD has no MTU)");
    CHECK(p->watches_link());
    CHECK_FALSE(p->link_up());
    port::Frame f;
    REQUIRE(p->alloc(f));
    f.len = 60;
    std::memset(f.data, 0xab, 60);
    CHECK(p->tx_burst(&f, 1) == 0);  // no peer: the frame stays ours
    CHECK(f.handle != nullptr);
    p->free(f);
    port::Frame in[4];
    CHECK(p->rx_burst(in, 4) == 0);
    const auto ls = p->link_stats();
    CHECK(ls.polls_while_down == 2);
    CHECK(ls.up_events == 0);
    CHECK(ls.down_events == 0);
    CHECK(p->stats().tx_frames == 0);
    CHECK(std::filesystem::exists(dir + "/s.sock"));
    p.reset();
    // A memif server is stopped, not closed (close_ethdev: DPDK 22.11's memif close leaves a freed
    // handle in the interrupt thread); its socket file is gone as a close would have removed it.
    CHECK(rte_eth_dev_is_valid_port(id));
    CHECK_FALSE(std::filesystem::exists(dir + "/s.sock"));
    std::filesystem::remove_all(dir);
}

int main(int argc, char** argv) {
    std::string err;
    if (!port::eal_start(port::default_eal_args(), err)) {
        std::fprintf(stderr, "DPDK EAL did not start: %s\n", err.c_str());
        return 1;
    }
    return run_catch(argc, argv);
}
