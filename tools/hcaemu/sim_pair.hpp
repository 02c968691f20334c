// Two HCAs joined by the in-memory wire, in virtual time: the bench on which `hcaemu sim` and the
// protocol tests run. Each side has a device, its engine loop, one PD, one registered buffer, one
// CQ and one QP connected to the other side's (RC or UC), or a UD QP with an AH for the peer.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dpdk_port/clock.hpp"
#include "dpdk_port/mem_wire.hpp"
#include "hca_model/device.hpp"
#include "transport/hca.hpp"

namespace hcaemu::tools {

struct SimConfig {
    port::WireConfig wire;
    QpType type = QpType::rc;
    Mtu mtu = Mtu::mtu1024;
    uint8_t timeout = 14;        // 4.096 us * 2^14 = 67 ms of virtual time
    uint8_t retry_cnt = 7;
    uint8_t rnr_retry = 7;
    uint8_t min_rnr_timer = 1;   // 0.01 ms
    uint8_t max_rd_atomic = 16;
    uint32_t sq_depth = 512;
    uint32_t rq_depth = 512;
    size_t mem_bytes = 4u << 20; // each side's registered buffer
    uint64_t mr_iova[2] = {0, 0};  // the address each side's MR is known by (ibv_reg_mr_iova); 0: the buffer's own
    uint32_t max_sge = 4;        // each QP's max_send_sge and max_recv_sge (the device's at least this)
    uint32_t max_inline = 64;    // each QP's max_inline_data
    uint32_t max_msg_sz = 0x80000000;  // the port's max_msg_sz
    uint32_t sq_psn[2] = {0x100, 0x200};
    std::vector<uint16_t> pkeys = {0xFFFF};  // each side's P_Key table
    uint16_t pkey_index = 0;                 // the QPs' entry in it
    // Each side's IPv6 address (GID index 2); when set, the QPs connect over IPv6 GIDs.
    Gid ipv6[2] = {};
    transport::HcaConfig hca;
};

// Moves `qp` from RESET through INIT, RTR and RTS to talk to `peer_qpn` at `peer_gid` (GID index 1
// on this side), with the attributes of `cfg`; its send PSN is `sq_psn`, the peer's `rq_psn`.
// False if a transition was refused.
// `sgid_index` < 0: 1 (the IPv4-mapped GID) for an IPv4 peer, 2 (the IPv6 one after it) for an IPv6 one.
bool connect_qp(Qp& qp, const SimConfig& cfg, uint32_t peer_qpn, const Gid& peer_gid, uint32_t sq_psn, uint32_t rq_psn,
                int sgid_index = -1);

class SimPair {
public:
    struct Side {
        std::unique_ptr<Device> dev;
        std::unique_ptr<transport::Hca> hca;
        Pd pd;
        std::vector<uint8_t> mem;
        Mr mr;
        Cq cq;
        Qp qp;
        Ah ah;        // UD: the peer
        Gid gid{};    // this side's IPv4-mapped GID (index 1)
    };

    explicit SimPair(const SimConfig& cfg);
    // One side on any port and clock (198.18.0.1 for index 0, .2 for 1): device, engine loop, PD,
    // a registered buffer of cfg.mem_bytes, a CQ and a QP in RESET. The DPDK test uses it too.
    static void build_side(Side& s, port::Port& port, const port::Clock& clock, const SimConfig& cfg, int index,
                           const pkt::Mac& peer_mac);
    ~SimPair();

    // Polls both sides, jumping virtual time to the next delivery or timer when both are idle,
    // until done() holds (true) or `max_ns` of virtual time or `max_polls` turns pass (false).
    bool run_until(const std::function<bool()>& done, uint64_t max_ns = 60'000'000'000ull,
                   uint64_t max_polls = 50'000'000);
    // Moves a side's QP through INIT, RTR and RTS again from RESET (after an error, say).
    void reconnect();

    port::VirtualClock clock;
    port::MemWire wire;
    Side side[2];
    SimConfig cfg;

private:
    void connect(int i);
};

}  // namespace hcaemu::tools
