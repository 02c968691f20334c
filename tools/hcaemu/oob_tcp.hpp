// The out-of-band TCP connection that ibv_rc_pingpong and perftest use to swap QP numbers, PSNs,
// GIDs and keys before any RoCE traffic: through the host kernel's sockets, with Boost.Asio.
// Every operation has a deadline, so a silent or vanished peer gives an error, never a hang.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "tools/hcaemu/oob_stream.hpp"

namespace hcaemu::tools {

class OobConn : public OobStream {
public:
    // Server: listens on `port` (every IPv4 and IPv6 address) and accepts one connection within
    // `timeout_ms`. nullptr and `err` on failure (port in use, nobody came).
    static std::unique_ptr<OobConn> accept(uint16_t port, uint64_t timeout_ms, std::string& err,
                                           std::function<bool()> idle = {});
    // Client: connects to host:port, trying again while the server is not yet listening, until
    // `timeout_ms` has passed.
    static std::unique_ptr<OobConn> connect(const std::string& host, uint16_t port, uint64_t timeout_ms,
                                            std::string& err, std::function<bool()> idle = {});
    ~OobConn() override;
    OobConn(const OobConn&) = delete;
    OobConn& operator=(const OobConn&) = delete;

    // Exactly buf.size() bytes, or false and `err` (closed by the peer, deadline passed).
    bool read_exact(std::span<uint8_t> buf, uint64_t timeout_ms, std::string& err) override;
    bool write_all(std::span<const uint8_t> buf, uint64_t timeout_ms, std::string& err) override;
    // Called over and over while an operation waits: an in-process HCA must keep polling its port
    // meanwhile (the peer may be resolving our MAC by ARP before it answers). Returns true when it
    // did some work; when it did none the wait sleeps briefly.
    void set_idle(std::function<bool()> fn) override { impl_idle_ = std::move(fn); }
    // True after a read failed because the peer closed the connection.
    bool peer_closed() const override { return peer_closed_; }
    // What the peer's address is, for messages.
    std::string peer() const;

    struct Impl;

private:
    explicit OobConn(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
    std::function<bool()> impl_idle_;
    bool peer_closed_ = false;
};

}  // namespace hcaemu::tools
