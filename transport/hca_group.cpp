#include "transport/hca_group.hpp"

#include <stdexcept>

namespace hcaemu::transport {

HcaGroup::HcaGroup(Device& dev, std::span<port::Port* const> ports, const port::Clock& clock, const HcaConfig& cfg,
                   port::Steering* steer)
    : dev_(dev), steer_(steer), owner_(size_t(dev.query_device().max_qp) + 2, kUnplaced) {
    if (ports.empty() || ports.size() > kMaxLcores) throw std::invalid_argument("HcaGroup: 1 to 8 lcores");
    if (steer && steer->lcores() != ports.size()) throw std::invalid_argument("HcaGroup: steering of another size");
    for (uint32_t k = 0; k < ports.size(); ++k)
        hcas_.push_back(std::make_unique<Hca>(dev, *ports[k], clock, cfg, this, k));
    dev_.set_listener(this);
}

HcaGroup::~HcaGroup() {
    dev_.set_listener(nullptr);
    hcas_.clear();
}

uint32_t HcaGroup::owner(uint32_t qpn) const {
    if (qpn < owner_.size() && owner_[qpn] != kUnplaced) return owner_[qpn];
    const QpObj* q = dev_.qp_by_qpn(qpn);
    return q ? default_owner(*q) : 0;
}

// With a QP that shares its CQs or SRQ and is placed, else on the lcore with the fewest QPs (the
// lowest of those); the GSI on lcore 0.
uint32_t HcaGroup::default_owner(const QpObj& qp) const {
    if (qp.qpn < 2) return 0;
    for (const void* shared : {static_cast<const void*>(qp.send_cq), static_cast<const void*>(qp.recv_cq)}) {
        const CqObj* c = static_cast<const CqObj*>(shared);
        if (!c) continue;
        for (const QpObj* o : c->qps)
            if (o != &qp && o->qpn < owner_.size() && owner_[o->qpn] != kUnplaced) return owner_[o->qpn];
    }
    if (qp.srq)
        for (const QpObj* o : qp.srq->qps)
            if (o != &qp && o->qpn < owner_.size() && owner_[o->qpn] != kUnplaced) return owner_[o->qpn];
    uint32_t best = 0;
    for (uint32_t k = 1; k < lcores(); ++k)
        if (placed_[k] < placed_[best]) best = k;
    return best;
}

bool HcaGroup::companions_on(const QpObj& qp, uint32_t k) const {
    auto elsewhere = [&](const std::vector<QpObj*>& qps) {
        for (const QpObj* o : qps)
            if (o != &qp && o->qpn < owner_.size() && owner_[o->qpn] != kUnplaced && owner_[o->qpn] != k) return true;
        return false;
    };
    if (qp.send_cq && elsewhere(qp.send_cq->qps)) return false;
    if (qp.recv_cq && elsewhere(qp.recv_cq->qps)) return false;
    return !(qp.srq && elsewhere(qp.srq->qps));
}

void HcaGroup::set(uint32_t qpn, uint8_t k) {
    if (owner_[qpn] != kUnplaced) --placed_[owner_[qpn]];
    if (k != kUnplaced) ++placed_[k];
    owner_[qpn] = k;
    if (steer_) steer_->set_owner(qpn, k == kUnplaced ? 0 : k);
}

bool HcaGroup::place(uint32_t qpn, uint32_t k) {
    const QpObj* q = dev_.qp_by_qpn(qpn);
    if (!q || qpn < 2 || qpn >= owner_.size() || k >= lcores() || q->state() != QpState::reset) return false;
    if (!companions_on(*q, k)) return false;
    set(qpn, uint8_t(k));
    return true;
}

void HcaGroup::set_neighbor(const Gid& ip, const pkt::Mac& mac) {
    for (auto& h : hcas_) h->set_neighbor(ip, mac);
}

void HcaGroup::qp_modified(QpObj& qp, QpState from) {
    if (from == QpState::reset && qp.qpn < owner_.size() && owner_[qp.qpn] == kUnplaced)
        set(qp.qpn, uint8_t(default_owner(qp)));  // placed for good as it leaves RESET
    of(qp).qp_modified(qp, from);
}

void HcaGroup::qp_error(QpObj& qp) { of(qp).qp_error(qp); }

void HcaGroup::qp_destroyed(QpObj& qp) {
    of(qp).qp_destroyed(qp);
    if (qp.qpn < owner_.size()) set(qp.qpn, kUnplaced);
}

void HcaGroup::sq_doorbell(QpObj& qp) { of(qp).sq_doorbell(qp); }
void HcaGroup::rq_doorbell(QpObj& qp) { of(qp).rq_doorbell(qp); }

}  // namespace hcaemu::transport
