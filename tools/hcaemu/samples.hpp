// A teaching conversation: one frame of every opcode in the opcode table, between two RoCE v2
// ports on 198.18.0.0/15 (and one IPv6 and one VLAN-tagged frame), built with the packet layer.
// `hcaemu demo` writes it as pcap; tests check it with tshark and scapy.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "packet/headers.hpp"
#include "packet/messages.hpp"

namespace hcaemu::tools {

struct SampleFrame {
    std::vector<uint8_t> bytes;
    pkt::Headers h;                 // the fields it was built from
    std::vector<uint8_t> payload;
    std::string what;               // one line: what this frame is doing in the conversation (English)
    pkt::Msg what_msg{};            // the same line in the message table
    std::string what_arg;           // its {0}, if it has one
};

std::vector<SampleFrame> sample_frames();
// The frame's line in `lang`.
std::string caption(const SampleFrame& f, pkt::Lang lang);

}  // namespace hcaemu::tools
