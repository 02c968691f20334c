// Dissection of the MADs a RoCE v2 frame carries to QP1 (the GSI), field by field from the tables of
// packet/mad.hpp, and the checks `hcaemu dissect --strict` applies to them. Not a data-path function.
#pragma once
#include <cstddef>
#include <string>

#include "packet/dissect.hpp"
#include "packet/mad.hpp"

namespace hcaemu::pkt {

// A frame that parsed (decoded_all) and is addressed to QP1: dissect_gmp has something to say.
bool is_gsi_frame(const Packet& p, ParseError e);

// The GSI carriage (check_gsi), the CM MAD (parse_cm) and its reserved bits. A MAD of another
// management class is not an error here (the GSI answers or drops it; only CM is decoded).
struct GmpCheck {
    MadError error = MadError::ok;
    size_t reserved_bytes = 0;   // MAD bytes with a reserved bit set
    size_t first_reserved = 0;   // the first such byte's MAD offset
    bool ok() const { return (error == MadError::ok || error == MadError::not_cm_class) && reserved_bytes == 0; }
};
GmpCheck check_gmp(const Packet& p);

// Appends the MAD of a GSI frame in `o.format`: full (a block per header, one line per field, with
// notes), brief (a few key fields, to append to the frame's line), json (a ",\"mad\":{...}" member).
void dissect_gmp(std::string& out, const Packet& p, const DissectOptions& o);

}  // namespace hcaemu::pkt
