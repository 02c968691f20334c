// libFuzzer target: the receive path of one HCA (transport::Hca on hca_model's Device) on the
// in-memory wire, fed frame sequences by the fuzzer from the wire's other end, in virtual time.
//
// The device, rebuilt for each input (deterministic QPNs and keys): RC, UC and UD QPs in every
// state software can put them in (RESET, INIT, RTR, RTS, SQD, ERR), an RC QP on an SRQ, receive
// WQEs posted, MRs with different access flags, each inside canary bytes, and an unregistered
// buffer. The input is a sequence of records, each a tag byte and its bytes (see run()):
//   raw      a frame as the fuzzer wrote it;
//   fixed    a frame as the fuzzer wrote it, its DestQP, addresses and ICRC made right for a live QP;
//   built    header fields picked by the fuzzer (opcode, QP, PSN near the expected one, RETH and
//            AtomicETH near a real MR, AETH, DETH, payload), built with packet/build.hpp, so that
//            the frame passes the ICRC and reaches the transport's checks;
//   local    a verbs call: post_send (so that responses find WQEs), post_recv, modify_qp;
//   time     the virtual clock moves (to the next timer or by some ns) and the HCA polls.
// Invariants, beyond "no crash, no sanitizer report": the canaries, the MRs without local or
// remote write access and the unregistered buffer keep their bytes; every frame the HCA sends
// parses with every check on; the device's sent_pkts equals the frames the wire took from it;
// every CQE names a QP of the device.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "dpdk_port/mem_wire.hpp"
#include "hca_model/device.hpp"
#include "packet/build.hpp"
#include "packet/icrc.hpp"
#include "packet/parse.hpp"
#include "transport/hca.hpp"

using namespace hcaemu;

namespace {

[[noreturn]] void fail(const char* what) {
    fprintf(stderr, "fuzz_receive: invariant broken: %s\n", what);
    abort();
}

constexpr uint32_t kLocalIp = 0xC6120001;  // 198.18.0.1: the device
constexpr uint32_t kPeerIp = 0xC6120002;   // 198.18.0.2: the fuzzer
constexpr uint32_t kRqPsn = 0x1000;        // every QP's expected PSN at RTR
constexpr uint32_t kSqPsn = 0x2000;        // every QP's first send PSN
constexpr uint32_t kPeerQpn = 0x77;        // the remote QPN of the connected QPs
constexpr uint32_t kQkey = 0x11111111;
constexpr size_t kCanary = 64;
constexpr uint8_t kCanaryByte = 0xA5;

// One memory region inside canaries: [canary][bytes][canary].
struct Region {
    uint32_t access = 0;
    size_t len = 0;
    std::vector<uint8_t> buf;  // kCanary + len + kCanary
    Mr mr;
    uint8_t* data() { return buf.data() + kCanary; }
    bool writable() const { return access::writes_memory(access); }
};
constexpr size_t kMrLen = 4096;
// An MR's initial bytes, and the canary: copied and compared with memcpy/memcmp (the loops would
// be instrumented and slow every input down).
struct Patterns {
    uint8_t fill[kMrLen];
    uint8_t canary[kCanary];
    uint8_t unregistered[kMrLen];
    Patterns() {
        for (size_t i = 0; i < kMrLen; ++i) fill[i] = uint8_t(i * 7 + 3);
        std::memset(canary, kCanaryByte, kCanary);
        std::memset(unregistered, 0x5A, kMrLen);
    }
};
const Patterns kPat;

struct Qp1 {
    QpType type;
    QpState state;
    Qp qp;
    uint32_t next_psn = kRqPsn;  // the fuzzer's own PSN count for this QP's requests
    bool dirty = true;           // something reached it: reset() takes it through RESET again
};

struct Reader {
    const uint8_t* p;
    size_t n;
    bool empty() const { return n == 0; }
    uint8_t u8() {
        if (!n) return 0;
        --n;
        return *p++;
    }
    uint16_t u16() { return uint16_t(u8() | u8() << 8); }
    uint32_t u32() { return uint32_t(u16()) | uint32_t(u16()) << 16; }
    uint64_t u64() { return uint64_t(u32()) | uint64_t(u32()) << 32; }
    std::span<const uint8_t> take(size_t k) {
        k = std::min(k, n);
        std::span<const uint8_t> s(p, k);
        p += k;
        n -= k;
        return s;
    }
};

std::vector<uint8_t> g_opcodes;    // every valid opcode
std::vector<uint8_t> g_by_type[3];  // the valid opcodes of RC, UC, UD

struct Bench {
    port::VirtualClock clock{1'000'000'000};
    port::WireConfig wc = [] {
        port::WireConfig c;
        c.latency_ns = 500;
        c.pool_frames = 96;
        c.rx_ring = 64;
        c.frame_cap = 1600;
        return c;
    }();
    port::MemWire wire{wc, clock};
    std::unique_ptr<Device> dev;
    std::unique_ptr<transport::Hca> hca;
    Pd pd;
    Cq cq;
    Srq srq;
    Ah ah;
    std::vector<Region> regions;
    std::vector<Qp1> qps;
    std::vector<uint8_t> unregistered = std::vector<uint8_t>(kPat.unregistered, kPat.unregistered + kMrLen);
    uint64_t hca_frames = 0;  // frames the HCA sent in this input, as seen at the wire's other end
    uint64_t sent0 = 0;       // sent_pkts before this input
    port::WireStats wire0;    // the wire's counts before this input
    uint32_t sq_next = kSqPsn;

    Bench() {
        DeviceAttr da;
        da.max_qp = 64;
        da.max_cq = 8;
        da.max_mr = 16;
        da.max_srq = 4;
        da.max_ah = 8;
        PortConfig pc;
        pc.mac = wc.mac[0];
        pc.ipv4[0] = kLocalIp;
        pc.link_mtu = wc.mtu;
        dev = std::make_unique<Device>(da, pc);
        // The transport first: it sizes a QP's responder resources on INIT->RTR.
        hca = std::make_unique<transport::Hca>(*dev, wire.end(0), clock);
        hca->set_neighbor(pkt::ipv4_mapped_gid(kPeerIp), wc.mac[1]);
        pd = std::move(dev->alloc_pd().value);
        cq = std::move(dev->create_cq(1024).value);
        const uint32_t acc[] = {
            access::local_write | access::remote_write | access::remote_read | access::remote_atomic,
            access::remote_read,                         // read-only for the peer: must not change
            access::local_write | access::remote_write,  // WRITE target
            access::local_write,                         // receive buffers only
            0,                                           // local read only: must not change
            access::local_write | access::remote_atomic,
        };
        for (uint32_t a : acc) {
            Region& r = regions.emplace_back();
            r.access = a;
            r.len = kMrLen;
            r.buf.resize(kCanary + r.len + kCanary);
            std::memcpy(r.buf.data(), kPat.canary, kCanary);
            std::memcpy(r.data(), kPat.fill, kMrLen);
            std::memcpy(r.data() + kMrLen, kPat.canary, kCanary);
            r.mr = std::move(dev->reg_mr(pd, r.data(), r.len, a).value);
            if (!r.mr) fail("setup: reg_mr");
        }
        AhAttr aa;
        aa.dgid = pkt::ipv4_mapped_gid(kPeerIp);
        aa.sgid_index = 1;
        ah = std::move(dev->create_ah(pd, aa).value);
        const QpState states[] = {QpState::reset, QpState::init, QpState::rtr, QpState::rts, QpState::sqd, QpState::err};
        for (QpType t : {QpType::rc, QpType::uc, QpType::ud})
            for (QpState s : states) qps.push_back(Qp1{t, s, create_qp(t, false)});
    }

    Qp create_qp(QpType t, bool on_srq) {
        QpInitAttr ia;
        ia.send_cq = &cq;
        ia.recv_cq = &cq;
        ia.qp_type = t;
        ia.cap = {16, 16, 2, 2, 64};
        if (on_srq) ia.srq = &srq;
        Qp qp = std::move(dev->create_qp(pd, ia).value);
        if (!qp) fail("setup: create_qp");
        return qp;
    }

    // Before each input: the same state as after construction, at a lower cost than building a
    // device, a wire and an HCA (every QP through RESET to its state; the SRQ and its QP anew;
    // the memory's bytes; receive WQEs).
    void reset() {
        SrqAttr sa;
        sa.max_wr = 16;
        sa.max_sge = 2;
        sa.srq_limit = 2;
        srq = std::move(dev->create_srq(pd, sa).value);
        if (!srq) fail("setup: create_srq");
        qps.push_back(Qp1{QpType::rc, QpState::rts, create_qp(QpType::rc, true)});
        // Only the QPs an input reached: the others are as construction left them.
        for (size_t i = 0; i < qps.size(); ++i) {
            Qp1& q = qps[i];
            if (!q.dirty) continue;
            to_state(q, QpState::reset);
            q.next_psn = kRqPsn;
            connect(q);
            for (uint32_t k = 0; k < 3; ++k) post_recv(uint32_t(i), uint8_t(k * 37 + i));
            q.dirty = false;
        }
        for (Region& r : regions) {
            std::memcpy(r.buf.data(), kPat.canary, kCanary);
            std::memcpy(r.data(), kPat.fill, kMrLen);
            std::memcpy(r.data() + kMrLen, kPat.canary, kCanary);
            // A key the previous input invalidated (SEND with Invalidate) is registered anew.
            if (dev->mr_by_key(r.mr.rkey()) == nullptr) {
                r.mr = Mr();
                r.mr = std::move(dev->reg_mr(pd, r.data(), r.len, r.access).value);
                if (!r.mr) fail("setup: reg_mr again");
            }
        }
        std::memcpy(unregistered.data(), kPat.unregistered, kMrLen);
        for (uint32_t k = 0; k < 6; ++k) post_srq(uint8_t(k * 53));
        drain();
        sent0 = dev->counters().get(Counter::sent_pkts);
        wire0 = wire.stats(0);
        hca_frames = 0;
    }

    // After each input: the SRQ's QP, then the SRQ, go (created and destroyed within one input,
    // so that LeakSanitizer's per-input check sees as many frees as allocations).
    void teardown() {
        qps.pop_back();
        srq = Srq();
    }

    // Deliveries and timers (retries, RNR waits, ACK timeouts) run out, bounded.
    void settle() {
        for (int i = 0; i < 24; ++i) {
            poll(2);
            const uint64_t next = std::min(hca->next_timer_ns(), wire.next_delivery_ns());
            if (next == UINT64_MAX) break;
            clock.set(std::max(next, clock.now_ns() + 1));
        }
        poll(2);
    }

    void connect(Qp1& q) {
        const QpType t = q.type;
        const QpState target = q.state;
        if (target == QpState::reset) return;
        QpAttr a;
        a.qp_state = QpState::init;
        a.port_num = 1;
        a.qkey = kQkey;
        a.qp_access_flags = access::remote_write | access::remote_read | access::remote_atomic;
        uint32_t m = qp_attr::state | qp_attr::pkey_index | qp_attr::port;
        m |= t == QpType::ud ? qp_attr::qkey : qp_attr::access_flags;
        if (!q.qp.modify(a, m).ok()) fail("setup: INIT");
        if (target == QpState::init) return;
        if (target == QpState::err) return to_state(q, QpState::err);
        a.qp_state = QpState::rtr;
        a.path_mtu = Mtu::mtu1024;
        a.dest_qp_num = kPeerQpn;
        a.rq_psn = kRqPsn;
        a.max_dest_rd_atomic = 4;
        a.min_rnr_timer = 1;
        a.ah_attr.dgid = pkt::ipv4_mapped_gid(kPeerIp);
        a.ah_attr.sgid_index = 1;
        m = qp_attr::state;
        if (t == QpType::rc)
            m |= qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn | qp_attr::max_dest_rd_atomic |
                 qp_attr::min_rnr_timer;
        if (t == QpType::uc) m |= qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn;
        if (!q.qp.modify(a, m).ok()) fail("setup: RTR");
        if (target == QpState::rtr) return;
        a.qp_state = QpState::rts;
        a.sq_psn = kSqPsn;
        a.timeout = 10;
        a.retry_cnt = 2;
        a.rnr_retry = 2;
        a.max_rd_atomic = 4;
        m = qp_attr::state | qp_attr::sq_psn;
        if (t == QpType::rc) m |= qp_attr::timeout | qp_attr::retry_cnt | qp_attr::rnr_retry | qp_attr::max_qp_rd_atomic;
        if (!q.qp.modify(a, m).ok()) fail("setup: RTS");
        if (target == QpState::sqd) to_state(q, QpState::sqd);
    }

    static void to_state(Qp1& q, QpState s) {
        QpAttr a;
        a.qp_state = s;
        (void)q.qp.modify(a, qp_attr::state);
    }

    Region& region(uint8_t b) { return regions[b % regions.size()]; }

    void post_recv(uint32_t qi, uint8_t b) {
        qps[qi].dirty = true;
        Region& r = region(b & 1 ? 3 : 0);  // receive buffers: local write
        Sge sge[2] = {{r.mr.addr() + (b & 0x3F) * 16u, 64u + (b >> 6) * 300u, r.mr.lkey()},
                      {r.mr.addr() + 2048, 1024, r.mr.lkey()}};
        RecvWr w;
        w.wr_id = 0x5000 + b;
        w.sg_list = sge;
        w.num_sge = 1 + (b >> 7);
        const RecvWr* bad = nullptr;
        (void)qps[qi].qp.post_recv(&w, &bad);
    }
    void post_srq(uint8_t b) {
        Region& r = regions[0];
        Sge sge{r.mr.addr() + (b & 0x7F) * 8u, 512, r.mr.lkey()};
        RecvWr w;
        w.wr_id = 0x6000 + b;
        w.sg_list = &sge;
        w.num_sge = 1;
        const RecvWr* bad = nullptr;
        (void)srq.post_recv(&w, &bad);
    }

    void post_send(Reader& in) {
        Qp1& q = qps[in.u8() % qps.size()];
        q.dirty = true;
        const uint8_t op = in.u8();
        const uint8_t lr = in.u8();
        const uint16_t len = in.u16() & 0x1FFF;
        Region& l = region(lr);
        Region& rem = region(lr >> 4);
        Sge sge{l.mr.addr() + (lr & 8 ? 8 : 0), std::min<uint32_t>(len, 4000), l.mr.lkey()};
        SendWr w;
        w.wr_id = 0x7000 + op;
        w.sg_list = &sge;
        w.num_sge = len ? 1 : 0;
        w.opcode = WrOpcode(op % 10);
        w.send_flags = send_flag::signaled | (op & 0x80 ? send_flag::solicited : 0) | (op & 0x40 ? send_flag::fence : 0);
        w.imm_data = 0xABCD;
        w.invalidate_rkey = rem.mr.rkey();
        w.rdma = {rem.mr.addr() + (lr & 0x10 ? 64 : 0), rem.mr.rkey()};
        w.atomic = {rem.mr.addr() + 8, 1, 2, rem.mr.rkey()};
        w.ud = {&ah, kPeerQpn, kQkey};
        const SendWr* bad = nullptr;
        (void)q.qp.post_send(&w, &bad);
    }

    void modify(Reader& in) {
        Qp1& q = qps[in.u8() % qps.size()];
        q.dirty = true;
        const uint8_t s = in.u8();
        to_state(q, QpState(s % kQpStateCount));
    }

    // Sends one frame from the fuzzer's end.
    void inject(std::span<const uint8_t> frame) {
        pkt::Packet pk;
        if (pkt::decoded_bth(pkt::parse(frame, pk, pkt::ParseOptions{false, false, false})))
            for (Qp1& q : qps) q.dirty |= q.qp.qpn() == pk.h.bth.dest_qp;
        port::Port& p = wire.end(1);
        port::Frame f;
        if (!p.alloc(f)) return;
        const size_t n = std::min<size_t>(frame.size(), f.cap);
        std::memcpy(f.data, frame.data(), n);
        f.len = uint32_t(n);
        if (p.tx_burst(&f, 1) != 1) p.free(f);
    }

    // What the HCA sent: taken at the fuzzer's end, each frame checked.
    void drain() {
        port::Port& p = wire.end(1);
        port::Frame fr[32];
        uint16_t n;
        while ((n = p.rx_burst(fr, 32)) > 0) {
            for (uint16_t i = 0; i < n; ++i) {
                pkt::Packet pk;
                if (pkt::parse({fr[i].data, fr[i].len}, pk) != pkt::ParseError::ok) fail("the HCA sent a bad frame");
                ++hca_frames;
                p.free(fr[i]);
            }
        }
        Wc wcs[16];
        int k;
        while ((k = cq.poll(wcs)) > 0)
            for (int i = 0; i < k; ++i) {
                bool known = false;
                for (const Qp1& q : qps) known |= q.qp.qpn() == wcs[i].qp_num;
                if (!known) fail("a CQE names no QP of the device");
            }
        AsyncEvent ev;
        while (dev->get_async_event(ev)) {
        }
    }

    void poll(uint32_t turns) {
        for (uint32_t i = 0; i < turns; ++i) {
            hca->poll();
            drain();
        }
    }

    void time(Reader& in) {
        const uint8_t b = in.u8();
        if (b & 0x80) {
            const uint64_t next = std::min(hca->next_timer_ns(), wire.next_delivery_ns());
            if (next != UINT64_MAX) clock.set(next);
        } else {
            clock.advance(uint64_t(1) << (b & 0x1F));
        }
        poll(1 + (b >> 5 & 3));
    }

    // A frame from parsed fields: the fuzzer's headers for a QP of the device, built right.
    void built(Reader& in) {
        Qp1& q = qps[in.u8() % qps.size()];
        const uint8_t ctl = in.u8();
        // Mostly an opcode of the QP's own transport; sometimes any.
        const uint8_t os = in.u8();
        const std::vector<uint8_t>& ops = os & 0x80 ? g_opcodes : g_by_type[uint8_t(q.type) - uint8_t(QpType::rc)];
        const uint8_t opcode = ops[os % ops.size()];
        const pkt::OpcodeInfo& oi = pkt::opcode_info(opcode);
        pkt::Headers h;
        h.eth.src = wc.mac[1];
        h.eth.dst = wc.mac[0];
        h.eth.ethertype = pkt::kEthTypeIpv4;
        h.ip4.src = ctl & 0x01 ? kPeerIp + 1 : kPeerIp;  // sometimes a stranger
        h.ip4.dst = kLocalIp;
        h.udp.sport = 0xC123;
        h.bth.opcode = opcode;
        h.bth.se = ctl & 0x02;
        h.bth.ack_req = ctl & 0x04;
        h.bth.mig = ctl & 0x08;
        if (ctl & 0x10) h.bth.pkey = in.u16();
        h.bth.dest_qp = ctl & 0x20 ? in.u32() & 0xFFFFFF : q.qp.qpn();
        const int16_t delta = int16_t(in.u16());
        if (oi.request) {
            h.bth.psn = (q.next_psn + uint32_t(int32_t(delta >> 8))) & 0xFFFFFF;
            if (oi.is_last() || oi.pos == pkt::Position::first || oi.pos == pkt::Position::middle)
                q.next_psn = (h.bth.psn + 1) & 0xFFFFFF;
        } else {
            h.bth.psn = (kSqPsn + uint32_t(int32_t(delta))) & 0xFFFFFF;
        }
        Region& r = region(in.u8());
        const uint8_t off = in.u8();
        const uint8_t lsel = in.u8();
        uint32_t plen = 0;
        if (oi.payload) {
            const uint8_t ps = in.u8();
            plen = ps & 0x80 ? uint32_t(ps & 0x7F) : uint32_t(ps) * 16;  // up to 2032: above the MTU too
            if ((ps & 0xC0) == 0x40) plen = 1024;
        }
        uint32_t dma_len;
        switch (lsel & 7) {
        case 0: dma_len = 0; break;
        case 1: dma_len = 1024; break;
        case 2: dma_len = 0x80000000u; break;
        case 3: dma_len = 0xFFFFFFFFu; break;
        case 4: dma_len = in.u16(); break;
        default: dma_len = plen; break;  // the common valid case: the payload's length
        }
        const uint64_t va = lsel & 0x08 ? in.u64() : r.mr.addr() + uint64_t(int8_t(off)) * 8 + (lsel & 0x10 ? 1 : 0);
        const uint32_t rkey = lsel & 0x20 ? in.u32() : r.mr.rkey();
        h.reth = {va, rkey, dma_len};
        h.atomic = {va, rkey, in.u64(), in.u64()};
        h.aeth.syndrome = in.u8();
        h.aeth.msn = in.u16();
        h.atomic_ack.orig = 0x1122334455667788ull;
        h.deth.qkey = lsel & 0x40 ? in.u32() : kQkey;
        h.deth.src_qp = kPeerQpn;
        h.imm = 0xFEEDu;
        h.ieth_rkey = lsel & 0x80 ? in.u32() : r.mr.rkey();
        static uint8_t payload[2048];
        for (uint32_t i = 0; i < plen; ++i) payload[i] = uint8_t(i ^ opcode);
        static uint8_t out[2200];
        size_t len = 0;
        if (pkt::build(h, {payload, plen}, out, len) != pkt::BuildError::ok) return;
        if (ctl & 0x40) {  // PadCnt the fuzzer's own (the ICRC covers it)
            uint8_t& b1 = out[pkt::kEthLen + pkt::kIpv4Len + pkt::kUdpLen + 1];
            b1 = uint8_t((b1 & ~0x30) | (in.u8() & 3) << 4);
            fix_icrc(out, len);
        }
        inject({out, len});
    }

    // A fuzzer-written frame made deliverable: DestQP a live QP, our addresses, right checksums.
    void fixed(Reader& in) {
        Qp1& q = qps[in.u8() % qps.size()];
        const size_t n = in.u16() % 1600;
        std::span<const uint8_t> raw = in.take(n);
        pkt::Packet p;
        if (pkt::parse(raw, p, pkt::ParseOptions{false, false, false}) != pkt::ParseError::ok) return inject(raw);
        pkt::Headers h = p.h;
        h.eth.dst = wc.mac[0];
        h.ipv6 = false;
        h.eth.ethertype = pkt::kEthTypeIpv4;
        h.ip4.src = kPeerIp;
        h.ip4.dst = kLocalIp;
        h.ip4.frag = 0x4000;
        h.bth.dest_qp = q.qp.qpn();
        static uint8_t out[2200];
        size_t len = 0;
        if (pkt::build(h, p.payload(), out, len) != pkt::BuildError::ok) return;
        inject({out, len});
    }

    static void fix_icrc(uint8_t* f, size_t len) {
        pkt::Packet p;
        if (pkt::parse({f, len}, p, pkt::ParseOptions{false, false, false}) != pkt::ParseError::ok) return;
        const uint32_t c = pkt::icrc(f + p.l3_off, p.len - pkt::kIcrcLen - p.l3_off, p.h.ipv6);
        std::memcpy(f + p.len - pkt::kIcrcLen, &c, 4);  // stored little-endian, as parse loads it
    }

    void check() {
        for (Region& r : regions) {
            if (std::memcmp(r.buf.data(), kPat.canary, kCanary) || std::memcmp(r.data() + kMrLen, kPat.canary, kCanary))
                fail("a byte outside an MR changed");
            if (!r.writable() && std::memcmp(r.data(), kPat.fill, kMrLen)) fail("an MR without write access changed");
        }
        if (std::memcmp(unregistered.data(), kPat.unregistered, kMrLen)) fail("unregistered memory changed");
        const port::WireStats& w = wire.stats(0);
        if (dev->counters().get(Counter::sent_pkts) - sent0 != w.sent - wire0.sent) fail("sent_pkts differs from the wire's count");
        if (w.delivered + w.rx_full + wire.in_flight(0) != w.sent) fail("the wire lost count of the HCA's frames");
        if (hca_frames != w.delivered - wire0.delivered) fail("frames delivered but not taken at the fuzzer's end");
    }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    for (int i = 0; i < 256; ++i)
        if (const pkt::OpcodeInfo& oi = pkt::opcode_info(uint8_t(i)); oi.valid()) {
            g_opcodes.push_back(uint8_t(i));
            if (uint8_t(oi.transport) < 3) g_by_type[uint8_t(oi.transport)].push_back(uint8_t(i));
        }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 8192) return -1;
    static Bench& b = *new Bench;  // built once; reset() before each input
    b.reset();
    Reader in{data, size};
    uint32_t records = 0;
    while (!in.empty() && records++ < 64) {
        const uint8_t tag = in.u8();
        switch (tag % 6) {
        case 0: b.inject(in.take(in.u16() % 1600)); break;
        case 1: b.fixed(in); break;
        case 2:
        case 3: b.built(in); break;
        case 4:
            switch ((tag >> 3) % 4) {
            case 0: b.post_send(in); break;
            case 1: b.post_recv(in.u8() % uint32_t(b.qps.size()), in.u8()); break;
            case 2: b.post_srq(in.u8()); break;
            default: b.modify(in); break;
            }
            break;
        default: b.time(in); break;
        }
        if (tag & 0x80) b.poll(1);
    }
    b.settle();
    b.check();
    b.teardown();
    return 0;
}
