#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""WebSocket conformance of aorta's server, from raw sockets.

Plays the categories of the Autobahn testsuite (which cannot run here)
against `ao-echo --framing=ws`, a WebSocket echo server: framing, ping/pong,
reserved bits, opcodes, fragmentation, UTF-8 (a code point split across
fragments included), close codes and limits.  Every case that must fail
the connection checks the close code the server sends and that the TCP
connection then closes; and after each case a second, well-behaved
connection opened before it still echoes.  Written from RFC 6455 with
Python's standard library only (run with /usr/bin/python3).

    ws_conformance.py PATH-TO-AO-ECHO        every category
    WS_CONFORMANCE_ONLY=utf8 ws_conformance.py ...   one of them

Exit status 0 when every case passed.
"""
import os
import select
import socket
import struct
import subprocess
import sys
import time

ECHO = sys.argv[1] if len(sys.argv) > 1 else "ao-echo"
MAX = 65536  # ao-echo's default --max-packet
KEY = "dGhlIHNhbXBsZSBub25jZQ=="
ACCEPT = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
TIMEOUT = 10.0


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


class Server:
    """ao-echo --framing=ws on a free loopback port."""

    def __init__(self):
        self.p = subprocess.Popen(
            [ECHO, "--framing=ws", "--address=127.0.0.1", "--port=0",
             "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        r, _, _ = select.select([self.p.stdout], [], [], TIMEOUT)
        check(r, "ao-echo did not say its port")
        line = self.p.stdout.readline().decode().strip()
        check(line.startswith("port="), "ao-echo said %r" % line)
        self.port = int(line[5:])

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        check(self.p.returncode == 0,
              "ao-echo exited with %d" % self.p.returncode)


class Client:
    def __init__(self, port, upgrade=True):
        self.s = socket.create_connection(("127.0.0.1", port), TIMEOUT)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        if upgrade:
            self.send_bytes((
                "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                "\r\n" % KEY).encode())
            head = self.read_head()
            check(head.startswith("HTTP/1.1 101 "), "no 101: %r" % head)
            check("Sec-WebSocket-Accept: %s\r\n" % ACCEPT in head,
                  "wrong accept key: %r" % head)

    def send_bytes(self, b):
        self.s.sendall(b)

    def read(self, n):
        while len(self.buf) < n:
            d = self.s.recv(65536)
            if not d:
                raise Fail("EOF after %d of %d bytes" % (len(self.buf), n))
            self.buf += d
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_head(self):
        while b"\r\n\r\n" not in self.buf:
            d = self.s.recv(4096)
            if not d:
                raise Fail("EOF in the response head")
            self.buf += d
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        return head.decode() + "\r\n"

    def frame(self, op, payload=b"", fin=True, rsv=0, mask=True,
              length=None):
        b0 = (0x80 if fin else 0) | rsv << 4 | op
        n = len(payload) if length is None else length
        m = 0x80 if mask else 0
        if n < 126:
            h = struct.pack("!BB", b0, m | n)
        elif n <= 0xffff:
            h = struct.pack("!BBH", b0, m | 126, n)
        else:
            h = struct.pack("!BBQ", b0, m | 127, n)
        if mask:
            k = os.urandom(4)
            h += k
            payload = bytes(c ^ k[i % 4] for i, c in enumerate(payload))
        return h + payload

    def send(self, op, payload=b"", **kw):
        self.send_bytes(self.frame(op, payload, **kw))

    def recv(self):
        """One frame: (first byte, payload)."""
        b0, b1 = self.read(2)
        check(not b1 & 0x80, "a masked server frame")
        n = b1 & 0x7f
        if n == 126:
            n = struct.unpack("!H", self.read(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self.read(8))[0]
        return b0, self.read(n)

    def echo(self, payload, op=2):
        self.send(op, payload)
        b0, got = self.recv()
        check(b0 == 0x82, "echo came back as 0x%02x" % b0)
        check(got == payload, "echo of %d bytes differs" % len(payload))

    def expect_close(self, code):
        """The server's close frame with this code (None: no code), then
        the TCP close; frames before it are skipped."""
        while True:
            b0, p = self.recv()
            if b0 & 0x0f == 8:
                break
        check(b0 == 0x88, "close frame 0x%02x" % b0)
        got = struct.unpack("!H", p[:2])[0] if len(p) >= 2 else None
        check(got == code, "close code %r, want %r" % (got, code))
        self.expect_eof()

    def expect_eof(self):
        end = time.monotonic() + TIMEOUT
        while time.monotonic() < end:
            try:
                d = self.s.recv(65536)
            except ConnectionResetError:
                return
            if not d:
                return
        raise Fail("the connection stayed open")

    def close(self):
        self.s.close()


# ---- the cases: each gets a fresh connection c ----

def fails(code, *frames):
    """A case: send these frames (or raw bytes); expect this close."""
    def run(c):
        for f in frames:
            if isinstance(f, bytes):
                c.send_bytes(f)
            else:
                c.send(*f[0], **f[1])
        c.expect_close(code)
    return run


def F(op, payload=b"", **kw):
    return ((op, payload), kw)


def echoes(*pairs):
    def run(c):
        for payload, op in pairs:
            c.echo(payload, op)
        c.send(8, struct.pack("!H", 1000))
        c.expect_close(1000)
    return run


def case_ping_between_fragments(c):
    c.send(2, b"Hello, ", fin=False)
    c.send(9, b"ping!")
    b0, p = c.recv()
    check(b0 == 0x8a and p == b"ping!", "pong 0x%02x %r" % (b0, p))
    c.send(0, b"world", fin=False)
    c.send(10, b"unsolicited pong")
    c.send(0, b"!", fin=True)
    b0, p = c.recv()
    check(b0 == 0x82 and p == b"Hello, world!", "message %r" % p)


def case_split_everywhere(c):
    f = c.frame(2, b"split at every byte")
    for i in range(len(f)):
        c.send_bytes(f[i:i + 1])
        time.sleep(0.002)
    b0, p = c.recv()
    check(p == b"split at every byte", "message %r" % p)


def case_many_in_one_write(c):
    # 50: each echo pins a max_packet pool buffer against sendq_max.
    c.send_bytes(b"".join(c.frame(2, b"m%d" % i) for i in range(50)))
    for i in range(50):
        _, p = c.recv()
        check(p == b"m%d" % i, "message %d: %r" % (i, p))


def case_utf8_split(c):
    euro = "\u20ac".encode()
    c.send(1, euro[:1], fin=False)
    c.send(0, euro[1:2], fin=False)
    c.send(0, euro[2:] + b" ok", fin=True)
    _, p = c.recv()
    check(p == euro + b" ok", "message %r" % p)
    # Four bytes, split in the middle of the code point.
    g = "\U0001f600".encode()
    c.send(1, g[:2], fin=False)
    c.send(0, g[2:], fin=True)
    _, p = c.recv()
    check(p == g, "message %r" % p)


def case_ping_125(c):
    c.send(9, b"x" * 125)
    b0, p = c.recv()
    check(b0 == 0x8a and p == b"x" * 125, "pong of 125")
    c.send(9)
    b0, p = c.recv()
    check(b0 == 0x8a and p == b"", "empty pong")


def case_unsolicited_pong(c):
    c.send(10, b"pong")
    c.echo(b"after")


def case_limit_exact(c):
    c.echo(b"\x01" * MAX)


def case_limit_fragments_exact(c):
    half = MAX // 2
    c.send(2, b"a" * half, fin=False)
    c.send(0, b"b" * (MAX - half), fin=True)
    _, p = c.recv()
    check(len(p) == MAX, "reassembled %d bytes" % len(p))


def answer(c, data, half_close=False):
    """Send raw bytes on c (not upgraded); the server's whole answer up to
    its FIN, and how long it took."""
    t0 = time.monotonic()
    c.send_bytes(data)
    if half_close:
        c.s.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        try:
            d = c.s.recv(4096)
        except ConnectionResetError:
            break
        if not d:
            break
        got += d
    return got, time.monotonic() - t0


def http_ok(got):
    """A well-formed answer: status line, CRLF lines, Content-Length that
    is the body's; returns (status line, head, body)."""
    check(b"\r\n\r\n" in got, "no end of head: %r" % got[:80])
    head, body = got.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    check(all("\n" not in ln and "\r" not in ln for ln in lines),
          "bare CR or LF in %r" % head)
    cl = [ln for ln in lines if ln.lower().startswith("content-length:")]
    check(len(cl) == 1 and int(cl[0].split(":")[1]) == len(body),
          "Content-Length %r for %d bytes" % (cl, len(body)))
    return lines[0], lines[1:], body


def upgrade_odd(c):
    """Lower-case names, tokens in lists, odd spacing, a byte at a time,
    and a frame behind the head in the last write."""
    c.close()
    c = Client(SERVER.port, upgrade=False)
    req = ("GET /echo HTTP/1.1\r\nhost: x\r\nUPGRADE:\twebsocket \r\n"
           "connection: keep-alive, Upgrade\r\nsec-websocket-key: %s\r\n"
           "Sec-WebSocket-Version:13\r\n\r\n" % KEY).encode()
    for i in range(len(req) - 1):
        c.send_bytes(req[i:i + 1])
    c.send_bytes(req[-1:] + c.frame(2, b"behind the head"))
    head = c.read_head()
    check(head.startswith("HTTP/1.1 101 "), "no 101: %r" % head)
    check("Sec-WebSocket-Accept: %s\r\n" % ACCEPT in head, "accept key")
    b0, got = c.recv()
    check(b0 == 0x82 and got == b"behind the head", "no echo")
    c.close()


def upgrade_refused(status, extra_lines):
    def case(c):
        c.close()
        c = Client(SERVER.port, upgrade=False)
        req = ("GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\n" + extra_lines + "\r\n").encode()
        got, _ = answer(c, req)
        first, lines, body = http_ok(got)
        check(first.startswith("HTTP/1.1 %d " % status), "got %r" % first)
        if status == 426:
            check("Sec-WebSocket-Version: 13" in lines, "no version")
            check("Connection: Upgrade, close" in lines,
                  "Upgrade not in Connection: %r" % lines)
        c.close()
    return case


def bare_lf(c):
    """Lines ended by LF alone never end the head: 400 at once, not 408
    at the head's deadline (5 s)."""
    c.close()
    c = Client(SERVER.port, upgrade=False)
    got, took = answer(c, b"GET / HTTP/1.1\nHost: x\n\n")
    check(got.startswith(b"HTTP/1.1 400 "), "got %r" % got[:40])
    check(took < 2.0, "answered after %.1f s" % took)
    c.close()


def plain_get(half_close, pipelined):
    def case(c):
        c.close()
        c = Client(SERVER.port, upgrade=False)
        req = b"GET /x HTTP/1.0\r\n\r\n"
        if pipelined:
            req = b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n" * 3
        got, _ = answer(c, req, half_close)
        first, lines, _ = http_ok(got)
        check(first.startswith("HTTP/1.1 404 "), "got %r" % first)
        check("Connection: close" in lines, "no Connection: close")
        c.close()
    return case


CATEGORIES = {
    "framing": [
        ("echo small, 125, 126, 65535 bytes and empty",
         echoes((b"hello", 2), (b"x" * 125, 2), (b"y" * 126, 2),
                (b"z" * 65535, 2), (b"", 2), (b"text", 1))),
        ("a frame split at every byte", case_split_everywhere),
        ("50 frames in one write", case_many_in_one_write),
        ("a 64-bit length with the top bit set",
         fails(1002, F(2, b"", length=1 << 63))),
        ("an unmasked client frame",
         fails(1002, F(2, b"unmasked", mask=False))),
    ],
    "pingpong": [
        ("ping with 125 bytes, empty ping", case_ping_125),
        ("ping with 126 bytes", fails(1002, F(9, b"x" * 126))),
        ("unsolicited pong is ignored", case_unsolicited_pong),
        ("fragmented ping", fails(1002, F(9, b"x", fin=False))),
        ("fragmented pong", fails(1002, F(10, b"x", fin=False))),
    ],
    "reserved": [
        ("RSV1", fails(1002, F(2, b"x", rsv=4))),
        ("RSV2", fails(1002, F(2, b"x", rsv=2))),
        ("RSV3", fails(1002, F(2, b"x", rsv=1))),
        ("RSV on a ping", fails(1002, F(9, b"x", rsv=7))),
        ("RSV after a good frame",
         lambda c: (c.echo(b"good"), fails(1002, F(1, b"x", rsv=2))(c))),
    ],
    "opcodes": [
        ("opcode %d" % op, fails(1002, F(op, b"x")))
        for op in (3, 4, 5, 6, 7, 11, 12, 13, 14, 15)
    ],
    "fragmentation": [
        ("ping and pong between fragments", case_ping_between_fragments),
        ("continuation with nothing to continue",
         fails(1002, F(0, b"x"))),
        ("continuation with nothing to continue, not final",
         fails(1002, F(0, b"x", fin=False))),
        ("a new message inside a fragmented one",
         fails(1002, F(2, b"a", fin=False), F(2, b"b"))),
        ("a text message inside a binary one",
         fails(1002, F(2, b"a", fin=False), F(1, b"b", fin=False))),
        ("a close between fragments is answered",
         fails(1000, F(2, b"a", fin=False),
               F(8, struct.pack("!H", 1000)))),
    ],
    "utf8": [
        ("valid text, split across fragments", case_utf8_split),
        ("invalid byte", fails(1007, F(1, b"\xff"))),
        ("overlong", fails(1007, F(1, b"\xc0\xaf"))),
        ("surrogate", fails(1007, F(1, b"\xed\xa0\x80"))),
        ("beyond U+10FFFF", fails(1007, F(1, b"\xf4\x90\x80\x80"))),
        ("truncated at the end", fails(1007, F(1, b"ok\xe2\x82"))),
        ("invalid in a later fragment",
         fails(1007, F(1, b"fine", fin=False), F(0, b"\x80"))),
        ("split code point, bad continuation",
         fails(1007, F(1, b"\xe2", fin=False), F(0, b"\x28\xa1"))),
        ("invalid reason in a close",
         fails(1007, F(8, struct.pack("!H", 1000) + b"\xff"))),
    ],
    "close": [
        ("close %d is echoed" % code,
         fails(code, F(8, struct.pack("!H", code) + b"bye")))
        for code in (1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010,
                     1011, 3000, 3999, 4000, 4999)
    ] + [
        ("close %d is refused" % code,
         fails(1002, F(8, struct.pack("!H", code))))
        for code in (0, 999, 1004, 1005, 1006, 1012, 1015, 1016, 2000,
                     2999, 5000, 65535)
    ] + [
        ("close without a code", fails(None, F(8))),
        ("close with one byte", fails(1002, F(8, b"\x03"))),
        ("close with 126 bytes", fails(1002, F(8, b"\x03\xe8" + b"x" * 124))),
        ("nothing is read after a close",
         fails(1000, F(8, struct.pack("!H", 1000)), F(2, b"ignored"))),
    ],
    "handshake": [
        ("an upgrade with odd case, lists, a byte at a time", upgrade_odd),
        ("version 8: 426 naming 13",
         upgrade_refused(426, "Sec-WebSocket-Key: %s\r\n"
                         "Sec-WebSocket-Version: 8\r\n" % KEY)),
        ("no key: 400",
         upgrade_refused(400, "Sec-WebSocket-Version: 13\r\n")),
        ("two keys: 400",
         upgrade_refused(400, "Sec-WebSocket-Key: %s\r\n" % KEY * 2 +
                         "Sec-WebSocket-Version: 13\r\n")),
        ("a key of 15 bytes: 400",
         upgrade_refused(400, "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=\r\n"
                         "Sec-WebSocket-Version: 13\r\n")),
        ("lines ended by LF alone: 400 at once", bare_lf),
        ("a plain GET: 404", plain_get(False, False)),
        ("a plain GET, then half-closed: its answer", plain_get(True, False)),
        ("three pipelined GETs: one answer, then the FIN",
         plain_get(False, True)),
    ],
    "limits": [
        ("a message of max_packet bytes", case_limit_exact),
        ("fragments of max_packet bytes", case_limit_fragments_exact),
        ("one byte over max_packet", fails(1009, F(2, b"x" * (MAX + 1)))),
        ("a header saying 2^40", fails(1009, F(2, b"", length=1 << 40))),
        ("fragments over max_packet",
         fails(1009, F(2, b"a" * (MAX // 2), fin=False),
               F(0, b"b" * (MAX // 2 + 1)))),
        ("a request head over 8192 bytes",
         lambda c: head_too_big(c)),
    ],
}


def head_too_big(c):
    c.close()
    s = socket.create_connection(("127.0.0.1", SERVER.port), TIMEOUT)
    s.sendall(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n")
    got = b""
    while True:
        try:
            d = s.recv(4096)
        except ConnectionResetError:
            break
        if not d:
            break
        got += d
    s.close()
    check(got.startswith(b"HTTP/1.1 413 "), "answer %r" % got[:40])


SERVER = None


def run_category(name):
    failed = 0
    good = Client(SERVER.port)
    for what, fn in CATEGORIES[name]:
        c = Client(SERVER.port)
        try:
            fn(c)
            # The other connection is untouched.
            good.echo(("still here after: " + what).encode())
            print("ok   %s: %s" % (name, what))
        except (Fail, OSError) as e:
            failed += 1
            print("FAIL %s: %s: %s" % (name, what, e))
            good.close()
            good = Client(SERVER.port)
        finally:
            c.close()
    good.send(8, struct.pack("!H", 1000))
    good.expect_close(1000)
    good.close()
    return failed


def main():
    global SERVER
    only = os.environ.get("WS_CONFORMANCE_ONLY")
    names = [only] if only else list(CATEGORIES)
    for n in names:
        if n not in CATEGORIES:
            print("unknown category %r" % n)
            return 2
    SERVER = Server()
    failed = 0
    try:
        for n in names:
            failed += run_category(n)
    finally:
        SERVER.stop()
    print("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
