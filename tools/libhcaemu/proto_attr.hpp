// The attribute structs in the control protocol's bodies (proto.hpp), encoded and decoded by the
// one copy of code that both ends use: libhcaemu's client and hcaemud. Bodies carry hca_model's
// trivially copyable structs as they are; what needs code is:
// - bool fields (QpAttr, AhAttr): a byte other than 0 or 1 must never become a bool (reading one
//   is undefined), so a body holding them is checked byte by byte before it is copied;
// - fields with a range (qp_type, the 0/1 flags) and DeviceAttr's std::string;
// - fixed-size text fields (names, fw_ver): NUL-padded, cut to fit.
// Nothing here changes the wire: kVersion stays.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "tools/libhcaemu/proto.hpp"

namespace hcaemu::ctl {

// ---- bool fields, by body ----
template <class T>
struct BoolBytes {
    static constexpr std::array<size_t, 0> at{};
};
template <size_t N>
constexpr std::array<size_t, N> shifted(const std::array<size_t, N>& a, size_t by) {
    std::array<size_t, N> r{};
    for (size_t i = 0; i < N; ++i) r[i] = a[i] + by;
    return r;
}
template <>
struct BoolBytes<AhAttr> {
    static constexpr std::array<size_t, 1> at{offsetof(AhAttr, is_global)};
};
template <>
struct BoolBytes<QpAttr> {
    static constexpr std::array<size_t, 4> at{offsetof(QpAttr, ah_attr) + offsetof(AhAttr, is_global),
                                              offsetof(QpAttr, alt_ah_attr) + offsetof(AhAttr, is_global),
                                              offsetof(QpAttr, en_sqd_async_notify), offsetof(QpAttr, sq_draining)};
};
template <>
struct BoolBytes<ModifyQpReq> {
    static constexpr auto at = shifted(BoolBytes<QpAttr>::at, offsetof(ModifyQpReq, attr));
};
template <>
struct BoolBytes<QueryQpRep> {
    static constexpr auto at = shifted(BoolBytes<QpAttr>::at, offsetof(QueryQpRep, attr));
};
template <>
struct BoolBytes<CreateAhReq> {
    static constexpr auto at = shifted(BoolBytes<AhAttr>::at, offsetof(CreateAhReq, attr));
};

// A body from its bytes (sizeof(T) of them). False, `out` untouched, if a bool byte is not 0 or 1.
template <class T>
bool decode(const uint8_t* bytes, T& out) {
    static_assert(std::is_trivially_copyable_v<T>);
    for (size_t o : BoolBytes<T>::at)
        if (bytes[o] > 1) return false;
    std::memcpy(&out, bytes, sizeof out);
    return true;
}

// ---- fixed-size text ----
template <size_t N>
void put_str(char (&dst)[N], const std::string& s) {
    std::memset(dst, 0, N);
    std::memcpy(dst, s.data(), s.size() < N - 1 ? s.size() : N - 1);
}
template <size_t N>
std::string get_str(const char (&s)[N]) {
    return std::string(s, strnlen(s, N));
}

// ---- query_device ----
DeviceAttrW encode(const DeviceAttr& a);
DeviceAttr decode(const DeviceAttrW& w);

// ---- create_cq ----
struct CqInit {
    int32_t cqe = 0;
    bool events = false;  // created with a completion channel
    uint64_t cq_context = 0;
};
CreateCqReq encode(const CqInit& in);
bool decode(const CreateCqReq& r, CqInit& out);  // false: events not 0/1

// ---- create_qp: the init attributes, the PD, CQs and SRQ as handles (srq 0: none) ----
struct QpInit {
    uint32_t pd = 0, send_cq = 0, recv_cq = 0, srq = 0;
    QpCap cap;
    QpType qp_type = QpType::rc;
    bool sq_sig_all = false;
};
CreateQpReq encode(const QpInit& in);
bool decode(const CreateQpReq& r, QpInit& out);  // false: qp_type not RC/UC/UD, sq_sig_all not 0/1

}  // namespace hcaemu::ctl
