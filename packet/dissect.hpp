// Human- and script-readable dissection of RoCE v2 frames, driven by the opcode table. Used by
// `hcaemu dissect` and the `sim` trace. Not a data-path function: it builds strings.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "packet/errors.hpp"
#include "packet/messages.hpp"
#include "packet/parse.hpp"

namespace hcaemu::pkt {

enum class DissectFormat : uint8_t { full, brief, json };

struct DissectOptions {
    DissectFormat format = DissectFormat::full;
    bool notes = true;          // full format: explain each header in terms of HCA objects
    size_t payload_bytes = 32;  // full format: payload bytes shown in hex
    bool brief_prefix = true;   // brief format: start with the frame number and time
    Lang lang = Lang::en;       // full and brief formats: the language of the notes and words (JSON: none)
};

// Appends the dissection of one frame, as parse() left it with result `e`, to `out`. `index` is
// 1-based; `frame_len` is the captured length.
void dissect(std::string& out, const Packet& p, ParseError e, size_t frame_len, uint64_t index,
             double time_s, const DissectOptions& opt);

// Counts by opcode and by error, printed at the end of a dissection.
struct DissectSummary {
    uint64_t frames = 0;
    uint64_t roce = 0;             // parsed without error
    uint64_t icrc_ok = 0;
    std::array<uint64_t, 256> by_opcode{};  // frames that parsed far enough to have an opcode
    std::array<uint64_t, kParseErrorCount> by_error{};
    uint64_t gmp = 0;              // frames to QP1 (GSI): MADs, see mad_dissect.hpp
    uint64_t gmp_bad = 0;          // of which malformed or with reserved bits set (check_gmp)
    void add(const Packet& p, ParseError e);
    void print(std::string& out, DissectFormat format, Lang lang = Lang::en) const;
};

}  // namespace hcaemu::pkt
