#include "hca_model/qp_state.hpp"

namespace hcaemu {

namespace {

using namespace qp_attr;

constexpr size_t kTypeCount = 3;  // RC, UC, UD, in that order in the per-type arrays

// Index into the per-type arrays; kTypeCount for a value that is not RC, UC or UD.
constexpr size_t type_index(QpType t) {
    switch (t) {
    case QpType::rc: return 0;
    case QpType::uc: return 1;
    case QpType::ud: return 2;
    }
    return kTypeCount;
}

constexpr uint8_t kRc = 1u << 0, kUc = 1u << 1, kUd = 1u << 2, kAllTypes = kRc | kUc | kUd;

// One cell of the [cur][next] table: the QP types for which the move is valid, and per type
// (RC, UC, UD) the attributes it requires and those it also accepts.
struct Rule {
    uint8_t types = 0;
    std::array<uint32_t, kTypeCount> req{};
    std::array<uint32_t, kTypeCount> opt{};
};

using Table = std::array<std::array<Rule, kQpStateCount>, kQpStateCount>;

constexpr size_t idx(QpState s) { return size_t(s); }

constexpr Table make_table() {
    Table t{};
    // IBTA ch. 11 Modify QP: any state -> RESET and any state -> ERR, with no attributes.
    // Linux's table omits RESET -> ERR; IBTA allows it (we follow IBTA, see below).
    for (size_t s = 0; s < kQpStateCount; ++s) {
        t[s][idx(QpState::reset)] = {kAllTypes, {}, {}};
        t[s][idx(QpState::err)] = {kAllTypes, {}, {}};
    }

    // RESET -> INIT: port and P_Key index for all; access flags for the connected types, the
    // Q_Key for UD (IBTA ch. 11 modify QP; as Linux ib_modify_qp_is_ok).
    t[idx(QpState::reset)][idx(QpState::init)] = {
        kAllTypes,
        {pkey_index | port | access_flags,  // RC
         pkey_index | port | access_flags,  // UC
         pkey_index | port | qkey},         // UD
        {}};

    // INIT -> INIT: the RESET -> INIT attributes may be changed again, all optional.
    t[idx(QpState::init)][idx(QpState::init)] = {
        kAllTypes,
        {},
        {pkey_index | port | access_flags, pkey_index | port | access_flags,
         pkey_index | port | qkey}};

    // INIT -> RTR: the connected types learn the remote end (AV, which RoCE needs as IB's LID path
    // does, MTU, QPN, expected PSN); RC also its responder resources and RNR NAK timer. UD needs
    // nothing.
    t[idx(QpState::init)][idx(QpState::rtr)] = {
        kAllTypes,
        {av | path_mtu | dest_qpn | rq_psn | max_dest_rd_atomic | min_rnr_timer,
         av | path_mtu | dest_qpn | rq_psn, 0},
        {alt_path | access_flags | pkey_index, alt_path | access_flags | pkey_index,
         pkey_index | qkey}};

    // RTR -> RTS: the send PSN for all; RC also its ACK timeout, retry counts and initiator depth.
    t[idx(QpState::rtr)][idx(QpState::rts)] = {
        kAllTypes,
        {timeout | retry_cnt | rnr_retry | sq_psn | max_qp_rd_atomic, sq_psn, sq_psn},
        {cur_state | alt_path | access_flags | min_rnr_timer | path_mig_state,
         cur_state | alt_path | access_flags | path_mig_state, cur_state | qkey}};

    // RTS -> RTS (attribute-only modify) and SQD -> RTS (resume) accept the same attributes.
    constexpr std::array<uint32_t, kTypeCount> kRtsOpt = {
        cur_state | alt_path | access_flags | min_rnr_timer | path_mig_state,
        cur_state | alt_path | access_flags | path_mig_state, cur_state | qkey};
    t[idx(QpState::rts)][idx(QpState::rts)] = {kAllTypes, {}, kRtsOpt};
    t[idx(QpState::sqd)][idx(QpState::rts)] = {kAllTypes, {}, kRtsOpt};

    // RTS -> SQD: drain the send queue, optionally asking for the SQ-drained event.
    t[idx(QpState::rts)][idx(QpState::sqd)] = {
        kAllTypes, {}, {en_sqd_async_notify, en_sqd_async_notify, en_sqd_async_notify}};

    // SQD -> SQD: while drained, most path and send parameters may change (all optional).
    t[idx(QpState::sqd)][idx(QpState::sqd)] = {
        kAllTypes,
        {},
        {port | av | timeout | retry_cnt | rnr_retry | max_qp_rd_atomic | max_dest_rd_atomic |
             alt_path | access_flags | pkey_index | min_rnr_timer | path_mig_state,
         av | alt_path | access_flags | pkey_index | path_mig_state, pkey_index | qkey}};

    // SQE -> RTS: recovery from a send queue error. Only UC and UD enter SQE (the HCA moves them
    // RTS -> SQE on a send error; an RC QP goes to ERR instead), so the move exists for them only.
    // Linux's table marks it valid for every type, with no attributes for RC.
    t[idx(QpState::sqe)][idx(QpState::rts)] = {
        kUc | kUd, {0, 0, 0}, {0, cur_state | access_flags, cur_state | qkey}};

    return t;
}

constexpr Table kTable = make_table();

// IBV_QP_CUR_STATE may only be given from these states (as Linux ib_modify_qp_is_ok).
constexpr bool cur_state_attr_allowed_from(QpState s) {
    return s == QpState::rtr || s == QpState::rts || s == QpState::sqd || s == QpState::sqe;
}

// The rule for a valid (type, cur, next), else nullptr; ti receives the type index.
const Rule* find_rule(QpType type, QpState cur, QpState next, size_t& ti) {
    ti = type_index(type);
    if (ti >= kTypeCount || idx(cur) >= kQpStateCount || idx(next) >= kQpStateCount) return nullptr;
    const Rule& r = kTable[idx(cur)][idx(next)];
    return (r.types >> ti) & 1u ? &r : nullptr;
}

}  // namespace

bool transition_valid(QpType type, QpState cur, QpState next) {
    size_t ti = 0;
    return find_rule(type, cur, next, ti) != nullptr;
}

uint32_t required_attrs(QpType type, QpState cur, QpState next) {
    size_t ti = 0;
    const Rule* r = find_rule(type, cur, next, ti);
    return r ? r->req[ti] : 0;
}

uint32_t optional_attrs(QpType type, QpState cur, QpState next) {
    size_t ti = 0;
    const Rule* r = find_rule(type, cur, next, ti);
    return r ? r->opt[ti] : 0;
}

TransitionCheck check_qp_transition(QpType type, QpState cur, QpState next, uint32_t mask) {
    if (uint32_t unknown = mask & ~all_known) return {ModifyError::unknown_attr, unknown};
    size_t ti = 0;
    const Rule* r = find_rule(type, cur, next, ti);
    if (!r) return {ModifyError::bad_transition, 0};
    if ((mask & cur_state) && !cur_state_attr_allowed_from(cur))
        return {ModifyError::bad_cur_state, cur_state};
    const uint32_t req = r->req[ti] | (next != cur ? state : 0u);
    if (uint32_t missing = req & ~mask) return {ModifyError::missing_attr, missing};
    if (uint32_t extra = mask & ~(req | r->opt[ti] | state))
        return {ModifyError::attr_not_allowed, extra};
    return {};
}

}  // namespace hcaemu
