// Ladder (sequence) diagrams of RoCE v2 captures: the model (capture -> lanes and arrows with their
// labels, pure data) and its SVG rendering. `hcaemu ladder`, `hcaemu sim --ladder` and
// `hcaemu demo --ladder` draw with it; the tests check the model field by field.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "packet/errors.hpp"
#include "packet/headers.hpp"

namespace hcaemu::ladder {

// Why a frame in the capture never reached its receiver (known to `hcaemu sim`'s wire, not to a
// pcap; or to an injection rule, from the capture's notes: FILE.pcap.notes).
enum class DropReason : uint8_t { lost, too_big, rx_full, injected };
const char* name(DropReason r);

struct Drop {
    uint64_t frame = 0;  // 1-based number of the frame in the capture
    DropReason why = DropReason::lost;
};

// One endpoint: an IP address and a QP. `qpn_known` is false when the capture never shows the QP
// that sent a flow (no packet in the other direction, no DETH).
struct Lane {
    pkt::Ip6 ip{};  // IPv4 as ::ffff:a.b.c.d
    uint32_t qpn = 0;
    bool qpn_known = true;
    std::string host;  // "198.18.0.1"
    std::string name;  // "198.18.0.1 QP 0x000011" or "198.18.0.1 QP ?"
};

enum class Syndrome : uint8_t { none, ack, rnr_nak, reserved, nak };  // AETH, IBTA 9.3.5

// One packet (or, in the summary, one message's packets).
struct Arrow {
    uint64_t frame = 0;        // first frame (1-based)
    uint64_t frame_last = 0;   // last frame of a summary row; == frame otherwise
    uint64_t t_ns = 0;         // since the capture's first RoCE v2 frame
    uint32_t from = 0, to = 0; // lane indices
    uint8_t opcode = 0;
    bool request = false;      // a request (SEND, WRITE, READ request, atomic); false: a response or CNP
    uint32_t psn = 0, psn_last = 0;
    uint32_t packets = 1;
    uint64_t len = 0;          // payload bytes
    Syndrome syndrome = Syndrome::none;
    uint8_t syndrome_value = 0; // NAK code, RNR timer code or credits
    uint32_t msn = 0;
    bool retx = false;         // its PSN was seen before in the same direction
    bool dup = false;          // ... in a byte-identical frame: a copy, not a retransmission
    bool lost = false;
    DropReason drop = DropReason::lost;
    bool malformed = false;    // did not parse (or a bad ICRC): `error` says why
    pkt::ParseError error = pkt::ParseError::ok;
    int64_t answers = -1;      // index of the request arrow it answers or acknowledges, if shown
    std::string label;         // "RDMA WRITE First PSN 0x000100 len 1024"
    std::string note;          // "acks PSN 0x000100..0x000102", "retx", "lost on the wire", ...
};

// A quiet stretch between two arrows, drawn compressed with its length.
struct Gap {
    size_t before = 0;  // the arrow it precedes
    uint64_t ns = 0;
};

struct Stats {
    uint64_t frames = 0;     // in the capture
    uint64_t roce = 0;       // UDP/4791 frames with a BTH: each became an arrow
    uint64_t skipped = 0;    // not RoCE v2 (ARP, TCP, other UDP ports): skipped
    uint64_t malformed = 0;  // RoCE v2 but cut before the BTH: counted, not drawn
    uint64_t bad = 0;        // arrows of frames that did not parse fully (drawn, marked)
    uint64_t lost = 0;       // frames the wire dropped (from the Drop list)
    uint64_t shown = 0;      // arrows after --frames/--qp (summary: packets in the rows)
};

struct Ladder {
    std::vector<Lane> lanes;
    std::vector<Arrow> arrows;
    std::vector<Gap> gaps;
    Stats stats;
};

struct Options {
    uint64_t first_frame = 1;           // --frames A-B, inclusive, 1-based
    uint64_t last_frame = UINT64_MAX;
    bool qp_filter = false;             // --qp N: arrows from or to QP N (either side)
    uint32_t qp = 0;
    bool summary = false;               // one row per message (see docs/tools/ladder.md)
    uint64_t gap_ns = 1'000'000;        // a pause this long or longer is drawn as a gap
};

// Collects a capture's frames in order, then builds the ladder.
class Builder {
public:
    Builder();
    ~Builder();
    Builder(const Builder&) = delete;
    Builder& operator=(const Builder&) = delete;

    void add(std::span<const uint8_t> frame, uint64_t ts_ns);
    // Frame `frame` (1-based) never arrived; unknown frame numbers are ignored.
    void drop(const Drop& d);
    uint64_t frames() const;
    Ladder build(const Options& opt) const;

    struct Rec;  // one frame's fields (ladder.cpp)

private:
    std::vector<Rec> recs_;
    std::vector<Drop> drops_;
    uint64_t frames_ = 0, skipped_ = 0, malformed_ = 0;
};

// Reads a pcap into `b`. False on a missing, unreadable or non-Ethernet file or a read error
// (a truncated capture), with `err` saying which.
bool read_pcap(const std::string& path, Builder& b, std::string& err);

// More arrows than this make a diagram nobody reads: --frames, --qp or --summary first.
constexpr size_t kMaxArrows = 20000;

struct RenderOptions {
    std::string title;  // the top line; the file name, say
};
std::string render_svg(const Ladder& l, const RenderOptions& ro);
// The same SVG inline in a minimal HTML page.
std::string render_html(const Ladder& l, const RenderOptions& ro);

// pcap + drops -> SVG or HTML (by the extension of `out`: .svg, .html, .htm) in one call, for the
// tools. Anything but `ok` comes with `err` and nothing written.
enum class WriteResult { ok, bad_input, nothing_to_draw, write_failed };
WriteResult write_ladder(const std::string& pcap, std::span<const Drop> drops, const std::string& out, const Options& opt,
                  std::string& err, Ladder* model = nullptr);
// True when `out` ends in .svg, .html or .htm.
bool output_ext_ok(const std::string& out);

}  // namespace hcaemu::ladder
