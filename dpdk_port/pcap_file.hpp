// Reading and writing pcap files through libpcap (Ethernet link type). Used by `hcaemu dissect`,
// by `--pcap` capture and by the tests.
#pragma once
#include <cstdint>
#include <memory>
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

private:
    pcap* p_ = nullptr;
    pcap_dumper* d_ = nullptr;
    std::string err_;
};

}  // namespace hcaemu::port
