// libhcaemu's side of the shared-memory rings (tools/libhcaemu/ring.*), with the test playing the
// daemon: ring headers checked at attach, WQEs written byte for byte, the doorbell (prod) and the
// free slots (cons), verbs' synchronous checks with *bad_wr, CQEs taken and converted.
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "hca_model/device.hpp"
#include "tools/libhcaemu/ring.hpp"

using namespace hcaemu;

namespace {

// A ring as the daemon lays it out: header, then cap entries at kRingEntries.
struct FakeRing {
    FakeRing(shm::RingKind kind, uint32_t cap, uint32_t esz) : bytes(shm::ring_bytes(cap, esz)) {
        mem.reset(static_cast<uint8_t*>(::operator new(bytes, std::align_val_t(4096))));
        std::memset(mem.get(), 0xEE, bytes);  // entries start dirty: the writer must set every byte it owns
        hdr = new (mem.get()) shm::RingHdr{kRingMagicV, uint32_t(kind), cap, esz, {0}, {0}, {0}};
    }
    static constexpr uint32_t kRingMagicV = shm::kRingMagic;
    struct Del {
        void operator()(uint8_t* p) const { ::operator delete(p, std::align_val_t(4096)); }
    };
    size_t bytes;
    std::unique_ptr<uint8_t, Del> mem;
    shm::RingHdr* hdr;
    uint8_t* entry(uint32_t i) { return mem.get() + shm::kRingEntries + size_t(i) * hdr->entry_size; }
};

ring::View attach_ok(FakeRing& r, shm::RingKind kind, uint32_t min_cap, uint32_t esz) {
    ring::View v;
    REQUIRE(ring::attach(v, r.mem.get(), r.bytes, kind, min_cap, esz));
    return v;
}

uint32_t ah_of(const Ah* ah) { return ah ? ah->handle() : 0; }

}  // namespace

TEST_CASE("ring attach checks the header against what the reply said") {
    const uint32_t esz = shm::send_entry_size(2, 32);
    REQUIRE(esz == 80 + 32);
    FakeRing r(shm::RingKind::sq, 4, esz);
    ring::View v;
    CHECK(ring::attach(v, r.mem.get(), r.bytes, shm::RingKind::sq, 4, esz));
    CHECK(v.cap == 4);
    CHECK(v.entry_size == esz);
    CHECK(v.slots == r.mem.get() + shm::kRingEntries);
    ring::View w;
    CHECK_FALSE(ring::attach(w, r.mem.get(), r.bytes, shm::RingKind::rq, 4, esz));      // kind
    CHECK_FALSE(ring::attach(w, r.mem.get(), r.bytes, shm::RingKind::sq, 5, esz));      // fewer entries than granted
    CHECK_FALSE(ring::attach(w, r.mem.get(), r.bytes, shm::RingKind::sq, 4, esz + 16)); // entry size
    CHECK_FALSE(ring::attach(w, r.mem.get(), shm::kRingEntries + 3 * esz, shm::RingKind::sq, 1, esz));  // entries past the end
    CHECK_FALSE(ring::attach(w, r.mem.get(), 100, shm::RingKind::sq, 1, esz));          // shorter than a header
    r.hdr->cap = 1u << 31;  // a hostile cap whose entries leave the mapping
    CHECK_FALSE(ring::attach(w, r.mem.get(), r.bytes, shm::RingKind::sq, 1, esz));
    r.hdr->cap = 4;
    r.hdr->magic = 0;
    CHECK_FALSE(ring::attach(w, r.mem.get(), r.bytes, shm::RingKind::sq, 1, esz));
    CHECK(w.hdr == nullptr);
}

TEST_CASE("post_send writes each WQE byte for byte, then rings the doorbell once") {
    const uint32_t esz = shm::send_entry_size(2, 16);
    FakeRing r(shm::RingKind::sq, 2, esz);
    ring::View v = attach_ok(r, shm::RingKind::sq, 2, esz);
    ring::SendLimits lim;
    lim.max_send_sge = 2;
    lim.max_inline_data = 16;

    Sge sg[2] = {{0x1000, 100, 0x111}, {0x2000, 28, 0x222}};
    SendWr w1;
    w1.wr_id = 7;
    w1.sg_list = sg;
    w1.num_sge = 2;
    w1.opcode = WrOpcode::rdma_write_with_imm;
    w1.send_flags = send_flag::signaled;
    w1.imm_data = 0xABCD;
    w1.rdma.remote_addr = 0x55550000;
    w1.rdma.rkey = 0x4242;
    SendWr w2;  // a CmpSwap: remote address and key come from wr.atomic
    Sge s8{0x3000, 8, 0x333};
    w2.wr_id = 8;
    w2.sg_list = &s8;
    w2.num_sge = 1;
    w2.opcode = WrOpcode::atomic_cmp_and_swp;
    w2.atomic = {0x66660008, 5, 9, 0x77};
    w1.next = &w2;
    SendWr w3;  // no room: cap 2
    w3.wr_id = 9;
    w2.next = &w3;

    const SendWr* bad = nullptr;
    CHECK(ring::post_send(v, lim, ah_of, &w1, &bad) == Status::queue_full);
    CHECK(bad == &w3);
    CHECK(r.hdr->prod.load() == 2);

    shm::SendWqe e;
    std::memcpy(&e, r.entry(0), sizeof(e));
    CHECK(e.wr_id == 7);
    CHECK(e.opcode == uint8_t(WrOpcode::rdma_write_with_imm));
    CHECK(e.send_flags == send_flag::signaled);
    CHECK(e.num_sge == 2);
    CHECK(e.inline_len == 0);
    CHECK(e.imm_data == 0xABCD);
    CHECK(e.remote_addr == 0x55550000);
    CHECK(e.rkey == 0x4242);
    CHECK(e.ah == 0);
    CHECK(e.compare_add == 0);
    shm::Sge got[2];
    std::memcpy(got, r.entry(0) + sizeof(shm::SendWqe), sizeof(got));
    CHECK(got[0].addr == 0x1000);
    CHECK(got[0].length == 100);
    CHECK(got[0].lkey == 0x111);
    CHECK(got[1].addr == 0x2000);
    CHECK(got[1].length == 28);
    CHECK(got[1].lkey == 0x222);
    // rsv fields are written as zeros, not left from the slot's previous contents
    CHECK(e.rsv0[0] == 0);
    CHECK(e.rsv1 == 0);

    std::memcpy(&e, r.entry(1), sizeof(e));
    CHECK(e.wr_id == 8);
    CHECK(e.opcode == uint8_t(WrOpcode::atomic_cmp_and_swp));
    CHECK(e.remote_addr == 0x66660008);
    CHECK(e.rkey == 0x77);
    CHECK(e.compare_add == 5);
    CHECK(e.swap == 9);
    CHECK(e.num_sge == 1);

    // The daemon retires the first WQE: its slot is free again, and entry 2 lands in slot 0.
    r.hdr->cons.store(1);
    w3.opcode = WrOpcode::send;
    w3.num_sge = 0;
    CHECK(ring::post_send(v, lim, ah_of, &w3, &bad) == Status::ok);
    CHECK(bad == nullptr);
    CHECK(r.hdr->prod.load() == 3);
    std::memcpy(&e, r.entry(0), sizeof(e));
    CHECK(e.wr_id == 9);
    CHECK(e.opcode == uint8_t(WrOpcode::send));
    CHECK(e.num_sge == 0);
    CHECK(e.remote_addr == 0);
}

TEST_CASE("post_send refuses what verbs refuses at post time, with *bad_wr and no doorbell for it") {
    const uint32_t esz = shm::send_entry_size(1, 32);
    FakeRing r(shm::RingKind::sq, 8, esz);
    ring::View v = attach_ok(r, shm::RingKind::sq, 8, esz);
    ring::SendLimits lim;
    lim.max_send_sge = 1;
    lim.max_inline_data = 32;
    const SendWr* bad = nullptr;

    uint8_t payload[40];
    for (int i = 0; i < 40; ++i) payload[i] = uint8_t(i + 1);
    Sge sg[2] = {{uintptr_t(payload), 20, 0}, {uintptr_t(payload + 20), 13, 0}};

    SendWr ok;
    ok.wr_id = 1;
    ok.sg_list = sg;
    ok.num_sge = 1;
    SendWr two = ok;  // 2 SGEs on a QP with max_send_sge 1
    two.wr_id = 2;
    two.num_sge = 2;
    ok.next = &two;
    CHECK(ring::post_send(v, lim, ah_of, &ok, &bad) == Status::too_many_sge);
    CHECK(bad == &two);
    CHECK(r.hdr->prod.load() == 1);  // the first one is posted

    SendWr in;  // inline: the bytes are copied into the slot at post time
    in.wr_id = 3;
    in.sg_list = sg;
    in.num_sge = 1;
    in.send_flags = send_flag::inline_ | send_flag::signaled;
    CHECK(ring::post_send(v, lim, ah_of, &in, &bad) == Status::ok);
    shm::SendWqe e;
    std::memcpy(&e, r.entry(1), sizeof(e));
    CHECK(e.inline_len == 20);
    CHECK(e.num_sge == 0);
    CHECK(std::memcmp(r.entry(1) + sizeof(shm::SendWqe), payload, 20) == 0);
    std::memset(payload, 0, 20);  // the caller's buffer may change after the post
    CHECK(r.entry(1)[sizeof(shm::SendWqe)] == 1);

    lim.max_send_sge = 2;
    in.num_sge = 2;  // 33 bytes > 32
    CHECK(ring::post_send(v, lim, ah_of, &in, &bad) == Status::inline_too_large);
    CHECK(bad == &in);
    SendWr rd = in;  // READ cannot be inline
    rd.opcode = WrOpcode::rdma_read;
    rd.num_sge = 1;
    CHECK(ring::post_send(v, lim, ah_of, &rd, &bad) == Status::invalid_argument);

    Sge s8{0x3000, 8, 1}, s4{0x3000, 4, 1};
    SendWr fa;
    fa.opcode = WrOpcode::atomic_fetch_and_add;
    fa.sg_list = &s8;
    fa.num_sge = 1;
    fa.atomic.remote_addr = 0x1004;  // IBTA 9.4: 8-byte aligned
    CHECK(ring::post_send(v, lim, ah_of, &fa, &bad) == Status::misaligned);
    fa.atomic.remote_addr = 0x1008;
    fa.sg_list = &s4;
    CHECK(ring::post_send(v, lim, ah_of, &fa, &bad) == Status::invalid_argument);
    lim.atomics = false;
    fa.sg_list = &s8;
    CHECK(ring::post_send(v, lim, ah_of, &fa, &bad) == Status::opcode_not_allowed);
    lim.atomics = true;
    SendWr nul;
    nul.num_sge = 1;  // SGEs promised, no list
    CHECK(ring::post_send(v, lim, ah_of, &nul, &bad) == Status::invalid_argument);

    lim.type = QpType::uc;
    CHECK(ring::post_send(v, lim, ah_of, &fa, &bad) == Status::opcode_not_allowed);
    lim.type = QpType::ud;
    SendWr ud;
    ud.wr_id = 4;
    ud.ud.remote_qpn = 0x99;
    ud.ud.remote_qkey = 0x11111111;
    CHECK(ring::post_send(v, lim, ah_of, &ud, &bad) == Status::no_ah);
    hcaemu::Ah ah(nullptr, 0x305);  // a client-side AH: the daemon's handle, no device
    ud.ud.ah = &ah;
    ud.opcode = WrOpcode::rdma_write;
    CHECK(ring::post_send(v, lim, ah_of, &ud, &bad) == Status::opcode_not_allowed);
    ud.opcode = WrOpcode::send;
    Sge big{0x1000, 1025, 1};
    ud.sg_list = &big;
    ud.num_sge = 1;
    CHECK(ring::post_send(v, lim, ah_of, &ud, &bad) == Status::invalid_argument);  // UD: one packet of the MTU
    big.length = 1024;
    CHECK(r.hdr->prod.load() == 2);  // nothing of the refused ones went out
    CHECK(ring::post_send(v, lim, ah_of, &ud, &bad) == Status::ok);
    CHECK(r.hdr->prod.load() == 3);
    std::memcpy(&e, r.entry(2), sizeof(e));
    CHECK(e.wr_id == 4);
    CHECK(e.ah == 0x305);
    CHECK(e.remote_qpn == 0x99);
    CHECK(e.remote_qkey == 0x11111111);
}

TEST_CASE("post_recv writes RecvWqe and SGEs; queue full and too many SGEs") {
    const uint32_t esz = shm::recv_entry_size(2);
    CHECK(esz == 48);
    FakeRing r(shm::RingKind::rq, 2, esz);
    ring::View v = attach_ok(r, shm::RingKind::rq, 2, esz);
    Sge sg[3] = {{0xA000, 64, 5}, {0xB000, 32, 6}, {0xC000, 1, 7}};
    RecvWr a{11, nullptr, sg, 2}, b{12, nullptr, sg + 2, 1}, c{13, nullptr, sg, 1};
    a.next = &b;
    b.next = &c;
    const RecvWr* bad = nullptr;
    CHECK(ring::post_recv(v, 2, &a, &bad) == Status::queue_full);
    CHECK(bad == &c);
    CHECK(r.hdr->prod.load() == 2);
    shm::RecvWqe h;
    shm::Sge s[2];
    std::memcpy(&h, r.entry(0), sizeof(h));
    std::memcpy(s, r.entry(0) + sizeof(h), sizeof(s));
    CHECK(h.wr_id == 11);
    CHECK(h.num_sge == 2);
    CHECK(h.rsv == 0);
    CHECK(s[0].addr == 0xA000);
    CHECK(s[0].length == 64);
    CHECK(s[0].lkey == 5);
    CHECK(s[1].addr == 0xB000);
    CHECK(s[1].lkey == 6);
    std::memcpy(&h, r.entry(1), sizeof(h));
    CHECK(h.wr_id == 12);
    CHECK(h.num_sge == 1);
    r.hdr->cons.store(2);
    RecvWr three{14, nullptr, sg, 3};
    CHECK(ring::post_recv(v, 2, &three, &bad) == Status::too_many_sge);
    CHECK(bad == &three);
    CHECK(ring::post_recv(v, 2, &c, &bad) == Status::ok);
    CHECK(bad == nullptr);
    CHECK(r.hdr->prod.load() == 3);
    std::memcpy(&h, r.entry(0), sizeof(h));
    CHECK(h.wr_id == 13);
}

TEST_CASE("poll_cq takes CQEs between cons and prod, converts them, and stores cons") {
    FakeRing r(shm::RingKind::cq, 4, sizeof(shm::Cqe));
    ring::View v = attach_ok(r, shm::RingKind::cq, 4, sizeof(shm::Cqe));
    Wc wc[3];
    CHECK(ring::poll_cq(v, wc) == 0);
    auto put = [&](uint64_t n, uint64_t wr_id, WcStatus st, WcOpcode op, uint32_t len) {
        shm::Cqe c{};
        c.wr_id = wr_id;
        c.status = uint8_t(st);
        c.opcode = uint8_t(op);
        c.byte_len = len;
        c.imm_data = uint32_t(wr_id) * 3;
        c.qp_num = 0x11;
        c.src_qp = 0x22;
        c.wc_flags = wc_flag::with_imm;
        c.pkey_index = 1;
        c.sl = 2;
        c.sgid[15] = 9;
        std::memcpy(r.entry(uint32_t(n % 4)), &c, sizeof(c));
    };
    for (uint64_t n = 0; n < 4; ++n) put(n, 100 + n, n == 3 ? WcStatus::loc_prot_err : WcStatus::success, WcOpcode::recv, uint32_t(n * 10));
    r.hdr->prod.store(4);
    CHECK(ring::poll_cq(v, std::span<Wc>(wc, 3)) == 3);
    CHECK(r.hdr->cons.load() == 3);
    CHECK(wc[0].wr_id == 100);
    CHECK(wc[2].wr_id == 102);
    CHECK(wc[2].byte_len == 20);
    CHECK(wc[2].status == WcStatus::success);
    CHECK(wc[2].opcode == WcOpcode::recv);
    CHECK(wc[2].imm_data == 306);
    CHECK(wc[2].qp_num == 0x11);
    CHECK(wc[2].src_qp == 0x22);
    CHECK(wc[2].wc_flags == wc_flag::with_imm);
    CHECK(wc[2].pkey_index == 1);
    CHECK(wc[2].sl == 2);
    CHECK(wc[2].sgid[15] == 9);
    // Wrap: entries 4 and 5 live in slots 0 and 1.
    put(4, 104, WcStatus::wr_flush_err, WcOpcode::send, 0);
    put(5, 105, WcStatus::success, WcOpcode::rdma_read, 4096);
    r.hdr->prod.store(6);
    CHECK(ring::poll_cq(v, wc) == 3);
    CHECK(wc[0].wr_id == 103);
    CHECK(wc[0].status == WcStatus::loc_prot_err);
    CHECK(wc[1].wr_id == 104);
    CHECK(wc[1].status == WcStatus::wr_flush_err);
    CHECK(wc[2].wr_id == 105);
    CHECK(wc[2].opcode == WcOpcode::rdma_read);
    CHECK(wc[2].byte_len == 4096);
    CHECK(r.hdr->cons.load() == 6);
    CHECK(ring::poll_cq(v, wc) == 0);
    // A broken prod far ahead: at most cap entries are read, never past the ring.
    r.hdr->prod.store(1000);
    Wc many[8];
    CHECK(ring::poll_cq(v, many) == 4);
    CHECK(r.hdr->cons.load() == 10);
}

TEST_CASE("purge_cq drops one QP's unpolled CQEs across the wrap, keeps the rest in order, never past prod") {
    FakeRing r(shm::RingKind::cq, 4, sizeof(shm::Cqe));
    ring::View v = attach_ok(r, shm::RingKind::cq, 4, sizeof(shm::Cqe));
    shm::Cqe orig[6]{};
    auto put = [&](uint64_t n, uint64_t wr_id, uint32_t qpn) {
        shm::Cqe& c = orig[n];
        auto* b = reinterpret_cast<uint8_t*>(&c);
        for (size_t i = 0; i < sizeof c; ++i) b[i] = uint8_t(n * 37 + i);  // every byte its own
        c.wr_id = wr_id;
        c.qp_num = qpn;
        std::memcpy(r.entry(uint32_t(n % 4)), &c, sizeof(c));
    };
    r.hdr->prod.store(2);
    r.hdr->cons.store(2);
    // Entries 2..5 live in slots 2, 3, 0, 1: QPs 7, 9, 7, 9.
    for (uint64_t n = 2; n < 6; ++n) put(n, 100 + n, n % 2 ? 9 : 7);
    r.hdr->prod.store(6);
    ring::purge_cq(v, 7);
    CHECK(r.hdr->prod.load() == 6);
    CHECK(r.hdr->cons.load() == 4);
    // The kept entries 3 and 5, byte for byte, now in entries 4 and 5 (slots 0 and 1).
    CHECK(std::memcmp(r.entry(0), &orig[3], sizeof(shm::Cqe)) == 0);
    CHECK(std::memcmp(r.entry(1), &orig[5], sizeof(shm::Cqe)) == 0);
    Wc wc[4];
    REQUIRE(ring::poll_cq(v, wc) == 2);
    CHECK(wc[0].wr_id == 103);
    CHECK(wc[1].wr_id == 105);
    CHECK(wc[0].qp_num == 9);
    ring::purge_cq(v, 9);  // empty: nothing moves
    CHECK(r.hdr->cons.load() == 6);
}

TEST_CASE("a completion keeps every field through the CQ ring's format (to_cqe, to_wc)") {
    Wc w;
    w.wr_id = 0x0102030405060708ull;
    w.status = WcStatus::rem_access_err;
    w.opcode = WcOpcode::recv_rdma_with_imm;
    w.vendor_err = 0x11223344;
    w.byte_len = 4097;
    w.imm_data = 0xA1B2C3D4;
    w.qp_num = 0x123456;
    w.src_qp = 0x654321;
    w.wc_flags = 3;
    w.pkey_index = 7;
    w.slid = 0xBEEF;
    w.sl = 5;
    w.dlid_path_bits = 9;
    for (int i = 0; i < 16; ++i) w.sgid[size_t(i)] = uint8_t(0xF0 + i);
    const shm::Cqe c = shm::to_cqe(w);
    CHECK(c.wr_id == w.wr_id);
    CHECK(c.byte_len == 4097);
    CHECK(c.sgid[15] == 0xFF);
    const Wc b = shm::to_wc(c);
    CHECK(b.wr_id == w.wr_id);
    CHECK(b.status == w.status);
    CHECK(b.opcode == w.opcode);
    CHECK(b.vendor_err == w.vendor_err);
    CHECK(b.byte_len == w.byte_len);
    CHECK(b.imm_data == w.imm_data);
    CHECK(b.qp_num == w.qp_num);
    CHECK(b.src_qp == w.src_qp);
    CHECK(b.wc_flags == w.wc_flags);
    CHECK(b.pkey_index == w.pkey_index);
    CHECK(b.slid == w.slid);
    CHECK(b.sl == w.sl);
    CHECK(b.dlid_path_bits == w.dlid_path_bits);
    CHECK(b.sgid == w.sgid);
}
