// DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM'15) in both
// roles, with the parameters mlx5 exposes (rp_* / np_* names, mlx5 units) and its defaults:
// - notification point (NP): a data packet of a connected QP that arrives marked ECN CE is
//   answered with a CNP (IBTA Annex A17.9.3) to the sender's QP, at most one per
//   min_time_between_cnps per QP; the packet itself is processed as usual.
// - reaction point (RP): a CNP allocates the QP a rate limiter; alpha, the rate cut, the
//   recovery stages (fast recovery, additive, hyper increase) by timer and byte counter follow
//   the mlx5 state machine; the limiter is released once the rate is back at the maximum.
// The requester paces a limited QP with a GCRA token bucket on the engine's clock (no system
// call per packet); a QP without a limiter costs one branch. docs/dcqcn.md has the details.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "transport/timer_wheel.hpp"

namespace hcaemu::pkt {
struct Packet;
}

namespace hcaemu::transport {

class Hca;
struct QpCtx;

// Every parameter by its mlx5 name (debugfs cc_params drops the rpg_/dce_ prefixes; sysfs
// ecn/roce_rp and roce_np keep them), in mlx5's units. Defaults: mlx5 firmware's (mlxconfig
// ROCE_CC dump), except min_time_between_cnps: the paper's N = 50 us.
struct DcqcnParams {
    bool np_enable = true;                  // roce_np/enable: answer CE marks with CNPs
    bool rp_enable = true;                  // roce_rp/enable: react to CNPs
    uint32_t min_time_between_cnps = 50;    // us, per QP (0: a CNP for every marked packet)
    uint32_t cnp_dscp = 48;                 // the CNP's DSCP (its ECN bits are 0)
    uint32_t line_rate = 100000;            // Mb/s: hcaemu's port speed, the rate of an unlimited QP
    uint32_t rpg_max_rate = 0;              // Mb/s, 0: line_rate
    uint32_t rpg_time_reset = 300;          // us between rate increases by the timer
    uint32_t rpg_byte_reset = 32767;        // bytes sent between rate increases, 0: no byte counter
    uint32_t rpg_threshold = 1;             // stages of fast recovery (the paper's F)
    uint32_t rpg_ai_rate = 5;               // Mb/s, additive increase
    uint32_t rpg_hai_rate = 50;             // Mb/s, hyper increase
    uint32_t rpg_gd = 11;                   // cut = rate * alpha >> rpg_gd (alpha in 1/1024: alpha/2)
    uint32_t rpg_min_dec_fac = 50;          // %, a cut leaves at least this share of the rate
    uint32_t rpg_min_rate = 1;              // Mb/s
    uint32_t rate_to_set_on_first_cnp = 0;  // Mb/s, 0: the maximum
    uint32_t dce_tcp_g = 1019;              // alpha = alpha * g / 1024 (+ 1024 - g after a CNP)
    uint32_t dce_tcp_rtt = 1;               // us between alpha updates
    uint32_t rate_reduce_monitor_period = 4;  // us: a CNP cuts the rate this long after it came
    uint32_t initial_alpha_value = 1023;    // 1/1024
    bool clamp_tgt_rate = false;            // each cut sets the target to the current rate
    bool clamp_tgt_rate_after_time_inc = true;  // ... once the timer has increased the rate
    uint32_t rate_limit_burst = 4;          // us of traffic the limiter lets go at once (hcaemu)
};

// Sets one parameter by name ("rpg_ai_rate", also "rp_ai_rate" / "ai_rate" as mlx5 debugfs
// spells it). False and `err` for an unknown name or a value out of range.
bool dcqcn_set(DcqcnParams& p, std::string_view name, uint64_t value, std::string& err);
// "name=value[,name=value...]" (also separated by spaces). False and `err` at the first bad one.
bool dcqcn_parse(DcqcnParams& p, std::string_view spec, std::string& err);
// Every parameter, "name value" one a line, in the order of DcqcnParams.
std::string dcqcn_text(const DcqcnParams& p);

// One QP's DCQCN state, in its QpCtx.
struct DcqcnQp {
    // NP
    bool cnp_sent = false;      // last_cnp_ns is valid
    uint64_t last_cnp_ns = 0;
    // RP: `on` while a rate limiter is allocated (first CNP .. rate back at the maximum)
    bool on = false;
    bool dec_pending = false;   // a CNP since the last cut
    bool alpha_cnp = false;     // a CNP since the last alpha update
    uint32_t rate = 0;          // Mb/s, current (RC)
    uint32_t target = 0;        // Mb/s, target (RT)
    uint32_t alpha = 0;         // 1/1024
    uint64_t alpha_next_ns = 0; // the next alpha update (every dce_tcp_rtt from the first CNP)
    uint32_t t_stage = 0;       // increases by the timer since the last cut
    uint32_t b_stage = 0;       // increases by the byte counter since the last cut
    uint64_t bytes = 0;         // sent since the last byte-counter increase
    uint64_t tat_ns = 0;        // GCRA: theoretical arrival time of the next packet
    uint32_t overhead = 58;     // header bytes a packet adds to its payload (Eth+IP+UDP+BTH+ICRC)
    Timer pace;                 // the limiter lets the next packet go
    Timer dec;                  // the cut, rate_reduce_monitor_period after a CNP
    Timer inc;                  // rate increase by the timer
};

// What the RP did, for tests and traces (Hca::set_dcqcn_observer).
enum class DcqcnEventKind : uint8_t { start, cut, fast_recovery, additive, hyper, release };
struct DcqcnEvent {
    DcqcnEventKind kind = DcqcnEventKind::start;
    bool by_bytes = false;      // an increase: by the byte counter (else by the timer)
    uint32_t qpn = 0;
    uint64_t t_ns = 0;
    uint32_t rate = 0, target = 0, alpha = 0;   // after the event
};
using DcqcnObserver = void (*)(void* ctx, const DcqcnEvent& ev);

// ---- the engine's hooks (recv.cpp, requester.cpp, hca.cpp)
void dcqcn_init(QpCtx& c);                      // the timers' callbacks, a fresh context
void dcqcn_ce_marked(Hca& h, QpCtx& c);         // NP: an accepted packet of c arrived with ECN CE
// RP: a CNP for c (null: no such QP); `peer`: it came from c's connection peer.
void dcqcn_cnp(Hca& h, QpCtx* c, bool peer);
// The limiter: may c send a packet of `payload` bytes now? Charges it if so; if not, arms the
// pace timer, which schedules the QP again.
bool dcqcn_admit(Hca& h, QpCtx& c, uint32_t payload);

}  // namespace hcaemu::transport
