// One CM MAD of each supported attribute, with every field non-zero where the spec allows, shared by
// test_mad (against hand-computed bytes), mad_pcap (the tshark cross-check) and the fuzz seeds.
#pragma once
#include <vector>

#include "packet/mad.hpp"

namespace hcaemu::test {

inline pkt::CmaHdr sample_cma() {
    return pkt::cma_hdr_ipv4(0xC6120001, 0xD431, 0xC6120002);  // 198.18.0.1:54321 -> 198.18.0.2
}

inline std::vector<pkt::CmMad> mad_samples() {
    using namespace hcaemu::pkt;
    std::vector<CmMad> v;
    MadHdr h;
    h.tid = 0x0000000012345678ULL;

    ClassPortInfo cpi;
    cpi.capability_mask = 0x0100;
    cpi.capability_mask2 = 0x1234567;
    cpi.resp_time_value = 18;
    cpi.redirect_gid = ipv4_mapped_gid(0xC6120001);
    cpi.redirect_tc = 0x28;
    cpi.redirect_sl = 5;
    cpi.redirect_fl = 0xABCDE;
    cpi.redirect_lid = 0x0102;
    cpi.redirect_pkey = 0xFFFF;
    cpi.redirect_qp = 0x000001;
    cpi.redirect_qkey = kGsiQkey;
    cpi.trap_gid = ipv4_mapped_gid(0xC6120002);
    cpi.trap_tc = 0x10;
    cpi.trap_sl = 3;
    cpi.trap_fl = 0x12345;
    cpi.trap_lid = 0x0304;
    cpi.trap_pkey = 0x7FFF;
    cpi.trap_hl = 64;
    cpi.trap_qp = 0x000002;
    cpi.trap_qkey = 0x0BADBEEF;
    MadHdr hc = h;
    hc.method = mad_method::get_resp;
    v.push_back({hc, cpi});

    CmReq req;
    req.local_comm_id = 0x11223344;
    req.vendor_id = 0x0002C9;
    req.service_id = ip_service_id(RdmaPs::tcp, 18515);
    req.local_ca_guid = 0x0002C90300AABBCCULL;
    req.local_qkey = 0x01234567;
    req.local_qpn = 0x000123;
    req.responder_resources = 4;
    req.initiator_depth = 5;
    req.remote_cm_response_timeout = 20;
    req.transport_service_type = uint8_t(CmTransport::rc);
    req.end_to_end_flow_control = 1;
    req.starting_psn = 0xABCDEF;
    req.local_cm_response_timeout = 19;
    req.retry_count = 7;
    req.pkey = 0xFFFF;
    req.path_mtu = 3;
    req.rnr_retry_count = 6;
    req.max_cm_retries = 15;
    req.srq = 1;
    req.primary.local_lid = 0xFFFF;
    req.primary.remote_lid = 0xFFFF;
    req.primary.local_gid = ipv4_mapped_gid(0xC6120001);
    req.primary.remote_gid = ipv4_mapped_gid(0xC6120002);
    req.primary.flow_label = 0x12345;
    req.primary.packet_rate = 3;
    req.primary.traffic_class = 0x28;
    req.primary.hop_limit = 64;
    req.primary.sl = 3;
    req.primary.subnet_local = 1;
    req.primary.local_ack_timeout = 18;
    req.sap_supported = 1;
    build_cma_hdr(sample_cma(), std::span<uint8_t, kCmaHdrLen>(req.private_data.data(), kCmaHdrLen));
    req.private_data[kCmaHdrLen] = 0xAA;  // the consumer's private data after the CMA header
    req.private_data[91] = 0x55;
    v.push_back({h, req});

    CmMra mra;
    mra.local_comm_id = 0x55667788;
    mra.remote_comm_id = 0x11223344;
    mra.message_mraed = 1;
    mra.service_timeout = 21;
    mra.private_data[0] = 0x01;
    mra.private_data[221] = 0xFE;
    v.push_back({h, mra});

    CmRej rej;
    rej.local_comm_id = 0x55667788;
    rej.remote_comm_id = 0x11223344;
    rej.message_rejected = 0;
    rej.rejected_info_length = 2;
    rej.reason = rej_reason::invalid_service_id;
    rej.ari[0] = 0xA1;
    rej.ari[1] = 0xA2;
    rej.private_data[0] = 0x77;
    rej.private_data[147] = 0x88;
    v.push_back({h, rej});

    CmRep rep;
    rep.local_comm_id = 0x55667788;
    rep.remote_comm_id = 0x11223344;
    rep.local_qkey = 0x89ABCDEF;
    rep.local_qpn = 0x000456;
    rep.local_eecn = 0x000789;
    rep.starting_psn = 0x123456;
    rep.vendor_id = 0x0002C9;
    rep.responder_resources = 16;
    rep.initiator_depth = 8;
    rep.target_ack_delay = 15;
    rep.failover_accepted = 2;
    rep.end_to_end_flow_control = 1;
    rep.rnr_retry_count = 7;
    rep.srq = 1;
    rep.local_ca_guid = 0x0002C90300DDEEFFULL;
    rep.private_data[0] = 0x10;
    rep.private_data[195] = 0x20;
    v.push_back({h, rep});

    CmRtu rtu;
    rtu.local_comm_id = 0x11223344;
    rtu.remote_comm_id = 0x55667788;
    rtu.private_data[223] = 0x33;
    v.push_back({h, rtu});

    CmDreq dreq;
    dreq.local_comm_id = 0x11223344;
    dreq.remote_comm_id = 0x55667788;
    dreq.remote_qpn = 0x000456;
    dreq.private_data[0] = 0x44;
    v.push_back({h, dreq});

    CmDrep drep;
    drep.local_comm_id = 0x55667788;
    drep.remote_comm_id = 0x11223344;
    v.push_back({h, drep});

    CmSidrReq sreq;
    sreq.request_id = 0x0A0B0C0D;
    sreq.pkey = 0xFFFF;
    sreq.service_id = ip_service_id(RdmaPs::udp, 7174);
    build_cma_hdr(sample_cma(), std::span<uint8_t, kCmaHdrLen>(sreq.private_data.data(), kCmaHdrLen));
    v.push_back({h, sreq});

    CmSidrRep srep;
    srep.request_id = 0x0A0B0C0D;
    srep.status = uint8_t(CmSidrStatus::success);
    srep.additional_info_length = 0;
    srep.vendor_id = 0x0002C9;
    srep.qpn = 0x000321;
    srep.service_id = ip_service_id(RdmaPs::udp, 7174);
    srep.qkey = 0x01234567;
    srep.private_data[135] = 0x99;
    v.push_back({h, srep});
    return v;
}

}  // namespace hcaemu::test
