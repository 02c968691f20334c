#include "dpdk_port/pcap_file.hpp"

#include <pcap/pcap.h>

namespace hcaemu::port {

PcapReader::PcapReader(const std::string& path) {
    char eb[PCAP_ERRBUF_SIZE] = {};
    p_ = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, eb);
    if (!p_) {
        err_ = path + ": " + eb;
        return;
    }
    linktype_ = pcap_datalink(p_);
    if (linktype_ != DLT_EN10MB) {
        const char* n = pcap_datalink_val_to_name(linktype_);
        err_ = path + ": link type " + std::to_string(linktype_) + " (" + (n ? n : "unknown") +
               ") is not Ethernet; only Ethernet (DLT_EN10MB) captures carry RoCE v2 frames here";
        pcap_close(p_);
        p_ = nullptr;
    }
}

PcapReader::~PcapReader() {
    if (p_) pcap_close(p_);
}

bool PcapReader::next(PcapFrame& f) {
    if (!p_) return false;
    pcap_pkthdr* h = nullptr;
    const u_char* d = nullptr;
    const int r = pcap_next_ex(p_, &h, &d);
    if (r == 1) {
        f.data = {d, h->caplen};
        f.orig_len = h->len;
        f.ts_ns = uint64_t(h->ts.tv_sec) * 1000000000ull + uint64_t(h->ts.tv_usec);  // nano precision
        return true;
    }
    if (r == PCAP_ERROR) err_ = pcap_geterr(p_);
    return false;
}

PcapWriter::PcapWriter(const std::string& path, uint32_t snaplen) {
    p_ = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, int(snaplen), PCAP_TSTAMP_PRECISION_NANO);
    if (!p_) {
        err_ = "pcap_open_dead failed";
        return;
    }
    d_ = pcap_dump_open(p_, path.c_str());
    if (!d_) err_ = pcap_geterr(p_);  // libpcap's message names the file
}

PcapWriter::~PcapWriter() {
    if (d_) pcap_dump_close(d_);
    if (p_) pcap_close(p_);
}

void PcapWriter::write(std::span<const uint8_t> frame, uint64_t ts_ns) {
    if (!d_) return;
    pcap_pkthdr h{};
    h.ts.tv_sec = time_t(ts_ns / 1000000000ull);
    h.ts.tv_usec = suseconds_t(ts_ns % 1000000000ull);  // nanoseconds with the nano precision
    h.caplen = h.len = uint32_t(frame.size());
    pcap_dump(reinterpret_cast<u_char*>(d_), &h, frame.data());
}

void PcapWriter::flush() {
    if (d_) pcap_dump_flush(d_);
}

}  // namespace hcaemu::port
