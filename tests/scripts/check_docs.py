#!/usr/bin/python3
"""README.md and every page under docs/ (docs/learn included):
  - every relative link resolves inside the repository: the file or folder exists, and a
    #anchor names a heading of the target page (GitHub's anchors: the heading's text lower-cased,
    punctuation dropped, spaces as '-', '-1', '-2' ... for repeats);
  - every `hcaemu ...` command line in a fenced code block (also after a '$ ' prompt or as
    build/tools/hcaemu) names a subcommand whose --help exits 0, and each of its options appears
    in that --help text.
Links and commands in inline code and in the output of commands are not links or commands."""
import argparse
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
OPT = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def fail(where, what):
    failures.append(f"{where}: {what}")


def pages():
    out = [os.path.join(ROOT, "README.md")]
    for d, _, files in os.walk(os.path.join(ROOT, "docs")):
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".md")]
    return sorted(out)


def split_blocks(text):
    """(line number, line, in a fenced block) for every line."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)
                yield n, line, True
                continue
            if line.strip().startswith(fence):
                fence = None
                yield n, line, True
                continue
        yield n, line, fence is not None


def slug(heading):
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link: its text
    h = re.sub(r"<[^>]+>", "", h).lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, out = {}, set()
        with open(path, encoding="utf-8") as f:
            for _, line, code in split_blocks(f.read()):
                m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if code or not m:
                    continue
                s = slug(m.group(1))
                k = seen.get(s, 0)
                seen[s] = k + 1
                out.add(s if k == 0 else f"{s}-{k}")
        _anchors[path] = out
    return _anchors[path]


def check_links(path, text):
    rel = os.path.relpath(path, ROOT)
    count = 0
    for n, line, code in split_blocks(text):
        if code:
            continue
        line = re.sub(r"`[^`]*`", "", line)  # inline code is not a link
        for m in LINK.finditer(line):
            target = m.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            count += 1
            where = f"{rel}:{n}"
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not (dest + os.sep).startswith(ROOT + os.sep) and dest != ROOT:
                fail(where, f"link '{target}' leaves the repository")
                continue
            if not os.path.exists(dest):
                fail(where, f"link '{target}': no such file or folder")
                continue
            if anchor:
                if not dest.endswith(".md"):
                    fail(where, f"link '{target}': an anchor into a file that is not markdown")
                elif anchor not in anchors(dest):
                    fail(where, f"link '{target}': no heading '{anchor}' in {os.path.relpath(dest, ROOT)}")
    return count


def command_lines(text):
    """(line number, argv after 'hcaemu') of the hcaemu command lines in fenced blocks."""
    joined, start = "", 0
    for n, line, code in split_blocks(text):
        if not code or line.lstrip().startswith(("```", "~~~")):
            continue
        if joined:
            joined += " " + line.strip()
        else:
            start = n
            joined = line.strip()
        if joined.endswith("\\"):
            joined = joined[:-1]
            continue
        cmd, joined = joined, ""
        cmd = re.sub(r"^\$\s+", "", cmd)
        m = re.match(r"^(?:\S*/)?hcaemu(\s.*)?$", cmd)
        if not m or cmd.startswith("hcaemud"):
            continue
        try:
            argv = shlex.split(m.group(1) or "", comments=True)
        except ValueError:
            argv = (m.group(1) or "").split()
        for i, a in enumerate(argv):  # the command ends at a pipe, a list or a redirection
            if a in ("|", "||", "&&", ";", "&") or a.startswith((">", "<", "2>")):
                argv = argv[:i]
                break
        yield start, argv


_help = {}


def help_of(hcaemu, sub):
    if sub not in _help:
        r = subprocess.run([hcaemu, sub, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        text = r.stdout.decode(errors="replace")
        _help[sub] = set(OPT.findall(text)) | {"-h", "--help"} if r.returncode == 0 else None
    return _help[sub]


def check_commands(path, text, hcaemu):
    rel = os.path.relpath(path, ROOT)
    count = 0
    for n, argv in command_lines(text):
        count += 1
        where = f"{rel}:{n}: hcaemu {' '.join(argv)}"
        if not argv or argv[0] in ("-h", "--help", "help"):
            continue
        sub, args = argv[0], argv[1:]
        opts = help_of(hcaemu, sub)
        if opts is None:
            fail(where, f"'hcaemu {sub} --help' fails: no such subcommand")
            continue
        for a in args:
            if a == "--":  # exec: the program's own arguments follow
                break
            if not a.startswith("-") or " " in a or re.match(r"^-\d", a) or a == "-":
                continue  # a value or a positional argument
            name = a.split("=", 1)[0]
            if name not in opts:
                fail(where, f"option '{name}' is not in 'hcaemu {sub} --help'")
    return count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    hcaemu = os.path.abspath(ap.parse_args().hcaemu)
    links = cmds = 0
    for p in pages():
        with open(p, encoding="utf-8") as f:
            text = f.read()
        links += check_links(p, text)
        cmds += check_commands(p, text, hcaemu)
    if links < 50 or cmds < 20:
        fail("coverage", f"only {links} links and {cmds} commands found: is the parser broken?")
    for f in failures:
        print("FAIL", f)
    print(f"{len(pages())} pages, {links} relative links, {cmds} hcaemu command lines; {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
