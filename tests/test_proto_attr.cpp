// The control protocol's attribute encode/decode (tools/libhcaemu/proto_attr.hpp), the one copy
// hcaemud and libhcaemu's client share: DeviceAttr both ways field by field, the bool bytes of
// QpAttr/AhAttr bodies refused before they become bools, and the ranges of the init attributes.
#include <catch2/catch.hpp>

#include <cstring>

#include "tools/libhcaemu/proto_attr.hpp"

using namespace hcaemu;

namespace {

template <class T>
std::array<uint8_t, sizeof(T)> bytes_of(const T& t) {
    std::array<uint8_t, sizeof(T)> b{};
    std::memcpy(b.data(), &t, sizeof t);
    return b;
}

}  // namespace

TEST_CASE("DeviceAttr: encode puts every field at its DeviceAttrW place, decode brings each back") {
    DeviceAttr a;
    a.fw_ver = "9.8.7-hcaemu-test";
    a.node_guid = 0x0102030405060708ull;
    a.sys_image_guid = 0x1112131415161718ull;
    a.max_mr_size = 0x2122232425262728ull;
    a.page_size_cap = 0x3132333435363738ull;
    uint32_t v = 100;
    for (uint32_t* f : {&a.vendor_id, &a.vendor_part_id, &a.hw_ver, &a.max_qp, &a.max_qp_wr, &a.device_cap_flags,
                        &a.max_sge, &a.max_sge_rd, &a.max_cq, &a.max_cqe, &a.max_mr, &a.max_pd, &a.max_qp_rd_atom,
                        &a.max_res_rd_atom, &a.max_qp_init_rd_atom, &a.max_ah, &a.max_srq, &a.max_srq_wr,
                        &a.max_srq_sge, &a.max_inline_data})
        *f = v++;
    a.max_pkeys = 0x4142;
    a.atomic_cap = AtomicCap::glob;
    a.local_ca_ack_delay = 0x51;
    a.phys_port_cnt = 0x61;

    const ctl::DeviceAttrW w = ctl::encode(a);
    CHECK(std::string(w.fw_ver) == "9.8.7-hcaemu-test");
    CHECK(w.node_guid == 0x0102030405060708ull);
    CHECK(w.sys_image_guid == 0x1112131415161718ull);
    CHECK(w.max_mr_size == 0x2122232425262728ull);
    CHECK(w.page_size_cap == 0x3132333435363738ull);
    CHECK(w.vendor_id == 100);
    CHECK(w.vendor_part_id == 101);
    CHECK(w.hw_ver == 102);
    CHECK(w.max_qp == 103);
    CHECK(w.max_qp_wr == 104);
    CHECK(w.device_cap_flags == 105);
    CHECK(w.max_sge == 106);
    CHECK(w.max_sge_rd == 107);
    CHECK(w.max_cq == 108);
    CHECK(w.max_cqe == 109);
    CHECK(w.max_mr == 110);
    CHECK(w.max_pd == 111);
    CHECK(w.max_qp_rd_atom == 112);
    CHECK(w.max_res_rd_atom == 113);
    CHECK(w.max_qp_init_rd_atom == 114);
    CHECK(w.max_ah == 115);
    CHECK(w.max_srq == 116);
    CHECK(w.max_srq_wr == 117);
    CHECK(w.max_srq_sge == 118);
    CHECK(w.max_inline_data == 119);
    CHECK(w.max_pkeys == 0x4142);
    CHECK(w.atomic_cap == uint8_t(AtomicCap::glob));
    CHECK(w.local_ca_ack_delay == 0x51);
    CHECK(w.phys_port_cnt == 0x61);
    CHECK(w.rsv[0] == 0);
    CHECK(w.rsv[1] == 0);
    CHECK(w.rsv[2] == 0);

    const DeviceAttr b = ctl::decode(w);
    CHECK(b.fw_ver == a.fw_ver);
    CHECK(bytes_of(ctl::encode(b)) == bytes_of(w));

    // fw_ver longer than its field: cut, NUL-terminated; decode reads up to the NUL.
    a.fw_ver = std::string(40, 'x');
    const ctl::DeviceAttrW w2 = ctl::encode(a);
    CHECK(w2.fw_ver[31] == 0);
    CHECK(ctl::decode(w2).fw_ver == std::string(31, 'x'));
}

TEST_CASE("bodies with bools: a byte other than 0 or 1 is refused before it becomes a bool") {
    ctl::ModifyQpReq m;
    m.handle = 0x101;
    m.mask = qp_attr::state | qp_attr::av;
    m.attr.qp_state = QpState::rtr;
    m.attr.dest_qp_num = 0x123456;
    m.attr.ah_attr.is_global = true;
    m.attr.sq_draining = false;
    auto raw = bytes_of(m);

    ctl::ModifyQpReq out;
    REQUIRE(ctl::decode(raw.data(), out));
    CHECK(out.handle == 0x101);
    CHECK(out.attr.dest_qp_num == 0x123456);
    CHECK(out.attr.ah_attr.is_global);
    CHECK(bytes_of(out) == raw);

    // Each of QpAttr's four bools in turn (the AV's and the alternate AV's is_global,
    // en_sqd_async_notify, sq_draining).
    const size_t offs[] = {offsetof(ctl::ModifyQpReq, attr) + offsetof(QpAttr, ah_attr) + offsetof(AhAttr, is_global),
                           offsetof(ctl::ModifyQpReq, attr) + offsetof(QpAttr, alt_ah_attr) + offsetof(AhAttr, is_global),
                           offsetof(ctl::ModifyQpReq, attr) + offsetof(QpAttr, en_sqd_async_notify),
                           offsetof(ctl::ModifyQpReq, attr) + offsetof(QpAttr, sq_draining)};
    for (size_t o : offs) {
        auto bad = raw;
        bad[o] = 2;
        ctl::ModifyQpReq untouched;
        untouched.handle = 7;
        CHECK_FALSE(ctl::decode(bad.data(), untouched));
        CHECK(untouched.handle == 7);
        bad[o] = 0xFF;
        CHECK_FALSE(ctl::decode(bad.data(), untouched));
    }

    // The reply to query_qp (the client's side) and create_ah's request.
    ctl::QueryQpRep q{};
    q.attr.qp_state = QpState::rts;
    auto qraw = bytes_of(q);
    ctl::QueryQpRep qout;
    CHECK(ctl::decode(qraw.data(), qout));
    qraw[offsetof(ctl::QueryQpRep, attr) + offsetof(QpAttr, sq_draining)] = 3;
    CHECK_FALSE(ctl::decode(qraw.data(), qout));

    ctl::CreateAhReq ah;
    ah.pd = 0x201;
    auto araw = bytes_of(ah);
    ctl::CreateAhReq aout;
    CHECK(ctl::decode(araw.data(), aout));
    CHECK(aout.pd == 0x201);
    araw[offsetof(ctl::CreateAhReq, attr) + offsetof(AhAttr, is_global)] = 2;
    CHECK_FALSE(ctl::decode(araw.data(), aout));

    // A body without bools is copied as it is.
    ctl::HandleReq hr{0xABCD, 0};
    auto hraw = bytes_of(hr);
    ctl::HandleReq hout;
    CHECK(ctl::decode(hraw.data(), hout));
    CHECK(hout.handle == 0xABCD);
}

TEST_CASE("create_qp and create_cq init attributes: encode, decode, and the ranges decode refuses") {
    ctl::QpInit qi;
    qi.pd = 0x100;
    qi.send_cq = 0x201;
    qi.recv_cq = 0x301;
    qi.srq = 0x401;
    qi.cap.max_send_wr = 16;
    qi.cap.max_recv_wr = 32;
    qi.cap.max_send_sge = 2;
    qi.cap.max_recv_sge = 3;
    qi.cap.max_inline_data = 64;
    qi.qp_type = QpType::ud;
    qi.sq_sig_all = true;
    const ctl::CreateQpReq r = ctl::encode(qi);
    CHECK(r.pd == 0x100);
    CHECK(r.send_cq == 0x201);
    CHECK(r.recv_cq == 0x301);
    CHECK(r.srq == 0x401);
    CHECK(r.cap.max_recv_wr == 32);
    CHECK(r.cap.max_inline_data == 64);
    CHECK(r.qp_type == uint8_t(QpType::ud));
    CHECK(r.sq_sig_all == 1);
    ctl::QpInit back;
    REQUIRE(ctl::decode(r, back));
    CHECK(back.pd == 0x100);
    CHECK(back.srq == 0x401);
    CHECK(back.cap.max_recv_sge == 3);
    CHECK(back.qp_type == QpType::ud);
    CHECK(back.sq_sig_all);
    CHECK(bytes_of(ctl::encode(back)) == bytes_of(r));

    for (uint8_t t : {uint8_t(QpType::rc), uint8_t(QpType::uc), uint8_t(QpType::ud)}) {
        ctl::CreateQpReq ok = r;
        ok.qp_type = t;
        CHECK(ctl::decode(ok, back));
    }
    ctl::CreateQpReq bad = r;
    bad.qp_type = 0xFF;
    CHECK_FALSE(ctl::decode(bad, back));
    bad = r;
    bad.sq_sig_all = 2;
    CHECK_FALSE(ctl::decode(bad, back));

    const ctl::CreateCqReq c = ctl::encode(ctl::CqInit{100, true, 0x1122334455667788ull});
    CHECK(c.cqe == 100);
    CHECK(c.events == 1);
    CHECK(c.cq_context == 0x1122334455667788ull);
    ctl::CqInit ci;
    REQUIRE(ctl::decode(c, ci));
    CHECK(ci.cqe == 100);
    CHECK(ci.events);
    CHECK(ci.cq_context == 0x1122334455667788ull);
    ctl::CreateCqReq cbad = c;
    cbad.events = 2;
    CHECK_FALSE(ctl::decode(cbad, ci));
}
