// The conformance monitor (docs/conform.md): a stateful checker that sees every RoCE v2 frame in
// both directions of a port or of a capture, learns the RC connections from the traffic (requests
// one way, responses the other, paired by PSN) and checks each packet a sender puts on the wire
// against the rules it must follow, per QP and across packets. Each rule is a row of kConfRules:
// an id, the IBTA section or compliance statement, a severity and its message (packet/messages.*).
//
// ConformMonitor is the checker (fixed tables, no allocation per frame: it can run on the data
// path); ConformPort is a Port decorator that feeds it every frame sent and received (live mode,
// --conform); `hcaemu conform FILE.pcap` feeds it a capture (offline).
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dpdk_port/clock.hpp"
#include "dpdk_port/port.hpp"
#include "packet/headers.hpp"
#include "packet/messages.hpp"

namespace hcaemu::port {

enum class ConfRule : uint8_t {
    icrc,             // the ICRC does not match
    malformed,        // a frame to UDP 4791 that does not parse (truncated, unknown opcode, ...)
    tver,             // BTH TVer not 0
    bth_reserved,     // reserved BTH bits set
    pkey,             // P_Key invalid or not the QP's
    padcnt,           // PadCnt inconsistent with the payload
    mtu,              // payload against the path MTU
    udp_sport,        // UDP source port not stable per QP
    opcode_seq,       // First/Middle/Last out of order at consecutive PSNs
    psn_window,       // more than 2^23 PSNs outstanding
    resp_unsolicited, // a response to a request never sent
    resp_opcode,      // a response of the wrong kind for the request at that PSN
    read_opcode,      // READ response opcode not the one for its place in the READ
    read_length,      // READ response payload length
    atomic_resp,      // atomic ACK not for an atomic request, or an atomic request misaligned
    aeth_syndrome,    // AETH syndrome reserved (type, NAK code, bit 7)
    aeth_msn,         // MSN went back
    retx_psn,         // retransmission not restarting at the right PSN
    rnr_timer,        // retransmission before the RNR NAK's timer ran out
    retry_count,      // more retries of one PSN than retry_cnt allows
    cnp_pacing,       // CNPs to one QP closer than the minimum interval
    count,
};
inline constexpr size_t kConfRuleCount = size_t(ConfRule::count);

enum class Severity : uint8_t { error, warning };
inline constexpr std::array<const char*, 2> kSeverityName = {"error", "warning"};

struct ConfRuleInfo {
    const char* id;    // stable, as reports and counters name it: "resp.unsolicited"
    const char* cite;  // the spec's section or compliance statement
    Severity sev;
    pkt::Msg msg;      // the message: {0} {1} {2} are Violation::a, b, c; {3} {4}: what, what2; {5} {6}: a, b in hex
};
extern const std::array<ConfRuleInfo, kConfRuleCount> kConfRules;
inline const ConfRuleInfo& info(ConfRule r) { return kConfRules[size_t(r)]; }

// One violation: the frame that broke the rule and what the message needs.
struct Violation {
    ConfRule rule = ConfRule::malformed;
    pkt::Msg msg = pkt::Msg::conf_malformed;  // the rule's message, or a variant of it
    uint64_t frame = 0;   // 1-based, as dissect numbers a capture's frames
    uint64_t ts_ns = 0;
    uint32_t qp = 0;      // the BTH destination QP of the frame
    uint32_t psn = 0;
    uint8_t opcode = 0;
    bool has_bth = false;
    pkt::Ip6 src{}, dst{};
    uint64_t a = 0, b = 0, c = 0;
    const char* what = "";   // static text (an opcode's name, a parse error's name)
    const char* what2 = "";
};

// The rule's message with its arguments, and a one-line report:
// "frame 12 198.18.0.3 -> 198.18.0.2 QP 0x000011 PSN 5: MESSAGE [id, cite]".
std::string message(const Violation& v, pkt::Lang lang);
std::string describe(const Violation& v, pkt::Lang lang);
std::string to_json(const Violation& v, pkt::Lang lang);

struct ConformConfig {
    uint8_t retry_cnt = 7;              // the QP's retry_cnt the requester must honour (IBTA: 0..7)
    uint64_t cnp_interval_ns = 50'000;  // the minimum interval between CNPs to one QP
    // A capture stamps a frame when it is written (a live port: when its burst is handled), not
    // when the device decided to send it: intervals this much short of the minimum pass.
    uint64_t cnp_slack_ns = 5'000;
    bool verify_icrc = true;
};

struct ConformStats {
    uint64_t frames = 0;       // frames seen
    uint64_t roce = 0;         // RoCE v2 frames (UDP 4791)
    uint64_t flows = 0;        // flows learnt
    uint64_t table_full = 0;   // frames of a flow the table had no room for (checked per frame only)
    uint64_t violations = 0;
};

class ConformMonitor {
public:
    static constexpr uint32_t kFlows = 1024;  // (source, destination, destination QP) triples
    static constexpr uint32_t kMsgs = 64;     // outstanding messages remembered per flow

    explicit ConformMonitor(const ConformConfig& cfg = {});
    ~ConformMonitor();
    ConformMonitor(const ConformMonitor&) = delete;
    ConformMonitor& operator=(const ConformMonitor&) = delete;

    // Called for each violation, on the thread that calls frame().
    using Sink = void (*)(void* ctx, const Violation& v);
    void set_sink(Sink sink, void* ctx) { sink_ = sink; sink_ctx_ = ctx; }

    // One frame as it crossed the wire (Ethernet header first), at `ts_ns`, numbered `frame_no`.
    // Frames that are not RoCE v2 are counted and ignored.
    // late_ns: how much before ts_ns the frame may have arrived (a capture stamps a received
    // frame when its poll returns; PcapWriter::note_late); 0 when the stamp is exact.
    void frame(std::span<const uint8_t> data, uint64_t ts_ns, uint64_t frame_no, uint64_t late_ns = 0);

    // Forgets every flow and count (the data-path thread): as new, without allocating.
    void reset();

    // Any thread.
    uint64_t count(ConfRule r) const { return counts_[size_t(r)].load(std::memory_order_relaxed); }
    ConformStats stats() const;
    const ConformConfig& config() const { return cfg_; }

    struct Flow;  // conform.cpp
    struct Ctx;

private:
    Flow* find(const pkt::Ip6& src, const pkt::Ip6& dst, uint32_t qp, bool create);
    Flow* bind_responses(Flow& resp, uint32_t psn);
    void report(Violation& v);
    void check_headers(Ctx& c);
    void on_request(Ctx& c);
    void on_restart(Ctx& c, Flow& f);
    void on_response(Ctx& c);
    void check_read_response(Ctx& c, Flow& req);
    void on_ack(Ctx& c, Flow& req);
    void on_cnp(Ctx& c);

    ConformConfig cfg_;
    std::unique_ptr<Flow[]> flows_;
    uint32_t nflows_ = 0;
    Sink sink_ = nullptr;
    void* sink_ctx_ = nullptr;
    std::array<std::atomic<uint64_t>, kConfRuleCount> counts_{};
    std::atomic<uint64_t> frames_{0}, roce_{0}, table_full_{0}, violations_{0};
};

// Offline: every frame of a pcap file through a monitor; its violations appended to `out`.
// A frame the capture's notes (FILE.pcap.notes, docs/inject.md) say an injection rule kept off
// the wire ("...: not sent": a tx drop, a withheld ACK, a frame replaced by a forged one) is
// skipped, its number kept: the peer never saw it. False with `err` when the file cannot be read
// (missing, not a pcap, not Ethernet, a read error).
bool conform_pcap(const std::string& path, ConformMonitor& mon, std::vector<Violation>& out, std::string& err);
// A rule by its id ("resp.unsolicited"); false when there is none.
bool rule_from_id(std::string_view id, ConfRule& out);

// A Port decorator that shows every frame it passes, both ways, to a ConformMonitor, and keeps the
// latest violations. Sits right above the ethdev (below InjectPort): it checks what the wire carries.
class ConformPort final : public Port {
public:
    static constexpr uint32_t kRecent = 256;  // latest violations kept for a report at exit

    ConformPort(Port& inner, const Clock& clock, const ConformConfig& cfg = {});
    bool alloc(Frame& f) override { return inner_.alloc(f); }
    uint16_t tx_burst(Frame* frames, uint16_t n) override;
    uint16_t rx_burst(Frame* frames, uint16_t n) override;
    void free(Frame& f) override { inner_.free(f); }
    pkt::Mac mac() const override { return inner_.mac(); }
    uint32_t mtu() const override { return inner_.mtu(); }
    PortStats stats() const override { return inner_.stats(); }
    bool neighbor(const pkt::Ip6& gid, pkt::Mac& mac) override { return inner_.neighbor(gid, mac); }

    const ConformMonitor& monitor() const { return mon_; }
    // The latest violations, oldest first (the data-path thread, or after it stopped).
    uint32_t recent(std::array<Violation, kRecent>& out) const;

private:
    static void sink(void* self, const Violation& v);
    void see(const Frame& f);

    Port& inner_;
    const Clock& clock_;
    ConformMonitor mon_;
    uint64_t frame_no_ = 0;
    uint64_t drained_ns_ = 0;  // when a poll last left the inner port's ring empty
    std::array<Violation, kRecent> recent_{};
    uint64_t nrecent_ = 0;
    // tx frames offered but not taken: offered again next time, they are not seen twice
    std::array<const uint8_t*, 64> untaken_{};
    uint32_t nuntaken_ = 0;
};

}  // namespace hcaemu::port
