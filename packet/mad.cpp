#include "packet/mad.hpp"

#include <cstddef>
#include <cstring>
#include <utility>

#include "packet/build.hpp"
#include "packet/bytes.hpp"
#include "packet/opcode.hpp"

namespace hcaemu::pkt {

constinit const std::array<const char*, kMadErrorCount> kMadErrorName = {
    "ok", "not_qp1", "not_ud_send_only", "bad_gsi_qkey", "mad_truncated", "mad_too_long",
    "bad_base_version", "not_cm_class", "bad_class_version", "unknown_attribute",
    "unsupported_attribute", "bad_method", "bad_message_code", "bad_info_length", "cma_truncated",
    "bad_cma_version", "bad_cma_ip_version",
};

namespace {

// Table rows. B(byte, bit) is IBTA's "byte B bit b" (b = 0 the MSB) as a bit offset.
constexpr uint16_t B(unsigned byte, unsigned bit = 0) { return uint16_t(byte * 8 + bit); }

#define U(S, m, nm, key, at, w) MadField{nm, key, at, w, FieldKind::uint, uint16_t(offsetof(S, m)), uint16_t(sizeof(S::m))}
#define US(S, m, nm, key, at, w, sh) MadField{nm, key, at, w, FieldKind::uint, uint16_t(offsetof(S, m)), uint16_t(sizeof(S::m)), sh}
#define G(S, m, nm, key, at) MadField{nm, key, at, 128, FieldKind::gid, uint16_t(offsetof(S, m)), 16}
#define Y(S, m, nm, key, at) MadField{nm, key, at, uint16_t(sizeof(S::m) * 8), FieldKind::bytes, uint16_t(offsetof(S, m)), uint16_t(sizeof(S::m))}

// IBTA 13.4.2, MAD bytes 0-23.
constexpr MadField kHdr[] = {
    U(MadHdr, base_version, "BaseVersion", "base_version", B(0), 8),
    U(MadHdr, mgmt_class, "MgmtClass", "mgmt_class", B(1), 8),
    U(MadHdr, class_version, "ClassVersion", "class_version", B(2), 8),
    U(MadHdr, method, "R/Method", "method", B(3), 8),
    U(MadHdr, status, "Status", "status", B(4), 16),
    U(MadHdr, class_specific, "ClassSpecific", "class_specific", B(6), 16),
    U(MadHdr, tid, "TransactionID", "tid", B(8), 64),
    U(MadHdr, attr_id, "AttributeID", "attr_id", B(16), 16),
    U(MadHdr, resv, "Reserved", "resv", B(18), 16),
    U(MadHdr, attr_mod, "AttributeModifier", "attr_mod", B(20), 32),
};

// IBTA 13.4.8.1, from MAD byte 24.
constexpr MadField kCpi[] = {
    U(ClassPortInfo, base_version, "BaseVersion", "base_version", B(0), 8),
    U(ClassPortInfo, class_version, "ClassVersion", "class_version", B(1), 8),
    U(ClassPortInfo, capability_mask, "CapabilityMask", "capability_mask", B(2), 16),
    U(ClassPortInfo, capability_mask2, "CapabilityMask2", "capability_mask2", B(4), 27),
    U(ClassPortInfo, resp_time_value, "RespTimeValue", "resp_time_value", B(7, 3), 5),
    G(ClassPortInfo, redirect_gid, "RedirectGID", "redirect_gid", B(8)),
    U(ClassPortInfo, redirect_tc, "RedirectTC", "redirect_tc", B(24), 8),
    U(ClassPortInfo, redirect_sl, "RedirectSL", "redirect_sl", B(25), 4),
    U(ClassPortInfo, redirect_fl, "RedirectFL", "redirect_fl", B(25, 4), 20),
    U(ClassPortInfo, redirect_lid, "RedirectLID", "redirect_lid", B(28), 16),
    U(ClassPortInfo, redirect_pkey, "RedirectP_Key", "redirect_pkey", B(30), 16),
    U(ClassPortInfo, redirect_qp, "RedirectQP", "redirect_qp", B(33), 24),
    U(ClassPortInfo, redirect_qkey, "RedirectQ_Key", "redirect_qkey", B(36), 32),
    G(ClassPortInfo, trap_gid, "TrapGID", "trap_gid", B(40)),
    U(ClassPortInfo, trap_tc, "TrapTC", "trap_tc", B(56), 8),
    U(ClassPortInfo, trap_sl, "TrapSL", "trap_sl", B(57), 4),
    U(ClassPortInfo, trap_fl, "TrapFL", "trap_fl", B(57, 4), 20),
    U(ClassPortInfo, trap_lid, "TrapLID", "trap_lid", B(60), 16),
    U(ClassPortInfo, trap_pkey, "TrapP_Key", "trap_pkey", B(62), 16),
    U(ClassPortInfo, trap_hl, "TrapHL", "trap_hl", B(64), 8),
    U(ClassPortInfo, trap_qp, "TrapQP", "trap_qp", B(65), 24),
    U(ClassPortInfo, trap_qkey, "TrapQ_Key", "trap_qkey", B(68), 32),
};

// A REQ path (IBTA ch. 12 table 106), `p` the path's first byte: 52 primary, 96 alternate.
#define PATH(pre, nm, key, p)                                                                              \
    MadField{nm " Local Port LID", key "_local_lid", B(p), 16, FieldKind::uint, uint16_t(offsetof(CmReq, pre.local_lid)), 2}, \
    MadField{nm " Remote Port LID", key "_remote_lid", B(p + 2), 16, FieldKind::uint, uint16_t(offsetof(CmReq, pre.remote_lid)), 2}, \
    MadField{nm " Local Port GID", key "_local_gid", B(p + 4), 128, FieldKind::gid, uint16_t(offsetof(CmReq, pre.local_gid)), 16}, \
    MadField{nm " Remote Port GID", key "_remote_gid", B(p + 20), 128, FieldKind::gid, uint16_t(offsetof(CmReq, pre.remote_gid)), 16}, \
    MadField{nm " Flow Label", key "_flow_label", B(p + 36), 20, FieldKind::uint, uint16_t(offsetof(CmReq, pre.flow_label)), 4}, \
    MadField{nm " Packet Rate", key "_packet_rate", B(p + 39, 2), 6, FieldKind::uint, uint16_t(offsetof(CmReq, pre.packet_rate)), 1}, \
    MadField{nm " Traffic Class", key "_traffic_class", B(p + 40), 8, FieldKind::uint, uint16_t(offsetof(CmReq, pre.traffic_class)), 1}, \
    MadField{nm " Hop Limit", key "_hop_limit", B(p + 41), 8, FieldKind::uint, uint16_t(offsetof(CmReq, pre.hop_limit)), 1}, \
    MadField{nm " SL", key "_sl", B(p + 42), 4, FieldKind::uint, uint16_t(offsetof(CmReq, pre.sl)), 1}, \
    MadField{nm " Subnet Local", key "_subnet_local", B(p + 42, 4), 1, FieldKind::uint, uint16_t(offsetof(CmReq, pre.subnet_local)), 1}, \
    MadField{nm " Local ACK Timeout", key "_local_ack_timeout", B(p + 43), 5, FieldKind::uint, uint16_t(offsetof(CmReq, pre.local_ack_timeout)), 1}

// IBTA ch. 12 table 106; VendorID: IBTA comment 9434 (Linux CM_REQ_VENDOR_ID).
constexpr MadField kReq[] = {
    U(CmReq, local_comm_id, "Local Communication ID", "local_comm_id", B(0), 32),
    U(CmReq, vendor_id, "VendorID", "vendor_id", B(5), 24),
    U(CmReq, service_id, "ServiceID", "service_id", B(8), 64),
    U(CmReq, local_ca_guid, "Local CA GUID", "local_ca_guid", B(16), 64),
    U(CmReq, local_qkey, "Local Q_Key", "local_qkey", B(28), 32),
    U(CmReq, local_qpn, "Local QPN", "local_qpn", B(32), 24),
    U(CmReq, responder_resources, "Responder Resources", "responder_resources", B(35), 8),
    U(CmReq, local_eecn, "Local EECN", "local_eecn", B(36), 24),
    U(CmReq, initiator_depth, "Initiator Depth", "initiator_depth", B(39), 8),
    U(CmReq, remote_eecn, "Remote EECN", "remote_eecn", B(40), 24),
    U(CmReq, remote_cm_response_timeout, "Remote CM Response Timeout", "remote_cm_response_timeout", B(43), 5),
    U(CmReq, transport_service_type, "Transport Service Type", "transport_service_type", B(43, 5), 2),
    U(CmReq, end_to_end_flow_control, "End-to-End Flow Control", "end_to_end_flow_control", B(43, 7), 1),
    U(CmReq, starting_psn, "Starting PSN", "starting_psn", B(44), 24),
    U(CmReq, local_cm_response_timeout, "Local CM Response Timeout", "local_cm_response_timeout", B(47), 5),
    U(CmReq, retry_count, "Retry Count", "retry_count", B(47, 5), 3),
    U(CmReq, pkey, "Partition Key", "pkey", B(48), 16),
    U(CmReq, path_mtu, "Path Packet Payload MTU", "path_mtu", B(50), 4),
    U(CmReq, rdc_exists, "RDC Exists", "rdc_exists", B(50, 4), 1),
    U(CmReq, rnr_retry_count, "RNR Retry Count", "rnr_retry_count", B(50, 5), 3),
    U(CmReq, max_cm_retries, "Max CM Retries", "max_cm_retries", B(51), 4),
    U(CmReq, srq, "SRQ", "srq", B(51, 4), 1),
    U(CmReq, extended_transport_type, "Extended Transport Type", "extended_transport_type", B(51, 5), 3),
    PATH(primary, "Primary", "primary", 52),
    PATH(alternate, "Alternate", "alternate", 96),
    U(CmReq, sap_supported, "SAP Supported", "sap_supported", B(139, 5), 1),
    Y(CmReq, private_data, "PrivateData", "private_data", B(140)),
};

constexpr MadField kMra[] = {  // IBTA ch. 12 table 107
    U(CmMra, local_comm_id, "Local Communication ID", "local_comm_id", B(0), 32),
    U(CmMra, remote_comm_id, "Remote Communication ID", "remote_comm_id", B(4), 32),
    U(CmMra, message_mraed, "Message MRAed", "message_mraed", B(8), 2),
    U(CmMra, service_timeout, "Service Timeout", "service_timeout", B(9), 5),
    Y(CmMra, private_data, "PrivateData", "private_data", B(10)),
};

constexpr MadField kRej[] = {  // IBTA ch. 12 table 108
    U(CmRej, local_comm_id, "Local Communication ID", "local_comm_id", B(0), 32),
    U(CmRej, remote_comm_id, "Remote Communication ID", "remote_comm_id", B(4), 32),
    U(CmRej, message_rejected, "Message REJected", "message_rejected", B(8), 2),
    U(CmRej, rejected_info_length, "Reject Info Length", "rejected_info_length", B(9), 7),
    U(CmRej, reason, "Reason", "reason", B(10), 16),
    Y(CmRej, ari, "Additional Reject Information (ARI)", "ari", B(12)),
    Y(CmRej, private_data, "PrivateData", "private_data", B(84)),
};

constexpr MadField kRep[] = {  // IBTA ch. 12 table 110; VendorID: IBTA comment 9434
    U(CmRep, local_comm_id, "Local Communication ID", "local_comm_id", B(0), 32),
    U(CmRep, remote_comm_id, "Remote Communication ID", "remote_comm_id", B(4), 32),
    U(CmRep, local_qkey, "Local Q_Key", "local_qkey", B(8), 32),
    U(CmRep, local_qpn, "Local QPN", "local_qpn", B(12), 24),
    US(CmRep, vendor_id, "VendorID[23:16]", "vendor_id_h", B(15), 8, 16),
    U(CmRep, local_eecn, "Local EE Context Number", "local_eecn", B(16), 24),
    US(CmRep, vendor_id, "VendorID[15:8]", "vendor_id_m", B(19), 8, 8),
    U(CmRep, starting_psn, "Starting PSN", "starting_psn", B(20), 24),
    US(CmRep, vendor_id, "VendorID[7:0]", "vendor_id_l", B(23), 8, 0),
    U(CmRep, responder_resources, "Responder Resources", "responder_resources", B(24), 8),
    U(CmRep, initiator_depth, "Initiator Depth", "initiator_depth", B(25), 8),
    U(CmRep, target_ack_delay, "Target ACK Delay", "target_ack_delay", B(26), 5),
    U(CmRep, failover_accepted, "Failover Accepted", "failover_accepted", B(26, 5), 2),
    U(CmRep, end_to_end_flow_control, "End-to-End Flow Control", "end_to_end_flow_control", B(26, 7), 1),
    U(CmRep, rnr_retry_count, "RNR Retry Count", "rnr_retry_count", B(27), 3),
    U(CmRep, srq, "SRQ", "srq", B(27, 3), 1),
    U(CmRep, local_ca_guid, "Local CA GUID", "local_ca_guid", B(28), 64),
    Y(CmRep, private_data, "PrivateData", "private_data", B(36)),
};

constexpr MadField kRtu[] = {  // IBTA ch. 12 table 111
    U(CmRtu, local_comm_id, "Local Communication ID", "local_comm_id", B(0), 32),
    U(CmRtu, remote_comm_id, "Remote Communication ID", "remote_comm_id", B(4), 32),
    Y(CmRtu, private_data, "PrivateData", "private_data", B(8)),
};

constexpr MadField kDreq[] = {  // IBTA ch. 12 table 112
    U(CmDreq, local_comm_id, "Local Communication ID", "local_comm_id", B(0), 32),
    U(CmDreq, remote_comm_id, "Remote Communication ID", "remote_comm_id", B(4), 32),
    U(CmDreq, remote_qpn, "Remote QPN/EECN", "remote_qpn", B(8), 24),
    Y(CmDreq, private_data, "PrivateData", "private_data", B(12)),
};

constexpr MadField kDrep[] = {  // IBTA ch. 12 table 113
    U(CmDrep, local_comm_id, "Local Communication ID", "local_comm_id", B(0), 32),
    U(CmDrep, remote_comm_id, "Remote Communication ID", "remote_comm_id", B(4), 32),
    Y(CmDrep, private_data, "PrivateData", "private_data", B(8)),
};

constexpr MadField kSidrReq[] = {  // IBTA ch. 12 table 119
    U(CmSidrReq, request_id, "RequestID", "request_id", B(0), 32),
    U(CmSidrReq, pkey, "Partition Key", "pkey", B(4), 16),
    U(CmSidrReq, service_id, "ServiceID", "service_id", B(8), 64),
    Y(CmSidrReq, private_data, "PrivateData", "private_data", B(16)),
};

constexpr MadField kSidrRep[] = {  // IBTA ch. 12 table 120; VendorID: IBTA comment 9434
    U(CmSidrRep, request_id, "RequestID", "request_id", B(0), 32),
    U(CmSidrRep, status, "Status", "status", B(4), 8),
    U(CmSidrRep, additional_info_length, "Additional Information Length", "additional_info_length", B(5), 8),
    US(CmSidrRep, vendor_id, "VendorID[23:8]", "vendor_id_h", B(6), 16, 8),
    U(CmSidrRep, qpn, "QPN", "qpn", B(8), 24),
    US(CmSidrRep, vendor_id, "VendorID[7:0]", "vendor_id_l", B(11), 8, 0),
    U(CmSidrRep, service_id, "ServiceID", "service_id", B(12), 64),
    U(CmSidrRep, qkey, "Q_Key", "qkey", B(20), 32),
    Y(CmSidrRep, class_port_info, "Additional Information", "additional_info", B(24)),
    Y(CmSidrRep, private_data, "PrivateData", "private_data", B(96)),
};

constexpr MadField kCma[] = {  // IBTA A11.4 (Linux struct cma_hdr)
    U(CmaHdr, version, "CMA Version", "version", B(0), 8),
    U(CmaHdr, ip_version, "IP Version", "ip_version", B(1), 4),
    U(CmaHdr, resv, "Reserved", "resv", B(1, 4), 4),
    U(CmaHdr, src_port, "Source Port", "src_port", B(2), 16),
    G(CmaHdr, src_ip, "Source IP", "src_ip", B(4)),
    G(CmaHdr, dst_ip, "Destination IP", "dst_ip", B(20)),
};

#undef U
#undef US
#undef G
#undef Y
#undef PATH

uint64_t width_mask(unsigned bits) { return bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1; }

// A numeric field as the bytes [first, last] that hold it, big-endian, at most 8 bytes.
uint64_t load_span(const uint8_t* p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v = v << 8 | p[i];
    return v;
}

void field_put(uint8_t* base, const MadField& f, uint64_t v) {
    const size_t first = f.bit / 8, n = (f.bit % 8 + f.bits + 7) / 8;
    const unsigned low = unsigned(n * 8 - f.bit % 8 - f.bits);  // bits below the field in the span
    const uint64_t m = width_mask(f.bits);
    uint64_t w = load_span(base + first, n);
    w = (w & ~(m << low)) | ((v & m) << low);
    for (size_t i = 0; i < n; ++i) base[first + i] = uint8_t(w >> (8 * (n - 1 - i)));
}

uint64_t member_get(const void* obj, const MadField& f) {
    uint64_t m = 0;
    std::memcpy(&m, static_cast<const uint8_t*>(obj) + f.member, f.size);  // little-endian host (bytes.hpp)
    return (m >> f.shift) & width_mask(f.bits);
}

void member_put(void* obj, const MadField& f, uint64_t v) {
    uint8_t* p = static_cast<uint8_t*>(obj) + f.member;
    uint64_t m = 0;
    std::memcpy(&m, p, f.size);
    const uint64_t mask = width_mask(f.bits) << f.shift;
    m = (m & ~mask) | ((v << f.shift) & mask);
    std::memcpy(p, &m, f.size);
}

void decode(const uint8_t* wire, MadFields fields, void* obj) {
    for (const MadField& f : fields) {
        if (f.kind == FieldKind::uint)
            member_put(obj, f, field_get(wire, f));
        else
            std::memcpy(static_cast<uint8_t*>(obj) + f.member, wire + f.bit / 8, f.size);
    }
}

void encode(const void* obj, MadFields fields, uint8_t* wire) {
    for (const MadField& f : fields) {
        if (f.kind == FieldKind::uint)
            field_put(wire, f, member_get(obj, f));
        else
            std::memcpy(wire + f.bit / 8, static_cast<const uint8_t*>(obj) + f.member, f.size);
    }
}

template <size_t... I>
constexpr std::array<void (*)(CmMsg&), sizeof...(I)> make_emplacers(std::index_sequence<I...>) {
    return {[](CmMsg& m) { m.emplace<I>(); }...};
}
constexpr auto kEmplace = make_emplacers(std::make_index_sequence<std::variant_size_v<CmMsg>>{});

// Covered bits of each attribute's 232 bytes, built once from the tables: a set bit outside is reserved.
struct Coverage {
    std::array<std::array<uint8_t, kMadDataLen>, 12> attr{};
    Coverage() {
        for (size_t a = 0; a < kCmAttrs.size(); ++a)
            for (const MadField& f : kCmAttrs[a].fields)
                for (unsigned b = f.bit; b < unsigned(f.bit + f.bits); ++b) attr[a][b / 8] |= uint8_t(0x80 >> (b % 8));
    }
};

}  // namespace

constinit const MadFields kMadHdrFields{kHdr};
constinit const MadFields kCmaHdrFields{kCma};

constinit const std::array<CmAttrInfo, 12> kCmAttrs = {{
    {cm_attr::class_port_info, "ClassPortInfo", "ClassPortInfo", AttrSupport::supported, kCpi, kClassPortInfoLen},
    {cm_attr::req, "ConnectRequest (REQ)", "REQ", AttrSupport::supported, kReq, kMadDataLen},
    {cm_attr::mra, "MsgRcptAck (MRA)", "MRA", AttrSupport::supported, kMra, kMadDataLen},
    {cm_attr::rej, "ConnectReject (REJ)", "REJ", AttrSupport::supported, kRej, kMadDataLen},
    {cm_attr::rep, "ConnectReply (REP)", "REP", AttrSupport::supported, kRep, kMadDataLen},
    {cm_attr::rtu, "ReadyToUse (RTU)", "RTU", AttrSupport::supported, kRtu, kMadDataLen},
    {cm_attr::dreq, "DisconnectRequest (DREQ)", "DREQ", AttrSupport::supported, kDreq, kMadDataLen},
    {cm_attr::drep, "DisconnectReply (DREP)", "DREP", AttrSupport::supported, kDrep, kMadDataLen},
    {cm_attr::sidr_req, "ServiceIDResReq (SIDR_REQ)", "SIDR_REQ", AttrSupport::supported, kSidrReq, kMadDataLen},
    {cm_attr::sidr_rep, "ServiceIDResReqResp (SIDR_REP)", "SIDR_REP", AttrSupport::supported, kSidrRep, kMadDataLen},
    {cm_attr::lap, "LoadAlternatePath (LAP)", "LAP", AttrSupport::unsupported, {}, kMadDataLen},
    {cm_attr::apr, "AlternatePathResponse (APR)", "APR", AttrSupport::unsupported, {}, kMadDataLen},
}};
static_assert(std::variant_size_v<CmMsg> == 10);

const CmAttrInfo* cm_attr_info(uint16_t attr_id) {
    for (const CmAttrInfo& a : kCmAttrs)
        if (a.id == attr_id) return &a;
    return nullptr;
}

namespace {
constexpr CmRejReasonInfo kRejTable[] = {  // IBTA ch. 12 table 109
    {1, "no_qp", "No QP available"},
    {2, "no_eec", "No EEC available"},
    {3, "no_resources", "No resources available"},
    {4, "timeout", "Timeout"},
    {5, "unsupported", "Unsupported request"},
    {6, "invalid_comm_id", "Invalid Communication ID"},
    {7, "invalid_comm_instance", "Invalid Communication Instance"},
    {8, "invalid_service_id", "Invalid Service ID"},
    {9, "invalid_transport_type", "Invalid Transport Service Type"},
    {10, "stale_conn", "Stale connection"},
    {11, "rdc_not_exist", "RDC does not exist"},
    {12, "invalid_gid", "Primary Remote Port GID rejected"},
    {13, "invalid_lid", "Primary Remote Port LID rejected"},
    {14, "invalid_sl", "Invalid Primary SL"},
    {15, "invalid_traffic_class", "Invalid Primary Traffic Class"},
    {16, "invalid_hop_limit", "Invalid Primary Hop Limit"},
    {17, "invalid_packet_rate", "Invalid Primary Packet Rate"},
    {18, "invalid_alt_gid", "Alternate Remote Port GID rejected"},
    {19, "invalid_alt_lid", "Alternate Remote Port LID rejected"},
    {20, "invalid_alt_sl", "Invalid Alternate SL"},
    {21, "invalid_alt_traffic_class", "Invalid Alternate Traffic Class"},
    {22, "invalid_alt_hop_limit", "Invalid Alternate Hop Limit"},
    {23, "invalid_alt_packet_rate", "Invalid Alternate Packet Rate"},
    {24, "port_cm_redirect", "Port and CM redirection"},
    {25, "port_redirect", "Port redirection not supported"},
    {26, "invalid_mtu", "Invalid Path MTU"},
    {27, "insufficient_resp_resources", "Insufficient Responder Resources"},
    {28, "consumer_defined", "Consumer-defined reject"},
    {29, "invalid_rnr_retry", "Invalid RNR Retry Count"},
    {30, "duplicate_local_comm_id", "Duplicate Local Communication ID"},
    {31, "invalid_class_version", "Unsupported Class Version"},
    {32, "invalid_flow_label", "Invalid Primary Flow Label"},
    {33, "invalid_alt_flow_label", "Invalid Alternate Flow Label"},
    {35, "vendor_option_not_supported", "Vendor option not supported"},
};
}  // namespace

constinit const std::span<const CmRejReasonInfo> kCmRejReasons{kRejTable};

const CmRejReasonInfo* cm_rej_reason(uint16_t code) {
    for (const CmRejReasonInfo& r : kRejTable)
        if (r.code == code) return &r;
    return nullptr;
}

const char* mad_method_name(uint8_t m) {
    switch (m) {
    case mad_method::get: return "Get";
    case mad_method::set: return "Set";
    case mad_method::send: return "Send";
    case mad_method::trap: return "Trap";
    case mad_method::report: return "Report";
    case mad_method::trap_repress: return "TrapRepress";
    case mad_method::get_resp: return "GetResp";
    case mad_method::report_resp: return "ReportResp";
    default: return "?";
    }
}

const char* mad_status_code_name(uint16_t status) {
    static constexpr const char* kCodes[8] = {
        "no invalid fields", "bad version", "method not supported", "method/attribute combination not supported",
        "reserved (4)", "reserved (5)", "reserved (6)", "invalid value in attribute or modifier",
    };
    return kCodes[(status & mad_status::kCodeMask) >> 2];
}

const char* cm_sidr_status_name(uint8_t s) {
    static constexpr const char* k[] = {"success", "service ID not supported", "rejected", "no QP", "redirect",
                                        "unsupported class version"};
    return s < 6 ? k[s] : "?";
}

const char* cm_msg_code_name(uint8_t code) {
    static constexpr const char* k[] = {"REQ", "REP", "LAP/other", "reserved"};
    return k[code & 3];
}

const char* cm_transport_name(uint8_t t) {
    static constexpr const char* k[] = {"RC", "UC", "RD", "reserved (XRC with Extended Transport Type 1)"};
    return k[t & 3];
}

const char* ib_mtu_name(uint8_t code) {
    static constexpr const char* k[] = {"reserved", "256", "512", "1024", "2048", "4096"};
    return code < 6 ? k[code] : "reserved";
}

const char* rdma_ps_name(uint16_t ps) {
    switch (RdmaPs(ps)) {
    case RdmaPs::ipoib: return "IPoIB";
    case RdmaPs::tcp: return "TCP";
    case RdmaPs::udp: return "UDP";
    case RdmaPs::ib: return "IB";
    }
    return "?";
}

uint64_t field_get(const uint8_t* base, const MadField& f) {
    const size_t n = (f.bit % 8 + f.bits + 7) / 8;
    const unsigned low = unsigned(n * 8 - f.bit % 8 - f.bits);
    return (load_span(base + f.bit / 8, n) >> low) & width_mask(f.bits);
}

MadError parse_mad_hdr(std::span<const uint8_t> mad, MadHdr& out) {
    if (mad.size() < kMadLen) return MadError::mad_truncated;
    if (mad.size() > kMadLen) return MadError::mad_too_long;
    decode(mad.data(), kMadHdrFields, &out);
    if (out.base_version != kMadBaseVersion) return MadError::bad_base_version;
    return MadError::ok;
}

void build_mad_hdr(const MadHdr& h, std::span<uint8_t, kMadLen> out) { encode(&h, kMadHdrFields, out.data()); }

MadError parse_cm(std::span<const uint8_t> mad, CmMad& out) {
    const MadError e = parse_mad_hdr(mad, out.hdr);
    if (e != MadError::ok) return e;
    const MadHdr& h = out.hdr;
    if (h.mgmt_class != kMgmtClassCm) return MadError::not_cm_class;
    if (h.class_version != kCmClassVersion) return MadError::bad_class_version;
    const CmAttrInfo* a = cm_attr_info(h.attr_id);
    if (!a) return MadError::unknown_attribute;
    if (a->support == AttrSupport::unsupported) return MadError::unsupported_attribute;
    const bool cpi = h.attr_id == cm_attr::class_port_info;
    const bool method_ok = cpi ? (h.method == mad_method::get || h.method == mad_method::set || h.method == mad_method::get_resp)
                               : h.method == mad_method::send;  // IBTA ch. 12: CM messages use Send
    if (!method_ok) return MadError::bad_method;
    const size_t idx = size_t(a - kCmAttrs.data());
    kEmplace[idx](out.msg);
    void* obj = std::visit([](auto& m) -> void* { return &m; }, out.msg);
    decode(mad.data() + kMadHdrLen, a->fields, obj);
    if (const auto* m = std::get_if<CmMra>(&out.msg); m && m->message_mraed == 3) return MadError::bad_message_code;
    if (const auto* m = std::get_if<CmRej>(&out.msg)) {
        if (m->message_rejected == 3) return MadError::bad_message_code;
        if (m->rejected_info_length > m->ari.size()) return MadError::bad_info_length;
    }
    if (const auto* m = std::get_if<CmSidrRep>(&out.msg); m && m->additional_info_length > m->class_port_info.size())
        return MadError::bad_info_length;
    return MadError::ok;
}

void build_cm(const CmMad& m, std::span<uint8_t, kMadLen> out) {
    std::memset(out.data(), 0, kMadLen);
    const CmAttrInfo& a = kCmAttrs[m.msg.index()];
    MadHdr h = m.hdr;
    h.attr_id = a.id;
    build_mad_hdr(h, out);
    const void* obj = std::visit([](const auto& x) -> const void* { return &x; }, m.msg);
    encode(obj, a.fields, out.data() + kMadHdrLen);
}

size_t mad_reserved_set(std::span<const uint8_t, kMadLen> mad, size_t* first) {
    static const Coverage cov;
    size_t n = 0;
    auto hit = [&](size_t off) {
        if (n++ == 0 && first) *first = off;
    };
    if (mad[5] & mad_status::kReservedMask) hit(5);
    if (mad[18]) hit(18);
    if (mad[19]) hit(19);
    const CmAttrInfo* a = mad[1] == kMgmtClassCm ? cm_attr_info(load_be16(mad.data() + 16)) : nullptr;
    if (!a || a->support == AttrSupport::unsupported) return n;  // unknown layout: nothing is known reserved
    const auto& c = cov.attr[size_t(a - kCmAttrs.data())];
    for (size_t i = 0; i < kMadDataLen; ++i)
        if (mad[kMadHdrLen + i] & ~c[i]) hit(kMadHdrLen + i);
    return n;
}

MadError check_gsi(const Packet& p) {
    if (p.h.bth.dest_qp != kGsiQpn) return MadError::not_qp1;
    if (p.h.bth.opcode != (op::ud | op::send_only)) return MadError::not_ud_send_only;
    if (p.h.deth.qkey != kGsiQkey) return MadError::bad_gsi_qkey;
    if (p.payload_len < kMadLen) return MadError::mad_truncated;
    if (p.payload_len > kMadLen) return MadError::mad_too_long;
    return MadError::ok;
}

BuildError build_gsi_frame(Headers h, uint32_t dest_qp, std::span<const uint8_t, kMadLen> mad,
                           std::span<uint8_t> out, size_t& len) {
    h.bth.opcode = op::ud | op::send_only;
    h.bth.dest_qp = dest_qp;
    h.deth.qkey = kGsiQkey;
    h.deth.src_qp = kGsiQpn;
    return build(h, mad, out, len);
}

MadError parse_cma_hdr(std::span<const uint8_t> pd, CmaHdr& out) {
    if (pd.size() < kCmaHdrLen) return MadError::cma_truncated;
    decode(pd.data(), kCmaHdrFields, &out);
    if (out.version != 0) return MadError::bad_cma_version;
    if (out.ip_version != 4 && out.ip_version != 6) return MadError::bad_cma_ip_version;
    return MadError::ok;
}

void build_cma_hdr(const CmaHdr& h, std::span<uint8_t, kCmaHdrLen> out) {
    std::memset(out.data(), 0, kCmaHdrLen);
    encode(&h, kCmaHdrFields, out.data());
}

CmaHdr cma_hdr_ipv4(uint32_t src, uint16_t src_port, uint32_t dst) {
    CmaHdr h;
    h.ip_version = 4;
    h.src_port = src_port;
    store_be32(h.src_ip.data() + 12, src);
    store_be32(h.dst_ip.data() + 12, dst);
    return h;
}

CmaHdr cma_hdr_ipv6(const Ip6& src, uint16_t src_port, const Ip6& dst) {
    CmaHdr h;
    h.ip_version = 6;
    h.src_port = src_port;
    h.src_ip = src;
    h.dst_ip = dst;
    return h;
}

}  // namespace hcaemu::pkt
