// One end of a vdev test (tests/scripts/check_vdev.py runs two of them): the DPDK port on a vdev
// from the EAL arguments, or a kernel AF_PACKET socket on an interface (packet(7)). A sender sends
// numbered request frames and checks each reply byte for byte; an echo checks each request byte for
// byte and replies. Both frames are functions of (sequence number, length), so either side knows
// exactly what it must receive. Lines on stdout tell the script what happened:
//   ready | link up | link down | streaming | result sent=N ok=N bad=N other=N ... (then exit)
//
//   vdev_node dpdk ROLE [--port NAME] [--mtu N] [options] -- EAL-ARGS...
//   vdev_node raw ROLE --iface NAME [--mtu N] [options]
// ROLE: send (--count N, --stream: then keep sending until killed) or echo (--count N frames, or
// --sessions K: until the link has gone down K times; a sender with --sessions K outlives K peers:
// after each link down it waits for the next peer, exchanges --count frames, streams with --stream,
// and after the K-th it exchanges --count frames and ends). Every loop ends after --seconds. A sender
// with --go-file PATH waits for PATH to exist before its first frame.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dpdk_port/dpdk.hpp"

extern "C" {
#include <rte_eal.h>
}

using namespace hcaemu;

namespace {

constexpr uint16_t kEtherType = 0x88b5;  // IEEE 802 local experimental EtherType 1
constexpr uint8_t kSenderMac[6] = {0x02, 0, 0, 0x18, 0, 0x01};
constexpr uint8_t kEchoMac[6] = {0x02, 0, 0, 0x18, 0, 0x02};
constexpr uint8_t kRequest = 1;
constexpr uint8_t kReply = 2;

// The one frame a (kind, seq, len) may be: MACs, EtherType, seq, kind, then a pattern.
void make_frame(uint8_t* f, uint8_t kind, uint32_t seq, uint32_t len) {
    std::memcpy(f, kind == kRequest ? kEchoMac : kSenderMac, 6);
    std::memcpy(f + 6, kind == kRequest ? kSenderMac : kEchoMac, 6);
    f[12] = uint8_t(kEtherType >> 8);
    f[13] = uint8_t(kEtherType);
    f[14] = uint8_t(seq >> 24);
    f[15] = uint8_t(seq >> 16);
    f[16] = uint8_t(seq >> 8);
    f[17] = uint8_t(seq);
    f[18] = kind;
    f[19] = 0;
    for (uint32_t i = 20; i < len; ++i) f[i] = uint8_t(seq * 31u + i * 7u + kind * 101u + (i >> 8));
}

uint32_t frame_seq(const uint8_t* f) {
    return uint32_t(f[14]) << 24 | uint32_t(f[15]) << 16 | uint32_t(f[16]) << 8 | f[17];
}

bool is_test_frame(const uint8_t* f, uint32_t len) {
    return len >= 20 && f[12] == uint8_t(kEtherType >> 8) && f[13] == uint8_t(kEtherType & 0xff);
}

// Frame lengths the sender cycles through: minimum, odd, around 1514 and up to mtu + 14.
std::vector<uint32_t> frame_sizes(uint32_t mtu) {
    std::vector<uint32_t> s{60, 61, 64, 127, 512, 1000, 1513, 1514};
    if (mtu > 1500) {
        s.push_back(1515);
        s.push_back(4000);
        s.push_back(mtu + 13);
        s.push_back(mtu + 14);
    }
    return s;
}

// What the node sends and receives through: the DPDK port, or a kernel packet socket.
class Link {
public:
    virtual ~Link() = default;
    virtual bool send(const uint8_t* f, uint32_t len) = 0;  // false: not taken now
    // Calls fn(data, len) for each frame received now; returns how many.
    template <class Fn>
    int receive(Fn&& fn) {
        return receive_impl([](void* ctx, const uint8_t* d, uint32_t l) { (*static_cast<Fn*>(ctx))(d, l); }, &fn);
    }
    virtual bool link_up() = 0;
    virtual std::string stats() = 0;

protected:
    virtual int receive_impl(void (*cb)(void*, const uint8_t*, uint32_t), void* ctx) = 0;
};

class DpdkLink final : public Link {
public:
    explicit DpdkLink(std::unique_ptr<port::DpdkPort> p) : p_(std::move(p)) {}
    bool send(const uint8_t* f, uint32_t len) override {
        port::Frame fr;
        if (!p_->alloc(fr)) return false;
        if (fr.cap < len) {
            std::fprintf(stderr, "mbuf of %u bytes for a frame of %u\n", fr.cap, len);
            std::exit(3);
        }
        std::memcpy(fr.data, f, len);
        fr.len = len;
        if (p_->tx_burst(&fr, 1) == 1) return true;
        p_->free(fr);
        return false;
    }
    int receive_impl(void (*cb)(void*, const uint8_t*, uint32_t), void* ctx) override {
        port::Frame in[32];
        const uint16_t n = p_->rx_burst(in, 32);
        for (uint16_t i = 0; i < n; ++i) {
            cb(ctx, in[i].data, in[i].len);
            p_->free(in[i]);
        }
        return n;
    }
    bool link_up() override { return p_->link_up(); }
    std::string stats() override {
        const auto s = p_->stats();
        const auto l = p_->link_stats();
        return "port_tx=" + std::to_string(s.tx_frames) + " port_rx=" + std::to_string(s.rx_frames) +
               " rx_dropped=" + std::to_string(s.rx_dropped) + " link_up_events=" + std::to_string(l.up_events) +
               " link_down_events=" + std::to_string(l.down_events) +
               " polls_while_down=" + std::to_string(l.polls_while_down) +
               " reconnects=" + std::to_string(l.reconnects) + " burst_faults=" + std::to_string(l.burst_faults) +
               " frames_lost_in_fault=" + std::to_string(l.frames_lost_in_fault);
    }
    port::DpdkPort& port() { return *p_; }

private:
    std::unique_ptr<port::DpdkPort> p_;
};

class RawLink final : public Link {
public:
    static std::unique_ptr<RawLink> open(const std::string& iface, std::string& err) {
        const unsigned idx = if_nametoindex(iface.c_str());
        if (idx == 0) {
            err = "no interface " + iface;
            return nullptr;
        }
        const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(kEtherType));
        if (fd < 0) {
            err = std::string("AF_PACKET socket: ") + std::strerror(errno);
            return nullptr;
        }
        sockaddr_ll sll{};
        sll.sll_family = AF_PACKET;
        sll.sll_protocol = htons(kEtherType);
        sll.sll_ifindex = int(idx);
        if (bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
            err = std::string("bind: ") + std::strerror(errno);
            ::close(fd);
            return nullptr;
        }
        auto r = std::unique_ptr<RawLink>(new RawLink());
        r->fd_ = fd;
        return r;
    }
    ~RawLink() override { ::close(fd_); }
    bool send(const uint8_t* f, uint32_t len) override {
        const ssize_t r = ::send(fd_, f, len, MSG_DONTWAIT);
        if (r == ssize_t(len)) {
            ++tx_;
            return true;
        }
        if (r < 0 && errno != EAGAIN && errno != ENOBUFS) {
            std::fprintf(stderr, "send %u bytes: %s\n", len, std::strerror(errno));
            std::exit(3);
        }
        return false;
    }
    int receive_impl(void (*cb)(void*, const uint8_t*, uint32_t), void* ctx) override {
        int n = 0;
        for (int i = 0; i < 32; ++i) {
            sockaddr_ll from{};
            socklen_t fl = sizeof from;
            const ssize_t r = recvfrom(fd_, buf_.data(), buf_.size(), MSG_DONTWAIT | MSG_TRUNC,
                                       reinterpret_cast<sockaddr*>(&from), &fl);
            if (r < 0) break;
            if (from.sll_pkttype == PACKET_OUTGOING) continue;  // our own frames, seen going out
            ++rx_;
            cb(ctx, buf_.data(), uint32_t(std::min<size_t>(size_t(r), buf_.size())));
            ++n;
        }
        return n;
    }
    bool link_up() override { return true; }
    std::string stats() override { return "sock_tx=" + std::to_string(tx_) + " sock_rx=" + std::to_string(rx_); }

private:
    RawLink() : buf_(65536) {}
    int fd_ = -1;
    std::vector<uint8_t> buf_;
    uint64_t tx_ = 0, rx_ = 0;
};

struct Options {
    std::string kind, role, port, iface, go_file;
    uint32_t mtu = 1500;
    uint32_t count = 100;
    uint32_t sessions = 0;
    uint32_t window = 8;
    double seconds = 20;
    bool stream = false;
    int lcore = 0;
    std::vector<std::string> eal;
};

void say(const std::string& s) {
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
}

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr, "vdev_node: %s\n", why.c_str());
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options o;
    if (argc < 3) usage("usage: vdev_node dpdk|raw send|echo [options] [-- EAL-ARGS]");
    o.kind = argv[1];
    o.role = argv[2];
    for (int i = 3; i < argc; ++i) {
        const std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) usage(a + " needs a value");
            return argv[++i];
        };
        if (a == "--") {
            for (++i; i < argc; ++i) o.eal.push_back(argv[i]);
        } else if (a == "--port") o.port = val();
        else if (a == "--iface") o.iface = val();
        else if (a == "--go-file") o.go_file = val();
        else if (a == "--mtu") o.mtu = uint32_t(std::stoul(val()));
        else if (a == "--count") o.count = uint32_t(std::stoul(val()));
        else if (a == "--sessions") o.sessions = uint32_t(std::stoul(val()));
        else if (a == "--window") o.window = uint32_t(std::stoul(val()));
        else if (a == "--seconds") o.seconds = std::stod(val());
        else if (a == "--lcore") o.lcore = std::stoi(val());
        else if (a == "--stream") o.stream = true;
        else usage("unknown option " + a);
    }
    if (o.role != "send" && o.role != "echo") usage("role must be send or echo");
    return o;
}

using Clock = std::chrono::steady_clock;

// Polls; after many empty polls in a row, yields the core a little (2 cores shared).
struct Idle {
    uint32_t empty = 0;
    void note(int got) {
        if (got > 0) {
            empty = 0;
        } else if (++empty > 2000) {
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }
};

int run_echo(Link& link, const Options& o) {
    const auto end = Clock::now() + std::chrono::duration<double>(o.seconds);
    uint64_t ok = 0, bad = 0, other = 0, replied = 0, downs = 0;
    std::vector<uint8_t> want(65536), reply(65536);
    bool up = link.link_up();
    say(up ? "link up" : "link down");
    Idle idle;
    std::deque<std::pair<uint32_t, uint32_t>> backlog;  // replies not yet taken by the port
    while (Clock::now() < end) {
        const bool now_up = link.link_up();
        if (now_up != up) {
            up = now_up;
            say(up ? "link up" : "link down");
            if (!up) {
                ++downs;
                backlog.clear();  // for a peer that is gone
                if (o.sessions && downs >= o.sessions) break;
            }
        }
        while (!backlog.empty()) {
            make_frame(reply.data(), kReply, backlog.front().first, backlog.front().second);
            if (!link.send(reply.data(), backlog.front().second)) break;
            backlog.pop_front();
            ++replied;
        }
        const int got = link.receive([&](const uint8_t* d, uint32_t len) {
            if (!is_test_frame(d, len)) {
                ++other;
                return;
            }
            const uint32_t seq = frame_seq(d);
            make_frame(want.data(), kRequest, seq, len);
            if (len > want.size() || std::memcmp(d, want.data(), len) != 0) {
                ++bad;
                if (bad <= 3) std::fprintf(stderr, "echo: bad request seq %u len %u\n", seq, len);
                return;
            }
            ++ok;
            backlog.emplace_back(seq, len);
        });
        idle.note(got);
        if (!o.sessions && ok >= o.count && backlog.empty()) break;
    }
    say("result echoed=" + std::to_string(replied) + " ok=" + std::to_string(ok) + " bad=" + std::to_string(bad) +
        " other=" + std::to_string(other) + " downs=" + std::to_string(downs) + " " + link.stats());
    const bool done = o.sessions ? downs >= o.sessions : ok >= o.count;
    return bad == 0 && done ? 0 : 1;
}

int run_send(Link& link, const Options& o) {
    const auto end = Clock::now() + std::chrono::duration<double>(o.seconds);
    const auto sizes = frame_sizes(o.mtu);
    std::vector<uint8_t> f(65536), want(65536);
    std::deque<std::pair<uint32_t, uint32_t>> outstanding;  // (seq, len), in order
    uint32_t next = 0;
    uint64_t ok = 0, bad = 0, other = 0;
    while (!link.link_up() && Clock::now() < end) {
        link.receive([&](const uint8_t*, uint32_t) { ++other; });  // a memif client connects while polled
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    say(link.link_up() ? "link up" : "link down");
    // The peer may need this port to exist before it can listen (net_tap creates the interface).
    while (!o.go_file.empty() && access(o.go_file.c_str(), F_OK) != 0 && Clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    bool streaming = false;
    Idle idle;
    auto last_progress = Clock::now();
    uint64_t downs = 0, session_ok = 0, session_bad = 0, session_sent = 0;
    while (Clock::now() < end) {
        if (o.sessions && !link.link_up()) {  // the peer went away: wait for the next one
            ++downs;
            say("link down");
            outstanding.clear();  // its replies died with it
            while (!link.link_up() && Clock::now() < end) {
                link.receive([&](const uint8_t*, uint32_t) { ++other; });  // lets the port reconnect
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
            if (!link.link_up()) break;
            say("link up");
            streaming = false;
            session_ok = session_bad = session_sent = 0;
            last_progress = Clock::now();
        }
        const bool last_session = o.sessions && downs >= o.sessions;
        const bool stream = o.stream && !last_session;
        while ((stream || session_sent < o.count) && outstanding.size() < o.window) {
            const uint32_t len = sizes[next % sizes.size()];
            make_frame(f.data(), kRequest, next, len);
            if (!link.send(f.data(), len)) break;
            outstanding.emplace_back(next, len);
            ++next;
            ++session_sent;
        }
        const int got = link.receive([&](const uint8_t* d, uint32_t len) {
            if (!is_test_frame(d, len)) {
                ++other;
                return;
            }
            if (outstanding.empty()) {
                ++bad;
                ++session_bad;
                return;
            }
            const auto [seq, wlen] = outstanding.front();
            outstanding.pop_front();
            make_frame(want.data(), kReply, seq, wlen);
            if (len != wlen || std::memcmp(d, want.data(), len) != 0) {
                ++bad;
                ++session_bad;
                if (bad <= 3)
                    std::fprintf(stderr, "send: bad reply: got seq %u len %u, want seq %u len %u\n", frame_seq(d), len,
                                 seq, wlen);
                return;
            }
            ++ok;
            ++session_ok;
            last_progress = Clock::now();
        });
        idle.note(got);
        if (!streaming && stream && session_ok >= o.count) {
            streaming = true;
            say("streaming ok=" + std::to_string(ok) + " bad=" + std::to_string(bad) + " session=" +
                std::to_string(downs));
        }
        if (!stream && session_ok + session_bad >= o.count) break;
        if (o.sessions && !link.link_up()) continue;
        if (Clock::now() - last_progress > std::chrono::seconds(5)) {
            std::fprintf(stderr, "send: no reply for 5 s (%zu outstanding, next seq %u)\n", outstanding.size(), next);
            break;
        }
    }
    say("result sent=" + std::to_string(next) + " ok=" + std::to_string(ok) + " bad=" + std::to_string(bad) +
        " other=" + std::to_string(other) + " downs=" + std::to_string(downs) + " " + link.stats());
    return bad == 0 && session_ok >= o.count && downs >= o.sessions ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    std::unique_ptr<Link> link;
    std::string err;
    if (o.kind == "dpdk") {
        auto args = port::default_eal_args(o.lcore);
        args.insert(args.end(), o.eal.begin(), o.eal.end());
        if (!port::eal_start(args, err)) {
            std::fprintf(stderr, "vdev_node: %s\n", err.c_str());
            return 3;
        }
        uint16_t id = 0;
        if (!port::find_port(o.port, id, err)) {
            std::fprintf(stderr, "vdev_node: %s\n", err.c_str());
            return 3;
        }
        port::DpdkPortConfig cfg;
        cfg.mtu = o.mtu;
        auto p = port::DpdkPort::open(id, cfg, err);
        if (!p) {
            std::fprintf(stderr, "vdev_node: %s\n", err.c_str());
            return 3;
        }
        say("ready port=" + std::to_string(id) + " driver=" + p->driver() + " mtu=" + std::to_string(p->mtu()) +
            " mtu_how=" + p->mtu_how());
        link = std::make_unique<DpdkLink>(std::move(p));
    } else if (o.kind == "raw") {
        link = RawLink::open(o.iface, err);
        if (!link) {
            std::fprintf(stderr, "vdev_node: %s\n", err.c_str());
            return 3;
        }
        say("ready iface=" + o.iface);
    } else {
        usage("kind must be dpdk or raw");
    }
    const int rc = o.role == "echo" ? run_echo(*link, o) : run_send(*link, o);
    link.reset();  // DpdkPort: stop, close, pool freed
    // No rte_eal_cleanup(): in DPDK 22.11 it unmaps EAL memory while the interrupt thread may still
    // walk its sources (a memif peer's socket): SIGSEGV in rte_intr_fd_get at exit, 1 run in 5
    // under load here. The hcaemu tools do not call it either; the process exit frees everything.
    return rc;
}
