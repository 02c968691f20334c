// libFuzzer target: hcaemud's control protocol (Engine::request, tools/libhcaemu/PROTOCOL.md) and the
// shared-memory rings (tools/libhcaemu/shm.hpp) a client writes, with a device behind them: the engine
// of a real daemon (DPDK's net_ring port, as hcaemud's default; started once), without its socket.
//
// Each input is one client's life: hello, then records (see LLVMFuzzerTestOneInput):
//   request  an op and its body from the fuzzer; u32 words of the body may be replaced by handles
//            earlier replies returned (so that requests name live objects); reg_mr gets a sealed
//            memfd. The header checks of hcaemud's io thread (Server::handle) are repeated here:
//            the engine runs only requests that passed them, as in the daemon.
//   ring     bytes into a ring the daemon returned (SQ, RQ, SRQ entries and their doorbell; CQ
//            consumer index; a header word), as a hostile client may write them.
//   wqe      a send or receive WQE that names a registered MR (its iova and lkey), so that the
//            doorbell reaches the device's checks and the transport.
//   turn     Engine::turn(): the engine loop, doorbells, CQ rings, events.
// Then the client goes away (remove_client).
// Invariants, beyond "no crash, no sanitizer report": every reply is a ReplyHdr echoing op and
// seq, with a known status and error; a reply that carries an fd carries a ring of the size it
// names; once the client is gone and the zombies retried, the device holds no object.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "tools/attach/attach.hpp"
#include "tools/hcaemud/engine.hpp"
#include "tools/libhcaemu/proto.hpp"
#include "tools/libhcaemu/shm.hpp"

using namespace hcaemu;

namespace {

int g_err = 2;  // stderr, kept when libFuzzer closes it (-close_fd_mask=2: remove_client logs)

[[noreturn]] void fail(const char* what) {
    dprintf(g_err, "fuzz_ctl: invariant broken: %s\n", what);
    abort();
}

struct Reader {
    const uint8_t* p;
    size_t n;
    bool empty() const { return n == 0; }
    uint8_t u8() {
        if (!n) return 0;
        --n;
        return *p++;
    }
    uint32_t u32() {
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i) v |= uint32_t(u8()) << (8 * i);
        return v;
    }
    uint64_t u64() { return uint64_t(u32()) | uint64_t(u32()) << 32; }
    void take(void* dst, size_t k) {
        const size_t m = std::min(k, n);
        std::memcpy(dst, p, m);
        std::memset(static_cast<uint8_t*>(dst) + m, 0, k - m);
        p += m;
        n -= m;
    }
};

constexpr size_t kMemfdBytes = 1 << 20;

struct Global {
    std::unique_ptr<tools::Attached> att;
    daemon::DCounters ctr;
    std::unique_ptr<daemon::Engine> eng;
    int memfd = -1;
    uint64_t events = 0;
    uint32_t next_client = 1;
};
Global* g;

// One ring the daemon returned, mapped here as the client maps it.
struct Ring {
    uint8_t* base = nullptr;
    shm::RingKind kind = shm::RingKind::sq;
    uint32_t cap = 0, esz = 0;
    shm::RingHdr* hdr() const { return reinterpret_cast<shm::RingHdr*>(base); }
    uint8_t* slot(uint64_t i) const { return base + shm::kRingEntries + (i % cap) * esz; }
};
struct MrInfo {
    uint64_t iova = 0, len = 0;
    uint32_t lkey = 0;
};

struct Session {
    uint32_t cid = 0;
    uint32_t seq = 0;
    std::vector<uint32_t> handles;
    std::vector<MrInfo> mrs;
    std::vector<Ring> rings;
    std::vector<std::pair<void*, size_t>> maps;

    ~Session() {
        for (auto& [p, n] : maps) munmap(p, n);
    }

    void map_rings(int fd, const uint8_t* body, ctl::Op op) {
        uint64_t bytes = 0;
        std::vector<std::pair<uint64_t, shm::RingKind>> at;
        if (op == ctl::Op::create_qp) {
            ctl::CreateQpRep r;
            std::memcpy(&r, body, sizeof r);
            bytes = r.ring_bytes;
            at.push_back({r.sq_offset, shm::RingKind::sq});
            if (r.rq_offset) at.push_back({r.rq_offset, shm::RingKind::rq});
        } else if (op == ctl::Op::create_srq) {
            ctl::CreateSrqRep r;
            std::memcpy(&r, body, sizeof r);
            bytes = r.ring_bytes;
            at.push_back({0, shm::RingKind::srq});
        } else {
            ctl::CreateCqRep r;
            std::memcpy(&r, body, sizeof r);
            bytes = r.ring_bytes;
            at.push_back({0, shm::RingKind::cq});
        }
        struct stat st{};
        if (fstat(fd, &st) != 0 || uint64_t(st.st_size) != bytes || bytes == 0) fail("a ring fd of another size than the reply says");
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) fail("mmap of a ring");
        maps.push_back({p, bytes});
        for (auto [off, kind] : at) {
            Ring r;
            r.base = static_cast<uint8_t*>(p) + off;
            const shm::RingHdr* h = r.hdr();
            if (off >= bytes || h->magic != shm::kRingMagic || h->kind != uint32_t(kind)) fail("a ring header the daemon wrote is wrong");
            r.kind = kind;
            r.cap = h->cap;
            r.esz = h->entry_size;
            if (off + shm::ring_bytes(r.cap, r.esz) > bytes) fail("a ring larger than its fd");
            rings.push_back(r);
        }
    }

    // One request through the io thread's checks (Server::handle), then the engine.
    void request(ctl::Op op, const uint8_t* body) {
        ctl::Hdr h;
        h.op = uint16_t(op);
        h.len = uint32_t(sizeof h + ctl::kRequestSize[size_t(op)]);
        h.seq = ++seq;
        if (op == ctl::Op::hello) return;  // once, by the session
        daemon::Region region;
        uint64_t offset = 0, length = 0;
        if (daemon::memfd_range(op, body, offset, length)) {  // the io thread's checks, then the worker's mapping
            if (length == 0 || offset > kMemfdBytes || length > kMemfdBytes - offset) return;
            if (daemon::map_client_region(dup(g->memfd), offset, length, region) < 0) fail("a memfd not mapped");
        }
        daemon::Msg m = g->eng->request(cid, h, body, region);
        if (m.bytes.size() < sizeof(ctl::ReplyHdr)) fail("a reply shorter than ReplyHdr");
        ctl::ReplyHdr rh;
        std::memcpy(&rh, m.bytes.data(), sizeof rh);
        if (rh.h.magic != ctl::kMagic || rh.h.op != (h.op | ctl::kReplyBit) || rh.h.seq != h.seq ||
            rh.h.len != m.bytes.size())
            fail("a reply header does not echo its request");
        if (rh.error >= uint8_t(ctl::Error::count)) fail("a reply with an unknown error");
        const uint8_t* rb = m.bytes.data() + sizeof rh;
        const size_t rn = m.bytes.size() - sizeof rh;
        if (rh.status != uint8_t(Status::ok)) {
            if (m.fd >= 0) fail("a failed request returned an fd");
            return;
        }
        uint32_t handle = 0;
        if (rn >= 4) std::memcpy(&handle, rb, 4);
        switch (op) {
        case ctl::Op::alloc_pd:
        case ctl::Op::create_ah: handles.push_back(handle); break;
        case ctl::Op::reg_mr: {
            handles.push_back(handle);
            ctl::RegMrReq r;
            std::memcpy(&r, body, sizeof r);
            ctl::RegMrRep rep;
            std::memcpy(&rep, rb, sizeof rep);
            mrs.push_back({r.iova, r.length, rep.lkey});
            break;
        }
        case ctl::Op::create_cq:
        case ctl::Op::resize_cq:
        case ctl::Op::create_qp:
        case ctl::Op::create_srq:
            if (op != ctl::Op::resize_cq) handles.push_back(handle);
            if (m.fd < 0) fail("a created queue without its ring fd");
            map_rings(m.fd, rb, op);
            m.fd = -1;
            break;
        default: break;
        }
        if (m.fd >= 0) fail("an unexpected fd in a reply");
    }

    void ring_bytes(Reader& in) {
        if (rings.empty()) return;
        Ring& r = rings[in.u8() % rings.size()];
        const uint8_t what = in.u8();
        shm::RingHdr* h = r.hdr();
        switch (what % 4) {
        case 0: {  // entries at prod, then the doorbell
            const uint64_t prod = h->prod.load(std::memory_order_relaxed);
            const uint32_t k = 1 + what / 4 % 4;
            for (uint32_t i = 0; i < k; ++i) in.take(r.slot(prod + i), r.esz);
            h->prod.store(prod + k, std::memory_order_release);
            break;
        }
        case 1: h->prod.store(h->prod.load() + int8_t(in.u8()), std::memory_order_release); break;
        case 2: h->cons.store(h->cons.load() + int8_t(in.u8()), std::memory_order_release); break;
        default: {  // a header word
            const uint8_t w = in.u8() % 4;
            const uint32_t v = in.u32();
            uint32_t* words[] = {&h->magic, &h->kind, &h->cap, &h->entry_size};
            __atomic_store_n(words[w], v, __ATOMIC_RELAXED);
            break;
        }
        }
    }

    // A WQE that names a registered MR, then the doorbell.
    void wqe(Reader& in) {
        if (rings.empty()) return;
        Ring& r = rings[in.u8() % rings.size()];
        if (r.kind == shm::RingKind::cq || r.esz > 1024) return;
        const uint8_t sel = in.u8();
        MrInfo mr = mrs.empty() ? MrInfo{} : mrs[sel % mrs.size()];
        shm::Sge sge{mr.iova + in.u8(), uint32_t(in.u8()) * 16 + 1, mr.lkey};
        alignas(16) uint8_t buf[1024] = {};
        const uint64_t prod = r.hdr()->prod.load(std::memory_order_relaxed);
        if (r.kind == shm::RingKind::sq) {
            shm::SendWqe w{};
            w.wr_id = prod;
            w.opcode = uint8_t(in.u8() % 10);
            w.send_flags = in.u8() & 0xF;
            w.num_sge = 1;
            w.inline_len = in.u8();
            w.remote_addr = mr.iova + 8;
            w.rkey = in.u32();
            w.ah = handles.empty() ? 0 : handles[in.u8() % handles.size()];
            w.remote_qpn = in.u32() & 0xFFFFFF;
            w.remote_qkey = in.u32();
            std::memcpy(buf, &w, sizeof w);
            if (r.esz >= sizeof w + sizeof sge) std::memcpy(buf + sizeof w, &sge, sizeof sge);
        } else {
            shm::RecvWqe w{};
            w.wr_id = prod;
            w.num_sge = 1 + (sel >> 7);
            std::memcpy(buf, &w, sizeof w);
            if (r.esz >= sizeof w + sizeof sge) std::memcpy(buf + sizeof w, &sge, sizeof sge);
        }
        std::memcpy(r.slot(prod), buf, std::min<size_t>(r.esz, sizeof buf));
        r.hdr()->prod.store(prod + 1, std::memory_order_release);
    }
};

// Queue sizes the device accepts but that only cost time (a CQ of 32767 CQEs, a QP of 16384 WQEs:
// megabytes allocated and cleared per input) are cut to 256; sizes beyond the device's limits stay,
// for the refusals.
void clamp_sizes(ctl::Op op, uint8_t* body) {
    auto clamp = [&](size_t off, uint32_t limit) {
        uint32_t v;
        std::memcpy(&v, body + off, 4);
        if (v > 256 && v <= limit) v = 256;
        std::memcpy(body + off, &v, 4);
    };
    const DeviceAttr& a = g->att->dev().query_device();
    switch (op) {
    case ctl::Op::create_cq: clamp(offsetof(ctl::CreateCqReq, cqe), a.max_cqe); break;
    case ctl::Op::resize_cq: clamp(offsetof(ctl::ResizeCqReq, cqe), a.max_cqe); break;
    case ctl::Op::create_qp:
        clamp(offsetof(ctl::CreateQpReq, cap) + offsetof(QpCap, max_send_wr), a.max_qp_wr);
        clamp(offsetof(ctl::CreateQpReq, cap) + offsetof(QpCap, max_recv_wr), a.max_qp_wr);
        break;
    case ctl::Op::create_srq: clamp(offsetof(ctl::CreateSrqReq, attr) + offsetof(SrqAttr, max_wr), a.max_srq_wr); break;
    case ctl::Op::modify_srq: clamp(offsetof(ctl::ModifySrqReq, attr) + offsetof(SrqAttr, max_wr), a.max_srq_wr); break;
    default: break;
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    g_err = dup(2);
    g = new Global;
    tools::AttachOptions o;
    o.eal = "--no-huge -m 128 --no-pci --no-shconf -l 0 --no-telemetry --log-level lib.eal:error "
            "--file-prefix fuzzctl --vdev=net_ring0";
    o.ip = "198.18.0.1/24";
    std::string err;
    g->att = tools::Attached::open(o, err);
    if (!g->att) {
        dprintf(g_err, "fuzz_ctl: %s\n", err.c_str());
        exit(1);
    }
    // The EAL pinned this thread to lcore 0; the fuzzer may run on any core.
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int i = 0; i < CPU_SETSIZE; ++i) CPU_SET(i, &all);
    (void)sched_setaffinity(0, sizeof all, &all);
    g->eng = std::make_unique<daemon::Engine>(*g->att, g->ctr, 48, [](uint32_t, daemon::Msg&& m) {
        if (m.bytes.size() < sizeof(ctl::Hdr)) fail("an event shorter than Hdr");
        if (m.fd >= 0) close(m.fd);
        ++g->events;
    });
    g->memfd = memfd_create("fuzz_ctl", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (g->memfd < 0 || ftruncate(g->memfd, kMemfdBytes) != 0 ||
        fcntl(g->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
        dprintf(g_err, "fuzz_ctl: memfd\n");
        exit(1);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 16384) return -1;
    Reader in{data, size};
    {
        Session s;
        s.cid = g->next_client++;
        g->eng->add_client(s.cid, 1, "fuzz");
        ctl::HelloReq hello;
        ctl::Hdr hh;
        hh.op = uint16_t(ctl::Op::hello);
        hh.len = uint32_t(sizeof hh + sizeof hello);
        daemon::Region none;
        (void)g->eng->request(s.cid, hh, reinterpret_cast<const uint8_t*>(&hello), none);
        uint32_t records = 0;
        while (!in.empty() && records++ < 64) {
            const uint8_t tag = in.u8();
            switch (tag % 5) {
            case 0:
            case 1: {
                const auto op = ctl::Op(1 + in.u8() % (uint8_t(ctl::Op::count) - 1));
                alignas(16) uint8_t body[sizeof(ctl::ModifyQpReq) + 64] = {};
                static_assert(sizeof(ctl::ModifyQpReq) >= sizeof(ctl::CreateQpReq));
                const size_t n = ctl::kRequestSize[size_t(op)];
                if (n > sizeof body) break;  // none is larger
                in.take(body, n);
                // Handles of live objects into the body's first u32 words (where requests name
                // them): a mask byte, then for each bit set the index of a handle, oldest first.
                const uint8_t mask = in.u8();
                for (size_t w = 0; w < 4 && (w + 1) * 4 <= n; ++w)
                    if (mask >> w & 1) {
                        const uint8_t k = in.u8();
                        if (s.handles.empty()) continue;
                        const uint32_t hv = s.handles[k % s.handles.size()];
                        std::memcpy(body + 4 * w, &hv, 4);
                    }
                clamp_sizes(op, body);
                s.request(op, body);
                break;
            }
            case 2: s.ring_bytes(in); break;
            case 3: s.wqe(in); break;
            default:
                for (uint32_t i = 0; i < 1u + tag / 5 % 4; ++i) (void)g->eng->turn();
                break;
            }
        }
        for (int i = 0; i < 2; ++i) (void)g->eng->turn();
        g->eng->remove_client(s.cid);
    }
    for (int i = 0; i < 64 && g->att->dev().num_mrs() + g->att->dev().num_pds() > 0; ++i) (void)g->eng->turn();
    const Device& d = g->att->dev();
    if (d.num_qps() || d.num_cqs() || d.num_srqs() || d.num_ahs() || d.num_mrs() || d.num_pds())
        fail("objects left on the device after the client went away");
    return 0;
}
