#!/usr/bin/env python3
"""Tiny fakes of the OpenAI Responses API (for Codex CLI) and the Gemini API (for Gemini CLI),
for offline end-to-end tests.

Usage: fake_agents.py LOGFILE [--port N] [--prefix TEXT]

Binds 127.0.0.1 (port 0 = chosen by the OS) and prints the port alone on its first stdout line.
Every request is appended to LOGFILE as one JSON line: {"ts", "method", "path", "headers",
"body", "last_user"} where body is the parsed JSON body and last_user the last text the user
typed, as this fake reads it.

POST /v1/responses (Codex, through a custom provider with wire_api = "responses") answers an
SSE stream: one response.output_item.done with an assistant message holding one output_text
part "<prefix><last user text>", then response.completed.
POST /v1beta/models/<model>:streamGenerateContent?alt=sse (Gemini CLI, with
GOOGLE_GEMINI_BASE_URL) answers one SSE event with a model candidate holding that text.
Anything else gets a JSON 404 (logged too). Only the Python 3 standard library is used.
"""

import argparse
import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG_LOCK = threading.Lock()
ARGS = None


def codex_last_user(body):
    """The last user message's text that is no context codex injects (<environment_context>...)."""
    last = ""
    for item in body.get("input", []) if isinstance(body, dict) else []:
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        parts = item.get("content")
        if isinstance(parts, str):
            parts = [{"type": "input_text", "text": parts}]
        for p in parts or []:
            t = p.get("text", "") if isinstance(p, dict) else ""
            if t and not t.lstrip().startswith("<"):
                last = t
    return last


def gemini_last_user(body):
    last = ""
    for c in body.get("contents", []) if isinstance(body, dict) else []:
        if not isinstance(c, dict) or c.get("role") != "user":
            continue
        for p in c.get("parts", []) or []:
            t = p.get("text", "") if isinstance(p, dict) else ""
            if t and not t.lstrip().startswith("<"):
                last = t
    return last


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def log(self, body, last):
        entry = {
            "ts": time.time(),
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()
                        if k.lower() not in ("authorization", "x-goog-api-key")},
            "body": body,
            "last_user": last,
        }
        with LOG_LOCK:
            with open(ARGS.logfile, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def read_body(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode("utf-8", "replace")

    def send_sse(self, events):
        data = "".join(events).encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def send_json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.log(None, None)
        self.send_json(404, {"error": {"message": "not found", "code": 404}})

    def do_POST(self):
        body = self.read_body()
        path = self.path.split("?")[0]
        if path.endswith("/responses"):
            last = codex_last_user(body)
            self.log(body, last)
            text = ARGS.prefix + last
            rid = "resp_" + uuid.uuid4().hex
            item = {"type": "message", "role": "assistant", "id": "msg_" + uuid.uuid4().hex,
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}
            done = {"type": "response.output_item.done", "output_index": 0, "item": item}
            completed = {"type": "response.completed",
                         "response": {"id": rid, "usage": {
                             "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                             "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                             "total_tokens": 15}}}
            self.send_sse([
                "event: response.output_item.done\ndata: " + json.dumps(done) + "\n\n",
                "event: response.completed\ndata: " + json.dumps(completed) + "\n\n",
            ])
            return
        if ":streamGenerateContent" in path or ":generateContent" in path:
            last = gemini_last_user(body)
            self.log(body, last)
            text = ARGS.prefix + last
            ev = {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                                  "finishReason": "STOP", "index": 0}],
                  "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                                    "totalTokenCount": 15}}
            if ":streamGenerateContent" in path:
                self.send_sse(["data: " + json.dumps(ev) + "\r\n\r\n"])
            else:
                self.send_json(200, ev)
            return
        self.log(body, None)
        self.send_json(404, {"error": {"message": "not found", "code": 404}})


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("logfile")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--prefix", default="ECHO: ")
    ARGS = p.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    print(srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
