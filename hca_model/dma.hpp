// The DMA engine: the one component that moves bytes between registered memory and packet
// buffers. Every access goes through check_mr_access(), for local SGEs and remote R_Keys alike.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "hca_model/counters.hpp"
#include "hca_model/objects.hpp"

namespace hcaemu {

enum class MrError : uint8_t {
    ok,
    bad_key,        // no MR has this key: never registered, deregistered, or re-registered since
    pd_mismatch,    // the MR belongs to another PD than the QP (IBTA 10.6: memory protection)
    access_denied,  // the MR lacks the access flag the operation needs
    out_of_bounds,  // [va, va+len) not inside the MR, including address arithmetic overflow
    misaligned,     // atomic address not 8-byte aligned (IBTA 9.4: atomics on naturally aligned words)
    length,         // the SGE list is shorter than the data to place or take
    count,
};
inline constexpr std::array<const char*, size_t(MrError::count)> kMrErrorName = {
    "ok", "bad_key", "pd_mismatch", "access_denied", "out_of_bounds", "misaligned", "length"};
inline const char* name(MrError e) { return size_t(e) < kMrErrorName.size() ? kMrErrorName[size_t(e)] : "?"; }

// The one MR check. `mr` is the key's lookup result (nullptr when the key matched nothing).
// `need` is the access:: flags the operation requires (0 for a local read); with remote_atomic
// the address must also be 8-byte aligned. Inline: every packet of every message runs it.
inline MrError check_mr_access(const MrObj* mr, const PdObj* pd, uint64_t va, uint64_t len, uint32_t need) {
    if (!mr) return MrError::bad_key;
    if (mr->pd != pd) return MrError::pd_mismatch;
    if ((mr->access & need) != need) return MrError::access_denied;
    // [va, va + len) inside [iova, iova + length), written so that nothing can overflow.
    if (va < mr->iova || len > mr->length || va - mr->iova > mr->length - len) return MrError::out_of_bounds;
    if ((need & access::remote_atomic) && (va & 7)) return MrError::misaligned;
    return MrError::ok;
}

class Device;

enum class AtomicOp : uint8_t { cmp_swap, fetch_add };

class DmaEngine {
public:
    explicit DmaEngine(Device& dev) : dev_(dev) {}

    // Copies bytes [offset, offset + dst.size()) of the message an SGE list describes into dst.
    // With `crc`, the bytes' CRC32 continues *crc as they are copied (pkt::crc32_copy): a packet's
    // ICRC from the same pass over them.
    MrError gather(const PdObj* pd, const Sge* sgl, uint32_t n, uint64_t offset, std::span<uint8_t> dst,
                   uint32_t* crc = nullptr);
    // Places src at byte `offset` of the SGE list's space; the SGEs' MRs need local write.
    MrError scatter(const PdObj* pd, const Sge* sgl, uint32_t n, uint64_t offset, std::span<const uint8_t> src);
    // Remote access through an R_Key: RDMA WRITE (remote write) and READ (remote read).
    MrError remote_write(const PdObj* pd, uint32_t rkey, uint64_t va, std::span<const uint8_t> src);
    MrError remote_read(const PdObj* pd, uint32_t rkey, uint64_t va, std::span<uint8_t> dst, uint32_t* crc = nullptr);
    // An 8-byte atomic through an R_Key (remote atomic access); `orig` gets the old value.
    // The word is read and written in host byte order, as HCAs do on x86 hosts.
    MrError atomic(const PdObj* pd, uint32_t rkey, uint64_t va, AtomicOp op, uint64_t compare_add,
                   uint64_t swap, uint64_t& orig);

private:
    Device& dev_;
};

}  // namespace hcaemu
