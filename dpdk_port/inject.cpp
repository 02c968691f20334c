#include "dpdk_port/inject.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "dpdk_port/pcap_file.hpp"
#include "packet/build.hpp"
#include "packet/bytes.hpp"
#include "packet/icrc.hpp"
#include "packet/opcode.hpp"
#include "packet/parse.hpp"

namespace hcaemu::port {

const std::array<const char*, size_t(InjectField::count)> kInjectFieldName = {
    "bth.opcode", "bth.se",       "bth.m",    "bth.pad",  "bth.tver", "bth.pkey",  "bth.fecn",
    "bth.becn",   "bth.qp",       "bth.ackreq", "bth.psn", "aeth.syndrome", "aeth.msn", "reth.va",
    "reth.rkey",  "reth.len",     "ip.ttl",   "ip.dscp",  "udp.sport", "udp.dport"};

namespace {

constexpr uint64_t kFieldMax[size_t(InjectField::count)] = {
    0xFF, 1, 1, 3, 0xF, 0xFFFF, 1, 1, 0xFFFFFF, 1, 0xFFFFFF, 0xFF, 0xFFFFFF, UINT64_MAX,
    0xFFFFFFFF, 0xFFFFFFFF, 0xFF, 0x3F, 0xFFFF, 0xFFFF};

constexpr std::array<const char*, 10> kClassName = {"", "", "send", "write", "read-req", "read-resp",
                                                    "atomic", "atomic-ack", "ack", "cnp"};

constexpr uint32_t kMaxUs = 1'000'000;  // delay and reorder hold: at most 1 s
constexpr int64_t kGhostAhead = 4096;    // ghost-ack default: this far past the matched PSN

bool is_forged(InjectAction a) {
    return a == InjectAction::nak_seq || a == InjectAction::rnr || a == InjectAction::nak_access ||
           a == InjectAction::nak_inval || a == InjectAction::ghost_ack || a == InjectAction::unexpected_op;
}

std::string lower(std::string_view s) {
    std::string r(s);
    for (char& c : r) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return r;
}

bool parse_u64(std::string_view s, uint64_t& v) {
    const bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    const char* b = s.data() + (hex ? 2 : 0);
    const char* e = s.data() + s.size();
    auto r = std::from_chars(b, e, v, hex ? 16 : 10);
    return b != e && r.ec == std::errc() && r.ptr == e;
}

// An opcode by number (0xNN), by rdma-core's name (RC_RDMA_WRITE_MIDDLE), or RC's without the
// "RC_" or "RC_RDMA_" prefix (WRITE_MIDDLE); case-insensitive.
bool parse_opcode(std::string_view s, uint8_t& op) {
    uint64_t v;
    if (parse_u64(s, v)) {
        if (v > 0xFF || !pkt::opcode_info(uint8_t(v)).valid()) return false;
        op = uint8_t(v);
        return true;
    }
    const std::string want = lower(s);
    for (unsigned i = 0; i < 256; ++i) {
        const auto& info = pkt::opcode_info(uint8_t(i));
        if (!info.valid()) continue;
        const std::string id = lower(info.id);
        if (id == want || (i < 0x20 && (id == "rc_" + want || id == "rc_rdma_" + want))) {
            op = uint8_t(i);
            return true;
        }
    }
    return false;
}

InjectError fail(std::string& msg, InjectError e, std::string text) {
    msg = std::move(text);
    return e;
}

// Keys every action takes (the match) and the ones only some take.
bool key_for(InjectAction a, std::string_view k) {
    if (k == "us") return a == InjectAction::delay || a == InjectAction::reorder;
    if (k == "icrc") return a == InjectAction::corrupt;
    if (k == "timer") return a == InjectAction::rnr;
    if (k == "at" || k == "mode") return is_forged(a);
    if (k == "opcode") return a == InjectAction::unexpected_op;
    return true;
}

// at=PSN (absolute) or at=+N / at=-N (relative to the matched frame's PSN).
InjectError parse_at(std::string_view val, InjectRule& r, std::string& msg) {
    const std::string v(val);
    const bool rel = !val.empty() && (val[0] == '+' || val[0] == '-');
    uint64_t n = 0;
    if (!parse_u64(rel ? val.substr(1) : val, n))
        return fail(msg, InjectError::bad_number, "at=" + v + ": use at=PSN or at=+N / at=-N");
    if (n > (rel ? 0x7FFFFFu : 0xFFFFFFu))
        return fail(msg, InjectError::out_of_range, "at=" + v + (rel ? ": a relative PSN within 2^23" : ": a 24-bit PSN"));
    r.at = rel && val[0] == '-' ? -int64_t(n) : int64_t(n);
    r.at_rel = rel;
    r.at_given = true;
    return InjectError::ok;
}

// A header field corrupt sets: FIELD=VALUE, within the field's width.
InjectError parse_field(std::string_view key, std::string_view val, InjectRule& r, std::string& msg) {
    const std::string k(key), v(val);
    for (size_t i = 0; i < kInjectFieldName.size(); ++i) {
        if (key != kInjectFieldName[i]) continue;
        if (r.action != InjectAction::corrupt)
            return fail(msg, InjectError::not_for_action, k + ": header fields are set by corrupt only");
        if (r.nfields == r.fields.size()) return fail(msg, InjectError::too_many_fields, k + ": at most 4 fields per rule");
        uint64_t n = 0;
        if (!parse_u64(val, n)) return fail(msg, InjectError::bad_number, k + "=" + v + ": not a number (decimal or 0x hex)");
        if (n > kFieldMax[i])
            return fail(msg, InjectError::out_of_range, k + "=" + v + ": out of range 0.." + std::to_string(kFieldMax[i]));
        r.fields[r.nfields++] = {InjectField(i), n};
        return InjectError::ok;
    }
    return fail(msg, InjectError::unknown_key, "unknown key '" + k + "'");
}

InjectError parse_value(std::string_view key, std::string_view val, InjectRule& r, std::string& msg) {
    const std::string k(key), v(val);
    auto number = [&](uint64_t lo, uint64_t hi, uint64_t& out) -> InjectError {
        if (!parse_u64(val, out))
            return fail(msg, InjectError::bad_number, k + "=" + v + ": not a number (decimal or 0x hex)");
        if (out < lo || out > hi)
            return fail(msg, InjectError::out_of_range,
                        k + "=" + v + ": out of range " + std::to_string(lo) + ".." + std::to_string(hi));
        return InjectError::ok;
    };
    uint64_t n = 0;
    InjectError e = InjectError::ok;
    if (key == "dir") {
        if (val == "tx") r.dir = InjectDir::tx;
        else if (val == "rx") r.dir = InjectDir::rx;
        else return fail(msg, InjectError::bad_direction, "dir=" + v + ": use dir=tx or dir=rx");
    } else if (key == "qp") {
        if ((e = number(0, 0xFFFFFF, n)) != InjectError::ok) return e;
        r.has_qp = true, r.qp = uint32_t(n);
    } else if (key == "psn") {
        if ((e = number(0, 0xFFFFFF, n)) != InjectError::ok) return e;
        r.has_psn = true, r.psn = uint32_t(n);
    } else if (key == "op") {
        const std::string c = lower(val);
        for (size_t i = 2; i < kClassName.size(); ++i)
            if (c == kClassName[i]) {
                r.op_class = OpClass(i);
                return InjectError::ok;
            }
        if (!parse_opcode(val, r.opcode))
            return fail(msg, InjectError::bad_opcode,
                        "op=" + v + ": not an opcode (RC_RDMA_WRITE_MIDDLE, WRITE_MIDDLE, 0x07) nor a class "
                        "(send, write, read-req, read-resp, atomic, atomic-ack, ack, cnp)");
        r.op_class = OpClass::exact;
    } else if (key == "round") {
        if ((e = number(1, 1u << 30, n)) != InjectError::ok) return e;
        r.round = uint32_t(n);
    } else if (key == "nth") {
        if ((e = number(1, UINT64_MAX, n)) != InjectError::ok) return e;
        r.nth = n;
    } else if (key == "seed") {
        if ((e = number(0, UINT64_MAX, n)) != InjectError::ok) return e;
        r.seed = n;
    } else if (key == "count") {
        if (val == "all") r.count = 0;
        else if ((e = number(1, UINT64_MAX, n)) != InjectError::ok) return e;
        else r.count = n;
    } else if (key == "prob") {
        double p = 0;
        auto res = std::from_chars(val.data(), val.data() + val.size(), p);
        if (val.empty() || res.ec != std::errc() || res.ptr != val.data() + val.size())
            return fail(msg, InjectError::bad_number, "prob=" + v + ": not a number");
        if (!(p > 0.0 && p <= 1.0)) return fail(msg, InjectError::out_of_range, "prob=" + v + ": must lie in (0, 1]");
        r.prob = p;
    } else if (key == "us") {
        if ((e = number(1, kMaxUs, n)) != InjectError::ok) return e;
        r.us = uint32_t(n);
    } else if (key == "timer") {
        if ((e = number(0, 31, n)) != InjectError::ok) return e;
        r.timer = uint8_t(n);
    } else if (key == "mode") {
        if (val == "add") r.add = true;
        else if (val == "replace") r.add = false;
        else return fail(msg, InjectError::bad_number, "mode=" + v + ": use mode=replace or mode=add");
    } else if (key == "opcode") {
        if (!parse_opcode(val, r.new_opcode)) return fail(msg, InjectError::bad_opcode, "opcode=" + v + ": not an opcode");
    } else if (key == "at") {
        return parse_at(val, r, msg);
    } else {
        return parse_field(key, val, r, msg);
    }
    return InjectError::ok;
}

}  // namespace

InjectError parse_inject_rule(std::string_view text, InjectRule& out, std::string& msg) {
    std::vector<std::string_view> tok;
    for (size_t i = 0; i < text.size();) {
        while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
        size_t j = i;
        while (j < text.size() && text[j] != ' ' && text[j] != '\t') ++j;
        if (j > i) tok.push_back(text.substr(i, j - i));
        i = j;
    }
    if (tok.empty()) return fail(msg, InjectError::empty, "empty rule: ACTION dir=tx|rx [MATCH...]");
    InjectRule r;
    size_t a = 0;
    for (; a < kInjectActionName.size(); ++a)
        if (tok[0] == kInjectActionName[a] || (a == size_t(InjectAction::duplicate) && tok[0] == "dup")) break;
    if (a == kInjectActionName.size())
        return fail(msg, InjectError::unknown_action,
                    "unknown action '" + std::string(tok[0]) +
                        "': drop, duplicate, delay, reorder, corrupt, ecn, nak-seq, rnr, nak-access, nak-inval, "
                        "ack-withhold, ghost-ack, unexpected-op");
    r.action = InjectAction(a);
    r.add = r.action == InjectAction::ghost_ack || r.action == InjectAction::unexpected_op;
    if (r.action == InjectAction::ghost_ack) r.at = kGhostAhead;
    std::vector<std::string> seen;
    bool have_dir = false;
    for (size_t i = 1; i < tok.size(); ++i) {
        const std::string_view t = tok[i];
        const size_t eq = t.find('=');
        const std::string_view key = t.substr(0, eq);
        if (key.empty()) return fail(msg, InjectError::missing_value, "'" + std::string(t) + "': KEY=VALUE expected");
        if (std::find(seen.begin(), seen.end(), key) != seen.end() && key.find('.') == std::string_view::npos)
            return fail(msg, InjectError::duplicate_key, "'" + std::string(key) + "' given twice");
        seen.emplace_back(key);
        if (!key_for(r.action, key))
            return fail(msg, InjectError::not_for_action,
                        "'" + std::string(key) + "' does not apply to " + kInjectActionName[a]);
        if (key == "icrc" && eq == std::string_view::npos) {
            r.icrc = true;
            continue;
        }
        if (eq == std::string_view::npos || eq + 1 == t.size())
            return fail(msg, InjectError::missing_value, "'" + std::string(key) + "' needs a value (KEY=VALUE)");
        if (key == "icrc") return fail(msg, InjectError::missing_value, "icrc takes no value: write 'icrc'");
        const InjectError e = parse_value(key, t.substr(eq + 1), r, msg);
        if (e != InjectError::ok) return e;
        have_dir |= key == "dir";
    }
    if (!have_dir) return fail(msg, InjectError::missing_direction, "dir=tx or dir=rx is required");
    if (r.action == InjectAction::corrupt && !r.icrc && r.nfields == 0)
        return fail(msg, InjectError::corrupt_needs_target, "corrupt needs 'icrc' or a field, e.g. bth.psn=7");
    if (r.action == InjectAction::delay && r.us == 0)
        return fail(msg, InjectError::missing_value, "delay needs us=N (1.." + std::to_string(kMaxUs) + ")");
    if (r.action == InjectAction::reorder && r.us == 0) r.us = 1000;
    if (r.action == InjectAction::ack_withhold) {
        if (r.op_class != OpClass::none && r.op_class != OpClass::ack)
            return fail(msg, InjectError::not_for_action, "ack-withhold applies to ACKs only (op=ack)");
        r.op_class = OpClass::ack;
    }
    out = r;
    msg.clear();
    return InjectError::ok;
}

std::string to_string(const InjectRule& r) {
    char b[64];
    std::string s = kInjectActionName[size_t(r.action)];
    s += r.dir == InjectDir::tx ? " dir=tx" : " dir=rx";
    if (r.has_qp) std::snprintf(b, sizeof b, " qp=0x%x", r.qp), s += b;
    if (r.op_class == OpClass::exact) s += std::string(" op=") + pkt::opcode_info(r.opcode).id;
    else if (r.op_class != OpClass::none) s += std::string(" op=") + kClassName[size_t(r.op_class)];
    if (r.has_psn) s += " psn=" + std::to_string(r.psn);
    if (r.round) s += " round=" + std::to_string(r.round);
    if (r.nth != 1) s += " nth=" + std::to_string(r.nth);
    if (r.prob < 1.0) {
        std::snprintf(b, sizeof b, " prob=%.17g seed=%llu", r.prob, static_cast<unsigned long long>(r.seed));
        s += b;
    }
    s += r.count ? " count=" + std::to_string(r.count) : std::string(" count=all");
    if (r.action == InjectAction::delay || r.action == InjectAction::reorder) s += " us=" + std::to_string(r.us);
    if (r.icrc) s += " icrc";
    for (uint8_t i = 0; i < r.nfields; ++i) {
        std::snprintf(b, sizeof b, " %s=0x%llx", kInjectFieldName[size_t(r.fields[i].field)],
                      static_cast<unsigned long long>(r.fields[i].value));
        s += b;
    }
    if (r.action == InjectAction::rnr) s += " timer=" + std::to_string(r.timer);
    if (r.action == InjectAction::unexpected_op) s += std::string(" opcode=") + pkt::opcode_info(r.new_opcode).id;
    if (is_forged(r.action)) {
        if (r.at_rel) {
            if (r.at || (r.at_given && r.action == InjectAction::rnr))
                s += std::string(" at=") + (r.at >= 0 ? "+" : "-") + std::to_string(r.at >= 0 ? r.at : -r.at);
        } else {
            s += " at=" + std::to_string(r.at);
        }
        s += r.add ? " mode=add" : " mode=replace";
    }
    return s;
}

std::vector<std::string> split_inject_rules(std::string_view s) {
    std::vector<std::string> out;
    size_t p = 0;
    while (p <= s.size()) {
        size_t q = s.find(';', p);
        if (q == std::string_view::npos) q = s.size();
        std::string_view piece = s.substr(p, q - p);
        while (!piece.empty() && (piece.front() == ' ' || piece.front() == '\t')) piece.remove_prefix(1);
        while (!piece.empty() && (piece.back() == ' ' || piece.back() == '\t')) piece.remove_suffix(1);
        if (!piece.empty()) out.emplace_back(piece);
        p = q + 1;
    }
    return out;
}

bool op_matches(const InjectRule& r, uint8_t opcode) {
    using K = pkt::Kind;
    const auto& info = pkt::opcode_info(opcode);
    switch (r.op_class) {
    case OpClass::none: return true;
    case OpClass::exact: return opcode == r.opcode;
    case OpClass::send: return info.valid() && info.kind == K::send;
    case OpClass::write: return info.valid() && info.kind == K::rdma_write;
    case OpClass::read_req: return info.valid() && info.kind == K::rdma_read_request;
    case OpClass::read_resp: return info.valid() && info.kind == K::rdma_read_response;
    case OpClass::atomic: return info.valid() && (info.kind == K::cmp_swap || info.kind == K::fetch_add);
    case OpClass::atomic_ack: return info.valid() && info.kind == K::atomic_ack;
    case OpClass::ack: return info.valid() && info.kind == K::ack;
    case OpClass::cnp: return info.valid() && info.kind == K::cnp;
    }
    return false;
}

// ---------------------------------------------------------------- ActiveRule

namespace {

uint64_t splitmix64(uint64_t& s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void bump(std::atomic<uint64_t>& a, int64_t d = 1) {  // single writer: no locked instruction
    a.store(a.load(std::memory_order_relaxed) + uint64_t(d), std::memory_order_relaxed);
}

}  // namespace

ActiveRule::ActiveRule(uint32_t rule_id, const InjectRule& r) : id(rule_id), spec(r), text(to_string(r)), rng_(r.seed) {}

bool ActiveRule::test(const FrameKey& k, uint32_t round) {
    if (spec.has_qp && k.qp != spec.qp) return false;
    if (spec.has_psn && k.psn != spec.psn) return false;
    if (!op_matches(spec, k.opcode)) return false;
    if (spec.round && round != spec.round) return false;
    bump(matched_);
    if (exhausted() || matched() < spec.nth) return false;
    if (spec.prob < 1.0 && double(splitmix64(rng_) >> 11) * 0x1.0p-53 >= spec.prob) return false;
    ++fired_;
    bump(hits_);
    return true;
}

void ActiveRule::unfire() {
    --fired_;
    bump(hits_, -1);
}

// ---------------------------------------------------------------- InjectPort

struct InjectPort::RuleSet {
    std::vector<std::shared_ptr<ActiveRule>> rules;
    std::vector<ActiveRule*> by_dir[2];  // the data path's view, in rule order
    bool rounds[2] = {false, false};
    bool track[2] = {false, false};  // requests of this direction followed for an rnr rule (other way)
};

InjectPort::InjectPort(Port& inner, const Clock& clock) : inner_(inner), clock_(clock) {}

void InjectPort::set_capture(PcapWriter* w) { cap_ = w && w->enable_notes() ? w : nullptr; }

InjectPort::~InjectPort() {
    for (uint32_t i = 0; i < hold_n_; ++i) inner_.free(hold_[i].f);
    while (back_n_) {
        inner_.free(backlog_[back_head_]);
        back_head_ = (back_head_ + 1) % kBacklog;
        --back_n_;
    }
    set_.store(nullptr);
}

void InjectPort::publish(std::unique_ptr<RuleSet> s) {
    if (s && s->rules.empty()) s.reset();
    set_.store(s.get(), std::memory_order_seq_cst);
    if (live_) retired_.push_back(std::move(live_));
    live_ = std::move(s);
    // A retired set may go once the data path is not inside a burst with it (hazard pointer).
    const RuleSet* in_use = hazard_.load(std::memory_order_seq_cst);
    std::erase_if(retired_, [&](const std::unique_ptr<RuleSet>& r) { return r.get() != in_use; });
}

uint32_t InjectPort::add(std::string_view text, std::string& msg, InjectError* err) {
    InjectRule r;
    const InjectError e = parse_inject_rule(text, r, msg);
    if (err) *err = e;
    if (e != InjectError::ok) return 0;
    const std::lock_guard g(mu_);
    std::vector<std::shared_ptr<ActiveRule>> rules;
    if (live_) rules = live_->rules;
    if (rules.size() >= kMaxRules) {
        msg = "at most " + std::to_string(kMaxRules) + " rules";
        if (err) *err = InjectError::too_many_rules;
        return 0;
    }
    const uint32_t id = next_id_++;
    rules.push_back(std::make_shared<ActiveRule>(id, r));
    auto s = std::make_unique<RuleSet>();
    s->rules = std::move(rules);
    for (auto& p : s->rules) {
        const int d = p->spec.dir == InjectDir::tx ? 0 : 1;
        s->by_dir[d].push_back(p.get());
        s->rounds[d] |= p->spec.round != 0;
        s->track[1 - d] |= p->spec.action == InjectAction::rnr && !p->spec.at_given;
    }
    publish(std::move(s));
    return id;
}

bool InjectPort::del(uint32_t id) {
    const std::lock_guard g(mu_);
    if (!live_) return false;
    auto s = std::make_unique<RuleSet>();
    bool found = false;
    for (auto& p : live_->rules) {
        if (p->id == id) {
            found = true;
            continue;
        }
        s->rules.push_back(p);
        const int d = p->spec.dir == InjectDir::tx ? 0 : 1;
        s->by_dir[d].push_back(p.get());
        s->rounds[d] |= p->spec.round != 0;
        s->track[1 - d] |= p->spec.action == InjectAction::rnr && !p->spec.at_given;
    }
    if (found) publish(std::move(s));
    return found;
}

void InjectPort::clear() {
    const std::lock_guard g(mu_);
    publish(nullptr);
}

std::vector<InjectRuleInfo> InjectPort::list() const {
    const std::lock_guard g(mu_);
    std::vector<InjectRuleInfo> out;
    if (live_)
        for (auto& p : live_->rules) out.push_back({p->id, p->text, p->matched(), p->hits()});
    return out;
}

InjectStats InjectPort::inject_stats() const {
    return {fired_.load(std::memory_order_relaxed), no_buffer_.load(std::memory_order_relaxed),
            not_applicable_.load(std::memory_order_relaxed), held_now_.load(std::memory_order_relaxed)};
}

const InjectPort::RuleSet* InjectPort::enter() {
    const RuleSet* s = set_.load(std::memory_order_acquire);
    while (s) {
        hazard_.store(s, std::memory_order_seq_cst);
        const RuleSet* again = set_.load(std::memory_order_seq_cst);
        if (again == s) return s;
        s = again;
    }
    hazard_.store(nullptr, std::memory_order_release);
    return nullptr;
}


// ---------------------------------------------------------------- data path

namespace {

// Where a RoCE v2 frame's headers are, found without parsing it all.
bool locate(const uint8_t* p, uint32_t len, FrameLoc& l) {
    if (len < pkt::kEthLen) return false;
    uint32_t off = uint32_t(pkt::kEthLen);
    uint16_t type = pkt::load_be16(p + 12);
    if (type == pkt::kEthTypeVlan) {
        if (len < pkt::kEthLen + pkt::kVlanLen) return false;
        type = pkt::load_be16(p + 16);
        off += uint32_t(pkt::kVlanLen);
    }
    const uint8_t* ip = p + off;
    if (type == pkt::kEthTypeIpv4) {
        if (len < off + pkt::kIpv4Len || ip[0] != 0x45 || ip[9] != pkt::kIpProtoUdp) return false;
        l.l4 = off + uint32_t(pkt::kIpv4Len);
        l.end = off + pkt::load_be16(ip + 2);
        l.v6 = false;
    } else if (type == pkt::kEthTypeIpv6) {
        if (len < off + pkt::kIpv6Len || (ip[0] >> 4) != 6 || ip[6] != pkt::kIpProtoUdp) return false;
        l.l4 = off + uint32_t(pkt::kIpv6Len);
        l.end = l.l4 + pkt::load_be16(ip + 4);
        l.v6 = true;
    } else {
        return false;
    }
    l.l3 = off;
    l.bth = l.l4 + uint32_t(pkt::kUdpLen);
    if (l.end > len || l.end < l.bth + pkt::kBthLen + pkt::kIcrcLen) return false;
    return pkt::load_be16(p + l.l4 + 2) == pkt::kRoceV2Port;
}

FrameKey key_of(const uint8_t* p, const FrameLoc& l) {
    return {p[l.bth], pkt::load_be24(p + l.bth + 5) & 0xFFFFFF, pkt::load_be24(p + l.bth + 9)};
}

// The IPv4 header checksum and the ICRC made right again after a change.
void refresh(uint8_t* p, const FrameLoc& l) {
    if (!l.v6) {
        pkt::store_be16(p + l.l3 + 10, 0);
        pkt::store_be16(p + l.l3 + 10, pkt::ipv4_header_checksum(p + l.l3));
    }
    const uint32_t c = pkt::icrc(p + l.l3, l.end - pkt::kIcrcLen - l.l3, l.v6);
    pkt::store_le32(p + l.end - pkt::kIcrcLen, c);
}

// IPv4 TOS or IPv6 traffic class: read and written whole.
uint8_t get_tc(const uint8_t* p, const FrameLoc& l) {
    const uint8_t* ip = p + l.l3;
    return l.v6 ? uint8_t((ip[0] & 0xF) << 4 | ip[1] >> 4) : ip[1];
}
void set_tc(uint8_t* p, const FrameLoc& l, uint8_t tc) {
    uint8_t* ip = p + l.l3;
    if (l.v6) {
        ip[0] = uint8_t((ip[0] & 0xF0) | tc >> 4);
        ip[1] = uint8_t((ip[1] & 0x0F) | (tc & 0xF) << 4);
    } else {
        ip[1] = tc;
    }
}

void set_bits(uint8_t& b, uint8_t mask, unsigned shift, uint64_t v) { b = uint8_t((b & ~mask) | ((v << shift) & mask)); }

// Sets the rule's fields; false (nothing changed) when the frame lacks a header one names.
bool corrupt_fields(uint8_t* p, const FrameLoc& l, const InjectRule& r) {
    const auto& info = pkt::opcode_info(p[l.bth]);
    for (uint8_t i = 0; i < r.nfields; ++i) {
        const auto f = r.fields[i].field;
        if (f >= InjectField::aeth_syndrome && f <= InjectField::aeth_msn && !(info.valid() && info.has(pkt::Ext::aeth)))
            return false;
        if (f >= InjectField::reth_va && f <= InjectField::reth_len && !(info.valid() && info.has(pkt::Ext::reth)))
            return false;
    }
    const uint32_t aeth = info.valid() ? l.bth + uint32_t(pkt::kBthLen) + info.ext_off[size_t(pkt::Ext::aeth)] : 0;
    const uint32_t reth = info.valid() ? l.bth + uint32_t(pkt::kBthLen) + info.ext_off[size_t(pkt::Ext::reth)] : 0;
    uint8_t* b = p + l.bth;
    for (uint8_t i = 0; i < r.nfields; ++i) {
        const uint64_t v = r.fields[i].value;
        switch (r.fields[i].field) {
        case InjectField::bth_opcode: b[0] = uint8_t(v); break;
        case InjectField::bth_se: set_bits(b[1], 0x80, 7, v); break;
        case InjectField::bth_m: set_bits(b[1], 0x40, 6, v); break;
        case InjectField::bth_pad: set_bits(b[1], 0x30, 4, v); break;
        case InjectField::bth_tver: set_bits(b[1], 0x0F, 0, v); break;
        case InjectField::bth_pkey: pkt::store_be16(b + 2, uint16_t(v)); break;
        case InjectField::bth_fecn: set_bits(b[4], 0x80, 7, v); break;
        case InjectField::bth_becn: set_bits(b[4], 0x40, 6, v); break;
        case InjectField::bth_qp: pkt::store_be24(b + 5, uint32_t(v)); break;
        case InjectField::bth_ackreq: set_bits(b[8], 0x80, 7, v); break;
        case InjectField::bth_psn: pkt::store_be24(b + 9, uint32_t(v)); break;
        case InjectField::aeth_syndrome: p[aeth] = uint8_t(v); break;
        case InjectField::aeth_msn: pkt::store_be24(p + aeth + 1, uint32_t(v)); break;
        case InjectField::reth_va: pkt::store_be64(p + reth, v); break;
        case InjectField::reth_rkey: pkt::store_be32(p + reth + 8, uint32_t(v)); break;
        case InjectField::reth_len: pkt::store_be32(p + reth + 12, uint32_t(v)); break;
        case InjectField::ip_ttl: p[l.l3 + (l.v6 ? 7 : 8)] = uint8_t(v); break;
        case InjectField::ip_dscp: set_tc(p, l, uint8_t(v << 2 | (get_tc(p, l) & 3))); break;
        case InjectField::udp_sport: pkt::store_be16(p + l.l4, uint16_t(v)); break;
        case InjectField::udp_dport: pkt::store_be16(p + l.l4 + 2, uint16_t(v)); break;
        case InjectField::count: break;
        }
    }
    return true;
}

const char* forged_name(InjectAction a) {
    switch (a) {
    case InjectAction::nak_seq: return "forged NAK PSN sequence error";
    case InjectAction::rnr: return "forged RNR NAK";
    case InjectAction::nak_access: return "forged NAK remote access error";
    case InjectAction::nak_inval: return "forged NAK invalid request";
    case InjectAction::ghost_ack: return "forged ghost ACK";
    default: return "forged unexpected opcode";
    }
}

}  // namespace

namespace {

int32_t psn_diff(uint32_t a, uint32_t b) { return int32_t((a - b) << 8) >> 8; }

// The requester's address of a request (its source) or of a response (its destination).
const uint8_t* requester_addr(const uint8_t* p, const FrameLoc& l, bool request) {
    if (l.v6) return p + l.l3 + (request ? 8 : 24);
    return p + l.l3 + (request ? 12 : 16);
}

bool same_addr(const std::array<uint8_t, 16>& a, const uint8_t* b, bool v6) {
    return std::memcmp(a.data() + (v6 ? 0 : 12), b, v6 ? 16 : 4) == 0;
}

}  // namespace

// Requests followed for an rnr rule without at=: per flow, the PSN range seen and the latest PSNs
// at which a responder takes a receive WQE. A SEND takes it at its First or Only packet, an RDMA
// WRITE with Immediate at the packet with the immediate (its Last or Only: a WRITE First does not
// say the message will have one); nothing else needs one (IBTA 9.7.5.2.8).
// A linear scan of the flows in use: one or a few while a probe runs, 64 at most.
void InjectPort::track_request(InjectDir d, const uint8_t* p, const FrameLoc& l, const FrameKey& k) {
    const pkt::OpcodeInfo& oi = pkt::opcode_info(k.opcode);
    if (!oi.valid() || !oi.request || oi.transport != pkt::Transport::rc) return;
    const uint8_t* a = requester_addr(p, l, true);
    ReqFlow* fl = nullptr;
    for (uint32_t i = 0; i < nreq_flows_ && !fl; ++i) {
        ReqFlow& x = req_flows_[i];
        if (x.dir == d && x.v6 == l.v6 && x.qp == k.qp && same_addr(x.src, a, l.v6)) fl = &x;
    }
    if (!fl) {
        fl = &req_flows_[nreq_flows_ < kReqFlows ? nreq_flows_++ : req_next_++ % kReqFlows];
        *fl = ReqFlow{};
        fl->dir = d;
        fl->v6 = l.v6;
        fl->qp = k.qp;
        std::memcpy(fl->src.data() + (l.v6 ? 0 : 12), a, l.v6 ? 16 : 4);
        fl->lo = fl->hi = k.psn;
    }
    if (psn_diff(k.psn, fl->hi) > 0) fl->hi = k.psn;
    const bool wqe = (oi.kind == pkt::Kind::send && oi.is_first()) ||
                     (oi.kind == pkt::Kind::rdma_write && oi.has(pkt::Ext::immdt));
    if (wqe) fl->wqe[fl->nwqe++ % kWqePsns] = k.psn;
    // Where messages end (a READ or an atomic request is one packet), for the MSN: a message
    // resent is not counted twice.
    if (oi.is_last() || oi.pos == pkt::Position::none) {
        const uint32_t n = std::min(fl->nends, kWqePsns);
        bool seen = false;
        for (uint32_t i = 0; i < n && !seen; ++i) seen = fl->ends[i] == k.psn;
        if (!seen) fl->ends[fl->nends++ % kWqePsns] = k.psn;
    }
}

// The messages of a flow that ended at a PSN in [from, to].
uint32_t InjectPort::ends_between(const ReqFlow& fl, uint32_t from, uint32_t to) {
    uint32_t c = 0;
    const uint32_t n = std::min(fl.nends, kWqePsns);
    for (uint32_t i = 0; i < n; ++i) c += psn_diff(fl.ends[i], from) >= 0 && psn_diff(fl.ends[i], to) <= 0;
    return c;
}

// The request flow a response with an AETH answers: the one whose responses went to this QP
// before, else the one from that address whose PSNs seen take in the response's (then learnt).
InjectPort::ReqFlow* InjectPort::response_flow(InjectDir d, const uint8_t* p, const FrameLoc& l, const FrameKey& k) {
    const pkt::OpcodeInfo& oi = pkt::opcode_info(k.opcode);
    if (!oi.valid() || oi.request || !oi.has(pkt::Ext::aeth) || oi.transport != pkt::Transport::rc) return nullptr;
    const InjectDir rd = d == InjectDir::tx ? InjectDir::rx : InjectDir::tx;
    const uint8_t* a = requester_addr(p, l, false);
    ReqFlow* guess = nullptr;
    for (uint32_t i = 0; i < nreq_flows_; ++i) {
        ReqFlow& x = req_flows_[i];
        if (x.dir != rd || x.v6 != l.v6 || !same_addr(x.src, a, l.v6)) continue;
        if (x.peer_known && x.peer_qp == k.qp) return &x;
        if (!x.peer_known && !guess && psn_diff(k.psn, x.lo) >= 0 && psn_diff(k.psn, x.hi) <= 0) guess = &x;
    }
    if (guess) {
        guess->peer_known = true;
        guess->peer_qp = k.qp;
    }
    return guess;
}

// What a responder out of receive WQEs NAKs instead of the ACK of `ack_psn`: the request packet it
// could not take (IBTA 9.7.5.2.8: the RNR NAK carries the PSN of that request), i.e. the earliest
// packet needing a WQE past what was acknowledged, up to the ACK's PSN. None there (the ACK
// covers WRITEs or READs only): the ACK's PSN, as with at=+0.
uint32_t InjectPort::rnr_psn(ReqFlow* fl, uint32_t ack_psn, bool& found) const {
    found = false;
    if (!fl) return ack_psn;
    uint32_t best = ack_psn;
    const uint32_t n = std::min(fl->nwqe, kWqePsns);
    for (uint32_t i = 0; i < n; ++i) {
        const uint32_t x = fl->wqe[(fl->nwqe - 1 - i) % kWqePsns];
        if (psn_diff(x, ack_psn) > 0 || (fl->acked_valid && psn_diff(x, fl->acked) <= 0)) continue;
        if (!found || psn_diff(x, best) < 0) best = x;
        found = true;
    }
    return best;
}

// The PSN a response acknowledges: an ACK's own, every request before a NAK's (IBTA 9.7.5.1.3).
uint32_t InjectPort::acked_by(const uint8_t* p, const FrameLoc& l, const FrameKey& k) {
    const uint8_t syn = p[l.bth + pkt::kBthLen];
    return ((syn & 0x60) == 0 ? k.psn : k.psn - 1) & 0xFFFFFF;
}

uint32_t InjectPort::round(InjectDir d, const FrameKey& k) {
    Round& e = rounds_[size_t(d)][((k.qp * 0x9E3779B1u) ^ (k.psn * 0x85EBCA6Bu)) >> (32 - 12)];
    if (e.n && e.qp == k.qp && e.psn == k.psn) return ++e.n;
    e = {k.qp, k.psn, 1};
    return 1;
}

void InjectPort::out(InjectDir d, const Frame& f) {
    if (d == InjectDir::tx) {
        backlog_[(back_head_ + back_n_) % kBacklog] = f;
        ++back_n_;
    } else {
        if (rx_n_ == rx_cap_) {  // no room left in the caller's array (a burst of 1)
            inner_.free(const_cast<Frame&>(f));
            bump(no_buffer_);
            return;
        }
        rx_out_[rx_n_++] = f;
    }
}

uint32_t InjectPort::flush_backlog() {
    while (back_n_) {
        const uint32_t seg = std::min(back_n_, kBacklog - back_head_);
        const uint16_t t = inner_.tx_burst(&backlog_[back_head_], uint16_t(std::min<uint32_t>(seg, 0xFFFF)));
        back_head_ = (back_head_ + t) % kBacklog;
        back_n_ -= t;
        if (t < seg) break;
    }
    return back_n_;
}

void InjectPort::note(int64_t idx, const ActiveRule* r, uint32_t id, const char* what) {
    if (!cap_ || nnotes_ == notes_.size()) return;
    notes_[nnotes_++] = {idx, r ? r->text.c_str() : nullptr, id, what};
}

void InjectPort::emit_notes() {
    if (!cap_) return;
    // The caller (NetPort) captures the burst's frames right after this call returns, in order.
    const uint64_t base = cap_->frames();
    for (uint32_t i = 0; i < nnotes_; ++i)
        cap_->note(base + 1 + uint64_t(notes_[i].idx), notes_[i].id, notes_[i].text, notes_[i].what);
    nnotes_ = 0;
}

void InjectPort::capture_own(const Frame& f, const ActiveRule& r, const char* what) {
    if (!cap_) return;
    cap_->write({f.data, f.len}, clock_.now_ns());
    cap_->note(cap_->frames(), r.id, r.text.c_str(), what);
}

bool InjectPort::copy(const Frame& f, Frame& g) {
    if (!inner_.alloc(g)) return false;
    if (g.cap < f.len) {
        inner_.free(g);
        return false;
    }
    std::memcpy(g.data, f.data, f.len);
    g.len = f.len;
    return true;
}

// A response built from the matched frame's addresses, destination QP and PSN (or at=; an RNR NAK
// without at=: rnr_psn).
bool InjectPort::forge(const ActiveRule& r, const Frame& f, ReqFlow* fl, Frame& g) {
    pkt::Packet pk;
    const pkt::ParseOptions po{false, false, false};
    const pkt::ParseError e = pkt::parse({f.data, f.len}, pk, po);
    if (!pkt::decoded_all(e)) return false;
    pkt::Headers h = pk.h;
    const InjectRule& s = r.spec;
    uint32_t msn = pk.op->has(pkt::Ext::aeth) ? h.aeth.msn : 0;
    if (s.action == InjectAction::rnr && !s.at_given) {
        const uint32_t ack_psn = h.bth.psn;
        bool found = false;
        h.bth.psn = rnr_psn(fl, ack_psn, found);
        // The MSN of the last message completed (IBTA 9.7.5.1): not those from the NAK's PSN on.
        if (found) msn = (msn - ends_between(*fl, h.bth.psn, ack_psn)) & 0xFFFFFF;
        if (fl && !s.add) {  // the requester will take the NAK as acknowledging what is before it
            fl->acked = (h.bth.psn - 1) & 0xFFFFFF;
            fl->acked_valid = true;
        }
    } else {
        h.bth.psn = uint32_t(s.at_rel ? int64_t(h.bth.psn) + s.at : s.at) & 0xFFFFFF;
    }
    h.bth.se = h.bth.ack_req = false;
    h.udp.checksum = 0;
    h.bth.opcode = pkt::op::rc | pkt::op::acknowledge;
    h.aeth.msn = msn;
    using T = pkt::AethType;
    using N = pkt::NakCode;
    switch (s.action) {
    case InjectAction::nak_seq: h.aeth.syndrome = pkt::aeth_syndrome(T::nak, uint8_t(N::psn_seq_error)); break;
    case InjectAction::rnr: h.aeth.syndrome = pkt::aeth_syndrome(T::rnr_nak, s.timer); break;
    case InjectAction::nak_access: h.aeth.syndrome = pkt::aeth_syndrome(T::nak, uint8_t(N::remote_access_error)); break;
    case InjectAction::nak_inval: h.aeth.syndrome = pkt::aeth_syndrome(T::nak, uint8_t(N::invalid_request)); break;
    case InjectAction::ghost_ack: h.aeth.syndrome = pkt::aeth_syndrome(T::ack, pkt::kAethCreditInvalid); break;
    default:
        h.bth.opcode = s.new_opcode;
        h.aeth.syndrome = pkt::aeth_syndrome(T::ack, pkt::kAethCreditInvalid);
        break;
    }
    if (!inner_.alloc(g)) return false;
    size_t len = 0;
    if (pkt::build(h, {}, {g.data, g.cap}, len) != pkt::BuildError::ok) {
        inner_.free(g);
        return false;
    }
    g.len = uint32_t(len);
    return true;
}

bool InjectPort::hold(const ActiveRule& r, InjectDir d, const Frame& f, uint32_t qp) {
    if (hold_n_ == kHold) return false;
    const uint64_t due = clock_.now_ns() + uint64_t(r.spec.us) * 1000;
    hold_[hold_n_++] = {f, due, qp, r.spec.action == InjectAction::reorder, d == InjectDir::rx, r.id};
    hold_due_min_ = std::min(hold_due_min_, due);
    held_now_.store(hold_n_, std::memory_order_relaxed);
    return true;
}

// Held frames of direction d that are due, or (qp_event) reorder-held ones for `qp` among the
// first `bound` entries, go out in the order they were held. rx: at most the caller's room.
void InjectPort::release_held(InjectDir d, uint32_t bound, bool qp_event, uint32_t qp) {
    const uint64_t now = clock_.now_ns();
    const bool rx = d == InjectDir::rx;
    uint32_t w = 0;
    uint64_t due_min = UINT64_MAX;
    for (uint32_t i = 0; i < hold_n_; ++i) {
        Held& h = hold_[i];
        const bool go = h.rx == rx && (h.due <= now || (qp_event && h.reorder && h.qp == qp && i < bound)) &&
                        (!rx || rx_n_ < rx_cap_);
        if (go) {
            if (rx) note(rx_n_, nullptr, h.rule, h.reorder ? "released after reordering" : "delivered after delay");
            out(d, h.f);
        } else {
            due_min = std::min(due_min, h.due);
            hold_[w++] = h;
        }
    }
    hold_n_ = w;
    hold_due_min_ = due_min;
    held_now_.store(hold_n_, std::memory_order_relaxed);
}

bool InjectPort::apply(ActiveRule& r, InjectDir d, Frame& f, const FrameLoc& l, const FrameKey& k, int64_t idx,
                       ReqFlow* fl) {
    const bool tx = d == InjectDir::tx;
    const InjectRule& s = r.spec;
    Frame g;
    switch (s.action) {
    case InjectAction::drop:
    case InjectAction::ack_withhold:
        if (tx) note(idx, &r, r.id, "dropped: not sent");
        else capture_own(f, r, "dropped: not delivered");
        inner_.free(f);
        consumed_ = true;
        return true;
    case InjectAction::duplicate:
        if (!copy(f, g)) return false;
        if (tx) note(idx, &r, r.id, "sent twice");
        out(d, f);
        if (!tx) note(rx_n_, &r, r.id, "duplicate copy");
        out(d, g);
        return true;
    case InjectAction::delay:
    case InjectAction::reorder: {
        if (!hold(r, d, f, k.qp)) return false;
        if (tx) note(idx, &r, r.id, s.action == InjectAction::delay ? "delayed" : "held: sent after the next frame to its QP");
        return true;
    }
    case InjectAction::corrupt:
        if (s.nfields) {
            if (!corrupt_fields(f.data, l, s)) {  // the frame lacks a header named: no hit
                bump(not_applicable_);
                not_applied_ = true;
                r.unfire();
                out(d, f);
                return true;
            }
            FrameLoc l2 = l;
            refresh(f.data, l2);
        }
        if (s.icrc) {
            uint8_t* c = f.data + l.end - pkt::kIcrcLen;
            for (int i = 0; i < 4; ++i) c[i] = uint8_t(~c[i]);
        }
        if (!tx) note(rx_n_, &r, r.id, "corrupted");
        else note(idx, &r, r.id, "corrupted on the wire");
        out(d, f);
        return true;
    case InjectAction::ecn:
        set_tc(f.data, l, uint8_t(get_tc(f.data, l) | 3));  // ECN CE (RFC 3168); the ICRC masks it
        if (!l.v6) refresh(f.data, l);
        if (!tx) note(rx_n_, &r, r.id, "ECN CE marked");
        else note(idx, &r, r.id, "ECN CE marked on the wire");
        out(d, f);
        return true;
    default:
        break;
    }
    // forged responses
    if (!forge(r, f, fl, g)) return false;
    const char* what = forged_name(s.action);
    if (s.add) {
        out(d, f);
    } else {
        if (tx) note(idx, &r, r.id, "replaced by a forged frame: not sent");
        else capture_own(f, r, "replaced by a forged frame: not delivered");
        inner_.free(f);
        consumed_ = true;
    }
    if (tx) capture_own(g, r, what);
    else note(rx_n_, &r, r.id, what);
    out(d, g);
    return true;
}

void InjectPort::process(const RuleSet* s, InjectDir d, Frame& f, int64_t idx) {
    FrameLoc l;
    if (!s || !locate(f.data, f.len, l)) return out(d, f);
    const FrameKey k = key_of(f.data, l);
    const uint32_t rd = s->rounds[size_t(d)] ? round(d, k) : 0;
    // Followed for an rnr rule without at=: this direction's requests, the other's responses.
    ReqFlow* fl = nullptr;
    uint32_t acked = 0;
    if (s->track[size_t(d)]) track_request(d, f.data, l, k);
    if (s->track[1 - size_t(d)] && (fl = response_flow(d, f.data, l, k))) acked = acked_by(f.data, l, k);
    const uint32_t bound = hold_n_;
    bool taken = false;
    consumed_ = false;
    for (ActiveRule* r : s->by_dir[size_t(d)]) {
        if (!r->test(k, rd)) continue;
        not_applied_ = false;
        taken = apply(*r, d, f, l, k, idx, fl);
        if (taken) {
            if (!not_applied_) bump(fired_);
        } else {
            r->unfire();
            bump(no_buffer_);
        }
        break;
    }
    if (!taken) out(d, f);
    if (fl && !(taken && consumed_) && (!fl->acked_valid || psn_diff(acked, fl->acked) > 0)) {
        fl->acked = acked;  // the response went on: the requester gets it
        fl->acked_valid = true;
    }
    if (bound) release_held(d, bound, true, k.qp);
}

uint16_t InjectPort::tx_burst(Frame* frames, uint16_t n) {
    if (!set_.load(std::memory_order_acquire) && (hold_n_ | back_n_) == 0) [[likely]]
        return inner_.tx_burst(frames, n);
    const RuleSet* s = enter();
    flush_backlog();
    nnotes_ = 0;
    if (hold_n_) release_held(InjectDir::tx, 0, false, 0);
    uint16_t i = 0;
    for (; i < n && back_n_ + 4 <= kBacklog; ++i) process(s, InjectDir::tx, frames[i], i);
    flush_backlog();
    emit_notes();
    leave();
    return i;
}

uint16_t InjectPort::rx_burst(Frame* frames, uint16_t n) {
    if (!set_.load(std::memory_order_acquire) && (hold_n_ | back_n_) == 0) [[likely]]
        return inner_.rx_burst(frames, n);
    const RuleSet* s = enter();
    if (hold_n_) release_held(InjectDir::tx, 0, false, 0);  // held tx frames due: the HCA may send nothing
    flush_backlog();
    nnotes_ = 0;
    rx_out_ = frames;
    rx_n_ = 0;
    rx_cap_ = n;
    if (hold_n_) release_held(InjectDir::rx, 0, false, 0);
    // Each frame received may become two (duplicate, a forged one added): room for both.
    const uint32_t room = n - rx_n_;
    const uint32_t k = std::min<uint32_t>(room == 1 ? 1 : room / 2, kBacklog);
    const uint16_t got = k ? inner_.rx_burst(stage_.data(), uint16_t(k)) : 0;
    for (uint16_t j = 0; j < got; ++j) process(s, InjectDir::rx, stage_[j], -1);
    emit_notes();
    leave();
    return uint16_t(rx_n_);
}

}  // namespace hcaemu::port
