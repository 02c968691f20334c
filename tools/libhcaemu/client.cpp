// libhcaemu's daemon client: api.hpp over the control protocol (proto.hpp) on a SOCK_SEQPACKET Unix
// socket, and the shared-memory rings (shm.hpp, ring.hpp) for the data path.
//
// Each verbs call sends one request (seq++) and waits for the reply with that seq, with poll(2)
// and a deadline of kCallTimeoutMs. Events (seq 0) that arrive meanwhile are queued: CQ events to
// the CompChannel of their CQ, async events for get_async_event, shutdown -> alive() false.
// Replies with another seq and malformed messages are dropped and counted (read_stats lists the
// counts in Stats::daemon as client_*).
// A daemon that closed the connection, or that did not answer within the deadline, makes the call
// fail with Status::bad_handle (the device is gone, so no handle names anything any more), and so
// does every later call; alive() is false from then on. Posting and polling never touch the
// socket.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>
#include <unordered_map>

#include "dpdk_port/prefault.hpp"
#include "tools/attach/attach.hpp"
#include "tools/libhcaemu/api.hpp"
#include "tools/libhcaemu/cm.hpp"
#include "tools/libhcaemu/proto.hpp"
#include "tools/libhcaemu/proto_attr.hpp"
#include "tools/libhcaemu/remap.hpp"
#include "tools/libhcaemu/ring.hpp"
#include "tools/libhcaemu/shm.hpp"
#include "tools/libhcaemu/sysretry.hpp"

namespace hcaemu::api {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kCallTimeoutMs = 10000;
constexpr int kMaxFds = 4;  // fds accepted beside one message; more are a malformed message

struct ChanState {
    std::deque<CqEvent> q;
};

// The socket and what arrives on it. Shared by the Context and every object it created, so that an
// object outliving the Context finds the connection closed rather than freed.
class Conn {
public:
    ~Conn() {
        close_fd();
        if (cm_efd >= 0) ::close(cm_efd);
    }

    bool connect_to(const std::string& path, std::string& err);
    // One request and its reply. `out` receives exactly `out_n` body bytes on success; `send_fd` goes
    // with the request; `recv_fd` (if not null) receives the reply's fd (-1 if none).
    Status call(ctl::Op op, const void* body, size_t n, void* out, size_t out_n, int send_fd = -1,
                int* recv_fd = nullptr, uint32_t* detail = nullptr, size_t* got_n = nullptr);
    // Reads what is there without blocking (timeout 0) or up to timeout_ms; returns events queued.
    size_t pump(int timeout_ms);
    bool dead() const { return dead_; }
    bool alive() const { return !dead_ && !shutdown_; }
    void close_fd() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        dead_ = true;
    }
    int fd() const { return fd_; }

    std::unordered_map<uint32_t, std::weak_ptr<ChanState>> chan_by_cq;
    std::unordered_map<uint32_t, uint32_t> events_by_cq;  // completion events delivered, by CQ
    std::deque<AsyncEvent> async;
    std::deque<api::CmEvent> cm_events;  // the CM's events (Ev::cm_event), for DaemonCm
    int cm_efd = -1;                     // readable while cm_events is not empty (once the CM is used)
    uint64_t replies_dropped = 0, events_dropped = 0, fds_closed = 0;

private:
    struct Msg {
        size_t len = 0;
        int fds[kMaxFds];
        int nfds = 0;
    };
    // recvmsg of one message into buf_ (non-blocking); false when nothing is there or on EOF.
    bool recv_one(Msg& m);
    void close_fds(Msg& m, int keep = -1) {
        for (int i = 0; i < m.nfds; ++i)
            if (m.fds[i] != keep) { ::close(m.fds[i]); ++fds_closed; }
        m.nfds = 0;
    }
    // An event or a stray message: queue it or count it. True if an event was queued.
    bool dispatch(Msg& m);
    bool send_msg(const void* data, size_t n, int fd, Clock::time_point deadline);

    int fd_ = -1;
    bool dead_ = true;
    bool shutdown_ = false;
    uint32_t seq_ = 0;
    alignas(8) uint8_t buf_[ctl::kMaxMsg + 64];  // +64: a longer message shows as MSG_TRUNC
    uint8_t req_[ctl::kMaxMsg];
};

int ms_left(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left <= 0 ? 0 : int(std::min<long long>(left, 1 << 30));
}

bool Conn::connect_to(const std::string& path, std::string& err) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof(sa.sun_path)) {
        err = "socket path empty or longer than " + std::to_string(sizeof(sa.sun_path) - 1) + " bytes: " + path;
        return false;
    }
    std::memcpy(sa.sun_path, path.data(), path.size());
    fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
        err = std::string("socket: ") + std::strerror(errno);
        return false;
    }
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
        err = "connect " + path + ": " + std::strerror(errno);
        close_fd();
        return false;
    }
    dead_ = false;
    return true;
}

bool Conn::send_msg(const void* data, size_t n, int fd, Clock::time_point deadline) {
    iovec iov{const_cast<void*>(data), n};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))] = {};
    if (fd >= 0) {
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof(cbuf);
        cmsghdr* c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    for (;;) {
        const ssize_t r = ::sendmsg(fd_, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r == ssize_t(n)) return true;
        if (r < 0 && interrupted(errno)) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            pollfd p{fd_, POLLOUT, 0};
            const int pr = ::poll(&p, 1, ms_left(deadline));
            if (pr < 0 && interrupted(errno)) continue;  // a signal (the tools' stop): the deadline still holds
            if (pr <= 0) return false;                 // silent daemon: deadline
            continue;
        }
        return false;
    }
}

bool Conn::recv_one(Msg& m) {
    iovec iov{buf_, sizeof(buf_)};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof(cbuf);
    ssize_t r;
    do r = ::recvmsg(fd_, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    while (r < 0 && interrupted(errno));
    if (r < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) close_fd();
        return false;
    }
    m.nfds = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; ++i) {
            int f;
            std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (m.nfds < kMaxFds) m.fds[m.nfds++] = f;
            else { ::close(f); ++fds_closed; }
        }
    }
    if (r == 0 && m.nfds == 0) {  // EOF: the daemon closed the connection or died
        close_fd();
        return false;
    }
    m.len = size_t(r);
    if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) m.len = 0;  // malformed: dropped by the caller
    return true;
}

bool Conn::dispatch(Msg& m) {
    ctl::Hdr h{};
    if (m.len >= sizeof(h)) std::memcpy(&h, buf_, sizeof(h));
    const bool wellformed = m.len >= sizeof(h) && h.magic == ctl::kMagic && h.version == ctl::kVersion && h.len == m.len;
    if (!wellformed || h.seq != 0 || !(h.op & ctl::kEventBit) || (h.op & ctl::kReplyBit)) {
        ++replies_dropped;
        close_fds(m);
        return false;
    }
    close_fds(m);  // no event carries an fd
    const uint8_t* body = buf_ + sizeof(h);
    const size_t n = m.len - sizeof(h);
    switch (ctl::Ev(h.op)) {
    case ctl::Ev::cq_event: {
        ctl::CqEventMsg e;
        if (n != sizeof(e)) break;
        std::memcpy(&e, body, sizeof(e));
        auto it = chan_by_cq.find(e.cq);
        if (it == chan_by_cq.end()) break;
        auto ch = it->second.lock();
        if (!ch) break;
        ch->q.push_back({e.cq, e.cq_context});
        ++events_by_cq[e.cq];
        return true;
    }
    case ctl::Ev::async_event: {
        ctl::AsyncEventMsg e;
        if (n != sizeof(e)) break;
        std::memcpy(&e, body, sizeof(e));
        async.push_back({EventType(e.type), e.element});
        return true;
    }
    case ctl::Ev::cm_event: {
        ctl::CmEventMsg e;
        if (n != sizeof(e)) break;
        std::memcpy(&e, body, sizeof(e));
        cm_events.push_back(e.ev);
        const uint64_t one = 1;
        if (cm_efd >= 0) (void)!::write(cm_efd, &one, sizeof one);
        return true;
    }
    case ctl::Ev::shutdown:
        if (n != sizeof(ctl::ShutdownMsg)) break;
        shutdown_ = true;
        return true;
    }
    ++events_dropped;
    return false;
}

size_t Conn::pump(int timeout_ms) {
    size_t got = 0;
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!dead_) {
        Msg m;
        if (recv_one(m)) {
            if (dispatch(m)) ++got;
            continue;
        }
        if (dead_ || got) break;
        const int left = ms_left(deadline);
        if (left == 0) break;
        pollfd p{fd_, POLLIN, 0};
        const int pr = ::poll(&p, 1, left);
        if (pr < 0 && interrupted(errno)) continue;
        if (pr <= 0) break;
    }
    return got;
}

// The body size of each reply on success, by Op (0: ReplyHdr only).
constexpr size_t reply_size(ctl::Op op) {
    switch (op) {
    case ctl::Op::hello: return sizeof(ctl::HelloRep);
    case ctl::Op::query_device: return sizeof(ctl::DeviceAttrW);
    case ctl::Op::query_port: return sizeof(PortAttr);
    case ctl::Op::query_gid: return sizeof(GidEntry);
    case ctl::Op::alloc_pd: return sizeof(ctl::HandleRep);
    case ctl::Op::reg_mr:
    case ctl::Op::rereg_mr: return sizeof(ctl::RegMrRep);
    case ctl::Op::create_cq:
    case ctl::Op::resize_cq: return sizeof(ctl::CreateCqRep);
    case ctl::Op::create_qp: return sizeof(ctl::CreateQpRep);
    case ctl::Op::query_qp: return sizeof(ctl::QueryQpRep);
    case ctl::Op::create_srq: return sizeof(ctl::CreateSrqRep);
    case ctl::Op::query_srq: return sizeof(SrqAttr);
    case ctl::Op::create_ah: return sizeof(ctl::HandleRep);
    case ctl::Op::read_counters: return sizeof(ctl::CountersRep);
    case ctl::Op::res_list: return sizeof(ctl::ResListRep);
    case ctl::Op::resolve: return sizeof(ctl::ResolveRep);
    case ctl::Op::cm: return sizeof(ctl::CmCallRep);
    default: return 0;
    }
}

Status from_error(ctl::Error e) {
    switch (e) {
    case ctl::Error::limit: return Status::no_resources;
    case ctl::Error::shutting_down: return Status::bad_handle;
    default: return Status::invalid_argument;
    }
}

Status Conn::call(ctl::Op op, const void* body, size_t n, void* out, size_t out_n, int send_fd, int* recv_fd,
                  uint32_t* detail, size_t* got_n) {
    if (recv_fd) *recv_fd = -1;
    if (dead_) return Status::bad_handle;
    const auto deadline = Clock::now() + std::chrono::milliseconds(kCallTimeoutMs);
    ctl::Hdr h;
    h.op = uint16_t(op);
    h.len = uint32_t(sizeof(h) + n);
    h.seq = ++seq_;
    if (h.seq == 0) h.seq = ++seq_;  // 0 is the events' seq
    std::memcpy(req_, &h, sizeof(h));
    if (n) std::memcpy(req_ + sizeof(h), body, n);
    if (!send_msg(req_, sizeof(h) + n, send_fd, deadline)) {
        close_fd();
        return Status::bad_handle;
    }
    while (!dead_) {
        Msg m;
        if (!recv_one(m)) {
            if (dead_) break;
            pollfd p{fd_, POLLIN, 0};
            const int left = ms_left(deadline);
            const int pr = left == 0 ? 0 : ::poll(&p, 1, left);
            if (pr < 0 && interrupted(errno)) continue;  // a signal: the reply is still awaited, in the deadline
            if (pr <= 0) {
                close_fd();  // silent for kCallTimeoutMs: taken as gone (a late reply could not be matched safely)
                break;
            }
            continue;
        }
        ctl::ReplyHdr rh{};
        if (m.len >= sizeof(rh)) std::memcpy(&rh, buf_, sizeof(rh));
        const bool reply = m.len >= sizeof(rh) && rh.h.magic == ctl::kMagic && rh.h.version == ctl::kVersion &&
                           rh.h.len == m.len && rh.h.seq == h.seq && rh.h.op == (uint16_t(op) | ctl::kReplyBit);
        if (!reply) {
            dispatch(m);  // an event, or a stray/malformed message (counted)
            continue;
        }
        const size_t body_n = m.len - sizeof(rh);
        if (detail) *detail = rh.detail;
        Status st = Status::ok;
        if (rh.status >= kStatusCount) st = Status::invalid_argument;
        else if (rh.status != 0) st = Status(rh.status);
        else if (rh.error != 0) st = from_error(rh.error < uint8_t(ctl::Error::count) ? ctl::Error(rh.error) : ctl::Error::bad_field);
        if (st != Status::ok) {
            close_fds(m);
            return st;
        }
        // Paged replies (counters, res_list) may be cut after their last entry.
        const bool paged = op == ctl::Op::read_counters || op == ctl::Op::res_list || op == ctl::Op::inject;
        if (body_n > out_n || (!paged && (body_n != out_n || body_n != reply_size(op))) || (paged && body_n < 8)) {
            ++replies_dropped;
            close_fds(m);
            return Status::invalid_argument;
        }
        if (out_n) {
            std::memset(out, 0, out_n);
            std::memcpy(out, buf_ + sizeof(rh), body_n);
        }
        if (got_n) *got_n = body_n;
        if (recv_fd) {
            *recv_fd = m.nfds > 0 ? m.fds[0] : -1;
            close_fds(m, *recv_fd);
        } else {
            close_fds(m);
        }
        return Status::ok;
    }
    return Status::bad_handle;
}

template <class Req, class Rep>
Status call2(Conn& c, ctl::Op op, const Req& req, Rep& rep, int send_fd = -1, int* recv_fd = nullptr) {
    return c.call(op, &req, sizeof(req), &rep, sizeof(rep), send_fd, recv_fd);
}
template <class Req>
Status call0(Conn& c, ctl::Op op, const Req& req) { return c.call(op, &req, sizeof(req), nullptr, 0); }

// A mapping that unmaps itself.
struct Mapping {
    void* p = nullptr;
    size_t n = 0;
    Mapping() = default;
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping() { reset(); }
    void reset() {
        if (p) ::munmap(p, n);
        p = nullptr;
        n = 0;
    }
    // Maps `bytes` of `fd` shared (after checking the file is that long), every page at once
    // (prefault.hpp: the daemon may be writing the ring already); closes fd either way.
    bool map(int fd, uint64_t bytes) {
        struct stat st{};
        bool ok = fd >= 0 && bytes > 0 && bytes < (uint64_t(1) << 40) && ::fstat(fd, &st) == 0 &&
                  uint64_t(st.st_size) >= bytes;
        if (ok) {
            void* q = ::mmap(nullptr, size_t(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            ok = q != MAP_FAILED;
            if (ok) {
                port::prefault(q, size_t(bytes));
                reset();
                p = q;
                n = size_t(bytes);
            }
        }
        if (fd >= 0) ::close(fd);
        return ok;
    }
    uint8_t* at(uint64_t off) const { return static_cast<uint8_t*>(p) + off; }
};

using ConnPtr = std::shared_ptr<Conn>;

class PdImpl final : public Pd {
public:
    PdImpl(ConnPtr c, uint32_t h) : c_(std::move(c)), h_(h) {}
    ~PdImpl() override { (void)destroy(); }
    Status destroy() override {
        if (!h_) return Status::bad_handle;
        const Status s = call0(*c_, ctl::Op::dealloc_pd, ctl::HandleReq{h_, 0});
        if (s == Status::ok || c_->dead()) h_ = 0;
        return s;
    }
    uint32_t handle() const override { return h_; }

private:
    ConnPtr c_;
    uint32_t h_;
};

// Makes [addr, addr + len) reachable by the daemon (ClientContext::share_range); own_fd: the
// caller closes sh.fd after sending it.
using ShareFn = std::function<Status(void* addr, size_t len, bool writable, remap::Share& sh, bool& own_fd)>;

class MrImpl final : public Mr {
public:
    MrImpl(ConnPtr c, const ctl::RegMrRep& r, uint64_t addr, uint64_t len, uint32_t access, const remap::Share& sh,
           ShareFn share)
        : c_(std::move(c)), h_(r.handle), lkey_(r.lkey), rkey_(r.rkey), addr_(addr), len_(len), access_(access),
          share_(sh), share_fn_(std::move(share)) {}
    ~MrImpl() override { (void)destroy(); }
    Status destroy() override {
        if (!h_) return Status::bad_handle;
        const Status s = call0(*c_, ctl::Op::dereg_mr, ctl::HandleReq{h_, 0});
        if (s == Status::ok || c_->dead()) {
            h_ = 0;
            remap::unshare(share_);  // the daemon no longer maps the pages
            share_ = {};
        }
        return s;
    }
    uint32_t handle() const override { return h_; }
    uint32_t lkey() const override { return lkey_; }
    uint32_t rkey() const override { return rkey_; }
    uint64_t addr() const override { return addr_; }
    uint64_t length() const override { return len_; }
    // A new translation is shared first; the old pages are unshared once the daemon let go of them.
    Status rereg(uint32_t flags, Pd* pd, void* addr, size_t length, uint32_t access) override {
        if (!h_ || c_->dead()) return Status::bad_handle;
        constexpr uint32_t kAll = rereg::change_translation | rereg::change_pd | rereg::change_access;
        if (flags == 0 || (flags & ~kAll)) return Status::invalid_argument;
        if ((flags & rereg::change_pd) && !pd) return Status::bad_handle;
        const bool move = flags & rereg::change_translation;
        const uint32_t acc = (flags & rereg::change_access) ? access : access_;
        if (acc & ~access::supported) return Status::invalid_argument;
        ctl::ReregMrReq req;
        req.handle = h_;
        req.flags = flags;
        req.pd = (flags & rereg::change_pd) ? pd->handle() : 0;
        req.access = acc;
        remap::Share sh;
        bool own_fd = false;
        if (move) {
            if (!addr || length == 0) return Status::invalid_argument;
            const bool writable = access::writes_memory(acc);
            if (Status s = share_fn_(addr, length, writable, sh, own_fd); s != Status::ok) return s;
            req.offset = sh.offset;
            req.length = length;
            req.iova = reinterpret_cast<uintptr_t>(addr);
        }
        ctl::RegMrRep rep;
        const Status s = call2(*c_, ctl::Op::rereg_mr, req, rep, move ? sh.fd : -1);
        if (own_fd) ::close(sh.fd);
        sh.fd = -1;
        if (s != Status::ok) {
            if (move) remap::unshare(sh);
            return s;
        }
        if (move) {
            remap::unshare(share_);
            share_ = sh;
            addr_ = req.iova;
            len_ = length;
        }
        access_ = acc;
        lkey_ = rep.lkey;
        rkey_ = rep.rkey;
        return Status::ok;
    }

private:
    ConnPtr c_;
    uint32_t h_, lkey_, rkey_;
    uint64_t addr_, len_;
    uint32_t access_;
    remap::Share share_;  // what unshare() undoes (remapped false: memory from alloc_buffer)
    ShareFn share_fn_;
};

class ChanImpl final : public CompChannel {
public:
    explicit ChanImpl(ConnPtr c) : c_(std::move(c)), st_(std::make_shared<ChanState>()) {}
    bool get_cq_event(CqEvent& ev) override {
        if (st_->q.empty()) c_->pump(0);
        return pop(ev);
    }
    bool wait_cq_event(CqEvent& ev, int timeout_ms) override {
        const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
        for (;;) {
            if (pop(ev)) return true;
            if (c_->dead()) return false;
            const int left = ms_left(deadline);
            c_->pump(left);
            if (st_->q.empty() && left == 0) return false;
        }
    }
    // The socket: events for every channel of the Context arrive there; after it turns readable,
    // call get_cq_event until it returns false.
    int fd() const override { return c_->fd(); }
    const std::shared_ptr<ChanState>& state() const { return st_; }

private:
    bool pop(CqEvent& ev) {
        if (st_->q.empty()) return false;
        ev = st_->q.front();
        st_->q.pop_front();
        return true;
    }
    ConnPtr c_;
    std::shared_ptr<ChanState> st_;
};

class CqImpl final : public Cq {
public:
    CqImpl(ConnPtr c, uint32_t h, int cqe) : c_(std::move(c)), h_(h), cqe_(cqe), native_(nullptr, h) {}
    ~CqImpl() override { (void)destroy(); }
    // Maps the ring of a create or resize reply. After a resize the daemon writes nothing more into
    // the old ring: poll() drains it up to its prod (oldest ring first), then unmaps it.
    bool attach(int fd, uint64_t bytes, int cqe) {
        auto m = std::make_unique<Mapping>();
        ring::View v;
        if (!m->map(fd, bytes) || !ring::attach(v, m->p, m->n, shm::RingKind::cq, uint32_t(std::max(cqe, 1)), sizeof(shm::Cqe)))
            return false;
        if (ring_.hdr) old_.push_back({std::move(map_), ring_});
        map_ = std::move(m);
        ring_ = v;
        cqe_ = cqe;
        return true;
    }
    Status destroy() override {
        if (!h_) return Status::bad_handle;
        // As ibv_destroy_cq (and hca_model): not while completion events are unacknowledged.
        if (auto it = c_->events_by_cq.find(h_); !c_->dead() && it != c_->events_by_cq.end() && it->second > acked_)
            return Status::busy;
        const Status s = call0(*c_, ctl::Op::destroy_cq, ctl::DestroyCqReq{h_, acked_});
        if (s == Status::ok || c_->dead()) {
            c_->chan_by_cq.erase(h_);
            c_->events_by_cq.erase(h_);
            h_ = 0;
            ring_ = {};
            map_.reset();
            old_.clear();
        }
        return s;
    }
    uint32_t handle() const override { return h_; }
    int poll(std::span<Wc> wc) override {
        int n = 0;
        while (!old_.empty()) {
            ring::View& v = old_.front().v;
            n += ring::poll_cq(v, wc.subspan(size_t(n)));
            if (v.hdr->cons.load(std::memory_order_relaxed) != v.hdr->prod.load(std::memory_order_acquire)) return n;
            old_.erase(old_.begin());  // drained: unmapped
        }
        return ring_.hdr ? n + ring::poll_cq(ring_, wc.subspan(size_t(n))) : n;
    }
    Status req_notify(bool solicited_only) override {
        if (!h_) return Status::bad_handle;
        return call0(*c_, ctl::Op::req_notify_cq, ctl::NotifyReq{h_, uint8_t(solicited_only), {}});
    }
    Status resize(int cqe) override {
        if (!h_) return Status::bad_handle;
        uint64_t unpolled = 0;  // in rings the daemon no longer writes (it counts its own)
        for (const Old& o : old_)
            unpolled += o.v.hdr->prod.load(std::memory_order_acquire) - o.v.hdr->cons.load(std::memory_order_relaxed);
        if (cqe < 0 || uint64_t(cqe) < unpolled) return Status::invalid_argument;
        ctl::CreateCqRep rep;
        int fd = -1;
        const Status s = call2(*c_, ctl::Op::resize_cq, ctl::ResizeCqReq{h_, cqe}, rep, -1, &fd);
        if (s != Status::ok) return s;
        if (!attach(fd, rep.ring_bytes, rep.cqe)) return Status::invalid_argument;
        return Status::ok;
    }
    void ack_events(uint32_t n) override { acked_ += n; }  // told to the daemon at destroy (as libibverbs)
    // A QP of this CQ entered RESET: its CQEs not yet polled go (the daemon dropped its own).
    void purge(uint32_t qpn) {
        for (Old& o : old_) ring::purge_cq(o.v, qpn);
        if (ring_.hdr) ring::purge_cq(ring_, qpn);
    }
    int cqe() const override { return cqe_; }
    const hcaemu::Cq& native() const override { return native_; }

private:
    ConnPtr c_;
    uint32_t h_;
    int cqe_;
    uint32_t acked_ = 0;
    hcaemu::Cq native_;
    struct Old {
        std::unique_ptr<Mapping> m;
        ring::View v;
    };
    std::unique_ptr<Mapping> map_;
    ring::View ring_;
    std::vector<Old> old_;
};

class SrqImpl final : public Srq {
public:
    SrqImpl(ConnPtr c, uint32_t h, const SrqAttr& a) : c_(std::move(c)), h_(h), attr_(a), native_(nullptr, h) {}
    ~SrqImpl() override { (void)destroy(); }
    bool attach(int fd, uint64_t bytes) {
        return map_.map(fd, bytes) &&
               ring::attach(ring_, map_.p, map_.n, shm::RingKind::srq, attr_.max_wr, shm::recv_entry_size(attr_.max_sge));
    }
    Status destroy() override {
        if (!h_) return Status::bad_handle;
        const Status s = call0(*c_, ctl::Op::destroy_srq, ctl::HandleReq{h_, 0});
        if (s == Status::ok || c_->dead()) {
            h_ = 0;
            ring_ = {};
            map_.reset();
        }
        return s;
    }
    uint32_t handle() const override { return h_; }
    Status post_recv(const RecvWr* wr, const RecvWr** bad_wr) override {
        if (bad_wr) *bad_wr = wr;
        if (!h_ || !ring_.hdr) return Status::bad_handle;
        if (ring_.error()) return Status::bad_qp_state;
        return ring::post_recv(ring_, attr_.max_sge, wr, bad_wr);
    }
    Status modify(const SrqAttr& attr, uint32_t mask) override {
        if (!h_) return Status::bad_handle;
        ctl::ModifySrqReq r;
        r.handle = h_;
        r.mask = mask;
        r.attr = attr;
        const Status s = call0(*c_, ctl::Op::modify_srq, r);
        if (s == Status::ok && (mask & srq_attr::limit)) attr_.srq_limit = attr.srq_limit;
        return s;
    }
    Status query(SrqAttr& attr) override {
        if (!h_) return Status::bad_handle;
        return call2(*c_, ctl::Op::query_srq, ctl::HandleReq{h_, 0}, attr);
    }
    const hcaemu::Srq& native() const override { return native_; }

private:
    ConnPtr c_;
    uint32_t h_;
    SrqAttr attr_;
    hcaemu::Srq native_;
    Mapping map_;
    ring::View ring_;
};

class AhImpl final : public Ah {
public:
    AhImpl(ConnPtr c, uint32_t h) : c_(std::move(c)), h_(h), native_(nullptr, h) {}
    ~AhImpl() override { (void)destroy(); }
    Status destroy() override {
        if (!h_) return Status::bad_handle;
        const Status s = call0(*c_, ctl::Op::destroy_ah, ctl::HandleReq{h_, 0});
        if (s == Status::ok || c_->dead()) h_ = 0;
        return s;
    }
    uint32_t handle() const override { return h_; }
    const hcaemu::Ah* native() const override { return &native_; }

private:
    ConnPtr c_;
    uint32_t h_;
    hcaemu::Ah native_;
};

uint32_t ah_handle_of(const hcaemu::Ah* ah) { return ah && !ah->device() ? ah->handle() : 0; }

class QpImpl final : public Qp {
public:
    QpImpl(ConnPtr c, const ctl::CreateQpRep& r, const QpInitAttr& init, const ring::SendLimits& lim)
        : c_(std::move(c)), h_(r.handle), qpn_(r.qpn), init_(init), lim_(lim) {
        init_.cap = r.cap;
    }
    ~QpImpl() override { (void)destroy(); }
    bool attach(int fd, const ctl::CreateQpRep& r) {
        if (!map_.map(fd, r.ring_bytes)) return false;
        const uint32_t sq_esz = shm::send_entry_size(r.cap.max_send_sge, r.cap.max_inline_data);
        if (!ring_at(sq_, r.sq_offset, shm::RingKind::sq, r.cap.max_send_wr, sq_esz)) return false;
        if (init_.srq) return true;
        if (!ring_at(rq_, r.rq_offset, shm::RingKind::rq, r.cap.max_recv_wr, shm::recv_entry_size(r.cap.max_recv_sge)))
            return false;
        // The two rings must not overlap.
        const uint64_t sq_end = r.sq_offset + shm::kRingEntries + uint64_t(sq_.cap) * sq_.entry_size;
        const uint64_t rq_end = r.rq_offset + shm::kRingEntries + uint64_t(rq_.cap) * rq_.entry_size;
        return r.rq_offset >= sq_end || r.sq_offset >= rq_end;
    }
    Status destroy() override {
        if (!h_) return Status::bad_handle;
        const Status s = call0(*c_, ctl::Op::destroy_qp, ctl::HandleReq{h_, 0});
        if (s == Status::ok || c_->dead()) {
            h_ = 0;
            sq_ = {};
            rq_ = {};
            map_.reset();
        }
        return s;
    }
    uint32_t handle() const override { return h_; }
    uint32_t qpn() const override { return qpn_; }
    QpState state() override {
        QpAttr a;
        if (query(a) != Status::ok) return c_->dead() ? QpState::err : state_;
        return state_;
    }
    ModifyResult modify(const QpAttr& attr, uint32_t mask) override {
        if (!h_) return {Status::bad_handle, 0};
        ctl::ModifyQpReq r;
        r.handle = h_;
        r.mask = mask;
        r.attr = attr;
        uint32_t bits = 0;
        const Status s = c_->call(ctl::Op::modify_qp, &r, sizeof(r), nullptr, 0, -1, nullptr, &bits);
        if (s == Status::ok && (mask & qp_attr::state)) state_ = attr.qp_state;
        if (s == Status::ok && (mask & qp_attr::state) && attr.qp_state == QpState::reset)
            for (Cq* cq : {init_.send_cq, init_.recv_cq})
                if (auto* mine = dynamic_cast<CqImpl*>(cq)) mine->purge(qpn_);
        return {s, s == Status::ok ? 0 : bits};
    }
    Status query(QpAttr& attr, QpInitAttr* init = nullptr) override {
        if (!h_) return Status::bad_handle;
        // Its QpAttr's bools are checked before the bytes become one (proto_attr.hpp).
        uint8_t raw[sizeof(ctl::QueryQpRep)];
        const ctl::HandleReq req{h_, 0};
        const Status s = c_->call(ctl::Op::query_qp, &req, sizeof req, raw, sizeof raw);
        if (s != Status::ok) return s;
        ctl::QueryQpRep rep;
        if (!ctl::decode(raw, rep)) {
            ++c_->replies_dropped;
            return Status::invalid_argument;
        }
        attr = rep.attr;
        state_ = attr.qp_state;
        if (init) {
            *init = init_;
            init->cap = rep.init.cap;
        }
        return Status::ok;
    }
    Status post_send(const SendWr* wr, const SendWr** bad_wr) override {
        if (bad_wr) *bad_wr = wr;
        if (!h_ || !sq_.hdr) return Status::bad_handle;
        // Sends are taken in RTS and SQD; in SQE and ERR they are flushed (hca_model). A ring the
        // daemon marked in error takes nothing.
        if (state_ == QpState::reset || state_ == QpState::init || state_ == QpState::rtr || sq_.error())
            return Status::bad_qp_state;
        return ring::post_send(sq_, lim_, &ah_handle_of, wr, bad_wr);
    }
    Status post_recv(const RecvWr* wr, const RecvWr** bad_wr) override {
        if (bad_wr) *bad_wr = wr;
        if (!h_) return Status::bad_handle;
        if (init_.srq) return Status::invalid_argument;  // receives go to the SRQ
        if (!rq_.hdr) return Status::bad_handle;
        if (state_ == QpState::reset || rq_.error()) return Status::bad_qp_state;
        return ring::post_recv(rq_, init_.cap.max_recv_sge, wr, bad_wr);
    }

private:
    bool ring_at(ring::View& v, uint64_t off, shm::RingKind kind, uint32_t min_cap, uint32_t esz) {
        return off % 64 == 0 && off <= map_.n && ring::attach(v, map_.at(off), map_.n - off, kind, min_cap, esz);
    }
    ConnPtr c_;
    uint32_t h_, qpn_;
    QpInitAttr init_;
    ring::SendLimits lim_;
    QpState state_ = QpState::reset;
    Mapping map_;
    ring::View sq_, rq_;
};

struct BufRec {
    uint8_t* data;
    size_t size;
    int fd;
};

// api::Cm through the daemon's agent: one Op::cm request per call; events arrive as Ev::cm_event
// on the socket, read by get_event (and Context::poll).
class DaemonCm final : public Cm {
public:
    explicit DaemonCm(std::shared_ptr<Conn> c) : c_(std::move(c)) {
        if (c_->cm_efd < 0) c_->cm_efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    }
    int create_id(pkt::RdmaPs ps, QpType qp_type, uint64_t context, uint32_t& id) override {
        ctl::CmCallReq r = req(ctl::CmCmd::create_id, 0);
        r.ps = uint16_t(ps);
        r.qp_type = uint8_t(qp_type);
        r.context = context;
        ctl::CmCallRep rep;
        const int e = call(r, rep);
        if (!e) id = rep.id;
        return e;
    }
    int destroy_id(uint32_t id, uint32_t& events_reported) override {
        ctl::CmCallRep rep;
        const int e = call(req(ctl::CmCmd::destroy_id, id), rep);
        if (!e) {
            events_reported = rep.events_reported;
            std::erase_if(c_->cm_events, [&](const CmEvent& ev) { return ev.id == id; });
        }
        return e;
    }
    int bind(uint32_t id, const sockaddr* addr) override {
        ctl::CmCallReq r = req(ctl::CmCmd::bind, id);
        if (!addr || !put(r.src, addr)) return addr ? EAFNOSUPPORT : EINVAL;
        ctl::CmCallRep rep;
        return call(r, rep);
    }
    int resolve_addr(uint32_t id, const sockaddr* src, const sockaddr* dst, int timeout_ms) override {
        ctl::CmCallReq r = req(ctl::CmCmd::resolve_addr, id);
        if (!dst || !put(r.dst, dst) || (src && !put(r.src, src))) return EINVAL;
        r.arg8 = src ? 1 : 0;
        r.arg32 = timeout_ms;
        ctl::CmCallRep rep;
        return call(r, rep);
    }
    int resolve_route(uint32_t id, int timeout_ms) override {
        ctl::CmCallReq r = req(ctl::CmCmd::resolve_route, id);
        r.arg32 = timeout_ms;
        ctl::CmCallRep rep;
        return call(r, rep);
    }
    int query(uint32_t id, CmIdInfo& out) override {
        ctl::CmCallRep rep;
        const int e = call(req(ctl::CmCmd::query, id), rep);
        if (!e) out = rep.info;
        return e;
    }
    int listen(uint32_t id, int backlog) override {
        ctl::CmCallReq r = req(ctl::CmCmd::listen, id);
        r.arg32 = backlog;
        ctl::CmCallRep rep;
        return call(r, rep);
    }
    int connect(uint32_t id, const CmConnParam& p) override { return with_param(ctl::CmCmd::connect, id, p); }
    int accept(uint32_t id, const CmConnParam& p) override { return with_param(ctl::CmCmd::accept, id, p); }
    int reject(uint32_t id, const uint8_t* pd, uint8_t len) override {
        if ((len && !pd) || len > kCmMaxPrivate) return EINVAL;
        ctl::CmCallReq r = req(ctl::CmCmd::reject, id);
        if (len) std::memcpy(r.param.private_data, pd, len);
        r.param.private_data_len = len;
        ctl::CmCallRep rep;
        return call(r, rep);
    }
    int disconnect(uint32_t id) override {
        ctl::CmCallRep rep;
        return call(req(ctl::CmCmd::disconnect, id), rep);
    }
    int establish(uint32_t id) override {
        ctl::CmCallRep rep;
        return call(req(ctl::CmCmd::establish, id), rep);
    }
    int init_qp_attr(uint32_t id, QpState state, QpAttr& attr, uint32_t& mask) override {
        ctl::CmCallReq r = req(ctl::CmCmd::init_qp_attr, id);
        r.arg8 = uint8_t(state);
        ctl::CmCallRep rep;
        const int e = call(r, rep);
        if (!e) {
            attr = rep.attr;
            mask = rep.mask;
        }
        return e;
    }
    int set_option(uint32_t id, CmOption opt, uint32_t value) override {
        ctl::CmCallReq r = req(ctl::CmCmd::set_option, id);
        r.arg8 = uint8_t(opt);
        r.arg32 = int32_t(value);
        ctl::CmCallRep rep;
        return call(r, rep);
    }
    bool get_event(CmEvent& ev) override {
        if (c_->cm_events.empty()) c_->pump(0);
        if (c_->cm_events.empty()) return false;
        ev = c_->cm_events.front();
        c_->cm_events.pop_front();
        if (c_->cm_events.empty() && c_->cm_efd >= 0) {
            uint64_t v;
            (void)!::read(c_->cm_efd, &v, sizeof v);
        }
        return true;
    }
    // The eventfd says "an event is queued here"; the socket may hold more: librdmacm's progress
    // thread polls this fd and the Context (which reads the socket).
    int fd() const override { return c_->cm_efd; }

private:
    static ctl::CmCallReq req(ctl::CmCmd cmd, uint32_t id) {
        ctl::CmCallReq r;
        std::memset(static_cast<void*>(&r), 0, sizeof r);  // padding too: zeros where nothing is
        r.param = CmConnParam{};
        r.cmd = uint8_t(cmd);
        r.id = id;
        return r;
    }
    static bool put(sockaddr_storage& to, const sockaddr* a) {
        if (a->sa_family == AF_INET) std::memcpy(&to, a, sizeof(sockaddr_in));
        else if (a->sa_family == AF_INET6) std::memcpy(&to, a, sizeof(sockaddr_in6));
        else return false;
        return true;
    }
    int with_param(ctl::CmCmd cmd, uint32_t id, const CmConnParam& p) {
        ctl::CmCallReq r = req(cmd, id);
        r.param = p;
        ctl::CmCallRep rep;
        return call(r, rep);
    }
    int call(const ctl::CmCallReq& r, ctl::CmCallRep& rep) {
        const Status s = call2(*c_, ctl::Op::cm, r, rep);
        if (s == Status::ok) return rep.err;
        return s == Status::bad_handle ? EINVAL : s == Status::no_resources ? ENOMEM : EINVAL;
    }
    std::shared_ptr<Conn> c_;
};

class ClientContext final : public Context {
public:
    ClientContext() : c_(std::make_shared<Conn>()) {}
    ~ClientContext() override {
        c_->close_fd();  // the daemon frees whatever this client still holds
        for (BufRec& b : bufs_) {
            ::munmap(b.data, b.size);
            ::close(b.fd);
        }
    }

    bool open(const std::string& path, std::string& err) {
        if (!c_->connect_to(path, err)) return false;
        ctl::HelloReq hello;
        hello.pid = uint32_t(::getpid());
        if (int f = ::open("/proc/self/comm", O_RDONLY | O_CLOEXEC); f >= 0) {
            const ssize_t r = ::read(f, hello.comm, sizeof(hello.comm) - 1);
            ::close(f);
            for (ssize_t i = 0; i < r; ++i)
                if (hello.comm[i] == '\n') hello.comm[i] = 0;
        }
        ctl::HelloRep rep;
        if (Status s = call2(*c_, ctl::Op::hello, hello, rep); s != Status::ok) {
            err = std::string("hello to ") + path + " failed: " + hcaemu::name(s) + (c_->dead() ? " (no answer or connection closed)" : "");
            return false;
        }
        client_id_ = rep.client_id;
        std::memcpy(gid_.data(), rep.gid, gid_.size());
        gid_index_ = rep.gid_index;
        ctl::DeviceAttrW dw;
        if (Status s = c_->call(ctl::Op::query_device, nullptr, 0, &dw, sizeof(dw)); s != Status::ok) {
            err = std::string("query_device failed: ") + hcaemu::name(s);
            return false;
        }
        attr_ = ctl::decode(dw);
        if (Status s = query_port(1, port_); s != Status::ok) {
            err = std::string("query_port failed: ") + hcaemu::name(s);
            return false;
        }
        return true;
    }

    std::string name() const override { return "hcaemu0"; }
    const DeviceAttr& query_device() const override { return attr_; }
    Status query_port(uint8_t port_num, PortAttr& out) override {
        return call2(*c_, ctl::Op::query_port, ctl::PortReq{port_num, {}}, out);
    }
    Status query_gid(uint8_t port_num, int index, GidEntry& out) override {
        return call2(*c_, ctl::Op::query_gid, ctl::GidReq{port_num, {}, index}, out);
    }
    const Gid& gid() const override { return gid_; }
    int gid_index() const override { return gid_index_; }

    Result<Buffer> alloc_buffer(size_t length) override {
        if (length == 0) return Result<Buffer>::error(Status::invalid_argument);
        const size_t page = size_t(::sysconf(_SC_PAGESIZE));
        const size_t n = (length + page - 1) / page * page;
        const int fd = ::memfd_create("hcaemu-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0) return Result<Buffer>::error(Status::no_resources);
        void* p = MAP_FAILED;
        if (::ftruncate(fd, off_t(n)) == 0 && ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0)
            p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);  // a new memfd reads as zeros
        if (p == MAP_FAILED) {
            ::close(fd);
            return Result<Buffer>::error(Status::no_resources);
        }
        bufs_.push_back({static_cast<uint8_t*>(p), n, fd});
        return {Status::ok, Buffer{static_cast<uint8_t*>(p), length}};
    }
    void free_buffer(Buffer& b) override {
        auto it = std::find_if(bufs_.begin(), bufs_.end(), [&](const BufRec& r) { return r.data == b.data; });
        if (it == bufs_.end()) return;
        ::munmap(it->data, it->size);
        ::close(it->fd);
        bufs_.erase(it);
        b = {};
    }

    Result<std::unique_ptr<Pd>> alloc_pd() override {
        ctl::HandleRep rep;
        const Status s = c_->call(ctl::Op::alloc_pd, nullptr, 0, &rep, sizeof(rep));
        if (s != Status::ok) return {s, nullptr};
        return {Status::ok, std::make_unique<PdImpl>(c_, rep.handle)};
    }
    // Memory from alloc_buffer goes with its own memfd; any other memory is made shared in place
    // first (remap.hpp: the pages are replaced by a memfd's, at the same address).
    Status share_range(void* addr, size_t length, bool writable, remap::Share& sh, bool& own_fd) {
        const auto a = reinterpret_cast<uintptr_t>(addr);
        for (const BufRec& r : bufs_) {
            const auto d = reinterpret_cast<uintptr_t>(r.data);
            if (a >= d && a - d <= r.size && length <= r.size - (a - d)) {
                sh.fd = r.fd;
                sh.offset = a - d;
                own_fd = false;
                return Status::ok;
            }
        }
        std::string err;
        own_fd = true;
        return remap::share(addr, length, writable, sh, err);
    }
    Result<std::unique_ptr<Mr>> reg_mr(Pd& pd, void* addr, size_t length, uint32_t access) override {
        const auto a = reinterpret_cast<uintptr_t>(addr);
        if (c_->dead()) return {Status::bad_handle, nullptr};
        // What the device would refuse anyway (check_mr_args) is refused before any copy.
        if (length == 0 || (access & ~access::supported) ||
            ((access & (access::remote_write | access::remote_atomic)) && !(access & access::local_write)))
            return {Status::invalid_argument, nullptr};
        remap::Share sh;
        bool own_fd = false;
        const bool writable = access::writes_memory(access);
        if (Status s = share_range(addr, length, writable, sh, own_fd); s != Status::ok) return {s, nullptr};
        ctl::RegMrReq req;
        req.pd = pd.handle();
        req.access = access;
        req.offset = sh.offset;
        req.length = length;
        req.iova = a;
        ctl::RegMrRep rep;
        const Status s = call2(*c_, ctl::Op::reg_mr, req, rep, sh.fd);
        if (own_fd) ::close(sh.fd);  // the daemon holds its own mapping
        sh.fd = -1;
        if (s != Status::ok) {
            remap::unshare(sh);
            return {s, nullptr};
        }
        ShareFn fn = [this](void* p, size_t n, bool w, remap::Share& out, bool& own) { return share_range(p, n, w, out, own); };
        return {Status::ok, std::make_unique<MrImpl>(c_, rep, a, length, access, sh, std::move(fn))};
    }
    Result<std::unique_ptr<CompChannel>> create_comp_channel() override {
        if (c_->dead()) return {Status::bad_handle, nullptr};
        return {Status::ok, std::make_unique<ChanImpl>(c_)};
    }
    Result<std::unique_ptr<Cq>> create_cq(int cqe, CompChannel* channel, uint64_t cq_context) override {
        auto* ch = dynamic_cast<ChanImpl*>(channel);
        if (channel && !ch) return {Status::invalid_argument, nullptr};
        const ctl::CreateCqReq req = ctl::encode(ctl::CqInit{cqe, ch != nullptr, cq_context});
        ctl::CreateCqRep rep;
        int fd = -1;
        const Status s = call2(*c_, ctl::Op::create_cq, req, rep, -1, &fd);
        if (s != Status::ok) return {s, nullptr};
        auto cq = std::make_unique<CqImpl>(c_, rep.handle, rep.cqe);
        if (!cq->attach(fd, rep.ring_bytes, rep.cqe)) return {Status::invalid_argument, nullptr};  // destroyed by ~CqImpl
        if (ch) c_->chan_by_cq[rep.handle] = ch->state();
        return {Status::ok, std::move(cq)};
    }
    Result<std::unique_ptr<Qp>> create_qp(Pd& pd, QpInitAttr& init) override {
        if (!init.send_cq || !init.recv_cq) return {Status::invalid_argument, nullptr};
        ctl::QpInit qi;
        qi.pd = pd.handle();
        qi.send_cq = init.send_cq->handle();
        qi.recv_cq = init.recv_cq->handle();
        qi.srq = init.srq ? init.srq->handle() : 0;
        qi.cap = init.cap;
        qi.qp_type = init.qp_type;
        qi.sq_sig_all = init.sq_sig_all;
        const ctl::CreateQpReq req = ctl::encode(qi);
        ctl::CreateQpRep rep;
        int fd = -1;
        const Status s = call2(*c_, ctl::Op::create_qp, req, rep, -1, &fd);
        if (s != Status::ok) {
            if (fd >= 0) ::close(fd);
            return {s, nullptr};
        }
        ring::SendLimits lim;
        lim.type = init.qp_type;
        lim.max_send_sge = rep.cap.max_send_sge;
        lim.max_inline_data = rep.cap.max_inline_data;
        lim.max_msg_sz = port_.max_msg_sz;
        lim.ud_max_payload = mtu_bytes(port_.active_mtu);
        lim.atomics = attr_.atomic_cap != AtomicCap::none;
        auto qp = std::make_unique<QpImpl>(c_, rep, init, lim);
        if (!qp->attach(fd, rep)) return {Status::invalid_argument, nullptr};
        init.cap = rep.cap;
        return {Status::ok, std::move(qp)};
    }
    Result<std::unique_ptr<Srq>> create_srq(Pd& pd, SrqAttr& attr) override {
        ctl::CreateSrqReq req;
        req.pd = pd.handle();
        req.attr = attr;
        ctl::CreateSrqRep rep;
        int fd = -1;
        const Status s = call2(*c_, ctl::Op::create_srq, req, rep, -1, &fd);
        if (s != Status::ok) {
            if (fd >= 0) ::close(fd);
            return {s, nullptr};
        }
        auto srq = std::make_unique<SrqImpl>(c_, rep.handle, rep.attr);
        if (!srq->attach(fd, rep.ring_bytes)) return {Status::invalid_argument, nullptr};
        attr = rep.attr;
        return {Status::ok, std::move(srq)};
    }
    Result<std::unique_ptr<Ah>> create_ah(Pd& pd, const AhAttr& attr) override {
        ctl::CreateAhReq req;
        req.pd = pd.handle();
        req.attr = attr;
        ctl::HandleRep rep;
        const Status s = call2(*c_, ctl::Op::create_ah, req, rep);
        if (s != Status::ok) return {s, nullptr};
        return {Status::ok, std::make_unique<AhImpl>(c_, rep.handle)};
    }
    bool get_async_event(AsyncEvent& ev) override {
        if (c_->async.empty()) c_->pump(0);
        if (c_->async.empty()) return false;
        ev = c_->async.front();
        c_->async.pop_front();
        return true;
    }
    // The events only: the engine runs in the daemon. A busy-polling loop (perf, pingpong) calls
    // this every turn; a recvmsg each time would put a system call on every turn, so the socket
    // is looked at every 64th call (an event waits that many turns at most). Then the CPU is
    // yielded too: a client spinning on its CQ must not keep the core from the daemon's data
    // path that is to fill it.
    size_t poll() override {
        if (++polls_ % 64) return 0;
        sched_yield();
        return c_->pump(0);
    }
    bool busy() override { return false; }
    bool resolve(const Gid& peer, uint64_t timeout_ms, std::string& err) override {
        const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
        ctl::ResolveReq req;
        std::memcpy(req.gid, peer.data(), sizeof(req.gid));
        for (;;) {
            ctl::ResolveRep rep;
            if (Status s = call2(*c_, ctl::Op::resolve, req, rep); s != Status::ok) {
                err = std::string("resolve: ") + hcaemu::name(s);
                return false;
            }
            if (rep.state == uint8_t(ctl::Neighbor::resolved)) return true;
            if (rep.state != uint8_t(ctl::Neighbor::pending)) {
                err = "the peer did not answer ARP/ND";
                return false;
            }
            if (tools::interrupted()) {
                err = "interrupted by a signal";
                return false;
            }
            if (Clock::now() >= deadline) {
                err = "the peer did not answer ARP/ND within " + std::to_string(timeout_ms) + " ms";
                return false;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    bool alive() const override { return c_->alive(); }
    Cm* cm() override {
        if (!cm_) cm_ = std::make_unique<DaemonCm>(c_);
        return cm_.get();
    }

    Status read_stats(Stats& out) override {
        out = {};
        std::vector<std::pair<std::string, uint64_t>>* sets[] = {&out.device, &out.net, &out.link, &out.daemon};
        static_assert(std::size(sets) == size_t(ctl::CounterSet::count));
        for (uint8_t set = 0; set < uint8_t(ctl::CounterSet::count); ++set) {
            uint32_t start = 0;
            for (int page = 0; page < 1024; ++page) {  // bounded: a daemon cannot keep us paging
                ctl::CountersReq req;
                req.set = set;
                req.start = start;
                auto rep = std::make_unique<ctl::CountersRep>();
                if (Status s = c_->call(ctl::Op::read_counters, &req, sizeof(req), rep.get(), sizeof(*rep)); s != Status::ok)
                    return s;
                const uint32_t n = std::min(rep->n, ctl::kCountersPerPage);
                for (uint32_t i = 0; i < n; ++i) sets[set]->emplace_back(ctl::get_str(rep->v[i].name), rep->v[i].value);
                start += n;
                if (n == 0 || start >= rep->total) break;
            }
        }
        out.daemon.emplace_back("client_replies_dropped", c_->replies_dropped);
        out.daemon.emplace_back("client_events_dropped", c_->events_dropped);
        return Status::ok;
    }
    Status res_list(ResKind kind, std::vector<ResEntry>& out) override {
        out.clear();
        uint32_t start = 0;
        for (int page = 0; page < 4096; ++page) {
            ctl::ResListReq req;
            req.kind = uint8_t(kind);
            req.start = start;
            auto rep = std::make_unique<ctl::ResListRep>();
            if (Status s = c_->call(ctl::Op::res_list, &req, sizeof(req), rep.get(), sizeof(*rep)); s != Status::ok) return s;
            const uint32_t n = std::min(rep->n, ctl::kResPerPage);
            for (uint32_t i = 0; i < n; ++i) {
                const ctl::ResObj& o = rep->o[i];
                ResEntry e;
                e.client = o.client;
                e.pid = o.pid;
                e.comm = ctl::get_str(o.comm);
                for (uint32_t k = 0; k < std::min(o.nattr, ctl::kResAttrs); ++k)
                    e.attrs.emplace_back(ctl::get_str(o.a[k].name), ctl::get_str(o.a[k].value));
                out.push_back(std::move(e));
            }
            start += n;
            if (n == 0 || start >= rep->total) break;
        }
        return Status::ok;
    }
    Status inject_add(const std::string& rule, uint32_t& id) override {
        ctl::InjectReq req;
        if (rule.size() >= sizeof req.rule) return Status::invalid_argument;
        req.cmd = uint8_t(ctl::InjectCmd::add);
        std::memcpy(req.rule, rule.data(), rule.size());
        auto rep = std::make_unique<ctl::InjectRep>();
        if (Status s = c_->call(ctl::Op::inject, &req, sizeof(req), rep.get(), sizeof(*rep)); s != Status::ok) return s;
        id = rep->id;
        return Status::ok;
    }
    Status inject_del(uint32_t id) override {
        ctl::InjectReq req;
        req.cmd = uint8_t(ctl::InjectCmd::del);
        req.id = id;
        auto rep = std::make_unique<ctl::InjectRep>();
        return c_->call(ctl::Op::inject, &req, sizeof(req), rep.get(), sizeof(*rep));
    }
    Status inject_list(std::vector<InjectEntry>& out) override {
        out.clear();
        uint32_t start = 0;
        for (int page = 0; page < 64; ++page) {
            ctl::InjectReq req;
            req.cmd = uint8_t(ctl::InjectCmd::list);
            req.start = start;
            auto rep = std::make_unique<ctl::InjectRep>();
            if (Status s = c_->call(ctl::Op::inject, &req, sizeof(req), rep.get(), sizeof(*rep)); s != Status::ok) return s;
            const uint32_t n = std::min(rep->n, ctl::kInjectPerPage);
            for (uint32_t i = 0; i < n; ++i)
                out.push_back({rep->r[i].id, ctl::get_str(rep->r[i].text), rep->r[i].matched, rep->r[i].hits});
            start += n;
            if (n == 0 || start >= rep->total) break;
        }
        return Status::ok;
    }

private:
    ConnPtr c_;
    uint32_t client_id_ = 0;
    Gid gid_{};
    int gid_index_ = 0;
    DeviceAttr attr_;
    PortAttr port_;
    uint32_t polls_ = 0;
    std::vector<BufRec> bufs_;
    std::unique_ptr<DaemonCm> cm_;
};

}  // namespace

std::unique_ptr<Context> open_daemon(const std::string& socket_path, std::string& err) {
    auto ctx = std::make_unique<ClientContext>();
    if (!ctx->open(socket_path, err)) return nullptr;
    return ctx;
}

}  // namespace hcaemu::api
