// `hcaemu perf`: the out-of-band protocol and the test loops (see perf.hpp).
//
// The exchange, as perftest 6.06 runs it (each message both ways, the client writing first; the
// counts match ../shared/captures/rxe/oob_exchange_tcp18515.pcap):
//   version (16 B), cycle buffer (4 B), cache line (4 B), MTU (2 B),
//   QP information: for the latency tests once for QP 0; then once per QP (the data), once more
//   per QP, then a barrier after RTR/RTS;
//   BW, one-sided: the client runs, then a barrier (the server waited on it), the five results;
//   send BW: the server posts receives, a barrier, both run (and a barrier after each size of -a);
//   the close: a barrier, then "done" each way.
// -R (perftest's -R, with its -z): the same messages, each one SEND on an rdma_cm-connected RC QP
// (CmStream), the QP information as perftest's 56-byte struct pingpong_dest, no "done"; after
// the MTU a barrier, the test's QPs connected by rdma_cm, a barrier (create_rdma_cm_connection).
// -D (perftest 6.06, as rxe ran it against itself in the interop guest): the exchange is the one
// of -n (one-sided BW: the client's results go to the server, which prints them; send BW, write and
// send latency: each side prints its own row); each side times itself from the start of its loop
// (send BW's server: from its first receive) and stops when its time is over, without waiting for
// the peer. Only the middle of the run counts: perftest_resources.c's catch_alarm goes from
// START_STATE to SAMPLE_STATE after `margin` = D/4 whole seconds, to STOP_SAMPLE_STATE after
// D - 2*margin more, to END_STATE after margin more; the iterations completed in SAMPLE_STATE and
// its length make the row (BW: peak 0.00; latency: t_avg = length/iterations, halved for the
// ping-pongs, and tps = iterations/length). write_lat's ping-pong ends with no closing exchange at
// all, send_lat's with the barrier and "done".
// UD (send tests only, perftest_resources.c): Q_Key 0x11111111 (DEF_QKEY) on every QP and in every
// SEND, which goes to the QPN the peer's QP information gave, through an AH built from its GID;
// receives take size + 40 bytes, the GRH first (IBTA 11.4.1.1), so that the payload lands on the
// next cache line of the destination block.
#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "dpdk_port/clock.hpp"
#include "dpdk_port/dpdk.hpp"
#include "tools/hcaemu/cm_link.hpp"
#include "tools/hcaemu/oob.hpp"
#include "tools/hcaemu/oob_tcp.hpp"
#include "tools/hcaemu/perf.hpp"
#include "tools/hcaemu/stop.hpp"

namespace hcaemu::tools::perf {

namespace {

constexpr const char* kLine = "---------------------------------------------------------------------------------------\n";
constexpr uint32_t kCycleBuffer = 4096;  // the page size, as perftest sends it
constexpr uint32_t kCacheLine = 64;
constexpr uint32_t kMaxAllSize = 1u << 23;  // -a: 2^1 .. 2^23
constexpr uint32_t kDefQkey = 0x11111111;   // perftest's DEF_QKEY
constexpr uint32_t kGrhLen = 40;            // a UD receive's GRH (IBTA 11.4.1.1; perftest's UD_ADDITION)
// A WR's wr_id: the QP's index in its low kQpBits (-q is at most kMaxQps), its count (a send) or
// its --dump slot (a receive) above.
constexpr uint32_t kQpBits = 16;
constexpr uint64_t kQpMask = (uint64_t(1) << kQpBits) - 1;
static_assert(kMaxQps <= kQpMask + 1);

// perftest reads the cycle counter (get_cycles) per WR; so do we: the TSC at the rate the EAL
// measured (steady_clock when this process has no EAL, as a daemon's client).
uint64_t now_ns() {
    static const port::TscClock clock = [] {
        port::TscClock c;
        c.start(port::tsc_hz());
        return c;
    }();
    return clock.now_ns();
}

const char* verb_name(Verb v) {
    static const char* const kNames[] = {"Send", "RDMA_Write", "RDMA_Read", "Atomic"};
    return kNames[size_t(v)];
}

Mtu mtu_enum(uint32_t bytes) {
    return bytes >= 4096 ? Mtu::mtu4096 : bytes >= 2048 ? Mtu::mtu2048 : bytes >= 1024 ? Mtu::mtu1024
         : bytes >= 512 ? Mtu::mtu512 : Mtu::mtu256;
}

class Session {
public:
    Session(const Options& o, Env& env, OobStream& conn, std::string& err)
        : o_(o), env_(env), ctx_(*env.ctx), conn_(conn), err_(err), client_(!o.server.empty()), nq_(o.num_qps) {}
    // The objects go before the memory they use.
    ~Session() {
        if (env_.cm)
            for (const uint32_t id : cm_ids_) env_.cm->destroy(id);
        ahs_.clear();
        qps_.clear();
        cq_.reset();
        mr_.reset();
        pd_.reset();
        if (mem_.data) ctx_.free_buffer(mem_);
    }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    int run();
    // -R: DREQ / DREP on every data connection (bounded), before the QPs go.
    void cm_disconnect() {
        if (!env_.cm) return;
        for (uint32_t& id : cm_ids_)
            if (id) env_.cm->disconnect(std::exchange(id, 0));
    }
    // --dump: PREFIX.json and PREFIX.bin (see write_dump); `rc` is the run's exit status.
    bool write_dump(int rc);

private:
    // ---- output ----
    void out(const std::string& s) {
        std::fputs(s.c_str(), env_.out);
        std::fflush(env_.out);
    }
    bool fail(const std::string& e) {
        err_ = e;
        return false;
    }

    // ---- the out-of-band exchange ----
    // While waiting for the peer's message, the HCA keeps turning (it answers the peer's
    // requests): flat out while there is traffic; once it has been quiet for 1 ms, the wait may
    // nap (OobConn sleeps on its socket when this says nothing was done).
    bool idle() {
        const uint64_t t = now_ns();
        if (engine_turn()) last_busy_ns_ = t;
        return t - last_busy_ns_ < 1'000'000;
    }
    uint64_t last_busy_ns_ = 0;
    // One engine turn; with --stats, the gap since the previous turn of the same wait is measured (Env).
    size_t engine_turn() {
        if (!o_.stats) return ctx_.poll();
        const uint64_t t = now_ns();
        if (last_turn_ns_ && t - last_turn_ns_ > env_.max_turn_gap_ns) env_.max_turn_gap_ns = t - last_turn_ns_;
        last_turn_ns_ = t;
        const size_t moved = ctx_.poll();
        env_.load.turn(t, now_ns(), moved);
        return moved;
    }
    // A test phase starts: --stats' engine load, and its turns step by step (in-process)
    void load_reset() {
        env_.load = {};
        if (o_.stats) (void)ctx_.profile_turns(true);
    }
    uint64_t last_turn_ns_ = 0;
    // `run_wait`: the peer runs its test before it answers (one-sided BW, read and atomic
    // latency: the server waits for the client's run), so with -D the wait takes its time too
    bool xchg(std::span<const uint8_t> mine, std::span<uint8_t> theirs, const char* what, bool run_wait = false) {
        std::string e;
        last_turn_ns_ = 0;  // the gap before this wait is setup, not a stall
        const uint64_t rd = o_.oob_timeout_ms + (run_wait && timed_ ? uint64_t(o_.duration) * 1000 : 0);
        bool ok = client_ ? conn_.write_all(mine, o_.oob_timeout_ms, e) && conn_.read_exact(theirs, rd, e)
                          : conn_.read_exact(theirs, rd, e) && conn_.write_all(mine, o_.oob_timeout_ms, e);
        if (!ok) return fail(std::string("out-of-band exchange (") + what + "): " + e);
        return true;
    }
    bool check(oob::OobError e, const char* what) {
        if (e == oob::OobError::ok) return true;
        return fail(std::string("the peer's ") + what + " message is not perftest's: " + oob::name(e));
    }
    // The 108-byte QP information: the data when `into` is given, else a barrier.
    // -R: perftest's struct pingpong_dest as it is (56 bytes), see oob.hpp.
    bool qp_info(size_t q, oob::PerftestQpInfo* into, bool run_wait = false) {
        oob::PerftestQpInfo x;
        if (env_.cm) {
            std::array<uint8_t, oob::kPerftestCmDestLen> t{};
            if (!xchg(oob::format_cm(q < mine_.size() ? mine_[q] : oob::PerftestQpInfo{}), t, "QP information", run_wait))
                return false;
            if (!check(oob::parse_cm(t, x), "QP information")) return false;
        } else {
            std::array<uint8_t, oob::kPerftestQpInfoLen> t{};
            if (!xchg(oob::format(mine_[q]), t, "QP information", run_wait)) return false;
            if (!check(oob::parse(t, x), "QP information")) return false;
        }
        if (into) *into = x;
        return true;
    }
    // -R (perftest's create_rdma_cm_connection): a barrier, every QP connected by rdma_cm, a barrier.
    bool cm_connect();
    std::vector<uint32_t> cm_ids_;
    bool barrier(bool run_wait = false) { return qp_info(0, nullptr, run_wait); }
    bool handshake_start();
    bool ud_size();
    bool results(const BwReport& mine, BwReport& theirs);
    bool close(bool eof_ok, bool run_wait = false);

    // ---- resources ----
    bool setup();
    bool connect(size_t q);
    uint8_t* src(size_t q) { return mem_.data + q * block_; }
    uint8_t* dst(size_t q) { return mem_.data + (nq_ + q) * block_; }
    // where a SEND's payload lands: UD puts the GRH in the 40 bytes before it
    uint8_t* sink(size_t q) { return dst(q) + (ud_ ? cache_line_ : 0); }
    // --dump on a SEND receiver: receive i lands in slot i % rx_depth of a ring after the blocks;
    // on a READ requester, READ i in slot i % tx_depth. So a message stays where it landed until
    // its completion is recorded: a slot is used again only after the WR rx_depth (tx_depth)
    // before had completed. A slot is zeroed before each use: the peer sends the same bytes again
    // and again, so a stale slot would hold the right ones for a message that never landed.
    // (Without --dump they all land in one block, the walk of perftest.)
    uint8_t* ring(size_t q, uint64_t slot) { return mem_.data + 2 * nq_ * block_ + (q * ring_n_ + slot) * slot_len_; }
    uint64_t addr(const uint8_t* p) const { return reinterpret_cast<uintptr_t>(p); }
    bool post_recv(size_t q);
    // Takes every completion; false on an error completion.
    bool drain_cq();
    // Turns the engine and the CQ until cond(), `deadline` (true: the caller sees cond() false) or a
    // stall of oob_timeout_ms (false, with err_).
    template <class Cond>
    bool wait(Cond cond, const char* what, uint64_t deadline = UINT64_MAX);

    // ---- -D: perftest's run window (see the top of this file) ----
    struct Window {
        uint64_t sample_begin = 0, sample_end = 0, end = 0;
    };
    void window_start(uint64_t t) {
        constexpr uint64_t kSec = 1'000'000'000ull;
        const uint64_t margin = o_.duration / 4;
        win_.sample_begin = t + margin * kSec;
        win_.sample_end = win_.sample_begin + (o_.duration - 2 * margin) * kSec;
        win_.end = win_.sample_end + margin * kSec;
        sample_sent_ = sample_recvd_ = 0;
        win_on_ = true;
    }
    uint64_t deadline() const { return timed_ ? win_.end : UINT64_MAX; }
    bool over() const { return now_ns() >= win_.end; }
    uint64_t sample_ns() const { return win_.sample_end - win_.sample_begin; }

    // ---- the tests ----
    void print_info();
    void print_dest(const oob::PerftestQpInfo& d, bool local);
    bool bw_client(uint64_t size, BwReport& rep);
    bool send_bw_server(uint64_t size, BwReport& rep);
    SendWr lat_begin(uint64_t size, Sge& sge);
    bool write_lat(uint64_t size);
    bool send_lat(uint64_t size);
    bool read_atomic_lat(uint64_t size);
    bool verify(uint64_t size, uint64_t peer_iters);
    bool verify_bytes(const uint8_t* p, uint64_t n, size_t q, uint64_t skip_last, uint64_t base);
    bool verify_grh(size_t q);
    // --dump: one record (op, remote VA, the bytes); no allocation, the space was reserved
    void record(char op, uint64_t remote_va, const uint8_t* p, uint64_t len);
    void record_wr(size_t q, uint64_t n);
    void fill_wr(size_t q, uint64_t size, SendWr& wr, Sge& sge);
    // BW tests walk through the cycle buffer as perftest does: message k of a QP goes to offset
    // (k % slots) * inc at both ends (inc: the size rounded up to the cache line), when a message
    // is at most half the cycle buffer; else always to offset 0.
    uint64_t inc(uint64_t size) const { return (size + cache_line_ - 1) / cache_line_ * cache_line_; }
    uint64_t slots(uint64_t size) const { return size <= cycle_buffer_ / 2 ? cycle_buffer_ / inc(size) : 1; }

    const Options& o_;
    Env& env_;
    api::Context& ctx_;
    OobStream& conn_;
    std::string& err_;
    const bool client_;
    const size_t nq_;
    const bool ud_ = o_.conn == QpType::ud;
    const bool timed_ = o_.duration != 0;
    uint64_t size_ = o_.size;  // UD may lower it to the MTU
    uint32_t recv_len_ = 0;    // UD: a receive's length (the largest message + the GRH)
    Mtu mtu_ = Mtu::mtu1024;
    uint32_t out_reads_ = 1;
    uint32_t cycle_buffer_ = kCycleBuffer;
    uint32_t cache_line_ = kCacheLine;
    int gid_index_ = 1;
    Gid gid_{};

    api::Buffer mem_;  // from the device (a daemon DMAs it in place); freed after the objects
    std::unique_ptr<api::Pd> pd_;
    std::unique_ptr<api::Mr> mr_;
    std::unique_ptr<api::Cq> cq_;
    std::vector<std::unique_ptr<api::Qp>> qps_;
    std::vector<std::unique_ptr<api::Ah>> ahs_;  // UD: one per QP, to the peer's GID
    size_t block_ = 0;
    std::vector<oob::PerftestQpInfo> mine_, theirs_;

    // counters the CQ drain keeps
    std::vector<uint64_t> sent_;      // per QP: WRs completed (a signaled one covers those before it)
    std::vector<uint64_t> recvd_;     // per QP: receives completed
    uint64_t total_sent_ = 0, total_recvd_ = 0;
    uint64_t last_recv_ns_ = 0;
    uint64_t recv_base_ = 0;  // send_lat: the receives the sizes before this one took
    std::vector<uint64_t> tposted_, tcompleted_;
    std::array<Wc, 64> wc_{};

    // --dump
    struct DumpRec {
        char op;  // 'w' RDMA WRITE, 'r' RDMA READ, 's' SEND (posted), 'v' a message received
        uint64_t remote_va;
        uint64_t len;
        uint64_t off;  // into rec_bytes_
    };
    const bool dump_ = !o_.dump.empty();
    bool ring_ = false;
    uint32_t ring_n_ = 0;
    uint64_t slot_len_ = 0;
    size_t mem_len_ = 0;                    // the registered length (what PREFIX.bin starts with)
    std::vector<uint64_t> recv_posted_;     // per QP: receives posted (the ring's slot)
    std::vector<const uint8_t*> last_sink_;  // per QP: where the last message received landed
    std::vector<DumpRec> recs_;             // reserved before the run
    std::vector<uint8_t> rec_bytes_;        // sized before the run
    uint64_t rec_used_ = 0;
    bool rec_overflow_ = false;             // more than was reserved: the dump says so
    uint64_t cur_size_ = 0;                 // the size of the messages in flight

    // -D: the window, and what the CQ drain counted inside its middle part
    Window win_;
    bool win_on_ = false;
    uint64_t sample_sent_ = 0, sample_recvd_ = 0;
    uint64_t lat_last_rcvd_ = 0;  // write_lat: the number of the peer's last WRITE seen (--check)
    uint64_t lat_ops_ = 0;        // read/atomic latency: the operations completed (--check)
};

bool Session::handshake_start() {
    // 1. the version
    char ver[oob::kPerftestVersionLen] = {};
    {
        const auto m = oob::format_version(oob::kPerftestVersion);
        std::array<uint8_t, oob::kPerftestVersionLen> t{};
        if (!xchg(m, t, "version")) return false;
        const oob::OobError e = oob::parse_version(t, ver);
        if (e != oob::OobError::ok) return fail(std::string("the peer's first message is not a perftest version: ") + oob::name(e));
    }
    if (std::strcmp(ver, oob::kPerftestVersion) != 0)
        return fail(std::string("the peer speaks perftest version ") + ver + "; hcaemu perf speaks version " +
                    oob::kPerftestVersion + " (Debian 12's perftest 4.5-0.17) only");
    // 2. the system data: both take the larger
    for (uint32_t* v : {&cycle_buffer_, &cache_line_}) {
        const char* what = v == &cycle_buffer_ ? "cycle buffer" : "cache line";
        std::array<uint8_t, oob::kPerftestSysLen> t{};
        if (!xchg(oob::format_sys(*v), t, what)) return false;
        uint32_t theirs = 0;
        if (!check(oob::parse_sys(t, theirs), what)) return false;
        if (theirs & (theirs - 1)) return fail(std::string("the peer's ") + what + " is not a power of two");
        *v = std::max(*v, theirs);
    }
    if (cache_line_ > cycle_buffer_) return fail("the cache line is larger than the cycle buffer");
    // 3. the MTU: the smaller
    std::array<uint8_t, oob::kPerftestMtuLen> t{};
    if (!xchg(oob::format_mtu(uint8_t(mtu_)), t, "MTU")) return false;
    uint8_t theirs = 0;
    if (!check(oob::parse_mtu(t, theirs), "MTU")) return false;
    if (theirs < uint8_t(mtu_)) mtu_ = Mtu(theirs);
    return true;
}

// perftest_parameters.c's MTU check, after the MTU exchange: a UD message fits one MTU. Without -s
// (and with -a) the size becomes the MTU, with perftest's note on stderr; a -s above it is refused.
bool Session::ud_size() {
    if (!ud_) return true;
    const uint64_t mtu = mtu_bytes(mtu_);
    if (!o_.all_sizes && size_ <= mtu) return true;
    if (!o_.all_sizes && o_.size_given) return fail("Max message size in UD cannot be greater than MTU (" + std::to_string(mtu) + ")");
    std::fprintf(stderr, " Max msg size in UD is MTU %llu\n Changing to this MTU\n", static_cast<unsigned long long>(mtu));
    size_ = mtu;
    return true;
}

bool Session::results(const BwReport& mine, BwReport& theirs) {
    std::array<uint8_t, oob::kPerftestResultLen> t{};
    const std::array<uint8_t, oob::kPerftestResultLen> m[5] = {
        oob::format_u64(mine.size), oob::format_u64(mine.iters), oob::format_double(mine.bw_peak),
        oob::format_double(mine.bw_avg), oob::format_double(mine.msg_rate)};
    for (int i = 0; i < 5; ++i) {
        if (!xchg(m[i], t, "results")) return false;
        if (i == 0) (void)oob::parse_u64(t, theirs.size);
        if (i == 1) (void)oob::parse_u64(t, theirs.iters);
        if (i == 2) (void)oob::parse_double(t, theirs.bw_peak);
        if (i == 3) (void)oob::parse_double(t, theirs.bw_avg);
        if (i == 4) (void)oob::parse_double(t, theirs.msg_rate);
    }
    return true;
}

bool Session::close(bool eof_ok, bool run_wait) {
    if (!barrier(run_wait)) return eof_ok && conn_.peer_closed();
    if (env_.cm) return true;  // -R: no "done" (ctx_close_connection)
    // Past the barrier both sides are through with RoCE: "done" goes without turning the HCA,
    // which would touch a port whose peer may be exiting (a memif peer's memory goes with it),
    // and the port need not wait at its close for the peer to read our last frames.
    conn_.set_idle({});
    ctx_.peer_finished();
    const auto d = oob::format_done();
    std::string e;
    if (!conn_.write_all(d, o_.oob_timeout_ms, e)) return fail("out-of-band exchange (done): " + e);
    // perftest (ctx_close_connection) writes "done" and closes without reading ours; a close with
    // ours unread resets the connection, which can cut its "done" short (seen with netem loss on
    // the TCP in interop). Past the last barrier a peer that closed is therefore no failure.
    std::array<uint8_t, oob::kPerftestDoneLen> t{};
    if (!conn_.read_exact(t, o_.oob_timeout_ms, e))
        return conn_.peer_closed() ? true : fail("out-of-band exchange (done): " + e);
    return check(oob::parse_done(t), "done");
}

bool Session::setup() {
    api::Context& dev = ctx_;
    PortAttr pa;
    if (dev.query_port(1, pa) != Status::ok) return fail("cannot query port 1");
    mtu_ = pa.active_mtu;
    if (o_.mtu) {
        if (o_.mtu > mtu_bytes(pa.active_mtu))
            return fail("-m " + std::to_string(o_.mtu) + " is above the port's active MTU " +
                        std::to_string(mtu_bytes(pa.active_mtu)));
        mtu_ = mtu_enum(o_.mtu);
    }
    gid_index_ = o_.gid_index >= 0 ? o_.gid_index : ctx_.gid_index();
    GidEntry ge;
    if (dev.query_gid(1, gid_index_, ge) != Status::ok) return fail("-x " + std::to_string(gid_index_) + ": no such GID");
    gid_ = ge.gid;
    if (o_.verb == Verb::read || o_.verb == Verb::atomic)
        out_reads_ = std::min<uint32_t>(o_.out_reads ? o_.out_reads : 128, dev.query_device().max_qp_rd_atom);
    return true;
}

bool Session::connect(size_t q) {
    const bool rc = o_.conn == QpType::rc;
    const oob::PerftestQpInfo& r = theirs_[q];
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    a.qp_access_flags = access::remote_write | access::remote_read | access::remote_atomic;
    a.qkey = kDefQkey;
    ModifyResult m = qps_[q]->modify(a, qp_attr::state | qp_attr::pkey_index | qp_attr::port |
                                           (ud_ ? qp_attr::qkey : qp_attr::access_flags));
    if (m.ok() && ud_) {
        // UD: RTR and RTS take nothing but the state and the send PSN (IBTA 11.2.5.3's table)
        a.qp_state = QpState::rtr;
        m = qps_[q]->modify(a, qp_attr::state);
        if (m.ok()) {
            a.qp_state = QpState::rts;
            a.sq_psn = mine_[q].psn;
            m = qps_[q]->modify(a, qp_attr::state | qp_attr::sq_psn);
        }
    } else if (m.ok()) {
        a.qp_state = QpState::rtr;
        a.path_mtu = mtu_;
        a.dest_qp_num = r.qpn;
        a.rq_psn = r.psn;
        a.max_dest_rd_atomic = uint8_t(std::min<uint32_t>(out_reads_, 255));
        a.min_rnr_timer = 12;  // 0.64 ms, perftest's
        a.ah_attr.dgid = r.gid;
        a.ah_attr.sgid_index = uint8_t(gid_index_);
        uint32_t mask = qp_attr::state | qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn;
        if (rc) mask |= qp_attr::max_dest_rd_atomic | qp_attr::min_rnr_timer;
        m = qps_[q]->modify(a, mask);
    }
    if (m.ok() && !ud_) {
        a.qp_state = QpState::rts;
        a.sq_psn = mine_[q].psn;
        a.timeout = o_.qp_timeout;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = uint8_t(std::min<uint32_t>({out_reads_, std::max<uint32_t>(r.out_reads, 1), 255}));
        uint32_t mask = qp_attr::state | qp_attr::sq_psn;
        if (rc) mask |= qp_attr::timeout | qp_attr::retry_cnt | qp_attr::rnr_retry | qp_attr::max_qp_rd_atomic;
        m = qps_[q]->modify(a, mask);
    }
    if (!m.ok()) return fail(std::string("cannot connect QP ") + std::to_string(qps_[q]->qpn()) + ": " + name(m.status));
    if (ud_) {
        AhAttr aa;
        aa.dgid = r.gid;
        aa.sgid_index = uint8_t(gid_index_);
        auto ah = ctx_.create_ah(*pd_, aa);
        if (!ah.ok()) return fail(std::string("create_ah: ") + name(ah.status));
        ahs_.push_back(std::move(ah.value));
    }
    return true;
}

bool Session::post_recv(size_t q) {
    uint8_t* base = dst(q);
    uint64_t len = block_, wr_id = q;
    if (ring_) {
        const uint64_t slot = recv_posted_[q]++ % ring_n_;
        base = ring(q, slot);
        len = slot_len_;
        std::memset(base, 0, slot_len_);
        wr_id |= slot << kQpBits;
    }
    Sge sge = ud_ ? Sge{addr(base + cache_line_) - kGrhLen, recv_len_, mr_->lkey()} : Sge{addr(base), uint32_t(len), mr_->lkey()};
    RecvWr wr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const RecvWr* bad = nullptr;
    const Status s = qps_[q]->post_recv(&wr, &bad);
    if (s != Status::ok) return fail(std::string("post_recv: ") + name(s));
    return true;
}

bool Session::drain_cq() {
    for (;;) {
        const int n = cq_->poll(wc_);
        if (n <= 0) return true;
        const uint64_t t = now_ns();
        const bool counted = win_on_ && t >= win_.sample_begin && t < win_.sample_end;
        for (int i = 0; i < n; ++i) {
            const Wc& w = wc_[size_t(i)];
            if (w.status != WcStatus::success)
                return fail(std::string("completion error on QP ") + std::to_string(w.qp_num) + ": " + name(w.status) +
                            " (" + name(w.opcode) + ")");
            const size_t q = size_t(w.wr_id & kQpMask);
            if (w.opcode == WcOpcode::recv) {
                const uint8_t* at = ring_ ? ring(q, w.wr_id >> kQpBits) + (ud_ ? cache_line_ : 0) : sink(q);
                last_sink_[q] = at;
                if (dump_) record('v', 0, at, ud_ ? (w.byte_len > kGrhLen ? w.byte_len - kGrhLen : 0) : w.byte_len);
                ++recvd_[q];
                ++total_recvd_;
                sample_recvd_ += counted;
                last_recv_ns_ = t;
            } else {
                const uint64_t upto = w.wr_id >> kQpBits;  // the WR's count on its QP
                if (dump_)
                    for (uint64_t k = sent_[q] + 1; k <= upto; ++k) record_wr(q, k);
                total_sent_ += upto - sent_[q];
                if (counted) sample_sent_ += upto - sent_[q];
                sent_[q] = upto;
                if (!tcompleted_.empty() && total_sent_) tcompleted_[std::min(total_sent_, tcompleted_.size()) - 1] = t;
            }
        }
    }
}

template <class Cond>
bool Session::wait(Cond cond, const char* what, uint64_t deadline) {
    last_turn_ns_ = 0;
    uint64_t last = now_ns();
    uint64_t seen = total_sent_ + total_recvd_;
    for (uint64_t turn = 0;; ++turn) {
        if (cond()) return true;
        engine_turn();
        if (!drain_cq()) return false;
        if ((turn & 15) == 0 && deadline != UINT64_MAX && now_ns() >= deadline) return true;
        if ((turn & 15) == 0 && stop_requested()) return fail("interrupted by a signal");
        if ((turn & 255) == 0) {
            const uint64_t t = now_ns();
            if (total_sent_ + total_recvd_ != seen) {
                seen = total_sent_ + total_recvd_;
                last = t;
            } else if (t - last > o_.oob_timeout_ms * 1'000'000) {
                return fail(std::string("no progress for ") + std::to_string(o_.oob_timeout_ms / 1000) + " s (" + what + ")");
            }
        }
    }
}

void Session::print_info() {
    std::string s = kLine;
    s += "                    ";
    s += std::string(verb_name(o_.verb)) + " ";
    if (o_.verb == Verb::atomic) s += o_.atomic == AtomicOp::fetch_and_add ? "FETCH_AND_ADD " : "CMP_AND_SWAP ";
    s += o_.kind == Kind::bw ? "BW Test\n" : "Latency Test\n";
    char b[160];
    std::snprintf(b, sizeof b, " Dual-port       : OFF\t\tDevice         : %s\n", o_.dev_name.c_str());
    s += b;
    std::snprintf(b, sizeof b, " Number of qps   : %zu\t\tTransport type : IB\n", nq_);
    s += b;
    std::snprintf(b, sizeof b, " Connection type : %s\t\tUsing SRQ      : OFF\n",
                  o_.conn == QpType::rc ? "RC" : o_.conn == QpType::uc ? "UC" : "UD");
    s += b;
    s += " PCIe relax order: OFF\n ibv_wr* API     : OFF\n";
    if (client_) {
        std::snprintf(b, sizeof b, " TX depth        : %u\n", o_.tx_depth);
        s += b;
    }
    if (o_.verb == Verb::send && !client_) {
        std::snprintf(b, sizeof b, " RX depth        : %u\n", o_.rx_depth);
        s += b;
    }
    if (o_.kind == Kind::bw) {
        std::snprintf(b, sizeof b, " CQ Moderation   : %u\n", o_.cq_mod);
        s += b;
    }
    std::snprintf(b, sizeof b, " Mtu             : %u[B]\n Link type       : Ethernet\n GID index       : %d\n",
                  mtu_bytes(mtu_), gid_index_);
    s += b;
    if (o_.verb == Verb::read || o_.verb == Verb::atomic)
        std::snprintf(b, sizeof b, " Outstand reads  : %u\n", out_reads_);
    else
        std::snprintf(b, sizeof b, " Max inline data : 0[B]\n");
    s += b;
    s += " rdma_cm QPs\t : OFF\n Data ex. method : Ethernet\n";
    s += kLine;
    out(s);
}

void Session::print_dest(const oob::PerftestQpInfo& d, bool local) {
    char b[256];
    int n = std::snprintf(b, sizeof b, " %s address: LID %#04x QPN %#06x PSN %#06x", local ? "local" : "remote",
                          unsigned(d.lid), unsigned(d.qpn), unsigned(d.psn));
    if (o_.verb == Verb::read) n += std::snprintf(b + n, sizeof b - size_t(n), " OUT %#04x", unsigned(d.out_reads));
    if (o_.verb == Verb::read || o_.verb == Verb::write)
        n += std::snprintf(b + n, sizeof b - size_t(n), " RKey %#08x VAddr %#016llx", unsigned(d.rkey),
                           static_cast<unsigned long long>(d.vaddr));
    std::string s = b;
    s += "\n GID: ";
    for (size_t i = 0; i < 16; ++i) {
        std::snprintf(b, sizeof b, i < 15 ? "%02d:" : "%02d\n", int(d.gid[i]));
        s += b;
    }
    out(s);
}

void Session::fill_wr(size_t q, uint64_t size, SendWr& wr, Sge& sge) {
    sge = Sge{addr(src(q)), uint32_t(size), mr_->lkey()};
    wr = SendWr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    switch (o_.verb) {
        case Verb::send: wr.opcode = WrOpcode::send; break;
        case Verb::write: wr.opcode = WrOpcode::rdma_write; break;
        case Verb::read: wr.opcode = WrOpcode::rdma_read; break;
        case Verb::atomic:
            wr.opcode = o_.atomic == AtomicOp::fetch_and_add ? WrOpcode::atomic_fetch_and_add : WrOpcode::atomic_cmp_and_swp;
            break;
    }
    wr.rdma.remote_addr = theirs_[q].vaddr;
    wr.rdma.rkey = theirs_[q].rkey;
    wr.atomic.remote_addr = theirs_[q].vaddr;
    wr.atomic.rkey = theirs_[q].rkey;
    // perftest's operands, as the rxe captures show them: add 1; compare 0 and swap in 0
    wr.atomic.compare_add = o_.atomic == AtomicOp::fetch_and_add ? 1 : 0;
    wr.atomic.swap = 0;
    if (ud_) {
        wr.ud.ah = ahs_[q]->native();
        wr.ud.remote_qpn = theirs_[q].qpn;
        wr.ud.remote_qkey = kDefQkey;
    }
}

bool Session::bw_client(uint64_t size, BwReport& rep) {
    const bool timed = timed_;
    const uint64_t iters = o_.iters;
    const uint32_t cq_mod = timed ? 1 : o_.cq_mod;
    const uint64_t total = timed ? 0 : iters * nq_;
    cur_size_ = size;
    tposted_.assign(total, 0);
    tcompleted_.assign(total, 0);
    std::fill(sent_.begin(), sent_.end(), 0);
    total_sent_ = 0;
    std::vector<SendWr> wr(nq_);
    std::vector<Sge> sge(nq_);
    std::vector<uint64_t> posted(nq_, 0);
    for (size_t q = 0; q < nq_; ++q) fill_wr(q, size, wr[q], sge[q]);
    const uint64_t step = inc(size), nslots = slots(size);
    uint64_t total_posted = 0;
    load_reset();
    const uint64_t start = now_ns();
    if (timed) window_start(start);
    uint64_t last_progress = start, seen = 0;
    for (uint64_t turn = 0;; ++turn) {
        const bool posting = timed ? !over() : total_posted < total;
        // a timed run ends with its time, as perftest's: what is still outstanding is not waited
        // for (a SEND may wait for a receive the server no longer posts)
        if (!posting && (timed || total_sent_ == total_posted)) break;
        for (size_t q = 0; posting && q < nq_; ++q) {
            while ((timed || posted[q] < iters) && posted[q] - sent_[q] < o_.tx_depth) {
                const uint64_t n = posted[q] + 1;
                if (o_.verb != Verb::send) {  // a SEND's address is local only: it stays
                    const uint64_t off = (posted[q] % nslots) * step;
                    if (ring_) std::memset(ring(q, posted[q] % ring_n_), 0, slot_len_);  // see ring()
                    sge[q].addr = ring_ ? addr(ring(q, posted[q] % ring_n_)) : addr(src(q)) + off;
                    wr[q].rdma.remote_addr = wr[q].atomic.remote_addr = theirs_[q].vaddr + off;
                }
                const bool signaled = n % cq_mod == 0 || (!timed && n == iters);
                wr[q].send_flags = signaled ? send_flag::signaled : 0;
                wr[q].wr_id = n << kQpBits | q;
                if (!timed) tposted_[total_posted] = now_ns();
                const SendWr* bad = nullptr;
                const Status s = qps_[q]->post_send(&wr[q], &bad);
                if (s != Status::ok) return fail(std::string("post_send: ") + name(s));
                posted[q] = n;
                ++total_posted;
                // A NIC sends while the program is still posting; this HCA works only when its
                // loop turns: a burst's worth of WRs goes out before the next are posted (else the
                // receiver idles while 100 WRs are posted, after each completion).
                if ((total_posted & 31) == 0) engine_turn();
            }
        }
        engine_turn();
        if (!drain_cq()) return false;
        if ((turn & 255) == 0) {
            if (stop_requested()) return fail("interrupted by a signal");
            const uint64_t t = now_ns();
            if (total_sent_ != seen) {
                seen = total_sent_;
                last_progress = t;
            } else if (t - last_progress > o_.oob_timeout_ms * 1'000'000) {
                return fail("no completion for " + std::to_string(o_.oob_timeout_ms / 1000) + " s (" +
                            std::to_string(total_sent_) + " of " + std::to_string(total_posted) + " done)");
            }
        }
    }
    if (timed) {
        win_on_ = false;
        rep = compute_bw_total(size, sample_sent_, sample_ns(), o_.gbits);
    } else
        rep = compute_bw(tposted_, tcompleted_, size, cq_mod, o_.gbits);
    tcompleted_.clear();
    return true;
}

bool Session::send_bw_server(uint64_t size, BwReport& rep) {
    // -D: no count; the receive queues stay full until the time is over, which runs from the first
    // receive (perftest's run_iter_bw_server starts its alarm there)
    const uint64_t per_qp = timed_ ? UINT64_MAX : o_.iters;
    const uint64_t want = timed_ ? UINT64_MAX : o_.iters * nq_;
    cur_size_ = size;
    std::fill(recvd_.begin(), recvd_.end(), 0);
    total_recvd_ = 0;
    std::vector<uint64_t> posted(nq_, std::min<uint64_t>(o_.rx_depth, per_qp));  // posted before the barrier
    load_reset();
    const uint64_t start = now_ns();
    if (!wait(
            [&] {
                if (timed_ && !win_on_ && total_recvd_) {
                    window_start(last_recv_ns_);
                    sample_recvd_ = o_.duration < 4 ? total_recvd_ : 0;  // no warm-up: the first ones count
                }
                // keep the receive queues full while messages remain
                for (size_t q = 0; q < nq_; ++q)
                    while (posted[q] < per_qp && posted[q] - recvd_[q] < o_.rx_depth) {
                        if (!post_recv(q)) return true;
                        ++posted[q];
                    }
                return timed_ ? win_on_ && over() : total_recvd_ >= want;
            },
            "receiving"))
        return false;
    if (!err_.empty()) return false;
    if (timed_) {
        win_on_ = false;
        rep = compute_bw_total(size, sample_recvd_, sample_ns(), o_.gbits);
    } else {
        rep = compute_bw_total(size, want, last_recv_ns_ - start, o_.gbits);
    }
    return true;
}

// The start of a ping-pong (write_lat, send_lat): one signaled WR on `sge`, the counts cleared,
// and with -D the window opened.
SendWr Session::lat_begin(uint64_t size, Sge& sge) {
    tposted_.assign(timed_ ? 0 : o_.iters, 0);
    SendWr wr;
    fill_wr(0, size, wr, sge);
    wr.send_flags = send_flag::signaled;
    std::fill(sent_.begin(), sent_.end(), 0);
    total_sent_ = 0;
    load_reset();
    if (timed_) window_start(now_ns());
    return wr;
}

// perftest's run_iter_lat_write: the server writes first; each side waits for the peer's WRITE
// (the last byte of its buffer carries the WRITE's number) before its next one. -D: a wait ends
// with the time, and the iterations are the WRITE completions of the window's middle.
bool Session::write_lat(uint64_t size) {
    const uint64_t iters = timed_ ? UINT64_MAX : o_.iters;
    Sge sge;
    SendWr wr = lat_begin(size, sge);
    volatile uint8_t* post_byte = src(0) + size - 1;
    volatile uint8_t* poll_byte = dst(0) + size - 1;
    uint64_t scnt = 0, rcnt = 0;
    lat_last_rcvd_ = 0;
    while (scnt < iters || rcnt < iters) {
        if (timed_ && over()) break;
        if (rcnt < iters && !(scnt < 1 && !client_)) {
            ++rcnt;
            const uint8_t want = uint8_t(rcnt);
            // the peer's WRITE lands in our buffer: its last byte tells which one arrived
            if (!wait([&] { return *poll_byte == want; }, "waiting for the peer's RDMA WRITE", deadline())) return false;
            if (*poll_byte != want) break;  // -D: the time is over
            lat_last_rcvd_ = rcnt;
            ++total_recvd_;
        }
        if (scnt < iters) {
            if (!timed_) tposted_[scnt] = now_ns();
            *post_byte = uint8_t(++scnt);
            wr.wr_id = scnt << kQpBits;
            const SendWr* bad = nullptr;
            const Status s = qps_[0]->post_send(&wr, &bad);
            if (s != Status::ok) return fail(std::string("post_send: ") + name(s));
            if (!wait([&] { return sent_[0] >= scnt; }, "RDMA WRITE completion", deadline())) return false;
        }
    }
    win_on_ = false;
    return true;
}

// perftest's run_iter_lat_send: the client sends first; each side waits for the peer's SEND before
// its next one. -D: the iterations are the receives of the window's middle.
bool Session::send_lat(uint64_t size) {
    const uint64_t iters = timed_ ? UINT64_MAX : o_.iters;
    Sge sge;
    SendWr wr = lat_begin(size, sge);
    uint64_t scnt = 0, rcnt = 0;
    // The peer may start the next size (-a) before we have drained our last completion: count
    // its SENDs from the end of the previous size, not from what has arrived so far.
    const uint64_t base = recv_base_;
    recv_base_ += o_.iters;  // -a only, which -D excludes
    while (scnt < iters || rcnt < iters) {
        if (timed_ && over()) break;
        // the client sends first (perftest's run_iter_lat_send; write latency: the server)
        if (rcnt < iters && !(scnt < 1 && client_)) {
            ++rcnt;
            if (!wait([&] { return recvd_[0] >= base + rcnt; }, "waiting for the peer's SEND", deadline())) return false;
            if (recvd_[0] < base + rcnt) break;  // -D: the time is over
            if (!post_recv(0)) return false;
        }
        if (scnt < iters) {
            if (!timed_) tposted_[scnt] = now_ns();
            wr.wr_id = ++scnt << kQpBits;
            const SendWr* bad = nullptr;
            const Status s = qps_[0]->post_send(&wr, &bad);
            if (s != Status::ok) return fail(std::string("post_send: ") + name(s));
            if (!wait([&] { return sent_[0] >= scnt; }, "SEND completion", deadline())) return false;
        }
    }
    win_on_ = false;
    return true;
}

// perftest's run_iter_lat: the client alone, one READ or atomic at a time. -D: each one posted is
// waited for; the iterations are the completions of the window's middle.
bool Session::read_atomic_lat(uint64_t size) {
    SendWr wr;
    Sge sge;
    fill_wr(0, size, wr, sge);
    wr.send_flags = send_flag::signaled;
    std::fill(sent_.begin(), sent_.end(), 0);
    total_sent_ = 0;
    tposted_.assign(timed_ ? 0 : o_.iters, 0);
    load_reset();
    if (timed_) window_start(now_ns());
    uint64_t n = 0;
    for (;;) {
        if (timed_ ? over() : n >= o_.iters) break;
        if (!timed_) tposted_[n] = now_ns();
        wr.wr_id = ++n << kQpBits;
        const SendWr* bad = nullptr;
        const Status s = qps_[0]->post_send(&wr, &bad);
        if (s != Status::ok) return fail(std::string("post_send: ") + name(s));
        if (!wait([&] { return sent_[0] >= n; }, "completion")) return false;
    }
    win_on_ = false;
    lat_ops_ = n;
    return true;
}

void Session::record(char op, uint64_t remote_va, const uint8_t* p, uint64_t len) {
    if (recs_.size() == recs_.capacity() || rec_bytes_.size() - rec_used_ < len) {
        rec_overflow_ = true;
        return;
    }
    std::memcpy(rec_bytes_.data() + rec_used_, p, len);
    recs_.push_back(DumpRec{op, remote_va, len, rec_used_});
    rec_used_ += len;
}

// WR n (from 1) of QP q, as bw_client posted it: WRITE and READ walk the cycle buffer at both
// ends; a SEND goes from the block's start.
void Session::record_wr(size_t q, uint64_t n) {
    const uint64_t off = o_.verb == Verb::send ? 0 : ((n - 1) % slots(cur_size_)) * inc(cur_size_);
    const char op = o_.verb == Verb::send ? 's' : o_.verb == Verb::write ? 'w' : 'r';
    const uint8_t* local = ring_ ? ring(q, (n - 1) % ring_n_) : src(q) + off;  // ring_: READ only
    record(op, o_.verb == Verb::send ? 0 : theirs_[q].vaddr + off, local, cur_size_);
}

namespace {
std::string hex_gid(const Gid& g) {
    std::string s;
    char b[3];
    for (uint8_t x : g) {
        std::snprintf(b, sizeof b, "%02x", unsigned(x));
        s += b;
    }
    return s;
}
}  // namespace

// PREFIX.bin: the buffer as it is now (mem_len_ bytes), then the records' bytes. PREFIX.json: what
// tests/scripts/check_capture_data.py needs to find the case's frames and compare them.
bool Session::write_dump(int rc) {
    if (!dump_ || !mem_.data || theirs_.empty()) return true;
    const std::string bin = o_.dump + ".bin", json = o_.dump + ".json";
    FILE* f = std::fopen(bin.c_str(), "wb");
    if (!f) return fail("--dump: cannot write " + bin + ": " + std::strerror(errno));
    bool ok = std::fwrite(mem_.data, 1, mem_len_, f) == mem_len_ &&
              (rec_used_ == 0 || std::fwrite(rec_bytes_.data(), 1, rec_used_, f) == rec_used_);  // no records: data() may be null
    ok = std::fclose(f) == 0 && ok;
    if (!ok) return fail("--dump: cannot write " + bin);
    static const char* const kTests[] = {"send_bw", "write_bw", "read_bw", "atomic_bw"};
    const auto u = [](uint64_t v) { return std::to_string(v); };
    std::string j = "{\"test\": \"" + std::string(kTests[size_t(o_.verb)]) + "\", \"role\": \"" +
                    (client_ ? "client" : "server") + "\", \"conn\": \"" +
                    (o_.conn == QpType::rc ? "RC" : o_.conn == QpType::uc ? "UC" : "UD") + "\", \"status\": " +
                    std::to_string(rc) + ",\n";
    j += " \"qpn\": " + u(mine_[0].qpn) + ", \"psn\": " + u(mine_[0].psn) + ", \"gid\": \"" + hex_gid(gid_) + "\",\n";
    j += " \"peer_qpn\": " + u(theirs_[0].qpn) + ", \"peer_psn\": " + u(theirs_[0].psn) + ", \"peer_gid\": \"" +
         hex_gid(theirs_[0].gid) + "\",\n";
    // dst_len: the block given to the peer, zeroed before the run (a WRITE's destination)
    j += " \"buf_va\": " + u(addr(mem_.data)) + ", \"buf_len\": " + u(mem_len_) + ", \"dst_va\": " + u(mine_[0].vaddr) +
         ", \"dst_len\": " + u(block_) + ", \"peer_va\": " + u(theirs_[0].vaddr) + ",\n";
    j += " \"mtu\": " + u(mtu_bytes(mtu_)) + ", \"size\": " + u(size_) + ", \"all_sizes\": " +
         (o_.all_sizes ? "true" : "false") + ", \"iterations\": " + u(o_.iters) + ", \"records_overflow\": " +
         (rec_overflow_ ? "true" : "false") + ",\n \"records\": [";
    static const struct {
        char c;
        const char* name;
    } kOps[] = {{'w', "write"}, {'r', "read"}, {'s', "send"}, {'v', "recv"}};
    for (size_t i = 0; i < recs_.size(); ++i) {
        const DumpRec& r = recs_[i];
        const char* op = "?";
        for (const auto& k : kOps)
            if (k.c == r.op) op = k.name;
        j += std::string(i ? ",\n  " : "\n  ") + "{\"op\": \"" + op + "\", \"remote_va\": " + u(r.remote_va) +
             ", \"len\": " + u(r.len) + ", \"off\": " + u(mem_len_ + r.off) + "}";
    }
    j += "]}\n";
    f = std::fopen(json.c_str(), "w");
    if (!f) return fail("--dump: cannot write " + json + ": " + std::strerror(errno));
    ok = std::fputs(j.c_str(), f) >= 0;
    ok = std::fclose(f) == 0 && ok;
    if (!ok) return fail("--dump: cannot write " + json);
    return true;
}

bool Session::verify_bytes(const uint8_t* p, uint64_t n, size_t q, uint64_t skip_last, uint64_t base) {
    for (uint64_t i = 0; i + skip_last < n; ++i)
        if (p[i] != pattern_byte(base + i)) {
            char b[160];
            std::snprintf(b, sizeof b, "data check: FAILED: byte %llu of QP %zu's buffer is 0x%02x, expected 0x%02x\n",
                          static_cast<unsigned long long>(base + i), q, p[i], pattern_byte(base + i));
            out(b);
            return fail("the data that arrived is not what was sent");
        }
    return true;
}

// A UD receive's GRH names the sender and this side (IBTA 11.4.1.1; RoCE v2 over IPv4: the IPv4
// header in the GRH's last 20 bytes, addresses at its offsets 12 and 16).
bool Session::verify_grh(size_t q) {
    const uint8_t* g = last_sink_[q] - kGrhLen;
    const Gid& peer = theirs_[q].gid;
    const bool v4 = pkt::is_ipv4_mapped(gid_);
    const bool ok = v4 ? std::memcmp(g + 32, peer.data() + 12, 4) == 0 && std::memcmp(g + 36, gid_.data() + 12, 4) == 0
                       : std::memcmp(g + 8, peer.data(), 16) == 0 && std::memcmp(g + 24, gid_.data(), 16) == 0;
    if (ok) return true;
    out("data check: FAILED: the GRH of QP " + std::to_string(q) + "'s last receive does not name the peer and this side\n");
    return fail("the GRH of a UD receive is not the peer's");
}

bool Session::verify(uint64_t size, uint64_t peer_iters) {
    bool checked = false;
    for (size_t q = 0; q < nq_; ++q) {
        if (o_.verb == Verb::atomic) {
            uint64_t v = 0;
            const bool fetch = o_.atomic == AtomicOp::fetch_and_add;
            if (!client_ && o_.kind == Kind::bw) {
                // the targets, one per slot: FETCH_AND_ADD added 1 per operation; CMP_AND_SWAP
                // (compare 0, swap 0, as perftest's) leaves them 0
                const uint64_t per_qp = peer_iters / nq_;
                for (uint64_t k = 0; k < slots(8); ++k) {
                    uint64_t x = 0;
                    std::memcpy(&x, dst(q) + k * inc(8), 8);
                    v += x;
                }
                // -D: the client's row counts the window's middle only; more may have run
                const uint64_t want = fetch ? per_qp : 0;
                if (timed_ && fetch ? v < want : v != want) {
                    out("data check: FAILED: the atomic target holds " + std::to_string(v) + ", expected " +
                        (timed_ && fetch ? "at least " : "") + std::to_string(want) + "\n");
                    return fail("the atomic target does not hold what the operations left");
                }
                checked = true;
            } else if (client_ && o_.kind == Kind::lat) {
                // the last operation fetched what the ones before it left
                std::memcpy(&v, src(q), 8);
                const uint64_t want = fetch ? lat_ops_ - 1 : 0;
                if (v != want) {
                    out("data check: FAILED: the last fetched value is " + std::to_string(v) + ", expected " +
                        std::to_string(want) + "\n");
                    return fail("the atomic operations did not fetch what the ones before them left");
                }
                checked = true;
            }
            continue;
        }
        // where the data lands on this side
        const uint8_t* at = nullptr;
        if (o_.verb == Verb::read && client_) at = src(q);
        if (o_.verb == Verb::write && (!client_ || o_.kind == Kind::lat)) at = dst(q);
        if (o_.verb == Verb::send && (!client_ || o_.kind == Kind::lat)) at = last_sink_[q];
        if (!at) continue;
        if (ring_ && o_.verb == Verb::read) {
            // --dump: READ n landed in slot (n-1) % tx_depth; each slot holds the last READ that
            // used it, of the peer's pattern at that READ's offset in the cycle buffer
            const uint64_t n_qp = peer_iters / nq_;
            for (uint64_t n = n_qp > ring_n_ ? n_qp - ring_n_ + 1 : 1; n <= n_qp; ++n)
                if (!verify_bytes(ring(q, (n - 1) % ring_n_), size, q, 0, ((n - 1) % slots(size)) * inc(size)))
                    return false;
            checked = true;
            continue;
        }
        if (ud_ && !verify_grh(q)) return false;
        // BW WRITEs and READs walked through the slots: each slot reached holds the pattern
        const uint64_t reached = o_.kind == Kind::bw && o_.verb != Verb::send ? std::min(slots(size), peer_iters / nq_) : 1;
        for (uint64_t k = 0; k < reached; ++k)
            if (!verify_bytes(at + k * inc(size), size, q, o_.verb == Verb::write && o_.kind == Kind::lat ? 1 : 0, k * inc(size)))
                return false;
        // the last WRITE's number; -D: the peer may have written once more after this side stopped
        if (o_.verb == Verb::write && o_.kind == Kind::lat && at[size - 1] != uint8_t(timed_ ? lat_last_rcvd_ : o_.iters) &&
            !(timed_ && at[size - 1] == uint8_t(lat_last_rcvd_ + 1))) {
            out("data check: FAILED: the last byte of the buffer is not the last message's number\n");
            return fail("the last RDMA WRITE did not arrive");
        }
        checked = true;
    }
    if (checked) out("data check: ok\n");
    return true;
}

bool Session::cm_connect() {
    CmLink& link = *env_.cm;
    api::CmConnParam p;
    if (o_.verb == Verb::read || o_.verb == Verb::atomic)  // perftest's conn_param
        p.responder_resources = p.initiator_depth = uint8_t(std::min<uint32_t>(out_reads_, 255));
    std::string e;
    uint32_t listen_id = 0, peer_qpn = 0;
    // The server listens before it answers the first barrier: the client connects right after it.
    if (!client_ && !link.listen(env_.cm_addr, int(nq_), listen_id, e)) return fail(e);
    if (!barrier()) return false;
    cm_ids_.assign(nq_, 0);
    for (size_t q = 0; q < nq_; ++q) {
        const bool ok = client_ ? link.connect_retry(env_.cm_addr, *qps_[q], p, cm_ids_[q], peer_qpn, e)
                                : link.accept(listen_id, *qps_[q], p, cm_ids_[q], peer_qpn, e);
        if (!ok) return fail("rdma_cm, QP " + std::to_string(q) + ": " + e);
        uint32_t rq_psn = 0;
        link.psns(cm_ids_[q], mine_[q].psn, rq_psn);
        print_dest(mine_[q], true);
    }
    if (!client_) link.destroy(listen_id);
    return barrier();
}

int Session::run() {
    conn_.set_idle([this] { return idle(); });
    if (!setup()) return 1;
    if (!handshake_start()) return 1;
    if (!ud_size()) return 1;
    print_info();

    // Memory: per QP a source block then, after all of them, a destination block (the one the
    // peer is given), each as large as the largest message and a whole number of cycle buffers.
    api::Context& dev = ctx_;
    // UD: the largest message is the MTU at most, after a cache line that takes the GRH
    const uint64_t max_size = o_.all_sizes && !ud_ ? kMaxAllSize : size_;
    const uint64_t need = max_size + (ud_ ? cache_line_ : 0);
    block_ = size_t((std::max<uint64_t>(need, cycle_buffer_) + cycle_buffer_ - 1) / cycle_buffer_ * cycle_buffer_);
    recv_len_ = uint32_t(max_size + kGrhLen);
    if (dump_ && ((o_.verb == Verb::send && !client_) || (o_.verb == Verb::read && client_))) {
        ring_ = true;
        ring_n_ = o_.verb == Verb::send ? o_.rx_depth : o_.tx_depth;
        slot_len_ = (need + cache_line_ - 1) / cache_line_ * cache_line_;
    }
    const size_t bytes = 2 * nq_ * block_ + (ring_ ? nq_ * ring_n_ * slot_len_ : 0);
    mem_len_ = bytes;
    auto buf = dev.alloc_buffer(bytes);
    if (!buf.ok()) return fail("cannot allocate " + std::to_string(bytes) + " bytes"), 1;
    mem_ = buf.value;
    for (size_t i = 0; i < bytes; ++i) mem_.data[i] = pattern_byte(i % block_);
    // Zero where data will land, so that --check sees what arrived, not what was there.
    for (size_t q = 0; q < nq_; ++q) {
        if (o_.verb == Verb::read || o_.verb == Verb::atomic) std::memset(src(q), 0, block_);
        if (o_.verb != Verb::read) std::memset(dst(q), 0, block_);
        if (ring_) std::memset(ring(q, 0), 0, ring_n_ * slot_len_);
    }
    recv_posted_.assign(nq_, 0);
    last_sink_.assign(nq_, nullptr);
    for (size_t q = 0; q < nq_; ++q) last_sink_[q] = sink(q);
    if (dump_ && (client_ || o_.verb == Verb::send)) {
        // every WR (requester) or message received (SEND receiver) of every size, reserved now
        uint64_t nsizes = 0, sum = 0;
        for (int i = 1; i < 24 && o_.all_sizes; ++i)
            if ((uint64_t(1) << i) <= max_size) {
                ++nsizes;
                sum += uint64_t(1) << i;
            }
        if (!o_.all_sizes) {
            nsizes = 1;
            sum = size_;
        }
        recs_.reserve(nsizes * o_.iters * nq_);
        rec_bytes_.resize(sum * o_.iters * nq_);
    }
    auto pd = dev.alloc_pd();
    if (!pd.ok()) return fail(std::string("alloc_pd: ") + name(pd.status)), 1;
    pd_ = std::move(pd.value);
    auto mr = dev.reg_mr(*pd_, mem_.data, bytes,
                         access::local_write | access::remote_write | access::remote_read | access::remote_atomic);
    if (!mr.ok()) return fail(std::string("reg_mr: ") + name(mr.status)), 1;
    mr_ = std::move(mr.value);
    // Every WR's completion, at most the device's max_cqe: with many QPs the CQ is drained each
    // turn, and a turn completes at most one receive burst.
    const int cqe = int(std::min<uint64_t>(uint64_t(nq_) * (o_.tx_depth + o_.rx_depth) + 16, dev.query_device().max_cqe));
    auto cq = dev.create_cq(cqe);
    if (!cq.ok()) return fail(std::string("create_cq: ") + name(cq.status)), 1;
    cq_ = std::move(cq.value);
    std::random_device rd;
    mine_.resize(nq_);
    theirs_.resize(nq_);
    sent_.assign(nq_, 0);
    recvd_.assign(nq_, 0);
    for (size_t q = 0; q < nq_; ++q) {
        api::QpInitAttr ia;
        ia.send_cq = cq_.get();
        ia.recv_cq = cq_.get();
        ia.qp_type = o_.conn;
        ia.cap = {o_.tx_depth, o_.rx_depth, 1, 1, 0};
        auto qp = dev.create_qp(*pd_, ia);
        if (!qp.ok()) return fail(std::string("create_qp: ") + name(qp.status)), 1;
        qps_.push_back(std::move(qp.value));
        oob::PerftestQpInfo& m = mine_[q];
        m.lid = 0;
        m.out_reads = uint16_t(out_reads_);
        m.qpn = qps_[q]->qpn();
        m.psn = rd() & 0xFFFFFF;
        m.rkey = mr_->rkey();
        m.vaddr = addr(dst(q));
        m.gid = gid_;
        if (!env_.cm) print_dest(m, true);
    }
    if (env_.cm && !cm_connect()) return 1;

    // QP information (perftest 6.06, as seen against it with -q 1 and -q 2): the latency tests
    // send QP 0's first; then every QP's (the data); after ctx_connect, every QP's again.
    if (o_.kind == Kind::lat && !qp_info(0, &theirs_[0])) return 1;
    for (size_t q = 0; q < nq_; ++q) {
        if (!qp_info(q, &theirs_[q])) return 1;
        print_dest(theirs_[q], false);
    }
    if (pkt::is_ipv4_mapped(theirs_[0].gid) != pkt::is_ipv4_mapped(gid_))
        return fail("the peer's GID and ours are not of the same IP version"), 1;
    std::string e;
    if (!env_.cm && !ctx_.resolve(theirs_[0].gid, env_.resolve_timeout_ms, e)) return fail(e), 1;
    for (size_t q = 0; q < nq_ && !env_.cm; ++q)  // -R: rdma_cm connected them
        if (!connect(q)) return 1;
    for (size_t q = 0; q < nq_; ++q)
        if (!qp_info(q, nullptr)) return 1;
    if (o_.verb == Verb::send)
        for (size_t q = 0; q < nq_; ++q)
            if (!client_ || o_.kind == Kind::lat)
                for (uint64_t i = 0; i < std::min<uint64_t>(o_.rx_depth, o_.kind == Kind::bw && !timed_ ? o_.iters : o_.rx_depth); ++i)
                    if (!post_recv(q)) return 1;
    if (!barrier()) return 1;  // after RTR/RTS

    const bool lat = o_.kind == Kind::lat;
    std::vector<uint64_t> sizes;
    if (o_.all_sizes)  // UD: up to the MTU
        for (int i = 1; i < 24 && (uint64_t(1) << i) <= max_size; ++i) sizes.push_back(uint64_t(1) << i);
    else
        sizes.push_back(size_);

    // read and atomic latency: the server has nothing to do but wait for the close
    if (lat && !client_ && (o_.verb == Verb::read || o_.verb == Verb::atomic)) {
        load_reset();
        if (!close(false, true)) return 1;
        out(kLine);
        return 0;
    }
    out(kLine);
    out(lat ? lat_header(o_.duration != 0) : bw_header(o_.gbits));

    if (!lat && o_.verb != Verb::send && !client_) {
        // one-sided BW: wait for the client's barrier, then print its results
        load_reset();
        if (!barrier(true)) return 1;
        BwReport zero, theirs;
        if (!results(zero, theirs)) return 1;
        out(bw_line(theirs, o_.gbits));
        const bool ok = !o_.check || verify(theirs.size, theirs.iters);
        if (!close(false)) return 1;
        out(kLine);
        return ok ? 0 : 1;
    }

    BwReport rep;
    for (size_t si = 0; si < sizes.size(); ++si) {
        const uint64_t size = sizes[si];
        if (!lat && o_.verb == Verb::send) {
            if (si > 0 && !client_)  // receives for the next size
                for (size_t q = 0; q < nq_; ++q)
                    for (uint64_t i = 0; i < std::min<uint64_t>(o_.rx_depth, o_.iters); ++i)
                        if (!post_recv(q)) return 1;
            if (!barrier()) return 1;
            if (!(client_ ? bw_client(size, rep) : send_bw_server(size, rep))) return 1;
            out(bw_line(rep, o_.gbits));
            if (o_.all_sizes && !barrier()) return 1;
        } else if (!lat) {
            if (!bw_client(size, rep)) return 1;
            out(bw_line(rep, o_.gbits));
        } else {
            const bool rt = o_.verb == Verb::write || o_.verb == Verb::send;
            if (o_.verb == Verb::write ? !write_lat(size) : o_.verb == Verb::send ? !send_lat(size) : !read_atomic_lat(size))
                return 1;
            if (!timed_)
                out(lat_line(compute_lat(tposted_, size, rt)));
            else  // send latency counts receives, the others completions (perftest's)
                out(lat_duration_line(size, o_.verb == Verb::send ? sample_recvd_ : sample_sent_, sample_ns(), rt));
        }
    }
    out(kLine);
    const uint64_t last = sizes.back();
    if (!lat && o_.verb != Verb::send) {
        // the client's finish barrier, then the results (the server prints ours)
        if (!barrier()) return 1;
        BwReport theirs;
        if (!results(rep, theirs)) return 1;
    }
    const bool ok = !o_.check || verify(last, rep.iters);
    if (!close(lat)) return 1;
    return ok ? 0 : 1;
}

}  // namespace

int run(const Options& o, Env& env, OobStream& conn, std::string& err) {
    Session s(o, env, conn, err);
    int rc = s.run();
    s.cm_disconnect();
    if (!o.dump.empty()) {
        // a failed run's message stays the one reported; its dump is written all the same
        const std::string keep = err;
        if (!s.write_dump(rc) && !rc) rc = 1;
        if (!keep.empty()) err = keep;
    }
    if (rc && err.empty()) err = "failed";
    return rc;
}

}  // namespace hcaemu::tools::perf
