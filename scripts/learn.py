#!/usr/bin/python3
"""Writes the real output of every command of the walkthrough (docs/learn/, docs/learn/zh/) into its
pages, or checks that the pages still hold what the commands print now.

A page marks a command and the place of its output:

    <!-- run: hcaemu demo --pcap learn.pcap --ladder learn.svg | lines 1-4 -->
    ```text
    (written by this script: "$ COMMAND", then the output)
    ```
    <!-- end -->

The part after " | " chooses what the page shows of the output (the command runs whole):
`lines A-B,C-D` (1-based, inclusive) or `frames N,M` (the paragraphs of `hcaemu dissect` that
start at frame N and M). Cut parts show as "...". Stdout and stderr are recorded together, and a
non-zero exit status as a last line "(exit status N)".

The commands of one language run one after the other, page by page in file-name order, in one
scratch directory: a later page reads the capture an earlier page wrote. `hcaemu` is the built
binary given with --hcaemu. Ladder diagrams the commands write (*.svg) are copied to
docs/learn/img/. The Chinese pages must run the same commands as the English ones, in the same
order, with `--lang zh` added to demo and dissect, and draw the same diagrams.

Nothing is filtered: the commands are deterministic. demo's PSNs, MR addresses (fixed IOVAs) and
frame stamps are fixed, sim runs in virtual time from a fixed seed with fixed IOVAs, and the
samples are made-up frames; file names are the ones the page gives.

    scripts/learn.py --hcaemu build/tools/hcaemu           # rewrite the pages and images
    scripts/learn.py --hcaemu build/tools/hcaemu --check   # exit 1 if any differs (meson test learn)
"""
import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEARN = os.path.join(ROOT, "docs", "learn")
IMG = os.path.join(LEARN, "img")
BLOCK = re.compile(r"<!-- run: (.*?) -->\n(.*?)<!-- end -->\n", re.S)
LANGS = (("en", LEARN), ("zh", os.path.join(LEARN, "zh")))


class PageError(Exception):
    pass


def pages(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".md") and f != "README.md")


def parse_ranges(spec):
    out = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out.append((int(a), int(b or a)))
    return out


def select(output, show):
    """The part of `output` that `show` names, with '...' where lines are left out."""
    if not show:
        return output
    kind, _, arg = show.partition(" ")
    lines = output.split("\n")
    if output.endswith("\n"):
        lines.pop()
    keep = [False] * len(lines)
    if kind == "lines":
        for a, b in parse_ranges(arg):
            if not 1 <= a <= b <= len(lines):
                raise PageError(f"lines {a}-{b}: the output has {len(lines)} lines")
            for i in range(a - 1, b):
                keep[i] = True
    elif kind == "frames":
        starts = {}
        for i, l in enumerate(lines):
            m = re.match(r"^(?:Frame|帧) (\d+)[:：]", l)
            if m:
                starts[int(m.group(1))] = i
        for a, b in parse_ranges(arg):
            for n in range(a, b + 1):
                if n not in starts:
                    raise PageError(f"frames {n}: no such frame in the output")
                i = starts[n]
                while i < len(lines) and lines[i].strip():
                    keep[i] = True
                    i += 1
    else:
        raise PageError(f"unknown selection '{show}' (lines A-B or frames N)")
    out, cut = [], False
    for l, k in zip(lines, keep):
        if k:
            out.append(l)
            cut = False
        elif not cut:
            out.append("...")
            cut = True
    return "\n".join(out) + "\n"


def run(cmd, hcaemu, cwd, lang):
    argv = shlex.split(cmd)
    if not argv or argv[0] != "hcaemu":
        raise PageError(f"'{cmd}': a command starts with hcaemu")
    if lang == "zh" and len(argv) > 1 and argv[1] in ("demo", "dissect") and "--lang" not in argv:
        raise PageError(f"'{cmd}': a Chinese page runs demo and dissect with --lang zh")
    r = subprocess.run([hcaemu] + argv[1:], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=300)
    out = r.stdout.decode("utf-8", errors="replace")
    if r.returncode:
        out += f"(exit status {r.returncode})\n"
    return out


def render(path, text, hcaemu, cwd, lang):
    def block(m):
        spec = m.group(1)
        cmd, _, show = spec.partition(" | ")
        try:
            out = select(run(cmd.strip(), hcaemu, cwd, lang), show.strip())
        except PageError as e:
            raise PageError(f"{os.path.relpath(path, ROOT)}: {e}") from None
        return f"<!-- run: {spec} -->\n```text\n$ {cmd.strip()}\n{out}```\n<!-- end -->\n"

    if text.count("<!-- run: ") != len(BLOCK.findall(text)):
        raise PageError(f"{os.path.relpath(path, ROOT)}: a '<!-- run: ... -->' without its '<!-- end -->'")
    return BLOCK.sub(block, text)


def same_commands():
    """The Chinese pages are the English ones' translation: the same pages, the same commands in
    the same order, each with --lang zh where it takes one."""
    en, zh = pages(LEARN), pages(LANGS[1][1])
    if [os.path.basename(p) for p in en] != [os.path.basename(p) for p in zh]:
        raise PageError("docs/learn/zh/ has not the same pages as docs/learn/")
    for e, z in zip(en, zh):
        ce = [m.group(1) for m in BLOCK.finditer(open(e, encoding="utf-8").read())]
        cz = [m.group(1).replace(" --lang zh", "") for m in BLOCK.finditer(open(z, encoding="utf-8").read())]
        if ce != cz:
            raise PageError(f"{os.path.relpath(z, ROOT)}: not the commands of {os.path.relpath(e, ROOT)} "
                            f"(with --lang zh): {cz} against {ce}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hcaemu", required=True, help="the built hcaemu binary")
    ap.add_argument("--check", action="store_true", help="compare, write nothing; exit 1 on a difference")
    a = ap.parse_args()
    hcaemu = os.path.abspath(a.hcaemu)
    differences = []
    images = {}
    try:
        same_commands()
        for lang, d in LANGS:
            with tempfile.TemporaryDirectory(prefix=f"hcaemu-learn-{lang}-") as work:
                for p in pages(d):
                    with open(p, encoding="utf-8") as f:
                        old = f.read()
                    new = render(p, old, hcaemu, work, lang)
                    if new != old:
                        differences.append((p, old, new))
                for f in sorted(os.listdir(work)):
                    if f.endswith(".svg"):
                        with open(os.path.join(work, f), "rb") as g:
                            data = g.read()
                        if f in images and images[f] != data:
                            raise PageError(f"{lang}: {f} is not the diagram the en pages drew")
                        images.setdefault(f, data)
    except PageError as e:
        print(f"learn.py: {e}", file=sys.stderr)
        return 2
    for f, data in sorted(images.items()):
        p = os.path.join(IMG, f)
        old = open(p, "rb").read() if os.path.exists(p) else None
        if old != data:
            differences.append((p, None, data))
    if a.check:
        for p, old, new in differences:
            print(f"DIFFERS: {os.path.relpath(p, ROOT)}")
            if isinstance(new, str) and isinstance(old, str):
                d = difflib.unified_diff(old.splitlines(), new.splitlines(), "page", "now", lineterm="", n=1)
                for i, line in enumerate(d):
                    if i > 40:
                        print("  ...")
                        break
                    print("  " + line)
        if differences:
            print(f"{len(differences)} file(s) differ from what the commands print now: "
                  "run scripts/learn.py --hcaemu build/tools/hcaemu and review the change")
            return 1
        print(f"OK: {sum(len(pages(d)) for _, d in LANGS)} pages and {len(images)} diagrams match the commands")
        return 0
    os.makedirs(IMG, exist_ok=True)
    for p, old, new in differences:
        if isinstance(new, bytes):
            with open(p, "wb") as f:
                f.write(new)
        elif old is not None:
            with open(p, "w", encoding="utf-8") as f:
                f.write(new)
        print(f"wrote {os.path.relpath(p, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
