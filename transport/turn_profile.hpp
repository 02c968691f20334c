// Where an engine turn's time goes, step by step (`hcaemu perf --stats`, docs/benchmarks.md): for
// every turn that moved a frame, the time of each step of Hca::poll, kept as a histogram so that
// the median and the 90th percentile can be read (a mean is a few descheduled turns' figure).
// The receive steps count only turns whose receive burst brought frames, the transmit step only
// turns whose last burst sent some: an empty burst's time counts in the whole turn alone.
// Off unless asked for: on, it costs six clock reads a turn.
#pragma once
#include <array>
#include <cstdint>

namespace hcaemu::transport {

struct TurnProfile {
    enum Step : uint8_t { rx, receive, acks_timers, requesters, tx, whole, count };
    static constexpr const char* kStepName[count] = {"rx", "receive", "acks_timers", "requesters", "tx", "whole"};
    static constexpr uint32_t kBucketNs = 8, kBuckets = 2048;  // 0 to 16 us by 8 ns; the last: beyond
    static constexpr uint64_t kBeyondNs = uint64_t(kBuckets - 1) * kBucketNs;  // a quantile there: at least this

    struct Hist {
        std::array<uint32_t, kBuckets> n{};
        uint64_t sum_ns = 0, count = 0;
        void add(uint64_t ns) {
            ++n[ns / kBucketNs < kBuckets - 1 ? ns / kBucketNs : kBuckets - 1];
            sum_ns += ns;
            ++count;
        }
        uint64_t mean() const { return count ? sum_ns / count : 0; }
        // The q-quantile (0 < q < 1): its bucket's middle (kBeyondNs: beyond; 0: no sample).
        uint64_t quantile(double q) const {
            const uint64_t want = uint64_t(q * double(count));
            uint64_t seen = 0;
            for (uint32_t b = 0; b < kBuckets; ++b)
                if ((seen += n[b]) > want) return b == kBuckets - 1 ? kBeyondNs : uint64_t(b) * kBucketNs + kBucketNs / 2;
            return 0;
        }
    };
    std::array<Hist, count> step{};
    uint64_t turns = 0;   // turns that moved frames
    uint64_t frames = 0;  // frames they moved (received and sent)

    // One turn: t[0] its start, t[k + 1] the end of step k; `moved` its frames (0: not counted),
    // `received` whether its receive burst brought any, `flushed` whether its last burst sent any.
    void turn(const std::array<uint64_t, count>& t, size_t moved, bool received, bool flushed) {
        if (!moved) return;
        ++turns;
        frames += moved;
        for (uint8_t k = 0; k < whole; ++k)
            if ((k > receive || received) && (k != tx || flushed)) step[k].add(t[k + 1] - t[k]);
        step[whole].add(t[whole] - t[0]);
    }
};

}  // namespace hcaemu::transport
