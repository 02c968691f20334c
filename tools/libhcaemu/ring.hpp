// The client's side of the shared-memory rings (shm.hpp): checking a ring the daemon mapped to us,
// writing work requests into SQ/RQ/SRQ slots and ringing the doorbell, taking CQEs. No syscall,
// no allocation: this is what Qp::post_send, Qp::post_recv, Srq::post_recv and Cq::poll run.
// Posting validates what verbs validates synchronously (hca_model's Device::post_send); what
// only the HCA can know (lkeys, PD membership) the daemon checks and reports as a CQE.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "hca_model/status.hpp"
#include "hca_model/verbs_structs.hpp"
#include "tools/libhcaemu/shm.hpp"

namespace hcaemu::ring {

// One mapped ring; `cap` and `entry_size` are the values checked at attach, never re-read.
struct View {
    shm::RingHdr* hdr = nullptr;
    uint8_t* slots = nullptr;
    uint32_t cap = 0;
    uint32_t entry_size = 0;
    uint8_t* slot(uint64_t n) const { return slots + (n % cap) * size_t(entry_size); }
    bool error() const { return hdr->flags.load(std::memory_order_acquire) & shm::kRingError; }
};

// Checks the header of a ring of `bytes` bytes at `base`: magic, kind, entry size as expected, at
// least `min_cap` entries, and all entries inside the mapping. False (and `v` unchanged) if not.
bool attach(View& v, void* base, size_t bytes, shm::RingKind kind, uint32_t min_cap, uint32_t entry_size);

// What post_send checks against (the QP's granted caps and the device/port it lives on).
struct SendLimits {
    QpType type = QpType::rc;
    uint32_t max_send_sge = 1;
    uint32_t max_inline_data = 0;
    uint32_t max_msg_sz = 0x80000000u;
    uint32_t ud_max_payload = 1024;  // UD: one packet, the path MTU
    bool atomics = true;             // the device's atomic_cap is not none
};

// Posts a chain of send WRs into `sq`: each is validated, then written into its slot, and `prod`
// is stored once (release) after the last one written: the doorbell. On error *bad_wr is the
// first WR not posted and the ones before it are posted (as hca_model does). `ah_handle` maps a
// WR's AH to the daemon's handle (0: none).
using AhHandleFn = uint32_t (*)(const Ah* ah);
Status post_send(View& sq, const SendLimits& lim, AhHandleFn ah_handle, const SendWr* wr, const SendWr** bad_wr);
// The same for receive WRs (RQ or SRQ), `max_sge` per WR.
Status post_recv(View& rq, uint32_t max_sge, const RecvWr* wr, const RecvWr** bad_wr);

// Takes up to wc.size() CQEs between `cons` and `prod` (acquire), oldest first, then stores
// `cons` (release). A `prod` more than cap ahead of `cons` (a broken ring) is taken as cap ahead.
int poll_cq(View& cq, std::span<Wc> wc);
// Drops the CQEs of QP `qpn` between cons and prod (as read once), keeping the others in order;
// only the consumer calls it (the producer never writes below prod).
void purge_cq(View& cq, uint32_t qpn);

}  // namespace hcaemu::ring
