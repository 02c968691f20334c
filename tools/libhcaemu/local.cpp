// libhcaemu in-process: an api::Context over tools::Attached (EAL, ethdev, NetPort, Device and the
// engine in this process), each api class forwarding to its hca_model handle; and open_device,
// which picks this or the daemon client by the device spec.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "tools/attach/attach.hpp"
#include "tools/libhcaemu/api.hpp"
#include "tools/libhcaemu/inspect.hpp"
#include "tools/libhcaemu/remap.hpp"

namespace hcaemu::api {

namespace {

using AttachedPtr = std::shared_ptr<tools::Attached>;

// Every object keeps the attachment alive (declared before its handle, so destroyed after it):
// an object that outlives its Context still finds its Device.
class LocalPd final : public Pd {
public:
    LocalPd(AttachedPtr a, hcaemu::Pd p) : at_(std::move(a)), h_(std::move(p)) {}
    Status destroy() override { return h_ ? h_.destroy() : Status::bad_handle; }
    uint32_t handle() const override { return h_.handle(); }
    hcaemu::Pd& inner() { return h_; }
    const tools::Attached* owner() const { return at_.get(); }

private:
    AttachedPtr at_;
    hcaemu::Pd h_;
};

class LocalMr final : public Mr {
public:
    LocalMr(AttachedPtr a, hcaemu::Mr m) : at_(std::move(a)), h_(std::move(m)) {}
    Status destroy() override { return h_ ? h_.destroy() : Status::bad_handle; }
    uint32_t handle() const override { return h_.handle(); }
    uint32_t lkey() const override { return h_.lkey(); }
    uint32_t rkey() const override { return h_.rkey(); }
    uint64_t addr() const override { return h_.addr(); }
    uint64_t length() const override { return h_.length(); }
    Status rereg(uint32_t flags, Pd* pd, void* addr, size_t length, uint32_t access) override {
        auto* p = (flags & rereg::change_pd) ? dynamic_cast<LocalPd*>(pd) : nullptr;
        if ((flags & rereg::change_pd) && (!p || p->owner() != at_.get())) return Status::bad_handle;
        std::string err;
        const uint32_t acc = (flags & rereg::change_access) ? access : h_.access();
        if (flags & rereg::change_translation)
            if (Status s = remap::check_mapped(addr, length, access::writes_memory(acc), err); s != Status::ok) return s;
        return h_ ? h_.rereg(flags, p ? &p->inner() : nullptr, addr, length, access) : Status::bad_handle;
    }

private:
    AttachedPtr at_;
    hcaemu::Mr h_;
};

class LocalCompChannel final : public CompChannel {
public:
    explicit LocalCompChannel(AttachedPtr a) : at_(std::move(a)) {}
    bool get_cq_event(CqEvent& ev) override { return ch_.get_cq_event(ev); }
    // In-process the events come from the engine, so waiting means turning it.
    bool wait_cq_event(CqEvent& ev, int timeout_ms) override {
        const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
        for (;;) {
            if (ch_.get_cq_event(ev)) return true;
            if (std::chrono::steady_clock::now() >= end) return false;
            if (!at_->poll()) std::this_thread::yield();
        }
    }
    int fd() const override { return ch_.fd(); }
    hcaemu::CompChannel& inner() { return ch_; }
    const tools::Attached* owner() const { return at_.get(); }

private:
    AttachedPtr at_;
    hcaemu::CompChannel ch_;
};

class LocalCq final : public Cq {
public:
    LocalCq(AttachedPtr a, hcaemu::Cq c) : at_(std::move(a)), h_(std::move(c)) {}
    Status destroy() override { return h_ ? h_.destroy() : Status::bad_handle; }
    uint32_t handle() const override { return h_.handle(); }
    int poll(std::span<Wc> wc) override { return h_.poll(wc); }
    Status req_notify(bool solicited_only) override { return h_.req_notify(solicited_only); }
    Status resize(int cqe) override {
        // A command reaches the device after the doorbells rung before it: the engine first runs
        // what was posted (bounded), so that "fewer entries than CQEs queued" counts them.
        for (int i = 0; i < 256 && at_->hca().has_work(); ++i) (void)at_->poll();
        return h_.resize(cqe);
    }
    void ack_events(uint32_t n) override { h_.ack_events(n); }
    int cqe() const override { return h_.cqe(); }
    const hcaemu::Cq& native() const override { return h_; }
    const tools::Attached* owner() const { return at_.get(); }

private:
    AttachedPtr at_;
    hcaemu::Cq h_;
};

class LocalSrq final : public Srq {
public:
    LocalSrq(AttachedPtr a, hcaemu::Srq s) : at_(std::move(a)), h_(std::move(s)) {}
    Status destroy() override { return h_ ? h_.destroy() : Status::bad_handle; }
    uint32_t handle() const override { return h_.handle(); }
    Status post_recv(const RecvWr* wr, const RecvWr** bad_wr) override { return h_.post_recv(wr, bad_wr); }
    Status modify(const SrqAttr& attr, uint32_t mask) override { return h_.modify(attr, mask); }
    Status query(SrqAttr& attr) override { return h_.query(attr); }
    const hcaemu::Srq& native() const override { return h_; }
    const tools::Attached* owner() const { return at_.get(); }

private:
    AttachedPtr at_;
    hcaemu::Srq h_;
};

class LocalAh final : public Ah {
public:
    LocalAh(AttachedPtr a, hcaemu::Ah h) : at_(std::move(a)), h_(std::move(h)) {}
    Status destroy() override { return h_ ? h_.destroy() : Status::bad_handle; }
    uint32_t handle() const override { return h_.handle(); }
    const hcaemu::Ah* native() const override { return &h_; }

private:
    AttachedPtr at_;
    hcaemu::Ah h_;
};

class LocalQp final : public Qp {
public:
    LocalQp(AttachedPtr a, hcaemu::Qp q, const QpInitAttr& init) : at_(std::move(a)), h_(std::move(q)), init_(init) {}
    Status destroy() override { return h_ ? h_.destroy() : Status::bad_handle; }
    uint32_t handle() const override { return h_.handle(); }
    uint32_t qpn() const override { return h_.qpn(); }
    QpState state() override { return h_.state(); }
    ModifyResult modify(const QpAttr& attr, uint32_t mask) override { return h_.modify(attr, mask); }
    Status query(QpAttr& attr, QpInitAttr* init) override {
        hcaemu::QpInitAttr ni;
        const Status s = h_.query(attr, init ? &ni : nullptr);
        if (s == Status::ok && init) {
            *init = init_;  // the api objects it was created with
            init->cap = ni.cap;
            init->qp_type = ni.qp_type;
            init->sq_sig_all = ni.sq_sig_all;
        }
        return s;
    }
    Status post_send(const SendWr* wr, const SendWr** bad_wr) override { return h_.post_send(wr, bad_wr); }
    Status post_recv(const RecvWr* wr, const RecvWr** bad_wr) override { return h_.post_recv(wr, bad_wr); }

private:
    AttachedPtr at_;
    hcaemu::Qp h_;
    QpInitAttr init_;
};


class LocalContext final : public Context {
public:
    explicit LocalContext(std::unique_ptr<tools::Attached> a) : at_(std::move(a)) {}
    ~LocalContext() override {
        for (auto& m : maps_) ::munmap(m.first, m.second);
    }

    std::string name() const override { return "hcaemu0"; }

    // An object of this context (not of another context, local or daemon), or nullptr.
    template <class L, class A>
    L* mine(A* o) const {
        auto* l = o ? dynamic_cast<L*>(o) : nullptr;
        return l && l->owner() == at_.get() ? l : nullptr;
    }
    const DeviceAttr& query_device() const override { return at_->dev().query_device(); }
    Status query_port(uint8_t port_num, PortAttr& out) override { return at_->dev().query_port(port_num, out); }
    Status query_gid(uint8_t port_num, int index, GidEntry& out) override {
        return at_->dev().query_gid(port_num, index, out);
    }
    const Gid& gid() const override { return at_->gid(); }
    int gid_index() const override { return at_->gid_index(); }

    // Anonymous mappings: page-aligned and zeroed by the kernel.
    Result<Buffer> alloc_buffer(size_t length) override {
        if (length == 0) return Result<Buffer>::error(Status::invalid_argument);
        const size_t page = size_t(::sysconf(_SC_PAGESIZE));
        const size_t len = (length + page - 1) / page * page;
        void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return Result<Buffer>::error(Status::no_resources);
        maps_.emplace_back(p, len);
        return {Status::ok, Buffer{static_cast<uint8_t*>(p), length}};
    }
    void free_buffer(Buffer& b) override {
        for (size_t i = 0; i < maps_.size(); ++i)
            if (maps_[i].first == b.data) {
                ::munmap(maps_[i].first, maps_[i].second);
                maps_.erase(maps_.begin() + long(i));
                break;
            }
        b = Buffer{};
    }

    Result<std::unique_ptr<Pd>> alloc_pd() override {
        auto r = at_->dev().alloc_pd();
        if (!r.ok()) return Result<std::unique_ptr<Pd>>::error(r.status);
        return {Status::ok, std::make_unique<LocalPd>(at_, std::move(r.value))};
    }
    Result<std::unique_ptr<Mr>> reg_mr(Pd& pd, void* addr, size_t length, uint32_t access) override {
        auto* p = mine<LocalPd>(&pd);
        if (!p) return Result<std::unique_ptr<Mr>>::error(Status::bad_handle);
        auto r = at_->dev().reg_mr(p->inner(), addr, length, access);
        if (!r.ok()) return Result<std::unique_ptr<Mr>>::error(r.status);
        // The arguments first (EINVAL), then the pages (EFAULT), as the kernel checks them.
        std::string err;
        if (Status s = remap::check_mapped(addr, length, access::writes_memory(access), err); s != Status::ok) {
            (void)r.value.destroy();
            return Result<std::unique_ptr<Mr>>::error(s);
        }
        return {Status::ok, std::make_unique<LocalMr>(at_, std::move(r.value))};
    }
    Result<std::unique_ptr<CompChannel>> create_comp_channel() override {
        return {Status::ok, std::make_unique<LocalCompChannel>(at_)};
    }
    Result<std::unique_ptr<Cq>> create_cq(int cqe, CompChannel* channel, uint64_t cq_context) override {
        hcaemu::CompChannel* ch = nullptr;
        if (channel) {
            auto* c = mine<LocalCompChannel>(channel);
            if (!c) return Result<std::unique_ptr<Cq>>::error(Status::bad_handle);
            ch = &c->inner();
        }
        auto r = at_->dev().create_cq(cqe, ch, cq_context);
        if (!r.ok()) return Result<std::unique_ptr<Cq>>::error(r.status);
        return {Status::ok, std::make_unique<LocalCq>(at_, std::move(r.value))};
    }
    Result<std::unique_ptr<Qp>> create_qp(Pd& pd, QpInitAttr& init) override {
        using R = Result<std::unique_ptr<Qp>>;
        auto* p = mine<LocalPd>(&pd);
        auto* scq = mine<LocalCq>(init.send_cq);
        auto* rcq = mine<LocalCq>(init.recv_cq);
        auto* srq = mine<LocalSrq>(init.srq);
        if (!p || (init.send_cq && !scq) || (init.recv_cq && !rcq) || (init.srq && !srq)) return R::error(Status::bad_handle);
        hcaemu::QpInitAttr ia;
        ia.send_cq = scq ? &scq->native() : nullptr;
        ia.recv_cq = rcq ? &rcq->native() : nullptr;
        ia.srq = srq ? &srq->native() : nullptr;
        ia.cap = init.cap;
        ia.qp_type = init.qp_type;
        ia.sq_sig_all = init.sq_sig_all;
        auto r = at_->dev().create_qp(p->inner(), ia);
        if (!r.ok()) return R::error(r.status);
        init.cap = ia.cap;
        return {Status::ok, std::make_unique<LocalQp>(at_, std::move(r.value), init)};
    }
    Result<std::unique_ptr<Srq>> create_srq(Pd& pd, SrqAttr& attr) override {
        auto* p = mine<LocalPd>(&pd);
        if (!p) return Result<std::unique_ptr<Srq>>::error(Status::bad_handle);
        auto r = at_->dev().create_srq(p->inner(), attr);
        if (!r.ok()) return Result<std::unique_ptr<Srq>>::error(r.status);
        return {Status::ok, std::make_unique<LocalSrq>(at_, std::move(r.value))};
    }
    Result<std::unique_ptr<Ah>> create_ah(Pd& pd, const AhAttr& attr) override {
        auto* p = mine<LocalPd>(&pd);
        if (!p) return Result<std::unique_ptr<Ah>>::error(Status::bad_handle);
        auto r = at_->dev().create_ah(p->inner(), attr);
        if (!r.ok()) return Result<std::unique_ptr<Ah>>::error(r.status);
        return {Status::ok, std::make_unique<LocalAh>(at_, std::move(r.value))};
    }
    bool get_async_event(AsyncEvent& ev) override { return at_->dev().get_async_event(ev); }

    size_t poll() override { return at_->poll(); }
    bool busy() override { return at_->hca().has_work(); }
    bool resolve(const Gid& peer, uint64_t timeout_ms, std::string& err) override {
        return at_->resolve(peer, timeout_ms, err);
    }
    bool alive() const override { return true; }
    // The agent runs in this process, driven by poll() (Attached::poll turns it after the engine).
    Cm* cm() override { return &at_->cm(); }

    Status read_stats(Stats& out) override {
        collect_stats(*at_, out);
        out.daemon.clear();
        return Status::ok;
    }
    Status res_list(ResKind kind, std::vector<ResEntry>& out) override {
        if (kind >= ResKind::count) return Status::invalid_argument;
        out.clear();
        const uint32_t pid = uint32_t(::getpid());
        res_walk(at_->dev(), kind, [&](uint32_t, ResAttrs&& attrs) {
            out.push_back(ResEntry{0, pid, program_invocation_short_name, std::move(attrs)});
        });
        return Status::ok;
    }
    Status inject_add(const std::string& rule, uint32_t& id) override {
        std::string msg;
        id = at_->inject().add(rule, msg);
        return id ? Status::ok : Status::invalid_argument;
    }
    std::string conform_report() override { return at_->conform_report(); }
    void peer_finished() override { at_->peer_finished(); }
    Status profile_turns(bool on) override {
        at_->hca().profile_turns(on);
        return Status::ok;
    }
    Status read_turn_profile(TurnReport& out) override {
        const transport::TurnProfile* p = at_->hca().turn_profile();
        if (!p) return Status::invalid_argument;  // not turned on
        out = {p->turns(), p->frames, {}};
        for (uint8_t k = 0; k < transport::TurnProfile::count; ++k) {
            const auto& h = p->step[k];
            out.steps.push_back({transport::TurnProfile::kStepName[k], h.count, h.quantile(0.5), h.quantile(0.9), h.mean()});
        }
        return Status::ok;
    }
    Status inject_del(uint32_t id) override { return at_->inject().del(id) ? Status::ok : Status::bad_handle; }
    Status inject_list(std::vector<InjectEntry>& out) override {
        out.clear();
        for (auto& r : at_->inject().list()) out.push_back({r.id, r.text, r.matched, r.hits});
        return Status::ok;
    }

private:
    AttachedPtr at_;
    std::vector<std::pair<void*, size_t>> maps_;  // alloc_buffer's mappings
};

}  // namespace

std::unique_ptr<Context> open_local(const tools::AttachOptions& attach, std::string& err) {
    auto a = tools::Attached::open(attach, err);
    if (!a) return nullptr;
    return std::make_unique<LocalContext>(std::move(a));
}

std::unique_ptr<Context> open_device(const std::string& spec, const tools::AttachOptions& attach, std::string& err) {
    if (spec.rfind("unix:", 0) == 0) {
        const std::string path = spec.substr(5);
        if (path.empty()) {
            err = "device 'unix:' names no socket: use unix:PATH";
            return nullptr;
        }
        std::string e;
        auto c = open_daemon(path, e);
        if (!c) err = "cannot connect to " + spec + ": " + e;
        return c;
    }
    if (spec.empty() || spec == "local") return open_local(attach, err);
    err = "unknown device '" + spec + "': use unix:PATH (a running hcaemud) or local (an in-process HCA)";
    return nullptr;
}

}  // namespace hcaemu::api
