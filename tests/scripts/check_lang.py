#!/usr/bin/python3
"""`--lang zh` of `hcaemu demo` and `hcaemu dissect` against their English output, line for line:
  - the same number of lines, and on each line the same numbers (PSNs, addresses, keys, lengths,
    in any order: Chinese orders a sentence's parts its own way);
  - every line that tells something in English (demo: every line but the frames on the wire;
    dissect: every '. ' note and the frame and summary lines; demo --samples: those and each
    frame's caption) is Chinese in zh, with no English
    prose left in it (no 'the', 'of', 'and' ...);
  - a line the same in both (a frame on the wire, a header's fields) has no English prose either;
  - demo writes the same capture in both languages and on every run (fixed addresses and stamps);
  - dissect of MADs to QP1 (mad_pcap: a frame per CM message, and its malformed set) likewise, with
    the MAD notes in Chinese and the GSI's payload note in place of the DMA engine's;
and a bad --lang exits 2 naming the languages."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

failures = []
NUM = re.compile(r"(?<![0-9A-Za-z])(?:0x[0-9a-fA-F]+|[0-9]+)(?![0-9A-Za-z])")
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
STOP = {"the", "a", "an", "of", "to", "from", "for", "with", "its", "is", "are", "and", "by", "into",
        "that", "at", "on", "in", "as", "it", "they", "every", "each", "no", "not", "was", "did"}


def run(args, timeout=120):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return r.returncode, r.stdout.decode("utf-8", errors="replace"), r.stderr.decode(errors="replace")


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {str(detail)[-800:]}")
    return cond


def english_words(line):
    """The English function words of a line (case-sensitive: 'A' is a side), opcode names aside."""
    line = re.sub(r"with (Immediate|Invalidate)", "", line)
    return [w for w in re.split(r"[\s,;:()（）：，；]+", line) if w in STOP]


def compare(name, en, zh, is_prose):
    el, zl = en.splitlines(), zh.splitlines()
    if not expect(f"{name}: line count", len(el) == len(zl), f"en {len(el)} lines, zh {len(zl)}"):
        return
    prose = 0
    for i, (e, z) in enumerate(zip(el, zl), 1):
        where = f"{name} line {i}: en {e!r} / zh {z!r}"
        expect("same numbers", sorted(NUM.findall(e)) == sorted(NUM.findall(z)), where)
        if is_prose(e):
            prose += 1
            expect("told in Chinese", z != e and CJK.search(z), where)
        if e == z:
            expect("no English prose in an untranslated line", not english_words(e), where)
        else:
            expect("translated line is Chinese", CJK.search(z), where)
            expect("no English prose left in the Chinese line", not english_words(z), f"{english_words(z)} {where}")
    expect(f"{name}: some lines are prose", prose > 10, prose)


def demo_prose(line):
    return bool(line.strip()) and not re.match(r"^[AB] -> [AB]: ", line)


def dissect_prose(line):
    return line.startswith("            . ") or line.startswith("Frame ") or line.startswith("Summary:")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcaemu", required=True)
    ap.add_argument("--mad-pcap", required=True)
    a = ap.parse_args()
    h = os.path.abspath(a.hcaemu)
    mad_pcap = os.path.abspath(a.mad_pcap)
    with tempfile.TemporaryDirectory() as d:
        os.chdir(d)
        # The same file names in every run: the story names its capture.
        outs, pcaps = {}, {}
        for tag, lang in (("en", []), ("zh", ["--lang", "zh"]), ("en2", [])):
            os.makedirs(tag)
            rc, out, err = run_in(tag, [h, "demo", "--pcap", "demo.pcap", "--ladder", "demo.svg"] + lang)
            expect(f"demo {tag} exit 0", rc == 0, err or out)
            outs[tag] = out
            with open(os.path.join(tag, "demo.pcap"), "rb") as f:
                pcaps[tag] = f.read()
        expect("demo: the same story on every run", outs["en"] == outs["en2"])
        expect("demo: the same capture on every run", pcaps["en"] == pcaps["en2"])
        expect("demo: the same capture in both languages", pcaps["en"] == pcaps["zh"])
        expect("demo zh: CQE 成功", "CQE wr_id=1 SEND 成功，64 字节" in outs["zh"], outs["zh"][:2000])
        compare("demo", outs["en"], outs["zh"], demo_prose)

        rc, out, err = run([h, "demo", "--samples", "--quiet", "--pcap", "samples.pcap"])
        expect("demo --samples", rc == 0, err)
        # --samples: each frame's caption, its dissection and the closing line, in both languages.
        rc, en, err = run([h, "demo", "--samples", "--pcap", "samples.pcap"])
        expect("demo --samples", rc == 0, err)
        rc, zh, err = run([h, "demo", "--samples", "--lang", "zh", "--pcap", "samples.pcap"])
        expect("demo --samples --lang zh", rc == 0, err)
        compare("demo --samples", en, zh, lambda l: dissect_prose(l) or l.startswith(("# ", "wrote ")))
        expect("demo --samples: a caption per frame", en.count("\n# ") >= 50, en.count("\n# "))
        rc, zh, err = run([h, "demo", "--samples", "--quiet", "--lang", "zh", "--pcap", "samples.pcap"])
        expect("demo --samples --quiet --lang zh", rc == 0 and zh.startswith("已把 ") and "samples.pcap" in zh, (rc, zh, err))
        for pcap in ("en/demo.pcap", "samples.pcap"):
            rc, en, err = run([h, "dissect", pcap])
            expect(f"dissect {pcap}", rc == 0, err)
            rc, zh, err = run([h, "dissect", "--lang", "zh", pcap])
            expect(f"dissect --lang zh {pcap}", rc == 0, err)
            compare(f"dissect {pcap}", en, zh, dissect_prose)
            expect(f"dissect {pcap}: every note kind", en.count("            . ") > 40, en.count("            . "))
        rc, zh, _ = run([h, "dissect", "--lang", "zh", "samples.pcap"])
        for note in ("UD：Q_Key 必须与接收 QP 的 Q_Key 相同", "立即数：", "CNP：接收方看到了 ECN CE 标记", "R_Key 指明远端内存区域（MR）",
                     "远端的字在原子操作之前的值", "这两个地址就是两端端口的 RoCE v2 GID"):
            expect(f"dissect --lang zh: note {note!r}", note in zh)

        check_mads(h, mad_pcap)

        for args in (["demo", "--lang", "fr"], ["dissect", "--lang", "fr", "samples.pcap"],
                     ["demo", "--lang"], ["dissect", "samples.pcap", "--lang"], ["demo", "--lang", "ZH"]):
            rc, out, err = run([h] + args)
            expect(f"{' '.join(args)}: exit 2", rc == 2, (rc, err))
            expect(f"{' '.join(args)}: names the languages", "en, zh" in err, err)
            expect(f"{' '.join(args)}: nothing on stdout", out == "", out)

    if failures:
        print("FAIL")
        for f in failures:
            print("  " + f)
        return 1
    print("OK: demo and dissect in en and zh, line for line")
    return 0


def check_mads(h, mad_pcap):
    """dissect en and zh of the CM MADs mad_pcap writes (and of its malformed ones), line for line."""
    for pcap, extra in (("mads.pcap", []), ("mads-bad.pcap", ["--malformed"])):
        rc, _, err = run([mad_pcap, pcap] + extra)
        if not expect(f"mad_pcap {pcap}", rc == 0, err):
            continue
        rc, en, err = run([h, "dissect", pcap])
        expect(f"dissect {pcap}", rc == 0, err)
        rc, zh, err = run([h, "dissect", "--lang", "zh", pcap])
        expect(f"dissect --lang zh {pcap}", rc == 0, err)
        compare(f"dissect {pcap}", en, zh, dissect_prose)
        # A MAD is not written into an MR: each frame has the GSI's payload note instead of the DMA engine's.
        # (but for a frame the GSI drops, which has its own note).
        frames = en.count("\nFrame ") + en.startswith("Frame ") - en.count(": the GSI drops this frame")
        expect(f"dissect {pcap}: no DMA-engine note on a MAD", "DMA engine writes it into the MR" not in en, en[:3000])
        expect(f"dissect {pcap}: the GSI's payload note on every frame",
               en.count(". a MAD to QP1: a receive WQE of the GSI takes it") == frames > 0, frames)
        expect(f"dissect --lang zh {pcap}: the GSI's payload note on every frame",
               zh.count(". 发往 QP1 的 MAD：由 GSI 的一个接收 WQE 接收") == frames, zh[:3000])
    rc, zh, _ = run([h, "dissect", "--lang", "zh", "mads.pcap"])
    for note in ("GMP（通用管理包）：发往 QP1（GSI，通用服务接口）", "MAD 公共头：", "REQ：主动方请求与该服务 ID 建立连接",
                 "REP：被动方接受连接", "RTU：主动方已就绪", "REJ：连接被拒绝", "MRA：", "DREQ：一方断开连接",
                 "DREP：断开连接得到确认", "SIDR_REQ：UD 客户端", "SIDR_REP：对 SIDR_REQ 的应答", "ClassPortInfo：本端口",
                 "私有数据开头的 RDMA CM 头（IBTA A11.4）", "(基于 IP：端口空间 TCP，端口 ", "(无无效字段)", "字节，全为零"):
        expect(f"dissect --lang zh mads.pcap: {note!r}", note in zh, zh[:3000])
    rc, zh, _ = run([h, "dissect", "--lang", "zh", "mads-bad.pcap"])
    for note in ("保留位发送时必须为零", "LAP/APR（备用路径迁移）能被识别", "CM 管理类未定义的 AttributeID",
                 "  GMP       错误 bad_gsi_qkey：GSI 丢弃这个帧", "  MAD       错误 unknown_attribute"):
        expect(f"dissect --lang zh mads-bad.pcap: {note!r}", note in zh, zh[:3000])


def run_in(cwd, args):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, cwd=cwd)
    return r.returncode, r.stdout.decode("utf-8", errors="replace"), r.stderr.decode(errors="replace")


if __name__ == "__main__":
    sys.exit(main())
