"""The lab's apt proxy: nodes fetch Debian packages through it, and through nothing else.

A forward proxy for plain-HTTP Debian mirrors (no CONNECT) that serves only GET/HEAD for the hosts of this
machine's own apt sources (`mirrors.sources()`); anything else gets 403. Files under
`/pool/` never change once published, so they are cached on disk and served locally on
the next request: the second node (or the re-run after `lab down`) installs without
downloading. It also serves the lab's own repositories (`--serve /PREFIX/=DIR`, the
Kubernetes apt repository built by skyrack.build): as an origin server for a plain GET
(curl fetching `Release.key`) and as a proxy for its own address (apt, whose every request
goes through the proxy). It speaks HTTPS only, with the certificate `--tls-cert/--tls-key` name:
apt talks TLS to it as an HTTPS proxy (`Acquire::http::Proxy "https://..."`, apt >= 2.3) and
fetches the Kubernetes repository from it as an HTTPS origin. Run it as
``python -m skyrack.lab.proxy --listen IP:PORT --cache DIR --tls-cert PEM --tls-key PEM [--serve /PREFIX/=DIR ...]``.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import shutil
import ssl
import sys
import tempfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from ..build import mirrors

CHUNK = 1 << 16
HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
               "proxy-authorization", "proxy-authenticate"}


class Handler(BaseHTTPRequestHandler):
    server_version = "skyrack-lab-proxy"
    protocol_version = "HTTP/1.1"
    allowed: frozenset[str] = frozenset()
    cache: Path = Path()
    own: frozenset[str] = frozenset()  # this proxy's own host:port
    served: tuple[tuple[str, Path], ...] = ()  # (/prefix/, directory) of local repositories

    def do_CONNECT(self) -> None:
        self.send_error(405, "CONNECT is not allowed: this proxy forwards plain HTTP to Debian mirrors only")

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if (not url.scheme and self.path.startswith("/")) or url.netloc in self.own:
            self._serve_local(url.path)
            return
        if url.scheme != "http" or url.netloc not in self.allowed:
            self.send_error(403, f"{url.netloc or self.path} is not one of this host's Debian mirrors")
            return
        cacheable = "/pool/" in url.path and self.command == "GET"
        cached = self.cache / hashlib.sha256(self.path.encode()).hexdigest() if cacheable else None
        if cached is not None and cached.exists():
            self._send_file(cached)
            return
        try:
            self._forward(url, cached)
        except OSError as exc:
            if not self.wfile.closed:
                self.send_error(502, f"upstream {url.netloc}: {exc}")

    def _serve_local(self, path: str) -> None:
        """A file of a served repository; nothing outside it (no listing, no `..`)."""
        for prefix, root in self.served:
            if path.startswith(prefix):
                rel = Path(path[len(prefix):].lstrip("/"))
                if ".." in rel.parts or rel.is_absolute():
                    break
                file = root / rel
                if file.is_file():
                    self._send_file(file)
                    return
                break
        self.send_error(404, f"{path} is not a file of this lab's repositories")

    def _send_file(self, path: Path) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(path.stat().st_size))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        with path.open("rb") as f:
            shutil.copyfileobj(f, self.wfile, CHUNK)

    def _forward(self, url, cached: Path | None) -> None:
        conn = http.client.HTTPConnection(url.netloc, timeout=60)
        target = url.path + (f"?{url.query}" if url.query else "")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
        conn.request(self.command, target, headers=headers)
        resp = conn.getresponse()
        self.send_response(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in HOP_HEADERS:
                self.send_header(key, value)
        if resp.getheader("Content-Length") is None and self.command == "GET":
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command == "HEAD":
            conn.close()
            return
        keep = cached is not None and resp.status == 200
        tmp = tempfile.NamedTemporaryFile(dir=self.cache, delete=False) if keep else None
        try:
            while chunk := resp.read(CHUNK):
                self.wfile.write(chunk)
                if tmp:
                    tmp.write(chunk)
            if tmp and cached is not None:
                tmp.close()
                os.replace(tmp.name, cached)
                tmp = None
        finally:
            if tmp:
                tmp.close()
                os.unlink(tmp.name)
            conn.close()

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")


class TLSServer(ThreadingHTTPServer):
    """HTTPS only: each connection's TLS handshake runs in its own thread, so a slow or refusing client (one
    without the site's CA) holds up nobody else."""

    context: ssl.SSLContext

    def finish_request(self, request, client_address) -> None:
        request.settimeout(60)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            sys.stderr.write(f"{client_address[0]} TLS handshake failed: {exc}\n")
            return
        super().finish_request(tls, client_address)


def serve(listen: str, cache: Path, allowed: set[str], tls: tuple[Path, Path],
          served: dict[str, Path] | None = None) -> None:
    host, _, port = listen.rpartition(":")
    cache.mkdir(parents=True, exist_ok=True)
    Handler.allowed = frozenset(allowed)
    Handler.cache = cache
    Handler.own = frozenset({listen})
    Handler.served = tuple((p, d) for p, d in (served or {}).items())
    server = TLSServer((host, int(port)), Handler)
    server.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.context.minimum_version = ssl.TLSVersion.TLSv1_2
    server.context.load_cert_chain(*tls)
    server.daemon_threads = True
    sys.stderr.write(f"listening on {listen}, forwarding to {', '.join(sorted(allowed))}\n")
    sys.stderr.flush()
    server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", required=True, help="IP:PORT (the lab bridge's address)")
    ap.add_argument("--cache", type=Path, required=True, help="directory for cached /pool/ files")
    ap.add_argument("--serve", action="append", default=[], metavar="/PREFIX/=DIR",
                    help="serve the files of DIR under the URL path /PREFIX/ (repeatable)")
    ap.add_argument("--tls-cert", type=Path, required=True, help="the certificate chain it serves (PEM, leaf first)")
    ap.add_argument("--tls-key", type=Path, required=True, help="the certificate's private key (PEM)")
    args = ap.parse_args()
    allowed = {s.host for s in mirrors.sources()}
    if not allowed:
        sys.exit("no HTTP Debian sources in this host's apt configuration")
    served = {}
    for item in args.serve:
        prefix, sep, directory = item.partition("=")
        if not sep or not prefix.startswith("/") or not prefix.endswith("/") or not Path(directory).is_dir():
            sys.exit(f"--serve {item!r}: expected /PREFIX/=DIR with an existing directory")
        served[prefix] = Path(directory)
    serve(args.listen, args.cache, allowed, (args.tls_cert, args.tls_key), served)


if __name__ == "__main__":
    main()
