// The responder's rules packet by packet: a hand-driven peer (tests/raw_peer.hpp) sends requests
// field by field and the test checks every response the HCA sends, its PSN, syndrome and MSN.
#include <catch2/catch.hpp>

#include <cstring>

#include "tests/raw_peer.hpp"

using namespace hcaemu;
using test::RawPeer;
namespace op = pkt::op;

TEST_CASE("raw peer: a WRITE Only with AckReq is placed and acknowledged with its PSN and MSN 1",
          "[responder]") {
    RawPeer r;
    REQUIRE(r.connected);
    std::vector<uint8_t> data(100);
    for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 7 + 1);
    pkt::Headers h = r.req(op::write_only, r.cfg.sq_psn[1], true);
    h.reth = {r.addr(256), r.rkey(), uint32_t(data.size())};
    REQUIRE(r.send(h, data));
    auto out = r.run();
    REQUIRE(out.size() == 1);
    CHECK(out[0].opcode() == op::acknowledge);
    CHECK(out[0].psn() == r.cfg.sq_psn[1]);
    CHECK(out[0].msn() == 1);
    CHECK((out[0].syndrome() >> 5) == 0);  // an ACK
    CHECK(std::memcmp(r.mem() + 256, data.data(), data.size()) == 0);
}
