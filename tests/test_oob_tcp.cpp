// OobConn (tools/hcaemu/oob_tcp.*) against hostile or odd peers on loopback: nobody connects, a peer that
// connects and never writes, one that writes half a message and stalls, one that closes early,
// nobody listening. Each wait ends at its deadline with a message saying which of these happened;
// the idle hook runs while waiting. The peers are plain POSIX sockets in a thread.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "catch2/catch.hpp"
#include "tools/hcaemu/oob_tcp.hpp"

using hcaemu::tools::OobConn;

namespace {

// A port that was free a moment ago (bound to 0, then released).
uint16_t free_port() {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t l = sizeof a;
    REQUIRE(getsockname(s, reinterpret_cast<sockaddr*>(&a), &l) == 0);
    close(s);
    return ntohs(a.sin_port);
}

// Connects to 127.0.0.1:port, retrying while nobody listens yet (at most 400 x 10 ms).
int connect_retry(uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    for (int i = 0; i < 400; ++i) {
        const int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return s;
        close(s);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
}

// A client peer: connects, sends `send` bytes of 'x', then closes at once (`close_after`) or
// waits until `release` is set (at most 10 s) before closing.
struct Peer {
    std::atomic<bool> release{false};
    std::atomic<bool> connected{false};
    std::thread t;
    Peer(uint16_t port, size_t send, bool close_after) {
        t = std::thread([this, port, send, close_after] {
            const int s = connect_retry(port);
            if (s < 0) return;
            connected = true;
            std::string data(send, 'x');
            if (send) (void)!write(s, data.data(), data.size());
            for (int i = 0; !close_after && !release && i < 1000; ++i)
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            close(s);
        });
    }
    ~Peer() {
        release = true;
        t.join();
    }
};

}  // namespace

TEST_CASE("OobConn::accept: nobody connects: an error at the deadline, the idle hook polled meanwhile") {
    const uint16_t port = free_port();
    std::string err;
    int idles = 0;
    auto c = OobConn::accept(port, 300, err, [&] {
        ++idles;
        return false;
    });
    CHECK(c == nullptr);
    CHECK(err == "no client connected to TCP port " + std::to_string(port) + " within 0.3 s");
    CHECK(idles > 0);
}

TEST_CASE("OobConn::read_exact: a peer that connects and never writes") {
    const uint16_t port = free_port();
    Peer p(port, 0, false);
    std::string err;
    auto c = OobConn::accept(port, 5000, err);
    REQUIRE(c != nullptr);
    std::array<uint8_t, 52> msg{};
    int idles = 0;
    c->set_idle([&] {
        ++idles;
        return false;
    });
    CHECK_FALSE(c->read_exact(msg, 300, err));
    CHECK(err == "the peer sent nothing for 0.3 s (0 of 52 bytes came)");
    CHECK(idles > 0);
}

TEST_CASE("OobConn::read_exact: a peer that writes half a message and stalls") {
    const uint16_t port = free_port();
    Peer p(port, 26, false);
    std::string err;
    auto c = OobConn::accept(port, 5000, err);
    REQUIRE(c != nullptr);
    std::array<uint8_t, 52> msg{};
    CHECK_FALSE(c->read_exact(msg, 500, err));
    CHECK(err == "the peer stopped sending for 0.5 s (26 of 52 bytes came)");
}

TEST_CASE("OobConn::read_exact: a peer that closes early, after part of a message or none") {
    for (const size_t sent : {size_t(0), size_t(10)}) {
        const uint16_t port = free_port();
        Peer p(port, sent, true);
        std::string err;
        auto c = OobConn::accept(port, 5000, err);
        REQUIRE(c != nullptr);
        std::array<uint8_t, 52> msg{};
        CHECK_FALSE(c->read_exact(msg, 5000, err));
        CHECK(err == "the peer closed the connection (" + std::to_string(sent) + " of 52 bytes came)");
    }
}

TEST_CASE("OobConn: a whole message arrives byte for byte, and the peer's address is named") {
    const uint16_t port = free_port();
    Peer p(port, 52, false);
    std::string err;
    auto c = OobConn::accept(port, 5000, err);
    REQUIRE(c != nullptr);
    std::array<uint8_t, 52> msg{};
    REQUIRE(c->read_exact(msg, 5000, err));
    for (uint8_t b : msg) CHECK(b == 'x');
    CHECK(c->peer().rfind("127.0.0.1:", 0) == 0);
}

TEST_CASE("OobConn::connect: nobody listening: refused until the deadline") {
    const uint16_t port = free_port();
    std::string err;
    int idles = 0;
    auto c = OobConn::connect("127.0.0.1", port, 300, err, [&] {
        ++idles;
        return false;
    });
    CHECK(c == nullptr);
    CHECK(err == "cannot connect to 127.0.0.1:" + std::to_string(port) + " within 0.3 s (Connection refused)");
    CHECK(idles > 0);
}

TEST_CASE("OobConn::connect: a name that does not resolve") {
    std::string err;
    auto c = OobConn::connect("no-such-host.invalid", 18515, 300, err);
    CHECK(c == nullptr);
    CHECK(err.rfind("cannot resolve 'no-such-host.invalid': ", 0) == 0);
}

TEST_CASE("OobConn::connect: a server that accepts and never answers") {
    // A listening socket that nobody reads: the kernel completes the handshake (backlog).
    const int l = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(listen(l, 1) == 0);
    socklen_t len = sizeof a;
    REQUIRE(getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    std::string err;
    auto c = OobConn::connect("127.0.0.1", ntohs(a.sin_port), 5000, err);
    REQUIRE(c != nullptr);
    const std::array<uint8_t, 5> done = {'d', 'o', 'n', 'e', 0};
    CHECK(c->write_all(done, 1000, err));  // into the kernel's buffer
    std::array<uint8_t, 52> msg{};
    CHECK_FALSE(c->read_exact(msg, 300, err));
    CHECK(err == "the peer sent nothing for 0.3 s (0 of 52 bytes came)");
    close(l);
}
