// Where an engine turn's time goes, step by step (`hcaemu perf --stats`, docs/benchmarks.md): for
// every turn that moved a frame, the time of each step of Hca::poll, kept in a histogram so that
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
    // Buckets of 8 ns up to 16 us, then of 256 ns up to 1 ms; the last: beyond.
    static constexpr uint64_t kFineNs = 8, kFineEnd = 16384, kCoarseNs = 256, kEnd = 1'000'000;
    static constexpr uint32_t kBuckets = uint32_t(kFineEnd / kFineNs + (kEnd - kFineEnd + kCoarseNs - 1) / kCoarseNs + 1);
    static constexpr uint64_t kBeyondNs = kFineEnd + (kBuckets - 1 - kFineEnd / kFineNs) * kCoarseNs;  // at least this
    static constexpr uint32_t bucket(uint64_t ns) {
        return ns < kFineEnd ? uint32_t(ns / kFineNs)
               : ns < kBeyondNs ? uint32_t(kFineEnd / kFineNs + (ns - kFineEnd) / kCoarseNs)
                                : kBuckets - 1;
    }
    static constexpr uint64_t middle(uint32_t b) {  // of bucket b; kBeyondNs for the last
        return b < kFineEnd / kFineNs ? b * kFineNs + kFineNs / 2
               : b < kBuckets - 1     ? kFineEnd + (b - kFineEnd / kFineNs) * kCoarseNs + kCoarseNs / 2
                                      : kBeyondNs;
    }

    struct Hist {
        std::array<uint32_t, kBuckets> n{};
        uint64_t sum_ns = 0, count = 0;
        void add(uint64_t ns) {
            ++n[bucket(ns)];
            sum_ns += ns;
            ++count;
        }
        uint64_t mean() const { return count ? sum_ns / count : 0; }
        // The q-quantile (0 < q < 1): its bucket's middle (kBeyondNs: beyond; 0: no sample).
        uint64_t quantile(double q) const {
            const uint64_t want = uint64_t(q * double(count));
            uint64_t seen = 0;
            for (uint32_t b = 0; b < kBuckets; ++b)
                if ((seen += n[b]) > want) return middle(b);
            return 0;
        }
    };
    std::array<Hist, count> step{};
    uint64_t frames = 0;  // frames they moved (received and sent)
    uint64_t turns() const { return step[whole].count; }  // turns that moved frames

    // One turn: t[0] its start, t[k + 1] the end of step k; `moved` its frames (0: not counted),
    // `received` whether its receive burst brought any, `flushed` whether its last burst sent any.
    void turn(const std::array<uint64_t, count>& t, size_t moved, bool received, bool flushed) {
        if (!moved) return;
        frames += moved;
        for (uint8_t k = 0; k < whole; ++k)
            if ((k > receive || received) && (k != tx || flushed)) step[k].add(t[k + 1] - t[k]);
        step[whole].add(t[whole] - t[0]);
    }
};

}  // namespace hcaemu::transport
