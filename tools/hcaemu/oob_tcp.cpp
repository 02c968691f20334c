#include "tools/hcaemu/oob_tcp.hpp"

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it

#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <thread>

#include "tools/hcaemu/stop.hpp"

namespace hcaemu::tools {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

struct OobConn::Impl {
    asio::io_context io;
    tcp::socket sock{io};
};

namespace {

// "2 s", "0.3 s": a deadline for messages.
std::string secs(uint64_t ms) {
    if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
    char b[32];
    std::snprintf(b, sizeof b, "%.1f s", double(ms) / 1000.0);
    return b;
}

// Runs the io_context until `done`, the deadline or a stop signal (tools/hcaemu/stop.hpp), calling
// `idle` in between; then cancels `s` and waits for the cancelled handlers (they run, and set
// `done`, with operation_aborted). False when the deadline or the stop came first. The run goes in
// slices of at most 20 ms, so a stop is seen that soon even while the socket is silent (a signal's
// EINTR does not end Asio's wait).
template <class Closable>
bool run_until(asio::io_context& io, Closable& s, const bool& done, uint64_t timeout_ms,
               const std::function<bool()>& idle = {}) {
    io.restart();
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    // While `idle` reports work done, it runs again at once and the socket (an epoll_wait system
    // call) and the clock are looked at every kSocketEvery turns only: polling them every turn was
    // a fifth of a write_bw server's time, which waits here for the client's barrier.
    constexpr uint32_t kSocketEvery = 64;
    uint32_t turn = 0;
    bool busy = false;
    while (!done && !stop_requested()) {
        if (busy && ++turn % kSocketEvery != 0) {
            busy = idle();
            continue;
        }
        const auto now = std::chrono::steady_clock::now();
        if (now >= end) break;
        if (!idle) {
            io.run_for(std::min<std::chrono::steady_clock::duration>(end - now, std::chrono::milliseconds(20)));
        } else {
            const size_t ran = io.poll();
            if (io.stopped()) io.restart();
            busy = !done && idle();
            if (!done && !busy && !ran) io.run_for(std::chrono::microseconds(100));
        }
        if (io.stopped()) io.restart();
    }
    if (done) return true;
    error_code ignored;
    s.cancel(ignored);
    io.restart();
    io.run();
    return false;
}

constexpr const char* kInterrupted = "interrupted by a signal";

}  // namespace

OobConn::OobConn(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OobConn::~OobConn() {
    if (impl_) {
        error_code ignored;
        impl_->sock.shutdown(tcp::socket::shutdown_both, ignored);
        impl_->sock.close(ignored);
    }
}

std::unique_ptr<OobConn> OobConn::accept(uint16_t port, uint64_t timeout_ms, std::string& err,
                                         std::function<bool()> idle) {
    auto impl = std::make_unique<Impl>();
    error_code ec;
    tcp::acceptor acc(impl->io);
    // One IPv6 socket that also takes IPv4 (v4-mapped), as a dual-stack listener.
    tcp::endpoint ep(tcp::v6(), port);
    acc.open(ep.protocol(), ec);
    if (!ec) acc.set_option(asio::ip::v6_only(false), ec);
    if (ec) {  // no IPv6 on this host: IPv4 only
        acc.close(ec);
        ep = tcp::endpoint(tcp::v4(), port);
        acc.open(ep.protocol(), ec);
    }
    if (!ec) acc.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acc.bind(ep, ec);
    if (!ec) acc.listen(1, ec);
    if (ec) {
        err = "cannot listen on TCP port " + std::to_string(port) + ": " + ec.message();
        return nullptr;
    }
    bool done = false;
    error_code aec;
    acc.async_accept(impl->sock, [&](const error_code& e) {
        aec = e;
        done = true;
    });
    if (!run_until(impl->io, acc, done, timeout_ms, idle) || aec) {
        err = stop_requested() ? kInterrupted
              : aec && aec != asio::error::operation_aborted
                  ? "accept on TCP port " + std::to_string(port) + ": " + aec.message()
                  : "no client connected to TCP port " + std::to_string(port) + " within " + secs(timeout_ms);
        return nullptr;
    }
    impl->sock.set_option(tcp::no_delay(true), ec);
    auto c = std::unique_ptr<OobConn>(new OobConn(std::move(impl)));
    c->set_idle(std::move(idle));
    return c;
}

std::unique_ptr<OobConn> OobConn::connect(const std::string& host, uint16_t port, uint64_t timeout_ms,
                                          std::string& err, std::function<bool()> idle) {
    auto impl = std::make_unique<Impl>();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    error_code ec;
    tcp::resolver res(impl->io);
    const auto eps = res.resolve(host, std::to_string(port), tcp::resolver::numeric_service, ec);
    if (ec || eps.empty()) {
        err = "cannot resolve '" + host + "': " + (ec ? ec.message() : "no address");
        return nullptr;
    }
    std::string last = "timed out";
    for (;;) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline || stop_requested()) break;
        const auto left = uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count());
        bool done = false;
        error_code cec;
        asio::async_connect(impl->sock, eps, [&](const error_code& e, const tcp::endpoint&) {
            cec = e;
            done = true;
        });
        const bool in_time = run_until(impl->io, impl->sock, done, std::max<uint64_t>(left, 1), idle);
        if (in_time && !cec) {
            impl->sock.set_option(tcp::no_delay(true), ec);
            auto c = std::unique_ptr<OobConn>(new OobConn(std::move(impl)));
            c->set_idle(std::move(idle));
            return c;
        }
        last = in_time && cec ? cec.message() : "timed out";
        impl->sock.close(ec);
        // The server may not be listening yet (it starts in parallel): try again shortly.
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
        while (std::chrono::steady_clock::now() < until && !stop_requested())
            if (!idle || !idle()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (stop_requested()) {
        err = kInterrupted;
        return nullptr;
    }
    err = "cannot connect to " + host + ":" + std::to_string(port) + " within " + secs(timeout_ms) + " (" + last + ")";
    return nullptr;
}

bool OobConn::read_exact(std::span<uint8_t> buf, uint64_t timeout_ms, std::string& err) {
    bool done = false;
    error_code rec;
    size_t got = 0;
    asio::async_read(impl_->sock, asio::buffer(buf.data(), buf.size()), [&](const error_code& e, size_t n) {
        rec = e;
        got = n;
        done = true;
    });
    const bool in_time = run_until(impl_->io, impl_->sock, done, timeout_ms, impl_idle_);
    const std::string part = " (" + std::to_string(got) + " of " + std::to_string(buf.size()) + " bytes came)";
    if (!in_time) {
        err = stop_requested() ? kInterrupted + part : (got ? "the peer stopped sending for " : "the peer sent nothing for ") + secs(timeout_ms) + part;
        return false;
    }
    if (rec) {
        peer_closed_ = rec == asio::error::eof || rec == asio::error::connection_reset;
        err = (peer_closed_ ? std::string("the peer closed the connection") : "read: " + rec.message()) + part;
        return false;
    }
    return true;
}

bool OobConn::write_all(std::span<const uint8_t> buf, uint64_t timeout_ms, std::string& err) {
    bool done = false;
    error_code wec;
    asio::async_write(impl_->sock, asio::buffer(buf.data(), buf.size()), [&](const error_code& e, size_t) {
        wec = e;
        done = true;
    });
    if (!run_until(impl_->io, impl_->sock, done, timeout_ms, impl_idle_)) {
        err = stop_requested() ? kInterrupted : "the peer took nothing for " + secs(timeout_ms);
        return false;
    }
    if (wec) {
        err = "write: " + wec.message();
        return false;
    }
    return true;
}

std::string OobConn::peer() const {
    error_code ec;
    const auto ep = impl_->sock.remote_endpoint(ec);
    if (ec) return "?";
    auto a = ep.address();
    if (a.is_v6() && a.to_v6().is_v4_mapped()) a = asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
    return a.to_string() + ":" + std::to_string(ep.port());
}

}  // namespace hcaemu::tools
