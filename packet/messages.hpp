// The text hcaemu's teaching tools print (dissect's field notes, demo's story), in every language
// they speak: one table, one row per message, one column per language. Arguments are positional,
// {0} {1} ..., so that each language orders them as its grammar wants and all share one call.
// A new language: one more Lang value and code, and one more column in every row (the `messages`
// test finds a missing or empty cell and a cell whose placeholders differ from English's).
// Not a data-path facility: it builds strings.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace hcaemu::pkt {

enum class Lang : uint8_t { en, zh };
inline constexpr size_t kLangCount = 2;
inline constexpr std::array<const char*, kLangCount> kLangCode = {"en", "zh"};
// "en" or "zh" (as --lang takes them); nullopt for anything else.
std::optional<Lang> lang_from_code(std::string_view code);
// "en, zh": for usage messages.
std::string lang_codes();

// One row per message. Rows are grouped by the tool that prints them; a group may be appended
// anywhere before `count`.
enum class Msg : uint16_t {
    // dissect: the frame line, notes under each header, the summary
    dis_frame,
    dis_frame_opcode,
    dis_icrc_ok,
    dis_not_roce,
    dis_error,
    dis_udp_no_checksum,
    dis_note_ip6,
    dis_note_ip4,
    dis_note_udp,
    dis_note_dest_qp,
    dis_note_psn_response,
    dis_note_psn_request,
    dis_note_layout,
    dis_request,
    dis_response,
    dis_none,
    dis_cnp_reserved,
    dis_note_ack_req,
    dis_note_deth,
    dis_note_reth,
    dis_note_atomic_eth,
    dis_note_aeth,
    dis_note_atomic_ack_eth,
    dis_note_immdt,
    dis_note_ieth,
    dis_note_cnp,
    dis_note_read_payload,
    dis_note_payload,
    dis_note_icrc,
    dis_aeth_no_credit,
    dis_aeth_credits,
    dis_aeth_rnr,
    dis_payload,
    dis_ok,
    dis_bad,
    dis_summary,
    dis_summary_error,
    dis_summary_gmp,
    dis_snap_cut,
    // dissect: MADs to QP1 (packet/mad_dissect.cpp): notes, words, and the payload note of a GMP
    mad_note_gmp_payload,
    mad_note_gsi,
    mad_note_mad_hdr,
    mad_note_class_port_info,  // one note per CM attribute, in kCmAttrs' order (packet/mad.hpp)
    mad_note_req,
    mad_note_mra,
    mad_note_rej,
    mad_note_rep,
    mad_note_rtu,
    mad_note_dreq,
    mad_note_drep,
    mad_note_sidr_req,
    mad_note_sidr_rep,
    mad_note_lap_apr,
    mad_note_unknown_attr,
    mad_note_not_cm,
    mad_note_cma,
    mad_note_reserved,
    mad_gsi_drops,
    mad_error,
    mad_reserved_set,
    mad_cma_error,
    mad_attr_unknown,
    mad_status_no_invalid_fields,  // the MAD Status codes of bits 4:2, IBTA 13.4.7 (mad_status_code_name)
    mad_status_bad_version,
    mad_status_method_unsupported,
    mad_status_method_attr_unsupported,
    mad_status_reserved,
    mad_status_invalid_value,
    mad_status_busy,
    mad_status_redirect,
    mad_rej_reason_undefined,
    mad_sid_ip,
    mad_bytes_zero,
    mad_bytes,
    mad_bytes_zero_from,
    // demo: the run on the embedded link
    demo_link,
    demo_side,
    demo_mtu,
    demo_step,
    demo_what_send,
    demo_what_write,
    demo_what_read,
    demo_what_cmp_swap,
    demo_what_fetch_add,
    demo_post_from,
    demo_post_into,
    demo_post_remote,
    demo_post_cmp_swap,
    demo_post_add,
    demo_post_recv,
    demo_refused,
    demo_frame_unparsed,
    demo_frame_reth,
    demo_frame_cmp_swap,
    demo_frame_add,
    demo_frame_orig,
    demo_frame_payload,
    demo_rx_dropped,
    demo_wqe_fetched,
    demo_wqe_fetched_read,
    demo_recv_wqe_taken,
    demo_dma_read,
    demo_dma_write,
    demo_dma_write_atomic,
    demo_atomic_done,
    demo_ack_received,
    demo_cqe,
    demo_success,
    demo_check_send,
    demo_check_write,
    demo_check_read,
    demo_check_cmp_old,
    demo_check_cmp_now,
    demo_check_add_old,
    demo_check_add_now,
    demo_bytes_ok,
    demo_byte_differs,
    demo_word_ok,
    demo_word_differs,
    demo_mismatch,
    demo_cqe_missing,
    demo_cqe_wrong,
    demo_timeout,
    demo_bad_frames,
    demo_summary,
    demo_read_hint,
    demo_ladder,
    // demo --samples: each frame's caption, the closing line
    sample_send_first_2500,
    sample_send_middle,
    sample_send_last_ackreq,
    sample_ack_102,
    sample_send_first,
    sample_send_last_imm,
    sample_send_only_64,
    sample_send_only_imm_se,
    sample_send_only_inv,
    sample_send_last_inv,
    sample_rnr_nak,
    sample_seq_nak,
    sample_write_first_reth,
    sample_write_middle,
    sample_write_last,
    sample_write_only_0,
    sample_write_first,
    sample_write_last_imm,
    sample_write_only_imm,
    sample_access_nak,
    sample_read_req_2100,
    sample_read_resp_first,
    sample_read_resp_middle,
    sample_read_resp_last,
    sample_read_req_64,
    sample_read_resp_only,
    sample_cmp_swap,
    sample_atomic_ack_orig,
    sample_fetch_add,
    sample_atomic_ack,
    sample_flush,
    sample_atomic_write,
    sample_ack_coalesced,
    sample_uc,
    sample_ud_send,
    sample_ud_send_imm,
    sample_cnp,
    sample_ipv6,
    sample_vlan,
    sample_wrote,
    sample_read_back,
    // conform: the conformance monitor's rules (dpdk_port/conform.hpp) and its report
    conf_icrc,
    conf_malformed,
    conf_tver,
    conf_bth_reserved,
    conf_pkey,
    conf_pkey_invalid,
    conf_padcnt,
    conf_mtu,
    conf_mtu_over,
    conf_mtu_max,
    conf_mtu_invalid,
    conf_udp_sport,
    conf_opcode_seq,
    conf_psn_window,
    conf_resp_unsolicited,
    conf_resp_no_request,
    conf_resp_opcode,
    conf_read_opcode,
    conf_read_past,
    conf_read_length,
    conf_atomic_resp,
    conf_atomic_align,
    conf_aeth_syndrome,
    conf_aeth_msn,
    conf_retx_nak,
    conf_retx_rnr,
    conf_retx_timeout,
    conf_rnr_timer,
    conf_retry_count,
    conf_cnp_pacing,
    conf_line,
    conf_sev_error,
    conf_sev_warning,
    conf_summary,
    conf_rule_count,
    conf_table_full,
    count
};
inline constexpr size_t kMsgCount = size_t(Msg::count);

struct MsgRow {
    Msg id;
    std::array<const char*, kLangCount> text;  // indexed by Lang
};
extern const std::array<MsgRow, kMsgCount> kMessages;

// The message's text in `lang`, placeholders unreplaced.
const char* text(Msg m, Lang lang);
// `text(m, lang)` with {N} replaced by args[N]; a placeholder without an argument stays as it is.
std::string msg(Msg m, Lang lang, std::initializer_list<std::string_view> args = {});
// `fmt` with {N} replaced by args[N] (the engine of msg()).
std::string format_positional(std::string_view fmt, std::initializer_list<std::string_view> args);

}  // namespace hcaemu::pkt
