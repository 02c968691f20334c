#include "hca_model/dma.hpp"

#include <algorithm>
#include <cstring>

#include "hca_model/device.hpp"
#include "packet/icrc.hpp"

namespace hcaemu {

namespace {

// Walks an SGE list from byte `offset`, calling fn(host pointer, bytes, bytes of its SGE after
// the piece) for each piece.
template <class F>
MrError walk(Device& dev, const PdObj* pd, const Sge* sgl, uint32_t n, uint64_t offset, uint64_t len,
             uint32_t need, F&& fn) {
    for (uint32_t i = 0; i < n && len > 0; ++i) {
        const Sge& s = sgl[i];
        if (offset >= s.length) {
            offset -= s.length;
            continue;
        }
        const uint64_t take = std::min<uint64_t>(s.length - offset, len);
        const MrObj* mr = dev.mr_by_key(s.lkey);
        const MrError e = check_mr_access(mr, pd, s.addr + offset, take, need);
        if (e != MrError::ok) return e;
        fn(mr->host + (s.addr + offset - mr->iova), take, s.length - offset - take);
        len -= take;
        offset = 0;
    }
    return len == 0 ? MrError::ok : MrError::length;
}

}  // namespace

MrError DmaEngine::gather(const PdObj* pd, const Sge* sgl, uint32_t n, uint64_t offset, std::span<uint8_t> dst,
                          uint32_t* crc) {
    uint8_t* out = dst.data();
    const MrError e = walk(dev_, pd, sgl, n, offset, dst.size(), 0, [&](uint8_t* p, uint64_t k, uint64_t rest) {
        if (crc) *crc = pkt::crc32_copy(*crc, out, p, k);
        else std::memcpy(out, p, k);
        out += k;
        // Read ahead as a NIC's DMA engine does: a long message's next packet gathers the bytes
        // after these (at most as many, and only the SGE's own), and the loads of a cold MR stall
        // the copy.
        if (k >= 512)
            for (uint64_t o = 0, ahead = std::min(k, rest); o < ahead; o += 64) __builtin_prefetch(p + k + o);
    });
    if (e != MrError::ok) dev_.counters().add(Counter::dma_access_errors);
    else dev_.counters().add(Counter::dma_bytes_read, dst.size());
    return e;
}

MrError DmaEngine::scatter(const PdObj* pd, const Sge* sgl, uint32_t n, uint64_t offset, std::span<const uint8_t> src) {
    // A range inside one SGE (a packet of a message mostly is): one check, one copy.
    uint64_t o = offset;
    uint32_t i = 0;
    while (i < n && o >= sgl[i].length) o -= sgl[i++].length;
    if (!src.empty() && i < n && src.size() <= sgl[i].length - o) {
        const MrObj* mr = dev_.mr_by_key(sgl[i].lkey);
        const MrError e = check_mr_access(mr, pd, sgl[i].addr + o, src.size(), access::local_write);
        if (e != MrError::ok) {
            dev_.counters().add(Counter::dma_access_errors);
            return e;
        }
        std::memcpy(mr->host + (sgl[i].addr + o - mr->iova), src.data(), src.size());
        dev_.counters().add(Counter::dma_bytes_written, src.size());
        return MrError::ok;
    }
    // Across SGEs: the whole range checked before a byte is written (a refused access writes nothing).
    MrError e = walk(dev_, pd, sgl, n, offset, src.size(), access::local_write, [](uint8_t*, uint64_t, uint64_t) {});
    if (e != MrError::ok) {
        dev_.counters().add(Counter::dma_access_errors);
        return e;
    }
    const uint8_t* in = src.data();
    walk(dev_, pd, sgl, n, offset, src.size(), access::local_write, [&](uint8_t* p, uint64_t k, uint64_t) {
        std::memcpy(p, in, k);
        in += k;
    });
    dev_.counters().add(Counter::dma_bytes_written, src.size());
    return MrError::ok;
}

MrError DmaEngine::remote_write(const PdObj* pd, uint32_t rkey, uint64_t va, std::span<const uint8_t> src) {
    const MrObj* mr = dev_.mr_by_key(rkey);
    const MrError e = check_mr_access(mr, pd, va, src.size(), access::remote_write);
    if (e != MrError::ok) {
        dev_.counters().add(Counter::dma_access_errors);
        return e;
    }
    if (!src.empty()) std::memcpy(mr->host + (va - mr->iova), src.data(), src.size());
    dev_.counters().add(Counter::dma_bytes_written, src.size());
    return MrError::ok;
}

MrError DmaEngine::remote_read(const PdObj* pd, uint32_t rkey, uint64_t va, std::span<uint8_t> dst, uint32_t* crc) {
    const MrObj* mr = dev_.mr_by_key(rkey);
    const MrError e = check_mr_access(mr, pd, va, dst.size(), access::remote_read);
    if (e != MrError::ok) {
        dev_.counters().add(Counter::dma_access_errors);
        return e;
    }
    const uint8_t* src = mr->host + (va - mr->iova);
    if (crc) *crc = pkt::crc32_copy(*crc, dst.data(), src, dst.size());
    else if (!dst.empty()) std::memcpy(dst.data(), src, dst.size());
    dev_.counters().add(Counter::dma_bytes_read, dst.size());
    return MrError::ok;
}

MrError DmaEngine::atomic(const PdObj* pd, uint32_t rkey, uint64_t va, AtomicOp op, uint64_t compare_add,
                          uint64_t swap, uint64_t& orig) {
    const MrObj* mr = dev_.mr_by_key(rkey);
    const MrError e = check_mr_access(mr, pd, va, 8, access::remote_atomic);
    if (e != MrError::ok) {
        dev_.counters().add(Counter::dma_access_errors);
        return e;
    }
    uint8_t* p = mr->host + (va - mr->iova);
    uint64_t v;
    std::memcpy(&v, p, 8);
    orig = v;
    if (op == AtomicOp::fetch_add) v += compare_add;
    else if (v == compare_add) v = swap;
    std::memcpy(p, &v, 8);
    dev_.counters().add(Counter::dma_bytes_read, 8);
    dev_.counters().add(Counter::dma_bytes_written, 8);
    return MrError::ok;
}

}  // namespace hcaemu
