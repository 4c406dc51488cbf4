#!/usr/bin/env python3
"""Tiny fake of the Anthropic Messages API for offline Claude Code tests.

Usage: fake_api.py LOGFILE [--port N] [--prefix TEXT] [--delay SECONDS] [--hold-file PATH]

Binds 127.0.0.1 (port 0 = chosen by the OS unless --port is given) and prints
the port alone on its first stdout line.  Every request is appended to LOGFILE
as one JSON line: {"ts", "method", "path", "headers", "body"} where body is the
parsed JSON request body (or the raw text, or null).

POST /v1/messages answers with an assistant turn whose text is
"<prefix><last user text>" (prefix defaults to "ECHO: "), as an SSE stream when
the request has "stream": true, else as one JSON message.  Other endpoints get
harmless answers (count_tokens, models) or a JSON 404, and are logged too.
With --hold-file, a /v1/messages request is logged at once but answered only
once PATH does not exist (a turn held in flight for as long as a test wants).
A typed text "RUN: <command>" is answered with a Bash tool call running that
command (a permission dialog unless claude allows it), "BGRUN: <command>" with
the same call and "run_in_background": true (a background shell); the request
that carries the tool's result is answered "TOOL DONE".
Only the Python 3.11 standard library is used.
"""

import argparse
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG_LOCK = threading.Lock()
ARGS = None


def log_request(method, path, headers, body):
    entry = {
        "ts": time.time(),
        "method": method,
        "path": path,
        "headers": {k.lower(): v for k, v in headers.items()
                    if k.lower() not in ("x-api-key", "authorization")},
        "body": body,
    }
    line = json.dumps(entry, ensure_ascii=False)
    with LOG_LOCK:
        with open(ARGS.logfile, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def block_text(block):
    """Text of one content block, or None if it carries no user-typed text."""
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return None
    if block.get("type") == "text":
        return block.get("text", "")
    return None


def last_user_text(body):
    """The last plain-text piece of the last user message.

    Claude Code puts <system-reminder> blocks (context, CLAUDE.md, ...) into
    user messages next to what was typed; those are skipped when a typed text
    block is present.
    """
    msgs = body.get("messages") or []
    for msg in reversed(msgs):
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        if isinstance(content, str):
            return content.strip()
        texts = [t for t in (block_text(b) for b in content or []) if t is not None]
        typed = [t for t in texts if not t.lstrip().startswith("<system-reminder>")]
        pick = typed or texts
        if pick:
            return pick[-1].strip()
        return ""
    return ""


def reply_text(body):
    text = last_user_text(body)
    # keep a single line so the reply is easy to find on a terminal screen
    text = " ".join(text.split())
    text = ARGS.prefix + text
    # Structured-output requests (Claude Code's session-title request sends
    # output_config.format = {"type": "json_schema", ...}) get a JSON object
    # with every string property of the schema filled in.
    fmt = (body.get("output_config") or {}).get("format") or {}
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        props = (fmt.get("schema") or {}).get("properties") or {}
        obj = {k: ("Echo session" if k == "title" else text[:60])
               for k, v in props.items() if (v or {}).get("type") == "string"}
        return json.dumps(obj)
    return text


def last_user_has_tool_result(body):
    msgs = body.get("messages") or []
    for msg in reversed(msgs):
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        return isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    return False


def tool_call(body):
    """The Bash call a "RUN: ..." / "BGRUN: ..." text asks for, or None."""
    if last_user_has_tool_result(body):
        return None
    text = last_user_text(body)
    for tag, bg in (("BGRUN:", True), ("RUN:", False)):
        if text.startswith(tag):
            inp = {"command": text[len(tag):].strip(), "description": "fake api tool call"}
            if bg:
                inp["run_in_background"] = True
            return inp
    return None


def usage_in(body):
    return max(1, len(json.dumps(body.get("messages", []))) // 4)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-anthropic/1.0"

    def log_message(self, fmt, *args):  # keep stderr quiet
        if ARGS.verbose:
            sys.stderr.write("fake_api: " + (fmt % args) + "\n")

    # ---- helpers ---------------------------------------------------------
    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n > 0 else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def send_json(self, code, obj, extra_headers=None):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_fake_" + uuid.uuid4().hex[:20])
        for k, v in (extra_headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def not_found(self):
        self.send_json(404, {"type": "error", "error": {
            "type": "not_found_error", "message": "fake api: no such endpoint " + self.path}})

    # ---- verbs -----------------------------------------------------------
    def do_HEAD(self):
        log_request("HEAD", self.path, self.headers, None)
        self.send_json(200, {})

    def do_GET(self):
        log_request("GET", self.path, self.headers, None)
        path = self.path.split("?", 1)[0]
        if path in ("/", ""):
            self.send_json(200, {"ok": True})
        elif path == "/v1/models":
            self.send_json(200, {"data": [{"type": "model", "id": m, "display_name": m,
                                           "created_at": "2025-01-01T00:00:00Z"}
                                          for m in ("claude-sonnet-4-5", "claude-haiku-4-5",
                                                    "claude-opus-4-1")],
                                 "has_more": False, "first_id": None, "last_id": None})
        elif path.startswith("/v1/models/"):
            m = path.rsplit("/", 1)[1]
            self.send_json(200, {"type": "model", "id": m, "display_name": m,
                                 "created_at": "2025-01-01T00:00:00Z"})
        else:
            self.not_found()

    def do_OPTIONS(self):
        log_request("OPTIONS", self.path, self.headers, None)
        self.send_json(200, {})

    def do_DELETE(self):
        log_request("DELETE", self.path, self.headers, self.read_body())
        self.not_found()

    def do_PUT(self):
        log_request("PUT", self.path, self.headers, self.read_body())
        self.not_found()

    def do_POST(self):
        body = self.read_body()
        log_request("POST", self.path, self.headers, body)
        path = self.path.split("?", 1)[0]
        if path == "/v1/messages" and isinstance(body, dict):
            self.messages(body)
        elif path == "/v1/messages/count_tokens" and isinstance(body, dict):
            self.send_json(200, {"input_tokens": usage_in(body)})
        else:
            self.not_found()

    # ---- /v1/messages ----------------------------------------------------
    def messages(self, body):
        while ARGS.hold_file and os.path.exists(ARGS.hold_file):
            time.sleep(0.05)
        tool = tool_call(body)
        text = "TOOL DONE" if last_user_has_tool_result(body) else reply_text(body)
        model = body.get("model") or "claude-sonnet-4-5"
        mid = "msg_fake_" + uuid.uuid4().hex[:20]
        in_tok = usage_in(body)
        out_tok = max(1, len(text) // 4)
        if not body.get("stream"):
            self.send_json(200, {
                "id": mid, "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": in_tok, "output_tokens": out_tok,
                          "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
            })
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("request-id", "req_fake_" + uuid.uuid4().hex[:20])
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        def ev(name, data):
            self.wfile.write(("event: %s\ndata: %s\n\n" % (name, json.dumps(data))).encode())
            self.wfile.flush()

        ev("message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": in_tok, "output_tokens": 1,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})
        if tool is not None:
            ev("content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "tool_use", "id": "toolu_fake_"
                                                         + uuid.uuid4().hex[:20], "name": "Bash",
                                                         "input": {}}})
            ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "input_json_delta",
                                                 "partial_json": json.dumps(tool)}})
            ev("content_block_stop", {"type": "content_block_stop", "index": 0})
            ev("message_delta", {"type": "message_delta",
                                 "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                                 "usage": {"output_tokens": 20}})
            ev("message_stop", {"type": "message_stop"})
            return
        ev("content_block_start", {"type": "content_block_start", "index": 0,
                                   "content_block": {"type": "text", "text": ""}})
        ev("ping", {"type": "ping"})
        step = 16
        for i in range(0, len(text), step):
            if ARGS.delay and i:
                time.sleep(ARGS.delay)
            ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "text_delta", "text": text[i:i + step]}})
        ev("content_block_stop", {"type": "content_block_stop", "index": 0})
        ev("message_delta", {"type": "message_delta",
                             "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                             "usage": {"output_tokens": out_tok}})
        ev("message_stop", {"type": "message_stop"})


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("logfile")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--prefix", default="ECHO: ")
    ap.add_argument("--delay", type=float, default=0.0,
                    help="seconds to sleep between streamed text chunks (to watch a busy UI)")
    ap.add_argument("--hold-file", default=None,
                    help="answer /v1/messages only while this file does not exist")
    ap.add_argument("--verbose", action="store_true")
    ARGS = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    srv.daemon_threads = True
    print(srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
