#!/usr/bin/python3
"""A flame graph from `perf script` output: folded stacks, then a self-contained SVG.

    perf record -g --call-graph dwarf -o perf.data -- PROGRAM ...
    perf script -i perf.data | tests/bench/flamegraph.py --title "..." -o out.svg [--folded out.folded]

Each sample's stack (leaf first in perf script's text) becomes one line "root;...;leaf count";
the SVG draws the root at the bottom, each frame as wide as its share of the samples, and leaves
out frames narrower than --min-percent of the whole (default 0.5) so that the file stays small.
A frame's tooltip gives its samples and share. Function names lose their offset and C++ argument
lists; a frame perf could not name is shown as its object's file name. --comm keeps only the
samples of that command (the process name perf shows).
"""
import argparse
import colorsys
import hashlib
import html
import os
import re
import sys

HEAD = re.compile(r"^(\S.*?)\s+(\d+)(?:/\d+)?\s+(?:\[\d+\]\s+)?[\d.]+:\s+(\d+)?\s*(\S+):")
FRAME = re.compile(r"^\s+([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$")


def clean(sym, obj):
    if sym in ("[unknown]", ""):
        return f"[{os.path.basename(obj)}]" if obj and obj != "[unknown]" else "[unknown]"
    sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
    # drop argument lists and templates' arguments: keep the qualified name
    depth, out = 0, []
    for ch in sym:
        if ch in "(<":
            depth += 1
        elif ch in ")>":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    return s or sym


def fold(lines, comm=None):
    """perf script text -> {stack: count} (stack: root first, ';'-joined)."""
    stacks = {}
    cur, name, weight = [], None, 1
    def flush():
        if name is not None and (comm is None or name == comm):
            key = ";".join([name] + list(reversed(cur))) if cur else name
            stacks[key] = stacks.get(key, 0) + weight
    for line in lines:
        if not line.strip():
            flush()
            cur, name = [], None
            continue
        if not line[0].isspace():
            flush()
            cur = []
            m = HEAD.match(line)
            name = m.group(1).strip() if m else line.split()[0]
            weight = 1
            continue
        m = FRAME.match(line)
        if m and name is not None:
            cur.append(clean(m.group(2), m.group(3)))
    flush()
    return stacks


class Node:
    __slots__ = ("name", "value", "kids")

    def __init__(self, name):
        self.name, self.value, self.kids = name, 0, {}


def tree(stacks):
    root = Node("all")
    for stack, n in stacks.items():
        root.value += n
        node = root
        for f in stack.split(";"):
            node = node.kids.setdefault(f, Node(f))
            node.value += n
    return root


def color(name):
    h = int(hashlib.md5(name.encode()).hexdigest()[:8], 16)
    hue = 0.0 + (h % 1000) / 1000 * 0.14  # red to yellow
    r, g, b = colorsys.hsv_to_rgb(hue, 0.55 + (h >> 10) % 30 / 100, 0.95)
    return f"rgb({int(r * 255)},{int(g * 255)},{int(b * 255)})"


def svg(root, title, min_frac, width=1200, row=16):
    total = root.value or 1
    rects = []
    depth_max = [0]

    def walk(node, x, depth):
        w = node.value / total * (width - 20)
        if node.value / total < min_frac:
            return
        depth_max[0] = max(depth_max[0], depth)
        rects.append((x, depth, w, node))
        cx = x
        for k in sorted(node.kids.values(), key=lambda n: n.name):
            walk(k, cx, depth + 1)
            cx += k.value / total * (width - 20)

    walk(root, 10.0, 0)
    height = (depth_max[0] + 1) * row + 60
    out = [f'<?xml version="1.0" standalone="no"?>\n<svg version="1.1" width="{width}" height="{height}" '
           f'xmlns="http://www.w3.org/2000/svg" font-family="monospace" font-size="11">',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#f8f8f0"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{html.escape(title)}</text>',
           f'<text x="10" y="{height - 8}" fill="#555">{total} samples; frames under {min_frac * 100:g}% left out; '
           f'the root at the bottom, callees above their callers</text>']
    for x, depth, w, node in rects:
        y = height - 30 - (depth + 1) * row
        pct = node.value / total * 100
        label = f"{node.name} ({node.value} samples, {pct:.2f}%)"
        out.append(f'<g><title>{html.escape(label)}</title><rect x="{x:.1f}" y="{y}" width="{max(w - 0.5, 0.1):.1f}" '
                   f'height="{row - 1}" fill="{color(node.name)}" rx="1"/>')
        chars = int(w / 6.7)
        if chars >= 3:
            t = node.name if len(node.name) <= chars else node.name[:chars - 2] + ".."
            out.append(f'<text x="{x + 2:.1f}" y="{y + row - 4}">{html.escape(t)}</text>')
        out.append("</g>")
    out.append("</svg>\n")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", nargs="?", help="perf script output (default: stdin)")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--title", default="flame graph")
    ap.add_argument("--folded", help="also write the folded stacks here")
    ap.add_argument("--min-percent", type=float, default=0.5)
    ap.add_argument("--comm")
    a = ap.parse_args()
    src = open(a.input, errors="replace") if a.input else sys.stdin
    stacks = fold(src, a.comm)
    if not stacks:
        sys.exit("flamegraph.py: no samples in the input")
    if a.folded:
        with open(a.folded, "w") as f:
            for k in sorted(stacks):
                f.write(f"{k} {stacks[k]}\n")
    with open(a.output, "w") as f:
        f.write(svg(tree(stacks), a.title, a.min_percent / 100))


if __name__ == "__main__":
    main()
