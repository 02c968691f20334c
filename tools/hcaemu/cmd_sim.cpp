// hcaemu sim: two HCAs over the in-memory wire in virtual time, with seeded faults. Prints every
// packet and transport event, or writes the traffic as pcap; then a summary; then verifies the
// destination memory and the completions, and exits non-zero on any difference.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "dpdk_port/pcap_file.hpp"
#include "packet/dissect.hpp"
#include "tools/hcaemu/cli.hpp"
#include "tools/hcaemu/sim_pair.hpp"
#include "tools/hcaemu/stop.hpp"
#include "tools/ladder/ladder.hpp"

namespace hcaemu::tools {

namespace {

constexpr const char* kHelp =
    "usage: hcaemu sim [OPTIONS]\n"
    "\n"
    "Runs two HCAs, A and B, joined by an in-memory wire in virtual time. A posts --count\n"
    "operations to B; every packet and every transport event (retransmission, NAK, RNR wait,\n"
    "ACK timeout, completion) is printed, one line each, or the traffic is written as pcap. A\n"
    "summary follows. Then the destination memory is compared byte for byte and every completion\n"
    "is checked: exit 1, with the first difference, on any mismatch, lost or duplicated\n"
    "completion or unexpected error completion.\n"
    "\n"
    "operation:\n"
    "  --op OP             send, send_imm, write, write_imm, read, cmp_swap, fetch_add (RC),\n"
    "                      uc_write (UC RDMA WRITE with immediate), ud_send (UD), or mix (a\n"
    "                      seeded mix of the RC operations). Default: write\n"
    "  --size N            message size in bytes (default 4096; atomics are 8; UD at most the MTU)\n"
    "  --count N           operations (default 16, at most 1000000)\n"
    "  --mtu N             path MTU: 256, 512, 1024, 2048 or 4096 (default 1024)\n"
    "QP attributes (A's requester):\n"
    "  --timeout N         local ACK timeout exponent, 4.096 us * 2^N, 0..31 (default 14)\n"
    "  --retry-cnt N       0..7 (default 7)\n"
    "  --rnr-retry N       0..7, 7 = for ever (default 7)\n"
    "  --max-rd-atomic N   outstanding READ/atomic requests, 1..16 (default 16)\n"
    "B's receive queue:\n"
    "  --rq-depth N        receive WQEs B keeps posted, 1..1024 (default: as many as --count, up\n"
    "                      to 1024): fewer than the SENDs in flight and B's HCA answers RNR NAK\n"
    "faults (probabilities per frame, each direction; default 0):\n"
    "  --loss P  --dup P  --reorder P  --corrupt P  --delay P\n"
    "  --latency-ns N      wire latency (default 2000)\n"
    "  --seed N            fault and data seed (default 1)\n"
    "output:\n"
    "  --pcap FILE         write every frame put on the wire to FILE instead of the trace\n"
    "  --ladder FILE       with --pcap: also draw the capture as a ladder diagram (FILE.svg or\n"
    "                      FILE.html; see `hcaemu ladder`), the frames the wire dropped ending\n"
    "                      in a cross\n"
    "  --quiet             no trace, summary only\n"
    "  -h, --help          this text\n";

enum class Op : uint8_t { send, send_imm, write, write_imm, read, cmp_swap, fetch_add, uc_write, ud_send, mix };
constexpr const char* kOpName[] = {"send", "send_imm", "write", "write_imm", "read", "cmp_swap", "fetch_add", "uc_write", "ud_send", "mix"};

struct Args {
    Op op = Op::write;
    uint32_t size = 4096;
    uint32_t count = 16;
    uint32_t mtu = 1024;
    uint8_t timeout = 14, retry_cnt = 7, rnr_retry = 7, max_rd_atomic = 16;
    uint32_t rq_depth = 0;  // 0: as the send queue
    port::FaultConfig faults;
    uint64_t latency_ns = 2000;
    uint64_t seed = 1;
    std::string pcap;
    std::string ladder;
    bool quiet = false;
};

struct Tracer {
    const port::VirtualClock* clock = nullptr;
    uint64_t t0 = 0;
    bool on = false;
    std::string line;
    void prefix(int side) {
        line.clear();
        char b[48];
        std::snprintf(b, sizeof b, "%12.3f us  %c  ", double(clock->now_ns() - t0) / 1000.0, side ? 'B' : 'A');
        line += b;
    }
    void frame(const uint8_t* f, uint32_t len, const char* what) {
        pkt::Packet p;
        const pkt::ParseError e = pkt::parse({f, len}, p);
        pkt::DissectOptions o;
        o.format = pkt::DissectFormat::brief;
        o.brief_prefix = false;
        line += what;
        pkt::dissect(line, p, e, len, 0, 0, o);
        std::fwrite(line.data(), 1, line.size(), stdout);
    }
};

struct SideTrace {
    Tracer* t;
    int side;
};

void on_event(void* ctx, const transport::TraceEvent& ev) {
    auto* st = static_cast<SideTrace*>(ctx);
    Tracer& t = *st->t;
    if (!t.on) return;
    using transport::TraceKind;
    switch (ev.kind) {
    case TraceKind::wqe_fetched:
    case TraceKind::recv_wqe_taken:
    case TraceKind::dma_read:
    case TraceKind::dma_write:
    case TraceKind::atomic_done:
    case TraceKind::ack_received: return;  // the steps `hcaemu demo` narrates; the packets tell them here
    default: break;
    }
    t.prefix(st->side);
    switch (ev.kind) {
    case TraceKind::tx: t.frame(ev.frame, ev.len, "send  "); return;
    case TraceKind::rx: return;  // the sender's line shows it; drops come from the wire
    case TraceKind::rx_error: t.frame(ev.frame, ev.len, "DROP  "); return;
    case TraceKind::cqe: {
        char b[160];
        std::snprintf(b, sizeof b, "CQE   qp 0x%06x wr_id %" PRIu64 " %s %s byte_len %u\n", ev.qpn, ev.wc ? ev.wc->wr_id : 0,
                      ev.wc ? name(ev.wc->opcode) : "", ev.wc ? name(ev.wc->status) : "", ev.wc ? ev.wc->byte_len : 0);
        t.line += b;
        break;
    }
    default: {
        char b[96];
        std::snprintf(b, sizeof b, "%-13s qp 0x%06x PSN %u\n", transport::kTraceKindName[size_t(ev.kind)], ev.qpn, ev.psn);
        t.line += "EVENT ";
        t.line += b;
    }
    }
    std::fwrite(t.line.data(), 1, t.line.size(), stdout);
}

bool parse_prob(const char* s, double& out) {
    char* e = nullptr;
    out = std::strtod(s, &e);
    return e && *e == 0 && e != s && out >= 0 && out <= 1;
}

int parse_args(int argc, char** argv, Args& a) {
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        if (k == "-h" || k == "--help") {
            std::fputs(kHelp, stdout);
            return -1;
        }
        if (k == "--quiet") {
            a.quiet = true;
            continue;
        }
        if (i + 1 >= argc) return usage_error("sim", k + " needs a value (or is unknown)");
        const std::string v = argv[++i];
        auto num = [&](uint64_t lo, uint64_t hi, auto& dst) {
            auto r = parse_uint(v, lo, hi);
            if (!r) return false;
            dst = static_cast<std::remove_reference_t<decltype(dst)>>(*r);
            return true;
        };
        bool ok = true;
        if (k == "--op") {
            ok = false;
            for (size_t j = 0; j < std::size(kOpName); ++j)
                if (v == kOpName[j]) {
                    a.op = Op(j);
                    ok = true;
                }
        } else if (k == "--size") ok = num(0, 1u << 30, a.size);
        else if (k == "--count") ok = num(1, 1000000, a.count);
        else if (k == "--mtu") ok = num(256, 4096, a.mtu) && (a.mtu & (a.mtu - 1)) == 0;
        else if (k == "--timeout") ok = num(0, 31, a.timeout);
        else if (k == "--retry-cnt") ok = num(0, 7, a.retry_cnt);
        else if (k == "--rnr-retry") ok = num(0, 7, a.rnr_retry);
        else if (k == "--max-rd-atomic") ok = num(1, 16, a.max_rd_atomic);
        else if (k == "--rq-depth") ok = num(1, 1024, a.rq_depth);
        else if (k == "--latency-ns") ok = num(0, 1'000'000'000, a.latency_ns);
        else if (k == "--seed") ok = num(0, UINT64_MAX, a.seed);
        else if (k == "--loss") ok = parse_prob(v.c_str(), a.faults.loss);
        else if (k == "--dup") ok = parse_prob(v.c_str(), a.faults.duplicate);
        else if (k == "--reorder") ok = parse_prob(v.c_str(), a.faults.reorder);
        else if (k == "--corrupt") ok = parse_prob(v.c_str(), a.faults.corrupt);
        else if (k == "--delay") ok = parse_prob(v.c_str(), a.faults.delay);
        else if (k == "--pcap") a.pcap = v;
        else if (k == "--ladder") ok = !(a.ladder = v).empty() && ladder::output_ext_ok(v);
        else return usage_error("sim", "unknown option '" + k + "'");
        if (!ok) return usage_error("sim", "bad value for " + k + ": '" + v + "'");
    }
    if (!a.ladder.empty() && a.pcap.empty()) return usage_error("sim", "--ladder draws the capture: it needs --pcap FILE");
    return 0;
}

Mtu mtu_enum(uint32_t b) {
    return b == 256 ? Mtu::mtu256 : b == 512 ? Mtu::mtu512 : b == 1024 ? Mtu::mtu1024 : b == 2048 ? Mtu::mtu2048 : Mtu::mtu4096;
}

}  // namespace

int cmd_sim(int argc, char** argv) {
    Args a;
    if (int r = parse_args(argc, argv, a); r != 0) return r < 0 ? kExitOk : r;
    // SIGINT/SIGTERM end a long run (--count up to 10^6): the capture is flushed, no summary.
    install_stop_handlers();
    const bool atomic_only = a.op == Op::cmp_swap || a.op == Op::fetch_add;
    if (atomic_only) a.size = 8;
    if (a.op == Op::ud_send && a.size > a.mtu) return usage_error("sim", "ud_send: --size must fit one MTU (" + std::to_string(a.mtu) + ")");
    const uint64_t stride = (uint64_t(std::max<uint32_t>(a.size, 8)) + 64 + 63) & ~uint64_t(63);
    const uint64_t region = stride * a.count;
    if (region > (1ull << 30)) return usage_error("sim", "--size x --count needs more than 1 GiB per side");

    SimConfig c;
    c.type = a.op == Op::uc_write ? QpType::uc : a.op == Op::ud_send ? QpType::ud : QpType::rc;
    c.mtu = mtu_enum(a.mtu);
    c.timeout = a.timeout;
    c.retry_cnt = a.retry_cnt;
    c.rnr_retry = a.rnr_retry;
    c.max_rd_atomic = a.max_rd_atomic;
    c.wire.latency_ns = a.latency_ns;
    c.wire.seed = a.seed;
    c.wire.faults[0] = c.wire.faults[1] = a.faults;
    if (a.faults.reorder > 0) c.wire.faults[0].reorder_ns = c.wire.faults[1].reorder_ns = 3 * a.latency_ns + 1000;
    if (a.faults.delay > 0) c.wire.faults[0].delay_ns = c.wire.faults[1].delay_ns = 10 * a.latency_ns + 1000;
    c.wire.mtu = std::max<uint32_t>(1500, a.mtu + 128);
    c.sq_depth = std::min<uint32_t>(a.count, 1024);
    c.rq_depth = a.rq_depth ? a.rq_depth : c.sq_depth;
    c.mem_bytes = size_t(2 * region + 4096);
    // Fixed MR addresses, above the largest buffer (2 GiB + 4 KiB): a run's trace and pcap depend
    // on its arguments and seed only.
    c.mr_iova[0] = 0x100000000ull;
    c.mr_iova[1] = 0x200000000ull;
    SimPair p(c);

    // Each operation has its own region: A's at i*stride, B's at region + i*stride.
    std::mt19937_64 rng(a.seed ^ 0x5EED);
    std::vector<Op> ops(a.count);
    const Op rc_ops[] = {Op::send, Op::send_imm, Op::write, Op::write_imm, Op::read, Op::cmp_swap, Op::fetch_add};
    for (auto& o : ops) o = a.op == Op::mix ? rc_ops[rng() % 7] : a.op;
    for (auto& s : p.side)
        for (auto& b : s.mem) b = uint8_t(rng());
    std::vector<uint8_t> before_b(p.side[1].mem);  // B's memory before: atomics and reads check against it

    std::unique_ptr<port::PcapWriter> pcap;
    if (!a.pcap.empty()) {
        pcap = std::make_unique<port::PcapWriter>(a.pcap);
        if (!pcap->ok()) {
            std::fprintf(stderr, "hcaemu sim: %s\n", pcap->error().c_str());
            return kExitUsage;
        }
    }
    Tracer tr;
    tr.clock = &p.clock;
    tr.t0 = p.clock.now_ns();
    tr.on = !a.quiet && !pcap;
    SideTrace st[2] = {{&tr, 0}, {&tr, 1}};
    p.side[0].hca->set_trace(on_event, &st[0]);
    p.side[1].hca->set_trace(on_event, &st[1]);
    // For --ladder: which captured frames the wire dropped. A loss or an oversize drop follows its
    // frame's `sent` at once; an rx_full drop comes later with the sender's buffer, remembered here.
    std::vector<ladder::Drop> drops;
    std::unordered_map<const uint8_t*, uint64_t> frame_of_buf;
    uint64_t captured = 0;
    const bool track = !a.ladder.empty();
    p.wire.set_tap([&](int dir, const uint8_t* f, uint32_t len, uint64_t t, port::Event ev) {
        if (ev == port::Event::sent && pcap) {
            pcap->write({f, len}, t);
            ++captured;
            if (track) frame_of_buf[f] = captured;
        }
        if (track && ev == port::Event::lost) drops.push_back({captured, ladder::DropReason::lost});
        if (track && ev == port::Event::too_big) drops.push_back({captured, ladder::DropReason::too_big});
        if (track && ev == port::Event::rx_full)
            if (auto it = frame_of_buf.find(f); it != frame_of_buf.end()) drops.push_back({it->second, ladder::DropReason::rx_full});
        if (port::is_drop(ev) && tr.on) {
            tr.prefix(dir);
            tr.frame(f, len, (std::string("WIRE  ") + port::event_name(ev) + ": ").c_str());
        }
    });

    auto needs_recv = [](Op o) { return o == Op::send || o == Op::send_imm || o == Op::write_imm || o == Op::uc_write || o == Op::ud_send; };
    size_t recvs_needed = 0;
    for (Op o : ops) recvs_needed += needs_recv(o);

    std::vector<Wc> wa, wb;
    uint32_t posted = 0, recv_posted = 0;
    auto post_more = [&] {
        SimPair::Side& A = p.side[0];
        SimPair::Side& B = p.side[1];
        // receives first, as many as the queue takes
        while (recv_posted < recvs_needed && B.dev->qp_by_qpn(B.qp.qpn())->rq.count() < c.rq_depth) {
            // the recv_posted-th receiving op's region
            uint32_t k = 0, i = 0;
            for (; i < a.count; ++i)
                if (needs_recv(ops[i]) && k++ == recv_posted) break;
            const uint32_t extra = a.op == Op::ud_send ? 40 : 0;
            Sge s{B.mr.addr() + region + uint64_t(i) * stride, a.size + extra, B.mr.lkey()};
            RecvWr r;
            r.wr_id = i;
            r.sg_list = &s;
            r.num_sge = 1;
            const RecvWr* bad;
            if (B.qp.post_recv(&r, &bad) != Status::ok) break;
            ++recv_posted;
        }
        while (posted < a.count && A.dev->qp_by_qpn(A.qp.qpn())->sq.count() < c.sq_depth) {
            const uint32_t i = posted;
            const Op o = ops[i];
            const bool at = o == Op::cmp_swap || o == Op::fetch_add;
            Sge s{A.mr.addr() + uint64_t(i) * stride, at ? 8 : a.size, A.mr.lkey()};
            SendWr w;
            w.wr_id = i;
            w.sg_list = &s;
            w.num_sge = 1;
            w.send_flags = send_flag::signaled;
            w.imm_data = 0xC0DE0000u + i;
            const uint64_t raddr = B.mr.addr() + region + uint64_t(i) * stride;
            w.rdma = {raddr, B.mr.rkey()};
            uint64_t orig;
            std::memcpy(&orig, &before_b[region + uint64_t(i) * stride], 8);
            w.atomic = {raddr, o == Op::cmp_swap ? orig : uint64_t(i) + 1, ~orig, B.mr.rkey()};
            switch (o) {
            case Op::send: w.opcode = WrOpcode::send; break;
            case Op::ud_send: w.opcode = WrOpcode::send_with_imm; break;  // the immediate names the op
            case Op::send_imm: w.opcode = WrOpcode::send_with_imm; break;
            case Op::write: w.opcode = WrOpcode::rdma_write; break;
            case Op::write_imm: case Op::uc_write: w.opcode = WrOpcode::rdma_write_with_imm; break;
            case Op::read: w.opcode = WrOpcode::rdma_read; break;
            case Op::cmp_swap: w.opcode = WrOpcode::atomic_cmp_and_swp; break;
            case Op::fetch_add: w.opcode = WrOpcode::atomic_fetch_and_add; break;
            case Op::mix: break;
            }
            if (o == Op::ud_send) w.ud = {&A.ah, B.qp.qpn(), 0x11111111};
            const SendWr* bad;
            if (A.qp.post_send(&w, &bad) != Status::ok) break;
            ++posted;
        }
    };
    const bool reliable = c.type == QpType::rc;
    const size_t want_b = reliable ? recvs_needed : 0;
    Wc buf[64];
    const bool finished = p.run_until([&] {
        if (stop_requested()) return true;
        post_more();
        int n;
        while ((n = p.side[0].cq.poll(buf)) > 0) wa.insert(wa.end(), buf, buf + n);
        while ((n = p.side[1].cq.poll(buf)) > 0) wb.insert(wb.end(), buf, buf + n);
        return posted == a.count && wa.size() >= a.count && wb.size() >= want_b;
    }, 3'600'000'000'000ull);
    if (stop_requested()) return report_stop("sim");
    // Let stragglers (late duplicates, unreliable deliveries) land, then take the last completions.
    p.run_until([] { return false; }, 50'000'000);
    int n;
    while ((n = p.side[0].cq.poll(buf)) > 0) wa.insert(wa.end(), buf, buf + n);
    while ((n = p.side[1].cq.poll(buf)) > 0) wb.insert(wb.end(), buf, buf + n);

    // ---- summary
    const Counters& ca = p.side[0].dev->counters();
    const Counters& cb = p.side[1].dev->counters();
    std::printf("\n== hcaemu sim: %s, %u x %u bytes, MTU %u, %s, seed %" PRIu64 "\n", kOpName[size_t(a.op)], a.count, a.size, a.mtu,
                name(c.type), a.seed);
    std::printf("virtual time      %.3f ms\n", double(p.clock.now_ns() - tr.t0) / 1e6);
    for (int d = 0; d < 2; ++d) {
        const port::WireStats& w = p.wire.stats(d);
        std::printf("wire %s   %" PRIu64 " frames sent, %" PRIu64 " lost, %" PRIu64 " duplicated, %" PRIu64 " reordered, %" PRIu64
                    " corrupted, %" PRIu64 " delayed\n", d ? "B->A" : "A->B", w.sent, w.lost, w.duplicated, w.reordered, w.corrupted, w.delayed);
    }
    std::printf("A requester       %" PRIu64 " retransmission starts, %" PRIu64 " ACK timeouts, %" PRIu64 " sequence NAKs, %" PRIu64
                " implied NAKs, %" PRIu64 " RNR NAKs received\n", ca.get(Counter::completer_retry_err), ca.get(Counter::local_ack_timeout_err),
                ca.get(Counter::packet_seq_err), ca.get(Counter::implied_nak_seq_err), ca.get(Counter::rcvd_rnr_err));
    std::printf("B responder       %" PRIu64 " duplicates, %" PRIu64 " out of sequence, %" PRIu64 " RNR NAKs sent, %" PRIu64
                " bad ICRC dropped\n", cb.get(Counter::duplicate_request), cb.get(Counter::out_of_sequence), cb.get(Counter::send_rnr_err),
                cb.rx_err[size_t(pkt::ParseError::bad_icrc)]);
    auto statuses = [](const std::vector<Wc>& v) {
        std::string s;
        for (size_t k = 0; k < kWcStatusCount; ++k) {
            size_t m = 0;
            for (const Wc& w : v) m += size_t(w.status) == k;
            if (m) s += std::string(s.empty() ? "" : ", ") + name(WcStatus(k)) + " " + std::to_string(m);
        }
        return s.empty() ? std::string("none") : s;
    };
    std::printf("CQEs A            %zu: %s\n", wa.size(), statuses(wa).c_str());
    std::printf("CQEs B            %zu: %s\n", wb.size(), statuses(wb).c_str());

    // ---- verification
    std::string fail;
    auto failf = [&](const std::string& m) {
        if (fail.empty()) fail = m;
    };
    if (!finished) failf("did not finish: " + std::to_string(wa.size()) + " of " + std::to_string(a.count) + " completions at A");
    std::vector<int> seen(a.count, 0);
    for (size_t k = 0; k < wa.size(); ++k) {
        const Wc& w = wa[k];
        if (w.wr_id >= a.count) { failf("A: completion with unknown wr_id " + std::to_string(w.wr_id)); continue; }
        if (++seen[w.wr_id] > 1) failf("A: duplicated completion for wr_id " + std::to_string(w.wr_id));
        if (w.wr_id != k) failf("A: completion " + std::to_string(k) + " out of order (wr_id " + std::to_string(w.wr_id) + ")");
        if (w.status != WcStatus::success) failf("A: wr_id " + std::to_string(w.wr_id) + " completed with " + name(w.status));
    }
    for (uint32_t i = 0; i < a.count; ++i)
        if (!seen[i]) failf("A: no completion for wr_id " + std::to_string(i));
    uint64_t compared = 0, dropped = 0;
    std::vector<int> delivered(a.count, 0);
    for (const Wc& w : wb) {
        if (reliable && (w.wr_id >= a.count || ++delivered[w.wr_id] > 1))
            failf("B: duplicated or unknown completion wr_id " + std::to_string(w.wr_id));
        if (w.status != WcStatus::success) failf("B: wr_id " + std::to_string(w.wr_id) + " completed with " + name(w.status));
    }
    // Unreliable transports: each delivery carries its operation's number in the immediate data.
    std::vector<uint32_t> landed_in(a.count, UINT32_MAX);  // ud_send: the receive buffer used
    if (!reliable)
        for (const Wc& w : wb) {
            const uint32_t i = w.imm_data - 0xC0DE0000u;
            if (!(w.wc_flags & wc_flag::with_imm) || i >= a.count) {
                failf("B: a completion without the operation's immediate data");
                continue;
            }
            if (delivered[i]++) {
                if (c.type == QpType::uc) failf("B: operation " + std::to_string(i) + " delivered twice on UC");
                continue;  // UD has no duplicate detection (IBTA ch. 9, UD): the first copy is checked
            }
            landed_in[i] = uint32_t(w.wr_id);
        }
    for (uint32_t i = 0; i < a.count && fail.empty(); ++i) {
        const Op o = ops[i];
        const uint8_t* A = p.side[0].mem.data() + uint64_t(i) * stride;
        const uint8_t* B = p.side[1].mem.data() + region + uint64_t(i) * stride;
        const uint8_t* B0 = before_b.data() + region + uint64_t(i) * stride;
        const uint8_t* want = A;
        const uint8_t* got = B;
        if (o == Op::read) {
            want = B0;
            got = A;
        } else if (o == Op::cmp_swap || o == Op::fetch_add) {
            uint64_t orig, now, back;
            std::memcpy(&orig, B0, 8);
            std::memcpy(&now, B, 8);
            std::memcpy(&back, A, 8);
            const uint64_t exp_word = o == Op::cmp_swap ? ~orig : orig + i + 1;
            if (back != orig) failf("op " + std::to_string(i) + ": the atomic returned a wrong original value");
            if (now != exp_word) failf("op " + std::to_string(i) + ": the atomic word at B is wrong (executed twice or not at all)");
            compared += 16;
            continue;
        }
        if (!reliable && !delivered[i]) {  // UC and UD may lose messages: counted, not failures
            ++dropped;
            continue;
        }
        if (o == Op::ud_send) got = p.side[1].mem.data() + region + uint64_t(landed_in[i]) * stride + 40;
        else if (o == Op::send || o == Op::send_imm) got = p.side[1].mem.data() + region + uint64_t(i) * stride;
        for (uint32_t j = 0; j < a.size; ++j)
            if (want[j] != got[j]) {
                char m[160];
                std::snprintf(m, sizeof m, "op %u (%s): first difference at byte %u: expected 0x%02x, found 0x%02x", i,
                              kOpName[size_t(o)], j, want[j], got[j]);
                failf(m);
                break;
            }
        compared += a.size;
    }
    const bool faults = a.faults.loss + a.faults.duplicate + a.faults.reorder + a.faults.corrupt + a.faults.delay > 0;
    if (dropped && !faults) failf(std::to_string(dropped) + " messages lost on a wire without faults");
    if (!reliable) {
        uint64_t dups = 0;
        for (int d : delivered) dups += d > 1 ? uint64_t(d - 1) : 0;
        std::printf("delivered at B    %u of %u operations, %" PRIu64 " lost and %" PRIu64 " delivered twice (%s has no\n"
                    "                  retransmission%s)\n", a.count - uint32_t(dropped), a.count, dropped, dups, name(c.type),
                    c.type == QpType::ud ? " and no duplicate detection" : "");
    }
    if (!a.ladder.empty()) {
        pcap->flush();
        std::sort(drops.begin(), drops.end(), [](const ladder::Drop& x, const ladder::Drop& y) { return x.frame < y.frame; });
        std::string err;
        ladder::Ladder model;
        if (ladder::write_ladder(a.pcap, drops, a.ladder, {}, err, &model) == ladder::WriteResult::ok)
            std::printf("ladder            %s: %zu arrows, %" PRIu64 " of them dropped on the wire\n", a.ladder.c_str(),
                        model.arrows.size(), model.stats.lost);
        else
            failf("ladder: " + err);
    }
    if (!fail.empty()) {
        std::printf("verify            FAIL: %s\n", fail.c_str());
        return kExitFail;
    }
    std::printf("verify            OK: %" PRIu64 " bytes compared, every completion exactly once and in order\n", compared);
    return kExitOk;
}

}  // namespace hcaemu::tools
