// The QP state machine's transition rules: which (cur -> next) moves Modify QP may make for each
// QP type, and which attribute-mask bits each move requires and allows. The facts are those of the
// IBTA Vol 1 ch. 11 Modify QP attribute table (11.2.4), as Linux keeps them in
// ib_modify_qp_is_ok() / qp_state_table (drivers/infiniband/core/verbs.c), for RC, UC and UD only.
// Masks use the qp_attr:: bits (libibverbs' IBV_QP_* values).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include "hca_model/verbs_types.hpp"

namespace hcaemu {

enum class ModifyError : uint8_t {
    ok,
    bad_transition,    // cur -> next is not a Modify QP transition for this QP type
    missing_attr,      // a required attribute is absent (bits: the missing ones)
    attr_not_allowed,  // an attribute outside required|optional|state (bits: those)
    unknown_attr,      // a bit outside qp_attr::all_known (bits: those)
    bad_cur_state,     // IBV_QP_CUR_STATE given while cur is not RTR, RTS, SQD or SQE
    count,
};
inline constexpr std::array<const char*, size_t(ModifyError::count)> kModifyErrorName = {
    "ok", "bad_transition", "missing_attr", "attr_not_allowed", "unknown_attr", "bad_cur_state"};
inline const char* name(ModifyError e) {
    return size_t(e) < kModifyErrorName.size() ? kModifyErrorName[size_t(e)] : "?";
}

struct TransitionCheck {
    ModifyError err = ModifyError::ok;
    uint32_t bits = 0;  // offending mask bits: the missing ones, or the ones not allowed
    bool ok() const { return err == ModifyError::ok; }
};

// The state a Modify QP moves to: attr.qp_state when the mask has qp_attr::state, else cur
// (an attribute-only modify, valid only where the table allows cur -> cur).
constexpr QpState next_state(QpState cur, uint32_t mask, QpState attr_state) {
    return (mask & qp_attr::state) ? attr_state : cur;
}

// The checks of ib_modify_qp_is_ok, each with its own error, in this order:
//   1. bits outside qp_attr::all_known              -> unknown_attr (bits = those)
//   2. cur -> next not valid for the type           -> bad_transition
//   3. qp_attr::cur_state while cur is not RTR, RTS, SQD or SQE -> bad_cur_state
//   4. a required bit absent                        -> missing_attr (bits = the missing ones);
//      qp_attr::state counts as required whenever next != cur, since the state cannot change
//      without it
//   5. bits beyond required|optional|state          -> attr_not_allowed (bits = those)
TransitionCheck check_qp_transition(QpType type, QpState cur, QpState next, uint32_t mask);

// The table's required and optional masks for cur -> next (qp_attr::state is in neither; it is
// always allowed). Both are 0 when the transition is invalid.
uint32_t required_attrs(QpType type, QpState cur, QpState next);
uint32_t optional_attrs(QpType type, QpState cur, QpState next);
bool transition_valid(QpType type, QpState cur, QpState next);

}  // namespace hcaemu
