// The ladder as SVG: lanes left to right, one row per arrow top to bottom, no scripts, no fonts
// or anything else from outside the file (font-family "monospace" is the reader's own).
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "packet/opcode.hpp"
#include "tools/ladder/ladder.hpp"

namespace hcaemu::ladder {

namespace {

constexpr double kFont = 11;          // px
constexpr double kCharW = 6.7;        // a monospace character at 11 px, a little generous
constexpr double kLeft = 170;         // the time column
constexpr double kTop = 88;           // the first row's arrow
constexpr double kRow = 44;
constexpr double kGapRow = 26;
constexpr double kSlant = 10;         // an arrow drops this much: the packet takes time to cross

constexpr const char* kReqColour = "#1f4e9c";
constexpr const char* kRespColour = "#2e7d32";
constexpr const char* kNakColour = "#c62828";
constexpr const char* kRnrColour = "#e65100";
constexpr const char* kBadColour = "#6a1b9a";
constexpr const char* kCnpColour = "#00838f";
constexpr const char* kCrossColour = "#d50000";

std::string esc(const std::string& s) {
    std::string o;
    for (char c : s) {
        switch (c) {
        case '&': o += "&amp;"; break;
        case '<': o += "&lt;"; break;
        case '>': o += "&gt;"; break;
        case '"': o += "&quot;"; break;
        default:
            if (static_cast<unsigned char>(c) >= 0x20 || c == '\t') o += c;
        }
    }
    return o;
}

std::string num(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f", v);
    return b;
}

std::string duration(uint64_t ns) {
    char b[32];
    if (ns < 1000) std::snprintf(b, sizeof b, "%" PRIu64 " ns", ns);
    else if (ns < 1'000'000) std::snprintf(b, sizeof b, "%.3g us", double(ns) / 1e3);
    else if (ns < 1'000'000'000) std::snprintf(b, sizeof b, "%.3g ms", double(ns) / 1e6);
    else std::snprintf(b, sizeof b, "%.4g s", double(ns) / 1e9);
    return b;
}

std::string stamp(uint64_t ns) {
    char b[32];
    if (ns < 1'000'000) std::snprintf(b, sizeof b, "+%.3f us", double(ns) / 1e3);
    else if (ns < 10'000'000'000ull) std::snprintf(b, sizeof b, "+%.3f ms", double(ns) / 1e6);
    else std::snprintf(b, sizeof b, "+%.3f s", double(ns) / 1e9);
    return b;
}

const char* colour(const Arrow& a) {
    if (a.malformed && a.error != pkt::ParseError::bad_icrc) return kBadColour;
    if (a.syndrome == Syndrome::nak) return kNakColour;
    if (a.syndrome == Syndrome::rnr_nak) return kRnrColour;
    if (a.opcode == pkt::op::cnp) return kCnpColour;
    if (a.malformed) return kBadColour;
    return a.request ? kReqColour : kRespColour;
}

std::string classes(const Arrow& a) {
    std::string c = "arrow ";
    c += a.request ? "req" : a.opcode == pkt::op::cnp ? "cnp" : "resp";
    if (a.syndrome == Syndrome::nak) c += " nak";
    if (a.syndrome == Syndrome::rnr_nak) c += " rnr";
    if (a.retx) c += " retx";
    if (a.dup) c += " dup";
    if (a.lost) c += " lost";
    if (a.malformed) c += " bad";
    return c;
}

struct Layout {
    double spacing = 240;
    double width = 0, height = 0;
    std::vector<double> row_y;  // per arrow: its start's y
    double rows_end = 0;
    double lane_x(uint32_t i) const { return kLeft + 40 + spacing * i; }
};

Layout layout(const Ladder& l) {
    Layout lo;
    for (const auto& a : l.arrows) {
        const double span = std::max<double>(1, std::abs(int(a.to) - int(a.from)));
        const size_t chars = std::max(a.label.size(), a.note.size());
        lo.spacing = std::max(lo.spacing, (double(chars) * kCharW + 50) / span);
    }
    for (const auto& ln : l.lanes) lo.spacing = std::max(lo.spacing, double(ln.name.size()) * kCharW + 20);
    lo.spacing = std::min(lo.spacing, 640.0);
    double y = kTop;
    size_t g = 0;
    for (size_t i = 0; i < l.arrows.size(); ++i) {
        if (g < l.gaps.size() && l.gaps[g].before == i) {
            y += kGapRow;
            ++g;
        }
        lo.row_y.push_back(y);
        y += kRow;
    }
    lo.rows_end = y;
    const double lanes_w = kLeft + 40 + lo.spacing * double(l.lanes.empty() ? 0 : l.lanes.size() - 1) + 110;
    lo.width = std::max(lanes_w, 760.0);
    lo.height = y + 240;
    return lo;
}

void line(std::string& o, double x1, double y1, double x2, double y2, const char* stroke, double w, const char* dash) {
    o += "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) + "\" stroke=\"" +
         stroke + "\" stroke-width=\"" + num(w) + "\"";
    if (dash && *dash) o += std::string(" stroke-dasharray=\"") + dash + "\"";
    o += "/>";
}

void text(std::string& o, double x, double y, const std::string& s, const char* cls, const char* anchor, const char* fill,
          const char* extra = "") {
    o += std::string("<text class=\"") + cls + "\" x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor +
         "\" fill=\"" + fill + "\"" + extra + ">" + esc(s) + "</text>";
}

void head(std::string& o, double x1, double y1, double x2, double y2, const char* fill) {
    const double dx = x2 - x1, dy = y2 - y1, len = std::sqrt(dx * dx + dy * dy);
    if (len <= 0) return;
    const double ux = dx / len, uy = dy / len, L = 9, W = 4;
    const double bx = x2 - ux * L, by = y2 - uy * L;
    o += "<polygon points=\"" + num(x2) + "," + num(y2) + " " + num(bx - uy * W) + "," + num(by + ux * W) + " " +
         num(bx + uy * W) + "," + num(by - ux * W) + "\" fill=\"" + fill + "\"/>";
}

void cross(std::string& o, double x, double y) {
    line(o, x - 5, y - 5, x + 5, y + 5, kCrossColour, 2.5, "");
    line(o, x - 5, y + 5, x + 5, y - 5, kCrossColour, 2.5, "");
}

// One arrow: the line (dashed when retransmitted or a copy), its head or, when lost, a cross
// part-way, the label above and the note below.
void arrow(std::string& o, const Ladder& l, const Layout& lo, size_t i) {
    const Arrow& a = l.arrows[i];
    const double x1 = lo.lane_x(a.from), x2 = lo.lane_x(a.to), y1 = lo.row_y[i], y2 = y1 + kSlant;
    const char* c = colour(a);
    o += "<g class=\"" + classes(a) + "\" data-frame=\"" + std::to_string(a.frame) + "\">";
    std::string tip = "frame " + std::to_string(a.frame);
    if (a.frame_last != a.frame) tip += "-" + std::to_string(a.frame_last);
    tip += ", " + stamp(a.t_ns) + ": " + l.lanes[a.from].name + " -> " + l.lanes[a.to].name + ": " + a.label;
    if (!a.note.empty()) tip += " (" + a.note + ")";
    o += "<title>" + esc(tip) + "</title>";
    const char* dash = a.retx || a.dup ? "7 4" : "";
    if (a.lost) {
        const double f = 0.6, xe = x1 + (x2 - x1) * f, ye = y1 + kSlant * f;
        line(o, x1, y1, xe, ye, c, 1.6, dash);
        cross(o, xe, ye);
    } else {
        line(o, x1, y1, x2, y2, c, 1.6, dash);
        head(o, x1, y1, x2, y2, c);
    }
    const double xm = (x1 + x2) / 2, ym = (y1 + y2) / 2;
    text(o, xm, ym - 9, a.label, "label", "middle", c);
    if (!a.note.empty()) text(o, xm, ym + 17, a.note, "note", "middle", c, " font-style=\"italic\"");
    o += "</g>\n";
    // The time column: frame number and time since the first frame.
    std::string when = "#" + std::to_string(a.frame);
    if (a.frame_last != a.frame) when += "-" + std::to_string(a.frame_last);
    text(o, 12, y1 + 4, when, "frame", "start", "#444");
    text(o, kLeft - 8, y1 + 4, stamp(a.t_ns), "time", "end", "#444");
}

// A dotted line on the responder's lane from the request's arrival to the answer's departure.
void tie(std::string& o, const Ladder& l, const Layout& lo, size_t i) {
    const Arrow& a = l.arrows[i];
    if (a.answers < 0 || size_t(a.answers) >= i) return;
    const Arrow& q = l.arrows[size_t(a.answers)];
    if (q.to != a.from) return;
    const double x = lo.lane_x(a.from), side = lo.lane_x(a.to) > x ? 5 : -5;
    o += "<g class=\"tie\">";
    line(o, x + side, lo.row_y[size_t(a.answers)] + kSlant, x + side, lo.row_y[i], colour(a), 1, "2 3");
    o += "</g>\n";
}

void legend(std::string& o, const Layout& lo, const Ladder& l) {
    double y = lo.rows_end + 20;
    o += "<g class=\"legend\">";
    text(o, 12, y, "Legend", "legend-title", "start", "#000", " font-weight=\"bold\"");
    struct Item {
        const char* colour;
        const char* dash;
        bool lost;
        const char* what;
    };
    const Item items[] = {
        {kReqColour, "", false, "request (SEND, WRITE, READ request, atomic)"},
        {kRespColour, "", false, "response: ACK, READ response, atomic ACK"},
        {kNakColour, "", false, "NAK (its code)"},
        {kRnrColour, "", false, "RNR NAK (its timer)"},
        {kReqColour, "7 4", false, "retx: PSN seen before in that direction; dup: a byte-identical copy"},
        {kReqColour, "", true, "never arrived (lost on the wire)"},
        {kRespColour, "2 3", false, "dotted on a lane: the request this answers"},
        {kBadColour, "", false, "malformed or bad ICRC"},
    };
    for (size_t k = 0; k < std::size(items); ++k) {
        const double x = 12, yy = y + 20 + 18 * double(k);
        const Item& it = items[k];
        if (std::string(it.dash) == "2 3") {
            line(o, x + 20, yy - 8, x + 20, yy + 4, it.colour, 1, it.dash);
        } else if (it.lost) {
            line(o, x, yy - 2, x + 28, yy - 2, it.colour, 1.6, "");
            cross(o, x + 28, yy - 2);
        } else {
            line(o, x, yy - 2, x + 40, yy - 2, it.colour, 1.6, it.dash);
            head(o, x, yy - 2, x + 40, yy - 2, it.colour);
        }
        text(o, x + 50, yy + 2, it.what, "legend-text", "start", "#222");
    }
    y += 20 + 18 * double(std::size(items)) + 4;
    text(o, 12, y, "\u2026 12.3 ms \u2026  a quiet stretch, compressed; rows are in capture order, not to scale", "legend-text",
         "start", "#222");
    const Stats& s = l.stats;
    std::string st = std::to_string(s.frames) + " frames: " + std::to_string(s.roce) + " RoCE v2";
    if (s.lost) st += " (" + std::to_string(s.lost) + " never arrived)";
    st += ", " + std::to_string(s.skipped) + " other frames skipped";
    if (s.malformed) st += ", " + std::to_string(s.malformed) + " cut before the BTH (not drawn)";
    if (s.bad) st += ", " + std::to_string(s.bad) + " malformed";
    st += "; shown: " + std::to_string(s.shown) + " packets in " + std::to_string(l.arrows.size()) + " arrows";
    text(o, 12, y + 22, st, "stats", "start", "#222");
    o += "</g>\n";
}

}  // namespace

std::string render_svg(const Ladder& l, const RenderOptions& ro) {
    const Layout lo = layout(l);
    std::string o;
    o.reserve(512 + l.arrows.size() * 700);
    o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(lo.width) + "\" height=\"" + num(lo.height) +
         "\" viewBox=\"0 0 " + num(lo.width) + " " + num(lo.height) + "\" font-family=\"monospace\" font-size=\"" +
         num(kFont) + "\">\n";
    o += "<title>" + esc(ro.title.empty() ? "RoCE v2 ladder" : ro.title) + "</title>\n";
    o += "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
    text(o, 12, 20, (ro.title.empty() ? std::string("RoCE v2 ladder") : ro.title), "title", "start", "#000",
         " font-size=\"14\" font-weight=\"bold\"");
    o += "\n";
    // Lanes: header, then the line, broken at each compressed gap.
    for (size_t i = 0; i < l.lanes.size(); ++i) {
        const double x = lo.lane_x(uint32_t(i));
        o += "<g class=\"lane\">";
        text(o, x, 42, l.lanes[i].host, "lane-host", "middle", "#000", " font-weight=\"bold\"");
        text(o, x, 58, "QP " + (l.lanes[i].qpn_known ? [&] {
            char b[16];
            std::snprintf(b, sizeof b, "0x%06x", l.lanes[i].qpn);
            return std::string(b);
        }() : std::string("?")), "lane-qp", "middle", "#000");
        double y0 = 66;
        for (const Gap& g : l.gaps) {
            const double gy = lo.row_y[g.before] - kGapRow - 14;
            line(o, x, y0, x, gy, "#9e9e9e", 1, "");
            y0 = gy + kGapRow;
        }
        line(o, x, y0, x, lo.rows_end, "#9e9e9e", 1, "");
        o += "</g>\n";
    }
    for (const Gap& g : l.gaps) {
        const double gy = lo.row_y[g.before] - kGapRow - 14;
        o += "<g class=\"gap\"><rect x=\"4\" y=\"" + num(gy + 3) + "\" width=\"" + num(lo.width - 8) + "\" height=\"" +
             num(kGapRow - 6) + "\" fill=\"#f1f1f1\"/>";
        text(o, lo.width / 2, gy + kGapRow / 2 + 4, "\u2026 " + duration(g.ns) + " \u2026", "gap-text", "middle", "#555",
             " font-style=\"italic\"");
        o += "</g>\n";
    }
    for (size_t i = 0; i < l.arrows.size(); ++i) tie(o, l, lo, i);
    for (size_t i = 0; i < l.arrows.size(); ++i) arrow(o, l, lo, i);
    legend(o, lo, l);
    o += "</svg>\n";
    return o;
}

std::string render_html(const Ladder& l, const RenderOptions& ro) {
    std::string t = ro.title.empty() ? std::string("RoCE v2 ladder") : ro.title;
    std::string o = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + esc(t) +
                    "</title>\n</head>\n<body style=\"margin:0;background:#ffffff\">\n";
    o += render_svg(l, ro);
    o += "</body>\n</html>\n";
    return o;
}

bool output_ext_ok(const std::string& out) {
    auto ends = [&](const char* e) {
        const std::string s(e);
        return out.size() > s.size() && out.compare(out.size() - s.size(), s.size(), s) == 0;
    };
    return ends(".svg") || ends(".html") || ends(".htm");
}

WriteResult write_ladder(const std::string& pcap, std::span<const Drop> drops, const std::string& out, const Options& opt,
                  std::string& err, Ladder* model) {
    if (!output_ext_ok(out)) {
        err = out + ": the output must end in .svg, .html or .htm";
        return WriteResult::bad_input;
    }
    Builder b;
    if (!read_pcap(pcap, b, err)) return WriteResult::bad_input;
    for (const Drop& d : drops) b.drop(d);
    Ladder l = b.build(opt);
    if (l.stats.roce == 0) {
        err = pcap + ": no RoCE v2 frame to draw (" + std::to_string(l.stats.frames) + " frames, " +
              std::to_string(l.stats.skipped) + " not RoCE v2, " + std::to_string(l.stats.malformed) + " cut before the BTH)";
        return WriteResult::nothing_to_draw;
    }
    if (l.arrows.empty()) {
        err = pcap + ": no frame left after --frames/--qp (" + std::to_string(l.stats.roce) + " RoCE v2 frames)";
        return WriteResult::nothing_to_draw;
    }
    if (l.arrows.size() > kMaxArrows) {
        err = pcap + ": " + std::to_string(l.arrows.size()) + " arrows, more than " + std::to_string(kMaxArrows) +
              " in one diagram: narrow it with --frames A-B or --qp N, or use --summary";
        return WriteResult::nothing_to_draw;
    }
    const size_t slash = pcap.find_last_of('/');
    RenderOptions ro;
    ro.title = "hcaemu ladder: " + (slash == std::string::npos ? pcap : pcap.substr(slash + 1));
    if (opt.first_frame > 1 || opt.last_frame != UINT64_MAX)
        ro.title += ", frames " + std::to_string(opt.first_frame) + "-" +
                    (opt.last_frame == UINT64_MAX ? std::string("end") : std::to_string(opt.last_frame));
    if (opt.qp_filter) {
        char b2[32];
        std::snprintf(b2, sizeof b2, ", QP 0x%06x", opt.qp);
        ro.title += b2;
    }
    if (opt.summary) ro.title += ", one row per message";
    const bool html = !(out.size() > 4 && out.compare(out.size() - 4, 4, ".svg") == 0);
    const std::string doc = html ? render_html(l, ro) : render_svg(l, ro);
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    if (!f) {
        err = out + ": cannot open for writing";
        return WriteResult::write_failed;
    }
    f.write(doc.data(), std::streamsize(doc.size()));
    f.close();
    if (!f) {
        err = out + ": write failed";
        return WriteResult::write_failed;
    }
    if (model) *model = std::move(l);
    return WriteResult::ok;
}

}  // namespace hcaemu::ladder
