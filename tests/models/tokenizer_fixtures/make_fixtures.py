#!/usr/bin/env python3
"""Regenerates the tokenizer fixtures of tests/models/test_tokenizer.cpp.

Not run by CI or ctest: the fixtures are committed, and the C++ test needs nothing but them.
Needs Hugging Face `tokenizers` (PyPI), e.g.

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
    /tmp/tokvenv/bin/python tests/models/tokenizer_fixtures/make_fixtures.py

It trains three small byte-level BPE tokenizers on the repository's README.md and
docs/architecture.md plus some Unicode samples, in the shapes of real ones:

  gpt2/tokenizer.json     GPT-2: ByteLevel pre-tokenizer with GPT-2's regex, special
                          <|endoftext|>, merges written as "a b" strings (the older form)
  gpt2_files/             the same model as GPT-2's vocab.json + merges.txt (no tokenizer.json)
  llama3/tokenizer.json   Llama 3: Split(Llama 3's regex, Isolated) + ByteLevel(use_regex=false),
                          ignore_merges, specials <|begin_of_text|> <|end_of_text|>, a
                          TemplateProcessing post-processor adding <|begin_of_text|>; merges as
                          [a, b] pairs; one extra vocab word no merge sequence reaches
                          ("Ġstrataword"), so that ignore_merges changes the result
  qwen2/tokenizer.json    Qwen2: NFC normalizer, Split(Qwen2's regex) + ByteLevel(use_regex=false),
                          specials <|endoftext|> <|im_start|> <|im_end|>

and writes golden.json: for each tokenizer and each test string, the ids `tokenizers` gives
(without and with special tokens), decode(ids) with and without skip_special_tokens, and
decode([id]) for every id alone (lossy: U+FFFD for a partial UTF-8 character).

golden.json's "variants" change sections of those files (the test applies "set" to the base
tokenizer.json the same way) to cover what the three shapes do not: Digits, add_prefix_space,
every Split behavior and String patterns, added tokens with lstrip/rstrip/single_word and
non-special ones, NFKD.
"""
import json
import os

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from tokenizers import AddedToken, Regex

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))

GPT2_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

UNICODE_SAMPLES = [
    "Ein Überblick über Größe, Maß und Äpfel; déjà vu, naïve café, señor, Ærø, Łódź.",
    "日本語のテキストと中文文本，以及한국어 문장입니다。東京都、北京市。",
    "Русский текст и ελληνικά γράμματα, עברית, العربية, हिन्दी भाषा.",
    "Emoji: 😀 😃 🚀 👍🏽 👨‍👩‍👧 🇫🇷 ❤️ and math ∑ ∫ √ ≤ ≥ ≠ ∞ π.",
]

TESTS = [
    "",
    "Hello world",
    "Hello, world! How are you today?",
    " leading space",
    "trailing space ",
    "   three leading spaces and   runs   of  spaces",
    "tabs\tand\t\ttabs",
    "line one\nline two\n\nline four\r\nwindows line\r\n",
    "\n\n\n",
    "   \n  \t \n",
    "I'm sure it's fine, they're here, we've won, I'll go, he'd say, don't.",
    "I'M LOUD, IT'S FINE, THEY'RE HERE, WE'VE WON, I'LL GO, HE'D SAY, DON'T.",
    "'s 's' ''s '' ' ''",
    "Numbers: 1234567 and 3.14159, 1,000,000, 2026-11-25, 0x1F and 42nd",
    "12345678901234567890",
    "The offload engine uses io_uring to move tensors between NVMe, host memory and the GPU.",
    "strataword strataword! Xstrataword",
    "naïve café déjà vu",
    "e\u0301 a\u0300 o\u0308 n\u0303 (combining) vs é à ö ñ (precomposed)",
    "\u212b \u2126 \u1e9b\u0323 Å Ω",
    "한국어 문장입니다 and \u1100\u1161\u11a8 (jamo)",
    "日本語のテキスト。中文文本，東京都",
    "Emoji 😀🚀👍🏽 family 👨‍👩‍👧 flag 🇫🇷 heart ❤️",
    "Math ∑∫√ ≤≥≠ ∞ π ≈ 3.14",
    "Русский текст, ελληνικά, עברית, العربية, हिन्दी",
    "ideographic\u3000space and nbsp\u00a0here and nel\u0085there",
    "zero\u200bwidth and bom\ufeffmark",
    "mixed123abc ABC123def 1a2b3c",
    "punctuation!!! ??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((()))",
    "snake_case camelCase kebab-case PascalCase SCREAMING_CASE",
    "path/to/file.cpp:123 https://example.com/a?b=c&d=e#f",
    "def f(x):\n    return x * 2  # comment\n\n\tif x:\n\t\tpass\n",
    "<|endoftext|>",
    "before<|endoftext|>after",
    "a <|endoftext|> b<|endoftext|><|endoftext|>c",
    "<|begin_of_text|>Hello<|end_of_text|>",
    "text <|begin_of_text|> in the middle <|end_of_text|> end",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "partial <|begin_of and <|endof text|> and <|im_start",
    "<<|endoftext|>> <|<|end_of_text|>|>",
    "   \u00e9\u00e9\u00e9   ",
    "x²³ ½ ١٢٣ Ⅻ ① １２ numerals",
    "spaces      ctl end",
    "Kİı 'S 'T 'Re ſſ",
    "x" * 300,
    "ab" * 150,
    "The quick brown fox jumps over the lazy dog. " * 3,
    # SentencePiece-style: special tokens first, spaces at the ends, byte fallback (characters
    # outside the vocabulary: emoji, CJK, rare scripts), "▁" written in the text.
    "<s>Hello world</s>",
    "<s> leading space after bos",
    "</s><s><unk>",
    "Hello <s> world </s>  x",
    "  two leading and two trailing  ",
    " ",
    "\t\ttabs first",
    "Rare scripts: \U0001F9EC\U00013000 \u16A0\u16A1 \uA000 \u0F00 \U0001D11E done",
    "\u2581already\u2581metaspace \u2581 and \u2581\u2581double",
    "<0x41> <0xZZ> written out",
    # Unicode 15-16 letters and digits (Oniguruma's tables are 16.0, PCRE2's 14.0), Unicode 17
    # digits (Rust's char::is_numeric), U+180E (not \s to Oniguruma, \s to PCRE2).
    "Kawi \U00011F04\U00011F05 \U00011F50\U00011F51 Nag \U0001E4D0\U0001E4D1\U0001E4F0 "
    "Garay \U00010D50\U00010D40\U00010D41 Kirat \U00016D43\U00016D70 cyr\U0001E030x",
    "Tolong \U00011DE0\U00011DE1 and \U00016FF4 digits 12\U00011DE03",
    "mongolian a\u180Eb c\u180E d \u180E\u180E",
    # Code points ICU 72 normalizes and `tokenizers` leaves alone.
    "dives \U00011935\U00011930 \U00011938 \uA7F2\uA7F3 \u32FF \U0001E030 a\u0301\U00010EFD "
    "e\u0301\u0898 \U0001FBF1",
]


def corpus():
    texts = []
    for rel in ["README.md", "docs/architecture.md"]:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            texts.append(f.read())
    texts += UNICODE_SAMPLES * 20
    return texts


def train(tok, vocab_size, specials):
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)


def make_gpt2():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    train(tok, 1200, ["<|endoftext|>"])
    j = json.loads(tok.to_str())
    # GPT-2's own tokenizer.json (older tokenizers) writes merges as "a b" strings.
    j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    return j


def make_llama3():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    train(tok, 1000, ["<|begin_of_text|>", "<|end_of_text|>"])
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = True
    j["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in j["model"]["merges"]]
    # A word of the vocab that no merge sequence builds: with ignore_merges it is one token.
    j["model"]["vocab"]["Ġstrataword"] = max(j["model"]["vocab"].values()) + 1
    bos = j["model"]["vocab"]["<|begin_of_text|>"]
    # Llama 3.1's form: Sequence[ByteLevel, TemplateProcessing].
    j["post_processor"] = {
        "type": "Sequence",
        "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                      "tokens": ["<|begin_of_text|>"]}}},
        ],
    }
    return j


def make_qwen2():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    train(tok, 1000, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    j = json.loads(tok.to_str())
    j["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in j["model"]["merges"]]
    return j


def byte_tokens():
    return [f"<0x{b:02X}>" for b in range(256)]


def sentencepiece_model():
    """A SentencePiece-style BPE (as Llama 2's converted tokenizer.json): ids 0-2 <unk> <s>
    </s>, 3-258 the byte tokens <0x00>..<0xFF>, then the pieces; byte_fallback, fuse_unk.
    Trained on pieces split at "▁" (SentencePiece's whitespace handling), with a small
    alphabet so that rare characters fall back to bytes."""
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False,
                                  limit_alphabet=120)
    tok.train_from_iterator(corpus(), trainer=trainer)
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    pieces = sorted((i, t) for t, i in vocab.items() if i >= 3)
    new_vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b, t in enumerate(byte_tokens()):
        new_vocab[t] = 3 + b
    for i, t in pieces:
        new_vocab.setdefault(t, len(new_vocab))
    j["model"]["vocab"] = new_vocab
    j["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in j["model"]["merges"]]
    return j


LEGACY_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def bos_template():
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}


def make_llama2(model):
    """Llama 2 / TinyLlama / Mistral v0.1: Prepend("▁") + Replace(" ", "▁") normalizer, no
    pre-tokenizer, the Replace/ByteFallback/Fuse/Strip decoder, <s> added first."""
    j = json.loads(json.dumps(model))
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    j["pre_tokenizer"] = None
    j["decoder"] = LEGACY_DECODER
    j["post_processor"] = bos_template()
    return j


def make_mistral(model):
    """Mistral v0.3 (`tokenizers` >= 0.14 conversions): no normalizer, Metaspace(prepend_scheme
    "first", split false) pre-tokenizer, the same decoder."""
    j = json.loads(json.dumps(model))
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
    j["decoder"] = LEGACY_DECODER
    j["post_processor"] = bos_template()
    return j


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def golden(tok):
    out = []
    for text in TESTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        out.append({
            "text": text,
            "ids": ids,
            "ids_special": tok.encode(text, add_special_tokens=True).ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip": tok.decode(ids, skip_special_tokens=True),
            "decoded_each": [tok.decode([i], skip_special_tokens=False) for i in ids],
        })
    return out


VARIANT_TESTS = [
    "<mask> a <mask>b  <mask>  end\t<mask>\n",
    "hello\u0301 hello\u00b2 hello\u203f x hello\u200d hello",
    "\uff1c|endoftext|\uff1e and <|endoftext|> and \ufb01le file \ufb01",
    "hello world xhello hello_world hello! 4hello héllo helloé (hello)",
    "Use strata, strata-run and strata; strata",
    "a-b-c 12-34 1,2;3 x  y -lead trail- 2026-11-25",
]


def variant(base_path, edit):
    tok = Tokenizer.from_file(base_path)
    before = json.loads(tok.to_str())
    edit(tok)
    after = json.loads(tok.to_str())
    changed = {k: after[k] for k in after if after[k] != before[k]}
    return tok, changed


def make_variants():
    out = {}

    def digits(tok):
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])

    def splits(tok):
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split("-", behavior="merged_with_previous"),
            pre_tokenizers.Split(Regex(r"\d+"), behavior="merged_with_next"),
            pre_tokenizers.Split(Regex(r"[,;]"), behavior="removed"),
            pre_tokenizers.Split(Regex(r"\s"), behavior="contiguous"),
            pre_tokenizers.Digits(individual_digits=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])

    def classes(tok):  # Unicode classes whose matches show in the ids: removed or isolated
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(r"\s+"), behavior="removed"),
            pre_tokenizers.Split(Regex(r"\p{N}"), behavior="removed"),
            pre_tokenizers.Split(Regex(r"\p{Lo}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])

    def added(tok):
        tok.add_tokens([AddedToken("hello", single_word=True, normalized=False),
                        AddedToken(" strata", normalized=False)])
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, special=True,
                                           normalized=False)])

    def nfkd(tok):
        tok.normalizer = normalizers.Sequence([normalizers.NFKD()])

    def sp_added(tok):  # on a SentencePiece-style tokenizer: normalized and raw added tokens
        tok.add_tokens([AddedToken("hello", single_word=True, normalized=True),
                        AddedToken("strata", normalized=False), AddedToken(" x", normalized=True)])
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, special=True,
                                           normalized=False)])

    def metaspace(scheme, split, decoder):
        def edit(tok):
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=split)
            if decoder:
                tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=split)
        return edit

    def nfkc_normalized(tok):
        # <|endoftext|> matched after NFKC (so "＜|endoftext|＞" is it too); "ﬁ" is "fi" then.
        tok.normalizer = normalizers.NFKC()
        tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=True)])
        tok.add_tokens([AddedToken("\ufb01le", normalized=True)])

    edits = [("gpt2_digits", "gpt2", digits), ("gpt2_split", "gpt2", splits),
             ("gpt2_classes", "gpt2", classes),
             ("llama3_added", "llama3", added), ("qwen2_nfkd", "qwen2", nfkd),
             ("gpt2_nfkc_normalized", "gpt2", nfkc_normalized),
             ("llama2_added", "llama2", sp_added),
             ("mistral_metaspace_decoder", "mistral", metaspace("first", False, True)),
             ("mistral_always_split", "mistral", metaspace("always", True, True)),
             ("mistral_never", "mistral", metaspace("never", True, True)),
             ("mistral_first_split", "mistral", metaspace("first", True, False))]
    for name, base, edit in edits:
        tok, changed = variant(os.path.join(HERE, base, "tokenizer.json"), edit)
        if name == "gpt2_nfkc_normalized":  # the base's own <|endoftext|>, now normalized: true
            changed["added_tokens"] = [dict(t, normalized=True) if t["content"] == "<|endoftext|>" else t
                                       for t in changed["added_tokens"]]
        tok = Tokenizer.from_str(json.dumps({**json.loads(Tokenizer.from_file(
            os.path.join(HERE, base, "tokenizer.json")).to_str()), **changed}))
        cases = []
        for text in TESTS + VARIANT_TESTS:
            ids = tok.encode(text, add_special_tokens=False).ids
            cases.append({"text": text, "ids": ids,
                          "decoded": tok.decode(ids, skip_special_tokens=False),
                          "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
        out[name] = {"base": base, "set": changed, "cases": cases}
    # Older files: Metaspace with add_prefix_space (and str_rep) but no prepend_scheme.
    legacy = {"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "str_rep": "\u2581",
                                "add_prefix_space": True},
              "decoder": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}}
    base = json.loads(open(os.path.join(HERE, "mistral", "tokenizer.json"), encoding="utf-8").read())
    tok = Tokenizer.from_str(json.dumps({**base, **legacy}))
    out["mistral_add_prefix_space"] = {"base": "mistral", "set": legacy, "cases": [
        {"text": t, "ids": tok.encode(t, add_special_tokens=False).ids,
         "decoded": tok.decode(tok.encode(t, add_special_tokens=False).ids, skip_special_tokens=False),
         "decoded_skip": tok.decode(tok.encode(t, add_special_tokens=False).ids, skip_special_tokens=True)}
        for t in TESTS + VARIANT_TESTS]}
    return out


def main():
    gold = {}
    sp = sentencepiece_model()
    for name, make in [("gpt2", make_gpt2), ("llama3", make_llama3), ("qwen2", make_qwen2),
                       ("llama2", lambda: make_llama2(sp)), ("mistral", lambda: make_mistral(sp))]:
        j = make()
        path = os.path.join(HERE, name, "tokenizer.json")
        write_json(path, j)
        tok = Tokenizer.from_file(path)  # the goldens come from the file as committed
        gold[name] = golden(tok)
        if name == "gpt2":
            files = os.path.join(HERE, "gpt2_files")
            os.makedirs(files, exist_ok=True)
            write_json(os.path.join(files, "vocab.json"), j["model"]["vocab"])
            with open(os.path.join(files, "merges.txt"), "w", encoding="utf-8") as f:
                f.write("#version: 0.2\n")
                for m in j["model"]["merges"]:
                    f.write(m + "\n")
            # The GPT-2 model read from its two files must agree with its tokenizer.json.
            files_tok = Tokenizer(models.BPE.from_file(os.path.join(files, "vocab.json"),
                                                        os.path.join(files, "merges.txt")))
            files_tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
            files_tok.decoder = decoders.ByteLevel()
            files_tok.add_special_tokens(["<|endoftext|>"])
            for g in gold[name]:
                assert files_tok.encode(g["text"], add_special_tokens=False).ids == g["ids"], g["text"]
    for name in list(gold):
        gold[name] = {"cases": gold[name]}
    gold["variants"] = make_variants()

    # One test string per line: small, and diffs read well.
    def dump(obj):
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))

    def cases_text(cases, indent):
        return ",\n".join(indent + dump(c) for c in cases)

    with open(os.path.join(HERE, "golden.json"), "w", encoding="utf-8") as f:
        parts = []
        for name in ["gpt2", "llama3", "qwen2", "llama2", "mistral"]:
            parts.append(f' "{name}": {{"cases": [\n' + cases_text(gold[name]["cases"], "  ") + "\n ]}")
        vparts = []
        for name, v in gold["variants"].items():
            vparts.append(f'  "{name}": {{"base": "{v["base"]}", "set": {dump(v["set"])}, "cases": [\n'
                          + cases_text(v["cases"], "   ") + "\n  ]}")
        parts.append(' "variants": {\n' + ",\n".join(vparts) + "\n }")
        f.write("{\n" + ",\n".join(parts) + "\n}\n")
    json.load(open(os.path.join(HERE, "golden.json"), encoding="utf-8"))
    total = 0
    for dirpath, _, files in os.walk(HERE):
        for f in files:
            total += os.path.getsize(os.path.join(dirpath, f))
    print(f"fixtures: {total / 1024:.0f} KiB in {HERE}")


if __name__ == "__main__":
    main()
