// The structs of the verbs-like API, field for field as libibverbs names them (ibv_sge,
// ibv_send_wr, ibv_recv_wr, ibv_wc, ibv_qp_cap, ibv_qp_init_attr, ibv_qp_attr, ibv_ah_attr,
// ibv_srq_attr, ibv_device_attr, ibv_port_attr), with hcaemu's typed enums.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "hca_model/verbs_types.hpp"
#include "packet/headers.hpp"

namespace hcaemu {

using Gid = pkt::Ip6;  // a RoCE v2 GID is an IPv6 address; IPv4 ones are ::ffff:a.b.c.d

struct Sge {
    uint64_t addr = 0;    // virtual address inside the MR named by lkey
    uint32_t length = 0;
    uint32_t lkey = 0;
};

class Ah;

struct SendWr {
    uint64_t wr_id = 0;
    const SendWr* next = nullptr;  // a chain, as ibv_post_send takes it
    const Sge* sg_list = nullptr;
    int num_sge = 0;
    WrOpcode opcode = WrOpcode::send;
    uint32_t send_flags = 0;       // send_flag::
    uint32_t imm_data = 0;         // host order; for SEND_WITH_IMM, RDMA_WRITE_WITH_IMM
    uint32_t invalidate_rkey = 0;  // for SEND_WITH_INV
    struct {
        uint64_t remote_addr = 0;
        uint32_t rkey = 0;
    } rdma;
    struct {
        uint64_t remote_addr = 0;
        uint64_t compare_add = 0;
        uint64_t swap = 0;
        uint32_t rkey = 0;
    } atomic;
    struct {
        const Ah* ah = nullptr;
        uint32_t remote_qpn = 0;
        uint32_t remote_qkey = 0;
    } ud;
};

struct RecvWr {
    uint64_t wr_id = 0;
    const RecvWr* next = nullptr;
    const Sge* sg_list = nullptr;
    int num_sge = 0;
};

struct Wc {
    uint64_t wr_id = 0;
    WcStatus status = WcStatus::success;
    WcOpcode opcode = WcOpcode::send;
    uint32_t vendor_err = 0;
    uint32_t byte_len = 0;
    uint32_t imm_data = 0;          // or the invalidated rkey when wc_flags has with_inv
    uint32_t qp_num = 0;
    uint32_t src_qp = 0;
    uint32_t wc_flags = 0;          // wc_flag::
    uint16_t pkey_index = 0;
    uint16_t slid = 0;
    uint8_t sl = 0;
    uint8_t dlid_path_bits = 0;
    Gid sgid{};                     // UD: the sender's GID (verbs puts it in the GRH of the buffer)
};

struct QpCap {
    uint32_t max_send_wr = 0;
    uint32_t max_recv_wr = 0;
    uint32_t max_send_sge = 1;
    uint32_t max_recv_sge = 1;
    uint32_t max_inline_data = 0;
};

class Cq;
class Srq;

struct QpInitAttr {
    const Cq* send_cq = nullptr;
    const Cq* recv_cq = nullptr;
    const Srq* srq = nullptr;
    QpCap cap;
    QpType qp_type = QpType::rc;
    bool sq_sig_all = false;
};

struct AhAttr {                 // RoCE: the GRH fields are the route
    Gid dgid{};
    uint32_t flow_label = 0;
    uint8_t sgid_index = 0;
    uint8_t hop_limit = 64;
    uint8_t traffic_class = 0;
    uint8_t sl = 0;
    uint8_t port_num = 1;
    bool is_global = true;      // always true on RoCE
};

struct QpAttr {
    QpState qp_state = QpState::reset;
    QpState cur_qp_state = QpState::reset;
    Mtu path_mtu = Mtu::mtu1024;
    uint32_t qkey = 0;
    uint32_t rq_psn = 0;
    uint32_t sq_psn = 0;
    uint32_t dest_qp_num = 0;
    uint32_t qp_access_flags = 0;  // access:: remote_write | remote_read | remote_atomic
    QpCap cap;
    AhAttr ah_attr;
    AhAttr alt_ah_attr;             // alternate path: kept and reported; RoCE has no path migration
    uint16_t pkey_index = 0;
    uint16_t alt_pkey_index = 0;
    uint8_t path_mig_state = 0;     // IBV_MIG_MIGRATED = 0, REARM = 1, ARMED = 2
    uint8_t alt_port_num = 0;
    uint8_t alt_timeout = 0;
    bool en_sqd_async_notify = false;
    bool sq_draining = false;
    uint8_t max_rd_atomic = 0;      // outstanding READ/atomic as requester
    uint8_t max_dest_rd_atomic = 0; // responder resources
    uint8_t min_rnr_timer = 0;      // RNR timer code (IBTA 9.7, RNR NAK timer), 0..31
    uint8_t port_num = 1;
    uint8_t timeout = 0;            // 4.096 us * 2^timeout; 0 = infinite
    uint8_t retry_cnt = 0;          // 0..7
    uint8_t rnr_retry = 0;          // 0..7, 7 = infinite
};

struct SrqAttr {
    uint32_t max_wr = 0;
    uint32_t max_sge = 1;
    uint32_t srq_limit = 0;
};
namespace srq_attr {  // enum ibv_srq_attr_mask
constexpr uint32_t max_wr = 1u << 0, limit = 1u << 1;
}

namespace device_cap {  // enum ibv_device_cap_flags (the bits hcaemu sets)
constexpr uint32_t bad_pkey_cntr = 1u << 1, bad_qkey_cntr = 1u << 2, ud_av_port_enforce = 1u << 6,
                   sys_image_guid = 1u << 11, rc_rnr_nak_gen = 1u << 12;
}

struct DeviceAttr {             // ibv_device_attr, with rxe-like defaults
    std::string fw_ver = "0.1.0";
    uint64_t node_guid = 0;
    uint64_t sys_image_guid = 0;
    uint64_t max_mr_size = ~0ull;
    uint64_t page_size_cap = 0xFFFFF000;
    uint32_t vendor_id = 0xFFFFFF;
    uint32_t vendor_part_id = 0;
    uint32_t hw_ver = 0;
    uint32_t max_qp = 0x10000;
    uint32_t max_qp_wr = 0x4000;
    // What hcaemu does (enum ibv_device_cap_flags): P_Key and Q_Key violation counters, AH port
    // checked, sys_image_guid, RNR NAKs generated. Not: SRQ resize, memory windows, XRC, N-notify.
    uint32_t device_cap_flags = device_cap::bad_pkey_cntr | device_cap::bad_qkey_cntr |
                                device_cap::ud_av_port_enforce | device_cap::sys_image_guid |
                                device_cap::rc_rnr_nak_gen;
    uint32_t max_sge = 32;
    uint32_t max_sge_rd = 32;
    uint32_t max_cq = 0x4000;
    uint32_t max_cqe = (1u << 15) - 1;
    uint32_t max_mr = 0x10000;
    uint32_t max_pd = 0x7FFC;
    uint32_t max_qp_rd_atom = 128;
    uint32_t max_res_rd_atom = 0x3F000;
    uint32_t max_qp_init_rd_atom = 128;
    AtomicCap atomic_cap = AtomicCap::hca;
    uint32_t max_ah = 0x8000;
    uint32_t max_srq = 0x4000;
    uint32_t max_srq_wr = 0x4000;
    uint32_t max_srq_sge = 27;
    uint32_t max_inline_data = 256;  // hcaemu's own limit (ibv_qp_cap.max_inline_data)
    uint16_t max_pkeys = 1;
    uint8_t local_ca_ack_delay = 15;
    uint8_t phys_port_cnt = 1;
};

constexpr size_t kGidTableLen = 16;  // GID table slots per port (the used ones first)

struct PortAttr {               // ibv_port_attr
    PortState state = PortState::active;
    Mtu max_mtu = Mtu::mtu4096;
    Mtu active_mtu = Mtu::mtu1024;
    uint32_t link_mtu = 1500;    // the Ethernet MTU active_mtu comes from
    int gid_tbl_len = 0;
    uint32_t port_cap_flags = 0;
    uint32_t max_msg_sz = 0x80000000;  // 2 GiB, IBTA maximum message size
    uint16_t pkey_tbl_len = 1;
    uint8_t link_layer = 2;      // IBV_LINK_LAYER_ETHERNET
};

enum class GidType : uint8_t { roce_v2 = 2 };  // IBV_GID_TYPE_ROCE_V2 (hcaemu is RoCE v2 only)

struct GidEntry {
    Gid gid{};
    GidType type = GidType::roce_v2;
};

// What the port is configured with; the GID table and active_mtu derive from it.
struct PortConfig {
    pkt::Mac mac{0x52, 0x54, 0x00, 0x18, 0x00, 0x01};
    std::array<uint32_t, 4> ipv4{};   // host order; 0 = unused
    std::array<Gid, 4> ipv6{};        // all-zero = unused
    uint32_t link_mtu = 1500;
    uint32_t max_msg_sz = 0x80000000;  // PortAttr::max_msg_sz: 2 GiB, the IBTA maximum message size
    // The port's P_Key table (ibv_query_pkey): a QP's pkey_index selects the P_Key it sends and
    // matches received packets against (IBTA 10.9.3). Entry 0 is the default partition, full member.
    std::vector<uint16_t> pkeys = {0xFFFF};
};

// RoCE v2 active MTU from the Ethernet MTU, as rxe computes it: subtract rxe's maximum header
// length (80 bytes: Ethernet is not counted by the MTU; IPv6 40 + UDP 8 + BTH 12 + extension
// headers + ICRC), then round down to an IB MTU (IBTA 9.7: path MTU), at least 256, at most 4096.
constexpr Mtu active_mtu_for_link(uint32_t link_mtu) {
    const uint32_t m = link_mtu > 80 ? link_mtu - 80 : 0;
    return m >= 4096 ? Mtu::mtu4096 : m >= 2048 ? Mtu::mtu2048 : m >= 1024 ? Mtu::mtu1024
         : m >= 512 ? Mtu::mtu512 : Mtu::mtu256;
}

}  // namespace hcaemu
