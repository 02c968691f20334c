// `hcaemu perf`: perftest's ib_{write,read,send,atomic}_{bw,lat} on an hcaemu HCA, speaking
// perftest's out-of-band protocol (version "6.06", Debian 12's perftest 4.5-0.17) so that either
// side can be the unmodified tool. This part knows no DPDK: it takes an api::Context (the HCA in this
// process or in hcaemud) and an OobConn; tools/cmd_perf.cpp opens the device.
//
// Who does what (perftest's src/*_bw.c, *_lat.c, perftest_resources.c):
//   write/read/atomic bw: the client posts, the server only waits on the barrier, then prints the
//     client's results it receives; send bw: the server posts receives and measures too.
//   write lat: both sides ping-pong RDMA WRITEs, each polling the last byte of its buffer;
//   send lat: both ping-pong SENDs; read/atomic lat: the client alone.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "hca_model/device.hpp"
#include "tools/libhcaemu/api.hpp"

#include <sys/socket.h>

namespace hcaemu::tools {
class OobStream;
class CmLink;
}

namespace hcaemu::tools::perf {

enum class Verb : uint8_t { send, write, read, atomic };  // perftest's testsStr order
enum class Kind : uint8_t { bw, lat };
enum class AtomicOp : uint8_t { cmp_and_swap, fetch_and_add };

// -q's upper bound: QPs of one test (each takes two buffers of the largest message, at least 4 KiB).
inline constexpr uint32_t kMaxQps = 16384;

struct Options {
    Verb verb = Verb::write;
    Kind kind = Kind::bw;
    std::string server;            // empty: this side is the server
    uint16_t tcp_port = 18515;     // -p
    std::string dev_name = "hcaemu0";  // -d: a name to print (there is one device)
    uint8_t ib_port = 1;           // -i
    int gid_index = -1;            // -x; -1: the attached address's index
    uint64_t size = 0;             // -s
    bool size_given = false;       // -s was given: UD refuses a size above the MTU instead of lowering it
    uint64_t iters = 0;            // -n
    bool all_sizes = false;        // -a: 2 B .. 8 MiB, powers of two
    uint32_t duration = 0;         // -D seconds; 0: -n iterations
    uint32_t num_qps = 1;          // -q
    uint32_t mtu = 0;              // -m bytes; 0: the port's active MTU
    uint32_t tx_depth = 0;         // -t
    uint32_t rx_depth = 0;         // -r
    uint32_t cq_mod = 0;           // -Q
    uint8_t qp_timeout = 14;       // -u: Local ACK Timeout, 4.096 us * 2^N (perftest's default 14)
    uint32_t out_reads = 0;        // -o
    AtomicOp atomic = AtomicOp::fetch_and_add;  // -A
    QpType conn = QpType::rc;      // -c
    bool gbits = false;            // --report_gbits
    bool check = false;            // --check (hcaemu's own): verify the data that arrived
    bool stats = false;            // --stats (hcaemu's own): the non-zero counters on stderr at the end
    std::string dump;              // --dump PREFIX (hcaemu's own): PREFIX.json and PREFIX.bin at the end
    uint64_t oob_timeout_ms = 60'000;  // --oob-timeout SEC: connect, accept, every read; a stall
    bool rdma_cm = false;          // -R: the QPs connected by rdma_cm, the exchange over rdma_cm too
};

// Parses perftest's flags. argv[0] is the test name (write_bw ...). Arguments this parser does not
// know go to `other` (the attach options), which returns 1 taken, 0 unknown, -1 bad (with err).
// False and `err` on bad arguments.
using OtherOption = std::function<int(int argc, char** argv, int& i, std::string& err)>;
bool parse_options(int argc, char** argv, Options& o, const OtherOption& other, std::string& err);
extern const char* const kPerfHelp;
// --dump: the most record bytes (messages' bytes) a run may keep; more is refused (exit 2)
constexpr uint64_t kDumpMaxRecordBytes = 64ull << 20;

// ---- results, computed as perftest computes them, from steady-clock nanoseconds ----

struct BwReport {
    uint64_t size = 0;
    uint64_t iters = 0;
    double bw_peak = 0;   // MB/s (2^20 B) or Gb/s
    double bw_avg = 0;
    double msg_rate = 0;  // Mpps
};
// tposted[i]: when WR i was posted; tcompleted[j]: when the completion covering WR j was seen, set
// at the signaled ones (every cq_mod-th and the last). Peak: the best (tcompleted[j]-tposted[i])
// / (j-i+1) over i and every signaled j >= i; average over the whole run.
// perftest's peak: the least time per message from post i to a signaled completion j >= i
// ((tcompleted[j] - tposted[i]) / (j - i + 1); signaled: j % cq_mod == cq_mod - 1, and the last).
double peak_ns_per_msg(std::span<const uint64_t> tposted, std::span<const uint64_t> tcompleted, uint32_t cq_mod);
BwReport compute_bw(std::span<const uint64_t> tposted, std::span<const uint64_t> tcompleted, uint64_t size,
                    uint32_t cq_mod, bool gbits);
// Duration runs and the send server: no peak, the average over `ns`.
BwReport compute_bw_total(uint64_t size, uint64_t iters, uint64_t ns, bool gbits);
std::string bw_header(bool gbits);             // the " #bytes ..." line with its newline
std::string bw_line(const BwReport& r, bool gbits);

struct LatReport {
    uint64_t size = 0;
    uint64_t iters = 0;
    double t_min = 0, t_max = 0, t_typical = 0, t_avg = 0, t_stdev = 0, p99 = 0, p99_9 = 0;  // usec
};
// From the post times of a ping-pong: the iters-1 gaps, halved for round trips (write, send),
// sorted, the two largest dropped as perftest drops them; median, mean, deviation, percentiles.
LatReport compute_lat(std::span<const uint64_t> tposted, uint64_t size, bool round_trip);
std::string lat_header(bool duration);
std::string lat_line(const LatReport& r);
std::string lat_duration_line(uint64_t size, uint64_t iters, uint64_t ns, bool round_trip);

// The byte hcaemu puts at `off` of a source buffer, so that the other side can check what arrived
// (--check) without being told. Every bit of `off` is mixed in (splitmix64's finaliser): a packet
// placed at another offset of the buffer does not carry the right bytes by chance.
inline uint8_t pattern_byte(uint64_t off) {
    uint64_t x = off + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return uint8_t(x ^ (x >> 31));
}

// What the test needs from the device.
struct Env {
    api::Context* ctx = nullptr;   // resources, the engine (ctx->poll()), the GID, resolve
    uint64_t resolve_timeout_ms = 60'000;
    FILE* out = stdout;
    // --stats: the longest time between two engine turns (ctx->poll()) of one wait. A process
    // left off its CPU for more than retry_cnt + 1 ACK timeouts fails its peer's RC QP.
    uint64_t max_turn_gap_ns = 0;
    // --stats: the engine's load in the test's last phase (a size's run, or the server's wait for
    // the client's), from the first turn that moved a frame to the last one: the time spent in
    // turns that moved frames (busy) and in turns that moved none (idle); the rest of the span is
    // the program's own (posting, the CQ). Two clock reads a turn: --stats costs a little speed.
    struct Load {
        uint64_t first_ns = 0, last_ns = 0, busy_ns = 0, idle_ns = 0, busy_turns = 0, idle_turns = 0, frames = 0;
        uint64_t pending_ns = 0, pending_turns = 0;  // idle turns since the last busy one
        void turn(uint64_t t0, uint64_t t1, size_t moved) {
            if (!moved) {
                pending_ns += t1 - t0;
                ++pending_turns;
                return;
            }
            if (first_ns) {  // idle turns count between busy ones only: not setup, not the end
                idle_ns += pending_ns;
                idle_turns += pending_turns;
            } else {
                first_ns = t0;
            }
            pending_ns = pending_turns = 0;
            busy_ns += t1 - t0;
            ++busy_turns;
            frames += moved;
            last_ns = t1;
        }
    } load;
    // -R: the CM that connects the test's QPs, and where: the server's listening address (the
    // wildcard, the test's port) or the client's destination (HOST, the test's port).
    CmLink* cm = nullptr;
    sockaddr_storage cm_addr{};
};

// Runs the whole test over `conn` (already connected or accepted). Returns the exit status
// (0, or 1 with `err`: the peer's protocol, version, a stalled or failed transfer, a data check).
int run(const Options& o, Env& env, OobStream& conn, std::string& err);

}  // namespace hcaemu::tools::perf
