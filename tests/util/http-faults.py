#!/usr/bin/env python3
"""tests/util/http-faults.py — a web server that misbehaves on purpose, for
tests/cli/retrieve-http.sh: serves the files of DIR over HTTP/1.1 (keep-alive)
on 127.0.0.1, a port the system picks (written to PORTFILE once listening),
each request shaped by the first part of its path:

  /ok/NAME       honours Range (206, Content-Range), as a web server does
  /slow/NAME     /ok/ after 0.3 s (to see transfers overlap)
  /norange/NAME  ignores Range: 200 and the whole file (python's http.server does the same)
  /500/NAME      HTTP 500, always
  /flaky/NAME    HTTP 503 at the first request for NAME, then /ok/
  /short/NAME    206 with the full Content-Length, half the bytes, then the connection closed
  /stall/NAME    206, half the bytes, then nothing until killed

Every request appends "PATH PEER_PORT IN_FLIGHT RANGE" to LOG (IN_FLIGHT: the
requests being answered at once, this one included; RANGE: its Range header's
first byte and last, "-" when none).
usage: http-faults.py DIR PORTFILE LOG
"""
import http.server
import os
import re
import sys
import threading
import time

root, portfile, logfile = sys.argv[1:4]
lock = threading.Lock()
in_flight = 0
seen = set()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        global in_flight
        with lock:
            in_flight += 1
            with open(logfile, "a") as f:
                m = re.match(r"bytes=(\d+-\d+)$", self.headers.get("Range", ""))
                f.write("%s %d %d %s\n" % (self.path, self.client_address[1], in_flight, m.group(1) if m else "-"))
        try:
            self.answer()
        finally:
            with lock:
                in_flight -= 1

    def plain(self, code):
        body = b"no\n"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def answer(self):
        parts = self.path.split("/", 2)
        if len(parts) < 3:
            return self.plain(404)
        mode, name = parts[1], parts[2]
        path = os.path.join(root, os.path.basename(name))
        if mode == "500":
            return self.plain(500)
        if mode == "flaky":
            with lock:
                first = name not in seen
                seen.add(name)
            if first:
                return self.plain(503)
        if mode == "slow":
            time.sleep(0.3)
        try:
            data = open(path, "rb").read()
        except OSError:
            return self.plain(404)
        m = re.match(r"bytes=(\d+)-(\d+)$", self.headers.get("Range", ""))
        if mode == "norange" or not m:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        a, b = int(m.group(1)), min(int(m.group(2)), len(data) - 1)
        if a >= len(data):
            return self.plain(416)
        part = data[a:b + 1]
        self.send_response(206)
        self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))
        self.send_header("Content-Length", str(len(part)))
        self.end_headers()
        if mode in ("short", "stall"):
            self.wfile.write(part[:len(part) // 2])
            self.wfile.flush()
            if mode == "stall":
                time.sleep(3600)
            self.close_connection = True
            return
        self.wfile.write(part)


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
with open(portfile + ".tmp", "w") as f:
    f.write("%d\n" % srv.server_address[1])
os.rename(portfile + ".tmp", portfile)
srv.serve_forever()
