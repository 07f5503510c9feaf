#!/usr/bin/env python3
"""Regenerates models/tokenizer/unicode_tables.inc: where strata's Unicode libraries (PCRE2
10.42: Unicode 14.0; ICU 72: Unicode 15.0) disagree with the tables inside Hugging Face
`tokenizers` 0.23.3, which strata must match id for id:

  regex classes  `tokenizers` runs Split/ByteLevel regexes with Oniguruma, whose tables are
                 Unicode 16.0: \\p{L}, \\p{N} (and their subcategories, \\p{M}) gain the code
                 points assigned to them between 14.0 and 16.0 (kRegexExtra*).
  Digits         Rust's char::is_numeric (the wheel's Rust std): Unicode 17.0 (kNumericExtra,
                 what 17.0 adds over ICU's 15.0).
  single_word    the Rust `regex` crate's \\w (Alphabetic, M, Nd, Pc, Join_Control): Unicode 16.0
                 (kWordExtra, over ICU's 15.0).
  normalizers    the unicode-normalization-alignments crate's tables predate Unicode 12.1: code
                 points that ICU decomposes, reorders (non-zero combining class) or composes into
                 and that `tokenizers` leaves alone (kNormalizeVerbatim).

Each Unicode version's data comes from the `unicodedata2` package pinned to it (installed into
a venv per version, made here when missing) and from this Python's own unicodedata, which must
be 14.0.0 (Python 3.11) for PCRE2's side. Each table is then checked against `tokenizers`
itself on every code point. Run with the venv that has `tokenizers`:

    /tmp/tokvenv/bin/python tests/models/tokenizer_fixtures/make_unicode_tables.py
"""
import json
import os
import subprocess
import sys
import unicodedata

from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.abspath(os.path.join(HERE, "..", "..", "..", "models", "tokenizer", "unicode_tables.inc"))
CPS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
# (Mn, Mc and Me are left out: U+1171E moved from Mn to Mc in 16.0, which a supplement cannot undo.)
CATS = ["L", "Lu", "Ll", "Lt", "Lm", "Lo", "N", "Nd", "Nl", "No", "M"]

DUMP = r"""
import json, sys, unicodedata2 as u
assert u.unidata_version == sys.argv[1], u.unidata_version
cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
out = {"cat": [u.category(chr(c)) for c in cps], "ccc": [u.combining(chr(c)) for c in cps]}
if len(sys.argv) > 2:
    strings = json.load(open(sys.argv[2]))
    out["norm"] = {f: [u.normalize(f, s) for s in strings] for f in ["NFC", "NFD", "NFKC", "NFKD"]}
    out["decomp"] = [u.decomposition(chr(c)) for c in cps]
print(json.dumps(out))
"""


def ucd(version, strings=None):
    py = f"/tmp/ud{version}/bin/python"
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", f"/tmp/ud{version}"], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", f"unicodedata2=={version}"], check=True)
    args = [py, "-c", DUMP, version]
    if strings is not None:
        with open("/tmp/ucd_strings.json", "w") as f:
            json.dump(strings, f)
        args.append("/tmp/ucd_strings.json")
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def in_cat(cat, c):
    return cat == c if len(c) == 2 else cat.startswith(c)


def byte_tokenizer():
    alpha = sorted(pre_tokenizers.ByteLevel.alphabet())
    return Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alpha)}, merges=[]))


def main():
    assert unicodedata.unidata_version == "14.0.0", "run with Python 3.11 (its unicodedata is PCRE2's 14.0)"
    u14 = [unicodedata.category(chr(c)) for c in CPS]
    u16, u17 = ucd("16.0.0"), ucd("17.0.0")
    tables = {}

    # Regex classes: 16.0 minus 14.0, checked against Oniguruma through a Split pre-tokenizer.
    for cat in CATS:
        extra = [c for c, a, b in zip(CPS, u14, u16["cat"]) if in_cat(b, cat) and not in_cat(a, cat)]
        lost = [c for c, a, b in zip(CPS, u14, u16["cat"]) if in_cat(a, cat) and not in_cat(b, cat)]
        assert not lost, (cat, lost[:5])  # only additions: a class can be supplemented
        tables[f"kRegexExtra{cat}"] = ranges(extra)
    for cat in ["L", "N"]:
        split = pre_tokenizers.Split(pattern=__import__("tokenizers").Regex(rf"\p{{{cat}}}"), behavior="removed")
        onig = {c for c in CPS if c >= 0x80 and not split.pre_tokenize_str(chr(c))}
        mine = {c for c, b in zip(CPS, u16["cat"]) if c >= 0x80 and b.startswith(cat)}
        assert onig == mine, (cat, sorted(onig ^ mine)[:10])

    # Digits: Rust's is_numeric (Nd, Nl, No) in 17.0 minus ICU's 15.0.
    u15 = ucd("15.0.0", strings=[chr(c) for c in CPS])
    numeric = ("Nd", "Nl", "No")
    tables["kNumericExtra"] = ranges(c for c, a, b in zip(CPS, u15["cat"], u17["cat"])
                                     if b in numeric and a not in numeric)
    digits = pre_tokenizers.Digits(individual_digits=True)
    rust = {c for c in CPS if c >= 0x80 and len(digits.pre_tokenize_str("a" + chr(c) + "a")) == 3}
    assert rust == {c for c, b in zip(CPS, u17["cat"]) if c >= 0x80 and b in numeric}

    # single_word's \w: letters, marks, Nd, Nl and Pc new in 16.0 over 15.0 (ICU answers for the
    # rest: Alphabetic, M, Nd, Pc, Join_Control).
    word_cats = lambda k: k[0] in "LM" or k in ("Nd", "Nl", "Pc")
    tables["kWordExtra"] = ranges(c for c, a, b in zip(CPS, u15["cat"], u16["cat"])
                                  if word_cats(b) and a == "Cn")

    # Normalizers: code points that ICU (15.0) changes and `tokenizers` leaves alone.
    nf = {f: getattr(normalizers, f)() for f in ["NFC", "NFD", "NFKC", "NFKD"]}
    verbatim = set()
    for f, n in nf.items():
        for c, icu in zip(CPS, u15["norm"][f]):
            hf = n.normalize_str(chr(c))
            if hf != icu:
                assert hf == chr(c), (f, hex(c), hf, icu)
                verbatim.add(c)
    # Combining classes `tokenizers` does not know (it then keeps the order), probed between
    # marks of class 230 (U+0301) and 1 (U+0334), and compositions it does not make.
    probes, owners = [], []
    for c, k in zip(CPS, u15["ccc"]):
        if k:
            probes += ["a\u0301" + chr(c), "a" + chr(c) + "\u0334"]
            owners += [c, c]
    for c, d in zip(CPS, u15["decomp"]):
        parts = d.split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            probes.append(chr(int(parts[0], 16)) + chr(int(parts[1], 16)))
            owners.append(int(parts[1], 16))
    u15p = ucd("15.0.0", strings=probes)
    for f in ["NFC", "NFD"]:
        for s, owner, icu in zip(probes, owners, u15p["norm"][f]):
            if nf[f].normalize_str(s) != icu:
                verbatim.add(owner)
    tables["kNormalizeVerbatim"] = ranges(verbatim)

    with open(OUT, "w") as f:
        f.write("// Generated by tests/models/tokenizer_fixtures/make_unicode_tables.py: do not edit.\n")
        f.write("// Code point ranges [first, last] where PCRE2 10.42 (Unicode 14.0) and ICU 72 (15.0)\n")
        f.write("// differ from `tokenizers` 0.23.3 (Oniguruma and the regex crate: 16.0; Rust std: 17.0;\n")
        f.write("// unicode-normalization-alignments: before 12.1). See the script for each table.\n")
        for name, rs in tables.items():
            f.write(f"inline constexpr std::array<CodePointRange, {len(rs)}> {name} = {{{{\n")
            line = "   "
            for a, b in rs:
                item = f" {{0x{a:X}, 0x{b:X}}},"
                if len(line) + len(item) > 100:
                    f.write(line + "\n")
                    line = "   "
                line += item
            f.write(line + "\n}};\n")
    print({k: (len(v), sum(b - a + 1 for a, b in v)) for k, v in tables.items()})


if __name__ == "__main__":
    main()
