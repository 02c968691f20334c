// The message table of the teaching tools (packet/messages.hpp): every message in every language,
// with the same placeholders; the positional formatter.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "packet/messages.hpp"

using namespace hcaemu::pkt;

namespace {

// The placeholder numbers of a text, sorted: "{1} a {0} {1}" -> 0 1 1.
std::vector<int> placeholders(const std::string& t) {
    std::vector<int> v;
    for (size_t i = 0; i < t.size(); ++i) {
        if (t[i] != '{') continue;
        size_t j = i + 1;
        int n = 0;
        while (j < t.size() && t[j] >= '0' && t[j] <= '9') n = n * 10 + (t[j++] - '0');
        if (j > i + 1 && j < t.size() && t[j] == '}') v.push_back(n);
    }
    std::sort(v.begin(), v.end());
    return v;
}

bool has_cjk_or_fullwidth(const std::string& t) {
    // UTF-8 lead bytes 0xE3..0xEF start U+3000..U+FFFF: CJK ideographs and full-width punctuation.
    return std::any_of(t.begin(), t.end(), [](char c) { return uint8_t(c) >= 0xE3 && uint8_t(c) <= 0xEF; });
}

}  // namespace

TEST_CASE("every message has a non-empty text in every language, with English's placeholders") {
    REQUIRE(kMessages.size() == kMsgCount);
    for (size_t i = 0; i < kMsgCount; ++i) {
        const MsgRow& r = kMessages[i];
        INFO("message #" << i);
        CHECK(size_t(r.id) == i);
        for (size_t l = 0; l < kLangCount; ++l) {
            INFO("language " << kLangCode[l]);
            REQUIRE(r.text[l] != nullptr);
            CHECK(std::string(r.text[l]).size() > 0);
        }
        const std::string en = r.text[size_t(Lang::en)];
        INFO("en: " << en);
        const std::vector<int> ph = placeholders(en);
        // English uses {0}..{k-1}, each at least once: no argument is passed for nothing.
        for (int k = 0; k < (ph.empty() ? 0 : ph.back() + 1); ++k)
            CHECK(std::find(ph.begin(), ph.end(), k) != ph.end());
        for (size_t l = 0; l < kLangCount; ++l) {
            INFO(kLangCode[l] << ": " << r.text[l]);
            CHECK(placeholders(r.text[l]) == ph);
        }
        const std::string zh = r.text[size_t(Lang::zh)];
        INFO("zh: " << zh);
        CHECK(zh != en);
        CHECK(has_cjk_or_fullwidth(zh));
    }
}

TEST_CASE("msg() puts the arguments where each language's text names them") {
    CHECK(msg(Msg::demo_frame_reth, Lang::en, {"0x20001000", "0x100", "3000"}) ==
          "  RETH VA 0x20001000 R_Key 0x100 length 3000");
    CHECK(msg(Msg::demo_frame_reth, Lang::zh, {"0x20001000", "0x100", "3000"}) ==
          "  RETH VA 0x20001000 R_Key 0x100 长度 3000");
    // Chinese orders the arguments differently from English: {3} before {2}.
    CHECK(msg(Msg::demo_recv_wqe_taken, Lang::en, {"B", "101", "0x000002", "0x000100"}) ==
          "B: receive WQE wr_id=101 taken from the receive queue (QP 0x000002) for the message at PSN 0x000100");
    CHECK(msg(Msg::demo_recv_wqe_taken, Lang::zh, {"B", "101", "0x000002", "0x000100"}) ==
          "B：为 PSN 0x000100 的消息从接收队列（QP 0x000002）取出接收 WQE wr_id=101");
    CHECK(text(Msg::dis_note_dest_qp, Lang::en) ==
          std::string("DestQP is the receiving QP's number: the HCA finds the QP in its QP table by it"));
}

TEST_CASE("format_positional: repeated, missing and non-placeholder braces") {
    CHECK(format_positional("{0}-{1}-{0}", {"a", "b"}) == "a-b-a");
    CHECK(format_positional("{1}{0}", {"x", "y"}) == "yx");
    CHECK(format_positional("{2} stays", {"a"}) == "{2} stays");  // no such argument: left as written
    CHECK(format_positional("{} {x} {0", {"a"}) == "{} {x} {0");
    CHECK(format_positional("[VA, VA+DMALen)", {}) == "[VA, VA+DMALen)");
    CHECK(format_positional("", {"a"}).empty());
    CHECK(format_positional("{10}", {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "ten"}) == "ten");
}

TEST_CASE("language codes") {
    CHECK(lang_from_code("en") == Lang::en);
    CHECK(lang_from_code("zh") == Lang::zh);
    CHECK_FALSE(lang_from_code("fr"));
    CHECK_FALSE(lang_from_code(""));
    CHECK_FALSE(lang_from_code("ZH"));
    CHECK_FALSE(lang_from_code("zh_CN"));
    CHECK(lang_codes() == "en, zh");
    CHECK(text(Msg::count, Lang::en) == std::string());
}
