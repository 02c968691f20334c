// PSN arithmetic and the transport's time constants (IBTA 9.7); the timer wheel.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>

#include "transport/psn.hpp"

using namespace hcaemu::transport;

namespace {

// Independent model of the responder's check: how far psn lies behind epsn, counted backwards.
PsnClass reference_class(uint32_t psn, uint32_t epsn) {
    const uint64_t behind = (uint64_t(epsn) + (1u << 24) - psn) % (1u << 24);
    if (behind == 0) return PsnClass::expected;
    return behind <= (1u << 23) ? PsnClass::duplicate : PsnClass::out_of_sequence;
}

// "ms.hh" (the IBTA table's notation, as Linux names its IB_RNR_TIMER_* codes) to ns.
uint64_t ms_text_to_ns(const std::string& s) {
    const size_t dot = s.find('.');
    return std::stoull(s.substr(0, dot)) * 1000000 + std::stoull(s.substr(dot + 1)) * 10000;
}

}  // namespace

static_assert(psn_add(0xFFFFFF, 1) == 0);
static_assert(psn_diff(0, 0xFFFFFF) == 1);
static_assert(classify_psn(5, 5) == PsnClass::expected);
static_assert(rnr_timer_ns(0) == 655360000);
static_assert(ack_timeout_ns(14) == 67108864);

TEST_CASE("PSN add, sub and next wrap at 2^24", "[psn]") {
    CHECK(psn_add(0xFFFFFF, 1) == 0);
    CHECK(psn_add(0xFFFFFE, 3) == 1);
    CHECK(psn_add(0, 0xFFFFFF) == 0xFFFFFF);
    CHECK(psn_add(5, 1u << 24) == 5);
    CHECK(psn_add(0x7FFFFF, 0x800000) == 0xFFFFFF);
    CHECK(psn_sub(0, 1) == 0xFFFFFF);
    CHECK(psn_sub(1, 3) == 0xFFFFFE);
    CHECK(psn_sub(0x123456, 0x123456) == 0);
    CHECK(psn_next(0xFFFFFF) == 0);
    CHECK(psn_next(0xFFFFFE) == 0xFFFFFF);
    CHECK(psn_next(0) == 1);
}

TEST_CASE("PSN distance is signed across the wrap, in [-2^23, 2^23 - 1]", "[psn]") {
    CHECK(psn_diff(0, 0xFFFFFF) == 1);
    CHECK(psn_diff(0xFFFFFF, 0) == -1);
    CHECK(psn_diff(2, 0xFFFFFE) == 4);
    CHECK(psn_diff(0xFFFFFE, 2) == -4);
    CHECK(psn_diff(0x7FFFFF, 0) == 0x7FFFFF);    // the largest forward distance
    CHECK(psn_diff(0x800000, 0) == -0x800000);   // exactly half the circle counts as behind
    CHECK(psn_diff(0, 0x800000) == -0x800000);
    CHECK(psn_diff(0x123456, 0x123456) == 0);
    CHECK(psn_before(0xFFFFFF, 0));
    CHECK(psn_after(0, 0xFFFFFF));
    CHECK_FALSE(psn_before(5, 5));
    CHECK_FALSE(psn_after(5, 5));
    CHECK(psn_after(0x7FFFFF, 0));
    CHECK(psn_before(0x800000, 0));

    std::mt19937 rng(1);
    for (int i = 0; i < 100000; ++i) {
        const uint32_t a = rng() & kPsnMask, n = rng() & kPsnMask;
        const int32_t d = psn_diff(psn_add(a, n), a);
        REQUIRE(d >= -(1 << 23));
        REQUIRE(d < (1 << 23));
        REQUIRE(psn_add(a, uint32_t(d)) == psn_add(a, n));
        REQUIRE(psn_sub(psn_add(a, n), n) == a);
    }
}

TEST_CASE("PSN window", "[psn]") {
    CHECK(psn_in_window(0xFFFFFE, 0xFFFFFE, 4));
    CHECK(psn_in_window(0xFFFFFF, 0xFFFFFE, 4));
    CHECK(psn_in_window(0, 0xFFFFFE, 4));
    CHECK(psn_in_window(1, 0xFFFFFE, 4));
    CHECK_FALSE(psn_in_window(2, 0xFFFFFE, 4));
    CHECK_FALSE(psn_in_window(0xFFFFFD, 0xFFFFFE, 4));
    CHECK_FALSE(psn_in_window(7, 7, 0));
    CHECK(psn_in_window(6, 7, 1u << 24));
}

TEST_CASE("responder PSN classification at the 2^23 boundary", "[psn]") {
    for (uint32_t epsn : {0u, 0x10u, 0x7FFFFFu, 0x800000u, 0xFFFFFFu, 0x123456u}) {
        INFO("ePSN " << epsn);
        CHECK(classify_psn(epsn, epsn) == PsnClass::expected);
        CHECK(classify_psn(psn_sub(epsn, 1), epsn) == PsnClass::duplicate);
        // The oldest duplicate, then the first PSN past it.
        CHECK(classify_psn(psn_sub(epsn, 1u << 23), epsn) == PsnClass::duplicate);
        CHECK(classify_psn(psn_sub(epsn, (1u << 23) + 1), epsn) == PsnClass::out_of_sequence);
        CHECK(classify_psn(psn_add(epsn, (1u << 23) - 1), epsn) == PsnClass::out_of_sequence);
        CHECK(classify_psn(psn_add(epsn, 1), epsn) == PsnClass::out_of_sequence);
    }
    // Across the wrap, spelled out.
    CHECK(classify_psn(0xFFFFFF, 0) == PsnClass::duplicate);
    CHECK(classify_psn(0x800000, 0) == PsnClass::duplicate);
    CHECK(classify_psn(0x7FFFFF, 0) == PsnClass::out_of_sequence);
    CHECK(classify_psn(0, 0xFFFFFF) == PsnClass::out_of_sequence);
    CHECK(classify_psn(0x7FFFFF, 0xFFFFFF) == PsnClass::duplicate);
    CHECK(classify_psn(0x7FFFFE, 0xFFFFFF) == PsnClass::out_of_sequence);

    std::mt19937 rng(2);
    for (int i = 0; i < 200000; ++i) {
        const uint32_t e = rng() & kPsnMask;
        const uint32_t p = i % 4 == 0 ? psn_add(e, (1u << 23) - 2 + rng() % 4) : rng() & kPsnMask;
        REQUIRE(classify_psn(p, e) == reference_class(p, e));
    }
}

TEST_CASE("RNR timer table: every code", "[psn][rnr]") {
    // IBTA 9.7.5.2.8 (RNR NAK timer field encoding), in ms, code 0 first.
    const char* const kMs[32] = {
        "655.36", "0.01",  "0.02",  "0.03",  "0.04",  "0.06",   "0.08",   "0.12",
        "0.16",   "0.24",  "0.32",  "0.48",  "0.64",  "0.96",   "1.28",   "1.92",
        "2.56",   "3.84",  "5.12",  "7.68",  "10.24", "15.36",  "20.48",  "30.72",
        "40.96",  "61.44", "81.92", "122.88", "163.84", "245.76", "327.68", "491.52",
    };
    for (unsigned code = 0; code < 32; ++code) {
        INFO("code " << code);
        CHECK(rnr_timer_ns(uint8_t(code)) == ms_text_to_ns(kMs[code]));
    }
    CHECK(rnr_timer_ns(1) == 10000);
    CHECK(rnr_timer_ns(25) == 61440000);  // Linux rxe's table has 61410 us here, a typo
    CHECK(rnr_timer_ns(31) == 491520000);
    // Codes 1..31 grow; code 0 is the longest of all.
    for (unsigned code = 2; code < 32; ++code)
        CHECK(rnr_timer_ns(uint8_t(code)) > rnr_timer_ns(uint8_t(code - 1)));
    CHECK(rnr_timer_ns(0) > rnr_timer_ns(31));
    CHECK(rnr_timer_ns(32) == rnr_timer_ns(0));  // a 5-bit field
}

TEST_CASE("local ACK timeout: 4.096 us * 2^timeout, 0 is infinite", "[psn][ack]") {
    CHECK(ack_timeout_ns(0) == UINT64_MAX);
    CHECK(ack_timeout_ns(1) == 8192);
    CHECK(ack_timeout_ns(14) == 67108864);  // 4.096 us * 16384 = 67.108864 ms
    CHECK(ack_timeout_ns(18) == 1073741824);
    CHECK(ack_timeout_ns(31) == 8796093022208ull);  // ~2.44 hours
    for (unsigned t = 1; t < 32; ++t) CHECK(ack_timeout_ns(uint8_t(t)) == 4096ull << t);
}
