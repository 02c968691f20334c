// libibverbs.so.1 on libhcaemu: the ibv_wr_* send API of a QP made by ibv_create_qp_ex with
// send_ops_flags. ibv_wr_start takes the QP's own lock (held until complete or abort, as providers
// do; the node's mutex only for the posting in ibv_wr_complete, so that the program may use other
// objects meanwhile); each ibv_wr_<op> starts a WR with the qp_ex's wr_id and wr_flags of that
// moment, the ibv_wr_set_* calls fill it; ibv_wr_complete posts them in order. The batch's
// storage (max_send_wr WRs, their SGEs and inline bytes) is made at create time: nothing is
// allocated on the post path.
#include <endian.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "tools/verbs/verbs.hpp"

namespace hcaemu::verbs {

struct WrBatch {
    std::vector<SendWr> wr;
    std::vector<Sge> sge;         // max_send_sge per WR
    std::vector<uint8_t> inl;     // max_inline_data per WR
    uint32_t max_sge = 1;
    uint32_t max_inline = 0;
    uint32_t n = 0;               // WRs built since ibv_wr_start
    int err = 0;                  // the first building error: ibv_wr_complete returns it
    std::mutex mu;                // held from ibv_wr_start to complete or abort
};

namespace {

QpW& w_of(ibv_qp_ex* q) { return *reinterpret_cast<QpW*>(q); }

// The next WR of the batch, or nullptr (ENOMEM recorded) past max_send_wr.
SendWr* next_wr(ibv_qp_ex* q, WrOpcode op) {
    WrBatch& b = *w_of(q).batch;
    if (b.n == b.wr.size()) {
        if (!b.err) b.err = ENOMEM;  // more WRs than the send queue holds
        return nullptr;
    }
    SendWr& s = b.wr[b.n++];
    s = SendWr{};
    s.wr_id = q->wr_id;
    s.send_flags = q->wr_flags;
    s.opcode = op;
    return &s;
}

SendWr* cur(ibv_qp_ex* q) {
    WrBatch& b = *w_of(q).batch;
    return b.n ? &b.wr[b.n - 1] : nullptr;
}

void rdma(ibv_qp_ex* q, WrOpcode op, uint32_t rkey, uint64_t addr, uint32_t imm) {
    if (SendWr* s = next_wr(q, op)) {
        s->rdma.rkey = rkey;
        s->rdma.remote_addr = addr;
        s->imm_data = imm;
    }
}

void wr_rdma_write(ibv_qp_ex* q, uint32_t rkey, uint64_t addr) { rdma(q, WrOpcode::rdma_write, rkey, addr, 0); }
void wr_rdma_write_imm(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, __be32 imm) {
    rdma(q, WrOpcode::rdma_write_with_imm, rkey, addr, be32toh(imm));
}
void wr_rdma_read(ibv_qp_ex* q, uint32_t rkey, uint64_t addr) { rdma(q, WrOpcode::rdma_read, rkey, addr, 0); }
void wr_send(ibv_qp_ex* q) { (void)next_wr(q, WrOpcode::send); }
void wr_send_imm(ibv_qp_ex* q, __be32 imm) {
    if (SendWr* s = next_wr(q, WrOpcode::send_with_imm)) s->imm_data = be32toh(imm);
}
void wr_send_inv(ibv_qp_ex* q, uint32_t rkey) {
    if (SendWr* s = next_wr(q, WrOpcode::send_with_inv)) s->invalidate_rkey = rkey;
}
void wr_atomic_cmp_swp(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
    if (SendWr* s = next_wr(q, WrOpcode::atomic_cmp_and_swp)) {
        s->atomic.rkey = rkey;
        s->atomic.remote_addr = addr;
        s->atomic.compare_add = compare;
        s->atomic.swap = swap;
    }
}
void wr_atomic_fetch_add(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t add) {
    if (SendWr* s = next_wr(q, WrOpcode::atomic_fetch_and_add)) {
        s->atomic.rkey = rkey;
        s->atomic.remote_addr = addr;
        s->atomic.compare_add = add;
    }
}

void wr_set_ud_addr(ibv_qp_ex* q, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
    if (SendWr* s = cur(q)) {
        s->ud.ah = ah ? wrap_of<AhW>(ah)->api->native() : nullptr;
        s->ud.remote_qpn = remote_qpn;
        s->ud.remote_qkey = remote_qkey;
    }
}

void set_sges(ibv_qp_ex* q, size_t num, const ibv_sge* list) {
    WrBatch& b = *w_of(q).batch;
    SendWr* s = cur(q);
    if (!s) return;
    if (num > b.max_sge) {
        if (!b.err) b.err = EINVAL;
        return;
    }
    Sge* dst = &b.sge[size_t(b.n - 1) * b.max_sge];
    for (size_t i = 0; i < num; ++i) dst[i] = Sge{list[i].addr, list[i].length, list[i].lkey};
    s->sg_list = dst;
    s->num_sge = int(num);
}

void wr_set_sge(ibv_qp_ex* q, uint32_t lkey, uint64_t addr, uint32_t length) {
    const ibv_sge one{addr, length, lkey};
    set_sges(q, 1, &one);
}
void wr_set_sge_list(ibv_qp_ex* q, size_t num, const ibv_sge* list) { set_sges(q, num, list); }

// Inline data is copied now (the caller may reuse its buffers at once), into the WR's slot.
void set_inline(ibv_qp_ex* q, size_t num, const ibv_data_buf* bufs) {
    WrBatch& b = *w_of(q).batch;
    SendWr* s = cur(q);
    if (!s) return;
    size_t total = 0;
    for (size_t i = 0; i < num; ++i) total += bufs[i].length;
    if (total > b.max_inline) {
        if (!b.err) b.err = EINVAL;
        return;
    }
    uint8_t* dst = &b.inl[size_t(b.n - 1) * b.max_inline];
    size_t off = 0;
    for (size_t i = 0; i < num; ++i) {
        std::memcpy(dst + off, bufs[i].addr, bufs[i].length);
        off += bufs[i].length;
    }
    Sge& g = b.sge[size_t(b.n - 1) * b.max_sge];
    g = Sge{reinterpret_cast<uintptr_t>(dst), uint32_t(total), 0};
    s->sg_list = &g;
    s->num_sge = 1;
    s->send_flags |= send_flag::inline_;
}
void wr_set_inline_data(ibv_qp_ex* q, void* addr, size_t length) {
    const ibv_data_buf one{addr, length};
    set_inline(q, 1, &one);
}
void wr_set_inline_data_list(ibv_qp_ex* q, size_t num, const ibv_data_buf* list) { set_inline(q, num, list); }

void wr_start(ibv_qp_ex* q) {
    w_of(q).batch->mu.lock();
    w_of(q).batch->n = 0;
    w_of(q).batch->err = 0;
}

// In order; a WR the device refuses stops the batch there (those before it are posted).
int wr_complete(ibv_qp_ex* q) {
    QpW& w = w_of(q);
    WrBatch& b = *w.batch;
    Node& n = node_of(q->qp_base.context);
    int err = b.err;
    {
        const std::lock_guard g(n.mu);
        for (uint32_t i = 0; i < b.n && !err; ++i) {
            const SendWr* bad = nullptr;
            const Status st = w.api->post_send(&b.wr[i], &bad);
            if (st != Status::ok) err = to_errno(st);
        }
    }
    b.n = 0;
    b.mu.unlock();
    n.wake();
    return err;
}

void wr_abort(ibv_qp_ex* q) {
    w_of(q).batch->n = 0;
    w_of(q).batch->mu.unlock();
}

}  // namespace

bool setup_wr_api(QpW& w, uint64_t flags, const ibv_qp_cap& cap) {
    const uint64_t supported = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
                               IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                               IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                               IBV_QP_EX_WITH_SEND_WITH_INV;
    if (flags & ~supported) {
        errno = EOPNOTSUPP;  // LOCAL_INV, BIND_MW (no memory windows), TSO, ATOMIC_WRITE, FLUSH
        return false;
    }
    auto* b = new (std::nothrow) WrBatch;
    if (!b) {
        errno = ENOMEM;
        return false;
    }
    b->max_sge = std::max(cap.max_send_sge, 1u);
    b->max_inline = cap.max_inline_data;
    b->wr.resize(cap.max_send_wr);
    b->sge.resize(size_t(cap.max_send_wr) * b->max_sge);
    b->inl.resize(size_t(cap.max_send_wr) * b->max_inline);
    w.batch = b;
    ibv_qp_ex& x = w.qp;
    x.comp_mask = 0;
    x.wr_rdma_write = wr_rdma_write;
    x.wr_rdma_write_imm = wr_rdma_write_imm;
    x.wr_rdma_read = wr_rdma_read;
    x.wr_send = wr_send;
    x.wr_send_imm = wr_send_imm;
    x.wr_send_inv = wr_send_inv;
    x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    x.wr_atomic_fetch_add = wr_atomic_fetch_add;
    x.wr_set_ud_addr = wr_set_ud_addr;
    x.wr_set_sge = wr_set_sge;
    x.wr_set_sge_list = wr_set_sge_list;
    x.wr_set_inline_data = wr_set_inline_data;
    x.wr_set_inline_data_list = wr_set_inline_data_list;
    x.wr_start = wr_start;
    x.wr_complete = wr_complete;
    x.wr_abort = wr_abort;
    // wr_bind_mw, wr_local_inv, wr_send_tso, wr_set_xrc_srqn, wr_atomic_write stay null: the
    // send_ops_flags that would allow them are refused above.
    return true;
}

void free_wr_api(QpW& w) {
    delete w.batch;
    w.batch = nullptr;
}

}  // namespace hcaemu::verbs

using namespace hcaemu::verbs;

extern "C" ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
    auto* w = wrap_of<QpW>(qp);
    return w->batch ? &w->qp : nullptr;  // NULL unless made with send_ops_flags, as libibverbs
}
