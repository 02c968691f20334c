#include "dpdk_port/pcap_file.hpp"

#include <pcap/pcap.h>

#include <cstdlib>
#include <cstring>

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

PcapWriter::PcapWriter(const std::string& path, uint32_t snaplen) : path_(path) {
    p_ = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, int(snaplen), PCAP_TSTAMP_PRECISION_NANO);
    if (!p_) {
        err_ = "pcap_open_dead failed";
        return;
    }
    d_ = pcap_dump_open(p_, path.c_str());
    if (!d_) err_ = pcap_geterr(p_);  // libpcap's message names the file
}

PcapWriter::~PcapWriter() {
    if (notes_) std::fclose(notes_);
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
    ++frames_;
}

void PcapWriter::flush() {
    if (d_) pcap_dump_flush(d_);
    if (notes_) std::fflush(notes_);
}

bool PcapWriter::enable_notes() {
    if (!notes_ && d_) notes_ = std::fopen(notes_path(path_).c_str(), "w");
    return notes_ != nullptr;
}

void PcapWriter::note(uint64_t frame, uint32_t id, const char* rule, const char* what) {
    if (!notes_) return;
    std::fprintf(notes_, "%llu\tinjected: #%u%s%s: %s\n", static_cast<unsigned long long>(frame), id, rule ? " " : "",
                 rule ? rule : "", what);
}

void PcapWriter::note_late(uint64_t frame, uint64_t late_ns) {
    if (!notes_) return;
    std::fprintf(notes_, "%llu\t%s%llu ns after it arrived (when polled)\n", static_cast<unsigned long long>(frame),
                 kLateNote, static_cast<unsigned long long>(late_ns));
}

std::string notes_path(const std::string& pcap_path) { return pcap_path + ".notes"; }

std::map<uint64_t, std::string> read_notes(const std::string& pcap_path, std::map<uint64_t, uint64_t>* late) {
    std::map<uint64_t, std::string> out;
    std::FILE* f = std::fopen(notes_path(pcap_path).c_str(), "r");
    if (!f) return out;
    char line[1024];
    while (std::fgets(line, sizeof line, f)) {
        char* tab = std::strchr(line, '\t');
        if (!tab) continue;
        *tab = 0;
        char* end = nullptr;
        const unsigned long long n = std::strtoull(line, &end, 10);
        if (end == line || *end) continue;
        std::string text = tab + 1;
        while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
        if (text.starts_with(kLateNote)) {
            if (late) (*late)[n] = std::strtoull(text.c_str() + std::strlen(kLateNote), nullptr, 10);
            continue;
        }
        std::string& slot = out[n];
        slot += slot.empty() ? text : "; " + text;
    }
    std::fclose(f);
    return out;
}

}  // namespace hcaemu::port
