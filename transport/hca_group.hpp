// N engines over one device, one per data-path lcore (docs/design.md "N data-path lcores").
// Lcore k's Hca owns the QPs placed on k (their QpCtx, timers, run and ACK lists) and runs on k's
// thread with k's port: an RX/TX queue pair of the NIC, through a Steering view where the NIC
// cannot steer by DestQP itself. The group is the device's QpListener and hands each doorbell and
// state change to the owner's engine.
//
// Placement: a QP is placed once, while in RESET (place()), and never moves while it exists.
// Each CQ and SRQ is used by one lcore, so that its ring has one producer and no lock: a QP goes
// where the QPs sharing its CQs or its SRQ already are. A QP left unplaced is placed when it
// leaves RESET: with those companions, else on the lcore with the fewest QPs (so that two
// programs, each with one CQ for all its QPs as perftest has, get an lcore each). QP1 (the GSI,
// the CM agent) is lcore 0's.
//
// Threads: control operations (create, modify, destroy, place) run while no lcore polls (before
// the lcores start, after they stop, or between two turns of a single thread that polls them
// all). Data-path verbs on a QP (post_send, post_recv, poll_cq of its CQs) run on its owner's
// thread. The device's tables are only read meanwhile; counters and MR/AH pins are per lcore
// (hca_model/counters.hpp t_lcore); async events and completion channels lock (rare).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dpdk_port/steer.hpp"
#include "transport/hca.hpp"

namespace hcaemu::transport {

class HcaGroup final : public QpListener {
public:
    // `ports[k]`: lcore k's port (1 to kMaxLcores). `steer`, when the ports are its views: the
    // group keeps its owner table in step with placements.
    HcaGroup(Device& dev, std::span<port::Port* const> ports, const port::Clock& clock, const HcaConfig& cfg = {},
             port::Steering* steer = nullptr);
    ~HcaGroup() override;
    HcaGroup(const HcaGroup&) = delete;
    HcaGroup& operator=(const HcaGroup&) = delete;

    uint32_t lcores() const { return uint32_t(hcas_.size()); }
    Hca& hca(uint32_t k) { return *hcas_[k]; }
    Device& device() { return dev_; }

    // Places a QP in RESET on lcore k. False when there is no such QP, it is not in RESET, k is
    // out of range, or a QP sharing one of its CQs or its SRQ is on another lcore.
    bool place(uint32_t qpn, uint32_t k);
    // The QP's lcore: where it was placed, else where it would be placed now.
    uint32_t owner(uint32_t qpn) const;

    void set_neighbor(const Gid& ip, const pkt::Mac& mac);  // every engine's static table

    // QpListener: to the owner's engine.
    void qp_modified(QpObj& qp, QpState from) override;
    void qp_error(QpObj& qp) override;
    void qp_destroyed(QpObj& qp) override;
    void sq_doorbell(QpObj& qp) override;
    void rq_doorbell(QpObj& qp) override;

private:
    static constexpr uint8_t kUnplaced = 0xff;
    uint32_t default_owner(const QpObj& qp) const;
    bool companions_on(const QpObj& qp, uint32_t k) const;  // no QP sharing its CQs/SRQ elsewhere
    void set(uint32_t qpn, uint8_t k);
    Hca& of(const QpObj& qp) { return *hcas_[owner(qp.qpn)]; }

    Device& dev_;
    port::Steering* steer_;
    std::vector<uint8_t> owner_;  // by QPN: kUnplaced or the lcore
    std::array<uint32_t, kMaxLcores> placed_{};  // QPs placed per lcore
    std::vector<std::unique_ptr<Hca>> hcas_;
};

}  // namespace hcaemu::transport
