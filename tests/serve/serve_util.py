"""What the `strata serve` tests share: a tiny model folder with a tokenizer and a chat template,
a server started on a free loopback port, plain HTTP requests, server-sent events, and the
tokens `strata infer` gives a prompt alone (the reference every reply is checked against).

Standard library only (the tests run with /usr/bin/python3; the openai client test adds its own
venv).
"""
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

# Qwen2's ChatML template as transformers renders it (the goldens of tests/models/chat_templates
# check strata's renderer against transformers; here any template will do).
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

WEIGHT_SEED = 3


def render_chatml(messages):
    out = ""
    if messages[0]["role"] != "system":
        out += "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    for m in messages:
        out += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


def make_model_folder(folder, tokenizer_json, context=512):
    """A LLaMA of 2 small layers (random weights from --seed: no safetensors) with the Qwen2
    tokenizer fixture (ChatML's special tokens) and a chat template."""
    os.makedirs(folder, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 1024,
              "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": context,
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    shutil.copy(tokenizer_json, os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": CHATML, "eos_token": "<|im_end|>", "bos_token": None}, f)
    return folder


class Server:
    """`strata serve` on a free loopback port; stop() sends SIGTERM and returns the exit code."""

    def __init__(self, strata, args, workdir, api_key=None, name="server"):
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.log = open(self.log_path, "w")
        cmd = [strata, "serve", "--device", "host", "--port", "0", "--seed", str(WEIGHT_SEED)] + args
        if api_key:
            cmd += ["--api-key", api_key]
        self.api_key = api_key
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=workdir)
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline:
            text = open(self.log_path).read()
            m = re.search(r"listening on http://[\d.]+:(\d+)", text)
            if m and self.port is None:
                self.port = int(m.group(1))
            if "ready in" in text:
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"strata serve exited {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.05)
        raise AssertionError("strata serve did not get ready in 120 s:\n" + open(self.log_path).read()[-3000:])

    def output(self):
        return open(self.log_path).read()

    def request(self, method, path, body=None, headers=None, auth=True, timeout=120, raw=None):
        """(status, headers dict, body bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        if auth and self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        conn.close()
        return out

    def json(self, method, path, body=None, **kw):
        status, headers, data = self.request(method, path, body, **kw)
        return status, headers, json.loads(data)

    def stream(self, path, body, timeout=120):
        """The events of a streamed reply: a list of parsed JSON objects, then the string "[DONE]"."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        conn.request("POST", path, body=json.dumps(dict(body, stream=True)), headers=h)
        r = conn.getresponse()
        assert r.status == 200, f"{path}: {r.status} {r.read()[:500]}"
        assert r.getheader("Content-Type", "").startswith("text/event-stream"), r.getheaders()
        events = []
        for line in r:
            line = line.decode().rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            payload = line[len("data: "):]
            if payload == "[DONE]":
                events.append("[DONE]")
                break
            events.append(json.loads(payload))
        conn.close()
        return events

    def metric(self, name):
        status, _, data = self.request("GET", "/metrics")
        assert status == 200
        for line in data.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        raise AssertionError(f"no {name} in /metrics")

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.log.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@contextlib.contextmanager
def serving(server, stop=True):
    """Runs the body against `server`; on a failure kills it and prints the end of its log. With
    `stop`, a body that ends well is followed by SIGTERM, which must exit 0."""
    try:
        yield server
    except BaseException:
        server.kill()
        print(server.output()[-4000:], file=sys.stderr)
        raise
    if stop:
        code = server.stop()
        assert code == 0, f"strata serve exited {code} after SIGTERM:\n{server.output()[-2000:]}"


def streamed_text(events):
    """The text of a streamed completion or chat reply, its finish_reason and its usage."""
    assert events and events[-1] == "[DONE]", f"the stream did not end with [DONE]: {events[-3:]}"
    text, reason, usage = "", None, None
    for e in events[:-1]:
        assert "error" not in e, e
        if e.get("usage"):
            usage = e["usage"]
        for c in e["choices"]:
            text += c["delta"].get("content", "") if "delta" in c else c["text"]
            if c.get("finish_reason"):
                reason = c["finish_reason"]
    return text, reason, usage


def infer_alone(strata, model, prompt, workdir, max_new_tokens, temperature=0.0, top_p=1.0, top_k=0):
    """`strata infer` on one prompt (text, or a list of ids): its completion line (ids, text)."""
    path = os.path.join(workdir, "alone.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps({"ids": prompt} if isinstance(prompt, list) else {"prompt": prompt}) + "\n")
    r = subprocess.run([strata, "infer", "--device", "host", "--model", model, "--prompts", path,
                        "--seed", str(WEIGHT_SEED), "--max-new-tokens", str(max_new_tokens), "--batch", "1",
                        "--temperature", str(temperature), "--top-p", str(top_p), "--top-k", str(top_k)],
                       capture_output=True, text=True, timeout=120, cwd=workdir)
    assert r.returncode == 0, f"strata infer: exit {r.returncode}\n{r.stderr[-2000:]}"
    return json.loads(r.stdout.splitlines()[0])
