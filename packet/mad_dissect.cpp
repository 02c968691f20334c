#include "packet/mad_dissect.hpp"

#include <arpa/inet.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "packet/bytes.hpp"

namespace hcaemu::pkt {

namespace {

// Every note the MAD dissection prints, in one table (a language column can be added beside it).
enum class MadNote : uint8_t {
    gsi, mad_hdr, class_port_info, req, mra, rej, rep, rtu, dreq, drep, sidr_req, sidr_rep,
    lap_apr, unknown_attr, not_cm, cma, reserved, count,
};
constexpr std::array<const char*, size_t(MadNote::count)> kMadNotes = {
    // gsi
    "a GMP: a UD SEND Only to QP1 (the GSI) with Q_Key 0x80010000, carrying one 256-byte MAD; the GSI answers to the sender's SrcQP",
    // mad_hdr
    "MAD common header: the class and method select the agent; a response (R bit) carries the request's TransactionID",
    // class_port_info
    "ClassPortInfo: what the CM class of this port supports (RespTimeValue: how long its agent may take) and where to redirect",
    // req
    "REQ: the active side asks for a connection to the Service ID: its QPN and starting PSN become the passive side's remote QPN and expected PSN (RTR)",
    // mra
    "MRA: the receiver needs more time than the sender's timeout before it answers the MRAed message; the sender waits Service Timeout more",
    // rej
    "REJ: the connection is refused (or aborted); Reason says why, and RDMA CM reports it as RDMA_CM_EVENT_REJECTED",
    // rep
    "REP: the passive side accepts: its QPN and starting PSN complete the active side's QP (RTR), which then moves to RTS and sends RTU",
    // rtu
    "RTU: the active side is ready; the passive side moves its QP to RTS (the connection is established)",
    // dreq
    "DREQ: one side disconnects; the receiver moves its QP to error, flushes, and answers DREP",
    // drep
    "DREP: the disconnect is acknowledged; both sides enter TimeWait before the QPN can be reused",
    // sidr_req
    "SIDR_REQ: a UD client asks which QPN and Q_Key serve this Service ID (RDMA_PS_UDP)",
    // sidr_rep
    "SIDR_REP: the answer to SIDR_REQ: the server's UD QPN and Q_Key, or a status saying why not",
    // lap_apr
    "LAP/APR (alternate path migration) are recognised but not supported by hcaemu: such a MAD is not decoded",
    // unknown_attr
    "an AttributeID the CM class does not define",
    // not_cm
    "a management class other than CM: not decoded here",
    // cma
    "RDMA CM header (IBTA A11.4) at the start of the private data: the IP addresses and source port behind the GIDs; the destination port is the Service ID's",
    // reserved
    "reserved bits must be sent as zero (and are ignored by the receiver)",
};
const char* note_text(MadNote n) { return kMadNotes[size_t(n)]; }

__attribute__((format(printf, 2, 3))) void app(std::string& s, const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) s.append(buf, size_t(n) < sizeof buf ? size_t(n) : sizeof buf - 1);
}

void note(std::string& s, const DissectOptions& o, MadNote n) {
    if (o.notes) app(s, "            . %s\n", note_text(n));
}

std::string gid_str(const uint8_t* g) {
    char b[INET6_ADDRSTRLEN];
    if (!inet_ntop(AF_INET6, g, b, sizeof b)) return "?";
    return b;
}

std::string ip4_str(uint32_t a) {
    char b[16];
    std::snprintf(b, sizeof b, "%u.%u.%u.%u", a >> 24, (a >> 16) & 0xFF, (a >> 8) & 0xFF, a & 0xFF);
    return b;
}

bool is(const MadField& f, const char* key) { return std::strcmp(f.key, key) == 0; }
bool ends(const MadField& f, const char* suffix) {
    const size_t a = std::strlen(f.key), b = std::strlen(suffix);
    return a >= b && std::strcmp(f.key + a - b, suffix) == 0;
}

// The value of one numeric field as text, with what it means where that helps.
std::string value_str(const MadField& f, uint64_t v) {
    char b[160];
    if (ends(f, "psn")) {
        std::snprintf(b, sizeof b, "%" PRIu64 " (0x%06" PRIx64 ")", v, v);
    } else if (ends(f, "service_id")) {
        if (is_ip_service_id(v))
            std::snprintf(b, sizeof b, "0x%016" PRIx64 " (IP-based: port space %s, port %u)", v,
                          rdma_ps_name(service_id_ps(v)), service_id_port(v));
        else
            std::snprintf(b, sizeof b, "0x%016" PRIx64, v);
    } else if (is(f, "reason")) {
        const CmRejReasonInfo* r = cm_rej_reason(uint16_t(v));
        std::snprintf(b, sizeof b, "%" PRIu64 " (%s)", v, r ? r->text : "not defined by the spec");
    } else if (is(f, "message_mraed") || is(f, "message_rejected")) {
        std::snprintf(b, sizeof b, "%" PRIu64 " (%s)", v, cm_msg_code_name(uint8_t(v)));
    } else if (is(f, "transport_service_type")) {
        std::snprintf(b, sizeof b, "%" PRIu64 " (%s)", v, cm_transport_name(uint8_t(v)));
    } else if (is(f, "path_mtu")) {
        std::snprintf(b, sizeof b, "%" PRIu64 " (%s)", v, ib_mtu_name(uint8_t(v)));
    } else if (is(f, "status") && f.bits == 8) {  // SIDR_REP
        std::snprintf(b, sizeof b, "%" PRIu64 " (%s)", v, cm_sidr_status_name(uint8_t(v)));
    } else if (ends(f, "timeout") || is(f, "target_ack_delay") || is(f, "resp_time_value")) {
        const double us = double(cm_timeout_ns(uint8_t(v))) / 1000;
        if (us < 1000)
            std::snprintf(b, sizeof b, "%" PRIu64 " (%.3f us)", v, us);
        else if (us < 1e6)
            std::snprintf(b, sizeof b, "%" PRIu64 " (%.2f ms)", v, us / 1e3);
        else
            std::snprintf(b, sizeof b, "%" PRIu64 " (%.2f s)", v, us / 1e6);
    } else if (f.bits <= 8) {
        std::snprintf(b, sizeof b, "%" PRIu64, v);
    } else {
        std::snprintf(b, sizeof b, "0x%0*" PRIx64, int((f.bits + 3) / 4), v);
    }
    return b;
}

void bytes_line(std::string& s, const char* name, const uint8_t* p, size_t n, size_t show) {
    size_t last = n;
    while (last > 0 && p[last - 1] == 0) --last;
    if (last == 0) {
        app(s, "            %s: %zu bytes, all zero\n", name, n);
        return;
    }
    app(s, "            %s: %zu bytes:", name, n);
    const size_t k = last < show ? last : show;
    for (size_t i = 0; i < k; ++i) app(s, " %02x", p[i]);
    if (k < last) s += " ...";
    if (last < n) app(s, " (zero from byte %zu)", last);
    s += '\n';
}

// One line per field of `fields` over `base`.
void fields_full(std::string& s, const uint8_t* base, MadFields fields, const DissectOptions& o) {
    for (const MadField& f : fields) {
        if (f.kind == FieldKind::uint)
            app(s, "            %s %s\n", f.name, value_str(f, field_get(base, f)).c_str());
        else if (f.kind == FieldKind::gid)
            app(s, "            %s %s\n", f.name, gid_str(base + f.bit / 8).c_str());
        else
            bytes_line(s, f.name, base + f.bit / 8, f.bits / 8, o.payload_bytes < 32 ? o.payload_bytes : 32);
    }
}

void fields_json(std::string& s, const uint8_t* base, MadFields fields) {
    bool first = true;
    for (const MadField& f : fields) {
        app(s, "%s\"%s\":", first ? "" : ",", f.key);
        first = false;
        if (f.kind == FieldKind::uint) {
            app(s, "%" PRIu64, field_get(base, f));
        } else if (f.kind == FieldKind::gid) {
            app(s, "\"%s\"", gid_str(base + f.bit / 8).c_str());
        } else {
            s += '"';
            for (size_t i = 0; i < f.bits / 8u; ++i) app(s, "%02x", base[f.bit / 8 + i]);
            s += '"';
        }
    }
}

// The private data that starts with a CMA header: REQ and SIDR_REQ with an IP-based Service ID.
const uint8_t* cma_of(const uint8_t* mad, const CmAttrInfo& a, uint64_t& sid) {
    for (const MadField& f : a.fields)
        if (is(f, "service_id")) sid = field_get(mad + kMadHdrLen, f);
    if (!(a.id == cm_attr::req || a.id == cm_attr::sidr_req) || !is_ip_service_id(sid)) return nullptr;
    for (const MadField& f : a.fields)
        if (f.kind == FieldKind::bytes && is(f, "private_data")) return mad + kMadHdrLen + f.bit / 8;
    return nullptr;
}

void cma_full(std::string& s, const uint8_t* pd, uint64_t sid, const DissectOptions& o) {
    CmaHdr c;
    const MadError e = parse_cma_hdr({pd, kCmaHdrLen}, c);
    if (e != MadError::ok) {
        app(s, "  CMA       ERROR %s (version %u, IP version %u)\n", name(e), pd[0], pd[1] >> 4);
        return;
    }
    if (c.ip_version == 4)
        app(s, "  CMA       version %u, IPv4, %s port %u -> %s port %u\n", c.version, ip4_str(c.src_ip4()).c_str(),
            c.src_port, ip4_str(c.dst_ip4()).c_str(), service_id_port(sid));
    else
        app(s, "  CMA       version %u, IPv6, [%s] port %u -> [%s] port %u\n", c.version, gid_str(c.src_ip.data()).c_str(),
            c.src_port, gid_str(c.dst_ip.data()).c_str(), service_id_port(sid));
    note(s, o, MadNote::cma);
}

void full(std::string& s, const Packet& p, const DissectOptions& o) {
    const GmpCheck c = check_gmp(p);
    const bool whole = c.error == MadError::ok || c.error >= MadError::bad_base_version;  // 256 bytes to QP1
    if (!whole) {
        app(s, "  GMP       ERROR %s: the GSI drops this frame\n", name(c.error));
        note(s, o, MadNote::gsi);
        return;
    }
    const uint8_t* m = p.payload().data();
    MadHdr h;
    (void)parse_mad_hdr(p.payload(), h);
    const CmAttrInfo* a = h.mgmt_class == kMgmtClassCm ? cm_attr_info(h.attr_id) : nullptr;
    app(s, "  MAD       BaseVersion %u  MgmtClass 0x%02x%s  ClassVersion %u  R %u  Method 0x%02x (%s)  Status 0x%04x (%s%s%s)  ClassSpecific 0x%04x\n",
        h.base_version, h.mgmt_class, h.mgmt_class == kMgmtClassCm ? " (CM)" : "", h.class_version, h.response(),
        h.method & 0x7F, mad_method_name(h.method), h.status, mad_status_code_name(h.status),
        (h.status & mad_status::busy) ? ", busy" : "", (h.status & mad_status::redirect) ? ", redirect" : "",
        h.class_specific);
    app(s, "            TransactionID 0x%016" PRIx64 "  AttributeID 0x%04x (%s)  AttributeModifier 0x%08x\n", h.tid,
        h.attr_id, a ? a->name : "unknown", h.attr_mod);
    note(s, o, MadNote::gsi);
    note(s, o, MadNote::mad_hdr);
    if (c.error != MadError::ok) app(s, "  MAD       ERROR %s\n", name(c.error));
    if (c.reserved_bytes)
        app(s, "  MAD       reserved bits set in %zu byte(s), first at MAD byte %zu\n", c.reserved_bytes, c.first_reserved);
    if (c.reserved_bytes) note(s, o, MadNote::reserved);
    if (h.mgmt_class != kMgmtClassCm) return note(s, o, MadNote::not_cm);
    if (!a) return note(s, o, MadNote::unknown_attr);
    if (a->support == AttrSupport::unsupported) return note(s, o, MadNote::lap_apr);
    app(s, "  CM %s\n", a->short_name);
    fields_full(s, m + kMadHdrLen, a->fields, o);
    note(s, o, MadNote(size_t(MadNote::class_port_info) + size_t(a - kCmAttrs.data())));
    uint64_t sid = 0;
    if (const uint8_t* pd = cma_of(m, *a, sid)) cma_full(s, pd, sid, o);
}

// The fields a brief line shows, per attribute: key and label.
struct BriefKey {
    uint16_t attr;
    const char* key;
    const char* label;
};
constexpr BriefKey kBrief[] = {
    {cm_attr::req, "local_comm_id", "LocalCommID"}, {cm_attr::req, "local_qpn", "QPN"},
    {cm_attr::req, "starting_psn", "PSN"}, {cm_attr::req, "service_id", "SID"},
    {cm_attr::mra, "local_comm_id", "LocalCommID"}, {cm_attr::mra, "remote_comm_id", "RemoteCommID"},
    {cm_attr::mra, "message_mraed", "MRAed"},
    {cm_attr::rej, "local_comm_id", "LocalCommID"}, {cm_attr::rej, "remote_comm_id", "RemoteCommID"},
    {cm_attr::rej, "reason", "Reason"},
    {cm_attr::rep, "local_comm_id", "LocalCommID"}, {cm_attr::rep, "remote_comm_id", "RemoteCommID"},
    {cm_attr::rep, "local_qpn", "QPN"}, {cm_attr::rep, "starting_psn", "PSN"},
    {cm_attr::rtu, "local_comm_id", "LocalCommID"}, {cm_attr::rtu, "remote_comm_id", "RemoteCommID"},
    {cm_attr::dreq, "local_comm_id", "LocalCommID"}, {cm_attr::dreq, "remote_comm_id", "RemoteCommID"},
    {cm_attr::dreq, "remote_qpn", "QPN"},
    {cm_attr::drep, "local_comm_id", "LocalCommID"}, {cm_attr::drep, "remote_comm_id", "RemoteCommID"},
    {cm_attr::sidr_req, "request_id", "ReqID"}, {cm_attr::sidr_req, "service_id", "SID"},
    {cm_attr::sidr_rep, "request_id", "ReqID"}, {cm_attr::sidr_rep, "status", "Status"},
    {cm_attr::sidr_rep, "qpn", "QPN"}, {cm_attr::sidr_rep, "qkey", "QKey"},
};

void brief(std::string& s, const Packet& p) {
    const GmpCheck c = check_gmp(p);
    MadHdr h;
    if (c.error != MadError::ok && c.error < MadError::bad_base_version) {
        app(s, " GMP ERROR %s", name(c.error));
        return;
    }
    (void)parse_mad_hdr(p.payload(), h);
    const CmAttrInfo* a = h.mgmt_class == kMgmtClassCm ? cm_attr_info(h.attr_id) : nullptr;
    if (a)
        app(s, " CM %s", a->short_name);
    else
        app(s, " MAD class 0x%02x attr 0x%04x", h.mgmt_class, h.attr_id);
    app(s, " TID=0x%016" PRIx64, h.tid);
    if (a && c.error == MadError::ok) {
        const uint8_t* d = p.payload().data() + kMadHdrLen;
        for (const BriefKey& k : kBrief) {
            if (k.attr != a->id) continue;
            for (const MadField& f : a->fields) {
                if (!is(f, k.key)) continue;
                const uint64_t v = field_get(d, f);
                if (is(f, "reason")) {
                    const CmRejReasonInfo* r = cm_rej_reason(uint16_t(v));
                    app(s, " %s=%" PRIu64 "(%s)", k.label, v, r ? r->id : "undefined");
                } else if (ends(f, "psn") || f.bits <= 8)
                    app(s, " %s=%" PRIu64, k.label, v);
                else
                    app(s, " %s=0x%0*" PRIx64, k.label, int((f.bits + 3) / 4), v);
            }
        }
    }
    if (c.error != MadError::ok && c.error != MadError::not_cm_class) app(s, " MAD-ERROR %s", name(c.error));
    if (c.reserved_bytes) app(s, " MAD-RESERVED-SET@%zu", c.first_reserved);
}

void json(std::string& s, const Packet& p) {
    const GmpCheck c = check_gmp(p);
    app(s, ",\"mad\":{\"status\":\"%s\",\"reserved_bytes\":%zu", name(c.error), c.reserved_bytes);
    if (c.error != MadError::ok && c.error < MadError::bad_base_version) {
        s += '}';
        return;
    }
    const uint8_t* m = p.payload().data();
    s += ",\"hdr\":{";
    fields_json(s, m, kMadHdrFields);
    s += '}';
    MadHdr h;
    (void)parse_mad_hdr(p.payload(), h);
    const CmAttrInfo* a = h.mgmt_class == kMgmtClassCm ? cm_attr_info(h.attr_id) : nullptr;
    if (a && a->support == AttrSupport::supported) {
        app(s, ",\"attr\":\"%s\",\"fields\":{", a->short_name);
        fields_json(s, m + kMadHdrLen, a->fields);
        s += '}';
        uint64_t sid = 0;
        CmaHdr ch;
        if (const uint8_t* pd = cma_of(m, *a, sid); pd && parse_cma_hdr({pd, kCmaHdrLen}, ch) == MadError::ok) {
            const bool v4 = ch.ip_version == 4;  // IPv4 in the last 4 of the 16 bytes
            app(s, ",\"cma\":{\"version\":%u,\"ip_version\":%u,\"src_port\":%u,\"src_ip\":\"%s\",\"dst_ip\":\"%s\",\"dst_port\":%u}",
                ch.version, ch.ip_version, ch.src_port,
                (v4 ? ip4_str(ch.src_ip4()) : gid_str(ch.src_ip.data())).c_str(),
                (v4 ? ip4_str(ch.dst_ip4()) : gid_str(ch.dst_ip.data())).c_str(), service_id_port(sid));
        }
    }
    s += '}';
}

}  // namespace

bool is_gsi_frame(const Packet& p, ParseError e) { return decoded_all(e) && p.h.bth.dest_qp == kGsiQpn; }

GmpCheck check_gmp(const Packet& p) {
    GmpCheck c;
    c.error = check_gsi(p);
    if (c.error != MadError::ok) return c;
    const auto mad = p.payload();
    CmMad m;
    c.error = parse_cm(mad, m);
    c.reserved_bytes = mad_reserved_set(std::span<const uint8_t, kMadLen>(mad.data(), kMadLen), &c.first_reserved);
    return c;
}

void dissect_gmp(std::string& out, const Packet& p, const DissectOptions& o) {
    switch (o.format) {
    case DissectFormat::full: full(out, p, o); break;
    case DissectFormat::brief: brief(out, p); break;
    case DissectFormat::json: json(out, p); break;
    }
}

}  // namespace hcaemu::pkt
