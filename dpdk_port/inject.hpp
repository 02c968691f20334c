// Event injection on any port (docs/inject.md): rules that drop, duplicate, delay, reorder,
// corrupt or ECN-mark chosen RoCE v2 frames, or forge responses in their place, in either
// direction. InjectPort wraps a Port (the DPDK port, a MemWire end) and is a Port itself; NetPort
// goes on top of it, so the capture shows what the HCA sent and what it received after injection,
// with a note on every frame a rule touched (PcapWriter::note: a side-car FILE.pcap.notes that
// `hcaemu dissect` prints as "injected: ...").
//
// Rule text: ACTION dir=tx|rx [MATCH...] [count=N|all] [PARAMS...], e.g.
//   drop dir=tx qp=0x12 op=WRITE_MIDDLE psn=5 nth=1 count=1
//   ecn dir=rx prob=0.1 seed=7 count=all
//   rnr dir=tx op=ack psn=5 timer=14
// Match (all given must hold): qp= (BTH destination QP), op= (an opcode name, 0xNN, or a class:
// send, write, read-req, read-resp, atomic, atomic-ack, ack, cnp), psn=, round= (the Nth time
// this direction saw that QP's PSN: 1 = first transmission), nth= (fire from the Nth frame that
// matched so far), prob= with seed= (a seeded draw per matching frame). count= bounds the hits.
//
// Threads: the data path (alloc, tx_burst, rx_burst) belongs to one thread, as the port it wraps.
// add/del/list/clear may come from any other thread: each publishes a new immutable rule set
// (one atomic pointer; the data path reads it once per burst and guards it with a hazard
// pointer). With no rule and nothing held the data path costs one pointer test and one compare.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "dpdk_port/clock.hpp"
#include "dpdk_port/port.hpp"

namespace hcaemu::port {

class PcapWriter;

enum class InjectDir : uint8_t { tx, rx };

enum class InjectAction : uint8_t {
    drop, duplicate, delay, reorder, corrupt, ecn,
    nak_seq,        // forged NAK PSN sequence error (IBTA 9.7.5.2.1), instead of the frame
    rnr,            // forged RNR NAK with timer=, instead
    nak_access,     // forged NAK remote access error, instead
    nak_inval,      // forged NAK invalid request, instead
    ack_withhold,   // an ACK not sent (ACK frames only)
    ghost_ack,      // forged ACK for a PSN not yet sent (at=, default +4096), in addition
    unexpected_op,  // forged frame with opcode= (default READ RESPONSE Only), in addition
    count,
};
inline constexpr std::array<const char*, size_t(InjectAction::count)> kInjectActionName = {
    "drop", "duplicate", "delay", "reorder", "corrupt", "ecn", "nak-seq", "rnr", "nak-access",
    "nak-inval", "ack-withhold", "ghost-ack", "unexpected-op"};

// op= classes: match by the opcode table's kind, any transport.
enum class OpClass : uint8_t { none, exact, send, write, read_req, read_resp, atomic, atomic_ack, ack, cnp };

// A header field corrupt may set (corrupt bth.psn=7).
enum class InjectField : uint8_t {
    bth_opcode, bth_se, bth_m, bth_pad, bth_tver, bth_pkey, bth_fecn, bth_becn, bth_qp, bth_ackreq, bth_psn,
    aeth_syndrome, aeth_msn, reth_va, reth_rkey, reth_len, ip_ttl, ip_dscp, udp_sport, udp_dport, count,
};
extern const std::array<const char*, size_t(InjectField::count)> kInjectFieldName;

struct FieldSet {
    InjectField field = InjectField::bth_psn;
    uint64_t value = 0;
};

// One rule as parsed: immutable once published.
struct InjectRule {
    InjectAction action = InjectAction::drop;
    InjectDir dir = InjectDir::tx;
    // match
    bool has_qp = false, has_psn = false;
    uint32_t qp = 0, psn = 0;
    OpClass op_class = OpClass::none;
    uint8_t opcode = 0;         // OpClass::exact
    uint32_t round = 0;         // 0: any
    uint64_t nth = 1;
    double prob = 1.0;
    uint64_t seed = 1;
    uint64_t count = 1;         // 0: no limit ("all")
    // action parameters
    uint32_t us = 0;            // delay; reorder's hold bound (default 1000)
    bool icrc = false;          // corrupt: invert the ICRC
    uint8_t nfields = 0;        // corrupt: fields set, ICRC and IPv4 checksum recomputed after
    std::array<FieldSet, 4> fields{};
    uint8_t timer = 1;          // rnr: the RNR NAK timer code (IBTA table 45)
    bool at_rel = true;         // forged PSN: matched PSN + at (at_rel) or at itself
    int64_t at = 0;
    bool at_given = false;      // rnr without at=: the PSN a responder would NAK (InjectPort::rnr_psn)
    bool add = false;           // forged: sent in addition to the matched frame (else instead)
    uint8_t new_opcode = 0x10;  // unexpected-op
};

enum class InjectError : uint8_t {
    ok, empty, unknown_action, unknown_key, missing_value, bad_number, out_of_range, bad_direction,
    missing_direction, bad_opcode, duplicate_key, not_for_action, corrupt_needs_target, too_many_fields,
    too_many_rules,  // InjectPort::add: kMaxRules already
    count,
};
inline constexpr std::array<const char*, size_t(InjectError::count)> kInjectErrorName = {
    "ok", "empty", "unknown_action", "unknown_key", "missing_value", "bad_number", "out_of_range",
    "bad_direction", "missing_direction", "bad_opcode", "duplicate_key", "not_for_action",
    "corrupt_needs_target", "too_many_fields", "too_many_rules"};
inline const char* name(InjectError e) { return kInjectErrorName[size_t(e)]; }

// Parses one rule. On error: the typed error and a message naming the offending token.
InjectError parse_inject_rule(std::string_view text, InjectRule& out, std::string& msg);
// The canonical text of a rule (parses back to the same rule).
std::string to_string(const InjectRule& r);
// Splits "RULE;RULE;..." (HCAEMU_INJECT), skipping empty pieces.
std::vector<std::string> split_inject_rules(std::string_view s);

// What the data path knows of a frame to match it: decoded from the BTH only.
struct FrameKey {
    uint8_t opcode = 0;
    uint32_t qp = 0;
    uint32_t psn = 0;
};

// Where a RoCE v2 frame's headers are (offsets from the Ethernet header); end: just past the ICRC.
struct FrameLoc {
    uint32_t l3 = 0, l4 = 0, bth = 0, end = 0;
    bool v6 = false;
};

// True when the opcode belongs to the rule's op= (or the rule has none).
bool op_matches(const InjectRule& r, uint8_t opcode);

// A rule at run time: its spec and the state the data path keeps (only the data-path thread
// writes; hits and fired are read from anywhere).
class ActiveRule {
public:
    ActiveRule(uint32_t id, const InjectRule& r);
    // One frame of the rule's direction; `round`: the times its (QP, PSN) was seen this way,
    // this one included. True when the rule fires on it (then it counts a hit).
    bool test(const FrameKey& k, uint32_t round);
    // Undoes the hit of the last test() when the action could not be applied (no buffer).
    void unfire();
    bool exhausted() const { return spec.count && fired_ >= spec.count; }

    const uint32_t id;
    const InjectRule spec;
    const std::string text;
    uint64_t matched() const { return matched_.load(std::memory_order_relaxed); }
    uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }

private:
    uint64_t fired_ = 0;
    uint64_t rng_;
    std::atomic<uint64_t> matched_{0};
    std::atomic<uint64_t> hits_{0};
};

struct InjectRuleInfo {
    uint32_t id = 0;
    std::string text;
    uint64_t matched = 0;  // frames that matched qp/op/psn/round
    uint64_t hits = 0;     // times it fired
};

struct InjectStats {
    uint64_t fired = 0;          // actions applied
    uint64_t no_buffer = 0;      // duplicate/forge/hold skipped: no buffer or the hold queue full
    uint64_t not_applicable = 0; // corrupt of a header the frame lacks
    uint64_t held = 0;           // frames in the delay/reorder queue now
};

class InjectPort final : public Port {
public:
    static constexpr uint32_t kMaxRules = 64;
    static constexpr uint32_t kHold = 256;     // frames delayed or held for reordering
    static constexpr uint32_t kBacklog = 256;  // frames for the inner port it did not take yet
    static constexpr uint32_t kRounds = 4096;  // (QP, PSN) pairs remembered per direction
    static constexpr uint32_t kReqFlows = 64;  // request flows an rnr rule without at= follows
    static constexpr uint32_t kWqePsns = 8;    // per flow: the latest PSNs that need a receive WQE

    // `inner` and `clock` must outlive the InjectPort.
    InjectPort(Port& inner, const Clock& clock);
    ~InjectPort() override;
    InjectPort(const InjectPort&) = delete;
    InjectPort& operator=(const InjectPort&) = delete;

    bool alloc(Frame& f) override { return inner_.alloc(f); }
    uint16_t tx_burst(Frame* frames, uint16_t n) override;
    uint16_t rx_burst(Frame* frames, uint16_t n) override;
    void free(Frame& f) override { inner_.free(f); }
    void free_burst(Frame* frames, uint16_t n) override { inner_.free_burst(frames, n); }
    pkt::Mac mac() const override { return inner_.mac(); }
    uint32_t mtu() const override { return inner_.mtu(); }
    PortStats stats() const override { return inner_.stats(); }
    bool neighbor(const pkt::Ip6& gid, pkt::Mac& mac) override { return inner_.neighbor(gid, mac); }

    // Any thread. add: the new rule's id (from 1), or 0 with `msg` and `err` (a parse error, or
    // too_many_rules). The first rule added that fires on a frame takes it.
    uint32_t add(std::string_view text, std::string& msg, InjectError* err = nullptr);
    bool del(uint32_t id);
    void clear();
    std::vector<InjectRuleInfo> list() const;
    InjectStats inject_stats() const;
    // The earliest time a held frame is due (UINT64_MAX: none): a virtual-time loop jumps no further.
    uint64_t next_due_ns() const { return hold_n_ ? hold_due_min_ : UINT64_MAX; }

    // Notes on the capture NetPort writes above this port (same writer): set before traffic.
    // The numbering assumes NetPort's order: a tx burst's frames written after tx_burst returns,
    // an rx burst's right after rx_burst returns, each in order (test "the capture above the
    // injection" pins it).
    void set_capture(PcapWriter* w);

    struct RuleSet;  // the immutable set the data path reads (inject.cpp)

private:
    struct Held {
        Frame f;
        uint64_t due = 0;
        uint32_t qp = 0;      // reorder: released after the next frame to this QP
        bool reorder = false;
        bool rx = false;
        uint32_t rule = 0;
    };
    struct Round {
        uint32_t qp = 0, psn = 0, n = 0;
    };
    // One direction of an RC connection as its requests cross the port (kept only while an rnr
    // rule without at= is set): where a receive WQE is needed, what was acknowledged.
    struct ReqFlow {
        std::array<uint8_t, 16> src{};  // the requester's address (IPv4 in the last 4 bytes)
        InjectDir dir = InjectDir::tx;  // the requests'
        bool v6 = false, peer_known = false, acked_valid = false;
        uint32_t qp = 0;       // the requests' destination QP (the responder's)
        uint32_t peer_qp = 0;  // the responses' destination QP (the requester's), learnt
        uint32_t lo = 0, hi = 0;  // the first and the highest request PSN seen
        uint32_t acked = 0;       // the latest PSN a response acknowledged
        std::array<uint32_t, kWqePsns> wqe{};
        uint32_t nwqe = 0;
        std::array<uint32_t, kWqePsns> ends{};  // the latest PSNs that ended a message (distinct)
        uint32_t nends = 0;
    };
    struct PendingNote {
        int64_t idx = 0;      // the frame's place in the burst the caller captures
        const char* text = nullptr;
        uint32_t id = 0;
        const char* what = nullptr;
    };

    const RuleSet* enter();
    void leave() { hazard_.store(nullptr, std::memory_order_release); }
    void publish(std::unique_ptr<RuleSet> s);  // writers, under mu_
    uint32_t round(InjectDir d, const FrameKey& k);
    void process(const RuleSet* s, InjectDir d, Frame& f, int64_t idx);
    bool apply(ActiveRule& r, InjectDir d, Frame& f, const FrameLoc& l, const FrameKey& k, int64_t idx, ReqFlow* fl);
    bool forge(const ActiveRule& r, const Frame& f, ReqFlow* fl, Frame& g);
    void track_request(InjectDir d, const uint8_t* p, const FrameLoc& l, const FrameKey& k);
    ReqFlow* response_flow(InjectDir d, const uint8_t* p, const FrameLoc& l, const FrameKey& k);
    uint32_t rnr_psn(ReqFlow* fl, uint32_t ack_psn, bool& found) const;
    static uint32_t ends_between(const ReqFlow& fl, uint32_t from, uint32_t to);
    static uint32_t acked_by(const uint8_t* p, const FrameLoc& l, const FrameKey& k);
    bool copy(const Frame& f, Frame& g);
    bool hold(const ActiveRule& r, InjectDir d, const Frame& f, uint32_t qp);
    void release_held(InjectDir d, uint32_t bound, bool qp_event, uint32_t qp);
    void out(InjectDir d, const Frame& f);  // tx: to the backlog; rx: to the caller's array
    uint32_t flush_backlog();
    void note(int64_t idx, const ActiveRule* r, uint32_t id, const char* what);
    void emit_notes();
    void capture_own(const Frame& f, const ActiveRule& r, const char* what);

    Port& inner_;
    const Clock& clock_;
    PcapWriter* cap_ = nullptr;

    std::atomic<const RuleSet*> set_{nullptr};
    std::atomic<const RuleSet*> hazard_{nullptr};
    mutable std::mutex mu_;  // writers only
    std::vector<std::unique_ptr<RuleSet>> retired_;
    std::unique_ptr<RuleSet> live_;  // owns what set_ points to
    uint32_t next_id_ = 1;

    // data-path state
    std::array<Held, kHold> hold_{};
    uint32_t hold_n_ = 0;
    uint64_t hold_due_min_ = UINT64_MAX;
    std::array<Frame, kBacklog> backlog_{};
    uint32_t back_head_ = 0, back_n_ = 0;
    std::array<std::array<Round, kRounds>, 2> rounds_{};
    std::array<Frame, kBacklog> stage_{};
    std::array<ReqFlow, kReqFlows> req_flows_{};
    uint32_t nreq_flows_ = 0;  // used from the front; when full the oldest slot is reused
    uint32_t req_next_ = 0;
    Frame* rx_out_ = nullptr;
    uint32_t rx_n_ = 0, rx_cap_ = 0;
    std::array<PendingNote, kBacklog> notes_{};
    uint32_t nnotes_ = 0;
    bool not_applied_ = false;  // apply(): the frame passed untouched (corrupt of a missing header)
    bool consumed_ = false;     // apply(): the frame did not go on (dropped, replaced by a forged one)
    std::atomic<uint64_t> fired_{0}, no_buffer_{0}, not_applicable_{0};
    std::atomic<uint32_t> held_now_{0};
};

}  // namespace hcaemu::port
