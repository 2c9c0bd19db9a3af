"""An application behind `neverblock serve --upstream`, standard library only: the reverse proxy's
tests start it, and `neverblock bench xsendfile` runs it as the application that either streams a
file itself or answers X-Sendfile.

    python3 upstream_app.py --root DIR [--port 0] [--workers N] [--close]

It prints `listening on http://127.0.0.1:PORT/` once it listens. Without --workers each connection gets a thread
(kept alive as long as the client likes); with --workers N, N threads each serve one connection at a
time, like a pre-forked application's N workers; --close ends every connection after its response.

Every response carries `X-Upstream-Connection: <client port>` (which connection carried it).
Routes:
  GET  /hello                 14 bytes of text
  ANY  /echo                  the request as JSON: method, target, fields, body (chunked decoded)
  GET  /file?path=REL&mode=M  a file under --root: M=stream sends its bytes, M=sendfile answers
                              `X-Sendfile: <absolute path>`, M=accel `X-Accel-Redirect: /files/REL`
  GET  /sendfile?path=P       `X-Sendfile: P` as given (any path), with a type and a disposition
  GET  /slow?ms=N             answers after N ms
  GET  /hop                   a response with hop-by-hop fields a proxy must drop
  GET  /redirect?to=URL       a 302 to URL, which a proxy passes on rather than follows
  GET  /stream?chunks=N       N chunks sent 20 ms apart, chunked
  GET  /reset                 closes the connection with a reset, answering nothing
"""

import argparse
import json
import os
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

HELLO = b"hello, world!\n"
PIECE = 64 * 1024


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = "."
    close_always = False

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        self.route()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    def route(self):
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        routes = {
            "/hello": self.hello,
            "/echo": self.echo,
            "/file": self.file,
            "/sendfile": self.sendfile,
            "/slow": self.slow,
            "/hop": self.hop,
            "/redirect": self.redirect,
            "/stream": self.stream,
            "/reset": self.reset,
        }
        routes.get(url.path, self.not_found)(query)

    def head(self, status, fields, length):
        self.send_response(status)
        self.send_header("X-Upstream-Connection", str(self.client_address[1]))
        for name, value in fields:
            self.send_header(name, value)
        if length is not None:
            self.send_header("Content-Length", str(length))
        if self.close_always:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()

    def answer(self, status, body, fields=()):
        self.head(status, fields, len(body))
        if self.command != "HEAD":
            self.wfile.write(body)

    def not_found(self, query):
        self.answer(404, b"no such route\n", [("Content-Type", "text/plain")])

    def hello(self, query):
        self.answer(200, HELLO, [("Content-Type", "text/plain")])

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(body), True
                body += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", "0"))), False

    def echo(self, query):
        body, chunked = self.read_body()
        report = {
            "method": self.command,
            "target": self.path,
            "fields": [[name, value] for name, value in self.headers.items()],
            "body": body.decode("latin-1"),
            "chunked": chunked,
        }
        self.answer(200, json.dumps(report).encode(), [("Content-Type", "application/json")])

    def file(self, query):
        relative = query.get("path", "")
        mode = query.get("mode", "stream")
        path = os.path.join(self.root, relative)
        fields = [("Content-Type", "application/octet-stream")]
        if mode == "sendfile":
            self.answer(200, b"", fields + [("X-Sendfile", os.path.abspath(path))])
        elif mode == "accel":
            self.answer(200, b"", fields + [("X-Accel-Redirect", "/files/" + relative)])
        else:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                self.head(200, fields, size)
                if self.command != "HEAD":
                    while piece := f.read(PIECE):
                        self.wfile.write(piece)

    def sendfile(self, query):
        fields = [
            ("X-Sendfile", query.get("path", "")),
            ("Content-Type", "text/x-report"),
            ("Content-Disposition", 'attachment; filename="report.txt"'),
        ]
        self.answer(200, b"the application's own body", fields)

    def slow(self, query):
        time.sleep(int(query.get("ms", "1000")) / 1000)
        self.answer(200, b"late\n", [("Content-Type", "text/plain")])

    def redirect(self, query):
        self.answer(302, b"moved\n", [("Location", query.get("to", "/")), ("Content-Type", "text/plain")])

    def hop(self, query):
        fields = [
            ("Connection", "X-Hop-Field"),
            ("X-Hop-Field", "for the proxy only"),
            ("Keep-Alive", "timeout=5"),
            ("Proxy-Authenticate", 'Basic realm="upstream"'),
            ("Upgrade", "h2c"),
            ("X-End-To-End", "kept"),
        ]
        self.answer(200, b"hop\n", fields)

    def stream(self, query):
        self.head(200, [("Content-Type", "text/plain"), ("Transfer-Encoding", "chunked")], None)
        for i in range(int(query.get("chunks", "5"))):
            piece = f"chunk {i}\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
            time.sleep(0.02)
        self.wfile.write(b"0\r\n\r\n")

    def reset(self, query):
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True


def serve_connection(conn, addr):
    try:
        Handler(conn, addr, None)
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=".")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--close", action="store_true")
    args = parser.parse_args()
    Handler.root = os.path.abspath(args.root)
    Handler.close_always = args.close

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(1024)
    print(f"listening on http://127.0.0.1:{listener.getsockname()[1]}/", flush=True)

    def worker():
        while True:
            conn, addr = listener.accept()
            serve_connection(conn, addr)

    if args.workers > 0:
        for _ in range(args.workers):
            threading.Thread(target=worker, daemon=True).start()
        # Ends with the process (the caller kills it, or closes its standard input).
        sys.stdin.read()
        return
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    while True:
        conn, addr = listener.accept()
        threading.Thread(target=serve_connection, args=(conn, addr), daemon=True).start()


if __name__ == "__main__":
    main()
