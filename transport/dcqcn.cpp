// DCQCN's notification and reaction points (transport/dcqcn.hpp). The RP follows the mlx5 state
// machine (DCQCN paper Fig. 6-8 with mlx5's parameters): alpha updated every dce_tcp_rtt, a cut
// of rate * alpha >> rpg_gd rate_reduce_monitor_period after a CNP, then increases by the timer
// (rpg_time_reset) and the byte counter (rpg_byte_reset): fast recovery while both stage
// counters are below rpg_threshold, hyper increase once both are above it, additive otherwise.
#include "transport/dcqcn.hpp"

#include <algorithm>
#include <array>
#include <cstddef>

#include "packet/opcode.hpp"
#include "transport/hca.hpp"

namespace hcaemu::transport {

namespace {

constexpr uint64_t kUs = 1000;

struct Param {
    const char* name;
    uint32_t DcqcnParams::*u32;
    bool DcqcnParams::*flag;
    uint64_t min, max;
};

#define U(n, lo, hi) Param{#n, &DcqcnParams::n, nullptr, lo, hi}
#define B(n) Param{#n, nullptr, &DcqcnParams::n, 0, 1}
const std::array kParams = {
    B(np_enable), B(rp_enable), U(min_time_between_cnps, 0, 4'000'000), U(cnp_dscp, 0, 63),
    U(line_rate, 1, 1'600'000), U(rpg_max_rate, 0, 1'600'000), U(rpg_time_reset, 1, 131071),
    U(rpg_byte_reset, 0, 0x7FFFFFFF), U(rpg_threshold, 1, 31), U(rpg_ai_rate, 1, 1'600'000),
    U(rpg_hai_rate, 1, 1'600'000), U(rpg_gd, 1, 15), U(rpg_min_dec_fac, 1, 100), U(rpg_min_rate, 1, 1'600'000),
    U(rate_to_set_on_first_cnp, 0, 1'600'000), U(dce_tcp_g, 0, 1023), U(dce_tcp_rtt, 1, 131071),
    U(rate_reduce_monitor_period, 1, 131071), U(initial_alpha_value, 0, 1023), B(clamp_tgt_rate),
    B(clamp_tgt_rate_after_time_inc), U(rate_limit_burst, 1, 1'000'000),
};
#undef U
#undef B

const Param* find_param(std::string_view n) {
    if (n == "rp_clamp_tgt_rate_ati" || n == "clamp_tgt_rate_ati") n = "clamp_tgt_rate_after_time_inc";  // debugfs
    for (const Param& p : kParams)
        if (n == p.name) return &p;
    // mlx5 debugfs cc_params: rp_/np_ in front of the name without rpg_/dce_ (rp_ai_rate,
    // rp_dce_tcp_g, np_min_time_between_cnps); the bare name without rpg_.
    for (const std::string_view pre : {"rp_", "np_"})
        if (n.substr(0, pre.size()) == pre) {
            const std::string_view rest = n.substr(pre.size());
            for (const Param& p : kParams) {
                const std::string_view pn = p.name;
                if (rest == pn || (pn.substr(0, 4) == "rpg_" && rest == pn.substr(4))) return &p;
            }
        }
    for (const Param& p : kParams)
        if (std::string_view(p.name).substr(0, 4) == "rpg_" && n == std::string_view(p.name).substr(4)) return &p;
    return nullptr;
}

uint32_t max_rate(const DcqcnParams& p) { return p.rpg_max_rate ? std::min(p.rpg_max_rate, p.line_rate) : p.line_rate; }

void observe(Hca& h, QpCtx& c, DcqcnEventKind k, bool by_bytes = false) {
    const DcqcnQp& d = c.dcqcn;
    h.dcqcn_observe(DcqcnEvent{.kind = k, .by_bytes = by_bytes, .qpn = c.qp->qpn, .t_ns = h.now(), .rate = d.rate,
                               .target = d.target, .alpha = d.alpha});
}

// The alpha updates due by `now`, every dce_tcp_rtt since the first CNP, computed when needed
// (a cut, a CNP) rather than by a timer per microsecond. Without a CNP alpha only falls (g <
// 1024): once it is 0 the remaining periods are skipped.
void alpha_sync(const DcqcnParams& p, DcqcnQp& d, uint64_t now) {
    const uint64_t period = uint64_t(p.dce_tcp_rtt) * kUs;
    while (d.alpha_next_ns <= now) {
        if (d.alpha == 0 && !d.alpha_cnp) {
            d.alpha_next_ns += ((now - d.alpha_next_ns) / period + 1) * period;
            break;
        }
        uint32_t a = uint32_t(uint64_t(d.alpha) * p.dce_tcp_g / 1024);
        if (d.alpha_cnp) a = std::min<uint32_t>(a + 1024 - p.dce_tcp_g, 1023);
        d.alpha = a;
        d.alpha_cnp = false;
        d.alpha_next_ns += period;
    }
}

void release(Hca& h, QpCtx& c) {
    DcqcnQp& d = c.dcqcn;
    d.on = false;
    d.dec_pending = d.alpha_cnp = false;
    h.timers().cancel(d.dec);
    h.timers().cancel(d.inc);
    h.timers().cancel(d.pace);
    observe(h, c, DcqcnEventKind::release);
    h.schedule(c);  // whatever waited for the limiter goes now
}

// One rate increase (DCQCN paper Fig. 7/8, mlx5's stage rule), counted against the timer's or
// the byte counter's stage. False when it brought the QP back to the maximum (limiter released).
bool increase(Hca& h, QpCtx& c, bool by_bytes) {
    const DcqcnParams& p = h.dcqcn();
    DcqcnQp& d = c.dcqcn;
    const uint32_t t = d.t_stage, b = p.rpg_byte_reset ? d.b_stage : d.t_stage;
    DcqcnEventKind k = DcqcnEventKind::fast_recovery;
    if (std::min(t, b) > p.rpg_threshold) {
        k = DcqcnEventKind::hyper;
        d.target += p.rpg_hai_rate;
    } else if (std::max(t, b) >= p.rpg_threshold) {
        k = DcqcnEventKind::additive;
        d.target += p.rpg_ai_rate;
    }
    const uint32_t mx = max_rate(p);
    d.target = std::min(d.target, mx);
    d.rate = uint32_t((uint64_t(d.rate) + d.target + 1) / 2);  // rounded up: it reaches the target
    if (by_bytes) ++d.b_stage;
    else ++d.t_stage;
    observe(h, c, k, by_bytes);
    if (d.rate >= mx && d.target >= mx) {
        release(h, c);
        return false;
    }
    return true;
}

void on_pace(Timer*, void* ctx) {
    auto* c = static_cast<QpCtx*>(ctx);
    c->hca->schedule(*c);
}

void on_inc(Timer* t, void* ctx) {
    auto* c = static_cast<QpCtx*>(ctx);
    Hca& h = *c->hca;
    if (!c->dcqcn.on) return;
    h.timers().arm_after(*t, uint64_t(h.dcqcn().rpg_time_reset) * kUs);
    increase(h, *c, false);
}

// The cut (DCQCN paper Fig. 6, mlx5's rpg_gd / rpg_min_dec_fac / clamp rules).
void on_dec(Timer*, void* ctx) {
    auto* c = static_cast<QpCtx*>(ctx);
    Hca& h = *c->hca;
    const DcqcnParams& p = h.dcqcn();
    DcqcnQp& d = c->dcqcn;
    if (!d.on || !d.dec_pending) return;
    alpha_sync(p, d, h.now());
    if (p.clamp_tgt_rate || d.b_stage > 0 || (p.clamp_tgt_rate_after_time_inc && d.t_stage > 0)) d.target = d.rate;
    const uint64_t r = d.rate;
    const uint64_t cut = std::min((r * d.alpha) >> p.rpg_gd, r * (100 - p.rpg_min_dec_fac) / 100);
    d.rate = std::max(uint32_t(r - cut), std::min(p.rpg_min_rate, max_rate(p)));
    d.dec_pending = false;
    d.t_stage = d.b_stage = 0;
    d.bytes = 0;
    h.timers().arm_after(d.inc, uint64_t(p.rpg_time_reset) * kUs);
    observe(h, *c, DcqcnEventKind::cut);
}

}  // namespace

bool dcqcn_set(DcqcnParams& p, std::string_view name, uint64_t value, std::string& err) {
    const Param* d = find_param(name);
    if (!d) {
        err = "unknown DCQCN parameter '" + std::string(name) + "'";
        return false;
    }
    if (value < d->min || value > d->max) {
        err = std::string(d->name) + ": " + std::to_string(value) + " is outside " + std::to_string(d->min) + ".." +
              std::to_string(d->max);
        return false;
    }
    if (d->flag) p.*(d->flag) = value != 0;
    else p.*(d->u32) = uint32_t(value);
    return true;
}

bool dcqcn_parse(DcqcnParams& p, std::string_view spec, std::string& err) {
    size_t i = 0;
    while (i < spec.size()) {
        const size_t end = spec.find_first_of(", ", i);
        const std::string_view item = spec.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i);
        i = end == std::string_view::npos ? spec.size() : end + 1;
        if (item.empty()) continue;
        const size_t eq = item.find('=');
        if (eq == std::string_view::npos || eq + 1 == item.size()) {
            err = "'" + std::string(item) + "' is not NAME=VALUE";
            return false;
        }
        uint64_t v = 0;
        const std::string_view val = item.substr(eq + 1);
        for (char ch : val) {
            if (ch < '0' || ch > '9') {
                err = "'" + std::string(item) + "': the value is not a decimal number";
                return false;
            }
            v = v * 10 + uint64_t(ch - '0');
            if (v > UINT32_MAX) {
                err = "'" + std::string(item) + "': the value is too large";
                return false;
            }
        }
        if (!dcqcn_set(p, item.substr(0, eq), v, err)) return false;
    }
    return true;
}

std::string dcqcn_text(const DcqcnParams& p) {
    std::string s;
    for (const Param& d : kParams)
        s += std::string(d.name) + " " + std::to_string(d.flag ? uint32_t(p.*(d.flag)) : p.*(d.u32)) + "\n";
    return s;
}

void dcqcn_init(QpCtx& c) {
    c.dcqcn.pace.fn = on_pace;
    c.dcqcn.dec.fn = on_dec;
    c.dcqcn.inc.fn = on_inc;
    c.dcqcn.pace.ctx = c.dcqcn.dec.ctx = c.dcqcn.inc.ctx = &c;
}

// IBTA Annex A17.9.3: BTH (opcode 0x81, BECN set, DestQP the sender's QP, PSN 0) and 16 reserved
// bytes, sent to the marked packet's source on the QP's own path.
void dcqcn_ce_marked(Hca& h, QpCtx& c) {
    h.counters().add(Counter::np_ecn_marked_roce_packets);
    const DcqcnParams& p = h.dcqcn();
    if (!p.np_enable || c.qp->type == QpType::ud) return;
    DcqcnQp& d = c.dcqcn;
    // The interval is kept on the wire: from when the previous CNP left (after the flush below),
    // to now, not to this turn's start (measured from turn starts, they left 48 us apart).
    if (d.cnp_sent && h.clock_now() - d.last_cnp_ns < uint64_t(p.min_time_between_cnps) * kUs) return;
    pkt::Headers hd = h.tmpl(c);
    const uint32_t dest_qp = hd.bth.dest_qp;
    const uint16_t pkey = hd.bth.pkey;
    hd.bth = pkt::Bth{};
    hd.bth.opcode = pkt::op::cnp;
    hd.bth.pkey = pkey;
    hd.bth.becn = true;
    hd.bth.dest_qp = dest_qp;
    hd.cnp_reserved = {};
    const uint8_t tc = uint8_t(p.cnp_dscp << 2);  // ECN 0: a CNP is never marked itself
    hd.ip4.tos = tc;
    hd.ip6.traffic_class = tc;
    if (h.send(hd, 0, [](std::span<uint8_t>) { return true; }) != Hca::Tx::ok) return;
    d.cnp_sent = true;
    d.last_cnp_ns = h.flush_now();
    h.counters().add(Counter::np_cnp_sent);
}

void dcqcn_cnp(Hca& h, QpCtx* c, bool peer) {
    const DcqcnParams& p = h.dcqcn();
    const QpState st = c ? c->qp->state() : QpState::reset;
    if (!p.rp_enable || !c || !peer || c->qp->type == QpType::ud || (st != QpState::rts && st != QpState::sqd)) {
        h.counters().add(Counter::rp_cnp_ignored);
        return;
    }
    h.counters().add(Counter::rp_cnp_handled);
    DcqcnQp& d = c->dcqcn;
    const uint64_t now = h.now();
    if (!d.on) {
        // The first CNP allocates the limiter (mlx5: rate_to_set_on_first_cnp, alpha from
        // initial_alpha_value); the cut follows as for any CNP.
        const uint32_t mx = max_rate(p);
        d.on = true;
        d.rate = d.target = p.rate_to_set_on_first_cnp ? std::min(p.rate_to_set_on_first_cnp, mx) : mx;
        d.alpha = p.initial_alpha_value;
        d.alpha_cnp = false;
        d.alpha_next_ns = now + uint64_t(p.dce_tcp_rtt) * kUs;
        d.t_stage = d.b_stage = 0;
        d.bytes = 0;
        d.tat_ns = now;
        d.overhead = c->tmpl.ipv6 ? 78 : 58;  // Eth 14 + IPv4 20 / IPv6 40 + UDP 8 + BTH 12 + ICRC 4
        h.timers().arm_after(d.inc, uint64_t(p.rpg_time_reset) * kUs);
        observe(h, *c, DcqcnEventKind::start);
    } else {
        alpha_sync(p, d, now);
        d.alpha_cnp = true;
    }
    d.dec_pending = true;
    if (!h.timers().armed(d.dec)) h.timers().arm_after(d.dec, uint64_t(p.rate_reduce_monitor_period) * kUs);
}

bool dcqcn_admit(Hca& h, QpCtx& c, uint32_t payload) {
    DcqcnQp& d = c.dcqcn;
    const DcqcnParams& p = h.dcqcn();
    const uint64_t now = h.now();
    const uint64_t tau = uint64_t(p.rate_limit_burst) * kUs;
    if (d.tat_ns > now + tau) {
        h.timers().arm(d.pace, d.tat_ns - tau);
        return false;
    }
    // rate in Mb/s = bits per us: bytes * 8 * 1000 / rate ns, rounded up.
    const uint64_t bytes = uint64_t(payload) + d.overhead;
    d.tat_ns = std::max(d.tat_ns, now) + (bytes * 8000 + d.rate - 1) / d.rate;
    if (p.rpg_byte_reset) {
        d.bytes += bytes;
        while (d.bytes >= p.rpg_byte_reset) {
            d.bytes -= p.rpg_byte_reset;
            if (!increase(h, c, true)) break;
        }
    }
    return true;
}

}  // namespace hcaemu::transport
