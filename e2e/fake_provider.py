"""A fake payment provider that deduplicates by idempotency key, for the
liveness end-to-end test (e2e/liveness.py).

It behaves as providers with idempotency keys do (Stripe's
``Idempotency-Key``): the first request under a key performs the effect
once and records it; a repeated key is answered with the first answer; a
key whose first request is still being processed is answered ``409``
(``idempotency_key_in_use``).  ``GET /charges/<key>`` looks a key up, for
a reconciler: ``200`` with the answer, ``409`` while in progress, ``404``
when the key was never seen.

Faults, switched on by the test: a new request may be held (``stall``:
the effect happens late, after the caller gave up) or its reply dropped
(``drop``: the effect happens, the connection is closed without an
answer); ``stall_until`` holds every new request until then.

The effects and every request are recorded, so the test can check that
each job had exactly one effect and that no attempt called twice.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional

KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class FakeProvider:
    """The provider's state, shared by the server's threads."""

    def __init__(self, seed: int, stall_seconds: float = 4.0) -> None:
        """No keys yet; faults off until the test switches them on."""
        self.lock = threading.Lock()
        self.keys: Dict[str, Dict[str, Any]] = {}
        self.effects: List[Dict[str, Any]] = []
        self.posts_per_attempt: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.rng = random.Random(seed)
        self.stall_seconds = stall_seconds
        self.stall_p = 0.0
        self.drop_p = 0.0
        self.stall_until = 0.0
        self.server: Optional[ThreadingHTTPServer] = None

    def faults(self, stall_p: float, drop_p: float) -> None:
        """Set the chance that a new request is held, or its reply dropped."""
        with self.lock:
            self.stall_p, self.drop_p = stall_p, drop_p

    def stall_all(self, seconds: float) -> None:
        """Hold every new request for the next `seconds`."""
        with self.lock:
            self.stall_until = time.monotonic() + seconds

    def start(self) -> int:
        """Serve on a free loopback port in a thread; return the port."""
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                provider.charge(self)

            def do_GET(self) -> None:
                provider.lookup(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self.server.server_address[1]

    def stop(self) -> None:
        """Stop serving."""
        if self.server:
            self.server.shutdown()

    @staticmethod
    def reply(h: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        """Send a JSON answer (the caller may have gone: ignore that)."""
        data = json.dumps(body).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except OSError:
            pass

    def charge(self, h: BaseHTTPRequestHandler) -> None:
        """POST /charges: the effect once per key; a repeat gets the first
        answer, a key in progress 409."""
        key = h.headers.get("Idempotency-Key") or ""
        try:
            body = json.loads(h.rfile.read(int(h.headers.get("Content-Length") or 0)))
            job_id = int(body["job_id"])
        except (ValueError, KeyError, TypeError):
            return self.reply(h, 400, {"error": "bad request"})
        if not KEY.match(key):
            with self.lock:
                self.counts["bad_keys"] += 1
            return self.reply(h, 400, {"error": "bad idempotency key"})
        with self.lock:
            self.counts["posts"] += 1
            self.posts_per_attempt[str(h.headers.get("X-Attempt-Id"))] += 1
            rec = self.keys.get(key)
            if rec is not None:
                if rec["job_id"] != job_id:
                    self.counts["key_reused_for_another_job"] += 1
                    return self.reply(h, 422, {"error": "idempotency key reused"})
                if rec["answer"] is None:
                    self.counts["in_progress"] += 1
                    return self.reply(h, 409, {"error": "idempotency_key_in_use"})
                self.counts["replays"] += 1
                return self.reply(h, 200, rec["answer"])
            rec = {"job_id": job_id, "answer": None}
            self.keys[key] = rec
            hold = max(0.0, self.stall_until - time.monotonic())
            roll = self.rng.random()
            stall = roll < self.stall_p
            drop = not stall and roll < self.stall_p + self.drop_p
            if stall or hold:
                self.counts["stalls"] += 1
            if drop:
                self.counts["drops"] += 1
        time.sleep(max(hold, self.stall_seconds if stall else 0.0) + 0.002)
        with self.lock:
            answer = {"charge_id": f"ch_{len(self.effects) + 1}"}
            self.effects.append({"key": key, "job_id": job_id, **answer})
            rec["answer"] = answer
        if drop:
            h.close_connection = True
            return
        self.reply(h, 200, answer)

    def lookup(self, h: BaseHTTPRequestHandler) -> None:
        """GET /charges/<key>: what happened under a key."""
        key = h.path.rsplit("/", 1)[-1]
        with self.lock:
            self.counts["lookups"] += 1
            rec = self.keys.get(key)
        if rec is None:
            return self.reply(h, 404, {"error": "no such key"})
        if rec["answer"] is None:
            return self.reply(h, 409, {"error": "idempotency_key_in_use"})
        return self.reply(h, 200, rec["answer"])
