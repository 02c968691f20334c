// Management Datagrams (IBTA vol. 1 ch. 13.4) and the Communication Management class (ch. 12.6),
// as they travel on RoCE v2: a 256-byte MAD in a UD SEND Only to QP1 (the GSI). Also the RDMA CM
// conventions over the IB CM (IBTA Annex A11): the IP-based Service ID and the CMA private-data
// header. No state: parse, build, names and checks only.
//
// Every field is described once, in a table (MadField: IBTA's name, bit position, width); parse,
// build, the dissector and the reserved-bit check all read those tables.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>

#include "packet/errors.hpp"
#include "packet/headers.hpp"
#include "packet/parse.hpp"

namespace hcaemu::pkt {

// ---- Sizes and well-known values ----------------------------------------------------------------
constexpr size_t kMadLen = 256;         // IBTA 13.4: every MAD of BaseVersion 1 is 256 bytes
constexpr size_t kMadHdrLen = 24;       // IBTA 13.4.2 common header
constexpr size_t kMadDataLen = 232;     // the attribute area after the common header
constexpr size_t kClassPortInfoLen = 72;  // IBTA 13.4.8.1

constexpr uint8_t kMadBaseVersion = 1;    // IBTA 13.4.2 (2 is OPA's, not IBA)
constexpr uint8_t kMgmtClassCm = 0x07;    // IBTA 13.4.4 table: Communication Management
constexpr uint8_t kCmClassVersion = 2;    // IBTA ch. 12 (Linux cm.c sends and accepts 2 only)

// GSI on RoCE v2 (IBTA 13.5, Annex A17): QP1 receives every GMP of the port, whatever class.
constexpr uint32_t kGsiQpn = 1;
constexpr uint32_t kGsiQkey = 0x80010000;  // IBTA 13.5: the GSI's well-known Q_Key (controlled: bit 31 set, 10.2.4)
constexpr uint16_t kDefaultPkey = 0xFFFF;  // the default partition, full member (IBTA 10.9)

// Method byte: R bit (7) and Method (6:0), IBTA 13.4.5. Values include the R bit.
namespace mad_method {
constexpr uint8_t get = 0x01, set = 0x02, send = 0x03, trap = 0x05, report = 0x06,
                  trap_repress = 0x07, get_resp = 0x81, report_resp = 0x86;
constexpr uint8_t kResponseBit = 0x80;
}  // namespace mad_method
const char* mad_method_name(uint8_t method);  // "Get", "GetResp", ... or "?"

// Status field, IBTA 13.4.7: bit 0 busy, bit 1 redirect required, bits 4:2 invalid-field code,
// bits 7:5 reserved, bits 15:8 class specific.
namespace mad_status {
constexpr uint16_t busy = 0x0001, redirect = 0x0002;
constexpr uint16_t bad_version = 1 << 2, unsupported_method = 2 << 2, unsupported_method_attr = 3 << 2,
                   invalid_attr_value = 7 << 2;
constexpr uint16_t kCodeMask = 0x001C, kReservedMask = 0x00E0;
}  // namespace mad_status
const char* mad_status_code_name(uint16_t status);  // of bits 4:2

// CM attribute IDs, IBTA ch. 12 (the same in Linux cm_msgs.h).
namespace cm_attr {
constexpr uint16_t class_port_info = 0x0001, req = 0x0010, mra = 0x0011, rej = 0x0012, rep = 0x0013,
                   rtu = 0x0014, dreq = 0x0015, drep = 0x0016, sidr_req = 0x0017, sidr_rep = 0x0018,
                   lap = 0x0019, apr = 0x001A;
}  // namespace cm_attr

// ---- Typed errors --------------------------------------------------------------------------------
// In the order the parsers check them (GSI carriage first, then the MAD, then the CM attribute).
enum class MadError : uint8_t {
    ok,
    not_qp1,               // BTH DestQP is not 1
    not_ud_send_only,      // to QP1 but not a UD SEND Only (opcode 0x64): a GMP is one packet (IBTA 13.5)
    bad_gsi_qkey,          // DETH Q_Key is not 0x80010000: the GSI drops it (IBTA 13.5, Q_Key check 10.2.4)
    mad_truncated,         // fewer than 256 bytes
    mad_too_long,          // more than 256 bytes (a UD SEND to QP1 carries exactly one MAD)
    bad_base_version,      // BaseVersion is not 1
    not_cm_class,          // MgmtClass is not 0x07 (parse_cm only; parse_mad_hdr takes any class)
    bad_class_version,     // CM ClassVersion is not 2 (a REQ of another version gets REJ reason 31)
    unknown_attribute,     // an AttributeID the CM class does not define
    unsupported_attribute, // LAP/APR (alternate path migration): recognised, not supported
    bad_method,            // CM messages are Send (IBTA ch. 12); ClassPortInfo Get/Set/GetResp
    bad_message_code,      // MRA "Message MRAed" or REJ "Message Rejected" = 3 (reserved)
    bad_info_length,       // REJ Rejected Info Length or SIDR_REP Additional Info Length > 72
    cma_truncated,         // private data shorter than the 36-byte CMA header
    bad_cma_version,       // CMA header version is not 0 (Linux CMA_VERSION)
    bad_cma_ip_version,    // CMA IP version (bits 7:4 of byte 1) neither 4 nor 6
    count,
};
constexpr size_t kMadErrorCount = size_t(MadError::count);
extern const std::array<const char*, kMadErrorCount> kMadErrorName;
inline const char* name(MadError e) { return size_t(e) < kMadErrorCount ? kMadErrorName[size_t(e)] : "?"; }

// ---- Field tables --------------------------------------------------------------------------------
enum class FieldKind : uint8_t {
    uint,   // an unsigned number of 1..64 bits, big-endian, member of 1, 2, 4 or 8 bytes
    gid,    // 128 bits, a GID (Ip6 member)
    bytes,  // a byte string (std::array member): ARI, additional info, private data
};

// One field of a MAD structure. `bit` counts from the first bit (MSB of byte 0) of the structure
// the table describes, so IBTA's "byte B, bit b" (b = 0 the MSB, as in ch. 12's tables and
// Linux's CM_FIELD_BLOC) is bit = 8 * B + b. Bits no field covers are reserved.
struct MadField {
    const char* name;    // IBTA's name: "Local Communication ID"
    const char* key;     // identifier for JSON and tests: "local_comm_id"
    uint16_t bit;        // offset in bits from the start of the structure
    uint16_t bits;       // width in bits (kind bytes/gid: a multiple of 8)
    FieldKind kind;
    uint16_t member;     // offsetof() in the C++ struct
    uint16_t size;       // sizeof the member
    uint8_t shift = 0;   // the field holds member bits [shift, shift + bits): a value split over
                         // several places (the 24-bit VendorID of REP and SIDR_REP)
};
using MadFields = std::span<const MadField>;

// ---- MAD common header, IBTA 13.4.2 ----------------------------------------------------------------
struct MadHdr {
    uint8_t base_version = kMadBaseVersion;
    uint8_t mgmt_class = kMgmtClassCm;
    uint8_t class_version = kCmClassVersion;
    uint8_t method = mad_method::send;  // R bit 7 and Method 6:0
    uint16_t status = 0;
    uint16_t class_specific = 0;
    uint64_t tid = 0;                   // TransactionID
    uint16_t attr_id = 0;
    uint16_t resv = 0;                  // bytes 18-19, reserved
    uint32_t attr_mod = 0;              // AttributeModifier (Linux ECE puts capability bits here in REQ/REP)
    bool response() const { return method & mad_method::kResponseBit; }
    bool operator==(const MadHdr&) const = default;
};
extern const MadFields kMadHdrFields;

// ---- CM attributes, IBTA 12.6 (byte offsets below are from MAD byte 24) ---------------------------
// Transport Service Type of a REQ (table 106).
enum class CmTransport : uint8_t { rc = 0, uc = 1, rd = 2, xrc_or_reserved = 3 };

// Path information of a REQ (primary at byte 52, alternate at byte 96; same layout, 44 bytes).
struct CmPath {
    uint16_t local_lid = 0;       // RoCE: 0xFFFF (permissive) or 0, LIDs are not used
    uint16_t remote_lid = 0;
    Ip6 local_gid{};              // RoCE v2: the sender's GID (IP address)
    Ip6 remote_gid{};
    uint32_t flow_label = 0;      // 20 bits
    uint8_t packet_rate = 0;      // 6 bits, IBTA 9.10 rate encoding
    uint8_t traffic_class = 0;
    uint8_t hop_limit = 0;
    uint8_t sl = 0;               // 4 bits
    uint8_t subnet_local = 0;     // 1 bit
    uint8_t local_ack_timeout = 0;  // 5 bits, 4.096 us * 2^n
    bool operator==(const CmPath&) const = default;
};

struct CmReq {                    // Table 106, 232 bytes
    uint32_t local_comm_id = 0;
    uint32_t vendor_id = 0;       // 24 bits at byte 5 (IBTA comment 9434 / Linux ECE)
    uint64_t service_id = 0;
    uint64_t local_ca_guid = 0;
    uint32_t local_qkey = 0;
    uint32_t local_qpn = 0;       // 24 bits
    uint8_t responder_resources = 0;
    uint32_t local_eecn = 0;      // 24 bits
    uint8_t initiator_depth = 0;
    uint32_t remote_eecn = 0;     // 24 bits
    uint8_t remote_cm_response_timeout = 0;  // 5 bits
    uint8_t transport_service_type = 0;      // 2 bits, CmTransport
    uint8_t end_to_end_flow_control = 0;     // 1 bit
    uint32_t starting_psn = 0;    // 24 bits
    uint8_t local_cm_response_timeout = 0;   // 5 bits
    uint8_t retry_count = 0;      // 3 bits
    uint16_t pkey = 0;
    uint8_t path_mtu = 0;         // 4 bits, IBTA 9.4 MTU code: 1=256 .. 5=4096
    uint8_t rdc_exists = 0;       // 1 bit
    uint8_t rnr_retry_count = 0;  // 3 bits
    uint8_t max_cm_retries = 0;   // 4 bits
    uint8_t srq = 0;              // 1 bit
    uint8_t extended_transport_type = 0;  // 3 bits (1 = XRC)
    CmPath primary;
    CmPath alternate;
    uint8_t sap_supported = 0;    // 1 bit, byte 139 bit 5
    std::array<uint8_t, 92> private_data{};
    bool operator==(const CmReq&) const = default;
};

struct CmMra {                    // Table 107
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint8_t message_mraed = 0;    // 2 bits: 0 REQ, 1 REP, 2 LAP
    uint8_t service_timeout = 0;  // 5 bits
    std::array<uint8_t, 222> private_data{};
    bool operator==(const CmMra&) const = default;
};

struct CmRej {                    // Table 108
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;  // 0 when rejecting a REQ
    uint8_t message_rejected = 0; // 2 bits: 0 REQ, 1 REP, 2 other
    uint8_t rejected_info_length = 0;  // 7 bits, bytes of ARI that are meaningful (<= 72)
    uint16_t reason = 0;          // CmRejReason
    std::array<uint8_t, 72> ari{};  // Additional Rejection Information
    std::array<uint8_t, 148> private_data{};
    bool operator==(const CmRej&) const = default;
};

struct CmRep {                    // Table 110
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint32_t local_qkey = 0;
    uint32_t local_qpn = 0;       // 24 bits
    uint32_t local_eecn = 0;      // 24 bits
    uint32_t starting_psn = 0;    // 24 bits
    uint32_t vendor_id = 0;       // 24 bits: bytes 15, 19, 23 (high, middle, low)
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t target_ack_delay = 0; // 5 bits
    uint8_t failover_accepted = 0;  // 2 bits
    uint8_t end_to_end_flow_control = 0;  // 1 bit
    uint8_t rnr_retry_count = 0;  // 3 bits
    uint8_t srq = 0;              // 1 bit
    uint64_t local_ca_guid = 0;
    std::array<uint8_t, 196> private_data{};
    bool operator==(const CmRep&) const = default;
};

struct CmRtu {                    // Table 111
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    std::array<uint8_t, 224> private_data{};
    bool operator==(const CmRtu&) const = default;
};

struct CmDreq {                   // Table 112
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint32_t remote_qpn = 0;      // 24 bits: Remote QPN/EECN
    std::array<uint8_t, 220> private_data{};
    bool operator==(const CmDreq&) const = default;
};

struct CmDrep {                   // Table 113
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    std::array<uint8_t, 224> private_data{};
    bool operator==(const CmDrep&) const = default;
};

struct CmSidrReq {                // Table 119
    uint32_t request_id = 0;
    uint16_t pkey = 0;
    uint64_t service_id = 0;
    std::array<uint8_t, 216> private_data{};
    bool operator==(const CmSidrReq&) const = default;
};

struct CmSidrRep {                // Table 120
    uint32_t request_id = 0;
    uint8_t status = 0;           // CmSidrStatus
    uint8_t additional_info_length = 0;  // <= 72
    uint32_t vendor_id = 0;       // 24 bits: bytes 6-7 (high 16), byte 11 (low 8)
    uint32_t qpn = 0;             // 24 bits
    uint64_t service_id = 0;
    uint32_t qkey = 0;
    std::array<uint8_t, 72> class_port_info{};  // Additional Information (a ClassPortInfo on redirect)
    std::array<uint8_t, 136> private_data{};
    bool operator==(const CmSidrRep&) const = default;
};

struct ClassPortInfo {            // IBTA 13.4.8.1, 72 bytes at MAD byte 24
    uint8_t base_version = kMadBaseVersion;
    uint8_t class_version = kCmClassVersion;
    uint16_t capability_mask = 0;
    uint32_t capability_mask2 = 0;  // 27 bits
    uint8_t resp_time_value = 0;    // 5 bits
    Ip6 redirect_gid{};
    uint8_t redirect_tc = 0;
    uint8_t redirect_sl = 0;        // 4 bits
    uint32_t redirect_fl = 0;       // 20 bits
    uint16_t redirect_lid = 0;
    uint16_t redirect_pkey = 0;
    uint32_t redirect_qp = 0;       // 24 bits
    uint32_t redirect_qkey = 0;
    Ip6 trap_gid{};
    uint8_t trap_tc = 0;
    uint8_t trap_sl = 0;
    uint32_t trap_fl = 0;
    uint16_t trap_lid = 0;
    uint16_t trap_pkey = 0;
    uint8_t trap_hl = 0;
    uint32_t trap_qp = 0;
    uint32_t trap_qkey = 0;
    bool operator==(const ClassPortInfo&) const = default;
};

// The variant order is fixed: index i is kCmAttrs[i] below.
using CmMsg = std::variant<ClassPortInfo, CmReq, CmMra, CmRej, CmRep, CmRtu, CmDreq, CmDrep, CmSidrReq, CmSidrRep>;

struct CmMad {
    MadHdr hdr;
    CmMsg msg;
    bool operator==(const CmMad&) const = default;
};

enum class AttrSupport : uint8_t { supported, unsupported };

// One CM attribute: its ID, names, field table, and the methods it may carry.
struct CmAttrInfo {
    uint16_t id;
    const char* name;      // "ConnectRequest (REQ)"
    const char* short_name;  // "REQ"
    AttrSupport support;
    MadFields fields;      // empty for LAP/APR
    uint16_t len;          // bytes the fields describe (232, or 72 for ClassPortInfo)
};
// Indexed as CmMsg's alternatives, then LAP and APR (unsupported).
extern const std::array<CmAttrInfo, 12> kCmAttrs;
const CmAttrInfo* cm_attr_info(uint16_t attr_id);  // nullptr: not a CM attribute

// ---- Named values ----------------------------------------------------------------------------------
// REJ reasons, IBTA ch. 12 table 109 (Linux enum ib_cm_rej_reason).
struct CmRejReasonInfo {
    uint16_t code;
    const char* id;    // "invalid_service_id"
    const char* text;  // "Invalid Service ID"
};
extern const std::span<const CmRejReasonInfo> kCmRejReasons;
const CmRejReasonInfo* cm_rej_reason(uint16_t code);  // nullptr when the spec defines none
namespace rej_reason {
constexpr uint16_t no_qp = 1, no_eec = 2, no_resources = 3, timeout = 4, unsupported = 5,
                   invalid_comm_id = 6, invalid_comm_instance = 7, invalid_service_id = 8,
                   invalid_transport_type = 9, stale_conn = 10, rdc_not_exist = 11, invalid_gid = 12,
                   invalid_lid = 13, invalid_sl = 14, invalid_traffic_class = 15, invalid_hop_limit = 16,
                   invalid_packet_rate = 17, invalid_alt_gid = 18, invalid_alt_lid = 19, invalid_alt_sl = 20,
                   invalid_alt_traffic_class = 21, invalid_alt_hop_limit = 22, invalid_alt_packet_rate = 23,
                   port_cm_redirect = 24, port_redirect = 25, invalid_mtu = 26,
                   insufficient_resp_resources = 27, consumer_defined = 28, invalid_rnr_retry = 29,
                   duplicate_local_comm_id = 30, invalid_class_version = 31, invalid_flow_label = 32,
                   invalid_alt_flow_label = 33, vendor_option_not_supported = 35;
}  // namespace rej_reason

// SIDR_REP Status values, IBTA ch. 12 (Linux enum ib_cm_sidr_status).
enum class CmSidrStatus : uint8_t { success = 0, unsupported = 1, reject = 2, no_qp = 3, redirect = 4, unsupported_version = 5 };
const char* cm_sidr_status_name(uint8_t status);    // "?" above 5
const char* cm_msg_code_name(uint8_t code);         // MRA/REJ message code: "REQ", "REP", "LAP"/"other"
const char* cm_transport_name(uint8_t type);        // "RC", "UC", "RD", "reserved"
const char* ib_mtu_name(uint8_t code);              // "1024" for 3, "reserved" otherwise

// The 5-bit timeouts of the CM messages (CM Response Timeout, Local ACK Timeout, Service Timeout,
// Target ACK Delay) and ClassPortInfo's RespTimeValue: 4.096 us * 2^n, in ns (n <= 31: at most
// ~2.4 hours, fits 64 bits). Linux cm.c converts the same way (cm_convert_to_ms).
constexpr uint64_t cm_timeout_ns(uint8_t n) { return (uint64_t(4096) << (n & 31)); }

// ---- Parse and build -------------------------------------------------------------------------------
// The common header of any MAD: length 256 and BaseVersion 1 checked, nothing else.
MadError parse_mad_hdr(std::span<const uint8_t> mad, MadHdr& out);
void build_mad_hdr(const MadHdr& h, std::span<uint8_t, kMadLen> out);

// A CM MAD: header checks (class 0x07, version 2), attribute, method, and the attribute's fields.
// Reserved bits are ignored, as a receiver must (sent as 0, ignored on receipt); mad_reserved_set()
// finds them.
MadError parse_cm(std::span<const uint8_t> mad, CmMad& out);

// Writes 256 bytes: the header as given (AttributeID taken from the message's type, not from
// m.hdr; its Reserved field and Status bits as given, so a test can send them set), the fields
// (each masked to its width), zeros in every reserved bit of the attribute.
void build_cm(const CmMad& m, std::span<uint8_t, kMadLen> out);

// Generic access through a table: the value of one numeric field of a raw structure.
uint64_t field_get(const uint8_t* base, const MadField& f);

// For `hcaemu dissect --strict` and the GSI's counters: a MAD's reserved bits that are set.
// Returns the number of reserved bytes with a set bit (0: clean); `first` gets the first such byte's
// MAD offset. Covers the header's reserved bytes, bits 7:5 of Status and the attribute's reserved bits.
size_t mad_reserved_set(std::span<const uint8_t, kMadLen> mad, size_t* first = nullptr);

// ---- GSI carriage on RoCE v2 ----------------------------------------------------------------------
// What the GSI checks on a parsed RoCE v2 frame before the MAD: a UD SEND Only to QP1 with Q_Key
// 0x80010000 and a 256-byte payload. The GSI's rules, for the QP1 round (IBTA 13.5):
//  - a wrong Q_Key is dropped silently and counted as a Q_Key violation (UD Q_Key check, 10.2.4);
//  - anything but one 256-byte MAD in a SEND Only is dropped (a GMP is a single packet; RMPP, the
//    multi-packet protocol of SA/vendor classes, also sends 256-byte packets);
//  - the P_Key must be one of the port's P_Keys, else dropped and counted (the HCA's table, 10.9);
//    the response goes back with the request's P_Key;
//  - the source QP is where the response goes (any QP may send a GMP; Linux's CM sends from QP1);
//  - BaseVersion, class, class version, method and attribute are the agent's: a Get/Set it cannot
//    serve is answered with GetResp and a Status code (13.4.7), a response or Send is dropped.
// P_Key and source QP are not checked here (no state in packet/).
MadError check_gsi(const Packet& p);

// Sets what makes `h` a GMP: UD SEND Only, DestQP, Q_Key 0x80010000, SrcQP 1 (P_Key, PSN, addresses
// stay the caller's), then builds the frame around the 256-byte MAD.
BuildError build_gsi_frame(Headers h, uint32_t dest_qp, std::span<const uint8_t, kMadLen> mad,
                           std::span<uint8_t> out, size_t& len);

// ---- RDMA CM over the IB CM (IBTA Annex A11, Linux cma.c) -----------------------------------------
// Port spaces (rdma_cma.h enum rdma_port_space); the 16-bit value includes the 0x01 prefix.
enum class RdmaPs : uint16_t { ipoib = 0x0002, tcp = 0x0106, udp = 0x0111, ib = 0x013F };
// IP-based Service ID: (ps << 16) | port, so 0x0000000001 in bits 63:24, the port space's low byte
// in 23:16 and the port in 15:0; TCP port 18515 -> 0x0000000001064853 (Linux RDMA_IB_IP_PS_TCP | port).
constexpr uint64_t ip_service_id(RdmaPs ps, uint16_t port) { return uint64_t(ps) << 16 | port; }
constexpr bool is_ip_service_id(uint64_t sid) { return (sid >> 24) == 1; }
constexpr uint16_t service_id_port(uint64_t sid) { return uint16_t(sid); }
constexpr uint16_t service_id_ps(uint64_t sid) { return uint16_t(sid >> 16); }
const char* rdma_ps_name(uint16_t ps);  // "TCP", "UDP", "IB", "IPoIB" or "?"

// The CMA header at the start of a REQ's (and SIDR_REQ's) private data, Annex A11.4 / cma_hdr:
// byte 0 version (0), byte 1 IP version in bits 7:4, bytes 2-3 the source port, 4-19 source IP,
// 20-35 destination IP; an IPv4 address sits in the last 4 bytes of its 16 (12 zero bytes first).
// The destination port is the Service ID's low 16 bits.
constexpr size_t kCmaHdrLen = 36;
struct CmaHdr {
    uint8_t version = 0;
    uint8_t ip_version = 4;       // 4 or 6
    uint8_t resv = 0;             // bits 3:0 of byte 1
    uint16_t src_port = 0;
    Ip6 src_ip{};                 // as on the wire: IPv4 in bytes 12-15
    Ip6 dst_ip{};
    uint32_t src_ip4() const { return uint32_t(src_ip[12]) << 24 | uint32_t(src_ip[13]) << 16 | uint32_t(src_ip[14]) << 8 | src_ip[15]; }
    uint32_t dst_ip4() const { return uint32_t(dst_ip[12]) << 24 | uint32_t(dst_ip[13]) << 16 | uint32_t(dst_ip[14]) << 8 | dst_ip[15]; }
    bool operator==(const CmaHdr&) const = default;
};
extern const MadFields kCmaHdrFields;
MadError parse_cma_hdr(std::span<const uint8_t> private_data, CmaHdr& out);
void build_cma_hdr(const CmaHdr& h, std::span<uint8_t, kCmaHdrLen> out);
CmaHdr cma_hdr_ipv4(uint32_t src, uint16_t src_port, uint32_t dst);  // host-order addresses
CmaHdr cma_hdr_ipv6(const Ip6& src, uint16_t src_port, const Ip6& dst);

}  // namespace hcaemu::pkt
