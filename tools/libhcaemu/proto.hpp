// The control protocol between libhcaemu and hcaemud: one request and one reply per verbs call, as
// an HCA's command interface (rxe's uverbs commands, mlx5's command queue) works. Both ends are on
// one host, so fields are in host byte order and bodies are fixed-size structs whose layout this
// header fixes (static_asserts below); kVersion changes whenever a layout or meaning changes.
//
// Transport: a SOCK_SEQPACKET Unix socket, so one datagram is one message. Every message starts
// with Hdr; a reply starts with ReplyHdr (op | kReplyBit, the request's seq). File descriptors
// (memfds) travel as SCM_RIGHTS beside the message that names them. Events (CQ event, async event,
// shutdown) are messages from the daemon with seq 0 at any time between replies.
// The daemon checks every request: magic, version, len == datagram size == sizeof(Hdr) + the op's
// body size, field ranges, and that every handle belongs to the sender. Anything else gets a reply
// with a ctl::Error (or a Status) and is counted; it never ends the daemon.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hca_model/status.hpp"
#include "hca_model/verbs_structs.hpp"
#include "tools/libhcaemu/cm.hpp"

namespace hcaemu::ctl {

constexpr uint32_t kMagic = 0x45414348;  // "HCAE" in memory order
constexpr uint16_t kVersion = 2;   // 2: the cm op and the cm_event event
constexpr size_t kMaxMsg = 16384;        // no message is longer (res_list pages stay below it)
constexpr uint16_t kReplyBit = 0x8000;
constexpr uint16_t kEventBit = 0x4000;

enum class Op : uint16_t {
    hello = 1,        // HelloReq -> HelloRep: must come first; names the client
    query_device,     // -> DeviceAttrW
    query_port,       // PortReq -> PortAttr
    query_gid,        // GidReq -> GidEntry
    alloc_pd,         // -> HandleRep
    dealloc_pd,       // HandleReq
    reg_mr,           // RegMrReq + 1 fd (the memfd) -> RegMrRep
    dereg_mr,         // HandleReq
    create_cq,        // CreateCqReq -> CreateCqRep + 1 fd (the CQ ring)
    destroy_cq,       // DestroyCqReq
    resize_cq,        // ResizeCqReq -> CreateCqRep + 1 fd (the new ring; the old one is retired)
    req_notify_cq,    // NotifyReq
    create_qp,        // CreateQpReq -> CreateQpRep + 1 fd (SQ and RQ rings)
    destroy_qp,       // HandleReq
    modify_qp,        // ModifyQpReq (ReplyHdr.detail: the offending attribute bits)
    query_qp,         // HandleReq -> QueryQpRep
    create_srq,       // CreateSrqReq -> CreateSrqRep + 1 fd (the SRQ ring)
    destroy_srq,      // HandleReq
    modify_srq,       // ModifySrqReq
    query_srq,        // HandleReq -> SrqAttr
    create_ah,        // CreateAhReq -> HandleRep
    destroy_ah,       // HandleReq
    read_counters,    // CountersReq -> CountersRep (a page of name/value pairs)
    res_list,         // ResListReq -> ResListRep (a page of objects, all clients', read-only)
    resolve,          // ResolveReq -> ResolveRep: starts ARP/ND, reports the neighbour's state
    rereg_mr,         // ReregMrReq (+ 1 fd, the new memfd, with change_translation) -> RegMrRep
    inject,           // InjectReq -> InjectRep: event injection rules added, listed, deleted (docs/inject.md)
    cm,               // CmCallReq -> CmCallRep: one api::Cm call (CmCmd), as a ucma command (docs/cm.md)
    count,
};

enum class Ev : uint16_t {
    cq_event = kEventBit | 1,     // CqEventMsg: an armed CQ got a completion
    async_event = kEventBit | 2,  // AsyncEventMsg
    shutdown = kEventBit | 3,     // ShutdownMsg: the daemon is stopping; every QP is in ERR
    cm_event = kEventBit | 4,     // CmEventMsg: an event of one of the client's CM ids
};

// Protocol-level errors (Status says what a valid request's verbs call returned).
enum class Error : uint8_t {
    ok,
    bad_magic,
    bad_version,
    bad_length,     // len differs from the datagram or from the op's body size
    unknown_op,
    no_hello,       // a request before hello, or a second hello
    bad_field,      // a field out of range (an enum value, a flag, a size)
    bad_fd,         // reg_mr without a memfd, an unsealed one (F_SEAL_SHRINK), a range outside it
    fd_unexpected,  // fds sent with an op that takes none (closed by the daemon)
    limit,          // the client's object limit
    shutting_down,
    count,
};
inline constexpr std::array<const char*, size_t(Error::count)> kErrorName = {
    "ok", "bad_magic", "bad_version", "bad_length", "unknown_op", "no_hello", "bad_field", "bad_fd",
    "fd_unexpected", "limit", "shutting_down"};

struct Hdr {
    uint32_t magic = kMagic;
    uint16_t version = kVersion;
    uint16_t op = 0;
    uint32_t len = 0;   // the whole message, header included
    uint32_t seq = 0;   // chosen by the client, echoed in the reply; 0 in events
};
struct ReplyHdr {
    Hdr h;
    uint8_t status = 0;  // hcaemu::Status
    uint8_t error = 0;   // ctl::Error
    uint16_t rsv = 0;
    uint32_t detail = 0; // modify_qp: ModifyResult::bits
};

// ---- bodies ----
struct HelloReq { uint32_t pid = 0; uint32_t rsv = 0; char comm[32] = {}; };
struct HelloRep { uint32_t client_id = 0; uint32_t max_objects = 0; uint8_t gid[16] = {}; int32_t gid_index = 0; uint32_t rsv = 0; };
struct DeviceAttrW {  // DeviceAttr with its string as a fixed field
    char fw_ver[32] = {};
    uint64_t node_guid, sys_image_guid, max_mr_size, page_size_cap;
    uint32_t vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
        max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_res_rd_atom, max_qp_init_rd_atom, max_ah, max_srq,
        max_srq_wr, max_srq_sge, max_inline_data;
    uint16_t max_pkeys;
    uint8_t atomic_cap, local_ca_ack_delay, phys_port_cnt, rsv[3];
};
struct PortReq { uint8_t port_num = 1; uint8_t rsv[7] = {}; };
struct GidReq { uint8_t port_num = 1; uint8_t rsv[3] = {}; int32_t index = 0; };
struct HandleReq { uint32_t handle = 0; uint32_t rsv = 0; };
struct HandleRep { uint32_t handle = 0; uint32_t rsv = 0; };
struct RegMrReq {
    uint32_t pd = 0;
    uint32_t access = 0;  // access::
    uint64_t offset = 0;  // where the region starts in the memfd
    uint64_t length = 0;
    uint64_t iova = 0;    // the address SGEs and peers use (the client's virtual address)
};
struct ReregMrReq {       // ibv_rereg_mr: the keys stay
    uint32_t handle = 0;
    uint32_t flags = 0;   // rereg::
    uint32_t pd = 0;      // with change_pd
    uint32_t access = 0;  // with change_access
    uint64_t offset = 0;  // with change_translation, as RegMrReq's
    uint64_t length = 0;
    uint64_t iova = 0;
};
struct RegMrRep { uint32_t handle = 0; uint32_t lkey = 0; uint32_t rkey = 0; uint32_t rsv = 0; };
struct CreateCqReq { int32_t cqe = 0; uint8_t events = 0; uint8_t rsv[3] = {}; uint64_t cq_context = 0; };
struct CreateCqRep { uint32_t handle = 0; int32_t cqe = 0; uint64_t ring_bytes = 0; };  // the fd maps ring_bytes
struct DestroyCqReq { uint32_t handle = 0; uint32_t events_acked = 0; };
struct ResizeCqReq { uint32_t handle = 0; int32_t cqe = 0; };
struct NotifyReq { uint32_t handle = 0; uint8_t solicited_only = 0; uint8_t rsv[3] = {}; };
struct CreateQpReq {
    uint32_t pd = 0, send_cq = 0, recv_cq = 0, srq = 0;  // srq 0: none (handles are never 0)
    QpCap cap;
    uint8_t qp_type = 0;   // QpType
    uint8_t sq_sig_all = 0;
    uint8_t rsv[2] = {};
};
struct CreateQpRep {
    uint32_t handle = 0;
    uint32_t qpn = 0;
    QpCap cap;             // granted
    uint64_t sq_offset = 0, rq_offset = 0;  // the rings inside the fd (rq_offset 0 with an SRQ)
    uint64_t ring_bytes = 0;
};
struct ModifyQpReq { uint32_t handle = 0; uint32_t mask = 0; QpAttr attr; };
struct QueryQpRep { QpAttr attr; CreateQpReq init; };
struct CreateSrqReq { uint32_t pd = 0; uint32_t rsv = 0; SrqAttr attr; };
struct CreateSrqRep { uint32_t handle = 0; uint32_t rsv = 0; SrqAttr attr; uint64_t ring_bytes = 0; };
struct ModifySrqReq { uint32_t handle = 0; uint32_t mask = 0; SrqAttr attr; };
struct CreateAhReq { uint32_t pd = 0; uint32_t rsv = 0; AhAttr attr; };

// Pages of name/value lists: `start` is where this page begins, `total` how many there are.
enum class CounterSet : uint8_t { device, net, link, daemon, count };  // daemon: its own (protocol errors by ctl::Error, clients, rings)
struct CountersReq { uint8_t set = 0; uint8_t rsv[3] = {}; uint32_t start = 0; };
struct NameValue { char name[40] = {}; uint64_t value = 0; };
constexpr uint32_t kCountersPerPage = 128;
struct CountersRep { uint32_t total = 0; uint32_t n = 0; NameValue v[kCountersPerPage]; };

struct ResListReq { uint8_t kind = 0; uint8_t rsv[3] = {}; uint32_t start = 0; };  // api::ResKind
struct ResAttr { char name[16] = {}; char value[24] = {}; };
constexpr uint32_t kResAttrs = 16;
struct ResObj { uint32_t client = 0, pid = 0; char comm[32] = {}; uint32_t nattr = 0, rsv = 0; ResAttr a[kResAttrs]; };
constexpr uint32_t kResPerPage = 16;
struct ResListRep { uint32_t total = 0; uint32_t n = 0; ResObj o[kResPerPage]; };

enum class Neighbor : uint8_t { resolved, pending, failed };
struct ResolveReq { uint8_t gid[16] = {}; };
struct ResolveRep { uint8_t state = 0; uint8_t mac[6] = {}; uint8_t rsv = 0; };

// Event injection (docs/inject.md). add: `rule` (NUL-terminated text) -> `id`; del: `id`; list:
// a page of rules from index `start` (paged like CountersRep).
enum class InjectCmd : uint8_t { add, list, del, count };
constexpr uint32_t kInjectRuleText = 240;
struct InjectReq { uint8_t cmd = 0; uint8_t rsv[3] = {}; uint32_t id = 0; uint32_t start = 0; uint32_t rsv2 = 0; char rule[kInjectRuleText] = {}; };
struct InjectRuleW { uint32_t id = 0; uint32_t rsv = 0; uint64_t matched = 0, hits = 0; char text[kInjectRuleText] = {}; };
constexpr uint32_t kInjectPerPage = 16;
struct InjectRep { uint32_t total = 0; uint32_t n = 0; uint32_t id = 0; uint32_t rsv = 0; InjectRuleW r[kInjectPerPage]; };

// The connection manager (api::Cm, cm.hpp): one call per request. Each field is used by the
// commands named beside it and must be 0 for the others (bad_field). The call's errno (0 or
// positive, as api::Cm returns it) is CmCallRep::err; ReplyHdr::status is ok when the call ran.
enum class CmCmd : uint8_t {
    create_id, destroy_id, bind, resolve_addr, resolve_route, query, listen, connect, accept, reject,
    disconnect, establish, init_qp_attr, set_option, count,
};
struct CmCallReq {
    uint8_t cmd = 0;         // CmCmd
    uint8_t qp_type = 0;     // create_id: QpType
    uint8_t arg8 = 0;        // init_qp_attr: QpState; set_option: CmOption; resolve_addr: 1 if src is set
    uint8_t rsv = 0;
    uint32_t id = 0;         // every command but create_id: an id of this client
    uint16_t ps = 0;         // create_id: pkt::RdmaPs
    uint16_t rsv2 = 0;
    int32_t arg32 = 0;       // resolve_addr/resolve_route: timeout_ms; listen: backlog; set_option: value
    uint64_t context = 0;    // create_id
    sockaddr_storage src{};  // bind, resolve_addr (with arg8 1): AF_INET or AF_INET6
    sockaddr_storage dst{};  // resolve_addr
    api::CmConnParam param;  // connect, accept; reject: private data only. qp_num: a QP of this client
};
struct CmCallRep {
    int32_t err = 0;              // 0 or a positive errno
    uint32_t id = 0;              // create_id
    uint32_t events_reported = 0; // destroy_id
    uint32_t mask = 0;            // init_qp_attr
    QpAttr attr;                  // init_qp_attr
    uint32_t rsv = 0;
    api::CmIdInfo info;           // query
};

// ---- events ----
struct CqEventMsg { uint32_t cq = 0; uint32_t rsv = 0; uint64_t cq_context = 0; };
struct AsyncEventMsg { uint8_t type = 0; uint8_t rsv[3] = {}; uint32_t element = 0; };  // EventType; element as AsyncEvent
struct ShutdownMsg { uint32_t reason = 0; uint32_t rsv = 0; };  // 0: SIGTERM/SIGINT
struct CmEventMsg { api::CmEvent ev; };  // ev.id: an id of the receiving client (connect_request: new, now its)

// Layouts are part of kVersion.
static_assert(sizeof(Hdr) == 16 && sizeof(ReplyHdr) == 24);
static_assert(std::is_trivially_copyable_v<QpAttr> && std::is_trivially_copyable_v<AhAttr> &&
              std::is_trivially_copyable_v<SrqAttr> && std::is_trivially_copyable_v<PortAttr> &&
              std::is_trivially_copyable_v<GidEntry> && std::is_trivially_copyable_v<QpCap>);
static_assert(sizeof(QpCap) == 20 && sizeof(SrqAttr) == 12 && sizeof(AhAttr) == 28 && sizeof(QpAttr) == 116 &&
              sizeof(PortAttr) == 24 && sizeof(GidEntry) == 17 && sizeof(DeviceAttrW) == 152);
static_assert(sizeof(ReregMrReq) == 40);
static_assert(std::is_trivially_copyable_v<CmCallReq> && std::is_trivially_copyable_v<CmCallRep> &&
              std::is_trivially_copyable_v<CmEventMsg>);
static_assert(sizeof(api::CmConnParam) == 268 && sizeof(CmCallReq) == 552 && sizeof(api::CmEvent) == 296 &&
              sizeof(CmCallRep) == 16 + 116 + 4 + 312);
static_assert(sizeof(CountersRep) + sizeof(ReplyHdr) <= kMaxMsg && sizeof(ResListRep) + sizeof(ReplyHdr) <= kMaxMsg);
static_assert(sizeof(InjectReq) == 256 && sizeof(InjectRuleW) == 264 && sizeof(InjectRep) + sizeof(ReplyHdr) <= kMaxMsg);

// The body size of each request, by Op, for the daemon's length check (query_device and alloc_pd
// have no body).
inline constexpr std::array<size_t, size_t(Op::count)> kRequestSize = {
    0, sizeof(HelloReq), 0, sizeof(PortReq), sizeof(GidReq),
    0, sizeof(HandleReq), sizeof(RegMrReq), sizeof(HandleReq),
    sizeof(CreateCqReq), sizeof(DestroyCqReq), sizeof(ResizeCqReq), sizeof(NotifyReq),
    sizeof(CreateQpReq), sizeof(HandleReq), sizeof(ModifyQpReq), sizeof(HandleReq),
    sizeof(CreateSrqReq), sizeof(HandleReq), sizeof(ModifySrqReq), sizeof(HandleReq),
    sizeof(CreateAhReq), sizeof(HandleReq),
    sizeof(CountersReq), sizeof(ResListReq), sizeof(ResolveReq), sizeof(ReregMrReq), sizeof(InjectReq),
    sizeof(CmCallReq)};
inline constexpr std::array<const char*, size_t(Op::count)> kOpName = {
    "?", "hello", "query_device", "query_port", "query_gid", "alloc_pd", "dealloc_pd", "reg_mr",
    "dereg_mr", "create_cq", "destroy_cq", "resize_cq", "req_notify_cq", "create_qp", "destroy_qp",
    "modify_qp", "query_qp", "create_srq", "destroy_srq", "modify_srq", "query_srq", "create_ah",
    "destroy_ah", "read_counters", "res_list", "resolve", "rereg_mr", "inject", "cm"};

}  // namespace hcaemu::ctl
