"""`gregor console`: the console's HTTP server, on the standard library only.

    gregor console --bootstrap-server HOST:PORT [--port 8080] [--host 127.0.0.1] [--command-config FILE]

A JSON API under /api/ and one static page (static/index.html, app.js, app.css: no CDN, no build, it
works offline). http.server in threads is enough for a console used by a few people: each request
is one or a few admin calls that block on the cluster, bounded by the request timeout.

The console has no login of its own: it binds 127.0.0.1 unless told otherwise, and what it may see or
change is what the cluster's ACLs allow the principal of --command-config. Guards against a page of
another site driving it through the user's browser: a mutating request must be a POST with a JSON
content type (a cross-site form cannot send one without a CORS preflight, which is never granted),
a Host header that is not the console's own address is refused while bound to loopback (DNS
rebinding), and deleting a topic needs its name typed again ("confirm"). Request bodies are limited to
1 MiB, API requests in flight to 16. See docs/console.md.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from gregor.console.reader import DEFAULT_BROWSE_RECORDS, ClusterReader, ConsoleError, check_bootstrap
from gregor.tools.common import (
    HelpFormatter,
    UsageError,
    add_bootstrap,
    add_command_config,
    add_request_timeout,
    bootstrap,
    read_command_config,
    timeout_s,
)

STATIC_DIR = Path(__file__).parent / "static"
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
MAX_BODY_BYTES = 1024 * 1024  # a produced test message with its headers fits; anything larger is refused (413)
MAX_CONCURRENT_REQUESTS = 16  # API requests in flight; more wait up to QUEUE_WAIT_S, then get 503
QUEUE_WAIT_S = 5.0
MAX_CONNECTIONS = 64  # open HTTP connections (a thread each); more are closed at once
DEFAULT_PORT = 8080
DEFAULT_HOST = "127.0.0.1"


def add_subcommands(sub: Any) -> None:
    p = sub.add_parser("console", help="serve a web console for a cluster", description=__doc__,
                       formatter_class=HelpFormatter)
    add_bootstrap(p)
    add_request_timeout(p)
    add_command_config(p)
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="HTTP port to serve on (0: any free port)")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help="address to bind; the console has no login of its own, so keep it on loopback")
    p.set_defaults(func=run_console)


def run_console(args: argparse.Namespace) -> int:
    servers = bootstrap(args)
    check_bootstrap(servers)
    props = read_command_config(args.command_config)
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, got {args.port}")
    reader = ClusterReader(servers, props, timeout_s(args))
    try:
        server = ConsoleServer((args.host, args.port), reader)
    except OSError as e:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    host, port = server.server_address[:2]
    print(f"Gregor console for {servers} at http://{_url_host(str(host))}:{port}/ (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        reader.close()
    return 0


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class ConsoleServer(ThreadingHTTPServer):
    """The HTTP server with the ClusterReader its handlers use."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], reader: ClusterReader) -> None:
        if ":" in address[0]:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__(address, ConsoleHandler)
        self.reader = reader
        self.slots = threading.BoundedSemaphore(MAX_CONCURRENT_REQUESTS)
        self.loopback = _is_loopback(address[0])
        port = self.server_address[1]
        self.allowed_hosts = {f"{h}:{port}" for h in ("127.0.0.1", "localhost", "[::1]", _url_host(address[0]))}

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread per connection, as ThreadingHTTPServer does, but at most MAX_CONNECTIONS of them: a
        browser keeps a few keep-alive connections; a client opening hundreds gets the extra ones closed."""
        if sum(1 for t in threading.enumerate() if t.name.startswith("console-conn")) >= MAX_CONNECTIONS:
            self.shutdown_request(request)
            return
        t = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                             name=f"console-conn-{client_address[1] if isinstance(client_address, tuple) else ''}",
                             daemon=True)
        t.start()

    def start_in_thread(self) -> threading.Thread:
        """Serve from a daemon thread (tests, embedding); stop with shutdown() then server_close()."""
        thread = threading.Thread(target=self.serve_forever, name="gregor-console", daemon=True)
        thread.start()
        return thread


class ConsoleHandler(BaseHTTPRequestHandler):
    server: ConsoleServer
    protocol_version = "HTTP/1.1"
    server_version = "GregorConsole"
    timeout = 30  # seconds a client may take to send its request

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        sys.stderr.write(f"[console] {self.address_string()} {format % args}\n")

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if isinstance(code, HTTPStatus):
            code = code.value
        if str(code).startswith(("4", "5")):  # only failures: the page polls every second
            super().log_request(code, size)

    # --- plumbing --------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Content-Security-Policy",
                         "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _error(self, status: int, message: str, error: str | None = None) -> None:
        self._json(status, {"error": error or HTTPStatus(status).phrase.upper().replace(" ", "_"),
                            "message": message, "status": status})

    def _host_ok(self) -> bool:
        if not self.server.loopback:
            return True
        return self.headers.get("Host", "") in self.server.allowed_hosts

    def _body(self) -> dict[str, Any]:
        ctype = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise ConsoleError("a change must be sent as application/json", 415, "UNSUPPORTED_MEDIA_TYPE")
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise ConsoleError("Content-Length required", 411, "LENGTH_REQUIRED") from None
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise ConsoleError(f"request body over {MAX_BODY_BYTES} bytes", 413, "PAYLOAD_TOO_LARGE")
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            raise ConsoleError("the body is not valid JSON", 400, "INVALID_REQUEST") from None
        if not isinstance(body, dict):
            raise ConsoleError("the body must be a JSON object", 400, "INVALID_REQUEST")
        return body

    # --- dispatch --------------------------------------------------------------------------------

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        if not self._host_ok():
            self._error(421, f"Host {self.headers.get('Host')!r} is not this console's address", "MISDIRECTED_REQUEST")
            return
        url = urlsplit(self.path)
        path = url.path
        if not path.startswith("/api/"):
            if method != "GET":
                self._error(405, "only GET here")
                return
            self._static(path)
            return
        if not self.server.slots.acquire(timeout=QUEUE_WAIT_S):
            self._error(503, "too many console requests in flight; try again")
            return
        try:
            parts = [unquote(p) for p in path[len("/api/"):].split("/") if p]
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            result = self._route(method, parts, query)
            self._json(200, result)
        except ConsoleError as e:
            hint = f" (is the cluster at {self.server.reader.bootstrap} up?)" if e.status == 504 else ""
            self._error(e.status, str(e) + hint, e.error)
        except UsageError as e:
            self._error(400, str(e), "INVALID_REQUEST")
        except Exception as e:  # a bug or an unforeseen client failure: still JSON, never a hung page
            self._error(500, f"{type(e).__name__}: {e}", "INTERNAL_ERROR")
        finally:
            self.server.slots.release()

    def _static(self, path: str) -> None:
        name = "index.html" if path in ("/", "/index.html") else path.lstrip("/")
        target = (STATIC_DIR / name).resolve()
        if STATIC_DIR.resolve() not in target.parents or not target.is_file() or target.suffix not in STATIC_TYPES:
            self._error(404, f"no such page: {path}")
            return
        self._send(200, target.read_bytes(), STATIC_TYPES[target.suffix])

    def _route(self, method: str, parts: list[str], q: dict[str, str]) -> Any:
        r = self.server.reader
        n = len(parts)
        if method == "GET":
            if parts == ["cluster"]:
                return r.cluster()
            if parts == ["topics"]:
                return r.topics()
            if n == 2 and parts[0] == "topics":
                return r.topic(parts[1])
            if n == 3 and parts[0] == "topics" and parts[2] == "configs":
                return r.topic_configs(parts[1])
            if n == 3 and parts[0] == "topics" and parts[2] == "messages":
                return r.browse(parts[1], _int(q, "partition", 0), _opt_int(q, "offset"),
                                _opt_int(q, "timestamp"), _int(q, "limit", DEFAULT_BROWSE_RECORDS))
            if parts == ["groups"]:
                return r.groups()
            if n == 2 and parts[0] == "groups":
                return r.group(parts[1])
            if parts == ["health"]:
                return {"ok": True, "time_ms": int(time.time() * 1000)}
            if self._is_post_route(parts):
                raise ConsoleError("this endpoint changes the cluster: use POST with a JSON body", 405,
                                   "METHOD_NOT_ALLOWED")
            raise ConsoleError(f"no such API: /api/{'/'.join(parts)}", 404, "NOT_FOUND")
        body = self._body()
        if parts == ["topics"]:
            return r.create_topic(_str(body, "name"), _body_int(body, "partitions", 1),
                                  _body_int(body, "replication_factor", -1), _str_map(body, "configs"))
        if n == 3 and parts[0] == "topics" and parts[2] == "delete":
            if body.get("confirm") != parts[1]:
                raise ConsoleError("deleting a topic needs its name again in 'confirm'", 400, "CONFIRMATION_REQUIRED")
            return r.delete_topic(parts[1])
        if n == 3 and parts[0] == "topics" and parts[2] == "configs":
            delete = body.get("delete") or []
            if not isinstance(delete, list) or not all(isinstance(x, str) for x in delete):
                raise ConsoleError("'delete' must be a list of config names")
            return r.alter_topic_configs(parts[1], _str_map(body, "set"), delete)
        if n == 3 and parts[0] == "topics" and parts[2] == "produce":
            headers = body.get("headers") or []
            if not isinstance(headers, list) or not all(
                    isinstance(h, list) and len(h) == 2 and all(isinstance(x, str) for x in h) for h in headers):
                raise ConsoleError("'headers' must be a list of [key, value] string pairs")
            partition = body.get("partition")
            if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
                raise ConsoleError("'partition' must be an integer or null")
            return r.produce(parts[1], partition, _opt_str(body, "key"), _opt_str(body, "value"),
                             [(k, v) for k, v in headers])
        raise ConsoleError(f"no such API: POST /api/{'/'.join(parts)}", 404, "NOT_FOUND")

    @staticmethod
    def _is_post_route(parts: list[str]) -> bool:
        return len(parts) == 3 and parts[0] == "topics" and parts[2] in ("delete", "produce")


def _int(q: dict[str, str], name: str, default: int) -> int:
    v = _opt_int(q, name)
    return default if v is None else v


def _opt_int(q: dict[str, str], name: str) -> int | None:
    v = q.get(name, "").strip()
    if not v:
        return None
    try:
        return int(v)
    except ValueError:
        raise ConsoleError(f"'{name}' must be an integer, got {v!r}") from None


def _body_int(body: dict[str, Any], name: str, default: int) -> int:
    v = body.get(name, default)
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ConsoleError(f"'{name}' must be an integer")
    return v


def _str(body: dict[str, Any], name: str) -> str:
    v = body.get(name)
    if not isinstance(v, str) or not v:
        raise ConsoleError(f"'{name}' is required")
    return v


def _opt_str(body: dict[str, Any], name: str) -> str | None:
    v = body.get(name)
    if v is not None and not isinstance(v, str):
        raise ConsoleError(f"'{name}' must be a string or null")
    return v


def _str_map(body: dict[str, Any], name: str) -> dict[str, str]:
    v = body.get(name) or {}
    if not isinstance(v, dict) or not all(isinstance(k, str) for k in v):
        raise ConsoleError(f"'{name}' must be an object of config names to values")
    return {k: str(x) for k, x in v.items()}
