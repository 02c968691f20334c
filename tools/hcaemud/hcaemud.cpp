// hcaemud: the daemon that owns a DPDK port and an hcaemu HCA and serves it to local processes
// (libhcaemu, open_device("unix:PATH")). The main thread runs the control plane (Boost.Asio on
// a SOCK_SEQPACKET Unix socket, tools/libhcaemu/proto.hpp); the data thread (engine.hpp) runs the
// engine loop, the rings and every verbs call. Protocol: tools/libhcaemu/PROTOCOL.md.
#include <utility>

#include <grp.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <fcntl.h>

#include <boost/asio.hpp>
#include <boost/asio/generic/seq_packet_protocol.hpp>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <thread>

#include "tools/attach/attach.hpp"
#include "tools/hcaemud/engine.hpp"
#include "tools/hcaemud/log.hpp"
#include "tools/hcaemud/log_line.hpp"
#include "tools/hcaemud/worker.hpp"
#include "tools/libhcaemu/proto.hpp"
#include "tools/libhcaemu/sysretry.hpp"

namespace asio = boost::asio;
using SP = asio::generic::seq_packet_protocol;  // Boost 1.74 has no local::seq_packet_protocol
using namespace hcaemu;
using namespace hcaemu::daemon;

namespace {

constexpr const char* kDefaultEal =
    "--no-huge -m 256 --no-pci --no-shconf -l 0 --no-telemetry --log-level lib.eal:error --file-prefix hcaemud --vdev=net_ring0";
constexpr const char* kDefaultIp = "198.18.0.1/24";

const char* const kHelp =
    "usage: hcaemud [options]\n"
    "hcaemu's daemon: owns a DPDK port and an RoCE v2 HCA and serves verbs to local processes\n"
    "(libhcaemu: open_device(\"unix:PATH\")) over a Unix socket; data through shared memory.\n"
    "\n"
    "  --socket PATH       the control socket (default /run/hcaemu.sock)\n"
    "  --socket-mode OCTAL its permissions (default 0660)\n"
    "  --socket-group NAME its group (default: the daemon's)\n"
    "  --max-clients N     clients at once; more are closed at accept (default 64)\n"
    "  --max-objects N     objects per client (PD, MR, CQ, QP, SRQ, AH; default 4096)\n"
    "  --lcores N          data-path lcores (1-8, default 1): the port with N queue pairs, frames\n"
    "                      steered to the lcore of their QP; a QP goes to the lcore of its CQs\n"
    "                      (else the one with fewest QPs); not with --pcap, --inject or --conform\n"
    "  --help\n"
    "\n"
    "Without --eal the port is DPDK's net_ring0 (a port whose transmit ring is its receive ring,\n"
    "no NIC needed): \"--no-huge -m 256 --no-pci --no-shconf -l 0 --file-prefix hcaemud\n"
    "--vdev=net_ring0\"; without --ip the address is 198.18.0.1/24. Two QPs of this daemon talk\n"
    "to each other on any port (the HCA loops frames for its own address back).\n"
    "Threads: with a second EAL lcore (e.g. -l 0,1) the data path runs there\n"
    "(rte_eal_remote_launch), otherwise on a std::thread registered with the EAL (an lcore id:\n"
    "the mempool's per-lcore cache). After 64 idle turns it yields the CPU\n"
    "each turn, after 20000 it sleeps 50 us per turn, after 40000 500 us, until there is work.\n"
    "Exit status: 0 after SIGTERM/SIGINT, 1 start-up error or a second signal during the stop\n"
    "(it then exits at once; the next start removes the socket file as stale), 2 bad arguments.\n"
    "\n";

struct Options {
    tools::AttachOptions att;
    std::string socket = "/run/hcaemu.sock";
    mode_t mode = 0660;
    std::string group;
    uint32_t max_clients = 64;
    uint32_t max_objects = 4096;
};

bool parse_u32(const std::string& s, uint32_t& v, int base = 10) {
    if (s.empty()) return false;
    char* end = nullptr;
    errno = 0;
    const unsigned long x = std::strtoul(s.c_str(), &end, base);
    if (errno || *end || x > 0xFFFFFFFFul || s[0] == '-') return false;
    v = uint32_t(x);
    return true;
}

class Server;

// An fd a queued job owns: closed with the job if the job never runs.
struct OwnedFd {
    explicit OwnedFd(int f) : fd(f) {}
    OwnedFd(const OwnedFd&) = delete;
    OwnedFd& operator=(const OwnedFd&) = delete;
    ~OwnedFd() {
        if (fd >= 0) close(fd);
    }
    int fd;
};

// One client connection, on the io thread.
struct Conn : std::enable_shared_from_this<Conn> {
    Conn(Server& s, SP::socket&& sk, uint32_t i, uint32_t p) : srv(s), sock(std::move(sk)), id(i), pid(p) {}
    Server& srv;
    SP::socket sock;
    uint32_t id, pid;
    bool hello = false, closed = false, writing = false;
    bool read_pending = false;  // the next request is read once `out` has drained
    std::deque<Msg> out;
};

class Server {
public:
    Server(asio::io_context& io, DCounters& ctr, LogWriter& log, const Options& o)
        : io_(io), ctr_(ctr), log_(log), opt_(o), acc_(io), sig_(io, SIGTERM, SIGINT) {}
    bool listen(std::string& err);
    void set_engine(Engine* e) { eng_ = e; }
    void start();
    // From the data thread.
    void deliver(uint32_t client, Msg&& m);
    bool stopping() const { return stopping_; }

private:
    void accept();
    void wait_read(const std::shared_ptr<Conn>& c);
    void on_readable(const std::shared_ptr<Conn>& c);
    void handle(const std::shared_ptr<Conn>& c, const uint8_t* buf, size_t n, int flags, std::vector<int>& fds);
    // By value: drop() erases the map entry a caller's reference may point into.
    void proto_error(std::shared_ptr<Conn> c, const ctl::Hdr* h, ctl::Error e);
    void next_request(std::shared_ptr<Conn> c);
    void map_then_submit(const std::shared_ptr<Conn>& c, const ctl::Hdr& h, int memfd, uint64_t offset,
                         uint64_t length, std::vector<uint8_t>&& body);
    // The request to the engine; its reply goes back to the client, if still there.
    void submit(const std::shared_ptr<Conn>& c, const ctl::Hdr& h, std::vector<uint8_t>&& body,
                std::shared_ptr<Region> region, std::string comm);
    // Any thread: memory to unmap, released on the worker.
    void discard(std::shared_ptr<Region> r) { worker_.post([r = std::move(r)] {}); }
    void send(std::shared_ptr<Conn> c, Msg&& m);
    void flush(std::shared_ptr<Conn> c);
    void drop(std::shared_ptr<Conn> c);
    void shutdown();
    void wait_signal();

    asio::io_context& io_;
    DCounters& ctr_;
    LogWriter& log_;
    const Options& opt_;
    asio::basic_socket_acceptor<SP> acc_;
    asio::signal_set sig_;
    Engine* eng_ = nullptr;
    std::map<uint32_t, std::shared_ptr<Conn>> conns_;
    uint32_t next_id_ = 1;
    bool stopping_ = false;
    Worker worker_;  // last: destroyed (joined) first, while everything its jobs use is there
};

bool Server::listen(std::string& err) {
    boost::system::error_code ec;
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, opt_.socket.data(), opt_.socket.size());
    const SP::endpoint ep(&a, sizeof a, 0);
    acc_.open(ep.protocol(), ec);
    if (!ec) acc_.bind(ep, ec);
    if (ec) {
        err = "cannot create the socket " + opt_.socket + ": " + ec.message() +
              (ec == boost::system::errc::permission_denied || ec == boost::system::errc::no_such_file_or_directory
                   ? " (is its directory there and writable? see --socket)"
                   : "");
        return false;
    }
    if (chmod(opt_.socket.c_str(), opt_.mode) != 0) {
        err = "chmod " + opt_.socket + ": " + std::strerror(errno);
        return false;
    }
    if (!opt_.group.empty()) {
        const group* g = getgrnam(opt_.group.c_str());
        if (!g) {
            err = "--socket-group: no group named '" + opt_.group + "'";
            return false;
        }
        if (chown(opt_.socket.c_str(), uid_t(-1), g->gr_gid) != 0) {
            err = "chown " + opt_.socket + " to group " + opt_.group + ": " + std::strerror(errno);
            return false;
        }
    }
    acc_.listen(64, ec);
    if (ec) {
        err = "listen on " + opt_.socket + ": " + ec.message();
        return false;
    }
    return true;
}

void Server::start() {
    wait_signal();
    accept();
}

// The first SIGTERM/SIGINT stops cleanly; a second one while that runs exits at once.
void Server::wait_signal() {
    sig_.async_wait([this](const boost::system::error_code& ec, int) {
        if (ec) return;
        if (stopping_) {
            static const char kMsg[] = "hcaemud: second signal: exiting now, without the clean stop\n";
            (void)!write(2, kMsg, sizeof kMsg - 1);
            _exit(1);
        }
        shutdown();
        wait_signal();
    });
}

void Server::accept() {
    acc_.async_accept([this](const boost::system::error_code& ec, SP::socket sk) {
        if (ec) {
            if (ec != asio::error::operation_aborted && !stopping_) accept();
            return;
        }
        if (conns_.size() >= opt_.max_clients || stopping_) {
            ctr_.inc(DCounter::clients_refused);
            boost::system::error_code ig;
            sk.close(ig);
        } else {
            ucred cr{};
            socklen_t len = sizeof cr;
            getsockopt(sk.native_handle(), SOL_SOCKET, SO_PEERCRED, &cr, &len);
            boost::system::error_code ig;
            sk.non_blocking(true, ig);
            auto c = std::make_shared<Conn>(*this, std::move(sk), next_id_++, uint32_t(cr.pid));
            conns_[c->id] = c;
            ctr_.inc(DCounter::clients_connected);
            ctr_.inc(DCounter::clients_total);
            wait_read(c);
        }
        if (!stopping_) accept();
    });
}

void Server::wait_read(const std::shared_ptr<Conn>& c) {
    if (c->closed) return;
    c->sock.async_wait(SP::socket::wait_read, [this, c](const boost::system::error_code& ec) {
        if (ec || c->closed) return;
        on_readable(c);
    });
}

void Server::on_readable(const std::shared_ptr<Conn>& c) {
    alignas(8) static uint8_t buf[ctl::kMaxMsg + 1];
    constexpr size_t kMaxFds = 16;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
    iovec iov{buf, sizeof buf};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    const ssize_t n = recvmsg(c->sock.native_handle(), &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || api::interrupted(errno)) return wait_read(c);
        return drop(c);
    }
    std::vector<int> fds;
    for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
        const size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; ++i) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
            fds.push_back(fd);
        }
    }
    if (n == 0 && fds.empty()) return drop(c);  // EOF (an empty datagram carries nothing either)
    handle(c, buf, size_t(n), mh.msg_flags, fds);
    for (int fd : fds) {  // every fd not taken by a request
        close_client_fd(fd);
        ctr_.inc(DCounter::fds_closed);
    }
}

void Server::proto_error(std::shared_ptr<Conn> c, const ctl::Hdr* h, ctl::Error e) {
    ctr_.error(e);
    Msg m;
    m.bytes.resize(sizeof(ctl::ReplyHdr));
    ctl::ReplyHdr r;
    r.h.op = uint16_t((h ? h->op : 0) | ctl::kReplyBit);
    r.h.len = sizeof r;
    r.h.seq = h ? h->seq : 0;
    r.status = uint8_t(Status::invalid_argument);
    r.error = uint8_t(e);
    std::memcpy(m.bytes.data(), &r, sizeof r);
    send(c, std::move(m));
    next_request(c);
}

// One request at a time per client, and none while its replies wait to be sent: a client that
// never reads cannot grow `out` (events are bounded in deliver()).
void Server::next_request(std::shared_ptr<Conn> c) {
    if (c->closed) return;
    if (c->out.empty()) wait_read(c);
    else c->read_pending = true;  // flush() resumes it
}

void Server::handle(const std::shared_ptr<Conn>& c, const uint8_t* buf, size_t n, int flags, std::vector<int>& fds) {
    ctr_.inc(DCounter::requests);
    if (n < sizeof(ctl::Hdr) || (flags & MSG_TRUNC)) return proto_error(c, nullptr, ctl::Error::bad_length);
    ctl::Hdr h;
    std::memcpy(&h, buf, sizeof h);
    if (h.magic != ctl::kMagic) return proto_error(c, nullptr, ctl::Error::bad_magic);
    if (h.version != ctl::kVersion) return proto_error(c, &h, ctl::Error::bad_version);
    if (h.op == 0 || h.op >= uint16_t(ctl::Op::count)) return proto_error(c, &h, ctl::Error::unknown_op);
    if (h.len != n || n != sizeof h + ctl::kRequestSize[h.op]) return proto_error(c, &h, ctl::Error::bad_length);
    const auto op = ctl::Op(h.op);
    if ((op == ctl::Op::hello) == c->hello) return proto_error(c, &h, ctl::Error::no_hello);
    if (flags & MSG_CTRUNC) return proto_error(c, &h, ctl::Error::bad_fd);
    // reg_mr, and rereg_mr with a new translation, bring the region's memfd; nothing else has fds.
    uint64_t offset = 0, length = 0;
    const bool memfd = memfd_range(op, buf + sizeof h, offset, length);
    if (!memfd && !fds.empty()) return proto_error(c, &h, ctl::Error::fd_unexpected);
    if (stopping_) return proto_error(c, &h, ctl::Error::shutting_down);
    if (memfd) {
        if (fds.size() != 1) return proto_error(c, &h, ctl::Error::bad_fd);
        // The memfd must be sealed against shrinking (a cut mapping would fault the data thread)
        // and hold [offset, offset + length).
        const int seals = fcntl(fds[0], F_GET_SEALS);
        struct stat st{};
        if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fds[0], &st) != 0 || length == 0 ||
            offset > uint64_t(st.st_size) || length > uint64_t(st.st_size) - offset)
            return proto_error(c, &h, ctl::Error::bad_fd);
        const int fd = fds[0];
        fds.clear();
        return map_then_submit(c, h, fd, offset, length, std::vector<uint8_t>(buf + sizeof h, buf + n));
    }
    std::string comm;
    if (op == ctl::Op::hello) {
        ctl::HelloReq r;
        std::memcpy(&r, buf + sizeof h, sizeof r);
        for (char ch : r.comm) {
            if (!ch) break;
            comm += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
        }
        c->hello = true;
    }
    submit(c, h, std::vector<uint8_t>(buf + sizeof h, buf + n), std::make_shared<Region>(), std::move(comm));
}

// Mapped and faulted in on the worker (seconds for many GiB); the io thread meanwhile serves the
// other clients. This one's next request waits for the reply, as always.
void Server::map_then_submit(const std::shared_ptr<Conn>& c, const ctl::Hdr& h, int memfd, uint64_t offset,
                             uint64_t length, std::vector<uint8_t>&& body) {
    auto fd = std::make_shared<OwnedFd>(memfd);  // closed with the job if it never runs
    ctr_.inc(DCounter::mr_maps_pending);
    worker_.post([this, id = c->id, h, fd, offset, length, body = std::move(body)]() mutable {
        auto region = std::make_shared<Region>();
        const int64_t got = map_client_region(std::exchange(fd->fd, -1), offset, length, *region);
        asio::post(io_, [this, id, h, got, region, body = std::move(body)]() mutable {
            ctr_.dec(DCounter::mr_maps_pending);
            auto it = conns_.find(id);
            if (it == conns_.end()) return discard(std::move(region));  // the client is gone
            auto cn = it->second;
            if (got < 0) return proto_error(cn, &h, ctl::Error::bad_fd);
            ctr_.inc(DCounter::mr_bytes_prefaulted, uint64_t(got));
            if (stopping_) {
                discard(std::move(region));
                return proto_error(cn, &h, ctl::Error::shutting_down);
            }
            submit(cn, h, std::move(body), std::move(region), {});
        });
    });
}

void Server::submit(const std::shared_ptr<Conn>& c, const ctl::Hdr& h, std::vector<uint8_t>&& body,
                    std::shared_ptr<Region> region, std::string comm) {
    const uint32_t id = c->id, pid = c->pid;
    Engine* eng = eng_;
    // shared_ptr: the closure is a std::function
    eng->submit([this, eng, id, pid, h, body = std::move(body), region = std::move(region), comm]() mutable {
        if (ctl::Op(h.op) == ctl::Op::hello) eng->add_client(id, pid, comm);
        Msg r = eng->request(id, h, body.data(), *region);
        // What the engine left in `region` (a dereg_mr's or rereg_mr's old pages, a refused
        // request's new ones) is unmapped on the worker, off the data path and the io thread.
        if (region->map.p) discard(std::move(region));
        asio::post(io_, [this, id, r = std::move(r)]() mutable {
            auto it = conns_.find(id);
            if (it == conns_.end()) {
                if (r.fd >= 0) close(r.fd);
                return;
            }
            auto cn = it->second;  // send() may drop it, erasing it from conns_
            send(cn, std::move(r));
            next_request(cn);
        });
    });
}

void Server::deliver(uint32_t client, Msg&& m) {
    asio::post(io_, [this, client, m = std::move(m)]() mutable {
        auto it = conns_.find(client);
        if (it == conns_.end()) {
            if (m.fd >= 0) close(m.fd);
            return;
        }
        if (it->second->out.size() >= 4096) {  // a client that reads nothing loses events, not the daemon
            ctr_.inc(DCounter::events_dropped);
            return;
        }
        auto c = it->second;
        send(c, std::move(m));
    });
}

void Server::send(std::shared_ptr<Conn> c, Msg&& m) {
    if (c->closed) {
        if (m.fd >= 0) close(m.fd);  // the daemon's own ring memfd
        return;
    }
    c->out.push_back(std::move(m));
    if (!c->writing) flush(c);
}

void Server::flush(std::shared_ptr<Conn> c) {
    while (!c->out.empty() && !c->closed) {
        Msg& m = c->out.front();
        iovec iov{m.bytes.data(), m.bytes.size()};
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
        if (m.fd >= 0) {
            mh.msg_control = cbuf;
            mh.msg_controllen = sizeof cbuf;
            cmsghdr* cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int));
            std::memcpy(CMSG_DATA(cm), &m.fd, sizeof(int));
        }
        const ssize_t r = sendmsg(c->sock.native_handle(), &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            c->writing = true;
            c->sock.async_wait(SP::socket::wait_write, [this, c](const boost::system::error_code& ec) {
                c->writing = false;
                if (!ec) flush(c);
            });
            return;
        }
        if (m.fd >= 0) close(m.fd);
        c->out.pop_front();
        if (r < 0) return drop(c);
    }
    if (c->out.empty() && c->read_pending && !c->closed) {
        c->read_pending = false;
        wait_read(c);
    }
}

void Server::drop(std::shared_ptr<Conn> c) {
    if (c->closed) return;
    c->closed = true;
    for (Msg& m : c->out)
        if (m.fd >= 0) close(m.fd);
    c->out.clear();
    boost::system::error_code ig;
    c->sock.close(ig);
    conns_.erase(c->id);
    ctr_.dec(DCounter::clients_connected);
    if (c->hello) {
        const uint32_t id = c->id;
        Engine* eng = eng_;
        eng->submit([this, eng, id] {
            // The client's memory is unmapped on the worker, not on the data path.
            auto maps = std::make_shared<std::vector<Mapping>>(eng->remove_client(id));
            if (!maps->empty()) worker_.post([maps = std::move(maps)] {});
        });
    }
}

void Server::shutdown() {
    if (stopping_) return;
    stopping_ = true;
    log_.add("hcaemud: stopping: every QP to ERR, clients told\n");
    boost::system::error_code ig;
    acc_.close(ig);
    Engine* eng = eng_;
    eng->submit([this, eng] {
        eng->all_qps_to_error();
        eng->flush_to_rings();  // the flush CQEs in the rings before the clients hear of the stop
        asio::post(io_, [this, eng] {
            ctl::ShutdownMsg sm;
            Msg m;
            m.bytes.resize(sizeof(ctl::Hdr) + sizeof sm);
            ctl::Hdr h;
            h.op = uint16_t(ctl::Ev::shutdown);
            h.len = uint32_t(m.bytes.size());
            std::memcpy(m.bytes.data(), &h, sizeof h);
            std::memcpy(m.bytes.data() + sizeof h, &sm, sizeof sm);
            std::vector<std::shared_ptr<Conn>> all;  // send() may drop a client, erasing it from conns_
            for (auto& [id, c] : conns_) all.push_back(c);
            for (auto& c : all) {
                Msg copy = m;
                send(c, std::move(copy));
            }
            eng->stop();
            io_.stop();
        });
    });
}

// A socket file already there: a live daemon keeps it (exit), a dead one's is removed.
bool check_socket_path(const std::string& path, std::string& err) {
    struct stat st{};
    if (lstat(path.c_str(), &st) != 0) return true;
    if (!S_ISSOCK(st.st_mode)) {
        err = path + " exists and is not a socket";
        return false;
    }
    // Non-blocking: a live daemon with a full backlog answers EAGAIN instead of blocking us.
    const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.c_str(), path.size());
    const int r = connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
    const int e = errno;
    close(s);
    if (r == 0 || e == EAGAIN) {
        err = "socket " + path + " is taken: another hcaemud is listening on it";
        return false;
    }
    if (e != ECONNREFUSED) {
        err = "socket " + path + " exists and cannot be checked: " + std::strerror(e);
        return false;
    }
    if (unlink(path.c_str()) != 0) {
        err = "cannot remove the stale socket " + path + ": " + std::strerror(errno);
        return false;
    }
    std::fprintf(stderr, "hcaemud: removed the stale socket %s (nobody listened on it)\n", path.c_str());
    return true;
}

// The command line into `o`: -1 to go on, else the exit status (0 after --help, 2 a bad argument).
int parse_options(int argc, char** argv, Options& o) {
    for (int i = 1; i < argc; ++i) {
        std::string err;
        const int t = tools::take_attach_option(argc, argv, i, o.att, err);
        if (t < 0) {
            std::fprintf(stderr, "hcaemud: %s\n", err.c_str());
            return 2;
        }
        if (t > 0) continue;
        const std::string a = argv[i];
        if (a == "--help" || a == "-h") {
            std::fputs(kHelp, stdout);
            std::fputs(tools::kAttachHelp, stdout);
            return 0;
        }
        auto value = [&](std::string& v) {
            if (i + 1 >= argc) return false;
            v = argv[++i];
            return true;
        };
        std::string v;
        if (a == "--socket" && value(v) && !v.empty() && v.size() < sizeof(sockaddr_un::sun_path)) {
            o.socket = v;
        } else if (uint32_t m = 0; a == "--socket-mode" && value(v) && parse_u32(v, m, 8) && m <= 0777) {
            o.mode = mode_t(m);
        } else if (a == "--socket-group" && value(v) && !v.empty()) {
            o.group = v;
        } else if (a == "--max-clients" && value(v) && parse_u32(v, o.max_clients) && o.max_clients > 0) {
        } else if (a == "--max-objects" && value(v) && parse_u32(v, o.max_objects) && o.max_objects > 0) {
        } else if (a == "--lcores" && value(v) && parse_u32(v, o.att.lcores) && o.att.lcores >= 1 && o.att.lcores <= 8) {
        } else {
            std::fprintf(stderr, "hcaemud: bad argument '%s'%s (see --help)\n", a.c_str(), v.empty() ? "" : (" " + v).c_str());
            return 2;
        }
    }
    if (o.att.eal.empty()) o.att.eal = kDefaultEal;
    if (o.att.ip.empty()) o.att.ip = kDefaultIp;
    o.att.inject_notes = true;  // rules may come at run time (hcaemu inject add)
    return -1;
}

int lcore_main(void* arg) {
    static_cast<Engine*>(arg)->run();
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    if (const int rc = parse_options(argc, argv, o); rc >= 0) return rc;

    std::string err;
    if (!check_socket_path(o.socket, err)) {
        std::fprintf(stderr, "hcaemud: %s\n", err.c_str());
        return 1;
    }
    // A log pipe whose reader is gone must not kill the daemon: its lines are dropped (log.hpp);
    // the sockets send with MSG_NOSIGNAL.
    signal(SIGPIPE, SIG_IGN);
    asio::io_context io;
    DCounters ctr;
    LogWriter logw(io, ctr);
    Server srv(io, ctr, logw, o);
    if (!srv.listen(err)) {
        std::fprintf(stderr, "hcaemud: %s\n", err.c_str());
        return 1;
    }
    auto att = tools::Attached::open(o.att, err);
    if (!att) {
        unlink(o.socket.c_str());
        std::fprintf(stderr, "hcaemud: %s\n", err.c_str());
        return 1;
    }
    // DPDK's lines from here on wait with the daemon's for stderr, on the io thread (log_line.hpp).
    route_dpdk_log([&io, &logw](std::string&& line) {
        asio::post(io, [&logw, l = std::move(line)]() mutable { logw.add(std::move(l)); });
    });
    Engine eng(*att, ctr, o.max_objects, [&srv](uint32_t client, Msg&& m) { srv.deliver(client, std::move(m)); });
    srv.set_engine(&eng);
    eng.set_note_wake([&io, &eng, &logw] { asio::post(io, [&eng, &logw] { logw.add(eng.take_notes()); }); });
    srv.start();

    // The data path on a worker lcore when the EAL has one, else on a thread of its own.
    const unsigned worker = rte_get_next_lcore(-1, 1, 0);
    const bool on_lcore = worker < RTE_MAX_LCORE && rte_eal_remote_launch(lcore_main, &eng, worker) == 0;
    std::thread th;
    std::atomic<int> thread_lcore{-2};  // the thread's lcore id once registered, -1 if refused
    std::string reg_error;              // why it was refused (written before thread_lcore)
    if (!on_lcore) {
        th = std::thread([&eng, &thread_lcore, &reg_error] {
            // An lcore id gives the thread the mempool's per-lcore cache (dpdk.hpp register_thread;
            // unregistered: the pool's ring took 19% of a sending daemon's samples at write_bw 64 KiB).
            const int id = port::register_thread(reg_error);
            thread_lcore.store(id);
            thread_lcore.notify_one();
            eng.run();
            if (id >= 0) port::unregister_thread();
        });
        thread_lcore.wait(-2);
    }
    const int tl = thread_lcore.load();
    const std::string where = on_lcore ? "lcore " + std::to_string(worker)
                              : tl >= 0 ? "a thread (lcore id " + std::to_string(tl) + ")"
                                        : "a thread (no lcore id: " + reg_error + ")";
    logw.add("hcaemud: serving " + o.socket + " on " + tools::gid_to_string(att->gid()) + " (GID index " +
             std::to_string(att->gid_index()) + "), data path on " + where + "\n");
    io.run();
    route_dpdk_log(nullptr);  // no io thread to wait on now
    eng.stop();
    if (on_lcore) rte_eal_wait_lcore(worker);
    else th.join();
    logw.add(eng.take_notes());  // lines queued after the io loop stopped (clients removed at the stop)
    unlink(o.socket.c_str());
    logw.add("hcaemud: stopped\n");
    logw.flush_now();  // what stderr takes now; never a hang at exit
    return 0;
}
