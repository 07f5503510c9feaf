#!/usr/bin/env python3
"""`strata serve` through the official `openai` Python client, as users call it.

Usage: check_openai_client.py STRATA QWEN2_TOKENIZER_JSON WORKDIR

The client is pip-installed into a venv under WORKDIR/.. (kept between runs); where pip cannot
install it (no index reachable) the test exits 77 (skipped), saying so. Then, against a server
started on a free loopback port with an API key:
  - models.list; completions and chat completions, streamed and not: the text `strata infer`
    gives each prompt alone, finish_reason and usage as the reference counts them;
  - 16 concurrent streaming clients (greedy and seeded, completions and chat) on 4 rows: all
    finish, each with the text of its prompt alone, usage right;
  - a bad request raises the client's BadRequestError carrying the server's message.
"""
import os
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
OPENAI_VERSION = "openai>=1.30,<3"


def ensure_client(work):
    """Re-runs this script in a venv that has the openai client, unless this one has it."""
    try:
        import openai  # noqa: F401
        return
    except ImportError:
        pass
    venv = os.path.join(os.path.dirname(os.path.abspath(work)), "openai-venv")
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        r = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"SKIP: cannot make a venv: {r.stderr[-500:]}")
            sys.exit(77)
    probe = subprocess.run([python, "-c", "import openai"], capture_output=True)
    if probe.returncode != 0:
        r = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", OPENAI_VERSION],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print(f"SKIP: pip cannot install the openai client here: {r.stderr.strip()[-800:]}")
            sys.exit(77)
    os.execv(python, [python] + sys.argv)


def main():
    strata, tokenizer, work = sys.argv[1:4]
    ensure_client(work)
    import shutil

    import openai

    sys.path.insert(0, HERE)
    from serve_util import Server, serving, infer_alone, make_model_folder, render_chatml

    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model_dir = make_model_folder(os.path.join(work, "tiny-llama"), tokenizer)
    key = "sk-client-test"
    server = Server(strata, ["--model", model_dir, "--max-batch", "4", "--ctx", "512"], work, api_key=key)
    with serving(server):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key=key, max_retries=0)
        models = client.models.list()
        assert [m.id for m in models.data] == ["tiny-llama"], models

        ref = infer_alone(strata, model_dir, "Hello world", work, 10)
        r = client.completions.create(model="tiny-llama", prompt="Hello world", max_tokens=10, temperature=0)
        assert r.choices[0].text == ref["text"], (r, ref)
        assert r.usage.prompt_tokens == ref["prompt_tokens"] and r.usage.completion_tokens == len(ref["ids"]), r.usage
        text = "".join(c.choices[0].text for c in client.completions.create(
            model="tiny-llama", prompt="Hello world", max_tokens=10, temperature=0, stream=True) if c.choices)
        assert text == ref["text"], (text, ref)

        messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi!"}]
        ref = infer_alone(strata, model_dir, render_chatml(messages), work, 8)
        r = client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=8, temperature=0)
        assert r.choices[0].message.content == ref["text"] and r.choices[0].message.role == "assistant", (r, ref)
        assert r.usage.prompt_tokens == ref["prompt_tokens"], (r.usage, ref)
        usage = None
        parts = []
        for c in client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=8, temperature=0,
                                                stream=True, stream_options={"include_usage": True}):
            if c.usage:
                usage = c.usage
            for choice in c.choices:
                parts.append(choice.delta.content or "")
        assert "".join(parts) == ref["text"], (parts, ref)
        assert usage.completion_tokens == len(ref["ids"]) and usage.prompt_tokens == ref["prompt_tokens"], usage
        print("client: models, completions and chat, streamed or not, equal strata infer alone")

        # 16 concurrent streaming clients on 4 rows.
        cases = []
        for i in range(16):
            chat = i % 2 == 1
            seeded = i % 4 >= 2
            prompt = f"Client {i} asks about item {i * 7}."
            cases.append({"chat": chat, "prompt": prompt, "temperature": 0.8 if seeded else 0.0,
                          "max_tokens": 6 + (i * 5) % 20})
        refs = []
        for c in cases:
            text = render_chatml([{"role": "user", "content": c["prompt"]}]) if c["chat"] else c["prompt"]
            refs.append(infer_alone(strata, model_dir, text, work, c["max_tokens"], temperature=c["temperature"]))
        results = [None] * len(cases)

        def run(i):
            c = cases[i]
            common = dict(model="tiny-llama", max_tokens=c["max_tokens"], temperature=c["temperature"], seed=3,
                          stream=True, stream_options={"include_usage": True})
            text, usage = "", None
            if c["chat"]:
                stream = client.chat.completions.create(messages=[{"role": "user", "content": c["prompt"]}], **common)
                for ch in stream:
                    usage = ch.usage or usage
                    text += "".join(x.delta.content or "" for x in ch.choices)
            else:
                stream = client.completions.create(prompt=c["prompt"], **common)
                for ch in stream:
                    usage = ch.usage or usage
                    text += "".join(x.text for x in ch.choices)
            results[i] = (text, usage)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        for i, (c, ref) in enumerate(zip(cases, refs)):
            assert results[i] is not None, f"client {i} did not finish"
            text, usage = results[i]
            assert text == ref["text"], f"client {i} ({c}): {text!r} != {ref['text']!r}"
            assert usage.completion_tokens == len(ref["ids"]), (i, usage, ref)
            assert usage.prompt_tokens == ref["prompt_tokens"], (i, usage, ref)
        print("client: 16 concurrent streams on 4 rows, each equal to its prompt alone, usage right")

        try:
            client.completions.create(model="tiny-llama", prompt="x", max_tokens=5, n=2)
            raise AssertionError("n=2 was accepted")
        except openai.BadRequestError as e:
            assert e.status_code == 400 and "must be 1" in str(e), e
        print("client: a bad request raises BadRequestError with the server's message")
    print("ok")


if __name__ == "__main__":
    main()
