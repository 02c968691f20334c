// libibverbs.so.1 on libhcaemu: ibv_query_device(_ex), ibv_query_port, the GID table and P_Keys,
// from the api::Context's DeviceAttr, PortAttr and GidEntry (hca_model/verbs_structs.hpp).
#include <endian.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tools/verbs/verbs.hpp"

#undef ibv_query_port

namespace hcaemu::verbs {

namespace {

void fill_device_attr(const DeviceAttr& a, ibv_device_attr& o) {
    o = ibv_device_attr{};
    std::snprintf(o.fw_ver, sizeof o.fw_ver, "%s", a.fw_ver.c_str());
    o.node_guid = htobe64(a.node_guid);
    o.sys_image_guid = htobe64(a.sys_image_guid);
    o.max_mr_size = a.max_mr_size;
    o.page_size_cap = a.page_size_cap;
    o.vendor_id = a.vendor_id;
    o.vendor_part_id = a.vendor_part_id;
    o.hw_ver = a.hw_ver;
    o.max_qp = int(a.max_qp);
    o.max_qp_wr = int(a.max_qp_wr);
    o.device_cap_flags = a.device_cap_flags;
    o.max_sge = int(a.max_sge);
    o.max_sge_rd = int(a.max_sge_rd);
    o.max_cq = int(a.max_cq);
    o.max_cqe = int(a.max_cqe);
    o.max_mr = int(a.max_mr);
    o.max_pd = int(a.max_pd);
    o.max_qp_rd_atom = int(a.max_qp_rd_atom);
    o.max_res_rd_atom = int(a.max_res_rd_atom);
    o.max_qp_init_rd_atom = int(a.max_qp_init_rd_atom);
    o.atomic_cap = ibv_atomic_cap(a.atomic_cap);
    o.max_ah = int(a.max_ah);
    o.max_srq = int(a.max_srq);
    o.max_srq_wr = int(a.max_srq_wr);
    o.max_srq_sge = int(a.max_srq_sge);
    o.max_pkeys = a.max_pkeys;
    o.local_ca_ack_delay = a.local_ca_ack_delay;
    o.phys_port_cnt = a.phys_port_cnt;
    // No memory windows, multicast, EE contexts, raw QPs or FMRs: their maxima stay 0.
}

int query_port_into(ibv_context* c, uint8_t port, ibv_port_attr& o) {
    Node& n = node_of(c);
    PortAttr a;
    Status s;
    {
        const std::lock_guard g(n.mu);
        s = n.api->query_port(port, a);
    }
    if (s != Status::ok) return set_errno(s);
    o = ibv_port_attr{};
    o.state = ibv_port_state(a.state);
    o.max_mtu = ibv_mtu(a.max_mtu);
    o.active_mtu = ibv_mtu(a.active_mtu);
    o.gid_tbl_len = a.gid_tbl_len;
    o.port_cap_flags = a.port_cap_flags;
    o.max_msg_sz = a.max_msg_sz;
    o.pkey_tbl_len = a.pkey_tbl_len;
    o.max_vl_num = 1;                  // IBV_VL_0 only (RoCE)
    o.active_width = 1;                // IBV_WIDTH_1X: a software port, as rxe reports
    o.active_speed = 1;                // SDR
    o.phys_state = a.state == PortState::active ? 5 : 3;  // LinkUp / Disabled (IBTA 14.2.5.6)
    o.link_layer = a.link_layer;       // IBV_LINK_LAYER_ETHERNET
    return 0;
}

int ctx_query_port(ibv_context* c, uint8_t port, ibv_port_attr* attr, size_t attr_len) {
    ibv_port_attr a;
    if (const int e = query_port_into(c, port, a)) return e;
    std::memset(attr, 0, attr_len);
    std::memcpy(attr, &a, std::min(attr_len, sizeof a));
    return 0;
}

int ctx_query_device_ex(ibv_context* c, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                        size_t attr_size) {
    if (input && input->comp_mask) return EINVAL;
    if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
    ibv_device_attr_ex a{};
    Node& n = node_of(c);
    {
        const std::lock_guard g(n.mu);
        fill_device_attr(n.api->query_device(), a.orig_attr);
    }
    a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
    a.device_cap_flags_ex = a.orig_attr.device_cap_flags;  // the same bits (the kernel's uverbs does so)
    // No ODP, TSO, RSS, tag matching, CQ moderation, DM, timestamps: all their caps stay 0.
    std::memset(attr, 0, attr_size);
    std::memcpy(attr, &a, std::min(attr_size, sizeof a));
    return 0;
}

}  // namespace

void fill_query_ops(verbs_context& vc) {
    vc.query_port = ctx_query_port;
    vc.query_device_ex = ctx_query_device_ex;
}

}  // namespace hcaemu::verbs

using namespace hcaemu;
using namespace hcaemu::verbs;

extern "C" {

int ibv_query_device(ibv_context* context, ibv_device_attr* device_attr) {
    Node& n = node_of(context);
    const std::lock_guard g(n.mu);
    fill_device_attr(n.api->query_device(), *device_attr);
    return 0;
}

// The compat entry (programs built against verbs.h call vctx->query_port through the inline).
int ibv_query_port(ibv_context* context, uint8_t port_num, struct _compat_ibv_port_attr* port_attr) {
    ibv_port_attr a;
    if (const int e = query_port_into(context, port_num, a)) {
        errno = e;
        return e;
    }
    // The compat struct is ibv_port_attr without its last fields (flags, port_cap_flags2).
    std::memcpy(port_attr, &a, offsetof(ibv_port_attr, flags));
    return 0;
}

int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index, ibv_gid_entry* entry,
                      uint32_t flags, size_t entry_size) {
    if (flags || entry_size < sizeof(ibv_gid_entry) || port_num > 255) return EINVAL;
    Node& n = node_of(context);
    PortAttr pa;
    GidEntry e;
    Status s;
    {
        const std::lock_guard g(n.mu);
        s = n.api->query_port(uint8_t(port_num), pa);
        if (s != Status::ok) return EINVAL;
        if (gid_index >= uint32_t(pa.gid_tbl_len)) return EINVAL;
        s = n.api->query_gid(uint8_t(port_num), int(gid_index), e);
    }
    if (s != Status::ok || e.gid == Gid{}) return ENODATA;  // an empty slot
    std::memset(entry, 0, entry_size);
    std::memcpy(entry->gid.raw, e.gid.data(), 16);
    entry->gid_index = gid_index;
    entry->port_num = port_num;
    entry->gid_type = IBV_GID_TYPE_ROCE_V2;
    entry->ndev_ifindex = 0;  // no kernel netdev behind a DPDK port
    return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries, uint32_t flags,
                             size_t entry_size) {
    if (flags || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
    ibv_device_attr da;
    ibv_query_device(context, &da);
    size_t out = 0;
    for (uint32_t port = 1; port <= da.phys_port_cnt; ++port) {
        ibv_port_attr pa;
        if (query_port_into(context, uint8_t(port), pa)) return -errno;
        for (int i = 0; i < pa.gid_tbl_len; ++i) {
            ibv_gid_entry e;
            const int r = _ibv_query_gid_ex(context, port, uint32_t(i), &e, 0, sizeof e);
            if (r == ENODATA) continue;
            if (r) return -r;
            if (out == max_entries) return -EINVAL;  // as libibverbs: the array is too small
            std::memcpy(reinterpret_cast<char*>(entries) + out * entry_size, &e, sizeof e);
            ++out;
        }
    }
    return ssize_t(out);
}

int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
    if (index < 0) {
        errno = EINVAL;
        return -1;
    }
    ibv_gid_entry e;
    const int r = _ibv_query_gid_ex(context, port_num, uint32_t(index), &e, 0, sizeof e);
    if (r == ENODATA) {  // libibverbs: an empty slot reads as the zero GID
        std::memset(gid, 0, sizeof *gid);
        return 0;
    }
    if (r) {
        errno = r;
        return -1;
    }
    *gid = e.gid;
    return 0;
}

int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
    ibv_port_attr pa;
    if (query_port_into(context, port_num, pa)) return -1;
    if (index < 0 || index >= pa.pkey_tbl_len) {
        errno = EINVAL;
        return -1;
    }
    *pkey = htobe16(0xFFFF);  // the default P_Key, full membership (IBTA 10.9.1.2); RoCE has one
    return 0;
}

int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
    for (int i = 0;; ++i) {
        __be16 k;
        if (ibv_query_pkey(context, port_num, i, &k)) break;
        if (k == pkey) return i;
    }
    errno = ENOENT;
    return -1;
}

}  // extern "C"
