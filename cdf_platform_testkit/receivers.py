"""Alert receivers on loopback, each its own process (`LoopbackServer`: a free port, waited
for, stopped by PID, restarted on the same port): an HTTP server that takes a JSON webhook and
Slack's Web API (`chat.postMessage`, answering `{"ok": true}` as Slack does), and an SMTP
server (aiosmtpd). Each writes what it received, one JSON document a line, to a file the test
reads (`received()`), so what a receiver got survives its restarts.

Run as `python -m cdf_platform_testkit.receivers http|smtp <port> <file>`.
"""

from __future__ import annotations

import email
import json
import sys
import threading
import time
from email import policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from cdf_platform.services.service import LoopbackServer, port_open


def _append(file: Path, document: dict[str, Any]) -> None:
    with file.open("a", encoding="utf-8") as out:
        out.write(json.dumps(document) + "\n")
        out.flush()


class _Receiver(LoopbackServer):
    """A receiver process writing to `<folder>/<name>.jsonl`."""

    kind = ""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder / f"{self.kind}-receiver.log")
        self.file = folder / f"{self.kind}-received.jsonl"

    def command(self) -> list[str]:
        return [sys.executable, "-m", __name__, self.kind, str(self.port), str(self.file)]

    def received(self) -> list[dict[str, Any]]:
        """Everything received so far, oldest first."""
        if not self.file.exists():
            return []
        lines = self.file.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]


class HttpReceiver(_Receiver):
    """Takes POSTs: `/api/chat.postMessage` as Slack's Web API, any other path as a webhook;
    records `{"path", "body"}` (the JSON or form body)."""

    name = "alert HTTP receiver"
    kind = "http"

    def ready(self) -> bool:
        return port_open(self.port)


class SmtpReceiver(_Receiver):
    """An SMTP server; records `{"subject", "to", "message_id", "event", "body"}` per mail."""

    name = "alert SMTP receiver"
    kind = "smtp"

    def ready(self) -> bool:
        return port_open(self.port)


def alert_targets(
    http: HttpReceiver, smtp: SmtpReceiver, slack_token: Any = "xoxb-test"
) -> dict[str, Any]:
    """An `alerts:` section's `targets` on these receivers: Slack (`team`, its token
    `slack_token`: a value or `{env: NAME}`), a webhook (`hook`) and email (`mail`)."""
    return {
        "team": {
            "slack": {"token": slack_token, "channel": "#data", "api_url": f"{http.endpoint}/api/"}
        },
        "hook": {"webhook": {"url": f"{http.endpoint}/hook"}},
        "mail": {
            "email": {
                "host": "127.0.0.1",
                "port": smtp.port,
                "sender": "cdf@test",
                "to": ["oncall@test"],
            }
        },
    }


def _serve_http(port: int, file: Path) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Type", "").startswith("application/json"):
                body: Any = json.loads(raw or b"{}")
            else:
                body = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
            _append(file, {"path": self.path, "body": body})
            answer = json.dumps({"ok": True}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            sys.stderr.write(f"{format % args}\n")

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def _serve_smtp(port: int, file: Path) -> None:
    from aiosmtpd.controller import Controller

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
            mail = email.message_from_bytes(envelope.content, policy=policy.default)
            body = mail.get_body(("plain",))
            _append(
                file,
                {
                    "subject": str(mail["Subject"]),
                    "to": list(envelope.rcpt_tos),
                    "message_id": str(mail["Message-ID"]),
                    "event": str(mail["X-Cdf-Event"]),
                    "body": body.get_content() if body is not None else "",
                },
            )
            return "250 Message accepted for delivery"

    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    stop = threading.Event()
    try:
        while not stop.wait(3600):
            time.sleep(0)
    finally:
        controller.stop()


if __name__ == "__main__":
    kind, port_text, path = sys.argv[1:4]
    serve = _serve_http if kind == "http" else _serve_smtp
    serve(int(port_text), Path(path))
