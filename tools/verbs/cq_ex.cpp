// libibverbs.so.1 on libhcaemu: the poll-cq-ex API of a CQ made by ibv_create_cq_ex
// (ibv_start_poll, ibv_next_poll, ibv_end_poll, ibv_wc_read_*). As providers do, the CQ is held
// (its own poll lock) from a successful start_poll to end_poll; start_poll's ENOENT leaves it
// free, and end_poll is not called then (verbs.h).
#include <endian.h>

#include <cerrno>

#include "tools/verbs/verbs.hpp"

namespace hcaemu::verbs {

namespace {

CqW& w_of(ibv_cq_ex* cq) { return *reinterpret_cast<CqW*>(cq); }

bool take_one(CqW& w) {
    if (w.api->poll(std::span<Wc>(&w.cur, 1)) != 1) return false;
    w.cq.status = ibv_wc_status(w.cur.status);
    w.cq.wr_id = w.cur.wr_id;
    return true;
}

// Each completion is taken under the node's mutex, which is not held in between: the program
// may post (a receive for each completion read, say) between start_poll and end_poll.
int start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
    if (attr && attr->comp_mask) return EINVAL;
    CqW& w = w_of(cq);
    Node& n = node_of(cq->context);
    if (still_empty(n, w)) return ENOENT;
    pthread_mutex_lock(&w.poll_mu);
    bool got;
    {
        n.mu.lock_raw();  // taking completions adds none: the epoch stays
        const std::lock_guard g(n.mu.m, std::adopt_lock);
        got = take_one(w);
        if (!got) found_empty(n, w);
    }
    if (got) return 0;  // poll_mu held until end_poll
    pthread_mutex_unlock(&w.poll_mu);
    return ENOENT;
}

int next_poll(ibv_cq_ex* cq) {
    NodeMutex& mu = node_of(cq->context).mu;
    mu.lock_raw();
    const std::lock_guard g(mu.m, std::adopt_lock);
    return take_one(w_of(cq)) ? 0 : ENOENT;
}

void end_poll(ibv_cq_ex* cq) { pthread_mutex_unlock(&w_of(cq).poll_mu); }

ibv_wc_opcode read_opcode(ibv_cq_ex* cq) { return ibv_wc_opcode(w_of(cq).cur.opcode); }
uint32_t read_vendor_err(ibv_cq_ex* cq) { return w_of(cq).cur.vendor_err; }
uint32_t read_byte_len(ibv_cq_ex* cq) { return w_of(cq).cur.byte_len; }
__be32 read_imm_data(ibv_cq_ex* cq) {
    const Wc& c = w_of(cq).cur;
    return c.wc_flags & wc_flag::with_inv ? c.imm_data : htobe32(c.imm_data);  // as ibv_wc's union
}
uint32_t read_qp_num(ibv_cq_ex* cq) { return w_of(cq).cur.qp_num; }
uint32_t read_src_qp(ibv_cq_ex* cq) { return w_of(cq).cur.src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* cq) { return w_of(cq).cur.wc_flags; }
uint32_t read_slid(ibv_cq_ex* cq) { return w_of(cq).cur.slid; }
uint8_t read_sl(ibv_cq_ex* cq) { return w_of(cq).cur.sl; }
uint8_t read_dlid_path_bits(ibv_cq_ex* cq) { return w_of(cq).cur.dlid_path_bits; }

}  // namespace

// read_completion_ts, read_cvlan, read_flow_tag, read_tm_info, read_completion_wallclock_ns stay
// null: create_cq_ex refuses the wc_flags that would make a program call them.
void fill_cq_ex_ops(ibv_cq_ex& cq) {
    pthread_mutex_init(&reinterpret_cast<CqW*>(&cq)->poll_mu, nullptr);
    cq.start_poll = start_poll;
    cq.next_poll = next_poll;
    cq.end_poll = end_poll;
    cq.read_opcode = read_opcode;
    cq.read_vendor_err = read_vendor_err;
    cq.read_byte_len = read_byte_len;
    cq.read_imm_data = read_imm_data;
    cq.read_qp_num = read_qp_num;
    cq.read_src_qp = read_src_qp;
    cq.read_wc_flags = read_wc_flags;
    cq.read_slid = read_slid;
    cq.read_sl = read_sl;
    cq.read_dlid_path_bits = read_dlid_path_bits;
}

}  // namespace hcaemu::verbs
