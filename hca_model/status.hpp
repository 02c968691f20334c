// Typed results of the verbs-like API. No exceptions: every call returns a Status, with the errno
// that libibverbs would return beside it for the daemon and for people who know verbs.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace hcaemu {

enum class Status : uint8_t {
    ok,
    invalid_argument,  // EINVAL: an attribute out of range, a bad flag combination
    no_resources,      // ENOMEM: a table or queue is full, a device limit would be exceeded
    busy,              // EBUSY: the object is still used (PD with MRs, CQ with QPs, MR in flight)
    bad_handle,        // EINVAL: no such object, destroyed, or not the caller's
    not_supported,     // EOPNOTSUPP
    bad_transition,    // EINVAL: illegal QP state transition (see modify error for why)
    missing_attr,      // EINVAL: a required attribute is missing from the mask
    attr_not_allowed,  // EINVAL: an attribute the transition does not take
    queue_full,        // ENOMEM: post on a full send/receive queue
    too_many_sge,      // EINVAL
    bad_lkey,          // EINVAL: an SGE's lkey is no MR of the QP's PD, or the range is outside it
    inline_too_large,  // EINVAL
    opcode_not_allowed,// EINVAL: e.g. RDMA READ on UC, anything but SEND on UD
    no_ah,             // EINVAL: UD send without an address handle
    bad_qp_state,      // EINVAL: post_send before RTS, post_recv in RESET
    misaligned,        // EINVAL: atomic address not 8-byte aligned
    permission_denied, // EPERM: a privileged attribute from an unprivileged consumer (controlled Q_Key)
    bad_address,       // EFAULT: memory to register is not mapped, or not writable for write access
    count,
};
constexpr size_t kStatusCount = size_t(Status::count);
inline constexpr std::array<const char*, kStatusCount> kStatusName = {
    "ok", "invalid_argument", "no_resources", "busy", "bad_handle", "not_supported",
    "bad_transition", "missing_attr", "attr_not_allowed", "queue_full", "too_many_sge", "bad_lkey",
    "inline_too_large", "opcode_not_allowed", "no_ah", "bad_qp_state", "misaligned", "permission_denied", "bad_address",
};
inline const char* name(Status s) { return size_t(s) < kStatusCount ? kStatusName[size_t(s)] : "?"; }

// The errno libibverbs returns for the same failure.
constexpr int to_errno(Status s) {
    switch (s) {
    case Status::ok: return 0;
    case Status::no_resources:
    case Status::queue_full: return 12;   // ENOMEM
    case Status::busy: return 16;         // EBUSY
    case Status::not_supported: return 95;  // EOPNOTSUPP
    case Status::permission_denied: return 1;  // EPERM
    case Status::bad_address: return 14;  // EFAULT (the kernel's ib_umem_get)
    default: return 22;                   // EINVAL
    }
}

template <class T>
struct Result {
    Status status = Status::ok;
    T value{};
    bool ok() const { return status == Status::ok; }
    T& operator*() { return value; }
    T* operator->() { return &value; }
    static Result error(Status s) { return Result{s, T{}}; }
};

}  // namespace hcaemu
