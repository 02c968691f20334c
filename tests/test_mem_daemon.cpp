// Registering a program's own memory with hcaemud (tools/libhcaemu/remap.hpp, docs/memory.md): malloc
// (small and large), memalign, mmap, the stack, .bss, read-only pages, a sealed memfd, huge pages;
// refused kinds with their reasons; overlapping registrations, dereg and re-registration; fork.
// Every kind is proven with real RC WRITE and READ through one daemon (hcaemud on net_ring0, two
// clients in this process): the daemon's DMA reads and writes the program's bytes at the same
// virtual address. The daemon is started here ($HCAEMUD, set by meson) and stopped by its PID.
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/daemon_proc.hpp"
#include "tools/libhcaemu/api.hpp"
#include "tools/libhcaemu/remap.hpp"

using namespace hcaemu;
using Clock = std::chrono::steady_clock;

extern char** environ;

namespace {

const size_t kPage = size_t(sysconf(_SC_PAGESIZE));

void fill(void* p, size_t n, uint32_t seed) {
    auto* b = static_cast<uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) b[i] = uint8_t((i * 131 + seed * 7 + (i >> 8)) ^ seed);
}
bool same_fill(const void* p, size_t n, uint32_t seed) {
    std::vector<uint8_t> want(n);
    fill(want.data(), n, seed);
    return std::memcmp(p, want.data(), n) == 0;
}

// The /proc/self/maps line of the mapping holding `p` ("" if none).
std::string maps_line(const void* p) {
    std::ifstream f("/proc/self/maps");
    std::string line;
    const auto a = reinterpret_cast<uintptr_t>(p);
    while (std::getline(f, line)) {
        unsigned long s = 0, e = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx", &s, &e) == 2 && a >= s && a < e) return line;
    }
    return "";
}
bool on_memfd(const void* p) { return maps_line(p).find("/memfd:hcaemu-mr") != std::string::npos; }

using test::Daemon;

struct Side {
    std::unique_ptr<api::Context> ctx;
    std::unique_ptr<api::Pd> pd;
    std::unique_ptr<api::Cq> cq;
    std::unique_ptr<api::Qp> qp;
};

// Two clients of one daemon, their RC QPs connected to each other.
struct Pair {
    Daemon d;
    Side a, b;
    std::string err;

    Pair() {
        if (!d.ok()) {
            err = d.err();
            return;
        }
        if (!open(a) || !open(b) || !connect(a, b) || !connect(b, a)) return;
    }
    bool open(Side& s) {
        s.ctx = api::open_daemon(d.sock(), err);
        if (!s.ctx) return false;
        s.pd = std::move(s.ctx->alloc_pd().value);
        s.cq = std::move(s.ctx->create_cq(64).value);
        if (!s.pd || !s.cq) return (err = "alloc_pd/create_cq"), false;
        api::QpInitAttr init;
        init.send_cq = init.recv_cq = s.cq.get();
        init.cap = {16, 16, 2, 2, 0};
        s.qp = std::move(s.ctx->create_qp(*s.pd, init).value);
        if (!s.qp) return (err = "create_qp"), false;
        return true;
    }
    bool connect(Side& s, const Side& peer) {
        if (!s.ctx->resolve(peer.ctx->gid(), 5000, err)) return false;
        QpAttr at;
        at.qp_state = QpState::init;
        at.port_num = 1;
        at.qp_access_flags = access::remote_write | access::remote_read;
        if (!s.qp->modify(at, qp_attr::state | qp_attr::pkey_index | qp_attr::port | qp_attr::access_flags).ok())
            return (err = "INIT"), false;
        at.qp_state = QpState::rtr;
        at.path_mtu = Mtu::mtu1024;
        at.dest_qp_num = peer.qp->qpn();
        at.rq_psn = 0x10;
        at.max_dest_rd_atomic = 4;
        at.min_rnr_timer = 1;
        at.ah_attr.dgid = peer.ctx->gid();
        at.ah_attr.sgid_index = uint8_t(s.ctx->gid_index());
        if (!s.qp->modify(at, qp_attr::state | qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn |
                                  qp_attr::max_dest_rd_atomic | qp_attr::min_rnr_timer).ok())
            return (err = "RTR"), false;
        at.qp_state = QpState::rts;
        at.sq_psn = 0x10;
        at.timeout = 14;
        at.retry_cnt = 7;
        at.rnr_retry = 7;
        at.max_rd_atomic = 4;
        if (!s.qp->modify(at, qp_attr::state | qp_attr::sq_psn | qp_attr::timeout | qp_attr::retry_cnt |
                                  qp_attr::rnr_retry | qp_attr::max_qp_rd_atomic).ok())
            return (err = "RTS"), false;
        return true;
    }
};

Pair& pair() {
    static Pair p;
    return p;
}

constexpr uint32_t kRw = access::local_write | access::remote_write | access::remote_read;

// One signaled WR from a's QP; the completion it gets.
Wc post_one(Side& s, WrOpcode op, void* local, uint32_t lkey, size_t n, uint64_t remote, uint32_t rkey) {
    Sge sge{reinterpret_cast<uintptr_t>(local), uint32_t(n), lkey};
    SendWr w;
    w.wr_id = 0x77;
    w.sg_list = &sge;
    w.num_sge = 1;
    w.opcode = op;
    w.send_flags = send_flag::signaled;
    w.rdma.remote_addr = remote;
    w.rdma.rkey = rkey;
    const SendWr* bad = nullptr;
    Wc wc{};
    wc.status = WcStatus::general_err;
    if (s.qp->post_send(&w, &bad) != Status::ok) return wc;
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    std::array<Wc, 1> got;
    while (Clock::now() < deadline) {
        if (s.cq->poll(got) == 1) return got[0];
        std::this_thread::yield();
    }
    wc.wr_id = 0;
    return wc;
}

// The daemon moves `n` bytes: a WRITEs src (registered by a) into dst (registered by b), then READs
// them back from dst into src2 (a's again). Byte-exact both ways, addresses as the program sees them.
void prove(void* src, void* dst, void* src2, size_t n, uint32_t seed) {
    Pair& p = pair();
    // Bytes written before registration are what the daemon sees after it.
    fill(src, n, seed);
    fill(dst, n, seed + 1000);
    auto ms = p.a.ctx->reg_mr(*p.a.pd, src, n, access::local_write);
    REQUIRE(ms.status == Status::ok);
    auto md = p.b.ctx->reg_mr(*p.b.pd, dst, n, kRw);
    REQUIRE(md.status == Status::ok);
    auto ms2 = p.a.ctx->reg_mr(*p.a.pd, src2, n, access::local_write);
    REQUIRE(ms2.status == Status::ok);
    CHECK(same_fill(src, n, seed));
    CHECK(same_fill(dst, n, seed + 1000));
    std::memset(src2, 0, n);
    Wc w = post_one(p.a, WrOpcode::rdma_write, src, ms.value->lkey(), n, reinterpret_cast<uintptr_t>(dst), md.value->rkey());
    REQUIRE(w.wr_id == 0x77);
    REQUIRE(w.status == WcStatus::success);
    CHECK(w.opcode == WcOpcode::rdma_write);
    CHECK(same_fill(dst, n, seed));
    w = post_one(p.a, WrOpcode::rdma_read, src2, ms2.value->lkey(), n, reinterpret_cast<uintptr_t>(dst), md.value->rkey());
    REQUIRE(w.status == WcStatus::success);
    CHECK(w.byte_len == n);
    CHECK(same_fill(src2, n, seed));
    CHECK(ms.value->destroy() == Status::ok);
    CHECK(md.value->destroy() == Status::ok);
    CHECK(ms2.value->destroy() == Status::ok);
}

#define NEED_PAIR()                      \
    do {                                 \
        INFO(pair().err);                \
        REQUIRE(pair().err.empty());     \
    } while (0)

}  // namespace

TEST_CASE("remap alone: pages become memfd-backed in place, bytes and neighbours kept, and go back") {
    // malloc'd neighbours in the same pages as the registered block.
    std::vector<uint8_t*> blocks;
    for (int i = 0; i < 8; ++i) {
        blocks.push_back(static_cast<uint8_t*>(std::malloc(700)));
        fill(blocks.back(), 700, uint32_t(i));
    }
    uint8_t* mid = blocks[4];
    const auto before = api::remap::counters();
    api::remap::Share sh;
    std::string err;
    REQUIRE(api::remap::share(mid, 700, true, sh, err) == Status::ok);
    INFO(err);
    CHECK(sh.remapped);
    CHECK(sh.offset == reinterpret_cast<uintptr_t>(mid));  // the file offset is the address
    CHECK(sh.lo == (reinterpret_cast<uintptr_t>(mid) & ~uintptr_t(kPage - 1)));
    CHECK(on_memfd(mid));
    CHECK(maps_line(mid).find(" rw-s ") != std::string::npos);
    for (int i = 0; i < 8; ++i) CHECK(same_fill(blocks[size_t(i)], 700, uint32_t(i)));
    // The fd holds the same bytes at that offset.
    std::vector<uint8_t> viafd(700);
    REQUIRE(::pread(sh.fd, viafd.data(), 700, off_t(sh.offset)) == 700);
    CHECK(same_fill(viafd.data(), 700, 4));
    // Writes through the program's address show in the file (one page, not a copy).
    mid[10] = 0xEE;
    uint8_t one = 0;
    REQUIRE(::pread(sh.fd, &one, 1, off_t(sh.offset + 10)) == 1);
    CHECK(one == 0xEE);
    mid[10] = uint8_t((10 * 131 + 4 * 7) ^ 4);
    ::close(sh.fd);
    const auto mid_c = api::remap::counters();
    CHECK(mid_c.shares == before.shares + 1);
    CHECK(mid_c.pages_replaced - before.pages_replaced == (sh.hi - sh.lo) / kPage);

    // A second, overlapping share: nothing copied again.
    api::remap::Share sh2;
    REQUIRE(api::remap::share(mid + 100, 200, false, sh2, err) == Status::ok);
    ::close(sh2.fd);
    CHECK(api::remap::counters().pages_replaced == mid_c.pages_replaced);
    api::remap::unshare(sh2);
    CHECK(on_memfd(mid));  // the first still holds the pages
    api::remap::unshare(sh);
    CHECK_FALSE(on_memfd(mid));  // private anonymous again
    CHECK(maps_line(mid).find(" rw-p ") != std::string::npos);
    const auto after = api::remap::counters();
    CHECK(after.pages_reverted - mid_c.pages_reverted == (sh.hi - sh.lo) / kPage);
    CHECK(after.bytes_punched - mid_c.bytes_punched == sh.hi - sh.lo);
    for (int i = 0; i < 8; ++i) CHECK(same_fill(blocks[size_t(i)], 700, uint32_t(i)));
    for (auto* b : blocks) std::free(b);
    CHECK(malloc_trim(0) >= 0);
}

TEST_CASE("remap alone: a range over mappings of different protections keeps each one's") {
    auto* m = static_cast<uint8_t*>(::mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(m != MAP_FAILED);
    fill(m, 4 * kPage, 40);
    REQUIRE(::mprotect(m + 2 * kPage, 2 * kPage, PROT_READ) == 0);
    api::remap::Share sh;
    std::string err;
    REQUIRE(api::remap::share(m + 10, 4 * kPage - 20, false, sh, err) == Status::ok);
    ::close(sh.fd);
    CHECK(maps_line(m).find(" rw-s ") != std::string::npos);
    CHECK(maps_line(m + 3 * kPage).find(" r--s ") != std::string::npos);
    CHECK(same_fill(m, 4 * kPage, 40));
    api::remap::unshare(sh);
    CHECK(maps_line(m).find(" rw-p ") != std::string::npos);
    CHECK(maps_line(m + 3 * kPage).find(" r--p ") != std::string::npos);
    CHECK(same_fill(m, 4 * kPage, 40));
    ::munmap(m, 4 * kPage);
}

namespace {
__attribute__((noinline)) int deep(int n);
int deep_want(int n);
}  // namespace

TEST_CASE("remap alone: the lowest page of the main stack: only it is replaced, the stack still grows") {
    std::ifstream f("/proc/self/maps");
    std::string line;
    unsigned long s = 0, e = 0;
    while (std::getline(f, line))
        if (line.find("[stack]") != std::string::npos) std::sscanf(line.c_str(), "%lx-%lx", &s, &e);
    REQUIRE(s != 0);
    volatile int here = 0;
    const auto sp = reinterpret_cast<uintptr_t>(&here);
    auto* low = reinterpret_cast<uint8_t*>(s);
    api::remap::Share sh;
    std::string err;
    REQUIRE(api::remap::share(low + 8, 100, true, sh, err) == Status::ok);
    ::close(sh.fd);
    CHECK(on_memfd(low));
    CHECK_FALSE(on_memfd(low + kPage));  // only the page asked
    // The stack grew a page below it first (that piece no longer holds start_stack: no "[stack]").
    CHECK(maps_line(low - kPage).find(" rw-p ") != std::string::npos);
    // Recurse down through the replaced page and below the old bottom.
    const int frames = int((sp - s) / 4096) + 32;
    CHECK(deep(frames) == deep_want(frames));
    api::remap::unshare(sh);
    CHECK_FALSE(on_memfd(low));
    // Now the lowest mapping of the stack is one without the "[stack]" name: its lowest page too.
    std::ifstream f2("/proc/self/maps");
    unsigned long s2 = 0;
    while (std::getline(f2, line)) {
        unsigned long a = 0, b = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx", &a, &b) == 2 && b == s)  // the mapping below the swapped page
            s2 = a;
    }
    REQUIRE(s2 != 0);
    REQUIRE(s2 < s);
    CHECK(maps_line(reinterpret_cast<void*>(s2)).find("[stack]") == std::string::npos);
    REQUIRE(api::remap::share(reinterpret_cast<uint8_t*>(s2) + 8, 100, true, sh, err) == Status::ok);
    ::close(sh.fd);
    CHECK(on_memfd(reinterpret_cast<void*>(s2)));
    CHECK(maps_line(reinterpret_cast<void*>(s2 - kPage)).find(" rw-p ") != std::string::npos);
    const int frames2 = int((sp - s2) / 4096) + 32;
    CHECK(deep(frames2) == deep_want(frames2));
    api::remap::unshare(sh);
}

namespace {
// Registers the 128 KiB of this thread's stack just below its own frame: the frames of share() and
// unshare() themselves live in those pages while they copy and swap them.
__attribute__((noinline)) bool share_own_frames(uint64_t& copied) {
    volatile uint8_t here = 1;
    const auto top = reinterpret_cast<uintptr_t>(&here) & ~uintptr_t(kPage - 1);
    auto* lo = reinterpret_cast<uint8_t*>(top - 128 * 1024);
    api::remap::Share sh;
    std::string err;
    const auto before = api::remap::counters();
    if (api::remap::share(lo, 128 * 1024, true, sh, err) != Status::ok) return false;
    ::close(sh.fd);
    const bool shared = on_memfd(lo) && on_memfd(lo + 127 * 1024);
    copied = api::remap::counters().bytes_copied - before.bytes_copied;
    api::remap::unshare(sh);
    return shared && !on_memfd(lo) && here == 1 && deep(8) == deep_want(8);
}
}  // namespace

TEST_CASE("remap alone: the registering thread's own frames in the pages it swaps") {
    bool ok = false;
    uint64_t copied = 0;
    std::thread t([&] { ok = share_own_frames(copied); });  // a thread's stack: 8 MiB mapped
    t.join();
    CHECK(ok);
    CHECK(copied == 128 * 1024);
}

TEST_CASE("remap alone: memory unmapped while shared: nothing to copy back, its memfd pages freed") {
    auto* m = static_cast<uint8_t*>(::mmap(nullptr, 8 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(m != MAP_FAILED);
    fill(m, 8 * kPage, 50);
    api::remap::Share sh;
    std::string err;
    REQUIRE(api::remap::share(m, 8 * kPage, true, sh, err) == Status::ok);
    std::vector<uint8_t> back(8 * kPage);
    ::munmap(m, 8 * kPage);  // free() of a large block before dereg (a program bug with any HCA)
    // The registration still sees the bytes (as a pinned MR would).
    REQUIRE(::pread(sh.fd, back.data(), back.size(), off_t(sh.offset)) == ssize_t(back.size()));
    CHECK(same_fill(back.data(), back.size(), 50));
    const auto before = api::remap::counters();
    api::remap::unshare(sh);
    const auto after = api::remap::counters();
    CHECK(after.pages_reverted == before.pages_reverted);
    CHECK(after.bytes_punched - before.bytes_punched == 8 * kPage);
    REQUIRE(::pread(sh.fd, back.data(), back.size(), off_t(sh.offset)) == ssize_t(back.size()));
    CHECK(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0; }));  // a hole now
    ::close(sh.fd);
}

TEST_CASE("remap alone: refusals name the reason") {
    api::remap::Share sh;
    std::string err;
    // Unmapped.
    void* hole = ::mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(hole != MAP_FAILED);
    ::munmap(static_cast<char*>(hole) + kPage, kPage);
    CHECK(api::remap::share(hole, 3 * kPage, false, sh, err) == Status::bad_address);
    CHECK(err.find("is not mapped") != std::string::npos);
    CHECK(api::remap::last_error() == err);
    // Read-only pages with write access; PROT_NONE.
    ::mprotect(hole, kPage, PROT_READ);
    CHECK(api::remap::share(hole, 100, true, sh, err) == Status::bad_address);
    CHECK(err.find("read-only memory") != std::string::npos);
    ::mprotect(hole, kPage, PROT_NONE);
    CHECK(api::remap::share(hole, 100, false, sh, err) == Status::bad_address);
    CHECK(err.find("not readable") != std::string::npos);
    ::munmap(hole, kPage);
    ::munmap(static_cast<char*>(hole) + 2 * kPage, kPage);
    // MAP_SHARED anonymous memory: not ours to replace, and not a sealed memfd.
    void* sa = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(sa != MAP_FAILED);
    CHECK(api::remap::share(sa, 64, true, sh, err) == Status::not_supported);
    CHECK(err.find("F_SEAL_SHRINK") != std::string::npos);
    ::munmap(sa, kPage);
    CHECK(api::remap::share(nullptr, 0, true, sh, err) == Status::invalid_argument);
}

TEST_CASE("daemon: malloc, memalign, mmap, .bss, large malloc: the daemon's DMA at the program's addresses") {
    NEED_PAIR();
    SECTION("malloc, small (neighbours in the same page)") {
        auto* x = static_cast<uint8_t*>(std::malloc(1000));
        auto* y = static_cast<uint8_t*>(std::malloc(1000));
        auto* z = static_cast<uint8_t*>(std::malloc(1000));
        auto* guard = static_cast<uint8_t*>(std::malloc(64));
        fill(guard, 64, 99);
        prove(x, y, z, 1000, 1);
        CHECK(same_fill(guard, 64, 99));
        std::free(x);
        std::free(y);
        std::free(z);
        std::free(guard);
    }
    SECTION("malloc, large (glibc serves it with mmap)") {
        const size_t n = 1 << 20;
        auto* x = static_cast<uint8_t*>(std::malloc(n));
        auto* y = static_cast<uint8_t*>(std::malloc(n));
        auto* z = static_cast<uint8_t*>(std::malloc(n));
        prove(x, y, z, n, 2);
        std::free(x);
        std::free(y);
        std::free(z);
    }
    SECTION("memalign and posix_memalign") {
        void* x = memalign(4096, 3 * 4096);
        void* y = nullptr;
        REQUIRE(posix_memalign(&y, 64, 5000) == 0);
        void* z = memalign(512, 5000);
        prove(x, y, z, 5000, 3);
        std::free(x);
        std::free(y);
        std::free(z);
    }
    SECTION("mmap MAP_PRIVATE|MAP_ANONYMOUS, unaligned inside") {
        auto* m = static_cast<uint8_t*>(::mmap(nullptr, 16 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        REQUIRE(m != MAP_FAILED);
        fill(m, 16 * kPage, 9);
        prove(m + 100, m + 5 * kPage + 7, m + 11 * kPage + 3, 4 * kPage - 200, 4);
        CHECK(same_fill(m, 100, 9));  // bytes before the first region: kept
        CHECK_FALSE(on_memfd(m));     // and every page private again
        ::munmap(m, 16 * kPage);
    }
    SECTION(".bss") {
        static uint8_t bss[3][6000];
        prove(bss[0], bss[1], bss[2], 6000, 5);
    }
}

namespace {
// Uses ~1 MiB of stack below the caller: the stack still grows after its pages were replaced.
__attribute__((noinline)) int deep(int n) {
    volatile char pad[4096];
    pad[0] = char(n & 0x7f);
    return n == 0 ? pad[0] : deep(n - 1) + pad[0];
}
int deep_want(int n) {
    int sum = 0;
    for (int k = 0; k <= n; ++k) sum += k & 0x7f;
    return sum;
}
__attribute__((noinline)) void stack_case() {
    uint8_t buf[3][9000];  // spans pages; frames of this thread share them
    prove(buf[0], buf[1], buf[2], 9000, 6);
    CHECK(deep(256) == deep_want(256));
}
}  // namespace

TEST_CASE("daemon: the stack (the caller's own frames share the pages)") {
    NEED_PAIR();
    stack_case();
    CHECK(deep(250) == deep_want(250));
    // Another thread's stack.
    std::thread t([] { stack_case(); });
    t.join();
}

TEST_CASE("daemon: read-only pages register for local read; write access is refused") {
    NEED_PAIR();
    Pair& p = pair();
    auto* ro = static_cast<uint8_t*>(::mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(ro != MAP_FAILED);
    fill(ro, 2 * kPage, 7);
    REQUIRE(::mprotect(ro, 2 * kPage, PROT_READ) == 0);
    CHECK(p.a.ctx->reg_mr(*p.a.pd, ro, 100, access::local_write).status == Status::bad_address);
    CHECK(api::remap::last_error().find("read-only memory") != std::string::npos);
    CHECK(p.a.ctx->reg_mr(*p.a.pd, ro, 100, access::remote_write | access::local_write).status == Status::bad_address);
    auto mr = p.a.ctx->reg_mr(*p.a.pd, ro + 10, 5000, access::remote_read);
    REQUIRE(mr.status == Status::ok);
    CHECK(maps_line(ro).find(" r--s ") != std::string::npos);
    std::vector<uint8_t> dst(5000);
    auto md = p.b.ctx->reg_mr(*p.b.pd, dst.data(), dst.size(), access::local_write);
    REQUIRE(md.status == Status::ok);
    // b READs a's read-only pages.
    const Wc w = post_one(p.b, WrOpcode::rdma_read, dst.data(), md.value->lkey(), 5000, reinterpret_cast<uintptr_t>(ro + 10), mr.value->rkey());
    REQUIRE(w.status == WcStatus::success);
    CHECK(std::memcmp(dst.data(), ro + 10, 5000) == 0);
    CHECK(mr.value->destroy() == Status::ok);
    CHECK(md.value->destroy() == Status::ok);
    CHECK(maps_line(ro).find(" r--p ") != std::string::npos);
    CHECK(same_fill(ro, 2 * kPage, 7));
    ::munmap(ro, 2 * kPage);
}

TEST_CASE("daemon: MAP_SHARED mappings: a sealed memfd goes as it is, other files are refused") {
    NEED_PAIR();
    Pair& p = pair();
    const int fd = ::memfd_create("program-own", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, off_t(8 * kPage)) == 0);
    REQUIRE(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
    auto* m = static_cast<uint8_t*>(::mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(2 * kPage)));
    REQUIRE(m != MAP_FAILED);
    std::vector<uint8_t> src(3000), back(3000);
    prove(src.data(), m + 123, back.data(), 3000, 8);
    // The daemon wrote the file itself (at its own offset), not a copy.
    std::vector<uint8_t> f(3000);
    REQUIRE(::pread(fd, f.data(), 3000, off_t(2 * kPage + 123)) == 3000);
    CHECK(same_fill(f.data(), 3000, 8));
    CHECK_FALSE(on_memfd(m));
    ::munmap(m, 4 * kPage);
    ::close(fd);

    // A file that can shrink.
    char path[] = "/tmp/hcaemu-mem-file-XXXXXX";
    const int ff = ::mkstemp(path);
    REQUIRE(ff >= 0);
    ::unlink(path);
    REQUIRE(::ftruncate(ff, off_t(kPage)) == 0);
    void* fm = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, ff, 0);
    REQUIRE(fm != MAP_FAILED);
    CHECK(p.a.ctx->reg_mr(*p.a.pd, fm, 100, access::local_write).status == Status::not_supported);
    CHECK(api::remap::last_error().find("F_SEAL_SHRINK") != std::string::npos);
    ::munmap(fm, kPage);
    ::close(ff);
    // A range running from private memory into a sealed memfd's shared mapping: two fds, refused.
    auto* two = static_cast<uint8_t*>(::mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(two != MAP_FAILED);
    const int fd2 = ::memfd_create("program-own-2", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(::ftruncate(fd2, off_t(kPage)) == 0);
    REQUIRE(::fcntl(fd2, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
    REQUIRE(::mmap(two + kPage, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd2, 0) != MAP_FAILED);
    CHECK(p.a.ctx->reg_mr(*p.a.pd, two + 100, kPage, access::local_write).status == Status::not_supported);
    CHECK(api::remap::last_error().find("spans the MAP_SHARED mapping") != std::string::npos);
    CHECK_FALSE(on_memfd(two));  // nothing replaced
    ::munmap(two, 2 * kPage);
    ::close(fd2);
}

TEST_CASE("daemon: overlapping registrations, dereg and re-registration keep the bytes and the pages") {
    NEED_PAIR();
    Pair& p = pair();
    const size_t n = 64 * 1024;
    auto* m = static_cast<uint8_t*>(::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(m != MAP_FAILED);
    fill(m, n, 11);
    auto r1 = p.b.ctx->reg_mr(*p.b.pd, m, 40000, kRw);
    REQUIRE(r1.status == Status::ok);
    const auto c1 = api::remap::counters();
    auto r2 = p.b.ctx->reg_mr(*p.b.pd, m + 30000, 30000, kRw);  // overlaps r1's last pages
    REQUIRE(r2.status == Status::ok);
    const auto c2 = api::remap::counters();
    // Only the pages r1 did not cover were copied.
    CHECK(c2.pages_replaced - c1.pages_replaced == (60000 + kPage - 1) / kPage - (40000 + kPage - 1) / kPage);
    CHECK(same_fill(m, n, 11));
    // WRITE through r2 into the overlap; READ it back through r1: one set of pages.
    std::vector<uint8_t> src(5000), back(5000);
    fill(src.data(), src.size(), 12);
    auto ms = p.a.ctx->reg_mr(*p.a.pd, src.data(), src.size(), access::local_write);
    auto mb = p.a.ctx->reg_mr(*p.a.pd, back.data(), back.size(), access::local_write);
    REQUIRE(ms.status == Status::ok);
    REQUIRE(mb.status == Status::ok);
    Wc w = post_one(p.a, WrOpcode::rdma_write, src.data(), ms.value->lkey(), 5000, reinterpret_cast<uintptr_t>(m + 33000), r2.value->rkey());
    REQUIRE(w.status == WcStatus::success);
    CHECK(std::memcmp(m + 33000, src.data(), 5000) == 0);
    CHECK(r1.value->destroy() == Status::ok);  // r2 still holds the overlap
    CHECK(on_memfd(m + 33000));
    CHECK_FALSE(on_memfd(m));
    w = post_one(p.a, WrOpcode::rdma_read, back.data(), mb.value->lkey(), 5000, reinterpret_cast<uintptr_t>(m + 33000), r2.value->rkey());
    REQUIRE(w.status == WcStatus::success);
    CHECK(back == src);
    CHECK(r2.value->destroy() == Status::ok);
    CHECK_FALSE(on_memfd(m + 33000));
    CHECK(std::memcmp(m + 33000, src.data(), 5000) == 0);
    CHECK(same_fill(m, 33000, 11));
    // Re-registration after dereg: the bytes the program wrote meanwhile are what the daemon sees.
    fill(m, n, 13);
    auto r3 = p.b.ctx->reg_mr(*p.b.pd, m, n, kRw);
    REQUIRE(r3.status == Status::ok);
    w = post_one(p.a, WrOpcode::rdma_read, back.data(), mb.value->lkey(), 5000, reinterpret_cast<uintptr_t>(m + 100), r3.value->rkey());
    REQUIRE(w.status == WcStatus::success);
    CHECK(std::memcmp(back.data(), m + 100, 5000) == 0);
    CHECK(same_fill(m, n, 13));
    CHECK(r3.value->destroy() == Status::ok);
    CHECK(ms.value->destroy() == Status::ok);
    CHECK(mb.value->destroy() == Status::ok);
    ::munmap(m, n);
}

TEST_CASE("daemon: fork after registration: the child does not get the region, the parent keeps working") {
    NEED_PAIR();
    Pair& p = pair();
    auto* reg = static_cast<uint8_t*>(memalign(kPage, 2 * kPage));
    auto* other = static_cast<uint8_t*>(memalign(kPage, kPage));
    fill(other, kPage, 21);
    auto mr = p.b.ctx->reg_mr(*p.b.pd, reg, 2 * kPage, kRw);
    REQUIRE(mr.status == Status::ok);
    const pid_t child = ::fork();
    if (child == 0) {
        // In the child: the registered pages are not mapped (MADV_DONTFORK), the others are.
        unsigned char vec[2];
        const bool gone = ::mincore(reg, 2 * kPage, vec) != 0 && errno == ENOMEM;
        const bool kept = ::mincore(other, kPage, vec) == 0 && other[5] == uint8_t((5 * 131 + 21 * 7) ^ 21);
        ::_exit(gone && kept ? 0 : 1);
    }
    REQUIRE(child > 0);
    int st = 0;
    REQUIRE(::waitpid(child, &st, 0) == child);
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
    std::vector<uint8_t> src(2 * kPage);
    fill(src.data(), src.size(), 22);
    auto ms = p.a.ctx->reg_mr(*p.a.pd, src.data(), src.size(), access::local_write);
    REQUIRE(ms.status == Status::ok);
    const Wc w = post_one(p.a, WrOpcode::rdma_write, src.data(), ms.value->lkey(), src.size(), reinterpret_cast<uintptr_t>(reg), mr.value->rkey());
    REQUIRE(w.status == WcStatus::success);
    CHECK(std::memcmp(reg, src.data(), src.size()) == 0);
    CHECK(mr.value->destroy() == Status::ok);
    CHECK(ms.value->destroy() == Status::ok);
    std::free(reg);
    std::free(other);
}

TEST_CASE("daemon: huge pages (MAP_HUGETLB)") {
    NEED_PAIR();
    const size_t huge = 2u << 20;
    void* h = ::mmap(nullptr, huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (h == MAP_FAILED) {
        WARN("skipped: no 2 MiB huge page to map here (HugePages_Free is 0; the copy needs a second one)");
        return;
    }
    auto* m = static_cast<uint8_t*>(h);
    std::vector<uint8_t> src(8000), back(8000);
    Pair& p = pair();
    auto r = p.b.ctx->reg_mr(*p.b.pd, m + 1000, 8000, kRw);
    if (r.status == Status::no_resources) {
        WARN("skipped: one huge page only, the copy needs another: " + api::remap::last_error());
        ::munmap(h, huge);
        return;
    }
    REQUIRE(r.status == Status::ok);
    CHECK(r.value->destroy() == Status::ok);
    prove(src.data(), m + 1000, back.data(), 8000, 30);
    ::munmap(h, huge);
}

TEST_CASE("daemon: registration cost per MiB (copy and remap; dereg copies back)") {
    NEED_PAIR();
    Pair& p = pair();
    const size_t n = 64u << 20;
    auto* m = static_cast<uint8_t*>(::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(m != MAP_FAILED);
    std::memset(m, 0x5A, n);  // populated, as a buffer in use is
    // Best of 5 (the machine may be shared: the minimum is the mechanism's own cost).
    double reg_ms = 1e9, dereg_ms = 1e9, rereg_ms = 1e9;
    const auto ms = [](Clock::time_point x, Clock::time_point y) { return std::chrono::duration<double, std::milli>(y - x).count(); };
    for (int i = 0; i < 5; ++i) {
        const auto t0 = Clock::now();
        auto r = p.b.ctx->reg_mr(*p.b.pd, m, n, kRw);
        const auto t1 = Clock::now();
        REQUIRE(r.status == Status::ok);
        auto r2 = p.b.ctx->reg_mr(*p.b.pd, m, n, kRw);  // pages already shared: no copy
        const auto t2 = Clock::now();
        REQUIRE(r2.status == Status::ok);
        CHECK(r2.value->destroy() == Status::ok);
        const auto t3 = Clock::now();
        CHECK(r.value->destroy() == Status::ok);
        const auto t4 = Clock::now();
        reg_ms = std::min(reg_ms, ms(t0, t1));
        rereg_ms = std::min(rereg_ms, ms(t1, t2));
        dereg_ms = std::min(dereg_ms, ms(t3, t4));
    }
    CHECK(m[n - 1] == 0x5A);
    ::munmap(m, n);
    const double mib = double(n >> 20);
    std::printf("64 MiB of populated private memory, best of 5: reg_mr %.3f ms/MiB (copy + swap + daemon mmap), "
                "reg_mr of pages already shared %.3f ms/MiB, dereg_mr %.3f ms/MiB (copy back + punch)\n",
                reg_ms / mib, rereg_ms / mib, dereg_ms / mib);
    // A small registration: the fixed cost (maps reads, clone, the daemon's round trip).
    auto* s = static_cast<uint8_t*>(std::malloc(256));
    double pair_us = 1e9, remap_us = 1e9, plain_us = 1e9;
    const auto us = [](Clock::time_point x, Clock::time_point y) { return std::chrono::duration<double, std::micro>(y - x).count(); };
    auto buf = p.b.ctx->alloc_buffer(4096);
    REQUIRE(buf.ok());
    for (int i = 0; i < 50; ++i) {
        const auto t0 = Clock::now();
        auto r = p.b.ctx->reg_mr(*p.b.pd, s, 256, kRw);
        REQUIRE(r.status == Status::ok);
        CHECK(r.value->destroy() == Status::ok);
        const auto t1 = Clock::now();
        api::remap::Share sh;
        std::string err;
        REQUIRE(api::remap::share(s, 256, true, sh, err) == Status::ok);
        ::close(sh.fd);
        api::remap::unshare(sh);
        const auto t2 = Clock::now();
        auto rb = p.b.ctx->reg_mr(*p.b.pd, buf.value.data, 256, kRw);
        REQUIRE(rb.status == Status::ok);
        CHECK(rb.value->destroy() == Status::ok);
        const auto t3 = Clock::now();
        pair_us = std::min(pair_us, us(t0, t1));
        remap_us = std::min(remap_us, us(t1, t2));
        plain_us = std::min(plain_us, us(t2, t3));
    }
    p.b.ctx->free_buffer(buf.value);
    std::printf("256 malloc'd bytes, best of 50: reg_mr + dereg_mr %.1f us, of which remap share + unshare %.1f us; "
                "the same on alloc_buffer memory (no remap) %.1f us\n", pair_us, remap_us, plain_us);
    std::free(s);
}
