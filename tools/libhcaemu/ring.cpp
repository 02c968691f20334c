#include "tools/libhcaemu/ring.hpp"

#include <cstring>

namespace hcaemu::ring {

bool attach(View& v, void* base, size_t bytes, shm::RingKind kind, uint32_t min_cap, uint32_t entry_size) {
    if (!base || bytes < shm::kRingEntries) return false;
    auto* h = static_cast<shm::RingHdr*>(base);
    const uint32_t cap = h->cap, esz = h->entry_size;  // read once: the other side may change them
    if (h->magic != shm::kRingMagic || h->kind != uint32_t(kind)) return false;
    if (esz != entry_size || esz == 0 || esz % 16 != 0 || cap == 0 || cap < min_cap) return false;
    if (uint64_t(cap) * esz > bytes - shm::kRingEntries) return false;
    v.hdr = h;
    v.slots = static_cast<uint8_t*>(base) + shm::kRingEntries;
    v.cap = cap;
    v.entry_size = esz;
    return true;
}

namespace {

Status validate_send(const SendLimits& lim, AhHandleFn ah_handle, const SendWr& wr, uint32_t& ah) {
    if (!opcode_allowed(lim.type, wr.opcode)) return Status::opcode_not_allowed;
    const bool atomic = is_atomic(wr.opcode);
    if (atomic && !lim.atomics) return Status::opcode_not_allowed;
    if (wr.num_sge < 0 || uint32_t(wr.num_sge) > lim.max_send_sge) return Status::too_many_sge;
    if (wr.num_sge > 0 && !wr.sg_list) return Status::invalid_argument;
    uint64_t len = 0;
    for (int i = 0; i < wr.num_sge; ++i) len += wr.sg_list[i].length;
    if (len > lim.max_msg_sz) return Status::invalid_argument;
    if (wr.send_flags & send_flag::inline_) {
        if (wr.opcode == WrOpcode::rdma_read || atomic) return Status::invalid_argument;
        if (len > lim.max_inline_data) return Status::inline_too_large;
    }
    if (atomic) {
        if (len != 8) return Status::invalid_argument;  // one 8-byte result (IBTA 9.4: atomic operations)
        if (wr.atomic.remote_addr & 7) return Status::misaligned;
    }
    ah = 0;
    if (lim.type == QpType::ud) {
        ah = wr.ud.ah && ah_handle ? ah_handle(wr.ud.ah) : 0;
        if (ah == 0) return Status::no_ah;
        if (len > lim.ud_max_payload) return Status::invalid_argument;  // UD: one packet
    }
    return Status::ok;
}

void write_send(uint8_t* slot, const SendWr& wr, uint32_t ah) {
    auto* w = reinterpret_cast<shm::SendWqe*>(slot);
    std::memset(w, 0, sizeof(*w));
    w->wr_id = wr.wr_id;
    w->opcode = uint8_t(wr.opcode);
    w->send_flags = wr.send_flags;
    w->imm_data = wr.imm_data;
    w->invalidate_rkey = wr.invalidate_rkey;
    const bool atomic = is_atomic(wr.opcode);
    w->remote_addr = atomic ? wr.atomic.remote_addr : wr.rdma.remote_addr;
    w->rkey = atomic ? wr.atomic.rkey : wr.rdma.rkey;
    w->compare_add = wr.atomic.compare_add;
    w->swap = wr.atomic.swap;
    w->ah = ah;
    w->remote_qpn = wr.ud.remote_qpn;
    w->remote_qkey = wr.ud.remote_qkey;
    uint8_t* area = slot + sizeof(shm::SendWqe);
    if (wr.send_flags & send_flag::inline_) {
        // Inline data is copied from process memory at post time; lkeys are not used (verbs).
        uint32_t len = 0;
        for (int i = 0; i < wr.num_sge; ++i) {
            if (wr.sg_list[i].length)
                std::memcpy(area + len, reinterpret_cast<const void*>(uintptr_t(wr.sg_list[i].addr)), wr.sg_list[i].length);
            len += wr.sg_list[i].length;
        }
        w->inline_len = len;
    } else {
        for (int i = 0; i < wr.num_sge; ++i) {
            const shm::Sge s{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
            std::memcpy(area + i * sizeof(shm::Sge), &s, sizeof(s));
        }
        w->num_sge = uint32_t(wr.num_sge);
    }
}

}  // namespace

Status post_send(View& sq, const SendLimits& lim, AhHandleFn ah_handle, const SendWr* wr, const SendWr** bad_wr) {
    if (bad_wr) *bad_wr = wr;
    const uint64_t cons = sq.hdr->cons.load(std::memory_order_acquire);
    const uint64_t start = sq.hdr->prod.load(std::memory_order_relaxed);  // only we store it
    uint64_t prod = start;
    Status st = Status::ok;
    for (; wr; wr = wr->next) {
        if (bad_wr) *bad_wr = wr;
        if (prod - cons >= sq.cap) { st = Status::queue_full; break; }
        uint32_t ah = 0;
        if (st = validate_send(lim, ah_handle, *wr, ah); st != Status::ok) break;
        write_send(sq.slot(prod), *wr, ah);
        ++prod;
    }
    if (prod != start) sq.hdr->prod.store(prod, std::memory_order_release);  // the doorbell
    if (st == Status::ok && bad_wr) *bad_wr = nullptr;
    return st;
}

Status post_recv(View& rq, uint32_t max_sge, const RecvWr* wr, const RecvWr** bad_wr) {
    if (bad_wr) *bad_wr = wr;
    const uint64_t cons = rq.hdr->cons.load(std::memory_order_acquire);
    const uint64_t start = rq.hdr->prod.load(std::memory_order_relaxed);
    uint64_t prod = start;
    Status st = Status::ok;
    for (; wr; wr = wr->next) {
        if (bad_wr) *bad_wr = wr;
        if (prod - cons >= rq.cap) { st = Status::queue_full; break; }
        if (wr->num_sge < 0 || uint32_t(wr->num_sge) > max_sge) { st = Status::too_many_sge; break; }
        if (wr->num_sge > 0 && !wr->sg_list) { st = Status::invalid_argument; break; }
        uint8_t* slot = rq.slot(prod);
        const shm::RecvWqe h{wr->wr_id, uint32_t(wr->num_sge), 0};
        std::memcpy(slot, &h, sizeof(h));
        for (int i = 0; i < wr->num_sge; ++i) {
            const shm::Sge s{wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
            std::memcpy(slot + sizeof(h) + i * sizeof(shm::Sge), &s, sizeof(s));
        }
        ++prod;
    }
    if (prod != start) rq.hdr->prod.store(prod, std::memory_order_release);  // the doorbell
    if (st == Status::ok && bad_wr) *bad_wr = nullptr;
    return st;
}

int poll_cq(View& cq, std::span<Wc> wc) {
    const uint64_t prod = cq.hdr->prod.load(std::memory_order_acquire);
    uint64_t cons = cq.hdr->cons.load(std::memory_order_relaxed);  // only we store it
    uint64_t avail = prod - cons;
    if (avail > cq.cap) avail = cq.cap;
    int n = 0;
    for (; n < int(wc.size()) && uint64_t(n) < avail; ++n) {
        shm::Cqe c;
        std::memcpy(&c, cq.slot(cons + uint64_t(n)), sizeof(c));
        wc[size_t(n)] = shm::to_wc(c);
    }
    if (n) cq.hdr->cons.store(cons + uint64_t(n), std::memory_order_release);
    return n;
}

void purge_cq(View& cq, uint32_t qpn) {
    const uint64_t prod = cq.hdr->prod.load(std::memory_order_acquire);
    const uint64_t cons = cq.hdr->cons.load(std::memory_order_relaxed);
    const uint64_t end = cons + std::min<uint64_t>(prod - cons, cq.cap);
    uint64_t w = end;
    for (uint64_t r = end; r-- > cons;) {
        shm::Cqe c;
        std::memcpy(&c, cq.slot(r), sizeof c);
        if (c.qp_num == qpn) continue;
        if (--w != r) std::memcpy(cq.slot(w), &c, sizeof c);
    }
    if (w != cons) cq.hdr->cons.store(w, std::memory_order_release);
}

}  // namespace hcaemu::ring
