// The QP transition rules against an independent transcription of the IBTA ch. 11 Modify QP
// attribute table (as Linux's ib_modify_qp_is_ok keeps it), written as rows of attribute names.
#include <catch2/catch.hpp>

#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "hca_model/qp_state.hpp"

using namespace hcaemu;

namespace {

// One valid Modify QP move. types: the QP types it holds for ("RC UC UD"); attribute names are
// libibverbs' IBV_QP_* names without the prefix. Moves not listed (nor "to RESET / to ERR", added
// below) are invalid.
struct Row {
    const char* types;
    const char* from;
    const char* to;
    const char* required;
    const char* optional;
};

const std::vector<Row> kSpec = {
    {"RC UC", "RESET", "INIT", "PKEY_INDEX PORT ACCESS_FLAGS", ""},
    {"UD", "RESET", "INIT", "QKEY PORT PKEY_INDEX", ""},

    {"RC UC", "INIT", "INIT", "", "ACCESS_FLAGS PKEY_INDEX PORT"},
    {"UD", "INIT", "INIT", "", "QKEY PKEY_INDEX PORT"},

    {"RC", "INIT", "RTR", "AV PATH_MTU DEST_QPN RQ_PSN MAX_DEST_RD_ATOMIC MIN_RNR_TIMER",
     "PKEY_INDEX ACCESS_FLAGS ALT_PATH"},
    {"UC", "INIT", "RTR", "AV PATH_MTU DEST_QPN RQ_PSN", "PKEY_INDEX ACCESS_FLAGS ALT_PATH"},
    {"UD", "INIT", "RTR", "", "PKEY_INDEX QKEY"},

    {"RC", "RTR", "RTS", "SQ_PSN TIMEOUT RETRY_CNT RNR_RETRY MAX_QP_RD_ATOMIC",
     "CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE MIN_RNR_TIMER"},
    {"UC", "RTR", "RTS", "SQ_PSN", "CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE"},
    {"UD", "RTR", "RTS", "SQ_PSN", "CUR_STATE QKEY"},

    {"RC", "RTS", "RTS", "", "CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE MIN_RNR_TIMER"},
    {"UC", "RTS", "RTS", "", "CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE"},
    {"UD", "RTS", "RTS", "", "CUR_STATE QKEY"},

    {"RC UC UD", "RTS", "SQD", "", "EN_SQD_ASYNC_NOTIFY"},

    {"RC", "SQD", "RTS", "", "CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE MIN_RNR_TIMER"},
    {"UC", "SQD", "RTS", "", "CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE"},
    {"UD", "SQD", "RTS", "", "CUR_STATE QKEY"},

    {"RC", "SQD", "SQD", "",
     "PORT AV PKEY_INDEX ACCESS_FLAGS ALT_PATH PATH_MIG_STATE TIMEOUT RETRY_CNT RNR_RETRY "
     "MIN_RNR_TIMER MAX_QP_RD_ATOMIC MAX_DEST_RD_ATOMIC"},
    {"UC", "SQD", "SQD", "", "AV PKEY_INDEX ACCESS_FLAGS ALT_PATH PATH_MIG_STATE"},
    {"UD", "SQD", "SQD", "", "PKEY_INDEX QKEY"},

    // Only UC and UD QPs enter SQE (an RC send error goes to ERR), so only they leave it to RTS.
    {"UC", "SQE", "RTS", "", "CUR_STATE ACCESS_FLAGS"},
    {"UD", "SQE", "RTS", "", "CUR_STATE QKEY"},
};

const std::vector<QpType> kTypes = {QpType::rc, QpType::uc, QpType::ud};
const std::vector<QpState> kStates = {QpState::reset, QpState::init, QpState::rtr, QpState::rts,
                                      QpState::sqd,   QpState::sqe,  QpState::err};

std::vector<std::string> words(const char* s) {
    std::istringstream in(s);
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

// "AV" -> the bit whose libibverbs name is IBV_QP_AV, looked up through qp_attr_name().
uint32_t attr_bit(const std::string& n) {
    for (unsigned b = 0; b < 32; ++b) {
        const char* full = qp_attr_name(b);
        if (full && std::string(full) == "IBV_QP_" + n) return 1u << b;
    }
    FAIL("unknown attribute name " << n);
    return 0;
}

uint32_t attr_mask(const char* names) {
    uint32_t m = 0;
    for (const auto& n : words(names)) m |= attr_bit(n);
    return m;
}

QpState state_named(const std::string& n) {
    for (QpState s : kStates)
        if (n == name(s)) return s;
    FAIL("unknown state " << n);
    return QpState::err;
}

QpType type_named(const std::string& n) {
    for (QpType t : kTypes)
        if (n == name(t)) return t;
    FAIL("unknown type " << n);
    return QpType::rc;
}

struct Expected {
    uint32_t req = 0, opt = 0;
};
using Key = std::tuple<QpType, QpState, QpState>;

std::map<Key, Expected> expected_table() {
    std::map<Key, Expected> m;
    for (const Row& r : kSpec)
        for (const auto& t : words(r.types)) {
            Key k{type_named(t), state_named(r.from), state_named(r.to)};
            REQUIRE(m.count(k) == 0);
            m[k] = {attr_mask(r.required), attr_mask(r.optional)};
        }
    // IBTA: from any state, Modify QP may go to RESET or to ERR, with no attributes.
    for (QpType t : kTypes)
        for (QpState s : kStates) {
            Key to_reset{t, s, QpState::reset}, to_err{t, s, QpState::err};
            REQUIRE(m.count(to_reset) == 0);
            REQUIRE(m.count(to_err) == 0);
            m[to_reset] = {};
            m[to_err] = {};
        }
    return m;
}

constexpr uint32_t kStateBit = 1u << 0;    // IBV_QP_STATE
constexpr uint32_t kCurStateBit = 1u << 1;  // IBV_QP_CUR_STATE

bool cur_state_attr_ok_from(QpState s) {
    return s == QpState::rtr || s == QpState::rts || s == QpState::sqd || s == QpState::sqe;
}

std::string describe(QpType t, QpState cur, QpState next) {
    return std::string(name(t)) + " " + name(cur) + "->" + name(next);
}

}  // namespace

TEST_CASE("error names are stable") {
    CHECK(std::string(name(ModifyError::ok)) == "ok");
    CHECK(std::string(name(ModifyError::bad_transition)) == "bad_transition");
    CHECK(std::string(name(ModifyError::missing_attr)) == "missing_attr");
    CHECK(std::string(name(ModifyError::attr_not_allowed)) == "attr_not_allowed");
    CHECK(std::string(name(ModifyError::unknown_attr)) == "unknown_attr");
    CHECK(std::string(name(ModifyError::bad_cur_state)) == "bad_cur_state");
    CHECK(std::string(name(ModifyError::count)) == "?");
}

TEST_CASE("the mask bits used by the test are libibverbs' values") {
    CHECK(attr_bit("STATE") == kStateBit);
    CHECK(attr_bit("CUR_STATE") == kCurStateBit);
    CHECK(attr_bit("DEST_QPN") == (1u << 20));
    CHECK(attr_bit("RATE_LIMIT") == (1u << 25));
}

TEST_CASE("validity and masks of every (type, cur, next) match the transcription") {
    const auto spec = expected_table();
    size_t valid = 0;
    for (QpType t : kTypes)
        for (QpState cur : kStates)
            for (QpState next : kStates) {
                INFO(describe(t, cur, next));
                auto it = spec.find(Key{t, cur, next});
                const bool expect_valid = it != spec.end();
                CHECK(transition_valid(t, cur, next) == expect_valid);
                if (!expect_valid) {
                    CHECK(required_attrs(t, cur, next) == 0);
                    CHECK(optional_attrs(t, cur, next) == 0);
                    for (uint32_t mask : {kStateBit, 0u, qp_attr::all_known}) {
                        auto r = check_qp_transition(t, cur, next, mask);
                        CHECK(r.err == ModifyError::bad_transition);
                    }
                    continue;
                }
                ++valid;
                CHECK(required_attrs(t, cur, next) == it->second.req);
                CHECK(optional_attrs(t, cur, next) == it->second.opt);
            }
    // 3 types x (7 to RESET + 7 to ERR), and the listed rows expanded per type
    CHECK(valid == 3 * 14 + 26);
}

TEST_CASE("required attributes: exactly them passes, each one dropped is reported") {
    const auto spec = expected_table();
    for (const auto& [key, exp] : spec) {
        const auto [t, cur, next] = key;
        INFO(describe(t, cur, next));
        const uint32_t base = kStateBit | exp.req;
        auto r = check_qp_transition(t, cur, next, base);
        CHECK(r.err == ModifyError::ok);
        CHECK(r.bits == 0);
        for (unsigned b = 0; b < 32; ++b) {
            const uint32_t bit = 1u << b;
            if (!(exp.req & bit)) continue;
            INFO("dropped " << qp_attr_name(b));
            r = check_qp_transition(t, cur, next, base & ~bit);
            CHECK(r.err == ModifyError::missing_attr);
            CHECK(r.bits == bit);
        }
        // Without IBV_QP_STATE the modify is attribute-only: fine when cur == next, and a state
        // change without it is reported as the missing state bit.
        r = check_qp_transition(t, cur, next, exp.req);
        if (cur == next) {
            CHECK(r.err == ModifyError::ok);
        } else {
            CHECK(r.err == ModifyError::missing_attr);
            CHECK(r.bits == kStateBit);
        }
    }
}

TEST_CASE("optional attributes pass one by one and all together; others are refused") {
    const auto spec = expected_table();
    for (const auto& [key, exp] : spec) {
        const auto [t, cur, next] = key;
        INFO(describe(t, cur, next));
        const uint32_t base = kStateBit | exp.req;
        CHECK(check_qp_transition(t, cur, next, base | exp.opt).err == ModifyError::ok);
        for (unsigned b = 1; b < 32; ++b) {
            const uint32_t bit = 1u << b;
            if (!qp_attr_name(b) || (exp.req & bit)) continue;  // unknown bits: their own case
            INFO("added " << qp_attr_name(b));
            auto r = check_qp_transition(t, cur, next, base | bit);
            if (exp.opt & bit) {
                CHECK(r.err == ModifyError::ok);
                CHECK(r.bits == 0);
            } else if (bit == kCurStateBit && !cur_state_attr_ok_from(cur)) {
                CHECK(r.err == ModifyError::bad_cur_state);
            } else {
                CHECK(r.err == ModifyError::attr_not_allowed);
                CHECK(r.bits == bit);
            }
        }
    }
}

TEST_CASE("unknown mask bits are refused before anything else") {
    const auto spec = expected_table();
    for (unsigned b = 0; b < 32; ++b) {
        if (qp_attr_name(b)) continue;
        const uint32_t bit = 1u << b;
        INFO("bit " << b);
        CHECK((bit & qp_attr::all_known) == 0);
        for (const auto& [key, exp] : spec) {
            const auto [t, cur, next] = key;
            auto r = check_qp_transition(t, cur, next, kStateBit | exp.req | bit);
            CHECK(r.err == ModifyError::unknown_attr);
            CHECK(r.bits == bit);
        }
        // even on an invalid transition, and with the required bits missing
        auto r = check_qp_transition(QpType::rc, QpState::reset, QpState::rts, kStateBit | bit);
        CHECK(r.err == ModifyError::unknown_attr);
        CHECK(r.bits == bit);
    }
    auto r = check_qp_transition(QpType::ud, QpState::rts, QpState::rts, (1u << 30) | (1u << 22));
    CHECK(r.err == ModifyError::unknown_attr);
    CHECK(r.bits == ((1u << 30) | (1u << 22)));
}

TEST_CASE("IBV_QP_CUR_STATE is accepted only from RTR, RTS, SQD and SQE") {
    for (QpType t : kTypes)
        for (QpState cur : kStates)
            for (QpState next : kStates) {
                if (!transition_valid(t, cur, next)) continue;
                INFO(describe(t, cur, next));
                const uint32_t mask = kStateBit | required_attrs(t, cur, next) | kCurStateBit;
                auto r = check_qp_transition(t, cur, next, mask);
                if (!cur_state_attr_ok_from(cur))
                    CHECK(r.err == ModifyError::bad_cur_state);
                else if (optional_attrs(t, cur, next) & kCurStateBit)
                    CHECK(r.err == ModifyError::ok);
                else
                    CHECK(r.err == ModifyError::attr_not_allowed);
            }
    // bad_cur_state comes before missing attributes, bad_transition before bad_cur_state
    const uint32_t both = kStateBit | kCurStateBit;
    CHECK(check_qp_transition(QpType::rc, QpState::reset, QpState::init, both).err ==
          ModifyError::bad_cur_state);
    CHECK(check_qp_transition(QpType::rc, QpState::init, QpState::rts, both).err ==
          ModifyError::bad_transition);
}

TEST_CASE("famous cases") {
    using namespace qp_attr;
    CHECK(required_attrs(QpType::rc, QpState::init, QpState::rtr) ==
          (av | path_mtu | dest_qpn | rq_psn | max_dest_rd_atomic | min_rnr_timer));
    CHECK(required_attrs(QpType::rc, QpState::rtr, QpState::rts) ==
          (timeout | retry_cnt | rnr_retry | sq_psn | max_qp_rd_atomic));
    CHECK(required_attrs(QpType::ud, QpState::reset, QpState::init) == (pkey_index | port | qkey));
    CHECK(required_attrs(QpType::uc, QpState::init, QpState::rtr) ==
          (av | path_mtu | dest_qpn | rq_psn));
    for (QpType t : kTypes) {
        CHECK_FALSE(transition_valid(t, QpState::reset, QpState::rts));
        CHECK(check_qp_transition(t, QpState::reset, QpState::rts, state).err ==
              ModifyError::bad_transition);
        CHECK_FALSE(transition_valid(t, QpState::rts, QpState::sqe));  // only the HCA does that
        CHECK(transition_valid(t, QpState::reset, QpState::err));
        CHECK(check_qp_transition(t, QpState::rts, QpState::err, state).ok());
    }
    CHECK_FALSE(transition_valid(QpType::rc, QpState::sqe, QpState::rts));
    CHECK(transition_valid(QpType::ud, QpState::sqe, QpState::rts));

    // The usual RC bring-up, as ibv_modify_qp callers write it.
    CHECK(check_qp_transition(QpType::rc, QpState::reset, QpState::init,
                              state | pkey_index | port | access_flags)
              .ok());
    CHECK(check_qp_transition(QpType::rc, QpState::init, QpState::rtr,
                              state | av | path_mtu | dest_qpn | rq_psn | max_dest_rd_atomic |
                                  min_rnr_timer)
              .ok());
    CHECK(check_qp_transition(QpType::rc, QpState::rtr, QpState::rts,
                              state | timeout | retry_cnt | rnr_retry | sq_psn | max_qp_rd_atomic)
              .ok());
    // A UD QP has no remote end to be given; AV at INIT -> RTR is refused.
    auto r = check_qp_transition(QpType::ud, QpState::init, QpState::rtr, state | av);
    CHECK(r.err == ModifyError::attr_not_allowed);
    CHECK(r.bits == av);
    // RC INIT -> RTR without the AV: the one missing bit.
    r = check_qp_transition(QpType::rc, QpState::init, QpState::rtr,
                            state | path_mtu | dest_qpn | rq_psn | max_dest_rd_atomic |
                                min_rnr_timer);
    CHECK(r.err == ModifyError::missing_attr);
    CHECK(r.bits == av);
    // Several missing and several extra bits are all reported.
    r = check_qp_transition(QpType::uc, QpState::rtr, QpState::rts, state);
    CHECK(r.err == ModifyError::missing_attr);
    CHECK(r.bits == sq_psn);
    r = check_qp_transition(QpType::uc, QpState::rtr, QpState::rts,
                            state | sq_psn | qkey | cap | rate_limit);
    CHECK(r.err == ModifyError::attr_not_allowed);
    CHECK(r.bits == (qkey | cap | rate_limit));
    // next_state(): an attribute-only modify stays in cur.
    CHECK(next_state(QpState::rts, qkey, QpState::err) == QpState::rts);
    CHECK(next_state(QpState::rts, state | qkey, QpState::err) == QpState::err);
}
