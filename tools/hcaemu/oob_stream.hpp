// The out-of-band link of `hcaemu perf`: perftest's messages over TCP (OobConn, oob_tcp.hpp) or,
// with -R, as SENDs on an RC QP that rdma_cm connected (CmStream, cm_link.hpp).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace hcaemu::tools {

class OobStream {
public:
    virtual ~OobStream() = default;
    // Exactly buf.size() bytes (over a QP: one message of that length), or false and `err`.
    virtual bool read_exact(std::span<uint8_t> buf, uint64_t timeout_ms, std::string& err) = 0;
    virtual bool write_all(std::span<const uint8_t> buf, uint64_t timeout_ms, std::string& err) = 0;
    // Called over and over while an operation waits (true: it did some work).
    virtual void set_idle(std::function<bool()> fn) = 0;
    // True after a read failed because the peer closed (or disconnected) the link.
    virtual bool peer_closed() const = 0;
};

}  // namespace hcaemu::tools
