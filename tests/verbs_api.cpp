// hcaemu's libibverbs.so.1 (tools/verbs) called the way programs call it, through <infiniband/verbs.h>
// and its inline functions, on a local HCA over net_null (run by tests/meson.build with
// HCAEMU_DEVICE=local): the queries' exact values, the verbs hcaemu lacks answering as libibverbs
// does for a device without them, completion channels and the async fd readable in epoll without
// a verbs call (the progress thread delivers), errors with their errno.
#include <endian.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

int g_failures = 0;

void check(bool ok, const char* what, long got = 0) {
    if (ok) {
        std::printf("ok   %s\n", what);
    } else {
        std::printf("FAIL %s (got %ld, errno %d %s)\n", what, got, errno, std::strerror(errno));
        ++g_failures;
    }
}

// Readable within timeout_ms, by epoll as an event loop would wait.
bool readable(int fd, int timeout_ms) {
    const int ep = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    epoll_event out{};
    const int n = epoll_wait(ep, &out, 1, timeout_ms);
    close(ep);
    return n == 1 && out.data.fd == fd;
}

void check_queries(ibv_context* ctx) {
    ibv_device_attr da{};
    check(ibv_query_device(ctx, &da) == 0 && da.phys_port_cnt == 1 && da.max_qp == 65536 && da.max_cqe == 32767 &&
              da.atomic_cap == IBV_ATOMIC_HCA && da.max_mw == 0 && da.max_mcast_grp == 0 &&
              be64toh(da.node_guid) == 0x505400fffe180001ull && da.sys_image_guid == da.node_guid &&
              da.device_cap_flags == (IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR | IBV_DEVICE_UD_AV_PORT_ENFORCE |
                                      IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_RC_RNR_NAK_GEN),
          "ibv_query_device: 1 port, 65536 QPs, 32767 CQEs, ATOMIC_HCA, no MW/multicast, GUID 5054:00ff:fe18:0001, "
          "cap flags: P_Key/Q_Key counters, AV port enforced, sys image GUID, RNR NAKs");
    ibv_device_attr_ex dx{};
    check(ibv_query_device_ex(ctx, nullptr, &dx) == 0 && dx.orig_attr.max_qp == 65536 && dx.comp_mask == 0 &&
              dx.odp_caps.general_caps == 0 && dx.device_cap_flags_ex == da.device_cap_flags && dx.max_dm_size == 0 &&
              dx.phys_port_cnt_ex == 1,
          "ibv_query_device_ex (inline, through verbs_context): no ODP, no DM, no extended caps beyond the base flags");
    ibv_port_attr pa{};
    check(ibv_query_port(ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
              pa.active_mtu == IBV_MTU_1024 && pa.max_mtu == IBV_MTU_4096 && pa.gid_tbl_len == 16 && pa.pkey_tbl_len == 1 &&
              pa.lid == 0,
          "ibv_query_port: ACTIVE, Ethernet, MTU 1024 of 4096, 2 GIDs, 1 P_Key, LID 0");
    errno = 0;
    check(ibv_query_port(ctx, 2, &pa) == EINVAL, "ibv_query_port(port 2): EINVAL");

    ibv_gid g{};
    const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1};
    check(ibv_query_gid(ctx, 1, 1, &g) == 0 && std::memcmp(g.raw, v4, 16) == 0, "ibv_query_gid 1: ::ffff:198.18.0.1");
    check(ibv_query_gid(ctx, 1, 0, &g) == 0 && be64toh(g.global.subnet_prefix) == 0xfe80000000000000ull &&
              be64toh(g.global.interface_id) == 0x505400fffe180001ull,
          "ibv_query_gid 0: fe80::5054:ff:fe18:1 (the MAC's link-local)");
    errno = 0;
    check(ibv_query_gid(ctx, 1, 16, &g) == -1 && errno == EINVAL, "ibv_query_gid 16 (past gid_tbl_len): -1, EINVAL");
    std::memset(&g, 0xAA, sizeof g);
    check(ibv_query_gid(ctx, 1, 2, &g) == 0 && g.global.subnet_prefix == 0 && g.global.interface_id == 0,
          "ibv_query_gid 2 (an empty slot): 0, the zero GID");
    {
        ibv_gid_entry empty{};
        check(ibv_query_gid_ex(ctx, 1, 2, &empty, 0) == ENODATA, "ibv_query_gid_ex 2 (an empty slot): ENODATA");
    }
    ibv_gid_entry ge{};
    check(ibv_query_gid_ex(ctx, 1, 1, &ge, 0) == 0 && ge.gid_type == IBV_GID_TYPE_ROCE_V2 && ge.gid_index == 1 &&
              ge.port_num == 1 && std::memcmp(ge.gid.raw, v4, 16) == 0,
          "ibv_query_gid_ex 1: RoCE v2, index 1, port 1");
    check(ibv_query_gid_ex(ctx, 1, 1, &ge, 1) == EINVAL, "ibv_query_gid_ex with flags: EINVAL");
    ibv_gid_entry tbl[4]{};
    const ssize_t n = ibv_query_gid_table(ctx, tbl, 4, 0);
    check(n == 2 && tbl[0].gid_index == 0 && tbl[1].gid_index == 1 && tbl[1].gid_type == IBV_GID_TYPE_ROCE_V2,
          "ibv_query_gid_table: 2 entries", long(n));
    check(ibv_query_gid_table(ctx, tbl, 1, 0) == -EINVAL, "ibv_query_gid_table into 1 entry: -EINVAL");
    __be16 pkey = 0;
    check(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && be16toh(pkey) == 0xFFFF, "ibv_query_pkey 0: 0xffff");
    check(ibv_query_pkey(ctx, 1, 1, &pkey) == -1 && errno == EINVAL, "ibv_query_pkey 1: -1, EINVAL");
    check(ibv_get_pkey_index(ctx, 1, htobe16(0xFFFF)) == 0, "ibv_get_pkey_index(0xffff): 0");
    check(ibv_get_pkey_index(ctx, 1, htobe16(0x7FFF)) == -1 && errno == ENOENT, "ibv_get_pkey_index(0x7fff): -1, ENOENT");
}

// What a device without the feature answers: NULL and EOPNOTSUPP, or the error code.
void check_unsupported(ibv_context* ctx, ibv_pd* pd, ibv_cq* cq) {
    errno = 0;
    check(!ibv_alloc_mw(pd, IBV_MW_TYPE_1) && errno == EOPNOTSUPP, "ibv_alloc_mw: NULL, EOPNOTSUPP");
    ibv_cq_init_attr_ex cx{};
    cx.cqe = 16;
    cx.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
    errno = 0;
    check(!ibv_create_cq_ex(ctx, &cx) && errno == EOPNOTSUPP, "ibv_create_cq_ex with timestamps: NULL, EOPNOTSUPP");
    ibv_xrcd_init_attr xa{};
    errno = 0;
    check(!ibv_open_xrcd(ctx, &xa) && errno == EOPNOTSUPP, "ibv_open_xrcd: NULL, EOPNOTSUPP");
    ibv_alloc_dm_attr dma{};
    dma.length = 64;
    errno = 0;
    check(!ibv_alloc_dm(ctx, &dma) && errno == EOPNOTSUPP, "ibv_alloc_dm: NULL, EOPNOTSUPP");
    ibv_td_init_attr ta{};
    errno = 0;
    check(!ibv_alloc_td(ctx, &ta) && errno == EOPNOTSUPP, "ibv_alloc_td: NULL, EOPNOTSUPP");
    ibv_wq_init_attr wa{};
    errno = 0;
    check(!ibv_create_wq(ctx, &wa) && errno == EOPNOTSUPP, "ibv_create_wq: NULL, EOPNOTSUPP");
    ibv_counters_init_attr ca{};
    errno = 0;
    check(!ibv_create_counters(ctx, &ca) && errno == EOPNOTSUPP, "ibv_create_counters: NULL, EOPNOTSUPP");

    static char buf[4096];
    errno = 0;
    check(!ibv_reg_mr_iova(pd, buf, sizeof buf, 0x1000, IBV_ACCESS_LOCAL_WRITE) && errno == EOPNOTSUPP,
          "ibv_reg_mr_iova with iova != addr: NULL, EOPNOTSUPP");
    errno = 0;
    check(!ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND) && errno == EOPNOTSUPP,
          "ibv_reg_mr with ON_DEMAND: NULL, EOPNOTSUPP");
    {
        // Pages that are not there, or not writable for a write access: EFAULT, as the kernel's
        // pinning answers; bad access flags are EINVAL before the pages are looked at.
        // Another thread of this process (the HCA's, ASan's allocator) may map a page into a fresh
        // 4 KiB hole before the call sees it: then the answer says nothing, and a new hole is
        // made (msync: ENOMEM while the page is unmapped).
        char* hole = nullptr;
        bool refused = false, filled = true;
        int attempt = 0;
        for (; attempt < 20 && filled; ++attempt) {
            hole = static_cast<char*>(mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
            munmap(hole + 4096, 4096);
            errno = 0;
            ibv_mr* mr = ibv_reg_mr(pd, hole, 3 * 4096, IBV_ACCESS_LOCAL_WRITE);
            refused = !mr && errno == EFAULT;
            filled = msync(hole + 4096, 4096, MS_ASYNC) == 0;
            if (mr) ibv_dereg_mr(mr);
            if (filled) {  // not ours: leave it, free our two pages, try again
                munmap(hole, 4096);
                munmap(hole + 2 * 4096, 4096);
            }
        }
        if (attempt > 1) std::printf("ibv_reg_mr over a hole: %d hole(s) filled by another thread first\n", attempt - 1);
        check(!filled && refused, "ibv_reg_mr over a hole: NULL, EFAULT");
        if (filled) hole = static_cast<char*>(mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        mprotect(hole, 4096, PROT_READ);
        errno = 0;
        check(!ibv_reg_mr(pd, hole, 4096, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT,
              "ibv_reg_mr of read-only pages with LOCAL_WRITE: NULL, EFAULT");
        errno = 0;
        check(!ibv_reg_mr(pd, hole + 4096, 4096, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL,
              "ibv_reg_mr REMOTE_WRITE without LOCAL_WRITE over a hole: NULL, EINVAL first");
        ibv_mr* ro = ibv_reg_mr(pd, hole, 4096, IBV_ACCESS_REMOTE_READ);
        check(ro && ibv_dereg_mr(ro) == 0, "ibv_reg_mr of read-only pages for REMOTE_READ: registered");
        munmap(hole, 4096);
        munmap(hole + 2 * 4096, 4096);
    }
    errno = 0;
    check(!ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 3, IBV_ACCESS_LOCAL_WRITE) && errno == EOPNOTSUPP,
          "ibv_reg_dmabuf_mr: NULL, EOPNOTSUPP");

    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.cap = {4, 4, 1, 1, 0};
    ia.qp_type = IBV_QPT_XRC_SEND;
    errno = 0;
    check(!ibv_create_qp(pd, &ia) && errno == EOPNOTSUPP, "ibv_create_qp XRC_SEND: NULL, EOPNOTSUPP");
    ia.qp_type = IBV_QPT_RAW_PACKET;
    errno = 0;
    check(!ibv_create_qp(pd, &ia) && errno == EOPNOTSUPP, "ibv_create_qp RAW_PACKET: NULL, EOPNOTSUPP");
    ibv_qp_init_attr_ex ix{};
    ix.send_cq = ix.recv_cq = cq;
    ix.cap = {4, 4, 1, 1, 0};
    ix.qp_type = IBV_QPT_RC;
    ix.pd = pd;
    ix.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ix.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_LOCAL_INV;
    errno = 0;
    check(!ibv_create_qp_ex(ctx, &ix) && errno == EOPNOTSUPP, "ibv_create_qp_ex with LOCAL_INV in send_ops_flags: NULL, EOPNOTSUPP");
    ix.send_ops_flags = IBV_QP_EX_WITH_BIND_MW;
    errno = 0;
    check(!ibv_create_qp_ex(ctx, &ix) && errno == EOPNOTSUPP, "ibv_create_qp_ex with BIND_MW in send_ops_flags: NULL, EOPNOTSUPP");
    ix.send_ops_flags = IBV_QP_EX_WITH_SEND;
    ibv_qp* qpx = ibv_create_qp_ex(ctx, &ix);
    check(qpx && ibv_qp_to_qp_ex(qpx) && ibv_qp_to_qp_ex(qpx)->wr_send && !ibv_qp_to_qp_ex(qpx)->wr_bind_mw,
          "ibv_create_qp_ex with SEND in send_ops_flags: ibv_qp_to_qp_ex gives the ibv_wr_* functions");
    check(qpx && ibv_destroy_qp(qpx) == 0, "ibv_destroy_qp of it");
    ix.comp_mask = IBV_QP_INIT_ATTR_PD;
    ibv_qp* qp = ibv_create_qp_ex(ctx, &ix);
    check(qp && qp->qp_type == IBV_QPT_RC && qp->state == IBV_QPS_RESET && ix.cap.max_send_wr >= 4,
          "ibv_create_qp_ex RC with a PD: created in RESET");
    check(qp && ibv_qp_to_qp_ex(qp) == nullptr, "ibv_qp_to_qp_ex of a QP made without send_ops_flags: NULL");
    ibv_ece ece{};
    check(qp && ibv_query_ece(qp, &ece) == EOPNOTSUPP && ibv_set_ece(qp, &ece) == EOPNOTSUPP,
          "ibv_query_ece, ibv_set_ece: EOPNOTSUPP");
    ibv_gid mg{};
    mg.raw[0] = 0xff;
    check(qp && ibv_attach_mcast(qp, &mg, 0) == EOPNOTSUPP, "ibv_attach_mcast: EOPNOTSUPP");
    check(qp && ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");

    ibv_srq_init_attr_ex sx{};
    sx.attr = {8, 1, 0};
    sx.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    sx.srq_type = IBV_SRQT_XRC;
    sx.pd = pd;
    errno = 0;
    check(!ibv_create_srq_ex(ctx, &sx) && errno == EOPNOTSUPP, "ibv_create_srq_ex XRC: NULL, EOPNOTSUPP");
}

// A posted receive flushed by the move to ERR: its completion, an event on the channel's fd that
// epoll sees without any verbs call, ibv_get_cq_event naming the CQ and its context.
void check_channel(ibv_context* ctx, ibv_pd* pd) {
    ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
    check(ch && ch->fd >= 0, "ibv_create_comp_channel: a real fd");
    if (!ch) return;
    int tag = 7;
    ibv_cq* cq = ibv_create_cq(ctx, 8, &tag, ch, 0);
    check(cq && cq->cqe >= 8 && cq->channel == ch, "ibv_create_cq on the channel");
    errno = 0;
    check(!ibv_create_cq(ctx, 8, nullptr, ch, 1) && errno == EINVAL, "ibv_create_cq comp_vector 1 of 1: NULL, EINVAL");
    check(ibv_destroy_comp_channel(ch) == EBUSY, "ibv_destroy_comp_channel with a CQ on it: EBUSY");
    static char buf[256];
    ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
    check(mr && mr->lkey && mr->addr == buf && mr->length == sizeof buf, "ibv_reg_mr (relaxed ordering is optional)");
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.cap = {4, 4, 1, 1, 0};
    ia.qp_type = IBV_QPT_RC;
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    check(qp != nullptr, "ibv_create_qp RC");
    if (!qp || !mr) return;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    check(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0 &&
              qp->state == IBV_QPS_INIT,
          "ibv_modify_qp RESET->INIT");
    a.qp_state = IBV_QPS_RTS;
    check(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL && qp->state == IBV_QPS_INIT, "ibv_modify_qp INIT->RTS: EINVAL");
    ibv_qp_attr q{};
    ibv_qp_init_attr qi{};
    check(ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS, &qi) == 0 && q.qp_state == IBV_QPS_INIT &&
              q.qp_access_flags == IBV_ACCESS_REMOTE_WRITE && q.port_num == 1 && qi.send_cq == cq && qi.qp_type == IBV_QPT_RC,
          "ibv_query_qp: INIT, the access flags, the CQs");

    ibv_sge sge{reinterpret_cast<uintptr_t>(buf), sizeof buf, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = 0x1234;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    check(ibv_post_recv(qp, &wr, &bad) == 0, "ibv_post_recv (inline, through the context ops)");
    check(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
    check(!readable(ch->fd, 0), "channel fd not readable before a completion");
    fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
    ibv_cq* ecq = nullptr;
    void* ectx = nullptr;
    errno = 0;
    check(ibv_get_cq_event(ch, &ecq, &ectx) == -1 && errno == EAGAIN, "ibv_get_cq_event on a non-blocking fd, no event: EAGAIN");
    a.qp_state = IBV_QPS_ERR;
    check(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "ibv_modify_qp INIT->ERR");
    check(readable(ch->fd, 5000), "channel fd readable in epoll after the flush");
    check(ibv_get_cq_event(ch, &ecq, &ectx) == 0 && ecq == cq && ectx == &tag, "ibv_get_cq_event: our CQ and its context");
    ibv_wc wc[2]{};
    const int got = ibv_poll_cq(cq, 2, wc);
    check(got == 1 && wc[0].wr_id == 0x1234 && wc[0].status == IBV_WC_WR_FLUSH_ERR && wc[0].qp_num == qp->qp_num,
          "ibv_poll_cq: the receive, WR_FLUSH_ERR", got);
    check(!readable(ch->fd, 0), "channel fd not readable once the event is taken");
    ibv_ack_cq_events(cq, 1);
    check(cq->comp_events_completed == 1, "ibv_ack_cq_events counts");
    check(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");

    // An event raised but never taken goes with its CQ: destroy does not wait for it, and the
    // channel's fd does not stay readable for it.
    ibv_qp* qp2 = ibv_create_qp(pd, &ia);
    a.qp_state = IBV_QPS_INIT;
    check(qp2 && ibv_modify_qp(qp2, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0 &&
              ibv_post_recv(qp2, &wr, &bad) == 0 && ibv_req_notify_cq(cq, 0) == 0,
          "a second QP in INIT with a receive posted, the CQ armed");
    a.qp_state = IBV_QPS_ERR;
    check(qp2 && ibv_modify_qp(qp2, &a, IBV_QP_STATE) == 0 && readable(ch->fd, 5000), "its flush: the channel fd readable");
    check(qp2 && ibv_destroy_qp(qp2) == 0 && ibv_destroy_cq(cq) == 0, "destroy QP, then the CQ with its event not taken: 0");
    check(!readable(ch->fd, 0), "channel fd not readable after the CQ with its event is gone");
    check(ibv_destroy_comp_channel(ch) == 0 && ibv_dereg_mr(mr) == 0, "destroy channel, MR");
}

// The system call thread `tid` of this process is blocked in (its number, /proc's), -1 if none.
long blocked_in(pid_t tid) {
    std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/syscall");
    long nr = -1;
    return f >> nr ? nr : -1;
}

// A program destroys an event file's owner (`destroy`: a channel, a context) while another of its
// threads waits on `fd` in the call `wait` makes. The waiter stays blocked for good, as on the
// kernel's file, whose close does not wake a read: the fd stays open (a read again after a leaked
// restart code must not get EBADF, nor read a file opened since on the same number), and a count
// written to it does not make the call return either. One waiter a call: it is never joined.
void check_destroyed_under_waiter(const char* what, int fd, void (*wait)(void*), void* arg, int (*destroy)(void*)) {
    struct Waiter {
        std::atomic<pid_t> tid{0};
        std::atomic<int> returned{0};
    };
    auto* w = new Waiter;  // outlives this call with its thread
    std::thread t([w, wait, arg] {
        w->tid = pid_t(::syscall(SYS_gettid));
        wait(arg);
        w->returned = 1;
    });
    const auto in_read = [w] { return w->tid != 0 && blocked_in(w->tid) == SYS_read; };
    for (int i = 0; i < 5000 && !in_read(); ++i) usleep(1000);
    std::printf("     (%s)\n", what);
    check(in_read(), "the waiter blocked in read(2) of the fd", w->tid ? blocked_in(w->tid) : -2);
    check(destroy(arg) == 0, "destroyed with a thread waiting on it: 0");
    check(fcntl(fd, F_GETFD) != -1, "its fd still open: not closed under the waiter");
    const uint64_t one = 1;
    check(write(fd, &one, sizeof one) == ssize_t(sizeof one), "a count written to that fd");
    long now = -1;
    for (int i = 0; i < 5000 && (now = blocked_in(w->tid)) == SYS_read; ++i) usleep(1000);
    usleep(50000);
    check(w->returned == 0 && blocked_in(w->tid) == SYS_pause, "the waiter did not return: it waits in pause(2) for good", now);
    t.detach();  // blocked until the process ends
}

// A completion channel destroyed while a thread waits in ibv_get_cq_event.
void check_channel_destroyed_under_waiter(ibv_context* ctx) {
    ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
    check(ch != nullptr, "ibv_create_comp_channel for a waiter");
    if (!ch) return;
    check_destroyed_under_waiter(
        "ibv_destroy_comp_channel under ibv_get_cq_event", ch->fd,
        [](void* a) {
            ibv_cq* cq = nullptr;
            void* c = nullptr;
            (void)ibv_get_cq_event(static_cast<ibv_comp_channel*>(a), &cq, &c);
        },
        ch, [](void* a) { return ibv_destroy_comp_channel(static_cast<ibv_comp_channel*>(a)); });
}

// A second context closed while a thread waits in ibv_get_async_event on it.
void check_context_closed_under_waiter() {
    ibv_device** list = ibv_get_device_list(nullptr);
    ibv_context* ctx = list && list[0] ? ibv_open_device(list[0]) : nullptr;
    ibv_free_device_list(list);
    check(ctx != nullptr, "ibv_open_device: a second context for a waiter");
    if (!ctx) return;
    check_destroyed_under_waiter(
        "ibv_close_device under ibv_get_async_event", ctx->async_fd,
        [](void* a) {
            ibv_async_event ev;
            (void)ibv_get_async_event(static_cast<ibv_context*>(a), &ev);
        },
        ctx, [](void* a) { return ibv_close_device(static_cast<ibv_context*>(a)); });
}

// ibv_create_cq_ex and the poll-cq-ex API: two receives flushed, read one after the other.
void check_cq_ex(ibv_context* ctx, ibv_pd* pd) {
    ibv_cq_init_attr_ex cx{};
    cx.cqe = 16;
    cx.wc_flags = IBV_WC_STANDARD_FLAGS;
    ibv_cq_ex* cq = ibv_create_cq_ex(ctx, &cx);
    check(cq && cq->start_poll && ibv_cq_ex_to_cq(cq)->cqe >= 16, "ibv_create_cq_ex with the standard fields");
    if (!cq) return;
    ibv_poll_cq_attr pa{};
    check(ibv_start_poll(cq, &pa) == ENOENT, "ibv_start_poll on an empty CQ: ENOENT");
    static char buf[64];
    ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = ibv_cq_ex_to_cq(cq);
    ia.cap = {4, 4, 1, 1, 0};
    ia.qp_type = IBV_QPT_UD;
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    check(qp && mr, "a UD QP on it");
    if (!qp || !mr) return;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = 0x11111111;
    check(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0, "UD RESET->INIT");
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf), sizeof buf, mr->lkey};
    ibv_recv_wr wr[2]{};
    wr[0].wr_id = 100;
    wr[0].sg_list = &sge;
    wr[0].num_sge = 1;
    wr[0].next = &wr[1];
    wr[1] = wr[0];
    wr[1].wr_id = 101;
    wr[1].next = nullptr;
    ibv_recv_wr* bad = nullptr;
    check(ibv_post_recv(qp, wr, &bad) == 0, "two receives posted as one chain");
    a.qp_state = IBV_QPS_ERR;
    check(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "UD INIT->ERR");
    const int s1 = ibv_start_poll(cq, &pa);
    check(s1 == 0 && cq->wr_id == 100 && cq->status == IBV_WC_WR_FLUSH_ERR && ibv_wc_read_opcode(cq) == IBV_WC_RECV &&
              ibv_wc_read_qp_num(cq) == qp->qp_num,
          "ibv_start_poll: the first receive, WR_FLUSH_ERR, its QP", s1);
    if (s1 == 0) {
        // A post between start_poll and end_poll (a receive for the one just read) does not wait
        // for end_poll; on a QP in ERR it is flushed at once, behind the second.
        ibv_recv_wr again = wr[0];
        again.wr_id = 102;
        again.next = nullptr;
        check(ibv_post_recv(qp, &again, &bad) == 0, "ibv_post_recv between start_poll and end_poll");
        check(ibv_next_poll(cq) == 0 && cq->wr_id == 101 && cq->status == IBV_WC_WR_FLUSH_ERR, "ibv_next_poll: the second");
        check(ibv_next_poll(cq) == 0 && cq->wr_id == 102, "ibv_next_poll: the one posted meanwhile");
        check(ibv_next_poll(cq) == ENOENT, "ibv_next_poll: then ENOENT");
        ibv_end_poll(cq);
    }
    check(ibv_start_poll(cq, &pa) == ENOENT, "ibv_start_poll after end_poll: ENOENT (the CQ is free again)");
    check(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0 && ibv_dereg_mr(mr) == 0,
          "destroy QP, the ex CQ, MR");
}

// A UD QP through INIT, RTR, RTS and SQD: each attribute given comes back from ibv_query_qp, and
// SQD with en_sqd_async_notify and nothing outstanding raises SQ_DRAINED at once (IBTA 10.3.1).
void check_ud_states(ibv_context* ctx, ibv_pd* pd) {
    ibv_cq* cq = ibv_create_cq(ctx, 8, nullptr, nullptr, 0);
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.cap = {8, 8, 2, 2, 64};
    ia.qp_type = IBV_QPT_UD;
    ia.sq_sig_all = 1;
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    check(qp && ia.cap.max_send_wr >= 8 && ia.cap.max_inline_data >= 64, "UD QP, caps granted back");
    if (!qp) return;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qkey = 0x12345678;
    check(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0, "UD RESET->INIT");
    a = {};
    a.qp_state = IBV_QPS_RTR;
    check(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0 && qp->state == IBV_QPS_RTR, "UD INIT->RTR");
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0xABCDEF;
    check(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0 && qp->state == IBV_QPS_RTS, "UD RTR->RTS");
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.dest_qp_num = 5;
    check(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_DEST_QPN) == EINVAL, "UD RTS->RTS with DEST_QPN: EINVAL");
    ibv_qp_attr q{};
    ibv_qp_init_attr qi{};
    check(ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_QKEY | IBV_QP_SQ_PSN | IBV_QP_CAP, &qi) == 0 && q.qp_state == IBV_QPS_RTS &&
              q.qkey == 0x12345678 && q.sq_psn == 0xABCDEF && q.port_num == 1 && q.pkey_index == 0 &&
              q.cap.max_send_sge >= 2 && qi.sq_sig_all == 1 && qi.qp_type == IBV_QPT_UD,
          "ibv_query_qp: RTS, qkey, sq_psn, port, pkey index, caps, sq_sig_all");
    a = {};
    a.qp_state = IBV_QPS_SQD;
    a.en_sqd_async_notify = 1;
    check(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY) == 0 && qp->state == IBV_QPS_SQD, "UD RTS->SQD");
    ibv_async_event ev{};
    check(readable(ctx->async_fd, 5000) && ibv_get_async_event(ctx, &ev) == 0 && ev.event_type == IBV_EVENT_SQ_DRAINED &&
              ev.element.qp == qp,
          "SQ_DRAINED on the async fd, naming the QP");
    ibv_ack_async_event(&ev);
    check(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0, "destroy QP, CQ");
}

// IBTA ch. 11: a QP on an SRQ moved to ERR raises Last WQE Reached, on the async fd.
void check_async(ibv_context* ctx, ibv_pd* pd) {
    check(!readable(ctx->async_fd, 0), "async fd not readable with no event");
    ibv_cq* cq = ibv_create_cq(ctx, 8, nullptr, nullptr, 0);
    ibv_srq_init_attr si{};
    si.attr = {16, 1, 0};
    ibv_srq* srq = ibv_create_srq(pd, &si);
    check(srq && si.attr.max_wr >= 16, "ibv_create_srq");
    ibv_srq_attr sa{};
    check(srq && ibv_query_srq(srq, &sa) == 0 && sa.max_wr >= 16 && sa.srq_limit == 0, "ibv_query_srq");
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.srq = srq;
    ia.cap = {4, 0, 1, 1, 0};
    ia.qp_type = IBV_QPT_RC;
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    check(qp && qp->srq == srq, "ibv_create_qp on the SRQ");
    if (!qp || !srq || !cq) return;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    a.qp_state = IBV_QPS_ERR;
    check(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "ibv_modify_qp INIT->ERR on an SRQ QP");
    check(readable(ctx->async_fd, 5000), "async fd readable in epoll");
    ibv_async_event ev{};
    check(ibv_get_async_event(ctx, &ev) == 0 && ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == qp,
          "ibv_get_async_event: QP_LAST_WQE_REACHED naming our QP");
    ibv_ack_async_event(&ev);
    check(qp->events_completed == 1, "ibv_ack_async_event counts on the QP");
    check(std::strcmp(ibv_event_type_str(ev.event_type), "last WQE reached") == 0, "ibv_event_type_str");
    check(ibv_destroy_qp(qp) == 0 && ibv_destroy_srq(srq) == 0 && ibv_destroy_cq(cq) == 0, "destroy QP, SRQ, CQ");
}

// ibv_import_device/pd/mr: the imports share the original objects; whichever wrapper is destroyed
// first destroys the object, the others then get EINVAL (not freed memory: ASan) until unimported.
// (An original whose import destroyed the object cannot be freed, as with the kernel: not tested.)
void check_import(ibv_context* ctx) {
    ibv_pd* pd = ibv_alloc_pd(ctx);
    static char buf[4096];
    ibv_mr* mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : nullptr;
    ibv_context* ictx = ibv_import_device(dup(ctx->cmd_fd));
    check(pd && mr && ictx, "ibv_import_device on a dup of cmd_fd");
    if (!pd || !mr || !ictx) return;
    ibv_pd* ipd = ibv_import_pd(ictx, pd->handle);
    ibv_mr* imr = ipd ? ibv_import_mr(ipd, mr->handle) : nullptr;
    check(ipd && imr && imr->lkey == mr->lkey && imr->rkey == mr->rkey && imr->length == mr->length,
          "ibv_import_pd, ibv_import_mr: the same keys and length");
    errno = 0;
    check(!ibv_import_pd(ictx, pd->handle + 1000) && errno == EINVAL, "ibv_import_pd of an unknown handle: EINVAL");
    if (!ipd || !imr) return;
    // The original MR destroyed: the imported wrapper's dereg finds the object gone.
    check(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr of the original");
    errno = 0;
    check(ibv_dereg_mr(imr) == EINVAL, "ibv_dereg_mr of its import afterwards: EINVAL");
    ibv_unimport_mr(imr);
    // The original PD destroyed: its import then gets EINVAL, and unimport frees it.
    check(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd of the original");
    errno = 0;
    check(!ibv_reg_mr(ipd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) && errno == EINVAL,
          "ibv_reg_mr on its import afterwards: NULL, EINVAL");
    ibv_unimport_pd(ipd);
    check(ibv_close_device(ictx) == 0, "ibv_close_device of the imported context");
}

}  // namespace

// A child the program forks (after a QP was created) and that leaves with exit(): the library's
// exit handler leaves the parent's HCA alone (its progress thread does not exist in the child)
// and the child ends, exit 0.
static void check_fork_exit() {
    std::fflush(stdout);
    const pid_t c = ::fork();
    if (c == 0) std::exit(0);
    int st = -1;
    pid_t r = 0;
    for (int i = 0; i < 500 && (r = ::waitpid(c, &st, WNOHANG)) == 0; ++i) ::usleep(10'000);
    if (r == 0) {
        ::kill(c, SIGKILL);  // our own child
        (void)::waitpid(c, &st, 0);
    }
    check(c > 0 && r == c && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "fork, the child's exit(): it ends within 5 s, exit 0", r);
}

int main() {
    // The program's CPUs before the local HCA's EAL starts (meson's EAL has -l 0).
    cpu_set_t before, after;
    CPU_ZERO(&before);
    CPU_ZERO(&after);
    const bool got_before = sched_getaffinity(0, sizeof before, &before) == 0;
    int num = -1;
    ibv_device** list = ibv_get_device_list(&num);
    check(list && num == 1 && list[0] && std::strcmp(ibv_get_device_name(list[0]), "hcaemu0") == 0 && !list[1],
          "ibv_get_device_list: hcaemu0 only", num);
    if (!list || num != 1) return 1;
    check(ibv_get_device_index(list[0]) == 0, "ibv_get_device_index: 0");
    check(be64toh(ibv_get_device_guid(list[0])) == 0x505400fffe180001ull, "ibv_get_device_guid: the MAC's EUI-64");
    check(list[0]->node_type == IBV_NODE_CA && list[0]->transport_type == IBV_TRANSPORT_IB, "node type CA, transport IB");
    ibv_context* ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    check(ctx != nullptr, "ibv_open_device");
    if (!ctx) return 1;
    // DPDK pins the thread that starts the EAL to its lcore; the program did not ask for that, and
    // pinned it waits for that one CPU holding the HCA's lock (interop under load: seconds).
    const bool got_after = sched_getaffinity(0, sizeof after, &after) == 0;
    check(got_before && got_after && CPU_EQUAL(&before, &after),
          "the program's thread keeps its CPUs after the local HCA's EAL start (got: that many)", CPU_COUNT(&after));
    check_queries(ctx);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    check(pd && cq, "ibv_alloc_pd, ibv_create_cq");
    if (!pd || !cq) return 1;
    check_unsupported(ctx, pd, cq);
    check_channel(ctx, pd);
    check_channel_destroyed_under_waiter(ctx);
    check_context_closed_under_waiter();
    check_async(ctx, pd);
    check_cq_ex(ctx, pd);
    check_ud_states(ctx, pd);
    check_fork_exit();
    check_import(ctx);
    check(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, "ibv_destroy_cq, ibv_dealloc_pd");
    check(ibv_close_device(ctx) == 0, "ibv_close_device");
    std::printf("%d failures\n", g_failures);
    return g_failures ? 1 : 0;
}
