// The one opcode table (IBTA 9.2 table 38 and Annex A17.9.3). Parse, build and dissect all read it:
// which extension headers follow the BTH and in what order, whether payload follows, the packet's
// position in its message, and whether it is a request or a response.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace hcaemu::pkt {

// Extension headers in the order they follow the BTH (IBTA 9.2.1: DETH, RETH/AtomicETH, AETH,
// AtomicAckETH, ImmDt/IETH; the IBTA 1.5 FETH precedes the FLUSH's RETH; the CNP's 16 reserved
// bytes stand alone).
enum class Ext : uint8_t { deth, feth, reth, atomic_eth, aeth, atomic_ack_eth, immdt, ieth, cnp, count };
constexpr size_t kExtCount = size_t(Ext::count);
constexpr uint16_t ext_bit(Ext e) { return uint16_t(1u << uint8_t(e)); }
inline constexpr std::array<uint8_t, kExtCount> kExtLen = {8, 4, 16, 28, 4, 8, 4, 4, 16};
extern const std::array<const char*, kExtCount> kExtName;

enum class Transport : uint8_t { rc, uc, ud, cnp };
extern const std::array<const char*, 4> kTransportName;

enum class Position : uint8_t { none, first, middle, last, only };
extern const std::array<const char*, 5> kPositionName;

// What a packet does; the transport engines dispatch on it.
enum class Kind : uint8_t {
    send, rdma_write, rdma_read_request, rdma_read_response, ack, atomic_ack, cmp_swap, fetch_add,
    flush, atomic_write, cnp,
};
extern const std::array<const char*, 11> kKindName;

namespace op {  // opcode byte values, IBTA 9.2 table 38
constexpr uint8_t rc = 0x00, uc = 0x20, ud = 0x60;
constexpr uint8_t send_first = 0x00, send_middle = 0x01, send_last = 0x02, send_last_imm = 0x03,
                  send_only = 0x04, send_only_imm = 0x05, write_first = 0x06, write_middle = 0x07,
                  write_last = 0x08, write_last_imm = 0x09, write_only = 0x0A, write_only_imm = 0x0B,
                  read_request = 0x0C, read_response_first = 0x0D, read_response_middle = 0x0E,
                  read_response_last = 0x0F, read_response_only = 0x10, acknowledge = 0x11,
                  atomic_acknowledge = 0x12, cmp_swap = 0x13, fetch_add = 0x14,
                  send_last_inv = 0x16, send_only_inv = 0x17, flush = 0x1C, atomic_write = 0x1D;
constexpr uint8_t cnp = 0x81;  // IBTA Annex A17: CNP, "RoCEv2 congestion notification"
}  // namespace op

struct OpcodeInfo {
    const char* name = nullptr;   // as the spec writes it, with the transport: "RC SEND First"
    const char* id = nullptr;     // identifier style, as rdma-core spells it: "RC_SEND_FIRST"
    Transport transport = Transport::rc;
    Kind kind = Kind::send;
    Position pos = Position::none;
    uint16_t exts = 0;            // ext_bit() mask
    bool payload = false;         // data may follow the headers
    bool request = false;         // false: a response (ACK, READ response, atomic ACK); CNP: neither
    uint8_t ext_len = 0;          // bytes of extension headers after the BTH
    std::array<uint8_t, kExtCount> ext_off{};  // offset of each present header after the BTH

    bool valid() const { return name != nullptr; }
    bool has(Ext e) const { return (exts & ext_bit(e)) != 0; }
    bool is_first() const { return pos == Position::first || pos == Position::only; }
    bool is_last() const { return pos == Position::last || pos == Position::only; }
};

extern const std::array<OpcodeInfo, 256> kOpcodeTable;
inline const OpcodeInfo& opcode_info(uint8_t opcode) { return kOpcodeTable[opcode]; }

}  // namespace hcaemu::pkt
