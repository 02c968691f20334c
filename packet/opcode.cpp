#include "packet/opcode.hpp"

#include "packet/headers.hpp"

namespace hcaemu::pkt {

const std::array<const char*, kExtCount> kExtName = {"DETH", "FETH", "RETH", "AtomicETH", "AETH",
                                                     "AtomicAckETH", "ImmDt", "IETH", "CNP"};
const std::array<const char*, 4> kTransportName = {"RC", "UC", "UD", "CNP"};
const std::array<const char*, 5> kPositionName = {"-", "First", "Middle", "Last", "Only"};
const std::array<const char*, 11> kKindName = {"send", "rdma_write", "rdma_read_request",
                                               "rdma_read_response", "ack", "atomic_ack",
                                               "cmp_swap", "fetch_add", "flush", "atomic_write",
                                               "cnp"};

namespace {

constexpr uint16_t DETH = ext_bit(Ext::deth), FETH = ext_bit(Ext::feth), RETH = ext_bit(Ext::reth),
                   ATOM = ext_bit(Ext::atomic_eth), AETH = ext_bit(Ext::aeth),
                   AACK = ext_bit(Ext::atomic_ack_eth), IMM = ext_bit(Ext::immdt),
                   IETH = ext_bit(Ext::ieth), CNPH = ext_bit(Ext::cnp);

struct Row {
    uint8_t code;
    Transport t;
    Kind k;
    Position p;
    uint16_t exts;
    bool payload;
    bool request;
};

using K = Kind;
using P = Position;
using T = Transport;

// RC and UC share the SEND and RDMA WRITE rows (IBTA 9.2 table 38); UC has nothing else.
constexpr Row kRows[] = {
    {op::send_first, T::rc, K::send, P::first, 0, true, true},
    {op::send_middle, T::rc, K::send, P::middle, 0, true, true},
    {op::send_last, T::rc, K::send, P::last, 0, true, true},
    {op::send_last_imm, T::rc, K::send, P::last, IMM, true, true},
    {op::send_only, T::rc, K::send, P::only, 0, true, true},
    {op::send_only_imm, T::rc, K::send, P::only, IMM, true, true},
    {op::write_first, T::rc, K::rdma_write, P::first, RETH, true, true},
    {op::write_middle, T::rc, K::rdma_write, P::middle, 0, true, true},
    {op::write_last, T::rc, K::rdma_write, P::last, 0, true, true},
    {op::write_last_imm, T::rc, K::rdma_write, P::last, IMM, true, true},
    {op::write_only, T::rc, K::rdma_write, P::only, RETH, true, true},
    {op::write_only_imm, T::rc, K::rdma_write, P::only, RETH | IMM, true, true},
};
constexpr Row kRcOnly[] = {
    {op::read_request, T::rc, K::rdma_read_request, P::only, RETH, false, true},
    {op::read_response_first, T::rc, K::rdma_read_response, P::first, AETH, true, false},
    {op::read_response_middle, T::rc, K::rdma_read_response, P::middle, 0, true, false},
    {op::read_response_last, T::rc, K::rdma_read_response, P::last, AETH, true, false},
    {op::read_response_only, T::rc, K::rdma_read_response, P::only, AETH, true, false},
    {op::acknowledge, T::rc, K::ack, P::only, AETH, false, false},
    {op::atomic_acknowledge, T::rc, K::atomic_ack, P::only, AETH | AACK, false, false},
    {op::cmp_swap, T::rc, K::cmp_swap, P::only, ATOM, false, true},
    {op::fetch_add, T::rc, K::fetch_add, P::only, ATOM, false, true},
    {op::send_last_inv, T::rc, K::send, P::last, IETH, true, true},
    {op::send_only_inv, T::rc, K::send, P::only, IETH, true, true},
    {op::flush, T::rc, K::flush, P::only, FETH | RETH, false, true},
    {op::atomic_write, T::rc, K::atomic_write, P::only, RETH, true, true},
};
// UD carries only SEND Only (with or without ImmDt), each with a DETH (IBTA 9.2 table 38).
constexpr Row kUd[] = {
    {op::ud | op::send_only, T::ud, K::send, P::only, DETH, true, true},
    {op::ud | op::send_only_imm, T::ud, K::send, P::only, DETH | IMM, true, true},
};

// Names with the transport prefix, kept as literals so that the table holds no owned strings.
constexpr const char* kRcNames[] = {
    "RC SEND First", "RC SEND Middle", "RC SEND Last", "RC SEND Last with Immediate", "RC SEND Only",
    "RC SEND Only with Immediate", "RC RDMA WRITE First", "RC RDMA WRITE Middle",
    "RC RDMA WRITE Last", "RC RDMA WRITE Last with Immediate", "RC RDMA WRITE Only",
    "RC RDMA WRITE Only with Immediate"};
constexpr const char* kUcNames[] = {
    "UC SEND First", "UC SEND Middle", "UC SEND Last", "UC SEND Last with Immediate", "UC SEND Only",
    "UC SEND Only with Immediate", "UC RDMA WRITE First", "UC RDMA WRITE Middle",
    "UC RDMA WRITE Last", "UC RDMA WRITE Last with Immediate", "UC RDMA WRITE Only",
    "UC RDMA WRITE Only with Immediate"};
constexpr const char* kRcIds[] = {
    "RC_SEND_FIRST", "RC_SEND_MIDDLE", "RC_SEND_LAST", "RC_SEND_LAST_WITH_IMMEDIATE", "RC_SEND_ONLY",
    "RC_SEND_ONLY_WITH_IMMEDIATE", "RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE",
    "RC_RDMA_WRITE_LAST", "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "RC_RDMA_WRITE_ONLY",
    "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"};
constexpr const char* kUcIds[] = {
    "UC_SEND_FIRST", "UC_SEND_MIDDLE", "UC_SEND_LAST", "UC_SEND_LAST_WITH_IMMEDIATE", "UC_SEND_ONLY",
    "UC_SEND_ONLY_WITH_IMMEDIATE", "UC_RDMA_WRITE_FIRST", "UC_RDMA_WRITE_MIDDLE",
    "UC_RDMA_WRITE_LAST", "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "UC_RDMA_WRITE_ONLY",
    "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"};
constexpr const char* kRcOnlyNames[] = {
    "RC RDMA READ Request", "RC RDMA READ response First", "RC RDMA READ response Middle",
    "RC RDMA READ response Last", "RC RDMA READ response Only", "RC Acknowledge",
    "RC ATOMIC Acknowledge", "RC CmpSwap", "RC FetchAdd", "RC SEND Last with Invalidate",
    "RC SEND Only with Invalidate", "RC FLUSH", "RC ATOMIC WRITE"};
constexpr const char* kRcOnlyIds[] = {
    "RC_RDMA_READ_REQUEST", "RC_RDMA_READ_RESPONSE_FIRST", "RC_RDMA_READ_RESPONSE_MIDDLE",
    "RC_RDMA_READ_RESPONSE_LAST", "RC_RDMA_READ_RESPONSE_ONLY", "RC_ACKNOWLEDGE",
    "RC_ATOMIC_ACKNOWLEDGE", "RC_COMPARE_SWAP", "RC_FETCH_ADD", "RC_SEND_LAST_WITH_INVALIDATE",
    "RC_SEND_ONLY_WITH_INVALIDATE", "RC_FLUSH", "RC_ATOMIC_WRITE"};

constexpr OpcodeInfo make(const Row& r, Transport t, const char* name, const char* id) {
    OpcodeInfo o;
    o.name = name;
    o.id = id;
    o.transport = t;
    o.kind = r.k;
    o.pos = r.p;
    o.exts = r.exts;
    o.payload = r.payload;
    o.request = r.request;
    uint8_t off = 0;
    for (size_t e = 0; e < kExtCount; ++e) {
        if (r.exts & (1u << e)) {
            o.ext_off[e] = off;
            off = uint8_t(off + kExtLen[e]);
        }
    }
    o.ext_len = off;
    return o;
}

constexpr std::array<OpcodeInfo, 256> build_table() {
    std::array<OpcodeInfo, 256> t{};
    for (size_t i = 0; i < std::size(kRows); ++i) {
        const Row& r = kRows[i];
        t[op::rc | r.code] = make(r, T::rc, kRcNames[i], kRcIds[i]);
        t[op::uc | r.code] = make(r, T::uc, kUcNames[i], kUcIds[i]);
    }
    for (size_t i = 0; i < std::size(kRcOnly); ++i)
        t[kRcOnly[i].code] = make(kRcOnly[i], T::rc, kRcOnlyNames[i], kRcOnlyIds[i]);
    t[kUd[0].code] = make(kUd[0], T::ud, "UD SEND Only", "UD_SEND_ONLY");
    t[kUd[1].code] = make(kUd[1], T::ud, "UD SEND Only with Immediate", "UD_SEND_ONLY_WITH_IMMEDIATE");
    const Row cnp{op::cnp, T::cnp, K::cnp, P::only, CNPH, false, false};
    t[op::cnp] = make(cnp, T::cnp, "CNP", "CNP");
    return t;
}

}  // namespace

constinit const std::array<OpcodeInfo, 256> kOpcodeTable = build_table();

const char* aeth_type_name(AethType t) {
    static constexpr const char* names[] = {"ACK", "RNR NAK", "reserved", "NAK"};
    return names[uint8_t(t) & 3];
}

const char* nak_code_name(uint8_t code) {
    static constexpr const char* names[] = {"PSN sequence error", "invalid request",
                                            "remote access error", "remote operational error",
                                            "invalid RD request"};
    return code < 5 ? names[code] : "reserved";
}

}  // namespace hcaemu::pkt
