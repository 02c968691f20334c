#include "hca_model/device.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace hcaemu {

// ---------------------------------------------------------------- completion channel

CompChannel::CompChannel() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

CompChannel::~CompChannel() {
    for (CqObj* c : cqs_) c->channel = nullptr;
    if (fd_ >= 0) close(fd_);
}

void CompChannel::push(const CqEvent& ev) {
    const std::lock_guard<std::mutex> g(mu_);  // lcores' CQs may share a channel
    q_.push_back(ev);
    if (fd_ >= 0) {
        const uint64_t one = 1;
        (void)!write(fd_, &one, sizeof one);
    }
}

bool CompChannel::get_cq_event(CqEvent& ev) {
    const std::lock_guard<std::mutex> g(mu_);
    if (q_.empty()) return false;
    ev = q_.front();
    q_.pop_front();
    if (fd_ >= 0 && q_.empty()) {
        uint64_t n;
        (void)!read(fd_, &n, sizeof n);  // readable again only when a new event comes
    }
    return true;
}

// ---------------------------------------------------------------- device

Device::Device(const DeviceAttr& attr, const PortConfig& port)
    : attr_(attr),
      port_cfg_(port),
      // Index 0 is never handed out, so a zeroed handle or key names nothing; QPN 1 (GSI) is
      // reserved too (QPN 0 is the SMI), as the IBTA reserves them.
      pds_(attr.max_pd, 1),
      mrs_(attr.max_mr, 1),
      cqs_(attr.max_cq, 1),
      qps_(attr.max_qp, 2),
      srqs_(attr.max_srq, 1),
      ahs_(attr.max_ah, 1),
      dma_(*this) {
    // Keys and handles carry a 24-bit index; QPNs are 24 bits (IBTA 9.2).
    attr_.max_qp = std::min(attr_.max_qp, 0xFFFFFFu - 2);
    for (uint32_t* m : {&attr_.max_pd, &attr_.max_mr, &attr_.max_cq, &attr_.max_srq, &attr_.max_ah})
        *m = std::min(*m, 0xFFFFFFu - 1);
    port_.link_mtu = port.link_mtu;
    port_.max_msg_sz = port.max_msg_sz;
    port_.active_mtu = active_mtu_for_link(port.link_mtu);
    // No GUID given: the port MAC's modified EUI-64 (RFC 4291 2.5.1), as rxe derives its node GUID.
    if (attr_.node_guid == 0) {
        const auto& m = port.mac;
        attr_.node_guid = uint64_t(m[0] ^ 0x02) << 56 | uint64_t(m[1]) << 48 | uint64_t(m[2]) << 40 |
                          uint64_t(0xfffe) << 24 | uint64_t(m[3]) << 16 | uint64_t(m[4]) << 8 | m[5];
    }
    if (attr_.sys_image_guid == 0) attr_.sys_image_guid = attr_.node_guid;
    rebuild_gids();
    // At least one entry, at most what a 16-bit pkey_index reaches.
    pkeys_.assign(port.pkeys.begin(), port.pkeys.begin() + std::min<size_t>(port.pkeys.size(), 0xFFFF));
    if (pkeys_.empty()) pkeys_.push_back(0xFFFF);
    attr_.max_pkeys = port_.pkey_tbl_len = uint16_t(pkeys_.size());
}

Device::~Device() = default;

void Device::raise(EventType type, uint32_t element) {
    const std::lock_guard<std::mutex> g(ev_mu_);  // any lcore's error path, the control path
    events_.push_back({type, element});
}

Counters Device::counters_total() const {
    Counters t;
    for (const Counters& c : counters_) t += c;
    return t;
}

void Device::rebuild_gids() {
    gids_.clear();
    // GID 0: the link-local address from the MAC (modified EUI-64, RFC 4291 2.5.1), as Linux lists it.
    const auto& m = port_cfg_.mac;
    gids_.push_back({{0xfe, 0x80, 0, 0, 0, 0, 0, 0, uint8_t(m[0] ^ 0x02), m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]}});
    for (uint32_t a : port_cfg_.ipv4)  // IPv4-mapped GIDs ::ffff:a.b.c.d (IBTA Annex A17)
        if (a) gids_.push_back({pkt::ipv4_mapped_gid(a)});
    for (const Gid& g : port_cfg_.ipv6)
        if (g != Gid{}) gids_.push_back({g});
    // A fixed-size table with empty slots after the used ones, as hardware has (rxe: 1024 entries);
    // an empty slot reads as the zero GID (ibv_query_gid) or ENODATA (ibv_query_gid_ex).
    port_.gid_tbl_len = int(std::max(gids_.size(), kGidTableLen));
}

Status Device::query_port(uint8_t port_num, PortAttr& out) const {
    if (port_num != 1) return Status::invalid_argument;
    out = port_;
    return Status::ok;
}

Status Device::query_gid(uint8_t port_num, int index, GidEntry& out) const {
    if (port_num != 1 || index < 0 || size_t(index) >= gids_.size()) return Status::invalid_argument;
    out = gids_[size_t(index)];
    return Status::ok;
}

Status Device::query_pkey(uint8_t port_num, int index, uint16_t& out) const {
    if (port_num != 1 || index < 0 || size_t(index) >= pkeys_.size()) return Status::invalid_argument;
    out = pkeys_[size_t(index)];
    return Status::ok;
}

void Device::set_link_mtu(uint32_t mtu) {
    port_cfg_.link_mtu = port_.link_mtu = mtu;
    port_.active_mtu = active_mtu_for_link(mtu);
}

bool Device::get_async_event(AsyncEvent& ev) {
    const std::lock_guard<std::mutex> g(ev_mu_);
    if (events_.empty()) return false;
    ev = events_.front();
    events_.pop_front();
    return true;
}

// ---------------------------------------------------------------- PD

Result<Pd> Device::alloc_pd() {
    auto o = std::make_unique<PdObj>();
    PdObj* p = o.get();
    const int64_t i = pds_.insert(std::move(o));
    if (i < 0) return Result<Pd>::error(Status::no_resources);
    p->handle = make_handle(pds_, uint32_t(i));
    return {Status::ok, Pd(this, p->handle)};
}

Status Device::dealloc_pd(uint32_t h) {
    PdObj* p = pd(h);
    if (!p) return Status::bad_handle;
    if (p->users) return Status::busy;
    pds_.erase(h >> 8);
    return Status::ok;
}

Status Pd::destroy() {
    if (!dev_) return Status::bad_handle;
    const Status s = dev_->dealloc_pd(h_);
    if (s == Status::ok || s == Status::bad_handle) dev_ = nullptr;
    return s;
}

// ---------------------------------------------------------------- MR

namespace {

Status check_mr_args(const DeviceAttr& a, const void* addr, size_t length, uint32_t acc) {
    if (acc & ~access::supported) return Status::invalid_argument;
    // Remote write or atomic access needs local write (ibv_reg_mr(3) answers EINVAL).
    if ((acc & (access::remote_write | access::remote_atomic)) && !(acc & access::local_write))
        return Status::invalid_argument;
    if (length == 0 || length > a.max_mr_size) return Status::invalid_argument;
    if (!addr) return Status::invalid_argument;
    if (uint64_t(reinterpret_cast<uintptr_t>(addr)) > ~uint64_t(0) - length) return Status::invalid_argument;
    return Status::ok;
}

// The MR's iova range must not wrap (ibv_reg_mr_iova).
Status check_iova(uint64_t iova, size_t length) {
    return iova > ~uint64_t(0) - length ? Status::invalid_argument : Status::ok;
}

}  // namespace

Result<Mr> Device::reg_mr(const Pd& pdh, void* addr, size_t length, uint32_t acc) {
    return reg_mr(pdh, addr, length, reinterpret_cast<uintptr_t>(addr), acc);
}

Result<Mr> Device::reg_mr(const Pd& pdh, void* addr, size_t length, uint64_t iova, uint32_t acc) {
    PdObj* p = pdh.device() == this ? pd(pdh.handle()) : nullptr;
    if (!p) return Result<Mr>::error(Status::bad_handle);
    if (Status s = check_mr_args(attr_, addr, length, acc); s != Status::ok) return Result<Mr>::error(s);
    if (Status s = check_iova(iova, length); s != Status::ok) return Result<Mr>::error(s);
    auto o = std::make_unique<MrObj>();
    MrObj* m = o.get();
    const int64_t i = mrs_.insert(std::move(o));
    if (i < 0) return Result<Mr>::error(Status::no_resources);
    m->handle = make_handle(mrs_, uint32_t(i));
    m->pd = p;
    m->host = static_cast<uint8_t*>(addr);
    m->iova = iova;
    m->length = length;
    m->access = acc;
    m->lkey = m->rkey = m->handle;  // index << 8 | variant, as rxe and mlx5 build keys
    ++p->users;
    return {Status::ok, Mr(this, m->handle)};
}

Status Device::rereg_mr(uint32_t h, uint32_t flags, const Pd* pdh, void* addr, size_t length, uint32_t acc,
                        std::optional<uint64_t> iova) {
    MrObj* m = mr(h);
    if (!m) return Status::bad_handle;
    if (flags == 0 || (flags & ~(rereg::change_translation | rereg::change_pd | rereg::change_access)))
        return Status::invalid_argument;
    // Posted WQEs (their pins) do not block it: the DMA engine checks every access against the
    // region as it is then, so a WQE that names the old pages fails (rxe; rdma-core's test_mr).
    PdObj* np = m->pd;
    if (flags & rereg::change_pd) {
        np = pdh && pdh->device() == this ? pd(pdh->handle()) : nullptr;
        if (!np) return Status::bad_handle;
    }
    void* na = flags & rereg::change_translation ? addr : m->host;
    const size_t nl = flags & rereg::change_translation ? length : m->length;
    const uint32_t nacc = flags & rereg::change_access ? acc : m->access;
    if (Status s = check_mr_args(attr_, na, nl, nacc); s != Status::ok) return s;
    // A new translation names the region by its new address (ibv_rereg_mr); otherwise the iova
    // stays, also for an MR registered with its own iova.
    const uint64_t niova =
        flags & rereg::change_translation ? iova.value_or(uint64_t(reinterpret_cast<uintptr_t>(na))) : m->iova;
    if (Status s = check_iova(niova, nl); s != Status::ok) return s;
    // All checks passed: change everything at once. The keys stay (as rxe's and mlx5's rereg: a
    // peer's cached R_Key still names the region, now with its new rights, PD or pages).
    --m->pd->users;
    ++np->users;
    m->pd = np;
    m->host = static_cast<uint8_t*>(na);
    m->iova = niova;
    m->length = nl;
    m->access = nacc;
    return Status::ok;
}

Status Device::dereg_mr(uint32_t h) {
    MrObj* m = mr(h);
    if (!m) return Status::bad_handle;
    if (m->pins.sum()) return Status::busy;
    --m->pd->users;
    mrs_.erase(h >> 8);
    return Status::ok;
}

uint32_t Mr::lkey() const { const MrObj* m = dev_ ? dev_->mr(h_) : nullptr; return m ? m->lkey : 0; }
uint32_t Mr::rkey() const { const MrObj* m = dev_ ? dev_->mr(h_) : nullptr; return m ? m->rkey : 0; }
uint64_t Mr::addr() const { const MrObj* m = dev_ ? dev_->mr(h_) : nullptr; return m ? m->iova : 0; }
uint64_t Mr::length() const { const MrObj* m = dev_ ? dev_->mr(h_) : nullptr; return m ? m->length : 0; }
uint32_t Mr::access() const { const MrObj* m = dev_ ? dev_->mr(h_) : nullptr; return m ? m->access : 0; }

Status Mr::rereg(uint32_t flags, const Pd* pd, void* addr, size_t length, uint32_t acc, std::optional<uint64_t> iova) {
    return dev_ ? dev_->rereg_mr(h_, flags, pd, addr, length, acc, iova) : Status::bad_handle;
}

Status Mr::destroy() {
    if (!dev_) return Status::bad_handle;
    const Status s = dev_->dereg_mr(h_);
    if (s == Status::ok || s == Status::bad_handle) dev_ = nullptr;
    return s;
}

// ---------------------------------------------------------------- CQ

Result<Cq> Device::create_cq(int cqe, CompChannel* channel, uint64_t context) {
    if (cqe < 1 || uint32_t(cqe) > attr_.max_cqe) return Result<Cq>::error(Status::invalid_argument);
    auto o = std::make_unique<CqObj>();
    CqObj* c = o.get();
    const int64_t i = cqs_.insert(std::move(o));
    if (i < 0) return Result<Cq>::error(Status::no_resources);
    c->handle = make_handle(cqs_, uint32_t(i));
    c->ring.reset(uint32_t(cqe));
    c->channel = channel;
    c->context = context;
    if (channel) channel->cqs_.push_back(c);
    return {Status::ok, Cq(this, c->handle)};
}

bool Device::complete(CqObj* c, const Wc& wc, bool solicited) {
    if (c->overflowed) return false;
    if (c->ring.full()) {
        // CQ overflow: the CQ goes to error and so do the QPs that use it (IBTA ch. 11: a CQ
        // overrun is an affiliated asynchronous error).
        c->overflowed = true;
        counters().add(Counter::cq_overflow);
        raise(EventType::cq_err, c->handle);
        const auto qps = c->qps;
        for (QpObj* q : qps)
            if (q->state() != QpState::err) qp_to_error(q, EventType::qp_fatal);
        return false;
    }
    c->ring.at(c->ring.tail++) = wc;
    if (c->arm == NotifyArm::next ||
        (c->arm == NotifyArm::solicited && (solicited || wc.status != WcStatus::success))) {
        c->arm = NotifyArm::none;  // one event per request (ibv_req_notify_cq)
        if (c->channel) {
            c->channel->push({c->handle, c->context});
            ++c->events_delivered;
        }
    }
    return true;
}

int Cq::poll(std::span<Wc> out) {
    CqObj* c = dev_ ? dev_->cq(h_) : nullptr;
    if (!c) return -1;
    size_t n = 0;
    while (n < out.size() && !c->ring.empty()) out[n++] = c->ring.at(c->ring.head++);
    return int(n);
}

Status Cq::req_notify(bool solicited_only) {
    CqObj* c = dev_ ? dev_->cq(h_) : nullptr;
    if (!c) return Status::bad_handle;
    // "next" wins over "solicited" when both are requested before an event.
    if (!solicited_only) c->arm = NotifyArm::next;
    else if (c->arm == NotifyArm::none) c->arm = NotifyArm::solicited;
    return Status::ok;
}

void Cq::ack_events(uint32_t n) {
    if (CqObj* c = dev_ ? dev_->cq(h_) : nullptr) c->events_acked += n;
}

int Cq::cqe() const {
    const CqObj* c = dev_ ? dev_->cq(h_) : nullptr;
    return c ? int(c->ring.cap()) : 0;
}

Status Device::resize_cq(uint32_t h, int cqe) {
    CqObj* c = cq(h);
    if (!c) return Status::bad_handle;
    if (cqe < 1 || uint32_t(cqe) > attr_.max_cqe || uint32_t(cqe) < c->ring.count()) return Status::invalid_argument;
    Ring<Wc> n;
    n.reset(uint32_t(cqe));
    const uint32_t k = c->ring.count();
    for (uint32_t i = 0; i < k; ++i) n.at(i) = c->ring.at(c->ring.head + i);
    n.tail = k;
    c->ring = std::move(n);
    return Status::ok;
}

Status Cq::resize(int cqe) { return dev_ ? dev_->resize_cq(h_, cqe) : Status::bad_handle; }

Status Device::destroy_cq(uint32_t h) {
    CqObj* c = cq(h);
    if (!c) return Status::bad_handle;
    if (!c->qps.empty()) return Status::busy;
    if (c->events_acked < c->events_delivered) return Status::busy;  // ibv_destroy_cq would wait
    if (CompChannel* ch = c->channel) ch->cqs_.erase(std::remove(ch->cqs_.begin(), ch->cqs_.end(), c), ch->cqs_.end());
    cqs_.erase(h >> 8);
    return Status::ok;
}

Status Cq::destroy() {
    if (!dev_) return Status::bad_handle;
    const Status s = dev_->destroy_cq(h_);
    if (s == Status::ok || s == Status::bad_handle) dev_ = nullptr;
    return s;
}

// ---------------------------------------------------------------- SRQ

Result<Srq> Device::create_srq(const Pd& pdh, SrqAttr& a) {
    PdObj* p = pdh.device() == this ? pd(pdh.handle()) : nullptr;
    if (!p) return Result<Srq>::error(Status::bad_handle);
    if (a.max_wr < 1 || a.max_wr > attr_.max_srq_wr || a.max_sge < 1 || a.max_sge > attr_.max_srq_sge)
        return Result<Srq>::error(Status::invalid_argument);
    a.srq_limit = 0;  // ignored at creation (ibv_create_srq(3)); armed by modify_srq
    auto o = std::make_unique<SrqObj>();
    SrqObj* s = o.get();
    const int64_t i = srqs_.insert(std::move(o));
    if (i < 0) return Result<Srq>::error(Status::no_resources);
    s->handle = make_handle(srqs_, uint32_t(i));
    s->pd = p;
    s->attr = a;
    s->rq.reset(a.max_wr);
    s->sges.resize(size_t(s->rq.storage()) * a.max_sge);
    ++p->users;
    return {Status::ok, Srq(this, s->handle)};
}

Status Device::modify_srq(uint32_t h, const SrqAttr& a, uint32_t mask) {
    SrqObj* s = srq(h);
    if (!s) return Status::bad_handle;
    if (mask & ~(srq_attr::max_wr | srq_attr::limit)) return Status::invalid_argument;
    if (mask & srq_attr::max_wr) return Status::not_supported;  // SRQ resize: not supported (as rxe without IB_SRQ_RESIZE)
    if (mask & srq_attr::limit) {
        if (a.srq_limit > s->attr.max_wr) return Status::invalid_argument;
        s->attr.srq_limit = a.srq_limit;  // arms the limit event; 0 disarms
    }
    return Status::ok;
}

Status Srq::modify(const SrqAttr& a, uint32_t mask) { return dev_ ? dev_->modify_srq(h_, a, mask) : Status::bad_handle; }

Status Srq::query(SrqAttr& a) const {
    const SrqObj* s = dev_ ? dev_->srq(h_) : nullptr;
    if (!s) return Status::bad_handle;
    a = s->attr;
    return Status::ok;
}

Status Device::destroy_srq(uint32_t h) {
    SrqObj* s = srq(h);
    if (!s) return Status::bad_handle;
    if (s->users) return Status::busy;
    --s->pd->users;
    srqs_.erase(h >> 8);
    return Status::ok;
}

Status Srq::destroy() {
    if (!dev_) return Status::bad_handle;
    const Status s = dev_->destroy_srq(h_);
    if (s == Status::ok || s == Status::bad_handle) dev_ = nullptr;
    return s;
}

// ---------------------------------------------------------------- AH

Result<Ah> Device::create_ah(const Pd& pdh, const AhAttr& a) {
    PdObj* p = pdh.device() == this ? pd(pdh.handle()) : nullptr;
    if (!p) return Result<Ah>::error(Status::bad_handle);
    if (a.port_num != 1 || a.sgid_index >= gids_.size() || !a.is_global || a.flow_label > 0xFFFFF)
        return Result<Ah>::error(Status::invalid_argument);
    auto o = std::make_unique<AhObj>();
    AhObj* x = o.get();
    const int64_t i = ahs_.insert(std::move(o));
    if (i < 0) return Result<Ah>::error(Status::no_resources);
    x->handle = make_handle(ahs_, uint32_t(i));
    x->pd = p;
    x->attr = a;
    ++p->users;
    return {Status::ok, Ah(this, x->handle)};
}

Status Device::destroy_ah(uint32_t h) {
    AhObj* x = ah(h);
    if (!x) return Status::bad_handle;
    if (x->users.sum()) return Status::busy;
    --x->pd->users;
    ahs_.erase(h >> 8);
    return Status::ok;
}

Status Ah::destroy() {
    if (!dev_) return Status::bad_handle;
    const Status s = dev_->destroy_ah(h_);
    if (s == Status::ok || s == Status::bad_handle) dev_ = nullptr;
    return s;
}

}  // namespace hcaemu
