#include "packet/mad_dissect.hpp"

#include <arpa/inet.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "packet/bytes.hpp"
#include "packet/messages.hpp"

namespace hcaemu::pkt {

namespace {

// The note of each supported CM attribute, in kCmAttrs' order (LAP and APR, last, have mad_note_lap_apr).
constexpr Msg kAttrNote[] = {Msg::mad_note_class_port_info, Msg::mad_note_req, Msg::mad_note_mra, Msg::mad_note_rej,
                             Msg::mad_note_rep, Msg::mad_note_rtu, Msg::mad_note_dreq, Msg::mad_note_drep,
                             Msg::mad_note_sidr_req, Msg::mad_note_sidr_rep};

// The Status field's code and flags (IBTA 13.4.7), in `lang`: mad_status_code_name's words.
std::string status_str(uint16_t st, Lang lang) {
    constexpr Msg kCode[8] = {Msg::mad_status_no_invalid_fields, Msg::mad_status_bad_version,
                              Msg::mad_status_method_unsupported, Msg::mad_status_method_attr_unsupported,
                              Msg::mad_status_reserved, Msg::mad_status_reserved, Msg::mad_status_reserved,
                              Msg::mad_status_invalid_value};
    const uint16_t code = (st & mad_status::kCodeMask) >> 2;
    std::string r = msg(kCode[code], lang, {std::to_string(code)});
    if (st & mad_status::busy) r += text(Msg::mad_status_busy, lang);
    if (st & mad_status::redirect) r += text(Msg::mad_status_redirect, lang);
    return r;
}

__attribute__((format(printf, 2, 3))) void app(std::string& s, const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) s.append(buf, size_t(n) < sizeof buf ? size_t(n) : sizeof buf - 1);
}

void note(std::string& s, const DissectOptions& o, Msg m) {
    if (o.notes) app(s, "            . %s\n", text(m, o.lang));
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
std::string value_str(const MadField& f, uint64_t v, Lang lang) {
    char b[160];
    if (ends(f, "psn")) {
        std::snprintf(b, sizeof b, "%" PRIu64 " (0x%06" PRIx64 ")", v, v);
    } else if (ends(f, "service_id")) {
        if (is_ip_service_id(v))
            std::snprintf(b, sizeof b, "0x%016" PRIx64 " (%s)", v,
                          msg(Msg::mad_sid_ip, lang, {rdma_ps_name(service_id_ps(v)), std::to_string(service_id_port(v))}).c_str());
        else
            std::snprintf(b, sizeof b, "0x%016" PRIx64, v);
    } else if (is(f, "reason")) {
        const CmRejReasonInfo* r = cm_rej_reason(uint16_t(v));
        std::snprintf(b, sizeof b, "%" PRIu64 " (%s)", v, r ? r->text : text(Msg::mad_rej_reason_undefined, lang));
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

void bytes_line(std::string& s, const char* name, const uint8_t* p, size_t n, size_t show, Lang lang) {
    size_t last = n;
    while (last > 0 && p[last - 1] == 0) --last;
    if (last == 0) {
        s += "            " + msg(Msg::mad_bytes_zero, lang, {name, std::to_string(n)}) + '\n';
        return;
    }
    s += "            " + msg(Msg::mad_bytes, lang, {name, std::to_string(n)});
    const size_t k = last < show ? last : show;
    for (size_t i = 0; i < k; ++i) app(s, " %02x", p[i]);
    if (k < last) s += " ...";
    if (last < n) s += msg(Msg::mad_bytes_zero_from, lang, {std::to_string(last)});
    s += '\n';
}

// One line per field of `fields` over `base`.
void fields_full(std::string& s, const uint8_t* base, MadFields fields, const DissectOptions& o) {
    for (const MadField& f : fields) {
        if (f.kind == FieldKind::uint)
            app(s, "            %s %s\n", f.name, value_str(f, field_get(base, f), o.lang).c_str());
        else if (f.kind == FieldKind::gid)
            app(s, "            %s %s\n", f.name, gid_str(base + f.bit / 8).c_str());
        else
            bytes_line(s, f.name, base + f.bit / 8, f.bits / 8, o.payload_bytes < 32 ? o.payload_bytes : 32, o.lang);
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
        s += msg(Msg::mad_cma_error, o.lang, {name(e), std::to_string(pd[0]), std::to_string(pd[1] >> 4)}) + '\n';
        return;
    }
    if (c.ip_version == 4)
        app(s, "  CMA       version %u, IPv4, %s port %u -> %s port %u\n", c.version, ip4_str(c.src_ip4()).c_str(),
            c.src_port, ip4_str(c.dst_ip4()).c_str(), service_id_port(sid));
    else
        app(s, "  CMA       version %u, IPv6, [%s] port %u -> [%s] port %u\n", c.version, gid_str(c.src_ip.data()).c_str(),
            c.src_port, gid_str(c.dst_ip.data()).c_str(), service_id_port(sid));
    note(s, o, Msg::mad_note_cma);
}

void full(std::string& s, const Packet& p, const DissectOptions& o) {
    const GmpCheck c = check_gmp(p);
    const bool whole = c.error == MadError::ok || c.error >= MadError::bad_base_version;  // 256 bytes to QP1
    if (!whole) {
        s += msg(Msg::mad_gsi_drops, o.lang, {name(c.error)}) + '\n';
        note(s, o, Msg::mad_note_gsi);
        return;
    }
    const uint8_t* m = p.payload().data();
    MadHdr h;
    (void)parse_mad_hdr(p.payload(), h);
    const CmAttrInfo* a = h.mgmt_class == kMgmtClassCm ? cm_attr_info(h.attr_id) : nullptr;
    app(s, "  MAD       BaseVersion %u  MgmtClass 0x%02x%s  ClassVersion %u  R %u  Method 0x%02x (%s)  Status 0x%04x (%s)  ClassSpecific 0x%04x\n",
        h.base_version, h.mgmt_class, h.mgmt_class == kMgmtClassCm ? " (CM)" : "", h.class_version, h.response(),
        h.method & 0x7F, mad_method_name(h.method), h.status, status_str(h.status, o.lang).c_str(), h.class_specific);
    app(s, "            TransactionID 0x%016" PRIx64 "  AttributeID 0x%04x (%s)  AttributeModifier 0x%08x\n", h.tid,
        h.attr_id, a ? a->name : text(Msg::mad_attr_unknown, o.lang), h.attr_mod);
    note(s, o, Msg::mad_note_gsi);
    note(s, o, Msg::mad_note_mad_hdr);
    if (c.error != MadError::ok) s += msg(Msg::mad_error, o.lang, {name(c.error)}) + '\n';
    if (c.reserved_bytes) {
        s += msg(Msg::mad_reserved_set, o.lang, {std::to_string(c.reserved_bytes), std::to_string(c.first_reserved)}) + '\n';
        note(s, o, Msg::mad_note_reserved);
    }
    if (h.mgmt_class != kMgmtClassCm) return note(s, o, Msg::mad_note_not_cm);
    if (!a) return note(s, o, Msg::mad_note_unknown_attr);
    if (a->support == AttrSupport::unsupported) return note(s, o, Msg::mad_note_lap_apr);
    app(s, "  CM %s\n", a->short_name);
    fields_full(s, m + kMadHdrLen, a->fields, o);
    if (const size_t i = size_t(a - kCmAttrs.data()); i < std::size(kAttrNote)) note(s, o, kAttrNote[i]);
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
