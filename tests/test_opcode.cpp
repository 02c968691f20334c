// The opcode table against an independent transcription of IBTA 9.2 table 38 and A17.9.3.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "packet/opcode.hpp"

using namespace hcaemu::pkt;

namespace {

struct Expect {
    uint8_t code;
    const char* name;
    std::vector<Ext> exts;  // in wire order
    bool payload;
    Position pos;
    bool request;
};

const std::vector<Expect> kSpec = {
    {0x00, "RC SEND First", {}, true, Position::first, true},
    {0x01, "RC SEND Middle", {}, true, Position::middle, true},
    {0x02, "RC SEND Last", {}, true, Position::last, true},
    {0x03, "RC SEND Last with Immediate", {Ext::immdt}, true, Position::last, true},
    {0x04, "RC SEND Only", {}, true, Position::only, true},
    {0x05, "RC SEND Only with Immediate", {Ext::immdt}, true, Position::only, true},
    {0x06, "RC RDMA WRITE First", {Ext::reth}, true, Position::first, true},
    {0x07, "RC RDMA WRITE Middle", {}, true, Position::middle, true},
    {0x08, "RC RDMA WRITE Last", {}, true, Position::last, true},
    {0x09, "RC RDMA WRITE Last with Immediate", {Ext::immdt}, true, Position::last, true},
    {0x0A, "RC RDMA WRITE Only", {Ext::reth}, true, Position::only, true},
    {0x0B, "RC RDMA WRITE Only with Immediate", {Ext::reth, Ext::immdt}, true, Position::only, true},
    {0x0C, "RC RDMA READ Request", {Ext::reth}, false, Position::only, true},
    {0x0D, "RC RDMA READ response First", {Ext::aeth}, true, Position::first, false},
    {0x0E, "RC RDMA READ response Middle", {}, true, Position::middle, false},
    {0x0F, "RC RDMA READ response Last", {Ext::aeth}, true, Position::last, false},
    {0x10, "RC RDMA READ response Only", {Ext::aeth}, true, Position::only, false},
    {0x11, "RC Acknowledge", {Ext::aeth}, false, Position::only, false},
    {0x12, "RC ATOMIC Acknowledge", {Ext::aeth, Ext::atomic_ack_eth}, false, Position::only, false},
    {0x13, "RC CmpSwap", {Ext::atomic_eth}, false, Position::only, true},
    {0x14, "RC FetchAdd", {Ext::atomic_eth}, false, Position::only, true},
    {0x16, "RC SEND Last with Invalidate", {Ext::ieth}, true, Position::last, true},
    {0x17, "RC SEND Only with Invalidate", {Ext::ieth}, true, Position::only, true},
    {0x1C, "RC FLUSH", {Ext::feth, Ext::reth}, false, Position::only, true},
    {0x1D, "RC ATOMIC WRITE", {Ext::reth}, true, Position::only, true},
    {0x20, "UC SEND First", {}, true, Position::first, true},
    {0x21, "UC SEND Middle", {}, true, Position::middle, true},
    {0x22, "UC SEND Last", {}, true, Position::last, true},
    {0x23, "UC SEND Last with Immediate", {Ext::immdt}, true, Position::last, true},
    {0x24, "UC SEND Only", {}, true, Position::only, true},
    {0x25, "UC SEND Only with Immediate", {Ext::immdt}, true, Position::only, true},
    {0x26, "UC RDMA WRITE First", {Ext::reth}, true, Position::first, true},
    {0x27, "UC RDMA WRITE Middle", {}, true, Position::middle, true},
    {0x28, "UC RDMA WRITE Last", {}, true, Position::last, true},
    {0x29, "UC RDMA WRITE Last with Immediate", {Ext::immdt}, true, Position::last, true},
    {0x2A, "UC RDMA WRITE Only", {Ext::reth}, true, Position::only, true},
    {0x2B, "UC RDMA WRITE Only with Immediate", {Ext::reth, Ext::immdt}, true, Position::only, true},
    {0x64, "UD SEND Only", {Ext::deth}, true, Position::only, true},
    {0x65, "UD SEND Only with Immediate", {Ext::deth, Ext::immdt}, true, Position::only, true},
    {0x81, "CNP", {Ext::cnp}, false, Position::only, false},
};

// Header sizes in bytes, IBTA 9.3 (and A17.9.3 for the CNP's reserved field).
size_t spec_len(Ext e) {
    switch (e) {
    case Ext::deth: return 8;
    case Ext::feth: return 4;
    case Ext::reth: return 16;
    case Ext::atomic_eth: return 28;
    case Ext::aeth: return 4;
    case Ext::atomic_ack_eth: return 8;
    case Ext::immdt: return 4;
    case Ext::ieth: return 4;
    case Ext::cnp: return 16;
    default: return 0;
    }
}

}  // namespace

TEST_CASE("opcode table matches IBTA table 38 entry by entry", "[opcode]") {
    for (const Expect& x : kSpec) {
        const OpcodeInfo& oi = opcode_info(x.code);
        INFO("opcode 0x" << std::hex << int(x.code));
        REQUIRE(oi.valid());
        CHECK(std::string(oi.name) == x.name);
        CHECK(oi.payload == x.payload);
        CHECK(oi.pos == x.pos);
        CHECK(oi.request == x.request);
        size_t off = 0;
        uint16_t mask = 0;
        for (Ext e : x.exts) {
            CHECK(oi.has(e));
            CHECK(oi.ext_off[size_t(e)] == off);
            off += spec_len(e);
            mask |= ext_bit(e);
        }
        CHECK(oi.exts == mask);
        CHECK(oi.ext_len == off);
    }
}

TEST_CASE("only the listed opcodes are valid", "[opcode]") {
    size_t valid = 0;
    for (int c = 0; c < 256; ++c) {
        if (!opcode_info(uint8_t(c)).valid()) continue;
        ++valid;
        bool listed = false;
        for (const Expect& x : kSpec) listed |= x.code == c;
        INFO("opcode 0x" << std::hex << c);
        CHECK(listed);
    }
    CHECK(valid == kSpec.size());
    for (uint8_t c : {0x15, 0x18, 0x1B, 0x1E, 0x1F, 0x2C, 0x40, 0x60, 0x63, 0x66, 0x80, 0xA0, 0xFF})
        CHECK_FALSE(opcode_info(c).valid());
}

TEST_CASE("transport and kind follow the opcode's high bits and low bits", "[opcode]") {
    for (const Expect& x : kSpec) {
        const OpcodeInfo& oi = opcode_info(x.code);
        const Transport want = x.code == 0x81 ? Transport::cnp
                               : x.code >= 0x60 ? Transport::ud
                               : x.code >= 0x20 ? Transport::uc
                                                : Transport::rc;
        CHECK(oi.transport == want);
        if (x.code < 0x60 && (x.code & 0x1F) <= 0x05) CHECK(oi.kind == Kind::send);
        if (x.code < 0x60 && (x.code & 0x1F) >= 0x06 && (x.code & 0x1F) <= 0x0B) CHECK(oi.kind == Kind::rdma_write);
        // identifiers are the names in upper case with underscores (rdma-core's spelling)
        CHECK(std::string(oi.id).find(' ') == std::string::npos);
    }
}
