#include "tools/libhcaemu/proto_attr.hpp"

namespace hcaemu::ctl {

namespace {

// DeviceAttr's numeric fields and DeviceAttrW's, listed once for both directions: f(attr, wire).
template <class A, class W, class F>
void device_fields(A& a, W& w, F f) {
    f(a.node_guid, w.node_guid);
    f(a.sys_image_guid, w.sys_image_guid);
    f(a.max_mr_size, w.max_mr_size);
    f(a.page_size_cap, w.page_size_cap);
    f(a.vendor_id, w.vendor_id);
    f(a.vendor_part_id, w.vendor_part_id);
    f(a.hw_ver, w.hw_ver);
    f(a.max_qp, w.max_qp);
    f(a.max_qp_wr, w.max_qp_wr);
    f(a.device_cap_flags, w.device_cap_flags);
    f(a.max_sge, w.max_sge);
    f(a.max_sge_rd, w.max_sge_rd);
    f(a.max_cq, w.max_cq);
    f(a.max_cqe, w.max_cqe);
    f(a.max_mr, w.max_mr);
    f(a.max_pd, w.max_pd);
    f(a.max_qp_rd_atom, w.max_qp_rd_atom);
    f(a.max_res_rd_atom, w.max_res_rd_atom);
    f(a.max_qp_init_rd_atom, w.max_qp_init_rd_atom);
    f(a.max_ah, w.max_ah);
    f(a.max_srq, w.max_srq);
    f(a.max_srq_wr, w.max_srq_wr);
    f(a.max_srq_sge, w.max_srq_sge);
    f(a.max_inline_data, w.max_inline_data);
    f(a.max_pkeys, w.max_pkeys);
    f(a.local_ca_ack_delay, w.local_ca_ack_delay);
    f(a.phys_port_cnt, w.phys_port_cnt);
}

}  // namespace

DeviceAttrW encode(const DeviceAttr& a) {
    DeviceAttrW w{};
    put_str(w.fw_ver, a.fw_ver);
    device_fields(a, w, [](const auto& from, auto& to) { to = from; });
    w.atomic_cap = uint8_t(a.atomic_cap);
    return w;
}

DeviceAttr decode(const DeviceAttrW& w) {
    DeviceAttr a;
    a.fw_ver = get_str(w.fw_ver);
    device_fields(a, w, [](auto& to, const auto& from) { to = from; });
    a.atomic_cap = AtomicCap(w.atomic_cap);
    return a;
}

CreateCqReq encode(const CqInit& in) {
    CreateCqReq r;
    r.cqe = in.cqe;
    r.events = in.events ? 1 : 0;
    r.cq_context = in.cq_context;
    return r;
}

bool decode(const CreateCqReq& r, CqInit& out) {
    if (r.events > 1) return false;
    out.cqe = r.cqe;
    out.events = r.events;
    out.cq_context = r.cq_context;
    return true;
}

CreateQpReq encode(const QpInit& in) {
    CreateQpReq r;
    r.pd = in.pd;
    r.send_cq = in.send_cq;
    r.recv_cq = in.recv_cq;
    r.srq = in.srq;
    r.cap = in.cap;
    r.qp_type = uint8_t(in.qp_type);
    r.sq_sig_all = in.sq_sig_all ? 1 : 0;
    return r;
}

bool decode(const CreateQpReq& r, QpInit& out) {
    if (r.qp_type != uint8_t(QpType::rc) && r.qp_type != uint8_t(QpType::uc) && r.qp_type != uint8_t(QpType::ud))
        return false;
    if (r.sq_sig_all > 1) return false;
    out.pd = r.pd;
    out.send_cq = r.send_cq;
    out.recv_cq = r.recv_cq;
    out.srq = r.srq;
    out.cap = r.cap;
    out.qp_type = QpType(r.qp_type);
    out.sq_sig_all = r.sq_sig_all;
    return true;
}

}  // namespace hcaemu::ctl
