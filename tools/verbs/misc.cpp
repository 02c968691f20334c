// libibverbs.so.1 on libhcaemu: the entry points with no HCA behind them (names of enums, rate
// conversions, sysfs helpers, the kernel-struct copies librdmacm uses, fork support) and the ones
// for features hcaemu lacks, which answer as libibverbs does for a device without them.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

#include "tools/verbs/verbs.hpp"

extern "C" {

// ---------------------------------------------------------------- names (rdma-core's texts)

const char* ibv_wc_status_str(enum ibv_wc_status status) {
    return size_t(status) < hcaemu::kWcStatusCount ? hcaemu::name(hcaemu::WcStatus(status)) : "unknown";
}

const char* ibv_node_type_str(enum ibv_node_type node_type) {
    static const char* const kNames[] = {"unknown", "InfiniBand channel adapter", "InfiniBand switch",
                                         "InfiniBand router", "iWARP NIC", "usNIC", "usNIC UDP", "unspecified"};
    const int i = int(node_type);
    return i >= 0 && size_t(i) < std::size(kNames) ? kNames[i] : "unknown";
}

const char* ibv_port_state_str(enum ibv_port_state port_state) {
    static const char* const kNames[] = {"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE",
                                         "PORT_ACTIVE_DEFER"};
    const int i = int(port_state);
    return i >= 0 && size_t(i) < std::size(kNames) ? kNames[i] : "unknown";
}

const char* ibv_event_type_str(enum ibv_event_type event) {
    static const char* const kNames[] = {
        "CQ error", "local work queue catastrophic error", "invalid request local work queue error",
        "local access violation work queue error", "communication established", "send queue drained",
        "path migrated", "path migration request error", "local catastrophic error", "port active",
        "port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error",
        "SRQ limit reached", "last WQE reached", "client reregistration", "GID table change",
        "WQ fatal"};
    const int i = int(event);
    return i >= 0 && size_t(i) < std::size(kNames) ? kNames[i] : "unknown";
}

// ---------------------------------------------------------------- rates (IBTA 9.11.1 StaticRate)

namespace {
struct Rate {
    ibv_rate rate;
    int mult;  // of 2.5 Gb/s
    int mbps;
};
constexpr Rate kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},     {IBV_RATE_5_GBPS, 2, 5000},       {IBV_RATE_10_GBPS, 4, 10000},
    {IBV_RATE_20_GBPS, 8, 20000},     {IBV_RATE_30_GBPS, 12, 30000},    {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},    {IBV_RATE_80_GBPS, 32, 80000},    {IBV_RATE_120_GBPS, 48, 120000},
    {IBV_RATE_14_GBPS, 5, 14062},     {IBV_RATE_56_GBPS, 22, 56250},    {IBV_RATE_112_GBPS, 45, 112500},
    {IBV_RATE_168_GBPS, 67, 168750},  {IBV_RATE_25_GBPS, 10, 25781},    {IBV_RATE_100_GBPS, 40, 103125},
    {IBV_RATE_200_GBPS, 80, 206250},  {IBV_RATE_300_GBPS, 120, 309375}, {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},    {IBV_RATE_400_GBPS, 160, 425000}, {IBV_RATE_600_GBPS, 240, 637500},
};
}  // namespace

int ibv_rate_to_mult(enum ibv_rate rate) {
    for (const Rate& r : kRates)
        if (r.rate == rate) return r.mult;
    return -1;
}

enum ibv_rate mult_to_ibv_rate(int mult) {
    for (const Rate& r : kRates)
        if (r.mult == mult && r.rate <= IBV_RATE_120_GBPS) return r.rate;
    return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(enum ibv_rate rate) {
    for (const Rate& r : kRates)
        if (r.rate == rate) return r.mbps;
    return -1;
}

enum ibv_rate mbps_to_ibv_rate(int mbps) {
    for (const Rate& r : kRates)
        if (r.mbps == mbps) return r.rate;
    return IBV_RATE_MAX;
}

// ---------------------------------------------------------------- sysfs (no kernel device behind us)

const char* ibv_get_sysfs_path(void) {
    const char* env = std::getenv("SYSFS_PATH");
    return env && *env ? env : "/sys";
}

int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
    char path[512];
    std::snprintf(path, sizeof path, "%s/%s", dir, file);
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || size == 0) {
        if (fd >= 0) ::close(fd);
        return -1;
    }
    const ssize_t len = ::read(fd, buf, size);
    ::close(fd);
    if (len <= 0) return -1;
    size_t l = size_t(len);
    if (l == size) --l;
    if (l > 0 && buf[l - 1] == '\n') --l;
    buf[l] = '\0';
    return int(l);
}

// ---------------------------------------------------------------- kernel ABI copies (librdmacm)

void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src) {
    std::memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof dst->grh.dgid);
    dst->grh.flow_label = src->grh.flow_label;
    dst->grh.sgid_index = src->grh.sgid_index;
    dst->grh.hop_limit = src->grh.hop_limit;
    dst->grh.traffic_class = src->grh.traffic_class;
    dst->dlid = src->dlid;
    dst->sl = src->sl;
    dst->src_path_bits = src->src_path_bits;
    dst->static_rate = src->static_rate;
    dst->is_global = src->is_global;
    dst->port_num = src->port_num;
}

void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src) {
    dst->cur_qp_state = ibv_qp_state(src->cur_qp_state);
    dst->path_mtu = ibv_mtu(src->path_mtu);
    dst->path_mig_state = ibv_mig_state(src->path_mig_state);
    dst->qkey = src->qkey;
    dst->rq_psn = src->rq_psn;
    dst->sq_psn = src->sq_psn;
    dst->dest_qp_num = src->dest_qp_num;
    dst->qp_access_flags = src->qp_access_flags;
    dst->cap.max_send_wr = src->max_send_wr;
    dst->cap.max_recv_wr = src->max_recv_wr;
    dst->cap.max_send_sge = src->max_send_sge;
    dst->cap.max_recv_sge = src->max_recv_sge;
    dst->cap.max_inline_data = src->max_inline_data;
    ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
    ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
    dst->pkey_index = src->pkey_index;
    dst->alt_pkey_index = src->alt_pkey_index;
    dst->en_sqd_async_notify = src->en_sqd_async_notify;
    dst->sq_draining = src->sq_draining;
    dst->max_rd_atomic = src->max_rd_atomic;
    dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
    dst->min_rnr_timer = src->min_rnr_timer;
    dst->port_num = src->port_num;
    dst->timeout = src->timeout;
    dst->retry_cnt = src->retry_cnt;
    dst->rnr_retry = src->rnr_retry;
    dst->alt_port_num = src->alt_port_num;
    dst->alt_timeout = src->alt_timeout;
}

void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src) {
    std::memcpy(dst->dgid.raw, src->dgid, sizeof dst->dgid);
    std::memcpy(dst->sgid.raw, src->sgid, sizeof dst->sgid);
    dst->dlid = src->dlid;
    dst->slid = src->slid;
    dst->raw_traffic = int(src->raw_traffic);
    dst->flow_label = src->flow_label;
    dst->hop_limit = src->hop_limit;
    dst->traffic_class = src->traffic_class;
    dst->reversible = int(src->reversible);
    dst->numb_path = src->numb_path;
    dst->pkey = src->pkey;
    dst->sl = src->sl;
    dst->mtu_selector = src->mtu_selector;
    dst->mtu = uint8_t(src->mtu);
    dst->rate_selector = src->rate_selector;
    dst->rate = src->rate;
    dst->packet_life_time_selector = src->packet_life_time_selector;
    dst->packet_life_time = src->packet_life_time;
    dst->preference = src->preference;
}

void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src) {
    std::memcpy(dst->dgid, src->dgid.raw, sizeof src->dgid);
    std::memcpy(dst->sgid, src->sgid.raw, sizeof src->sgid);
    dst->dlid = src->dlid;
    dst->slid = src->slid;
    dst->raw_traffic = uint32_t(src->raw_traffic);
    dst->flow_label = src->flow_label;
    dst->hop_limit = src->hop_limit;
    dst->traffic_class = src->traffic_class;
    dst->reversible = uint32_t(src->reversible);
    dst->numb_path = src->numb_path;
    dst->pkey = src->pkey;
    dst->sl = src->sl;
    dst->mtu_selector = src->mtu_selector;
    dst->mtu = src->mtu;
    dst->rate_selector = src->rate_selector;
    dst->rate = src->rate;
    dst->packet_life_time_selector = src->packet_life_time_selector;
    dst->packet_life_time = src->packet_life_time;
    dst->preference = src->preference;
}

// ---------------------------------------------------------------- fork

namespace {
bool g_fork_init = false;
}

// Local: the HCA and its memory are private to this process, a child gets copies. A daemon sees
// registered memory through shared mappings (docs/verbs.md), which a child shares.
int ibv_fork_init(void) {
    g_fork_init = true;
    return 0;
}
enum ibv_fork_status ibv_is_fork_initialized(void) { return g_fork_init ? IBV_FORK_ENABLED : IBV_FORK_DISABLED; }
int ibv_dontfork_range(void*, size_t) { return 0; }
int ibv_dofork_range(void*, size_t) { return 0; }

// ---------------------------------------------------------------- not supported by hcaemu

ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) {
    errno = EOPNOTSUPP;
    return nullptr;
}

int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return errno = EOPNOTSUPP; }  // no multicast
int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return errno = EOPNOTSUPP; }

ibv_dm* ibv_import_dm(ibv_context*, uint32_t) {
    errno = EOPNOTSUPP;
    return nullptr;
}
void ibv_unimport_dm(ibv_dm*) {}

int ibv_query_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }  // ECE: not supported
int ibv_set_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }


// 0: no promise that data lands in order before the completion.
int ibv_query_qp_data_in_order(ibv_qp*, enum ibv_wr_opcode, uint32_t) { return 0; }

// The kernel's neighbour table is not ours: a DPDK port resolves in its own ARP/ND.
int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t[6], uint16_t*) { return errno = EOPNOTSUPP; }

// Providers register here; hcaemu loads none.
void ibv_register_driver(const char*, void*) {}

}  // extern "C"
