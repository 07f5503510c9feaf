#!/usr/bin/env python3
"""Renders every template of this folder with transformers' own chat-template renderer and
writes goldens.json, which tests/models/test_chat_template.cpp compares byte for byte with
strata's interpreter (models/chat/). Nothing Python runs at test time.

Pinned: transformers 5.24.0, jinja2 3.1.6 (any version whose
transformers.utils.chat_template_utils has render_jinja_template works; the versions used are
written into goldens.json). The Python first on PATH lacks torch, which transformers does not
need for this:

    python3 -m venv /tmp/chatvenv && /tmp/chatvenv/bin/pip install transformers==5.24.0 jinja2==3.1.6
    /tmp/chatvenv/bin/python tests/models/chat_templates/make_goldens.py

strftime_now sees a fixed time (kNow below, 2024-09-03 12:00 UTC; datetime.now() is patched), so
Llama 3.2's "Today Date" is stable; the C++ test passes the same time in RenderOptions::now.
A case whose template raises (raise_exception, e.g. roles not alternating) records the message
instead of the output.
"""
import datetime
import json
import os
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils

HERE = os.path.dirname(os.path.abspath(__file__))
kNow = 1725364800  # 2024-09-03T12:00:00Z


class FixedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime.datetime.fromtimestamp(kNow, tz)


chat_template_utils.datetime = FixedDatetime

# name -> (file, bos_token, eos_token): the tokens as the model's tokenizer_config.json names them.
TEMPLATES = {
    "llama3_8b_instruct": ("llama3_8b_instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "llama3_1_8b_instruct": ("llama3_1_8b_instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "llama3_2_3b_instruct": ("llama3_2_3b_instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "llama2_7b_chat": ("llama2_7b_chat.jinja", "<s>", "</s>"),
    "mistral_7b_instruct_v0_1": ("mistral_7b_instruct_v0_1.jinja", "<s>", "</s>"),
    "mistral_7b_instruct_v0_3": ("mistral_7b_instruct_v0_3.jinja", "<s>", "</s>"),
    "mixtral_8x7b_instruct_v0_1": ("mixtral_8x7b_instruct_v0_1.jinja", "<s>", "</s>"),
    "qwen2_7b_instruct": ("qwen2_7b_instruct.jinja", "", "<|im_end|>"),
    "qwen2_5_7b_instruct": ("qwen2_5_7b_instruct.jinja", "", "<|im_end|>"),
    "qwen3": ("qwen3.jinja", "", "<|im_end|>"),
    "chatml": ("chatml.jinja", "<|endoftext|>", "<|endoftext|>"),
}

S = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello, who are you?"}
A1 = {"role": "assistant", "content": "I am an assistant."}
U2 = {"role": "user", "content": "What is 2 + 2?"}
A2 = {"role": "assistant", "content": "4"}
CONVERSATIONS = {
    "system_user": [S, U1],
    "user": [U1],
    "multi_turn": [U1, A1, U2],
    "system_multi_turn": [S, U1, A1, U2],
    "closed": [U1, A1, U2, A2],
    "unicode_whitespace": [
        {"role": "system", "content": "  Réponds en français.\n\n"},
        {"role": "user", "content": "\t 你好，世界 🚀 naïve café\n\n  indented\n"},
        {"role": "assistant", "content": "   spaced   out   \n"},
        {"role": "user", "content": "{{ not a template }} {% raw %} '\"\\ <|im_end|>"},
    ],
    "thinking_history": [
        U1,
        {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHello! I am an assistant."},
        U2,
    ],
    "not_alternating": [U1, U2],
    "assistant_first": [A1, U1],
    "system_only": [S],
}


def render(source, messages, bos, eos, add_generation_prompt, enable_thinking):
    kwargs = {"bos_token": bos, "eos_token": eos}
    if enable_thinking is not None:
        kwargs["enable_thinking"] = enable_thinking
    rendered, _ = chat_template_utils.render_jinja_template(
        conversations=[messages], chat_template=source, add_generation_prompt=add_generation_prompt, **kwargs)
    return rendered[0]


def main():
    cases = []
    for name, (file, bos, eos) in TEMPLATES.items():
        with open(os.path.join(HERE, file), encoding="utf-8", newline="") as f:
            source = f.read()
        thinking = [None, True, False] if name == "qwen3" else [None]
        for conv_name, messages in CONVERSATIONS.items():
            for agp in (True, False):
                for et in thinking:
                    case = {"template": name, "conversation": conv_name, "add_generation_prompt": agp,
                            "enable_thinking": et}
                    try:
                        case["output"] = render(source, messages, bos, eos, agp, et)
                    except jinja2.exceptions.TemplateError as e:
                        case["error"] = str(e)
                    cases.append(case)
    out = {
        "generator": "tests/models/chat_templates/make_goldens.py",
        "transformers_version": transformers.__version__,
        "jinja2_version": jinja2.__version__,
        "now": kNow,
        "templates": {n: {"file": f, "bos_token": b, "eos_token": e} for n, (f, b, e) in TEMPLATES.items()},
        "conversations": CONVERSATIONS,
        "cases": cases,
    }
    with open(os.path.join(HERE, "goldens.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum("error" in c for c in cases)
    print(f"{len(cases)} cases ({errors} raise) -> goldens.json", file=sys.stderr)


if __name__ == "__main__":
    main()
