#include "packet/messages.hpp"

namespace hcaemu::pkt {

// Chinese: the terms of the Chinese RDMA literature (队列对 QP, 完成队列 CQ, 内存区域 MR, 工作请求 WR,
// 工作队列元素 WQE, 完成队列元素 CQE, 请求方/响应方); acronyms and the spec's field names stay as
// they are. Full-width punctuation inside Chinese sentences.
constexpr std::array<MsgRow, kMsgCount> kMessages = {{
    // ---- dissect
    {Msg::dis_frame, {"Frame {0}: {1} bytes at {2} s",
                      "帧 {0}：{1} 字节，时间 {2} s"}},
    {Msg::dis_frame_opcode, {", {0}", "，{0}"}},
    {Msg::dis_icrc_ok, {", ICRC ok", "，ICRC 正确"}},
    {Msg::dis_not_roce, {", not RoCE v2 ({0})", "，不是 RoCE v2（{0}）"}},
    {Msg::dis_error, {", ERROR {0}", "，错误 {0}"}},
    {Msg::dis_udp_no_checksum, {" (none, as RoCE v2 senders do)", "（无校验和，RoCE v2 发送方通常如此）"}},
    {Msg::dis_note_ip6, {"the addresses are the RoCE v2 GIDs of the two ports (GID table entries)",
                         "这两个地址就是两端端口的 RoCE v2 GID（GID 表中的表项）"}},
    {Msg::dis_note_ip4, {"the addresses stand for IPv4-mapped GIDs ::ffff:a.b.c.d of the two ports; ECN 3 (CE) makes the receiver send a CNP",
                         "这两个地址代表两端端口的 IPv4 映射 GID ::ffff:a.b.c.d；ECN 为 3（CE）时，接收方会回送 CNP"}},
    {Msg::dis_note_udp, {"dport 4791 is RoCE v2; sport is fixed per connection (a hash of both QPNs, 0xC000-0xFFFF) so that ECMP keeps a QP's packets on one path, in order",
                         "目的端口 4791 表示 RoCE v2；源端口在一个连接内固定不变（由两端 QPN 哈希得出，取值 0xC000-0xFFFF），使 ECMP 把同一 QP 的报文保持在同一条路径上、按序到达"}},
    {Msg::dis_note_dest_qp, {"DestQP is the receiving QP's number: the HCA finds the QP in its QP table by it",
                             "DestQP 是接收端 QP 的编号：HCA 用它在自己的 QP 表中找到这个 QP"}},
    {Msg::dis_note_psn_response, {"a response carries the PSN of the request packet it answers; the requester's completer matches it against its outstanding WQEs",
                                  "响应报文携带它所应答的请求报文的 PSN；请求方的完成器（completer）据此匹配尚未完成的 WQE"}},
    {Msg::dis_note_psn_request, {"PSN orders this QP's packets: the responder accepts only its expected PSN, re-ACKs duplicates and NAKs gaps",
                                 "PSN 给该 QP 的报文排序：响应方只接受它期望的 PSN，对重复报文再次回 ACK，对序号空缺回 NAK"}},
    {Msg::dis_note_layout, {"{0}, {1}, position {2}; headers after BTH: {3}",
                            "{0}，{1}，位置 {2}；BTH 之后的扩展头：{3}"}},
    {Msg::dis_request, {"request", "请求"}},
    {Msg::dis_response, {"response", "响应"}},
    {Msg::dis_none, {"none", "无"}},
    {Msg::dis_cnp_reserved, {"16 reserved bytes", "16 字节保留字段"}},
    {Msg::dis_note_ack_req, {"AckReq: the requester asks for an acknowledgement of this PSN",
                             "AckReq：请求方要求响应方确认这个 PSN"}},
    {Msg::dis_note_deth, {"UD: Q_Key must match the receiving QP's Q_Key; SrcQP is reported in the receiver's completion",
                          "UD：Q_Key 必须与接收 QP 的 Q_Key 相同；SrcQP 会出现在接收方的完成队列元素（CQE）中"}},
    {Msg::dis_note_reth, {"R_Key names the remote MR: the responder checks it against that MR's PD, bounds [VA, VA+DMALen) and access flags",
                          "R_Key 指明远端内存区域（MR）：响应方据此检查该 MR 的保护域（PD）、地址范围 [VA, VA+DMALen) 和访问权限"}},
    {Msg::dis_note_atomic_eth, {"an 8-byte aligned word in the remote MR named by R_Key (needs remote atomic access); executed once, replayed from the responder's resources if duplicated",
                                "R_Key 所指远端 MR 中一个 8 字节对齐的字（需要远端原子访问权限）；只执行一次，请求重复时由响应方从保存的资源中重放结果"}},
    {Msg::dis_note_aeth, {"MSN counts the messages the responder has completed; the requester retires its send WQEs up to this PSN",
                          "MSN 是响应方已完成的消息数；请求方据此让截至该 PSN 的发送 WQE 全部完成"}},
    {Msg::dis_note_atomic_ack_eth, {"the value the remote word held before the atomic: it lands in the requester's local SGE",
                                    "远端的字在原子操作之前的值：它被写入请求方的本地 SGE"}},
    {Msg::dis_note_immdt, {"immediate data: delivered in the receiver's completion (wc.imm_data), consuming a receive WQE",
                           "立即数：随接收方的完成（wc.imm_data）交付，消耗一个接收 WQE"}},
    {Msg::dis_note_ieth, {"the receiver invalidates the MR with this R_Key and reports it in the completion",
                          "接收方使带有这个 R_Key 的 MR 失效，并在完成中报告它"}},
    {Msg::dis_note_cnp, {"CNP: the receiver saw ECN CE marks and asks the sender's QP to slow down (DCQCN)",
                         "CNP：接收方看到了 ECN CE 标记，要求发送方的 QP 降速（DCQCN）"}},
    {Msg::dis_note_read_payload, {"READ response data: the requester's DMA engine scatters it into the WQE's local SGEs",
                                  "READ 响应数据：请求方的 DMA 引擎把它分散写入 WQE 的本地 SGE"}},
    {Msg::dis_note_payload, {"the responder's DMA engine writes it into the MR (WRITE) or the receive WQE's SGEs (SEND)",
                             "响应方的 DMA 引擎把它写入 MR（WRITE）或接收 WQE 的 SGE（SEND）"}},
    {Msg::dis_note_icrc, {"CRC32 over IP, UDP, BTH, headers and payload with the fields routers may change masked: a frame damaged on the way is dropped and counted",
                          "覆盖 IP、UDP、BTH、扩展头和负载的 CRC32，路由器可能改动的字段被屏蔽：途中损坏的帧被丢弃并计数"}},
    {Msg::dis_aeth_no_credit, {"ACK (no credit count)", "ACK（不带信用计数）"}},
    {Msg::dis_aeth_credits, {"ACK (credits: code {0} = {1} receive WQEs)", "ACK（信用：代码 {0} = {1} 个接收 WQE）"}},
    {Msg::dis_aeth_rnr, {"RNR NAK (timer code {0})", "RNR NAK（定时器代码 {0}）"}},
    {Msg::dis_payload, {"  Payload   {0} bytes", "  Payload   {0} 字节"}},
    {Msg::dis_ok, {"ok", "正确"}},
    {Msg::dis_bad, {"BAD", "错误"}},
    {Msg::dis_summary, {"Summary: {0} frames, {1} RoCE v2 frames parsed with a good ICRC",
                        "汇总：共 {0} 帧，其中 {1} 个 RoCE v2 帧解析成功且 ICRC 正确"}},
    {Msg::dis_summary_error, {"error", "错误"}},
    {Msg::dis_summary_gmp, {"  MADs to QP1 (GMPs) {0}, malformed or with reserved bits set {1}",
                            "  发往 QP1 的 MAD（GMP）{0} 个，其中格式错误或保留位被置位的 {1} 个"}},
    {Msg::dis_snap_cut, {"(frame {0} was cut by the capture's snap length: {1} of {2} bytes)",
                         "（帧 {0} 被抓包的快照长度截断：{2} 字节中只有 {1} 字节）"}},

    // ---- dissect: MADs (the CM's terms: 通信管理 CM, 管理数据报 MAD, 服务 ID, 私有数据, 主动方/被动方)
    {Msg::mad_note_gmp_payload, {"a MAD to QP1: a receive WQE of the GSI takes it, and the agent of its management class (CM for a connection's MADs) reads it from there; no MR is written",
                                 "发往 QP1 的 MAD：由 GSI 的一个接收 WQE 接收，再由其管理类的代理（连接的 MAD 由 CM 代理）从中读取；不写入任何 MR"}},
    {Msg::mad_note_gsi, {"a GMP: a UD SEND Only to QP1 (the GSI) with Q_Key 0x80010000, carrying one 256-byte MAD; the GSI answers to the sender's SrcQP",
                         "GMP（通用管理包）：发往 QP1（GSI，通用服务接口）的 UD SEND Only，Q_Key 为 0x80010000，携带一个 256 字节的管理数据报（MAD）；GSI 向发送方的 SrcQP 应答"}},
    {Msg::mad_note_mad_hdr, {"MAD common header: the class and method select the agent; a response (R bit) carries the request's TransactionID",
                             "MAD 公共头：管理类（class）和方法（method）决定由哪个代理处理；响应（R 位）携带对应请求的 TransactionID"}},
    {Msg::mad_note_class_port_info, {"ClassPortInfo: what the CM class of this port supports (RespTimeValue: how long its agent may take) and where to redirect",
                                     "ClassPortInfo：本端口的 CM 管理类支持什么（RespTimeValue：其代理应答最长可能需要多久），以及应重定向到哪里"}},
    {Msg::mad_note_req, {"REQ: the active side asks for a connection to the Service ID: its QPN and starting PSN become the passive side's remote QPN and expected PSN (RTR)",
                         "REQ：主动方请求与该服务 ID 建立连接：它的 QPN 和起始 PSN 成为被动方的远端 QPN 和期望 PSN（RTR）"}},
    {Msg::mad_note_mra, {"MRA: the receiver needs more time than the sender's timeout before it answers the MRAed message; the sender waits Service Timeout more",
                         "MRA：接收方应答被确认（MRAed）的消息所需的时间超过发送方的超时时间；发送方再多等待 Service Timeout"}},
    {Msg::mad_note_rej, {"REJ: the connection is refused (or aborted); Reason says why, and RDMA CM reports it as RDMA_CM_EVENT_REJECTED",
                         "REJ：连接被拒绝（或中止）；Reason 给出原因，RDMA CM 将其报告为 RDMA_CM_EVENT_REJECTED"}},
    {Msg::mad_note_rep, {"REP: the passive side accepts: its QPN and starting PSN complete the active side's QP (RTR), which then moves to RTS and sends RTU",
                         "REP：被动方接受连接：它的 QPN 和起始 PSN 补全主动方的 QP（RTR），主动方随后把 QP 转入 RTS 并发送 RTU"}},
    {Msg::mad_note_rtu, {"RTU: the active side is ready; the passive side moves its QP to RTS (the connection is established)",
                         "RTU：主动方已就绪；被动方把它的 QP 转入 RTS（连接建立）"}},
    {Msg::mad_note_dreq, {"DREQ: one side disconnects; the receiver moves its QP to error, flushes, and answers DREP",
                          "DREQ：一方断开连接；接收方把它的 QP 转入错误状态、冲刷（flush）未完成的 WQE，并回复 DREP"}},
    {Msg::mad_note_drep, {"DREP: the disconnect is acknowledged; both sides enter TimeWait before the QPN can be reused",
                          "DREP：断开连接得到确认；双方进入 TimeWait，之后该 QPN 才能被重用"}},
    {Msg::mad_note_sidr_req, {"SIDR_REQ: a UD client asks which QPN and Q_Key serve this Service ID (RDMA_PS_UDP)",
                              "SIDR_REQ：UD 客户端询问由哪个 QPN 和 Q_Key 提供这个服务 ID（RDMA_PS_UDP）"}},
    {Msg::mad_note_sidr_rep, {"SIDR_REP: the answer to SIDR_REQ: the server's UD QPN and Q_Key, or a status saying why not",
                              "SIDR_REP：对 SIDR_REQ 的应答：服务端的 UD QPN 和 Q_Key，或说明失败原因的状态"}},
    {Msg::mad_note_lap_apr, {"LAP/APR (alternate path migration) are recognised but not supported by hcaemu: such a MAD is not decoded",
                             "LAP/APR（备用路径迁移）能被识别，但 hcaemu 不支持：这类 MAD 不予解码"}},
    {Msg::mad_note_unknown_attr, {"an AttributeID the CM class does not define", "CM 管理类未定义的 AttributeID"}},
    {Msg::mad_note_not_cm, {"a management class other than CM: not decoded here", "CM 以外的管理类：这里不解码"}},
    {Msg::mad_note_cma, {"RDMA CM header (IBTA A11.4) at the start of the private data: the IP addresses and source port behind the GIDs; the destination port is the Service ID's",
                         "私有数据开头的 RDMA CM 头（IBTA A11.4）：GID 背后的 IP 地址和源端口；目的端口取自服务 ID"}},
    {Msg::mad_note_reserved, {"reserved bits must be sent as zero (and are ignored by the receiver)",
                              "保留位发送时必须为零（接收方忽略它们）"}},
    {Msg::mad_gsi_drops, {"  GMP       ERROR {0}: the GSI drops this frame", "  GMP       错误 {0}：GSI 丢弃这个帧"}},
    {Msg::mad_error, {"  MAD       ERROR {0}", "  MAD       错误 {0}"}},
    {Msg::mad_reserved_set, {"  MAD       reserved bits set in {0} byte(s), first at MAD byte {1}",
                             "  MAD       {0} 个字节中有保留位被置位，第一个在 MAD 第 {1} 字节"}},
    {Msg::mad_cma_error, {"  CMA       ERROR {0} (version {1}, IP version {2})", "  CMA       错误 {0}（version {1}，IP version {2}）"}},
    {Msg::mad_attr_unknown, {"unknown", "未知"}},
    {Msg::mad_status_no_invalid_fields, {"no invalid fields", "无无效字段"}},
    {Msg::mad_status_bad_version, {"bad version", "版本错误"}},
    {Msg::mad_status_method_unsupported, {"method not supported", "不支持该方法"}},
    {Msg::mad_status_method_attr_unsupported, {"method/attribute combination not supported", "不支持该方法/属性组合"}},
    {Msg::mad_status_reserved, {"reserved ({0})", "保留值 {0}"}},
    {Msg::mad_status_invalid_value, {"invalid value in attribute or modifier", "属性或属性修饰符中有无效值"}},
    {Msg::mad_status_busy, {", busy", "，忙"}},
    {Msg::mad_status_redirect, {", redirect", "，需重定向"}},
    {Msg::mad_rej_reason_undefined, {"not defined by the spec", "规范未定义"}},
    {Msg::mad_sid_ip, {"IP-based: port space {0}, port {1}", "基于 IP：端口空间 {0}，端口 {1}"}},
    {Msg::mad_bytes_zero, {"{0}: {1} bytes, all zero", "{0}：{1} 字节，全为零"}},
    {Msg::mad_bytes, {"{0}: {1} bytes:", "{0}：{1} 字节："}},
    {Msg::mad_bytes_zero_from, {" (zero from byte {0})", "（从第 {0} 字节起全为零）"}},

    // ---- demo
    {Msg::demo_link, {"Two HCAs on DPDK's net_ring pair (the embedded link, in this process):",
                      "两个 HCA 通过 DPDK 的 net_ring 对相连（嵌入式链路，就在本进程内）："}},
    {Msg::demo_side, {"  {0}: 198.18.0.{1}, MAC {2}, RC QP {3}, first PSN {4}; {5}-byte MR at {6}, L_Key {7}, R_Key {8}",
                      "  {0}：198.18.0.{1}，MAC {2}，RC QP {3}，起始 PSN {4}；{5} 字节的 MR 位于 {6}，L_Key {7}，R_Key {8}"}},
    {Msg::demo_mtu, {"  path MTU 1024: a message longer than that goes as First, Middle(s) and Last packets",
                     "  路径 MTU 为 1024：更长的消息拆成 First、Middle（可有多个）和 Last 报文发送"}},
    {Msg::demo_step, {"== {0}. {1}, {2} bytes: {3}", "== {0}. {1}，{2} 字节：{3}"}},
    {Msg::demo_what_send, {"A sends a message; B's HCA places it in the buffer of a receive WQE B posted, and both get a CQE",
                           "A 发送一条消息；B 的 HCA 把它放进 B 预先提交的接收 WQE 的缓冲区，双方各得到一个 CQE"}},
    {Msg::demo_what_write, {"A writes into B's memory at an address and R_Key B gave it; B's software sees nothing, no CQE",
                            "A 按 B 给出的地址和 R_Key 写入 B 的内存；B 的软件毫无察觉，也没有 CQE"}},
    {Msg::demo_what_read, {"A reads from B's memory; B's HCA answers from memory, without B's software",
                           "A 读取 B 的内存；B 的 HCA 直接从内存作答，无需 B 的软件参与"}},
    {Msg::demo_what_cmp_swap, {"A asks B's HCA to replace 8 bytes if they hold the compare value; the old value comes back",
                               "A 请 B 的 HCA 在 8 字节的值等于比较值时替换它；旧值返回给 A"}},
    {Msg::demo_what_fetch_add, {"A asks B's HCA to add to 8 bytes; the old value comes back",
                                "A 请 B 的 HCA 给 8 字节的值做加法；旧值返回给 A"}},
    {Msg::demo_post_from, {"{0}: post {1} wr_id={2}, {3} bytes from addr {4} (L_Key {5})",
                           "{0}：提交工作请求 {1} wr_id={2}，从地址 {4}（L_Key {5}）取 {3} 字节"}},
    {Msg::demo_post_into, {"{0}: post {1} wr_id={2}, {3} bytes into addr {4} (L_Key {5})",
                           "{0}：提交工作请求 {1} wr_id={2}，{3} 字节存入地址 {4}（L_Key {5}）"}},
    {Msg::demo_post_remote, {", remote addr {0} (R_Key {1})", "，远端地址 {0}（R_Key {1}）"}},
    {Msg::demo_post_cmp_swap, {", compare {0} swap {1}", "，比较值 {0}，交换值 {1}"}},
    {Msg::demo_post_add, {", add {0}", "，加数 {0}"}},
    {Msg::demo_post_recv, {"{0}: post receive wr_id={1}, room for {2} bytes at {3} (L_Key {4})",
                           "{0}：提交接收请求 wr_id={1}，在 {3}（L_Key {4}）留出 {2} 字节的空间"}},
    {Msg::demo_refused, {"{0} refused: {1}", "{0} 被拒绝：{1}"}},
    {Msg::demo_frame_unparsed, {"a frame that does not parse ({0})", "一个无法解析的帧（{0}）"}},
    {Msg::demo_frame_reth, {"  RETH VA {0} R_Key {1} length {2}", "  RETH VA {0} R_Key {1} 长度 {2}"}},
    {Msg::demo_frame_cmp_swap, {" compare {0} swap {1}", " 比较值 {0} 交换值 {1}"}},
    {Msg::demo_frame_add, {" add {0}", " 加数 {0}"}},
    {Msg::demo_frame_orig, {"  original value {0}", "  原值 {0}"}},
    {Msg::demo_frame_payload, {"  {0} B payload", "  {0} 字节负载"}},
    {Msg::demo_rx_dropped, {"{0}: dropped a received frame: {1}", "{0}：丢弃了一个收到的帧：{1}"}},
    {Msg::demo_wqe_fetched, {"{0}: WQE fetched from the send queue (QP {1}, wr_id={2}, {3}, {4} bytes): {5} packet(s) from PSN {6}",
                             "{0}：从发送队列取出 WQE（QP {1}，wr_id={2}，{3}，{4} 字节）：{5} 个报文，从 PSN {6} 开始"}},
    {Msg::demo_wqe_fetched_read, {"{0}: WQE fetched from the send queue (QP {1}, wr_id={2}, {3}, {4} bytes): 1 request packet at PSN {5}, its {6} response packet(s) take PSNs {5} to {7}",
                                  "{0}：从发送队列取出 WQE（QP {1}，wr_id={2}，{3}，{4} 字节）：1 个请求报文，PSN {5}；它的 {6} 个响应报文占用 PSN {5} 至 {7}"}},
    {Msg::demo_recv_wqe_taken, {"{0}: receive WQE wr_id={1} taken from the receive queue (QP {2}) for the message at PSN {3}",
                                "{0}：为 PSN {3} 的消息从接收队列（QP {2}）取出接收 WQE wr_id={1}"}},
    {Msg::demo_dma_read, {"{0}: DMA read {1} bytes at {2} ({3} {4}) for the packet with PSN {5}",
                          "{0}：DMA 读取 {2}（{3} {4}）处的 {1} 字节，用于 PSN {5} 的报文"}},
    {Msg::demo_dma_write, {"{0}: DMA write {1} bytes at {2} ({3} {4}) from the packet with PSN {5}",
                           "{0}：DMA 把 PSN {5} 报文中的 {1} 字节写入 {2}（{3} {4}）"}},
    {Msg::demo_dma_write_atomic, {"{0}: DMA write 8 bytes at {1} ({2} {3}): the value the atomic found in B's memory, {4}",
                                  "{0}：DMA 向 {1}（{2} {3}）写入 8 字节：即原子操作在 B 的内存中看到的值 {4}"}},
    {Msg::demo_atomic_done, {"{0}: atomic executed on the 8 bytes at {1} ({2} {3}): they held {4}, now {5}",
                             "{0}：在 {1}（{2} {3}）处的 8 字节上执行原子操作：原值 {4}，现值 {5}"}},
    {Msg::demo_ack_received, {"{0}: ACK received for PSN {1} (MSN {2}): every request up to that PSN arrived",
                              "{0}：收到 PSN {1} 的 ACK（MSN {2}）：截至该 PSN 的请求全部到达"}},
    {Msg::demo_cqe, {"{0}: CQE wr_id={1} {2} {3}, {4} bytes", "{0}：CQE wr_id={1} {2} {3}，{4} 字节"}},
    {Msg::demo_success, {"success", "成功"}},
    {Msg::demo_check_send, {"SEND: B's receive buffer against A's source", "SEND：B 的接收缓冲区对照 A 的源数据"}},
    {Msg::demo_check_write, {"WRITE: B's memory against A's source", "WRITE：B 的内存对照 A 的源数据"}},
    {Msg::demo_check_read, {"READ: A's buffer against B's memory", "READ：A 的缓冲区对照 B 的内存"}},
    {Msg::demo_check_cmp_old, {"CMP_SWP: the old value returned to A", "CMP_SWP：返回给 A 的旧值"}},
    {Msg::demo_check_cmp_now, {"CMP_SWP: B's word now", "CMP_SWP：B 的字现在"}},
    {Msg::demo_check_add_old, {"FETCH_ADD: the old value returned to A", "FETCH_ADD：返回给 A 的旧值"}},
    {Msg::demo_check_add_now, {"FETCH_ADD: B's word now", "FETCH_ADD：B 的字现在"}},
    {Msg::demo_bytes_ok, {"check: {0}: {1} bytes identical", "检查：{0}：{1} 字节完全一致"}},
    {Msg::demo_byte_differs, {"{0}: byte {1} is {2}, expected {3}", "{0}：第 {1} 字节是 {2}，应为 {3}"}},
    {Msg::demo_word_ok, {"check: {0} is {1}", "检查：{0}为 {1}"}},
    {Msg::demo_word_differs, {"{0} is {1}, expected {2}", "{0}为 {1}，应为 {2}"}},
    {Msg::demo_mismatch, {"MISMATCH: {0}", "不一致：{0}"}},
    {Msg::demo_cqe_missing, {"{0}: CQE missing", "{0}：缺少 CQE"}},
    {Msg::demo_cqe_wrong, {"{0}: CQE wr_id={1} {2} {3} {4} bytes, expected wr_id={5} {6} success {7} bytes",
                           "{0}：CQE wr_id={1} {2} {3} {4} 字节，应为 wr_id={5} {6} 成功 {7} 字节"}},
    {Msg::demo_timeout, {"{0}: the completions did not come within 10 s", "{0}：10 s 内没有等到完成"}},
    {Msg::demo_bad_frames, {"{0} frame(s) sent did not parse", "发出的帧中有 {0} 个无法解析"}},
    {Msg::demo_summary, {"{0} of 5 operations completed and verified; {1} frames written to {2}",
                         "5 个操作中有 {0} 个完成并通过校验；{1} 个帧已写入 {2}"}},
    {Msg::demo_read_hint, {"Read them with `hcaemu dissect {0}` (or --brief), or open the file in Wireshark.",
                           "可用 `hcaemu dissect {0}`（或加 --brief）查看这些帧，也可以用 Wireshark 打开该文件。"}},
    {Msg::demo_ladder, {"ladder diagram of {0}: {1} ({2} arrows)", "{0} 的时序图：{1}（{2} 个箭头）"}},

    // ---- demo --samples
    {Msg::sample_send_first_2500, {"RC SEND First of a 2500-byte message (PMTU 1024)",
                                      "RC SEND First：一条 2500 字节消息的第一个报文（PMTU 1024）"}},
    {Msg::sample_send_middle, {"RC SEND Middle",
                                  "RC SEND Middle：中间报文"}},
    {Msg::sample_send_last_ackreq, {"RC SEND Last: AckReq on the last packet",
                                       "RC SEND Last：最后一个报文置位 AckReq"}},
    {Msg::sample_ack_102, {"RC Acknowledge of PSN 102, MSN 1",
                              "RC Acknowledge：确认 PSN 102，MSN 1"}},
    {Msg::sample_send_first, {"RC SEND First",
                                 "RC SEND First：第一个报文"}},
    {Msg::sample_send_last_imm, {"RC SEND Last with Immediate: 13 bytes, 3 pad bytes",
                                    "RC SEND Last with Immediate：13 字节，3 个填充字节"}},
    {Msg::sample_send_only_64, {"RC SEND Only, 64 bytes",
                                   "RC SEND Only，64 字节"}},
    {Msg::sample_send_only_imm_se, {"RC SEND Only with Immediate, solicited",
                                       "RC SEND Only with Immediate，置位 solicited event（SE）"}},
    {Msg::sample_send_only_inv, {"RC SEND Only with Invalidate of R_Key 0x1234",
                                    "RC SEND Only with Invalidate：使 R_Key 0x1234 失效"}},
    {Msg::sample_send_last_inv, {"RC SEND Last with Invalidate of R_Key 0x5678",
                                    "RC SEND Last with Invalidate：使 R_Key 0x5678 失效"}},
    {Msg::sample_rnr_nak, {"RC RNR NAK: no receive WQE; retry after timer code 14",
                              "RC RNR NAK：没有接收 WQE；按定时器代码 14 等待后重试"}},
    {Msg::sample_seq_nak, {"RC NAK: PSN sequence error, resend from PSN 108",
                              "RC NAK：PSN 序列错误，从 PSN 108 起重发"}},
    {Msg::sample_write_first_reth, {"RC RDMA WRITE First: RETH names the remote MR",
                                       "RC RDMA WRITE First：RETH 指明远端 MR"}},
    {Msg::sample_write_middle, {"RC RDMA WRITE Middle",
                                   "RC RDMA WRITE Middle：中间报文"}},
    {Msg::sample_write_last, {"RC RDMA WRITE Last",
                                 "RC RDMA WRITE Last：最后一个报文"}},
    {Msg::sample_write_only_0, {"RC RDMA WRITE Only of 0 bytes",
                                   "RC RDMA WRITE Only，0 字节"}},
    {Msg::sample_write_first, {"RC RDMA WRITE First",
                                  "RC RDMA WRITE First：第一个报文"}},
    {Msg::sample_write_last_imm, {"RC RDMA WRITE Last with Immediate",
                                     "RC RDMA WRITE Last with Immediate：最后一个报文，带立即数"}},
    {Msg::sample_write_only_imm, {"RC RDMA WRITE Only with Immediate",
                                     "RC RDMA WRITE Only with Immediate：唯一的报文，带立即数"}},
    {Msg::sample_access_nak, {"RC NAK: remote access error (R_Key, bounds or access)",
                                 "RC NAK：远端访问错误（R_Key、地址范围或访问权限）"}},
    {Msg::sample_read_req_2100, {"RC RDMA READ Request for 2100 bytes: takes PSNs 300-302",
                                    "RC RDMA READ Request，读取 2100 字节：占用 PSN 300-302"}},
    {Msg::sample_read_resp_first, {"RC RDMA READ response First",
                                      "RC RDMA READ response First：第一个响应报文"}},
    {Msg::sample_read_resp_middle, {"RC RDMA READ response Middle: no AETH",
                                       "RC RDMA READ response Middle：不带 AETH"}},
    {Msg::sample_read_resp_last, {"RC RDMA READ response Last",
                                     "RC RDMA READ response Last：最后一个响应报文"}},
    {Msg::sample_read_req_64, {"RC RDMA READ Request for 64 bytes",
                                  "RC RDMA READ Request，读取 64 字节"}},
    {Msg::sample_read_resp_only, {"RC RDMA READ response Only",
                                     "RC RDMA READ response Only：唯一的响应报文"}},
    {Msg::sample_cmp_swap, {"RC CmpSwap: if *VA == Compare then *VA = Swap",
                               "RC CmpSwap：若 *VA == Compare，则 *VA = Swap"}},
    {Msg::sample_atomic_ack_orig, {"RC ATOMIC Acknowledge with the original value",
                                      "RC ATOMIC Acknowledge：带回原值"}},
    {Msg::sample_fetch_add, {"RC FetchAdd: *VA += 5",
                                "RC FetchAdd：*VA += 5"}},
    {Msg::sample_atomic_ack, {"RC ATOMIC Acknowledge",
                                 "RC ATOMIC Acknowledge：原子操作的确认"}},
    {Msg::sample_flush, {"RC FLUSH (IBTA 1.5) of 4 KiB for global visibility",
                            "RC FLUSH（IBTA 1.5）：4 KiB，使数据全局可见"}},
    {Msg::sample_atomic_write, {"RC ATOMIC WRITE (IBTA 1.5) of 8 bytes",
                                   "RC ATOMIC WRITE（IBTA 1.5）：8 字节"}},
    {Msg::sample_ack_coalesced, {"RC Acknowledge, coalesced up to PSN 307",
                                    "RC Acknowledge：合并确认截至 PSN 307 的报文"}},
    {Msg::sample_uc, {"{0} (no ACK: UC)",
                         "{0}（UC 没有 ACK）"}},
    {Msg::sample_ud_send, {"UD SEND Only: DETH carries Q_Key and source QP",
                              "UD SEND Only：DETH 携带 Q_Key 和源 QP"}},
    {Msg::sample_ud_send_imm, {"UD SEND Only with Immediate",
                                  "UD SEND Only with Immediate：带立即数"}},
    {Msg::sample_cnp, {"CNP: congestion notification back to the sender's QP (BECN set)",
                          "CNP：发回发送方 QP 的拥塞通知（置位 BECN）"}},
    {Msg::sample_ipv6, {"RC SEND Only over IPv6 (GID fd00::1 -> fd00::2)",
                           "经 IPv6 传送的 RC SEND Only（GID fd00::1 -> fd00::2）"}},
    {Msg::sample_vlan, {"RC SEND Only on VLAN 100, priority 3",
                           "VLAN 100、优先级 3 上的 RC SEND Only"}},
    {Msg::sample_wrote, {"wrote {0} frames to {1}",
                            "已把 {0} 个帧写入 {1}"}},
    {Msg::sample_read_back, {"wrote {0} frames to {1}; read them back: {2} frames, {3} with a good ICRC",
                                "已把 {0} 个帧写入 {1}；读回 {2} 个帧，其中 {3} 个 ICRC 正确"}},
}};

namespace {

// Every row sits at its own id's index: a row added out of order fails the build.
constexpr bool rows_in_order() {
    for (size_t i = 0; i < kMsgCount; ++i)
        if (size_t(kMessages[i].id) != i) return false;
    return true;
}

}  // namespace

static_assert(rows_in_order(), "kMessages: every row at its Msg's index");

std::optional<Lang> lang_from_code(std::string_view code) {
    for (size_t i = 0; i < kLangCount; ++i)
        if (code == kLangCode[i]) return Lang(i);
    return std::nullopt;
}

std::string lang_codes() {
    std::string s;
    for (size_t i = 0; i < kLangCount; ++i) {
        if (i) s += ", ";
        s += kLangCode[i];
    }
    return s;
}

const char* text(Msg m, Lang lang) {
    if (size_t(m) >= kMsgCount || size_t(lang) >= kLangCount) return "";
    const char* t = kMessages[size_t(m)].text[size_t(lang)];
    return t ? t : "";
}

std::string format_positional(std::string_view fmt, std::initializer_list<std::string_view> args) {
    std::string out;
    out.reserve(fmt.size() + 16 * args.size());
    for (size_t i = 0; i < fmt.size(); ++i) {
        if (fmt[i] == '{') {
            size_t j = i + 1;
            size_t n = 0;
            while (j < fmt.size() && fmt[j] >= '0' && fmt[j] <= '9') n = n * 10 + size_t(fmt[j++] - '0');
            if (j > i + 1 && j < fmt.size() && fmt[j] == '}' && n < args.size()) {
                out += *(args.begin() + n);
                i = j;
                continue;
            }
        }
        out += fmt[i];
    }
    return out;
}

std::string msg(Msg m, Lang lang, std::initializer_list<std::string_view> args) {
    return format_positional(text(m, lang), args);
}

}  // namespace hcaemu::pkt
