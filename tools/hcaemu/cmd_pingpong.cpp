// hcaemu pingpong: ibv_rc_pingpong's exchange on an hcaemu HCA, so that it faces an unmodified
// ibv_rc_pingpong (rdma-core's libibverbs/examples) as server or as client. Same flags, same
// out-of-band messages on TCP, same RC QP attributes, same SEND ping-pong and the same output; in
// addition, every wait has a deadline and -c checks the whole buffer, not only a byte per page.
#include <arpa/inet.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tools/attach/attach.hpp"
#include "tools/hcaemu/cli.hpp"
#include "tools/hcaemu/cm_link.hpp"
#include "tools/libhcaemu/api.hpp"
#include "tools/hcaemu/oob.hpp"
#include "tools/libhcaemu/cm.hpp"
#include "tools/hcaemu/oob_tcp.hpp"
#include "tools/hcaemu/stop.hpp"

namespace hcaemu::tools {

namespace {

constexpr const char* kHelp =
    "usage: hcaemu pingpong [OPTIONS] --ip ADDR/LEN --eal \"EAL ARGS\"          server: waits for a client\n"
    "       hcaemu pingpong [OPTIONS] --ip ADDR/LEN --eal \"EAL ARGS\" HOST     client: connects to HOST\n"
    "       hcaemu pingpong [OPTIONS] --device unix:PATH [HOST]              the same on hcaemud's HCA\n"
    "\n"
    "ibv_rc_pingpong on an hcaemu HCA: swaps QP numbers, PSNs and GIDs with the peer over TCP as\n"
    "ibv_rc_pingpong does, connects an RC QP and ping-pongs SENDs of SIZE bytes ITERS times. It\n"
    "works against an unmodified ibv_rc_pingpong on any RoCE v2 device (e.g. Linux rxe). HOST is\n"
    "the peer's address for the TCP exchange (the kernel's), not its RoCE address.\n"
    "\n"
    "ibv_rc_pingpong's options:\n"
    "  -p, --port=PORT      TCP port of the exchange (default 18515)\n"
    "  -d, --ib-dev=DEV     accepted for compatibility (the device is this HCA)\n"
    "  -i, --ib-port=PORT   port of the device: only 1\n"
    "  -s, --size=SIZE      message size (default 4096)\n"
    "  -m, --mtu=SIZE       path MTU: 256, 512, 1024, 2048 or 4096 (default 1024)\n"
    "  -r, --rx-depth=DEP   receives posted at a time (default 500)\n"
    "  -n, --iters=ITERS    exchanges (default 1000)\n"
    "  -l, --sl=SL          service level (default 0)\n"
    "  -e, --events         wait for completion events instead of polling the CQ\n"
    "  -g, --gid-idx=IDX    local GID index (default: the index of --ip's address, 1 for IPv4)\n"
    "  -c, --chk            check the received data (as ibv_rc_pingpong -c: a 0 at the start of\n"
    "                       each page; here also 0x7b in every other byte)\n"
    "hcaemu's options:\n"
    "  -R, --rdma-cm        connect with rdma_cm (the IB CM on QP1), as perftest's -R: the server\n"
    "                       listens on PORT, the client connects to HOST:PORT where HOST is the\n"
    "                       peer's RoCE address; no TCP exchange (docs/cm.md)\n"
    "  --timeout SEC        give up when the peer is silent this long (default 30)\n"
    "  --stats              print the device's counters at the end (stderr)\n"
    "  -h, --help           this text\n"
    "\n";

constexpr uint64_t kRecvWrid = 1, kSendWrid = 2;  // as ibv_rc_pingpong numbers them
constexpr uint32_t kPage = 4096;                  // ibv_rc_pingpong marks one byte per page with -c
constexpr uint8_t kFill = 0x7b;                   // ... and fills its buffer with 0x7b

struct Args {
    uint16_t port = 18515;
    uint32_t size = 4096;
    Mtu mtu = Mtu::mtu1024;
    uint32_t rx_depth = 500;
    uint32_t iters = 1000;
    uint8_t sl = 0;
    bool events = false;
    int gidx = -1;
    bool chk = false;
    uint64_t timeout_s = 30;
    bool stats = false;
    bool rdma_cm = false;
    std::string server;
    AttachOptions attach;
    std::string device;        // --device SPEC
    std::string first_attach;  // the first attach option given (refused with a daemon)
};

std::optional<Mtu> mtu_from_bytes(uint64_t v) {
    switch (v) {
        case 256: return Mtu::mtu256;
        case 512: return Mtu::mtu512;
        case 1024: return Mtu::mtu1024;
        case 2048: return Mtu::mtu2048;
        case 4096: return Mtu::mtu4096;
        default: return std::nullopt;
    }
}

// Splits "--name=value" into name and value; short options take the next argument.
int parse_args(int argc, char** argv, Args& a) {
    for (int i = 1; i < argc; ++i) {
        std::string opt = argv[i];
        std::string err;
        const int d = take_device_option(argc, argv, i, a.device, err);
        if (d < 0) return usage_error("pingpong", err);
        if (d > 0) continue;
        const int t = take_attach_option(argc, argv, i, a.attach, err);
        if (t < 0) return usage_error("pingpong", err);
        if (t > 0) {
            if (a.first_attach.empty()) a.first_attach = opt.substr(0, opt.find('='));
            continue;
        }
        if (opt == "-h" || opt == "--help") {
            std::fputs(kHelp, stdout);
            std::fputs(kDeviceHelp, stdout);
            std::fputs(kAttachHelp, stdout);
            return -1;
        }
        std::string val;
        bool has_val = false;
        if (opt.rfind("--", 0) == 0 && opt.find('=') != std::string::npos) {
            val = opt.substr(opt.find('=') + 1);
            opt = opt.substr(0, opt.find('='));
            has_val = true;
        }
        auto value = [&](uint64_t lo, uint64_t hi, uint64_t& out) -> bool {
            if (!has_val) {
                if (i + 1 >= argc) return false;
                val = argv[++i];
            }
            const auto v = parse_uint(val, lo, hi);
            if (!v) return false;
            out = *v;
            return true;
        };
        uint64_t v = 0;
        const auto bad = [&](const char* what) { return usage_error("pingpong", opt + ": " + what); };
        if (opt == "-p" || opt == "--port") {
            if (!value(1, 65535, v)) return bad("needs a TCP port 1..65535");
            a.port = uint16_t(v);
        } else if (opt == "-d" || opt == "--ib-dev") {
            if (!has_val && i + 1 >= argc) return bad("needs a device name");
            if (!has_val) ++i;
        } else if (opt == "-i" || opt == "--ib-port") {
            if (!value(1, 1, v)) return bad("this HCA has one port: 1");
        } else if (opt == "-s" || opt == "--size") {
            if (!value(1, 1u << 30, v)) return bad("needs a size 1..1073741824");
            a.size = uint32_t(v);
        } else if (opt == "-m" || opt == "--mtu") {
            if (!value(256, 4096, v) || !mtu_from_bytes(v)) return bad("needs 256, 512, 1024, 2048 or 4096");
            a.mtu = *mtu_from_bytes(v);
        } else if (opt == "-r" || opt == "--rx-depth") {
            if (!value(2, 16384, v)) return bad("needs a depth 2..16384");
            a.rx_depth = uint32_t(v);
        } else if (opt == "-n" || opt == "--iters") {
            if (!value(1, 100'000'000, v)) return bad("needs a count 1..100000000");
            a.iters = uint32_t(v);
        } else if (opt == "-l" || opt == "--sl") {
            if (!value(0, 15, v)) return bad("needs a service level 0..15");
            a.sl = uint8_t(v);
        } else if (opt == "-e" || opt == "--events") {
            a.events = true;
        } else if (opt == "-g" || opt == "--gid-idx") {
            if (!value(0, 255, v)) return bad("needs a GID index 0..255");
            a.gidx = int(v);
        } else if (opt == "-c" || opt == "--chk") {
            a.chk = true;
        } else if (opt == "--timeout") {
            if (!value(1, 3600, v)) return bad("needs seconds 1..3600");
            a.timeout_s = v;
        } else if (opt == "--stats") {
            a.stats = true;
        } else if (opt == "-R" || opt == "--rdma-cm") {
            a.rdma_cm = true;
        } else if (opt == "-o" || opt == "--odp" || opt == "-t" || opt == "--ts") {
            return bad("on-demand paging and completion timestamps are not modelled");
        } else if (!opt.empty() && opt[0] == '-') {
            return usage_error("pingpong", "unknown option '" + opt + "'");
        } else if (a.server.empty()) {
            a.server = opt;
        } else {
            return usage_error("pingpong", "one server name only ('" + a.server + "', then '" + opt + "')");
        }
    }
    if (a.rx_depth < 2) a.rx_depth = 2;
    return 0;
}

// --stats: the device's counters that are not zero, one "name value" a line, on stderr.
void print_stats(api::Context& ctx) {
    api::Stats st;
    if (ctx.read_stats(st) != Status::ok) return;
    for (const auto& [n, v] : st.device)
        if (v) std::fprintf(stderr, "%-28s %llu\n", n.c_str(), static_cast<unsigned long long>(v));
    for (const auto& [n, v] : st.link)  // --conform: the monitor's counts per rule
        if (v && n.rfind("conform_", 0) == 0) std::fprintf(stderr, "%-28s %llu\n", n.c_str(), static_cast<unsigned long long>(v));
    print_inject_stats(ctx);
}

// inet_ntop(AF_INET6) spelling, as ibv_rc_pingpong prints a GID (::ffff:a.b.c.d for IPv4).
std::string gid_text(const pkt::Ip6& g) {
    return pkt::is_ipv4_mapped(g) ? "::ffff:" + gid_to_string(g) : gid_to_string(g);
}

class Pingpong {
public:
    Pingpong(api::Context& ctx, const Args& a) : ctx_(ctx), a_(a) {}
    // The objects go before the memory they use.
    ~Pingpong() {
        qp_.reset();
        cq_.reset();
        chan_.reset();
        mr_.reset();
        pd_.reset();
        if (buf_.data) ctx_.free_buffer(buf_);
    }
    Pingpong(const Pingpong&) = delete;
    Pingpong& operator=(const Pingpong&) = delete;

    int run() {
        api::Context& dev = ctx_;
        auto b = dev.alloc_buffer(a_.size);
        if (!b.ok()) return fail("Couldn't allocate work buf.");
        buf_ = b.value;
        std::memset(buf_.data, kFill, buf_.size);
        auto pd = dev.alloc_pd();
        if (!pd.ok()) return fail("Couldn't allocate PD");
        pd_ = std::move(pd.value);
        auto mr = dev.reg_mr(*pd_, buf_.data, buf_.size, access::local_write);
        if (!mr.ok()) return fail("Couldn't register MR");
        mr_ = std::move(mr.value);
        if (a_.events) {
            auto ch = dev.create_comp_channel();
            if (!ch.ok()) return fail("Couldn't create completion channel");
            chan_ = std::move(ch.value);
        }
        auto cq = dev.create_cq(int(a_.rx_depth + 1), chan_.get());
        if (!cq.ok()) return fail("Couldn't create CQ");
        cq_ = std::move(cq.value);
        api::QpInitAttr ia;
        ia.send_cq = cq_.get();
        ia.recv_cq = cq_.get();
        ia.qp_type = QpType::rc;
        ia.cap = {1, a_.rx_depth, 1, 1, 0};
        auto qp = dev.create_qp(*pd_, ia);
        if (!qp.ok()) return fail("Couldn't create QP");
        qp_ = std::move(qp.value);
        QpAttr init;
        init.qp_state = QpState::init;
        init.port_num = 1;
        if (!qp_->modify(init, qp_attr::state | qp_attr::pkey_index | qp_attr::port | qp_attr::access_flags).ok())
            return fail("Failed to modify QP to INIT");
        routs_ = post_recv(a_.rx_depth);
        if (routs_ < a_.rx_depth) return fail("Couldn't post receive (" + std::to_string(routs_) + ")");
        if (a_.events && cq_->req_notify(false) != Status::ok) return fail("Couldn't request CQ notification");

        const int gidx = a_.gidx >= 0 ? a_.gidx : ctx_.gid_index();
        GidEntry ge;
        if (dev.query_gid(1, gidx, ge) != Status::ok) return fail("can't read sgid of index " + std::to_string(gidx));
        gidx_ = uint8_t(gidx);
        oob::PingpongDest me;
        me.qpn = qp_->qpn();
        me.psn = std::random_device{}() & 0xffffff;
        me.gid = ge.gid;
        my_psn_ = me.psn;
        if (a_.rdma_cm) {  // the local line once the CM has chosen the PSN
            if (!(cm_ = ctx_.cm())) return fail("this device has no connection manager (rdma_cm)");
        } else std::printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", me.lid, me.qpn, me.psn,
                    gid_text(me.gid).c_str());
        std::fflush(stdout);

        oob::PingpongDest rem;
        if (a_.rdma_cm) {  // the CM chooses the PSNs, resolves and connects (docs/cm.md)
            if (const int r = cm_connect(me, rem)) return r;
            std::printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", rem.lid, rem.qpn, rem.psn,
                        gid_text(rem.gid).c_str());
            std::fflush(stdout);
            const int r = loop();
            cm_disconnect();
            return r;
        }
        if (const int r = a_.server.empty() ? server_exchange(me, rem) : client_exchange(me, rem)) return r;
        std::printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", rem.lid, rem.qpn, rem.psn,
                    gid_text(rem.gid).c_str());
        std::fflush(stdout);
        if (!a_.server.empty() && connect(rem)) return 1;
        return loop();
    }

private:
    // After SIGINT/SIGTERM the one message is cmd_pingpong's "interrupted by".
    int fail(const std::string& msg) {
        if (!stop_requested()) std::fprintf(stderr, "%s\n", msg.c_str());
        return kExitFail;
    }

    uint32_t post_recv(uint32_t n) {
        Sge sge{uint64_t(uintptr_t(buf_.data)), a_.size, mr_->lkey()};
        RecvWr wr;
        wr.wr_id = kRecvWrid;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        uint32_t i = 0;
        for (; i < n; ++i) {
            const RecvWr* bad = nullptr;
            if (!ok(qp_->post_recv(&wr, &bad))) break;
        }
        return i;
    }
    static bool ok(Status s) { return s == Status::ok; }

    bool post_send() {
        Sge sge{uint64_t(uintptr_t(buf_.data)), a_.size, mr_->lkey()};
        SendWr wr;
        wr.wr_id = kSendWrid;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = WrOpcode::send;
        wr.send_flags = send_flag::signaled;
        const SendWr* bad = nullptr;
        return ok(qp_->post_send(&wr, &bad));
    }

    // Resolves the peer's MAC (ARP or ND) and moves the QP to RTR and RTS with ibv_rc_pingpong's
    // attributes.
    int connect(const oob::PingpongDest& rem) {
        std::string err;
        if (!ctx_.resolve(rem.gid, a_.timeout_s * 1000, err)) return fail("Couldn't reach the remote QP's address: " + err);
        QpAttr a;
        a.qp_state = QpState::rtr;
        a.path_mtu = a_.mtu;
        a.dest_qp_num = rem.qpn;
        a.rq_psn = rem.psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.dgid = rem.gid;
        a.ah_attr.hop_limit = 1;  // ibv_rc_pingpong's GRH hop limit
        a.ah_attr.sgid_index = gidx_;
        a.ah_attr.sl = a_.sl;
        if (!qp_->modify(a, qp_attr::state | qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn |
                               qp_attr::max_dest_rd_atomic | qp_attr::min_rnr_timer)
                 .ok())
            return fail("Failed to modify QP to RTR");
        a.qp_state = QpState::rts;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = my_psn_;
        a.max_rd_atomic = 1;
        if (!qp_->modify(a, qp_attr::state | qp_attr::timeout | qp_attr::retry_cnt | qp_attr::rnr_retry |
                               qp_attr::sq_psn | qp_attr::max_qp_rd_atomic)
                 .ok())
            return fail("Failed to modify QP to RTS");
        return 0;
    }

    // perftest -R's order (CmLink): the server listens and accepts, the client resolves, connects
    // and establishes; the QP's attributes all come from the CM.
    int cm_connect(oob::PingpongDest& me, oob::PingpongDest& rem) {
        sockaddr_storage ss{};
        if (!CmLink::address(a_.server, a_.port, ss))
            return fail("-R: HOST must be the peer's RoCE address (IPv4 or IPv6), not '" + a_.server + "'");
        link_ = std::make_unique<CmLink>(ctx_, *cm_, a_.timeout_s * 1000);
        api::CmConnParam p;
        p.responder_resources = p.initiator_depth = 1;
        std::string err;
        if (a_.server.empty()) {
            uint32_t listen_id = 0;
            if (!link_->listen(ss, 1, listen_id, err)) return fail(err);
            const bool ok = link_->accept(listen_id, *qp_, p, cm_id_, rem.qpn, err);
            link_->destroy(listen_id);  // one client: the listener goes
            if (!ok) return fail(err);
        } else {
            int rejected = 0;
            if (!link_->connect(ss, *qp_, p, cm_id_, rem.qpn, rejected, err)) return fail(err);
        }
        link_->psns(cm_id_, me.psn, rem.psn);
        my_psn_ = me.psn;
        api::CmIdInfo info;
        (void)link_->info(cm_id_, info);
        rem.gid = info.dgid;
        me.gid = info.sgid;
        std::printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", me.lid, me.qpn, me.psn,
                    gid_text(me.gid).c_str());
        return 0;
    }
    // After the test: DREQ (or the DREP to the peer's), then the disconnected event, bounded.
    void cm_disconnect() {
        if (!link_ || !cm_id_) return;
        link_->disconnect(cm_id_);
        cm_id_ = 0;
    }

    // The server reads the client's address, connects, answers with its own, then waits for
    // "done" (ibv_rc_pingpong's order).
    int server_exchange(const oob::PingpongDest& me, oob::PingpongDest& rem) {
        std::string err;
        const uint64_t ms = a_.timeout_s * 1000;
        auto c = OobConn::accept(a_.port, ms, err, [this] { return ctx_.poll() != 0; });
        if (!c) return fail("Couldn't listen to port " + std::to_string(a_.port) + ": " + err);
        std::array<uint8_t, oob::kPingpongLen> msg{};
        if (!c->read_exact(msg, ms, err)) return fail("Couldn't read remote address: " + err);
        if (const auto e = oob::parse(msg, rem); e != oob::OobError::ok)
            return fail(std::string("the client sent no ibv_rc_pingpong address (") + oob::name(e) + ")");
        if (connect(rem)) return fail("Couldn't connect to remote QP");
        const auto mine = oob::format(me);
        std::array<uint8_t, 5> done{};
        if (!c->write_all(mine, ms, err) || !c->read_exact(done, ms, err))
            return fail("Couldn't send/recv local address: " + err);
        if (std::memcmp(done.data(), "done", 5) != 0) return fail("the client did not finish the exchange with \"done\"");
        return 0;
    }

    int client_exchange(const oob::PingpongDest& me, oob::PingpongDest& rem) {
        std::string err;
        const uint64_t ms = a_.timeout_s * 1000;
        auto c = OobConn::connect(a_.server, a_.port, ms, err, [this] { return ctx_.poll() != 0; });
        if (!c) return fail("Couldn't connect to " + a_.server + ":" + std::to_string(a_.port) + ": " + err);
        const auto mine = oob::format(me);
        if (!c->write_all(mine, ms, err)) return fail("Couldn't send local address: " + err);
        std::array<uint8_t, oob::kPingpongLen> msg{};
        if (!c->read_exact(msg, ms, err)) return fail("Couldn't read remote address: " + err);
        if (const auto e = oob::parse(msg, rem); e != oob::OobError::ok)
            return fail(std::string("the server sent no ibv_rc_pingpong address (") + oob::name(e) + ")");
        static constexpr uint8_t kDone[5] = {'d', 'o', 'n', 'e', 0};
        if (!c->write_all(kDone, ms, err)) return fail("Couldn't write done: " + err);
        return 0;
    }

    // -c: ibv_rc_pingpong's client puts a 0 at the start of every page of a buffer of 0x7b, and
    // the server sends back what it received.
    bool check(uint32_t iter) const {
        for (uint32_t i = 0; i < a_.size; ++i) {
            const uint8_t want = i % kPage == 0 ? 0 : kFill;
            if (buf_.data[i] != want) {
                std::fprintf(stderr, "Invalid data in byte %u after receive %u: 0x%02x, expected 0x%02x\n", i, iter,
                             buf_.data[i], want);
                return false;
            }
        }
        return true;
    }

    // Waits for at least one completion: polls the engine (and with -e, waits for the CQ event
    // first). -2 when none came within --timeout seconds, however many frames moved meanwhile (a
    // peer answering RNR NAK forever, or sending frames that complete nothing, is no progress);
    // -3 on SIGINT/SIGTERM.
    int wait_wc(std::span<Wc> wc) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(a_.timeout_s);
        for (;;) {
            const size_t moved = ctx_.poll();
            if (a_.events) {
                CqEvent ev;
                if (chan_->get_cq_event(ev)) {
                    ++events_;
                    if (cq_->req_notify(false) != Status::ok) return -1;
                    const int n = cq_->poll(wc);
                    if (n) return n;
                }
            } else if (const int n = cq_->poll(wc)) {
                return n;
            }
            if (std::chrono::steady_clock::now() > end) return -2;
            if (stop_requested()) return -3;
            if (!moved) std::this_thread::yield();
        }
    }

    int loop() {
        pending_ = kRecvWrid;
        if (!a_.server.empty()) {
            if (a_.chk)
                for (uint32_t i = 0; i < a_.size; i += kPage) buf_.data[i] = 0;
            if (!post_send()) return fail("Couldn't post send");
            pending_ |= kSendWrid;
        }
        const auto start = std::chrono::steady_clock::now();
        uint32_t rcnt = 0, scnt = 0;
        std::array<Wc, 2> wc;
        while (rcnt < a_.iters || scnt < a_.iters) {
            const int n = wait_wc(wc);
            if (n == -1) return fail("Couldn't request CQ notification");
            if (n == -3) return kExitFail;
            if (n == -2)
                return fail("no completion for " + std::to_string(a_.timeout_s) + " s (sent " + std::to_string(scnt) +
                            ", received " + std::to_string(rcnt) + " of " + std::to_string(a_.iters) + ")");
            for (int i = 0; i < n; ++i) {
                const Wc& w = wc[size_t(i)];
                if (w.status != WcStatus::success) {
                    std::fprintf(stderr, "Failed status %s (%d) for wr_id %d\n", name(w.status), int(w.status),
                                 int(w.wr_id));
                    return fail("parse WC failed " + std::to_string(n));
                }
                if (w.wr_id == kSendWrid) {
                    ++scnt;
                } else if (w.wr_id == kRecvWrid) {
                    if (w.byte_len != a_.size)
                        return fail("received " + std::to_string(w.byte_len) + " bytes, expected " +
                                    std::to_string(a_.size));
                    if (a_.chk && !check(rcnt)) return kExitFail;
                    if (--routs_ <= 1) {
                        routs_ += post_recv(a_.rx_depth - routs_);
                        if (routs_ < a_.rx_depth) return fail("Couldn't post receive (" + std::to_string(routs_) + ")");
                    }
                    ++rcnt;
                } else {
                    return fail("Completion for unknown wr_id " + std::to_string(w.wr_id));
                }
                pending_ &= ~w.wr_id;
                if (scnt < a_.iters && !pending_) {
                    if (!post_send()) return fail("Couldn't post send");
                    pending_ = kRecvWrid | kSendWrid;
                }
            }
        }
        const double usec =
            double(std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count());
        const long long bytes = (long long)a_.size * a_.iters * 2;
        std::printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1e6, double(bytes) * 8. / usec);
        std::printf("%u iters in %.2f seconds = %.2f usec/iter\n", a_.iters, usec / 1e6, usec / a_.iters);
        if (a_.chk) std::printf("data check: %u messages of %u bytes received as sent\n", rcnt, a_.size);
        cq_->ack_events(events_);
        // Let the last ACKs leave before the QP goes away (the peer may still be waiting for one),
        // and no longer: polling after the peer has gone is pointless (and a net_memif peer's
        // disconnect races with a poll inside the PMD in DPDK 22.11).
        const auto drain_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
        while (ctx_.busy() && std::chrono::steady_clock::now() < drain_end) ctx_.poll();
        // (DpdkPort::close() lets a net_memif peer read the last frames before disconnecting.)
        return kExitOk;
    }

    api::Context& ctx_;
    const Args& a_;
    api::Buffer buf_;  // from the device (a daemon DMAs it in place); freed after the objects
    std::unique_ptr<api::Pd> pd_;
    std::unique_ptr<api::Mr> mr_;
    std::unique_ptr<api::CompChannel> chan_;  // -e only
    std::unique_ptr<api::Cq> cq_;
    std::unique_ptr<api::Qp> qp_;
    uint32_t routs_ = 0;
    uint64_t pending_ = 0;
    uint32_t events_ = 0;
    uint32_t my_psn_ = 0;
    api::Cm* cm_ = nullptr;
    std::unique_ptr<CmLink> link_;
    uint32_t cm_id_ = 0;
    uint8_t gidx_ = 1;
};

}  // namespace

int cmd_pingpong(int argc, char** argv) {
    Args a;
    if (const int r = parse_args(argc, argv, a)) return r < 0 ? kExitOk : r;
    if (const std::string c = device_conflict(a.device, a.first_attach); !c.empty()) return usage_error("pingpong", c);
    const bool local = a.device.empty() || a.device == "local";
    if (local && a.attach.ip.empty()) return usage_error("pingpong", "--ip ADDR/LEN is required (this HCA's address)");
    // SIGINT/SIGTERM: every wait returns, the objects and the port close as on any exit.
    install_stop_handlers();
    std::string err;
    auto ctx = api::open_device(a.device, a.attach, err);
    if (!ctx) {
        if (stop_requested()) return report_stop("pingpong");
        std::fprintf(stderr, "hcaemu pingpong: %s\n", err.c_str());
        return kExitFail;
    }
    int r = 0;
    {
        Pingpong pp(*ctx, a);
        r = pp.run();
    }
    if (r && stop_requested()) return report_stop("pingpong");
    if (a.stats) print_stats(*ctx);
    return r;
}

}  // namespace hcaemu::tools
