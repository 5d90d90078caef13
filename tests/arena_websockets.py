#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""ao-arena over WebSocket and HTTP, as clients nobody here wrote see it:
python3-websockets (10.4, a strict RFC 6455 client) plays the arena from
tools/arena/PROTOCOL.md, and promtool checks its /metrics.

  play: players over WebSocket beside one over len16 on the same port:
    hello, join, inputs with exact prediction, chat lines once and in
    order, acks, leave; every server message a binary message; a room's
    snapshots the same bytes over both framings;
  spectator: watch over WebSocket: the room's snapshots and chat;
  errors: two arena messages in one WebSocket message, a text message,
    a message over 256 bytes: the error message (if any), then the close
    code PROTOCOL.md gives; the other players untouched;
  http: GET /metrics (promtool check metrics, when promtool is there),
    GET / and a missing path;
  origin: with --allow-origin, an upgrade from a listed Origin (any
    case) or with none plays, one from another Origin gets 403, and
    plain HTTP is not checked.

Usage: arena_websockets.py PATH_TO_AO_ARENA.  Exit status 0 when every
check held, 1 with the failed check on stderr, 77 when the websockets
module is absent (skipped).  Bounded: every wait has a timeout.
"""
import asyncio
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

try:
    import websockets
except ImportError:
    print("arena_websockets: no python3-websockets: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arena_conformance as ac  # noqa: E402  (the codec, the server)

ACK, WATCH = 7, 8
PROTO = "aorta-arena.v1"
check = ac.check
Failed = ac.Failed


def m_ack(tick):
    return struct.pack("<BI", ACK, tick)


def m_watch(room):
    return struct.pack("<BI", WATCH, room)


class WsPlayer:
    """One client over WebSocket; the same prediction as the len16 one."""

    def __init__(self, ws):
        self.ws = ws
        self.seq = 0
        self.stay = []
        self.base = None
        self.last_tick = -1
        self.predicted = 0
        self.chats = []
        self.snaps = {}

    async def send(self, payload):
        await self.ws.send(payload)  # bytes: one binary message

    async def recv(self, timeout=5.0):
        try:
            d = await asyncio.wait_for(self.ws.recv(), timeout)
        except asyncio.TimeoutError:
            return None
        check(isinstance(d, bytes), "a text message from the server")
        return ac.decode(d)

    async def expect(self, t, timeout=5.0):
        m = await self.recv(timeout)
        check(m is not None, "no message 0x%02x" % t)
        check(m["type"] == t, "got %r, expected 0x%02x" % (m, t))
        return m

    def predict(self, seq):
        x, y = self.base
        w = self.world
        for s, d in self.stay:
            if s > seq:
                break
            dx, dy = ac.DIRS[d]
            x = min(max(x + dx * w["speed"], 0), w["width"] - 1)
            y = min(max(y + dy * w["speed"], 0), w["height"] - 1)
        return x, y

    def on(self, m):
        if m["type"] == ac.SNAPSHOT:
            check(m["tick"] > self.last_tick, "tick %d after %d" %
                  (m["tick"], self.last_tick))
            self.last_tick = m["tick"]
            e = m["entries"].get(self.id)
            check(e is not None, "player %d not in its snapshot" % self.id)
            x, y, seq = e
            check((x, y) == self.predict(seq),
                  "player %d at %r after seq %d, predicted %r" %
                  (self.id, (x, y), seq, self.predict(seq)))
            self.predicted += 1
            self.snaps[m["tick"]] = m["raw"]
        elif m["type"] == ac.CHAT_LINE:
            self.chats.append((m["chat_seq"], m["from"], m["text"]))
        elif m["type"] == ac.ERROR:
            raise Failed("player %d got error %s" %
                         (self.id, ac.ERRORS.get(m["code"])))


async def ws_connect(port, origin=None):
    ws = await asyncio.wait_for(
        websockets.connect("ws://127.0.0.1:%d/" % port, origin=origin,
                           subprotocols=[PROTO], max_size=1 << 16,
                           compression=None, ping_interval=None), 10)
    check(ws.subprotocol == PROTO, "subprotocol %r" % ws.subprotocol)
    return ws


async def ws_player(port, origin=None):
    p = WsPlayer(await ws_connect(port, origin))
    await p.send(ac.m_hello(b"ws"))
    w = await p.expect(ac.WELCOME)
    p.id = w["player"]
    p.world = w
    return p


async def play(port):
    players = [await ws_player(port) for _ in range(3)]
    for p in players:
        await p.send(ac.m_join())
    joined = [await p.expect(ac.JOINED) for p in players]
    room = joined[0]["room"]
    check(all(j["room"] == room for j in joined), "players in two rooms")
    for p, j in zip(players, joined):
        p.base = (j["x"], j["y"])
        p.last_tick = j["tick"] - 1
    # A len16 player in the same room, on the same port.
    tcp = socket.create_connection(("127.0.0.1", port), 10)
    tcp.sendall(ac.frame(ac.m_hello(b"tcp")) + ac.frame(ac.m_join(room)))
    tcp_snaps = {}
    tcp_buf = b""
    end = time.monotonic() + 2.5
    next_ack = time.monotonic() + 0.25
    sent_chats = []
    k = 0
    while time.monotonic() < end:
        for p in players:
            d = random.randrange(9)
            p.seq += 1
            p.stay.append((p.seq, d))
            await p.send(ac.m_input(p.seq, d))
        if k % 10 == 3:
            text = b"line %d" % k
            await players[k % 3].send(ac.m_chat(text))
            sent_chats.append((players[k % 3].id, text))
        k += 1
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.05:
            for p in players:
                m = await p.recv(0.005)
                if m is not None:
                    p.on(m)
        if time.monotonic() >= next_ack:
            for p in players:
                if p.last_tick >= 0:
                    await p.send(m_ack(p.last_tick))
            next_ack += 0.25
        tcp.setblocking(False)
        try:
            while True:
                d = tcp.recv(65536)
                if not d:
                    raise Failed("the len16 player was closed")
                tcp_buf += d
        except BlockingIOError:
            pass
        while len(tcp_buf) >= 2:
            n = struct.unpack("<H", tcp_buf[:2])[0]
            if len(tcp_buf) < 2 + n:
                break
            m = ac.decode(tcp_buf[2:2 + n])
            tcp_buf = tcp_buf[2 + n:]
            if m["type"] == ac.SNAPSHOT:
                tcp_snaps[m["tick"]] = m["raw"]
    # Leave: then a pong, and nothing of the room after it.
    for p in players:
        await p.send(ac.m_leave())
        await p.send(ac.m_ping(99))
        while True:
            m = await p.recv(5)
            check(m is not None, "no pong after the leave")
            if m["type"] == ac.PONG:
                check(m["stamp"] == 99, "pong %r" % m)
                break
            p.on(m)
    same = 0
    for p in players:
        check(p.predicted >= 20, "player %d: %d snapshots predicted" %
              (p.id, p.predicted))
        for t, raw in p.snaps.items():
            if t in tcp_snaps and t in players[0].snaps:
                check(raw == tcp_snaps[t] == players[0].snaps[t],
                      "tick %d: snapshots differ across framings" % t)
                same += 1
        # Every chat line once, in order, all of them.
        seqs = [c[0] for c in p.chats]
        check(seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs
              else not sent_chats, "chat lines %r" % seqs)
        check([(c[1], c[2]) for c in p.chats] == sent_chats,
              "player %d: chat lines %r, sent %r" %
              (p.id, p.chats, sent_chats))
    check(same > 0, "no tick seen over both framings")
    # One snapshot buffer per tick for the room, framed once for the
    # WebSocket members and shared by the others (by reference).
    st, _, body = get(port, "/metrics")
    vals = metrics(body)
    written = vals["aorta_websocket_frame_headers_written_total"]
    shared = vals["aorta_websocket_frames_shared_total"]
    check(written > 0 and shared >= written,
          "WebSocket frames: %d headers written, %d sends shared them" %
          (written, shared))
    for p in players:
        await p.ws.close()
        check(p.ws.close_code == 1000, "close code %r" % p.ws.close_code)
    tcp.close()
    print("     3 WebSocket players: %d snapshots predicted, %d chat "
          "lines, %d snapshots compared across framings" %
          (sum(p.predicted for p in players), len(sent_chats), same))


async def spectator(port):
    p = await ws_player(port)
    await p.send(ac.m_join())
    j = await p.expect(ac.JOINED)
    p.base = (j["x"], j["y"])
    p.last_tick = j["tick"] - 1
    s = await ws_player(port)
    await s.send(m_watch(j["room"]))
    sj = await s.expect(ac.JOINED)
    check((sj["x"], sj["y"]) == (0xffff, 0xffff), "joined %r" % sj)
    await p.send(ac.m_chat(b"to the watcher"))
    snaps, chat, last = 0, False, sj["tick"] - 1
    t0 = time.monotonic()
    while (snaps < 10 or not chat) and time.monotonic() - t0 < 5:
        m = await s.recv(1)
        check(m is not None, "the spectator got nothing")
        if m["type"] == ac.SNAPSHOT:
            check(m["tick"] > last, "spectator: tick order")
            last = m["tick"]
            check(s.id not in m["entries"] and p.id in m["entries"],
                  "spectator's snapshot %r" % m["entries"])
            snaps += 1
            if snaps % 5 == 0:
                await s.send(m_ack(last))
        elif m["type"] == ac.CHAT_LINE:
            check(m["text"] == b"to the watcher", "chat %r" % m)
            chat = True
        while True:
            m2 = await p.recv(0)
            if m2 is None:
                break
            p.on(m2)
    check(snaps >= 10 and chat, "spectator: %d snapshots, chat %s" %
          (snaps, chat))
    await s.send(ac.m_input(1, 1))
    m = await s.recv(5)
    while m is not None and m["type"] in (ac.SNAPSHOT, ac.CHAT_LINE):
        m = await s.recv(5)
    check(m is not None and m["type"] == ac.ERROR and
          ac.ERRORS.get(m["code"]) == "order", "input while watching: %r" %
          (m,))
    await expect_close(s, 1000)
    await p.ws.close()
    print("     spectator: %d snapshots, its chat line" % snaps)


async def expect_close(p, code, timeout=5.0):
    try:
        while True:
            d = await asyncio.wait_for(p.ws.recv(), timeout)
            m = ac.decode(d) if isinstance(d, bytes) else None
            check(m is not None and m["type"] in (ac.SNAPSHOT,
                                                  ac.CHAT_LINE),
                  "%r before the close" % (m,))
    except websockets.exceptions.ConnectionClosed:
        pass
    except asyncio.TimeoutError:
        raise Failed("no close")
    check(p.ws.close_code == code, "close code %r, expected %d" %
          (p.ws.close_code, code))


async def errors(port):
    good = await ws_player(port)
    await good.send(ac.m_join())
    j = await good.expect(ac.JOINED)
    good.base = (j["x"], j["y"])
    good.last_tick = j["tick"] - 1
    # Two arena messages in one WebSocket message: one message of the
    # wrong length, malformed; then the close, code 1000.
    p = await ws_player(port)
    await p.send(ac.m_ping(1) + ac.m_ping(2))
    m = await p.recv(5)
    check(m is not None and m["type"] == ac.ERROR and
          ac.ERRORS.get(m["code"]) == "malformed", "two in one: %r" % (m,))
    await expect_close(p, 1000)
    # A text message: refused with 1003 (unsupported data).
    p = await ws_player(port)
    await p.ws.send("hello")
    m = None
    try:
        m = await p.recv(5)
    except websockets.exceptions.ConnectionClosed:
        pass
    text_code = None
    if m is not None:
        check(m["type"] == ac.ERROR, "text message: %r" % (m,))
        text_code = ac.ERRORS.get(m["code"])
    await expect_close(p, 1003 if text_code is None else 1000)
    # A message over 256 bytes: 1009 (too big), no error message.
    p = await ws_player(port)
    await p.send(ac.m_chat(b"x" * 300))
    await expect_close(p, 1009)
    # The good player was untouched.
    n = good.predicted
    t0 = time.monotonic()
    while good.predicted < n + 5:
        check(time.monotonic() - t0 < 5, "the good player stalled")
        m = await good.recv(1)
        check(m is not None, "the good player lost its snapshots")
        good.on(m)
    await good.ws.close()
    print("     errors: malformed + 1000, text: %s, too big: 1009" %
          ("1003" if text_code is None else text_code + " + 1000"))


def metrics(body):
    vals = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            vals[k] = float(v)
    return vals


def get(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path),
                                    timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read()


async def http(port):
    # Something to count first: a player over WebSocket.
    p = await ws_player(port)
    await p.send(ac.m_join())
    await p.expect(ac.JOINED)
    await p.expect(ac.SNAPSHOT)
    st, ctype, body = get(port, "/metrics")
    check(st == 200 and ctype.startswith("text/plain; version=0.0.4"),
          "/metrics: %d %s" % (st, ctype))
    vals = metrics(body)
    for k in ("aorta_connections_accepted_total",
              "aorta_websocket_upgrades_total", "aorta_http_requests_total",
              "arena_players", "arena_rooms", "arena_ticks_total",
              "arena_snapshots_sent_total", 'arena_closes_total{reason="slow"}',
              "arena_tick_lateness_p99_seconds", "arena_spectators",
              "arena_acks_total"):
        check(k in vals, "/metrics has no %s" % k)
    check(vals["aorta_websocket_upgrades_total"] >= 1 and
          vals["arena_players_in_rooms"] >= 1, "metrics: %r" % vals)
    prom = shutil.which("promtool")
    if prom:
        r = subprocess.run([prom, "check", "metrics"], input=body,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=30)
        check(r.returncode == 0 and not r.stdout.strip(),
              "promtool check metrics: %s" % r.stdout.decode())
        print("     promtool check metrics: clean (%d samples)" % len(vals))
    else:
        print("     promtool absent (make deps installs prometheus): "
              "its check skipped")
    st, ctype, body = get(port, "/")
    viewer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                          "tools", "arena", "viewer", "index.html")
    if os.path.exists(viewer):
        check(st == 200 and ctype.startswith("text/html"),
              "/: %d %s" % (st, ctype))
    else:
        check(st == 404, "/ without a viewer: %d" % st)
    st, _, _ = get(port, "/no/such/file")
    check(st == 404, "/no/such/file: %d" % st)
    # HEAD is answered as GET is, without the body (RFC 9110 9.1).
    r = urllib.request.Request("http://127.0.0.1:%d/metrics" % port,
                               method="HEAD")
    with urllib.request.urlopen(r, timeout=10) as resp:
        n = int(resp.headers.get("Content-Length", "0"))
        check(resp.status == 200 and n > 0 and resp.read() == b"",
              "HEAD /metrics: %d, Content-Length %d" % (resp.status, n))
    for method in ("POST", "DELETE", "OPTIONS"):
        r = urllib.request.Request("http://127.0.0.1:%d/metrics" % port,
                                   method=method)
        try:
            with urllib.request.urlopen(r, timeout=10) as resp:
                st = resp.status
        except urllib.error.HTTPError as e:
            st = e.code
        check(st == 405, "%s /metrics: %d, not 405" % (method, st))
    await p.ws.close()


GOOD_ORIGINS = ("http://good.example", "https://game.example:8443")


async def origin(port):
    for o in GOOD_ORIGINS + ("HTTPS://Game.Example:8443", None):
        p = await ws_player(port, o)
        await p.ws.close()
    for o in ("http://evil.example", "http://good.example:80",
              "https://good.example", "null"):
        try:
            ws = await ws_connect(port, o)
            await ws.close()
            check(False, "Origin %s: upgraded" % o)
        except websockets.exceptions.InvalidStatusCode as e:
            check(e.status_code == 403,
                  "Origin %s: %d, not 403" % (o, e.status_code))
    st, _, _ = get(port, "/metrics")
    check(st == 200, "/metrics with --allow-origin: %d" % st)


SCENARIOS = {"play": play, "spectator": spectator, "errors": errors,
             "http": http, "origin": origin}
# Options a scenario's server gets besides the common ones.
SERVER_OPTS = {"origin": ["--allow-origin=" + o for o in GOOD_ORIGINS]}


def main():
    only = os.environ.get("ARENA_WEBSOCKETS_ONLY")
    failed = 0
    for name, fn in SCENARIOS.items():
        if only and only != name:
            continue
        t0 = time.monotonic()
        srv = ac.Server("--tick-rate=20", "--room-size=8",
                        *SERVER_OPTS.get(name, []))
        try:
            asyncio.run(asyncio.wait_for(fn(srv.port), 60))
            print("ok   %-10s %.1f s" % (name, time.monotonic() - t0))
        except (Failed, OSError, asyncio.TimeoutError,
                websockets.exceptions.WebSocketException) as e:
            failed += 1
            print("FAIL %-10s %r" % (name, e))
            sys.stderr.write("arena_websockets: %s: %r\n" % (name, e))
        finally:
            srv.stop()
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
