// The ibv_wr_* send API of hcaemu's libibverbs between two processes (run by check_verbs.py, each
// with HCAEMU_DEVICE=local over net_memif): an RC QP made by ibv_create_qp_ex with send_ops_flags;
// the client posts, in two ibv_wr_start..ibv_wr_complete batches, an RDMA WRITE, a SEND with
// immediate and inline data, an RDMA READ, a FETCH_AND_ADD and a CMP_AND_SWAP; each side checks
// the bytes it sees. The QP numbers, keys and addresses go through files in DIR.
//   verbs_wr server|client DIR
#include <endian.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

int g_failures = 0;
alignas(64) uint8_t buf[4096];  // the registered memory of this side

void check(bool ok, const char* what) {
    std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) ++g_failures;
}

struct Info {
    uint32_t qpn = 0, rkey = 0, psn = 0;
    uint64_t addr = 0;
};

void put(const std::string& dir, const char* name, const Info& i) {
    const std::string tmp = dir + "/" + name + ".tmp", fin = dir + "/" + name;
    FILE* f = std::fopen(tmp.c_str(), "w");
    std::fprintf(f, "%u %u %u %" PRIu64 "\n", i.qpn, i.rkey, i.psn, i.addr);
    std::fclose(f);
    std::rename(tmp.c_str(), fin.c_str());
}

bool get(const std::string& dir, const char* name, Info& i) {
    const std::string fin = dir + "/" + name;
    for (int t = 0; t < 600; ++t) {  // 60 s
        if (FILE* f = std::fopen(fin.c_str(), "r")) {
            const int n = std::fscanf(f, "%u %u %u %" SCNu64, &i.qpn, &i.rkey, &i.psn, &i.addr);
            std::fclose(f);
            if (n == 4) return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
}

// n completions, each successful; false after 10 s.
bool wait_cqes(ibv_cq* cq, int n, ibv_wc* out) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int got = 0;
    while (got < n && std::chrono::steady_clock::now() < end) {
        const int k = ibv_poll_cq(cq, n - got, out + got);
        if (k < 0) return false;
        got += k;
    }
    for (int i = 0; i < got; ++i)
        if (out[i].status != IBV_WC_SUCCESS) {
            std::printf("completion %d: %s\n", i, ibv_wc_status_str(out[i].status));
            return false;
        }
    return got == n;
}

bool connect_qp(ibv_qp* qp, const Info& peer, uint32_t my_psn, bool server) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer.qpn;
    a.rq_psn = peer.psn;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.grh.hop_limit = 64;
    const uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, uint8_t(server ? 2 : 1)};
    std::memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return false;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = my_psn;
    a.timeout = 18;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                     IBV_QP_MAX_QP_RD_ATOMIC) == 0;
}

// The server: what the client's batches did to its memory and receive queue.
void server_side(const std::string& dir, ibv_cq* cq, uint64_t* faa, uint64_t* cas) {
    ibv_wc wc[4]{};
    check(wait_cqes(cq, 1, wc) && wc[0].wr_id == 50 && wc[0].opcode == IBV_WC_RECV && wc[0].byte_len == 5 &&
              (wc[0].wc_flags & IBV_WC_WITH_IMM) && be32toh(wc[0].imm_data) == 0xdeadbeef,
          "server: the SEND with immediate 0xdeadbeef, 5 bytes");
    check(std::memcmp(buf + 512, "hello", 5) == 0, "server: its inline data 'hello'");
    bool write_ok = true;
    for (int i = 0; i < 256; ++i) write_ok &= buf[i] == uint8_t(0xA0 ^ i);
    check(write_ok, "server: the RDMA WRITE's 256 bytes, before the SEND (RC order)");
    Info done;
    check(get(dir, "client-done", done), "server: the client finished its READ and atomics");
    check(*faa == 105 && *cas == 9, "server: FETCH_AND_ADD 100+5 = 105, CMP_AND_SWAP 7 -> 9");
}

// The client: two batches through ibv_wr_*, an aborted one and one past the send queue.
void client_side(const std::string& dir, ibv_qp_ex* qpx, ibv_cq* cq, ibv_mr* mr, const Info& peer, uint32_t max_send_wr,
                 uint64_t* faa, uint64_t* cas) {
    ibv_wc wc[4]{};
    for (int i = 0; i < 256; ++i) buf[i] = uint8_t(0xA0 ^ i);
    ibv_wr_start(qpx);
    qpx->wr_id = 1;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qpx, peer.rkey, peer.addr);
    ibv_wr_set_sge(qpx, mr->lkey, reinterpret_cast<uintptr_t>(buf), 256);
    qpx->wr_id = 2;
    ibv_wr_send_imm(qpx, htobe32(0xdeadbeef));
    char hello[] = "hello";
    ibv_wr_set_inline_data(qpx, hello, 5);
    std::memcpy(hello, "XXXXX", 5);  // copied at the call: the buffer is free again
    check(ibv_wr_complete(qpx) == 0, "client: WRITE and SEND_WITH_IMM (inline) in one batch");
    check(wait_cqes(cq, 2, wc) && wc[0].wr_id == 1 && wc[0].opcode == IBV_WC_RDMA_WRITE && wc[1].wr_id == 2 &&
              wc[1].opcode == IBV_WC_SEND,
          "client: their two completions, in order");
    ibv_wr_start(qpx);
    qpx->wr_id = 3;
    ibv_wr_rdma_read(qpx, peer.rkey, peer.addr + 1024);
    ibv_wr_set_sge(qpx, mr->lkey, reinterpret_cast<uintptr_t>(buf + 1024), 256);
    qpx->wr_id = 4;
    ibv_wr_atomic_fetch_add(qpx, peer.rkey, peer.addr + 2048, 5);
    ibv_wr_set_sge(qpx, mr->lkey, reinterpret_cast<uintptr_t>(faa), 8);
    qpx->wr_id = 5;
    ibv_wr_atomic_cmp_swp(qpx, peer.rkey, peer.addr + 2056, 7, 9);
    ibv_wr_set_sge(qpx, mr->lkey, reinterpret_cast<uintptr_t>(cas), 8);
    check(ibv_wr_complete(qpx) == 0, "client: READ, FETCH_AND_ADD, CMP_AND_SWAP in one batch");
    check(wait_cqes(cq, 3, wc) && wc[0].wr_id == 3 && wc[0].opcode == IBV_WC_RDMA_READ && wc[1].wr_id == 4 &&
              wc[1].opcode == IBV_WC_FETCH_ADD && wc[2].wr_id == 5 && wc[2].opcode == IBV_WC_COMP_SWAP,
          "client: their three completions, in order");
    bool read_ok = true;
    for (int i = 0; i < 256; ++i) read_ok &= buf[1024 + i] == uint8_t(0xB0 ^ i);
    check(read_ok, "client: the READ's 256 bytes");
    check(*faa == 100 && *cas == 7, "client: the atomics' original values 100 and 7");
    // ibv_wr_abort drops a batch (nothing posted) and frees the QP for the next one.
    ibv_wr_start(qpx);
    qpx->wr_id = 6;
    ibv_wr_rdma_write(qpx, peer.rkey, peer.addr);
    ibv_wr_set_sge(qpx, mr->lkey, reinterpret_cast<uintptr_t>(buf), 8);
    ibv_wr_abort(qpx);
    // More WRs than the send queue holds: ibv_wr_complete refuses the batch, nothing posted.
    ibv_wr_start(qpx);
    for (int i = 0; i <= int(max_send_wr); ++i) {
        qpx->wr_id = 100 + uint64_t(i);
        ibv_wr_rdma_write(qpx, peer.rkey, peer.addr);
        ibv_wr_set_sge(qpx, mr->lkey, reinterpret_cast<uintptr_t>(buf), 8);
    }
    check(ibv_wr_complete(qpx) == ENOMEM, "client: a batch past max_send_wr: ENOMEM");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    check(ibv_poll_cq(cq, 4, wc) == 0, "client: no completion from the aborted or refused batch");
    put(dir, "client-done", Info{});
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    const bool server = std::strcmp(argv[1], "server") == 0;
    const std::string dir = argv[2];
    int num = 0;
    ibv_device** list = ibv_get_device_list(&num);
    ibv_context* ctx = num == 1 ? ibv_open_device(list[0]) : nullptr;
    ibv_free_device_list(list);
    if (!ctx) return 1;
    ibv_pd* pd = ibv_alloc_pd(ctx);
    for (int i = 0; i < 256; ++i) buf[1024 + i] = uint8_t(server ? 0xB0 ^ i : 0);  // what the client reads
    uint64_t* faa = reinterpret_cast<uint64_t*>(buf + 2048);
    uint64_t* cas = reinterpret_cast<uint64_t*>(buf + 2056);
    *faa = server ? 100 : 0;
    *cas = server ? 7 : 0;
    ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof buf,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    ibv_qp_init_attr_ex ix{};
    ix.send_cq = ix.recv_cq = cq;
    ix.cap = {8, 8, 1, 1, 64};
    ix.qp_type = IBV_QPT_RC;
    ix.pd = pd;
    ix.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ix.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP;
    ibv_qp* qp = ibv_create_qp_ex(ctx, &ix);
    ibv_qp_ex* qpx = qp ? ibv_qp_to_qp_ex(qp) : nullptr;
    check(pd && mr && cq && qp && qpx, "PD, MR, CQ, RC QP with send_ops_flags, ibv_qp_to_qp_ex");
    if (!qpx) return 1;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    ibv_sge rsge{reinterpret_cast<uintptr_t>(buf + 512), 64, mr->lkey};
    ibv_recv_wr rwr{};
    rwr.wr_id = 50;
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (server) check(ibv_post_recv(qp, &rwr, &bad) == 0, "server: a receive posted");
    const uint32_t psn = server ? 0x111111 : 0x222222;
    put(dir, server ? "server" : "client", Info{qp->qp_num, mr->rkey, psn, reinterpret_cast<uintptr_t>(buf)});
    Info peer;
    check(get(dir, server ? "client" : "server", peer), "the peer's QPN, rkey, PSN and address");
    check(connect_qp(qp, peer, psn, server), "RTR (resolving the peer) and RTS");
    if (server)
        server_side(dir, cq, faa, cas);
    else
        client_side(dir, qpx, cq, mr, peer, ix.cap.max_send_wr, faa, cas);
    check(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0 &&
              ibv_close_device(ctx) == 0,
          "destroy QP, CQ, MR, PD; close");
    std::printf("%d failures\n", g_failures);
    return g_failures ? 1 : 0;
}
