// perftest's result arithmetic and table lines (perftest_parameters.c: print_report_bw,
// print_full_bw_report, print_report_lat, print_report_lat_duration), on nanoseconds.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tools/hcaemu/perf.hpp"

namespace hcaemu::tools::perf {

namespace {

constexpr double kMB = 1048576.0;     // MB/sec is 2^20 bytes a second
constexpr double kGb = 125'000'000.0;  // Gb/sec: 10^9 bits
constexpr size_t kLatTail = 2;        // perftest leaves the two largest gaps out

double factor(bool gbits) { return gbits ? kGb : kMB; }

// Post i is the point (i, tposted[i]), completion j the point (j + 1, tcompleted[j]); the time per
// message from post i to completion j is the slope between them. For each completion the least
// slope to the posts before it is at the tangent to the upper hull of those posts (a line through
// the completion above every post), found by binary search: O(n log n) where perftest's loop over
// every pair takes n^2 / cq_mod steps (6.7 s at -n 1000000, minutes at 3000000).
struct Pt {
    int64_t x, y;
};
__extension__ typedef __int128 i128;  // a product of an iteration count and nanoseconds
// b - a against c - a: > 0 when a -> b -> c turns left (counter-clockwise)
i128 cross(const Pt& a, const Pt& b, const Pt& c) {
    return i128(b.x - a.x) * (c.y - a.y) - i128(b.y - a.y) * (c.x - a.x);
}
// slope(a, q) < slope(b, q), both points left of q
bool flatter(const Pt& a, const Pt& b, const Pt& q) {
    return i128(q.y - a.y) * (q.x - b.x) < i128(q.y - b.y) * (q.x - a.x);
}

}  // namespace

double peak_ns_per_msg(std::span<const uint64_t> tposted, std::span<const uint64_t> tcompleted, uint32_t cq_mod) {
    const size_t n = std::min(tposted.size(), tcompleted.size());
    if (n == 0) return 0;
    if (cq_mod == 0) cq_mod = 1;
    std::vector<Pt> hull;
    hull.reserve(64);
    double best = double(tcompleted[n - 1] - tposted[0]) / double(n);
    for (size_t j = 0; j < n; ++j) {
        const Pt p{int64_t(j), int64_t(tposted[j])};
        while (hull.size() >= 2 && cross(hull[hull.size() - 2], hull.back(), p) >= 0) hull.pop_back();
        hull.push_back(p);
        // signaled: every cq_mod-th WR, and the last one
        if (j % cq_mod != cq_mod - 1 && j != n - 1) continue;
        const Pt q{int64_t(j) + 1, int64_t(tcompleted[j])};
        size_t lo = 0, hi = hull.size() - 1;  // the slope to q falls, then rises, along the hull
        while (lo < hi) {
            const size_t mid = (lo + hi) / 2;
            if (flatter(hull[mid + 1], hull[mid], q)) lo = mid + 1;
            else hi = mid;
        }
        const Pt& h = hull[lo];
        best = std::min(best, double(q.y - h.y) / double(q.x - h.x));
    }
    return best;
}

BwReport compute_bw(std::span<const uint64_t> tposted, std::span<const uint64_t> tcompleted, uint64_t size,
                    uint32_t cq_mod, bool gbits) {
    BwReport r;
    r.size = size;
    const size_t n = std::min(tposted.size(), tcompleted.size());
    r.iters = n;
    if (n == 0) return r;
    // Peak: the shortest time per message over any run of messages from a post to a signaled
    // completion (every cq_mod-th WR, and the last one).
    const double best = peak_ns_per_msg(tposted, tcompleted, cq_mod);
    const double total_ns = double(tcompleted[n - 1] - tposted[0]);
    if (best > 0) r.bw_peak = double(size) * 1e9 / (best * factor(gbits));
    if (total_ns > 0) {
        r.bw_avg = double(size) * double(n) * 1e9 / (total_ns * factor(gbits));
        r.msg_rate = double(n) * 1e9 / (total_ns * 1e6);
    }
    return r;
}

BwReport compute_bw_total(uint64_t size, uint64_t iters, uint64_t ns, bool gbits) {
    BwReport r;
    r.size = size;
    r.iters = iters;
    if (ns > 0) {
        r.bw_avg = double(size) * double(iters) * 1e9 / (double(ns) * factor(gbits));
        r.msg_rate = double(iters) * 1e9 / (double(ns) * 1e6);
    }
    return r;
}

std::string bw_header(bool gbits) {
    return gbits ? " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
                 : " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n";
}

std::string bw_line(const BwReport& r, bool gbits) {
    char b[256];
    // Gb/s below 0.1 gets six decimals, as perftest's REPORT_FMT_EXT does.
    if (gbits && r.bw_avg < 0.1)
        std::snprintf(b, sizeof b, " %-7llu    %llu           %-7.6f            %-7.6f            %-7.6f\n",
                      static_cast<unsigned long long>(r.size), static_cast<unsigned long long>(r.iters), r.bw_peak,
                      r.bw_avg, r.msg_rate);
    else
        std::snprintf(b, sizeof b, " %-7llu    %-10llu       %-7.2f            %-7.2f\t\t   %-7.6f\n",
                      static_cast<unsigned long long>(r.size), static_cast<unsigned long long>(r.iters), r.bw_peak,
                      r.bw_avg, r.msg_rate);
    return b;
}

LatReport compute_lat(std::span<const uint64_t> tposted, uint64_t size, bool round_trip) {
    LatReport r;
    r.size = size;
    r.iters = tposted.size();
    if (tposted.size() < 3 + kLatTail) return r;
    std::vector<double> d(tposted.size() - 1);
    const double q = 1000.0 * (round_trip ? 2 : 1);  // ns to usec, one way
    for (size_t i = 0; i + 1 < tposted.size(); ++i) d[i] = double(tposted[i + 1] - tposted[i]) / q;
    std::sort(d.begin(), d.end());
    const size_t n = d.size() - kLatTail;
    // perftest's median: the middle one, or the mean of the two middle ones
    r.t_typical = (n - 1) % 2 ? (d[n / 2] + d[n / 2 - 1]) / 2 : d[n / 2];
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += d[i];
    r.t_avg = sum / double(n);
    double var = 0;
    for (size_t i = 0; i < n; ++i) var += (r.t_avg - d[i]) * (r.t_avg - d[i]);
    r.t_stdev = std::sqrt(var / double(n));
    r.t_min = d[0];
    r.t_max = d[n];  // as perftest indexes it: the largest one kept is d[n-1]; d[n] is the first dropped
    r.p99 = d[std::min(d.size() - 1, size_t(std::ceil(double(n) * 0.99)))];
    r.p99_9 = d[std::min(d.size() - 1, size_t(std::ceil(double(n) * 0.999)))];
    return r;
}

std::string lat_header(bool duration) {
    return duration ? " #bytes        #iterations       t_avg[usec]    tps average\n"
                    : " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
                      "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n";
}

std::string lat_line(const LatReport& r) {
    char b[256];
    std::snprintf(b, sizeof b, " %-7llu %llu          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
                  static_cast<unsigned long long>(r.size), static_cast<unsigned long long>(r.iters), r.t_min, r.t_max,
                  r.t_typical, r.t_avg, r.t_stdev, r.p99, r.p99_9);
    return b;
}

std::string lat_duration_line(uint64_t size, uint64_t iters, uint64_t ns, bool round_trip) {
    const double us = double(ns) / 1000.0;
    const double lat = iters ? us / (round_trip ? 2 : 1) / double(iters) : 0;
    const double tps = ns ? double(iters) / (double(ns) / 1e9) : 0;
    char b[160];
    std::snprintf(b, sizeof b, " %-7llu       %llu            %-7.2f        %-7.2f\n", static_cast<unsigned long long>(size),
                  static_cast<unsigned long long>(iters), lat, tps);
    return b;
}

}  // namespace hcaemu::tools::perf
