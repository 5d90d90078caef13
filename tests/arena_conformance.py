#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A black-box conformance test of ao-arena, written from
tools/arena/PROTOCOL.md alone (no code of the server or of its codec):
a client in Python's standard library plays against the program on
127.0.0.1 and checks what the page says.

  normal play: ticks strictly increasing, each player's position
    predicted exactly from joined and its own inputs, every chat line
    once and in order, a room's snapshots the same bytes for all;
  each bad input on its own connection: its error message, then the end
    of the stream, and the players in the room untouched;
  pipelined rejoins (leave, join, input, chat, leave, join, input in one
    write, and a byte at a time) and refused joins followed by inputs;
  a slow reader closed within the page's bound, learning of it at once
    (a reset, no seconds of silence);
  the hello and idle deadlines;
  an error that closes is the last message on the connection, even
    with the room sending to it at that moment;
  each way a client may close (mid-frame, a half-close after a leave,
    at once, a WebSocket close frame with or without a code): its
    player leaves once, the client reads a whole stream to the end;
  the server's stop: every client gets the end of its stream (over
    WebSocket a close frame 1001 first), no error, in time.

Usage: arena_conformance.py PATH_TO_AO_ARENA.  Exit status 0 when every
check held; 1 with the failed check on stderr.  Bounded: every wait has
a timeout, the whole run a few tens of seconds.
"""
import base64
import os
import random
import select
import socket
import struct
import subprocess
import sys
import tempfile
import time

ARENA = sys.argv[1] if len(sys.argv) > 1 else "ao-arena"
# Seconds added to the timed bounds (a loaded machine, sanitizers).
SLACK = float(os.environ.get("ARENA_CONFORMANCE_SLACK", "0.5"))

HELLO, JOIN, INPUT, CHAT, PING, LEAVE, ACK, WATCH = range(1, 9)
WELCOME, JOINED, SNAPSHOT, CHAT_LINE, PONG, ERROR = (0x81, 0x82, 0x83,
                                                     0x84, 0x85, 0x86)
ERRORS = {1: "bad_type", 2: "malformed", 3: "order", 4: "chat_long",
          5: "flood", 6: "room_full", 7: "no_room", 8: "server_full",
          9: "hello_timeout", 10: "idle"}
CODE = {v: k for k, v in ERRORS.items()}
ANY = 0xffffffff
DIRS = [(0, 0), (0, -1), (1, -1), (1, 0), (1, 1), (0, 1), (-1, 1),
        (-1, 0), (-1, -1)]


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def frame(payload):
    return struct.pack("<H", len(payload)) + payload


def m_hello(name=b"py", version=1):
    return bytes([HELLO, version, len(name)]) + name


def m_join(room=ANY):
    return struct.pack("<BI", JOIN, room)


def m_input(seq, d):
    return struct.pack("<BIB", INPUT, seq, d)


def m_chat(text):
    return bytes([CHAT]) + text


def m_ping(stamp):
    return struct.pack("<BQ", PING, stamp)


def m_leave():
    return bytes([LEAVE])


def m_ack(tick):
    return struct.pack("<BI", ACK, tick)


def m_watch(room=ANY):
    return struct.pack("<BI", WATCH, room)


def decode(p):
    t = p[0]
    if t == WELCOME:
        f = struct.unpack("<IHHHHH", p[1:15])
        return {"type": t, "player": f[0], "tick_hz": f[1],
                "room_size": f[2], "width": f[3], "height": f[4],
                "speed": f[5]}
    if t == JOINED:
        f = struct.unpack("<IHIHHI", p[1:19])
        return {"type": t, "room": f[0], "members": f[1], "tick": f[2],
                "x": f[3], "y": f[4], "chat_seq": f[5]}
    if t == SNAPSHOT:
        tick, room, n = struct.unpack("<IIH", p[1:11])
        check(len(p) == 11 + 12 * n, "snapshot length")
        ents = {}
        for i in range(n):
            pl, x, y, seq = struct.unpack("<IHHI",
                                          p[11 + 12 * i:23 + 12 * i])
            ents[pl] = (x, y, seq)
        return {"type": t, "tick": tick, "room": room, "entries": ents,
                "raw": p}
    if t == CHAT_LINE:
        room, tick, cseq, frm = struct.unpack("<IIII", p[1:17])
        return {"type": t, "room": room, "tick": tick, "chat_seq": cseq,
                "from": frm, "text": p[17:]}
    if t == PONG:
        return {"type": t, "stamp": struct.unpack("<Q", p[1:9])[0]}
    if t == ERROR:
        return {"type": t, "code": p[1]}
    raise Failed("unknown server message type 0x%02x" % t)


class Server:
    """ao-arena on a free loopback port, with these options."""

    def __init__(self, *opts):
        # Its stderr in a file (a pipe nobody reads could fill), read at
        # the stop for sanitizer reports.
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen(
            [ARENA, "--address=127.0.0.1", "--port=0", "--quiet",
             "--workers=2"] + list(opts),
            stdout=subprocess.PIPE, stderr=self.err)
        r, _, _ = select.select([self.p.stdout], [], [], 10)
        check(r, "ao-arena did not say its port")
        line = self.p.stdout.readline().decode()
        check(line.startswith("port="), "ao-arena said %r" % line)
        self.port = int(line[5:])

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.p.stdout.close()
        self.err.seek(0)
        text = self.err.read().decode(errors="replace")
        self.err.close()
        for what in ("ThreadSanitizer", "AddressSanitizer",
                     "runtime error", "LeakSanitizer"):
            if what in text:
                sys.stderr.write(text)
                raise Failed("ao-arena: %s report" % what)


class Client:
    def __init__(self, srv, rcvbuf=0):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.s.settimeout(10)
        self.s.connect(("127.0.0.1", srv.port))
        self.buf = b""
        self.eof = False
        self.reset = False
        self.id = 0
        self.stamp = 0
        self.seq = 0
        # The prediction: the stay's start and the inputs sent in it.
        self.base = None
        self.stay = []
        self.joins_sent = 0

    def send(self, *payloads):
        self.s.sendall(b"".join(frame(p) for p in payloads))

    def fill(self, timeout):
        """Read what comes within timeout; False at the end."""
        if self.eof:
            return False
        r, _, _ = select.select([self.s], [], [], max(timeout, 0))
        if not r:
            return True
        try:
            d = self.s.recv(65536)
        except ConnectionResetError:
            self.eof = self.reset = True
            return False
        if not d:
            self.eof = True
            return False
        self.buf += d
        return True

    def recv(self, timeout=5.0):
        """The next message, or None (the timeout, or the end)."""
        end = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 2:
                n = struct.unpack("<H", self.buf[:2])[0]
                if len(self.buf) >= 2 + n:
                    p = self.buf[2:2 + n]
                    self.buf = self.buf[2 + n:]
                    return decode(p)
            left = end - time.monotonic()
            if left <= 0 or not self.fill(left):
                return None

    def expect(self, t, timeout=5.0):
        m = self.recv(timeout)
        check(m is not None, "no message 0x%02x (eof %s)" % (t, self.eof))
        if m["type"] == ERROR and t != ERROR:
            raise Failed("error %s instead of 0x%02x" %
                         (ERRORS.get(m["code"]), t))
        check(m["type"] == t, "got 0x%02x, expected 0x%02x" %
              (m["type"], t))
        return m

    def hello(self, name=b"py"):
        self.send(m_hello(name))
        w = self.expect(WELCOME)
        self.id = w["player"]
        self.world = w
        return w

    def ping_sync(self, keep=None):
        """A ping: the messages before its pong go to keep (a list)."""
        self.stamp += 1
        self.send(m_ping(self.stamp))
        while True:
            m = self.recv(5)
            check(m is not None, "no pong")
            if m["type"] == PONG and m["stamp"] == self.stamp:
                return
            if keep is not None:
                keep.append(m)

    def input_msg(self, d):
        self.seq += 1
        self.stay.append((self.seq, d))
        return m_input(self.seq, d)

    def join_msg(self, room=ANY):
        self.stay = []
        return m_join(room)

    def predict(self, seq):
        x, y = self.base
        w = self.world
        for s, d in self.stay:
            if s > seq:
                break
            dx, dy = DIRS[d]
            x = min(max(x + dx * w["speed"], 0), w["width"] - 1)
            y = min(max(y + dy * w["speed"], 0), w["height"] - 1)
        return x, y

    def expect_closed(self, code, timeout=5.0):
        """The error message with this code (None: no message), then the
        end of the stream."""
        m = self.recv(timeout)
        # A member may get its room's messages before the error.
        while (getattr(self, "skip_room", False) and m is not None and
               m["type"] in (JOINED, SNAPSHOT, CHAT_LINE)):
            m = self.recv(timeout)
        if code is None:
            check(m is None and self.eof, "no bare close (%r)" % (m,))
        else:
            check(m is not None,
                  "no error %s before the close (eof %s)" %
                  (code, self.eof))
            check(m["type"] == ERROR and ERRORS.get(m["code"]) == code,
                  "got %r, expected error %s" % (m, code))
            m = self.recv(timeout)
            check(m is None and self.eof,
                  "no close after error %s (%r)" % (code, m))
        self.close()

    def close(self):
        self.s.close()


def player(srv, room=ANY):
    c = Client(srv)
    c.hello()
    c.send(c.join_msg(room))
    return c


def on_message(c, m, ticks):
    """A player's own checks on what it got."""
    if m["type"] == JOINED:
        c.base = (m["x"], m["y"])
        c.last_tick = m["tick"] - 1
    elif m["type"] == SNAPSHOT:
        check(m["tick"] > c.last_tick, "tick %d after %d" %
              (m["tick"], c.last_tick))
        c.last_tick = m["tick"]
        e = m["entries"].get(c.id)
        check(e is not None, "player %d not in its snapshot" % c.id)
        x, y, seq = e
        check((x, y) == c.predict(seq),
              "player %d at %r after seq %d, predicted %r" %
              (c.id, (x, y), seq, c.predict(seq)))
        c.predicted = getattr(c, "predicted", 0) + 1
        ticks.setdefault(m["tick"], set()).add(m["raw"])
    elif m["type"] == ERROR:
        raise Failed("player %d got error %s" %
                     (c.id, ERRORS.get(m["code"])))


def play(players, seconds, chat_every=0.0):
    """Each player sends an input a tick; returns the snapshots by tick."""
    ticks = {}
    chats = {c.id: [] for c in players}
    end = time.monotonic() + seconds
    next_chat = time.monotonic() + chat_every if chat_every else end + 1
    sent_chats = 0
    rnd = random.Random(7)
    for c in players:
        c.last_tick = -1
    while time.monotonic() < end:
        for c in players:
            c.send(c.input_msg(rnd.randrange(9)))
        if time.monotonic() >= next_chat:
            players[0].send(m_chat(b"line %d" % sent_chats))
            sent_chats += 1
            next_chat += chat_every
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.05:
            for c in players:
                m = c.recv(0.005)
                if m is None:
                    check(not c.eof, "player %d closed" % c.id)
                    continue
                if m["type"] == CHAT_LINE:
                    chats[c.id].append(m)
                on_message(c, m, ticks)
    for c in players:
        keep = []
        c.ping_sync(keep)
        for m in keep:
            if m["type"] == CHAT_LINE:
                chats[c.id].append(m)
            on_message(c, m, ticks)
    return ticks, chats, sent_chats


def t_normal_play():
    srv = Server("--tick-rate=20", "--room-size=8")
    try:
        ps = [player(srv) for _ in range(4)]
        for c in ps:
            c.base = None
        ticks, chats, sent = play(ps, 3.0, chat_every=0.2)
        for c in ps:
            check(c.base is not None, "no joined")
            check(getattr(c, "predicted", 0) >= 20,
                  "only %d snapshots" % getattr(c, "predicted", 0))
            lines = chats[c.id]
            seqs = [m["chat_seq"] for m in lines]
            check(seqs == list(range(seqs[0], seqs[0] + len(seqs))) if
                  seqs else True, "chat_seq not consecutive: %r" % seqs)
            texts = [m["text"] for m in lines]
            check(len(set(texts)) == len(texts), "a chat line twice")
        # Every player saw every line sent after it joined.
        check(all(len(chats[c.id]) == sent for c in ps),
              "chat lines lost: %r of %d" %
              ([len(chats[c.id]) for c in ps], sent))
        check(all(len(v) == 1 for v in ticks.values()),
              "a tick's snapshot differs between members")
        for c in ps:
            c.close()
    finally:
        srv.stop()


def bad_case(srv, name):
    """One bad input on its own connection; the error it must get."""
    c = Client(srv)
    if name == "input_before_hello":
        c.send(m_input(1, 1))
        return c, "order"
    if name == "hello_v2":
        c.send(m_hello(version=2))
        return c, "malformed"
    if name == "name_with_0":
        c.send(m_hello(b"a\0b"))
        return c, "malformed"
    if name == "name_empty":
        c.send(bytes([HELLO, 1, 0]))
        return c, "malformed"
    if name == "ack_before_hello":
        c.send(m_ack(0))
        return c, "order"
    c.hello()
    if name == "ack_before_snapshot":
        c.send(m_ack(0))
        return c, "malformed"
    if name == "ack_short":
        c.send(m_ack(0)[:-1])
        return c, "malformed"
    if name in ("ack_unsent", "ack_back"):
        c.send(m_join())
        c.expect(JOINED)
        s1 = c.expect(SNAPSHOT)
        s2 = c.expect(SNAPSHOT)
        c.skip_room = True
        if name == "ack_unsent":
            # A tick far ahead of any sent.
            c.send(m_ack(s2["tick"]), m_ack(s2["tick"] + 1000))
        else:
            # The same tick again is fine; one lower is not.
            c.send(m_ack(s2["tick"]), m_ack(s2["tick"]),
                   m_ack(s1["tick"]))
        return c, "malformed"
    if name == "hello_twice":
        c.send(m_hello())
        return c, "order"
    if name == "input_before_join":
        c.send(m_input(1, 1))
        return c, "order"
    if name == "leave_in_lobby":
        c.send(m_leave())
        return c, "order"
    if name == "chat_in_lobby":
        c.send(m_chat(b"x"))
        return c, "order"
    if name == "unknown_type":
        c.send(bytes([0x7f]))
        return c, "bad_type"
    if name == "server_type":
        c.send(struct.pack("<BQ", PONG, 1))
        return c, "bad_type"
    if name == "zero_type":
        c.send(bytes([0]))
        return c, "bad_type"
    if name == "input_short":
        c.send(m_input(1, 1)[:-1])
        return c, "malformed"
    if name == "join_long":
        c.send(m_join() + b"\0")
        return c, "malformed"
    if name == "ping_short":
        c.send(m_ping(1)[:-1])
        return c, "malformed"
    c.send(m_join())
    if name == "join_twice":
        c.send(m_join())
        return c, "order"
    if name == "dir_9":
        c.send(m_input(1, 9))
        return c, "malformed"
    if name == "seq_repeated":
        c.send(m_input(5, 1), m_input(5, 1))
        return c, "malformed"
    if name == "seq_lower":
        c.send(m_input(5, 1), m_input(4, 1))
        return c, "malformed"
    if name == "chat_empty":
        c.send(bytes([CHAT]))
        return c, "chat_long"
    if name == "chat_201":
        c.send(m_chat(b"x" * 201))
        return c, "chat_long"
    if name == "flood":
        c.send(*[m_input(k, 1) for k in range(1, 101)])
        return c, "flood"
    if name == "leave_leave":
        c.send(m_leave(), m_leave())
        return c, "order"
    raise Failed("no case " + name)


BAD = ["input_before_hello", "hello_v2", "name_with_0", "name_empty",
       "hello_twice", "input_before_join", "leave_in_lobby",
       "chat_in_lobby", "unknown_type", "server_type", "zero_type",
       "input_short", "join_long", "ping_short", "join_twice", "dir_9",
       "seq_repeated", "seq_lower", "chat_empty", "chat_201", "flood",
       "leave_leave", "ack_before_hello", "ack_before_snapshot",
       "ack_short", "ack_unsent", "ack_back"]


def t_bad_inputs():
    srv = Server("--tick-rate=20", "--room-size=64")
    try:
        good = player(srv)
        good.base = None
        good.last_tick = -1
        ticks = {}
        for name in BAD:
            c, code = bad_case(srv, name)
            try:
                c.expect_closed(code)
            except Failed as e:
                raise Failed("%s: %s" % (name, e))
            while True:
                m = good.recv(0)
                if m is None:
                    break
                on_message(good, m, ticks)
        # A frame over 256 bytes, and one of length 0: closed on the
        # header, no error message.
        for hdr in (struct.pack("<H", 257), struct.pack("<H", 0)):
            c = Client(srv)
            c.hello()
            c.s.sendall(hdr)
            c.expect_closed(None)
        # The good player was untouched: its snapshots go on.
        keep = []
        good.ping_sync(keep)
        for m in keep:
            on_message(good, m, ticks)
        n = getattr(good, "predicted", 0)
        t0 = time.monotonic()
        while getattr(good, "predicted", 0) < n + 5:
            check(time.monotonic() - t0 < 5, "the good player stalled")
            m = good.recv(1)
            check(m is not None, "the good player lost its snapshots")
            on_message(good, m, ticks)
        good.close()
    finally:
        srv.stop()


def rejoin_sequence(c):
    return [m_leave(), c.join_msg(), c.input_msg(3), m_chat(b"hi"),
            m_leave(), c.join_msg(), c.input_msg(5)]


def finish_stay(c, got, want_chats, seconds=1.5):
    """Read until a snapshot shows the stay's last input; check it."""
    end = time.monotonic() + seconds
    last_seq = c.stay[-1][0]
    chats = 0
    c.last_tick = -1
    for m in got:
        if m["type"] == ERROR:
            raise Failed("error %s" % ERRORS.get(m["code"]))
    queue = list(got)
    while True:
        m = queue.pop(0) if queue else c.recv(max(end - time.monotonic(),
                                                  0))
        check(m is not None, "the stay's input never showed (eof %s)" %
              c.eof)
        if m["type"] == ERROR:
            raise Failed("error %s" % ERRORS.get(m["code"]))
        if m["type"] == CHAT_LINE:
            chats += 1
        if m["type"] == JOINED:
            c.base = (m["x"], m["y"])
            c.last_tick = m["tick"] - 1
        if m["type"] == SNAPSHOT and c.id in m["entries"]:
            x, y, seq = m["entries"][c.id]
            if seq == last_seq:
                check((x, y) == c.predict(seq), "at %r, predicted %r" %
                      ((x, y), c.predict(seq)))
                check(chats == want_chats, "%d chat lines, not %d" %
                      (chats, want_chats))
                return


def t_pipelined():
    srv = Server("--tick-rate=50", "--room-size=8")
    try:
        # All in one write; then a byte at a time; then cut at random.
        for mode in ("one", "bytes", "random"):
            c = player(srv)
            c.expect(JOINED)
            c.expect(SNAPSHOT)
            data = b"".join(frame(p) for p in rejoin_sequence(c))
            if mode == "one":
                c.s.sendall(data)
            else:
                rnd = random.Random(11)
                i = 0
                while i < len(data):
                    k = 1 if mode == "bytes" else rnd.randrange(1, 9)
                    c.s.sendall(data[i:i + k])
                    i += k
                    time.sleep(0.002 if mode == "bytes" else 0.01)
            got = []
            c.ping_sync(got)
            try:
                finish_stay(c, got, 1)
            except Failed as e:
                raise Failed("pipelined rejoin (%s): %s" % (mode, e))
            c.close()
        # A refused numbered join, then what a client in a room sends:
        # dropped; the refusal comes; the next join works.
        c = Client(srv)
        c.hello()
        c.send(c.join_msg(999), c.input_msg(1), m_chat(b"lost"),
               m_leave(), c.join_msg(), c.input_msg(3))
        m = c.expect(ERROR)
        check(ERRORS.get(m["code"]) == "no_room", "refusal %r" % m)
        finish_stay(c, [], 0)
        # Refused after a leave not yet applied (room 999 again).
        c.send(m_leave(), c.join_msg(999), c.input_msg(1), m_leave(),
               c.join_msg(), c.input_msg(7))
        got = []
        c.ping_sync(got)
        errs = [m for m in got if m["type"] == ERROR]
        rest = [m for m in got if m["type"] != ERROR]
        if not errs:
            m = c.expect(ERROR)
            errs = [m]
        check(len(errs) == 1 and ERRORS.get(errs[0]["code"]) == "no_room",
              "refusal after a leave: %r" % errs)
        finish_stay(c, rest, 0)
        c.close()
    finally:
        srv.stop()


def t_slow_reader():
    """A reader that stops: closed within the bound, and learns at once.
    A chatty neighbour fills the buffers fast.  A small receive buffer,
    then a larger one."""
    for rcvbuf in (4096, 65536):
        try:
            slow_reader(rcvbuf)
        except Failed as e:
            raise Failed("receive buffer %d: %s" % (rcvbuf, e))


def slow_reader(want_rcvbuf):
    # The page's default --sndbuf (8 KiB, doubled by the kernel).
    stall, sndbuf = 0.5, 8192
    srv = Server("--tick-rate=20", "--room-size=8", "--stall-timeout=500ms")
    try:
        good = player(srv)
        good.expect(JOINED)
        slow = Client(srv, rcvbuf=want_rcvbuf)
        slow.hello()
        slow.send(slow.join_msg())
        slow.expect(JOINED)
        rcvbuf = slow.s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        # From here slow reads nothing.
        t_stop = time.monotonic()
        text = b"z" * 200
        sent = 0
        gone_at = None
        seen = False
        bytes_in = 0
        deadline = t_stop + 20
        while gone_at is None and time.monotonic() < deadline:
            good.send(*[m_chat(text) for _ in range(8)])
            t0 = time.monotonic()
            while time.monotonic() - t0 < 0.05:
                m = good.recv(0.01)
                if m is None:
                    continue
                if m["type"] == CHAT_LINE:
                    bytes_in += 2 + 17 + len(m["text"])
                if m["type"] == SNAPSHOT:
                    bytes_in += 2 + len(m["raw"])
                    if slow.id in m["entries"]:
                        seen = True
                    elif seen:
                        gone_at = time.monotonic()
            sent += 1
        check(gone_at is not None, "the slow reader was never closed")
        rate = bytes_in / max(gone_at - t_stop, 0.001)
        bound = stall + 0.05 + (rcvbuf + 2 * 2 * sndbuf) / rate
        took = gone_at - t_stop
        check(took <= bound + SLACK,
              "closed after %.2f s, the bound is %.2f s" % (took, bound))
        print("     slow reader closed after %.2f s (bound %.2f s)" %
              (took, bound))
        # It reads again: the end comes at once (a reset, or the end of
        # what was in its buffer), not seconds of silence.
        t0 = time.monotonic()
        while not slow.eof:
            check(time.monotonic() - t0 < SLACK,
                  "the slow reader did not learn of its close")
            slow.fill(0.2)
        check(slow.reset, "closed with a FIN, not a reset")
        slow.close()
        good.close()
    finally:
        srv.stop()


def t_ack_reader():
    """A reader that acks, with a big receive buffer (4 MiB asked), then
    stops reading (and acking): closed by its acks, abortively, within
    stall + 500 ms + one tick of its last read, whatever the buffers
    could still take; a reader that acks on time stays."""
    stall, tick = 1.0, 0.05
    srv = Server("--tick-rate=20", "--room-size=8", "--stall-timeout=1s")
    try:
        good = player(srv)
        good.expect(JOINED)
        slow = Client(srv, rcvbuf=4 << 20)
        slow.hello()
        slow.send(slow.join_msg())
        slow.expect(JOINED)
        rcvbuf = slow.s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        # Two seconds (twice the stall) of reading, acking every 100 ms.
        end = time.monotonic() + 2 * stall
        last_ack = 0.0
        newest = None
        while time.monotonic() < end:
            m = slow.recv(0.05)
            if m is not None and m["type"] == SNAPSHOT:
                newest = m["tick"]
            if newest is not None and time.monotonic() - last_ack >= 0.1:
                slow.send(m_ack(newest))
                last_ack = time.monotonic()
            while good.recv(0) is not None:
                pass
        check(not slow.eof, "an acking reader was closed")
        # From here slow reads nothing and acks nothing.
        t_stop = time.monotonic()
        gone_at = None
        seen = False
        deadline = t_stop + 20
        while gone_at is None and time.monotonic() < deadline:
            m = good.recv(0.01)
            if m is None or m["type"] != SNAPSHOT:
                continue
            if slow.id in m["entries"]:
                seen = True
            elif seen:
                gone_at = time.monotonic()
        check(gone_at is not None, "the acking reader was never closed")
        took = gone_at - t_stop
        bound = stall + 0.5 + tick
        check(took <= bound + SLACK,
              "closed after %.2f s, the bound is %.2f s" % (took, bound))
        print("     acking reader (receive buffer %d) closed after %.2f s "
              "(bound %.2f s)" % (rcvbuf, took, bound))
        t0 = time.monotonic()
        while not slow.eof:
            check(time.monotonic() - t0 < SLACK + 1,
                  "the acking reader did not learn of its close")
            slow.fill(0.2)
        check(slow.reset, "closed with a FIN, not a reset")
        slow.close()
        good.close()
    finally:
        srv.stop()


def t_spectator():
    """watch: the room's snapshots and chat lines without being in them;
    no inputs or chat; leave ends it; refused like a join; bounded by
    the room size."""
    srv = Server("--tick-rate=20", "--room-size=2")
    try:
        pl = player(srv)
        j = pl.expect(JOINED)
        # A room that does not exist: no_room, the connection stays.
        w = Client(srv)
        w.hello()
        w.send(m_watch(77))
        e = w.expect(ERROR)
        check(ERRORS.get(e["code"]) == "no_room", "watch of room 77: %r" % e)
        w.send(m_leave())  # drops the refused watch, as after a join
        w.send(m_watch(j["room"]))
        wj = w.expect(JOINED)
        check(wj["room"] == j["room"] and (wj["x"], wj["y"]) ==
              (0xffff, 0xffff) and wj["members"] == 1,
              "a spectator's joined: %r" % wj)
        pl.send(m_chat(b"hi watchers"))
        got_chat = False
        snaps = 0
        last = wj["tick"] - 1
        t0 = time.monotonic()
        while (not got_chat or snaps < 5) and time.monotonic() - t0 < 5:
            m = w.recv(1)
            check(m is not None, "the spectator got nothing")
            if m["type"] == SNAPSHOT:
                check(m["tick"] > last, "spectator: tick %d after %d" %
                      (m["tick"], last))
                last = m["tick"]
                check(m["room"] == j["room"], "snapshot of another room")
                check(w.id not in m["entries"] and pl.id in m["entries"],
                      "spectator in its snapshot, or player missing")
                snaps += 1
            elif m["type"] == CHAT_LINE:
                check(m["text"] == b"hi watchers" and m["from"] == pl.id,
                      "chat line %r" % m)
                got_chat = True
        check(got_chat and snaps >= 5, "spectator: %d snapshots, chat %s" %
              (snaps, got_chat))
        # It acks like a player.
        w.send(m_ack(last))
        # Spectators are bounded by the room size (2 here).
        extra = []
        for _ in range(2):
            c = Client(srv)
            c.hello()
            c.send(m_watch(j["room"]))
            extra.append(c)
        m = extra[0].expect(JOINED)
        e = extra[1].recv(5)
        while e is not None and e["type"] != ERROR:
            e = extra[1].recv(5)
        check(e is not None and ERRORS.get(e["code"]) == "room_full",
              "a third spectator of a room of 2: %r" % (e,))
        for c in extra:
            c.close()
        # leave ends it: nothing of the room comes after the pong that
        # follows the leave's tick.
        w.send(m_leave())
        time.sleep(0.2)
        w.ping_sync()
        m = w.recv(0.3)
        check(m is None and not w.eof, "after leave the spectator got %r" %
              (m,))
        # A player can watch after leaving, and then join again.
        w.send(m_join(j["room"]))
        m = w.expect(JOINED)
        check(m["x"] != 0xffff, "a player's joined after a watch: %r" % m)
        w.close()
        # No inputs or chat while watching; no watch while in a room.
        for bad, msg in (("input", m_input(1, 1)), ("chat", m_chat(b"x")),
                         ("watch", m_watch(j["room"]))):
            time.sleep(0.2)  # the spectators before have left
            c = Client(srv)
            c.hello()
            c.send(m_watch(j["room"]), msg)
            c.skip_room = True
            try:
                c.expect_closed("order")
            except Failed as ex:
                raise Failed("%s while watching: %s" % (bad, ex))
        c = player(srv)
        c.send(m_watch(j["room"]))
        c.skip_room = True
        c.expect_closed("order")
        pl.close()
    finally:
        srv.stop()


def t_deadlines():
    srv = Server("--hello-timeout=300ms", "--idle-timeout=800ms")
    try:
        silent = Client(srv)
        half = Client(srv)
        half.s.sendall(struct.pack("<H", 5) + bytes([HELLO, 1]))
        idle = Client(srv)
        idle.hello()
        busy = Client(srv)
        busy.hello()
        t0 = time.monotonic()
        # A connection that sent nothing may be HTTP as well as len16:
        # closed at the deadline without an error message.
        silent.expect_closed(None, 3)
        half.expect_closed("hello_timeout", 3)
        took = time.monotonic() - t0
        check(0.2 <= took <= 1.5 + SLACK,
              "hello deadline after %.2f s" % took)
        # busy pings every 200 ms: it stays.
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            busy.ping_sync()
            time.sleep(0.2)
        idle.expect_closed("idle", 3)
        took = time.monotonic() - t0
        check(0.7 <= took <= 3.0 + SLACK,
              "idle deadline after %.2f s" % took)
        busy.ping_sync()
        busy.close()
    finally:
        srv.stop()


def read_to_end(c, timeout):
    """Every message until the end of the stream (or the timeout): the
    list, and how it ended ("fin", "reset" or "timeout")."""
    got = []
    end = time.monotonic() + timeout
    while True:
        m = c.recv(max(end - time.monotonic(), 0))
        if m is None:
            break
        got.append(m)
    if not c.eof:
        return got, "timeout"
    if c.buf:
        return got, "a partial message"
    return got, "reset" if c.reset else "fin"


def filled_victim(srv, good, cls):
    """A member that stops reading while a chatty neighbour fills its
    buffers (and then the server's send queue for it) with chat lines,
    which are never skipped."""
    v = cls(srv, rcvbuf=4096)
    v.hello()
    v.send(v.join_msg())
    v.expect(JOINED)
    text = b"f" * 200
    # Well over what the sockets hold (2 x --sndbuf 4 KiB and the
    # victim's small receive buffer): the rest waits in the server's
    # queue, in the 4 MiB bound.
    for _ in range(6):
        good.send(*[m_chat(text) for _ in range(48)])
        n = 0
        while n < 48:
            m = good.recv(2)
            check(m is not None, "the neighbour's chat did not come back")
            if m["type"] == CHAT_LINE:
                n += 1
    return v


def t_error_last():
    """An error that closes is the last message on the connection: not
    one frame after it, whatever the room sends meanwhile (chat lines,
    snapshots), and it is never lost.  The member's reader is stopped,
    so that the graceful close waits for its queue: the window in which
    a tick could still send after the error is then seconds wide, and
    each round exercises it (a tick and a chat line run in it).  Over
    WebSocket the close frame (1000) follows the error, and nothing
    else."""
    srv = Server("--tick-rate=20", "--room-size=8", "--sndbuf=4096",
                 "--stall-timeout=20s")
    try:
        good = player(srv)
        good.expect(JOINED)
        for rnd in range(6):
            ws = rnd % 2 == 1
            v = filled_victim(srv, good, WSClient if ws else Client)
            v.send(bytes([0x7f]))  # bad_type: closes
            time.sleep(0.1)
            # A line of the room after the error was decided: the
            # victim is still a member until its close is applied.
            good.send(m_chat(b"after %d" % rnd))
            t0 = time.monotonic()
            while True:
                m = good.recv(2)
                check(m is not None, "no echo of the line after")
                if (m["type"] == CHAT_LINE and
                        m["text"] == b"after %d" % rnd):
                    break
            time.sleep(0.1)  # a tick or two, snapshots included
            got, how = read_to_end(v, 5)
            check(how == "fin", "round %d: the victim's stream ended by "
                  "%s after %d messages" % (rnd, how, len(got)))
            errs = [i for i, m in enumerate(got) if m["type"] == ERROR]
            check(len(errs) == 1 and ERRORS.get(got[errs[0]]["code"]) ==
                  "bad_type", "round %d: errors %r" %
                  (rnd, [got[i] for i in errs]))
            after = got[errs[0] + 1:]
            if ws and after and after[-1] == {"type": "close",
                                              "payload": b"\x03\xe8"}:
                after.pop()
            elif ws:
                raise Failed("round %d: no close 1000 after the error "
                             "(%r)" % (rnd, after[-1:]))
            check(not after, "round %d (%s): %d message(s) after the "
                  "error that closed it: %s" %
                  (rnd, "WebSocket" if ws else "len16", len(after),
                   ", ".join("%r" % m["type"] for m in after)))
            v.close()
            check(time.monotonic() - t0 < 2, "round %d too slow" % rnd)
        good.close()
    finally:
        srv.stop()


class WSClient(Client):
    """A player over WebSocket (PROTOCOL.md "WebSocket"): one arena
    message per masked binary message; recv() gives a close frame as
    {"type": "close", "payload": ...}."""

    def __init__(self, srv, rcvbuf=0):
        Client.__init__(self, srv, rcvbuf)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Key: %s\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n" %
                        key).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            d = self.s.recv(1)
            check(d, "no answer to the upgrade")
            head += d
        check(head.startswith(b"HTTP/1.1 101"), "upgrade: %r" % head[:40])

    @staticmethod
    def wframe(op, payload):
        mask = os.urandom(4)
        n = len(payload)
        hdr = bytes([0x80 | op])
        if n < 126:
            hdr += bytes([0x80 | n])
        else:
            hdr += bytes([0x80 | 126]) + struct.pack(">H", n)
        return hdr + mask + bytes(b ^ mask[i % 4]
                                  for i, b in enumerate(payload))

    def send(self, *payloads):
        self.s.sendall(b"".join(self.wframe(2, p) for p in payloads))

    def recv(self, timeout=5.0):
        end = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 2:
                op, n, o = self.buf[0] & 0x0f, self.buf[1] & 0x7f, 2
                check(not self.buf[1] & 0x80, "a masked server frame")
                if n == 126 and len(self.buf) >= 4:
                    n, o = struct.unpack(">H", self.buf[2:4])[0], 4
                if n != 126 and len(self.buf) >= o + n:
                    p = self.buf[o:o + n]
                    self.buf = self.buf[o + n:]
                    if op == 8:
                        return {"type": "close", "payload": p}
                    check(op == 2, "server frame opcode %d" % op)
                    return decode(p)
            left = end - time.monotonic()
            if left <= 0 or not self.fill(left):
                return None


def metric(srv, name):
    """A value of GET /metrics."""
    s = socket.create_connection(("127.0.0.1", srv.port), 5)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    s.settimeout(5)
    d = b""
    while True:
        k = s.recv(65536)
        if not k:
            break
        d += k
    s.close()
    for line in d.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise Failed("no metric " + name)


def watch_presence(obs, pid, until):
    """obs reads until until() (or 5 s): for each snapshot, whether pid
    is in it; and the chat lines it got."""
    seen, lines = [], []
    end = time.monotonic() + 5
    while time.monotonic() < end and not until(seen):
        m = obs.recv(0.2)
        if m is None:
            continue
        if m["type"] == SNAPSHOT:
            seen.append(pid in m["entries"])
        elif m["type"] == CHAT_LINE:
            lines.append((m["from"], m["text"]))
    return seen, lines


def left_once(obs, pid, what):
    """pid is in obs's snapshots, then out of them for good: its leave
    (or disconnect) applied once, never undone."""
    seen, lines = watch_presence(
        obs, pid, lambda s: len(s) > 10 and not any(s[-10:]))
    check(seen and not all(seen), "%s: never left the snapshots" % what)
    first_out = seen.index(False, seen.index(True)) if True in seen \
        else 0
    check(not any(seen[first_out:]),
          "%s: back in the snapshots after it left: %r" % (what, seen))
    return lines


def t_client_closes():
    """How a client may end its connection, as the others see it: each
    way removes its player from the room once (the snapshots, and the
    server's count of members), and the client reads a whole stream
    ending in the server's FIN (or, over WebSocket, the close frame
    answering its own, with its code: RFC 6455 5.5.1).  A client that
    stops reading is not buffered without bound."""
    srv = Server("--tick-rate=20", "--room-size=16")
    try:
        obs = player(srv)
        room = obs.expect(JOINED)["room"]

        def member(cls=Client):
            c = cls(srv)
            c.hello()
            c.send(c.join_msg(room))
            c.expect(JOINED)
            return c
        # 1. Closed in the middle of a frame, after a chat line: the
        # line still goes out, the half frame is dropped.
        c = member()
        c.s.sendall(frame(m_chat(b"last words")) +
                    struct.pack("<H", 6) + bytes([INPUT, 1]))
        c.s.shutdown(socket.SHUT_WR)
        lines = left_once(obs, c.id, "closed mid-frame")
        check((c.id, b"last words") in lines,
              "closed mid-frame: its complete chat line lost")
        got, how = read_to_end(c, 5)
        check(how == "fin" and all(m["type"] != ERROR for m in got),
              "closed mid-frame: the stream ended by %s, %r" %
              (how, [m for m in got if m["type"] == ERROR]))
        c.close()
        # 2. A leave, then shutdown(SHUT_WR): the stay ends once; the
        # client reads whole messages, then the server's FIN.
        c = member()
        c.send(m_leave())
        c.s.shutdown(socket.SHUT_WR)
        left_once(obs, c.id, "leave and half-close")
        got, how = read_to_end(c, 5)
        check(how == "fin" and all(m["type"] != ERROR for m in got),
              "leave and half-close: the stream ended by %s" % how)
        c.close()
        # 3. Closed at once (close(), no leave), and a spectator too.
        c = member()
        w = Client(srv)
        w.hello()
        w.send(m_watch(room))
        w.expect(JOINED)
        c.s.close()
        w.s.close()
        left_once(obs, c.id, "closed at once")
        # 4. Over WebSocket: the client's close frame, with a code, with
        # a code and a reason, without one; echoed as the RFC says (the
        # code, or an empty close for none; 1002 for a code no endpoint
        # may send, as 1005 is).
        for payload, want in ((struct.pack(">H", 1000), b"\x03\xe8"),
                              (struct.pack(">H", 4000) + b"bye",
                               b"\x0f\xa0"),
                              (b"", b""),
                              (struct.pack(">H", 1005), b"\x03\xea")):
            c = member(WSClient)
            c.s.sendall(c.wframe(8, payload))
            left_once(obs, c.id, "WebSocket close %r" % payload)
            got, how = read_to_end(c, 5)
            check(how == "fin" and got and got[-1]["type"] == "close" and
                  got[-1]["payload"] == want,
                  "WebSocket close %r: answered %r, then %s" %
                  (payload, got[-1:], how))
            c.close()
        # 5. A client that stops reading but goes on sending pings:
        # what is queued for it is bounded, then it is closed as slow,
        # with a reset; the room is untouched.
        c = Client(srv, rcvbuf=4096)
        c.hello()
        c.s.setblocking(False)
        pings = b"".join(frame(m_ping(k)) for k in range(500))
        t0 = time.monotonic()
        while True:
            check(time.monotonic() - t0 < 10,
                  "a pinging client that does not read: still open")
            try:
                c.s.send(pings)
            except BlockingIOError:
                time.sleep(0.01)
            except (ConnectionResetError, BrokenPipeError):
                break
        check(metric(srv, 'arena_closes_total{reason="slow"}') == 1,
              "the pinging client not counted as slow")
        c.close()
        # The server counts one member: obs.
        end = time.monotonic() + 2
        while metric(srv, "arena_players_in_rooms") != 1:
            check(time.monotonic() < end, "members counted: %r" %
                  metric(srv, "arena_players_in_rooms"))
            time.sleep(0.1)
        check(metric(srv, "arena_spectators") == 0, "spectators counted")
        obs.close()
    finally:
        srv.stop()


def t_server_stop():
    """The server stops (SIGTERM) with clients connected: each reads
    whole messages and then the end of the stream, a FIN (over
    WebSocket a close frame with 1001, going away, first), no error
    message, within --drain-timeout; and the server exits 0."""
    srv = Server("--tick-rate=20", "--room-size=8", "--drain-timeout=2s")
    try:
        a = player(srv)
        a.expect(JOINED)
        lobby = Client(srv)
        lobby.hello()
        ws = WSClient(srv)
        ws.hello()
        ws.send(ws.join_msg())
        ws.expect(JOINED)
        half = Client(srv)
        half.s.sendall(struct.pack("<H", 5) + bytes([HELLO]))
        time.sleep(0.2)
        t0 = time.monotonic()
        srv.p.terminate()
        for c, name in ((a, "member"), (lobby, "lobby"), (ws, "ws"),
                        (half, "half a hello")):
            got, how = read_to_end(c, 2 + SLACK)
            check(how == "fin", "%s: the stream ended by %s" %
                  (name, how))
            check(all(m["type"] != ERROR for m in got),
                  "%s: an error message at the stop" % name)
            if c is ws:
                check(got and got[-1]["type"] == "close" and
                      got[-1]["payload"] == b"\x03\xe9",
                      "ws: no close 1001 at the stop: %r" % got[-1:])
            c.close()
        check(time.monotonic() - t0 < 2 + SLACK, "the stop took %.2f s" %
              (time.monotonic() - t0))
        check(srv.p.wait(10) == 0, "exit status %r" % srv.p.returncode)
    finally:
        srv.stop()


TESTS = [t_normal_play, t_bad_inputs, t_pipelined, t_slow_reader,
         t_ack_reader, t_spectator, t_deadlines, t_error_last,
         t_client_closes, t_server_stop]


def main():
    only = os.environ.get("ARENA_CONFORMANCE_ONLY")
    failed = 0
    for t in TESTS:
        if only and only not in t.__name__:
            continue
        t0 = time.monotonic()
        try:
            t()
            print("ok   %-16s %.1f s" % (t.__name__[2:],
                                        time.monotonic() - t0))
        except (Failed, OSError) as e:
            failed += 1
            print("FAIL %-16s %s" % (t.__name__[2:], e))
            sys.stderr.write("arena_conformance: %s: %s\n" %
                             (t.__name__[2:], e))
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
