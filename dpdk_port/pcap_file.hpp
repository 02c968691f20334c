// Reading and writing pcap files through libpcap (Ethernet link type). Used by `hcaemu dissect`,
// by `--pcap` capture and by the tests.
#pragma once
#include <cstdint>
#include <memory>
#include <cstdio>
#include <map>
#include <span>
#include <string>

struct pcap;
struct pcap_dumper;

namespace hcaemu::port {

struct PcapFrame {
    std::span<const uint8_t> data;  // valid until the next call to next()
    uint32_t orig_len = 0;          // length on the wire; larger than data.size() if snapped
    uint64_t ts_ns = 0;
};

class PcapReader {
public:
    // Opens `path`. On failure, ok() is false and error() says why (missing file, not a pcap,
    // a link type other than Ethernet).
    explicit PcapReader(const std::string& path);
    ~PcapReader();
    PcapReader(const PcapReader&) = delete;
    PcapReader& operator=(const PcapReader&) = delete;

    bool ok() const { return p_ != nullptr; }
    const std::string& error() const { return err_; }
    int linktype() const { return linktype_; }
    // Next frame; false at the end of the file or on a read error (then error() is set).
    bool next(PcapFrame& f);

private:
    pcap* p_ = nullptr;
    std::string err_;
    int linktype_ = -1;
};

class PcapWriter {
public:
    explicit PcapWriter(const std::string& path, uint32_t snaplen = 65535);
    ~PcapWriter();
    PcapWriter(const PcapWriter&) = delete;
    PcapWriter& operator=(const PcapWriter&) = delete;

    bool ok() const { return d_ != nullptr; }
    const std::string& error() const { return err_; }
    void write(std::span<const uint8_t> frame, uint64_t ts_ns);
    void flush();
    uint64_t frames() const { return frames_; }  // records written; the next is frames() + 1

    // Notes on frames (event injection, docs/inject.md): classic pcap has no comments, so they go
    // to a side-car text file, notes_path(path), one "FRAME<TAB>#ID RULE: WHAT" line each (FRAME
    // 1-based, as dissect numbers frames). Opened by enable_notes() (before traffic); note() is
    // buffered stdio, no allocation.
    bool enable_notes();
    bool notes_enabled() const { return notes_ != nullptr; }
    void note(uint64_t frame, uint32_t id, const char* rule, const char* what);
    // A received frame is stamped when its poll returns; it may have arrived up to `late_ns`
    // before (since the last poll that emptied the ring). Noted (kLateNote) so that a judge of
    // intervals between received frames (conform's cnp.pacing) does not take the poll for the wire.
    void note_late(uint64_t frame, uint64_t late_ns);

private:
    pcap* p_ = nullptr;
    pcap_dumper* d_ = nullptr;
    std::string err_;
    std::string path_;
    uint64_t frames_ = 0;
    std::FILE* notes_ = nullptr;
};

std::string notes_path(const std::string& pcap_path);  // FILE.pcap -> FILE.pcap.notes
// How note_late()'s line starts ("capture: stamped up to N ns after it arrived (when polled)").
inline constexpr const char* kLateNote = "capture: stamped up to ";
// The injection's notes of a capture by frame number (several lines for one frame joined by "; ");
// empty when there is no side-car file. `late`: the capture's late stamps (note_late), in ns.
std::map<uint64_t, std::string> read_notes(const std::string& pcap_path, std::map<uint64_t, uint64_t>* late = nullptr);

}  // namespace hcaemu::port
