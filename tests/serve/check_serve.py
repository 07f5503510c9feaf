#!/usr/bin/env python3
"""`strata serve` over plain HTTP (http.client), on the host backend with a tiny LLaMA folder.

Usage: check_serve.py STRATA QWEN2_TOKENIZER_JSON WORKDIR

  - GET /health, /v1/models, /metrics; the API key: 401 without it or with a wrong one (OpenAI's
    error JSON), /health open;
  - completions and chat, streamed and not: the text `strata infer` gives the prompt alone
    (greedy and seeded), the streamed chunks adding up to the whole reply, finish_reason,
    usage; echo; a stop string; logprobs;
  - every error of the request checks answered with its status and OpenAI's error JSON, the
    server still answering afterwards: malformed JSON, wrong types, unknown fields, a body over
    --max-body (413), a prompt longer than the context and max_tokens past it (400 saying by how
    much), an unknown path (404), ids outside the vocabulary, a full queue (429 + Retry-After);
  - clients that disconnect mid-stream free their rows: the requests end "cancelled" and the next
    request is served;
  - SIGTERM drains: a running stream finishes with [DONE], a new request gets 503, exit 0.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import (Server, serving, infer_alone, make_model_folder, render_chatml, streamed_text)  # noqa: E402

KEY = "sk-test-123"


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def expect_error(server, status, body=None, raw=None, path="/v1/completions", says="", headers=None, auth=True):
    code, hdrs, data = server.request("POST", path, body, raw=raw, headers=headers, auth=auth)
    check(code == status, f"{path} {raw or json.dumps(body)[:200]}: status {code}, expected {status}: {data[:300]}")
    err = json.loads(data)["error"]
    check(set(err) == {"message", "type", "param", "code"}, f"error fields: {err}")
    check(says in err["message"], f"error message {err['message']!r} does not say {says!r}")
    return hdrs, err


def basics(server, model_dir, strata, work):
    code, _, health = server.json("GET", "/health", auth=False)
    check(code == 200 and health["status"] == "ok", f"/health: {code} {health}")
    code, _, models = server.json("GET", "/v1/models")
    check(code == 200 and models["data"][0]["id"] == "tiny-llama", f"/v1/models: {models}")
    # The key.
    code, _, body = server.json("GET", "/v1/models", auth=False)
    check(code == 401 and "API key" in body["error"]["message"], f"no key: {code} {body}")
    code, _, body = server.json("GET", "/v1/models", auth=False, headers={"Authorization": "Bearer sk-wrong"})
    check(code == 401 and body["error"]["code"] == "invalid_api_key", f"wrong key: {code} {body}")

    # Greedy and seeded completions equal `strata infer` on the prompt alone.
    for temperature, top_p in ((0.0, 1.0), (0.9, 0.95)):
        ref = infer_alone(strata, model_dir, "The quick brown fox", work, 12, temperature=temperature, top_p=top_p)
        req = {"model": "tiny-llama", "prompt": "The quick brown fox", "max_tokens": 12, "temperature": temperature,
               "top_p": top_p, "seed": 3}
        code, _, reply = server.json("POST", "/v1/completions", req)
        check(code == 200, f"completion: {code} {reply}")
        choice = reply["choices"][0]
        check(choice["text"] == ref["text"], f"completion text {choice['text']!r} != strata infer's {ref['text']!r}")
        check(reply["usage"]["prompt_tokens"] == ref["prompt_tokens"], f"usage {reply['usage']} vs {ref}")
        check(reply["usage"]["completion_tokens"] == len(ref["ids"]), f"usage {reply['usage']} vs {len(ref['ids'])} ids")
        check(reply["usage"]["total_tokens"] == ref["prompt_tokens"] + len(ref["ids"]), "total_tokens")
        check(choice["finish_reason"] == ref["finish_reason"], f"finish_reason {choice['finish_reason']}")
        check(reply["object"] == "text_completion" and reply["id"].startswith("cmpl-"), reply)
        events = server.stream("/v1/completions", req)
        text, reason, usage = streamed_text(events)
        check(text == ref["text"], f"streamed {text!r} != {ref['text']!r}")
        check(reason == ref["finish_reason"] and usage == reply["usage"], f"stream end {reason} {usage}")
    # Token ids in, and echo.
    ids = [5, 17, 300, 42]
    ref = infer_alone(strata, model_dir, ids, work, 6)
    code, _, reply = server.json("POST", "/v1/completions", {"prompt": ids, "max_tokens": 6, "temperature": 0})
    check(code == 200 and reply["choices"][0]["text"] == ref["text"], f"ids prompt: {reply}")
    code, _, reply = server.json("POST", "/v1/completions",
                                 {"prompt": "Hello there", "max_tokens": 4, "temperature": 0, "echo": True})
    check(reply["choices"][0]["text"].startswith("Hello there"), f"echo: {reply}")
    # A stop string: the text ends before it, finish_reason "stop".
    full = infer_alone(strata, model_dir, "Once upon a time", work, 24)["text"]
    cut = len(full) // 2
    stop = full[cut:cut + 2]
    check(len(stop) == 2, f"reference too short: {full!r}")
    expected = full[:full.find(stop)]
    for stream in (False, True):
        req = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "stop": [stop]}
        if stream:
            text, reason, _ = streamed_text(server.stream("/v1/completions", req))
        else:
            code, _, reply = server.json("POST", "/v1/completions", req)
            text, reason = reply["choices"][0]["text"], reply["choices"][0]["finish_reason"]
        check(text == expected and reason == "stop", f"stop {stop!r} (stream {stream}): {text!r}, {reason}; want {expected!r}")
    # Logprobs: the chosen token's with the top alternatives.
    code, _, reply = server.json("POST", "/v1/completions",
                                 {"prompt": "abc", "max_tokens": 3, "temperature": 0, "logprobs": 2})
    lp = reply["choices"][0]["logprobs"]
    check(len(lp["tokens"]) == 3 and len(lp["top_logprobs"][0]) >= 1, f"logprobs: {lp}")
    check(all(x <= 0 for x in lp["token_logprobs"]), f"logprobs: {lp}")
    check(abs(max(lp["top_logprobs"][0].values()) - lp["token_logprobs"][0]) < 1e-6, "greedy = the top logprob")

    # Chat: the messages through the template, as `strata infer` on the rendered prompt.
    messages = [{"role": "user", "content": "Say something."}]
    ref = infer_alone(strata, model_dir, render_chatml(messages), work, 10)
    req = {"model": "x", "messages": messages, "max_tokens": 10, "temperature": 0}
    code, _, reply = server.json("POST", "/v1/chat/completions", req)
    check(code == 200, f"chat: {code} {reply}")
    check(reply["object"] == "chat.completion" and reply["choices"][0]["message"]["role"] == "assistant", reply)
    check(reply["choices"][0]["message"]["content"] == ref["text"], f"chat {reply} vs {ref}")
    check(reply["usage"]["prompt_tokens"] == ref["prompt_tokens"], f"chat usage {reply['usage']} vs {ref}")
    events = server.stream("/v1/chat/completions", dict(req, stream_options={"include_usage": True}))
    check(events[0]["choices"][0]["delta"].get("role") == "assistant", f"first chunk {events[0]}")
    check(events[-2]["choices"] == [] and events[-2]["usage"] == reply["usage"], f"usage chunk {events[-2]}")
    text, reason, _ = streamed_text(events)
    check(text == ref["text"] and reason == reply["choices"][0]["finish_reason"], f"chat stream {text!r}")
    print("basics: health, models, key, completions and chat (streamed or not) = strata infer alone; stop, echo, logprobs")


def errors(server, max_body):
    P = "/v1/completions"
    expect_error(server, 400, raw="{not json", says="could not parse the JSON")
    expect_error(server, 400, raw="[1, 2]", says="must be a JSON object")
    expect_error(server, 400, {"prompt": "x", "temperature": "warm"}, says="must be a number")
    expect_error(server, 400, {"prompt": "x", "bogus": True}, says="Unrecognized request argument supplied: bogus")
    expect_error(server, 400, {"prompt": "x", "n": 3}, says="must be 1")
    expect_error(server, 400, {"prompt": [1, 99999]}, says="outside the vocabulary")
    expect_error(server, 400, {"max_tokens": 5}, says="'prompt' is a required property")
    expect_error(server, 400, {"messages": [{"role": "user"}]}, path="/v1/chat/completions", says="content' is missing")
    expect_error(server, 413, raw=json.dumps({"prompt": "x" * (max_body + 10)}), says="larger than")
    _, err = expect_error(server, 400, {"prompt": list(range(1, 600)), "max_tokens": 1}, says="has 599 tokens")
    check("too many" in err["message"] and err["code"] == "context_length_exceeded", err)
    _, err = expect_error(server, 400, {"prompt": [1, 2, 3], "max_tokens": 510}, says="1 too many")
    check(err["param"] == "max_tokens", err)
    code, _, data = server.request("GET", "/v1/nothing")
    check(code == 404 and "no such endpoint" in json.loads(data)["error"]["message"], f"404: {code} {data}")
    code, _, _ = server.request("GET", "/health", auth=False)
    check(code == 200, "the server stopped answering after the errors")
    check(server.metric('strata_requests_total{outcome="invalid"}') >= 12, "invalid requests counted")
    print("errors: each answered with its status and OpenAI's error JSON; the server still answers")


def long_stream_then_drop(server, prompt, started):
    """Opens a long stream, reads its first chunk, then closes the socket (a client gone)."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    body = json.dumps({"prompt": prompt, "max_tokens": 400, "temperature": 0, "stream": True})
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
    data = b""
    while b"data: " not in data:
        chunk = s.recv(4096)
        check(chunk, "the stream closed before its first chunk")
        data += chunk
    started.release()
    s.close()


def disconnects_and_queue(server):
    cancelled0 = server.metric('strata_requests_total{outcome="cancelled"}')
    # 4 rows (--max-batch 4): fill them with long streams whose clients go away.
    started = threading.Semaphore(0)
    threads = [threading.Thread(target=long_stream_then_drop, args=(server, f"prompt {i}", started)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # The next request is served: the rows were freed.
    t0 = time.time()
    code, _, reply = server.json("POST", "/v1/completions", {"prompt": "after", "max_tokens": 3, "temperature": 0})
    check(code == 200 and reply["usage"]["completion_tokens"] == 3, f"after the disconnects: {code} {reply}")
    deadline = time.time() + 30
    while server.metric('strata_requests_total{outcome="cancelled"}') < cancelled0 + 4 and time.time() < deadline:
        time.sleep(0.1)
    check(server.metric('strata_requests_total{outcome="cancelled"}') >= cancelled0 + 4,
          "the disconnected streams did not end cancelled")
    check(server.metric("strata_requests_running") <= 1, "rows still held after the disconnects")
    print(f"disconnects: 4 streams dropped mid-way ended cancelled; the next request served in {time.time() - t0:.2f} s")

    # A full queue: 4 rows + 2 waiting (--max-queue 2); more at once get 429 with Retry-After.
    results = []
    lock = threading.Lock()

    def one(i):
        code, hdrs, data = server.request("POST", "/v1/completions",
                                          {"prompt": f"q{i}", "max_tokens": 480, "temperature": 0})
        with lock:
            results.append((code, hdrs, data))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r[0] for r in results)
    check(codes.count(200) >= 6 and codes.count(429) >= 1 and set(codes) <= {200, 429}, f"statuses {codes}")
    for code, hdrs, data in results:
        if code == 429:
            check(hdrs.get("retry-after") == "1", f"429 without Retry-After: {hdrs}")
            check(json.loads(data)["error"]["code"] == "rate_limit_exceeded", data)
    print(f"queue: 12 at once on 4 rows + 2 waiting: {codes.count(200)} served, {codes.count(429)} got 429 + Retry-After")


def drain(server):
    # Prompts whose 480 greedy tokens hold no end token (the random model samples one sometimes).
    long_prompts = []
    for i in range(40):
        code, _, r = server.json("POST", "/v1/completions", {"prompt": f"drain {i}", "max_tokens": 480, "temperature": 0})
        if r["choices"][0]["finish_reason"] == "length":
            long_prompts.append(f"drain {i}")
        if len(long_prompts) == 4:
            break
    check(len(long_prompts) == 4, "no prompt runs 480 tokens without an end token")
    results = {}

    def streamer(p):
        results[p] = server.stream("/v1/completions", {"prompt": p, "max_tokens": 480, "temperature": 0})

    threads = [threading.Thread(target=streamer, args=(p,)) for p in long_prompts]
    for t in threads:
        t.start()
    deadline = time.time() + 30
    while server.metric("strata_requests_running") < 4 and time.time() < deadline:
        time.sleep(0.005)
    server.proc.send_signal(signal.SIGTERM)
    # The drain has begun once /health says so (480 tokens x 4 streams keep it going well past that).
    deadline = time.time() + 30
    while server.json("GET", "/health", auth=False)[2]["status"] != "draining" and time.time() < deadline:
        time.sleep(0.005)
    code, _, data = server.request("POST", "/v1/completions", {"prompt": "late", "max_tokens": 2})
    check(code == 503 and "shutting down" in json.loads(data)["error"]["message"], f"a request while draining: {code}")
    code, _, health = server.json("GET", "/health", auth=False)
    check(code == 503 and health["status"] == "draining", f"/health while draining: {code} {health}")
    for t in threads:
        t.join(60)
    for p in long_prompts:
        text, reason, usage = streamed_text(results[p])
        check(reason == "length" and usage["completion_tokens"] == 480, f"a running stream did not finish: {reason} {usage}")
    code = server.proc.wait(timeout=60)  # the one SIGTERM: it stops by itself
    server.stop()
    check(code == 0, f"exit {code} after SIGTERM:\n{server.output()[-2000:]}")
    check("draining" in server.output(), "no drain message")
    print("drain: 4 running streams finished their 480 tokens, a new request got 503, /health said draining, exit 0")


def main():
    strata, tokenizer, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model_dir = make_model_folder(os.path.join(work, "tiny-llama"), tokenizer)
    max_body = 64 * 1024
    server = Server(strata, ["--model", model_dir, "--max-batch", "4", "--max-queue", "2", "--ctx", "512",
                             "--max-body", "64KiB", "--prefill-chunk", "64"], work, api_key=KEY)
    with serving(server, stop=False):
        basics(server, model_dir, strata, work)
        errors(server, max_body)
        disconnects_and_queue(server)
        drain(server)
    print("ok")


if __name__ == "__main__":
    main()
