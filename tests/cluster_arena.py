#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""ao-arena across nodes, black-box: a nats-server (JetStream, a scratch
store) and two or three ao-arena nodes on free loopback ports, players
written from tools/arena/PROTOCOL.md (the client of
tests/arena_conformance.py).

  cross_node: a player on node 2 plays a room owned by node 1: joined,
    ticks increasing, its position predicted exactly, chat lines once
    and in one order on both nodes, the same snapshot bytes;
  kill_owner: kill -9 of the owner: the player on the other node gets
    room_lost within 2 s and joins again;
  stop_owner: SIGSTOP of the owner for 2 s: its room is taken over, the
    stalled node ticks no more once resumed, its player gets room_lost;
    no snapshot of the new owner names the old owner's player;
  stop_gateway: SIGSTOP for 2 s of the node a player plays through (the
    owner declares it dead and drops the player): once resumed, the
    player gets room_lost, never snapshots that do not name it, and
    joins again;
  bus_restart: nats-server restarted: the local room keeps ticking, the
    remote one fails with room_lost at once, a join works again after;
  stale: a bus message for a room at an epoch the node does not own is
    dropped and counted (published raw on the bus);
  index_reuse: every index taken once: a new node takes a gone one's and
    makes rooms above those the old holder left;
  stall_index: a gateway with no room of its own, stopped while its
    index was written as another node's: resumed, no hello gets an id
    and it stops;
  reclaim: three owners killed in turn under a player of one gateway:
    each failover loses a room there, and every room lost is given up
    (none held a few seconds later) and made again for a new room;
  refused_rejoin: a player of a gateway asks for a full room of another
    node and joins again the moment room_full comes, for seconds, with
    busy loops beside the nodes: room_full every time, never order;
  remote_close: players of a gateway in a room of another node: an
    error that closes is the last message they get (chat lines come
    through the bus meanwhile); a close, with or without a leave,
    removes the player once on both nodes.

Usage: cluster_arena.py PATH_TO_AO_ARENA (ARENA_CLUSTER_ONLY=name runs
one scenario).  Exit 0, 77 when nats-server is absent, 1 on a failure.
"""
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arena_conformance as ac  # noqa: E402
from arena_conformance import (ANY, CHAT_LINE, CODE, ERROR,  # noqa: E402
                               JOINED, SNAPSHOT, Client, Failed, check,
                               m_chat, m_leave, m_watch)

ROOM_LOST = 11
NATS = shutil.which("nats-server") or "/usr/sbin/nats-server"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Bus:
    def __init__(self):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="ao-nats-")
        self.p = None
        self.start()

    def start(self):
        self.p = subprocess.Popen(
            [NATS, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd",
             self.dir], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                socket.create_connection(("127.0.0.1", self.port),
                                         0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise Failed("nats-server did not listen")

    def stop(self):
        if self.p:
            self.p.terminate()
            self.p.wait(10)
            self.p = None

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self):
        return "nats://127.0.0.1:%d" % self.port

    def publish(self, subject, payload):
        s = socket.create_connection(("127.0.0.1", self.port), 5)
        s.recv(4096)  # INFO
        s.sendall(b"CONNECT {\"verbose\":false}\r\nPUB " +
                  subject.encode() + b" %d\r\n" % len(payload) +
                  payload + b"\r\nPING\r\n")
        got = b""
        end = time.monotonic() + 5
        while b"PONG" not in got and time.monotonic() < end:
            got += s.recv(4096)
        s.close()


class Node:
    """An ao-arena node; its stderr in a file, read for sanitizer reports
    when it ends."""

    def __init__(self, bus, name, *args):
        self.name = name
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen(
            [ac.ARENA, "--address=127.0.0.1", "--port=0", "--quiet",
             "--workers=2", "--json", "--nats=" + bus.url(),
             "--node=" + name, *args], stdout=subprocess.PIPE,
            stderr=self.err)
        r, _, _ = select.select([self.p.stdout], [], [], 30)
        check(r, "node %s did not say its port" % name)
        line = self.p.stdout.readline().decode()
        check(line.startswith("port="), "node %s said %r" % (name, line))
        self.port = int(line[5:])

    def sanitizers(self):
        self.err.seek(0)
        text = self.err.read().decode(errors="replace")
        for what in ("ThreadSanitizer", "AddressSanitizer",
                     "runtime error", "LeakSanitizer"):
            if what in text:
                sys.stderr.write(text)
                raise Failed("node %s: %s report" % (self.name, what))

    def final(self):
        """SIGTERM, then the final JSON report."""
        self.p.terminate()
        out, _ = self.p.communicate(timeout=60)
        self.sanitizers()
        check(self.p.returncode == 0, "node %s exit status %d" %
              (self.name, self.p.returncode))
        for line in out.decode().splitlines():
            if '"type":"final"' in line:
                return json.loads(line)
        raise Failed("node %s: no final report" % self.name)

    def stats(self):
        """SIGUSR1: the statistics line it prints, as JSON."""
        os.kill(self.p.pid, signal.SIGUSR1)
        r, _, _ = select.select([self.p.stdout], [], [], 10)
        check(r, "node %s: no statistics line" % self.name)
        return json.loads(self.p.stdout.readline().decode())

    def kill(self):
        self.p.kill()
        self.p.wait()
        self.p.stdout.close()
        self.sanitizers()


def join(c, room=ANY, timeout=5.0):
    """Join; the joined message (errors raise)."""
    c.send(c.join_msg(room))
    return wait_type(c, JOINED, timeout)


def wait_type(c, t, timeout=5.0):
    end = time.monotonic() + timeout
    while True:
        m = c.recv(max(end - time.monotonic(), 0))
        check(m is not None, "no message 0x%02x from player %d" % (t, c.id))
        if m["type"] == t:
            return m
        if m["type"] == ERROR and t != ERROR:
            raise Failed("player %d: error %d" % (c.id, m["code"]))


def hello(node):
    c = Client(node)
    c.hello()
    return c


def settle():
    time.sleep(0.8)  # two censuses and some heartbeats


def shared_room(n1, n2):
    """A player on n1 makes a room, one on n2 joins it and gets a
    snapshot: (a, b, room)."""
    settle()
    a = hello(n1)
    room = join(a)["room"]
    settle()
    b = hello(n2)
    join(b, room)
    wait_type(b, SNAPSHOT)
    return a, b, room


def wait_bus(node, ok, what, timeout=10.0):
    """Poll node's bus counters until ok(them); they are returned."""
    end = time.monotonic() + timeout
    while True:
        st = node.stats()["bus"]
        if ok(st):
            return st
        check(time.monotonic() < end, "node %s: %s: %r" %
              (node.name, what, st))
        time.sleep(0.2)


def stop_nodes(*nodes):
    """Kill the nodes still running (resumed first, if stopped)."""
    for n in nodes:
        if n.p.poll() is None:
            os.kill(n.p.pid, signal.SIGCONT)
            n.kill()


def t_cross_node(bus):
    n1, n2 = Node(bus, "n1"), Node(bus, "n2")
    try:
        settle()
        a = hello(n1)
        ja = join(a)
        a.base = (ja["x"], ja["y"])
        room = ja["room"]
        settle()
        b = hello(n2)
        check(b.id >> 24 != a.id >> 24, "player ids of two nodes apart")
        c = hello(n2)
        for p in (b, c):
            j = join(p, room)
            check(j["room"] == room, "joined another room")
            on = ac.on_message
            on(p, j, {})
        ac.on_message(a, ja, {})
        ticks, chats, sent = ac.play([a, b, c], 2.0, chat_every=0.3)
        check(sent > 0, "chat lines sent")
        for t, raws in ticks.items():
            check(len(raws) == 1, "tick %d: different snapshots" % t)
        # Every line once and in one order, on both nodes.
        ref = [(m["chat_seq"], m["text"]) for m in chats[a.id]]
        check(len(ref) == sent, "node 1 got %d of %d lines" %
              (len(ref), sent))
        for p in (b, c):
            # The last lines cross the bus after the owner's tick: the
            # ping to node 2 may come back before them.
            end = time.monotonic() + 2
            while len(chats[p.id]) < len(ref) and time.monotonic() < end:
                m = p.recv(0.1)
                if m and m["type"] == CHAT_LINE:
                    chats[p.id].append(m)
            got = [(m["chat_seq"], m["text"]) for m in chats[p.id]]
            check(got == ref, "player %d's chat differs" % p.id)
        # Chat from the remote node goes through the owner.
        b.send(m_chat(b"from node 2"))
        for p in (a, b, c):
            m = wait_type(p, CHAT_LINE)
            check(m["text"] == b"from node 2" and m["from"] == b.id,
                  "the remote line")
        # No spectators across nodes yet: a watch is refused with
        # no_room on the owner and on a gateway, never left unanswered.
        for n in (n1, n2):
            w = hello(n)
            for want in (room, ANY):
                w.send(m_watch(want))
                e = wait_type(w, ERROR)
                check(e["code"] == CODE["no_room"],
                      "watch on %s: %r" % (n.name, e))
                w.send(m_leave())
        f1, f2 = n1.final(), n2.final()
        check(f2["bus"]["players_forwarded"] >= 2, "forwarded counted")
        check(f1["bus"]["ghost_joins"] >= 2, "ghosts counted")
        check(f1["bus"]["msgs_out"] > 0, "bus counters")
        # One snapshot message per room and tick for node 2, not one per
        # player there (two of them).
        out, got = f1["bus"]["bus_snaps_out"], f2["bus"]["bus_snaps_in"]
        print("snapshots on the bus: %d published, %d received" %
              (out, got))
        check(0 < got <= out, "snapshot messages counted once per tick")
    finally:
        stop_nodes(n1, n2)


def t_kill_owner(bus):
    n1, n2 = Node(bus, "n1"), Node(bus, "n2")
    try:
        a, b, room = shared_room(n1, n2)
        t0 = time.monotonic()
        n1.kill()
        m = wait_type(b, ERROR, 3)
        lost = time.monotonic() - t0
        check(m["code"] == ROOM_LOST, "room_lost, got %d" % m["code"])
        check(lost < 2.0, "room_lost after %.2f s" % lost)
        print("room_lost %.0f ms after kill -9" % (lost * 1000))
        j = join(b)
        check(j["room"], "joined again")
        wait_type(b, SNAPSHOT)
        f2 = n2.final()
        check(f2["bus"]["peers_down"] >= 1, "peer declared dead")
    finally:
        stop_nodes(n1, n2)


def t_stop_owner(bus):
    n1, n2 = Node(bus, "n1"), Node(bus, "n2")
    try:
        a, b, room = shared_room(n1, n2)
        os.kill(n1.p.pid, signal.SIGSTOP)
        m = wait_type(b, ERROR, 3)
        check(m["code"] == ROOM_LOST, "room_lost, got %d" % m["code"])
        time.sleep(0.5)  # the takeover
        j = join(b, room)
        check(j["room"] == room, "the room again, at its new owner")
        time.sleep(1.0)
        os.kill(n1.p.pid, signal.SIGCONT)
        # The old owner's player: at most snapshots of ticks before the
        # stall, then room_lost; never one after the new owner's start.
        end = time.monotonic() + 5
        got_lost = False
        while time.monotonic() < end and not got_lost:
            m = a.recv(0.2)
            if m and m["type"] == ERROR:
                check(m["code"] == ROOM_LOST, "room_lost to the old one")
                got_lost = True
            elif m and m["type"] == SNAPSHOT:
                check(m["tick"] < j["tick"], "old owner ticked after the "
                      "takeover (tick %d >= %d)" % (m["tick"], j["tick"]))
        check(got_lost, "the old owner's player got no room_lost")
        # The new owner's snapshots never name the old owner's player.
        end = time.monotonic() + 1
        while time.monotonic() < end:
            m = b.recv(0.2)
            if m and m["type"] == SNAPSHOT:
                check(a.id not in m["entries"], "two owners' players")
        # The room it lost, its player and the other node's (a ghost)
        # in it, given up once idle.
        st = wait_bus(n1, lambda b: b["rooms_lost"] == 0,
                      "the lost room still held")
        check(st["rooms_reclaimed"] >= 1, "the lost room given up")
        f1 = n1.final()
        # Found given away by the fence's re-read, or by the new owner's
        # census if that came first: evicted either way.
        check(f1["bus"]["evicted"] >= 1, "the room found given away")
        print("fenced ticks %d, evicted %d" %
              (f1["bus"]["fenced_ticks"], f1["bus"]["evicted"]))
    finally:
        stop_nodes(n1, n2)


def t_stop_gateway(bus):
    n1, n2 = Node(bus, "n1"), Node(bus, "n2")
    try:
        a, b, room = shared_room(n1, n2)
        os.kill(n2.p.pid, signal.SIGSTOP)
        time.sleep(2.0)  # declared dead after 0.6 s
        os.kill(n2.p.pid, signal.SIGCONT)
        end = time.monotonic() + 3
        got_lost = False
        while time.monotonic() < end and not got_lost:
            m = b.recv(0.2)
            if m and m["type"] == ERROR:
                check(m["code"] == ROOM_LOST, "room_lost, got %d" % m["code"])
                got_lost = True
            elif m and m["type"] == SNAPSHOT:
                check(b.id in m["entries"], "a snapshot of tick %d without "
                      "the player, and no room_lost" % m["tick"])
        check(got_lost, "the resumed gateway's player got no room_lost")
        j = join(b, room)
        check(j["room"] == room, "the room again")
        m = wait_type(b, SNAPSHOT)
        check(b.id in m["entries"], "joined again, in its snapshot")
    finally:
        stop_nodes(n1, n2)


def t_bus_restart(bus):
    n1, n2 = Node(bus, "n1"), Node(bus, "n2")
    n3 = None
    try:
        a, b, room = shared_room(n1, n2)
        bus.stop()
        m = wait_type(b, ERROR, 3)
        check(m["code"] == ROOM_LOST, "room_lost when the bus is down")
        # The local room goes on ticking.
        last = wait_type(a, SNAPSHOT)["tick"]
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:
            m = a.recv(0.5)
            if m and m["type"] == SNAPSHOT:
                check(m["tick"] > last, "ticks go on")
                last = m["tick"]
        check(time.monotonic() - t0 >= 1.0, "ticked through the outage")
        b.send(b.join_msg(room))
        m = wait_type(b, ERROR, 1)
        check(m["code"] in (ROOM_LOST, 7), "a fast error while down")
        bus.start()
        end = time.monotonic() + 8
        while True:
            time.sleep(0.5)
            b.send(b.join_msg(room))
            # The answer to this join, however long it takes (a join is
            # never left unanswered): another join while it is pending
            # would be order, and close the connection.
            t_join = time.monotonic()
            m = b.recv(10)
            while m and m["type"] not in (JOINED, ERROR):
                m = b.recv(max(t_join + 10 - time.monotonic(), 0))
            check(m is not None, "a join after the restart unanswered "
                  "for 10 s (eof %s)" % b.eof)
            if m["type"] == JOINED:
                break
            check(m["code"] in (ROOM_LOST, CODE["no_room"]),
                  "a join after the restart: error %d" % m["code"])
            check(time.monotonic() < end, "no join after the restart")
        print("joined again %.1f s after the restart" %
              (time.monotonic() - t0))
        # The restart emptied the directory; the nodes wrote their
        # indexes back: a node starting now takes a third one.
        n3 = Node(bus, "n3")
        c = hello(n3)
        check(len({a.id >> 24, b.id >> 24, c.id >> 24}) == 3,
              "node indexes %d, %d, %d after the restart" %
              (a.id >> 24, b.id >> 24, c.id >> 24))
        f1 = n1.final()
        check(f1["bus"]["reconnects"] >= 1, "reconnect counted")
        n3.final()
    finally:
        stop_nodes(n1, n2)
        if n3:
            stop_nodes(n3)


def t_stale(bus):
    n1 = Node(bus, "n1")
    try:
        settle()
        a = hello(n1)
        room = join(a)["room"]
        # A gateway's batch for the room at an epoch it never had.
        msg = bytes([0xc1]) + room.to_bytes(4, "little") + \
            (99).to_bytes(4, "little") + b"L" + (12345).to_bytes(4, "little")
        bus.publish("ao.node.n1.in", msg)
        time.sleep(0.3)
        f1 = n1.final()
        check(f1["bus"]["stale_dropped"] >= 1, "stale message counted")
    finally:
        stop_nodes(n1)


def t_index_reuse(bus):
    n1 = Node(bus, "n1")
    n2 = None
    try:
        settle()
        # Every other index taken by a node long gone, and a room made
        # by the old holder of index 2 still in the directory (taken
        # over somewhere).
        for k in range(2, 256):
            bus.publish("$KV.AO_ARENA.node.%d" % k, b"gone%d 7 0" % k)
        bus.publish("$KV.AO_ARENA.room.%d" % (2 << 16 | 5), b"gone9 7 2")
        n2 = Node(bus, "n2")
        a, c = hello(n1), hello(n2)
        check(a.id >> 24 == 1, "n1 keeps index 1, has %d" % (a.id >> 24))
        check(c.id >> 24 == 2, "n2 took index 2, has %d" % (c.id >> 24))
        room = join(c)["room"]
        check(room >> 16 == 2 and room & 0xffff > 5,
              "n2's first room 0x%x: above the old holder's 0x%x" %
              (room, 2 << 16 | 5))
        wait_type(c, SNAPSHOT)
        n2.final()
        n1.final()
    finally:
        stop_nodes(*[n for n in (n1, n2) if n])


def t_stall_index(bus):
    """A gateway with no room of its own, stopped while another node took
    its index: resumed, it reads the directory again and stops, and gives
    out no player id meanwhile."""
    n1, n2 = Node(bus, "n1"), Node(bus, "n2")
    try:
        a, b, room = shared_room(n1, n2)
        k = b.id >> 24
        os.kill(n2.p.pid, signal.SIGSTOP)
        time.sleep(1.5)  # declared dead after 0.6 s
        bus.publish("$KV.AO_ARENA.node.%d" % k, b"n9 7 0")
        os.kill(n2.p.pid, signal.SIGCONT)
        # Hellos meanwhile: refused (server_full) or never answered.
        end = time.monotonic() + 5
        while time.monotonic() < end and n2.p.poll() is None:
            try:
                c = Client(n2)
                c.send(ac.m_hello(b"py"))
                m = c.recv(0.3)
                c.close()
            except OSError:
                break
            if m and m["type"] == ac.WELCOME:
                check(False, "a hello at the resumed node got id 0x%x "
                      "(index %d is another node's)" % (m["player"], k))
            time.sleep(0.1)
        try:
            n2.p.wait(timeout=max(end - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            raise Failed("the node whose index was taken did not stop")
        n2.p.stdout.close()
        n2.sanitizers()
        n1.final()
    finally:
        stop_nodes(n1, n2)


def t_reclaim(bus):
    # Rooms of one: a join of any room never takes another node's room
    # (a node's share of one free place among two nodes is none), so the
    # owner's player makes one there, and leaves it to the gateway's.
    one = "--room-size=1"
    n1 = Node(bus, "n1", one)
    owners = []
    try:
        b = None
        for k in range(4):
            if k == 3:
                # Each failover lost a room here (its proxy of the
                # owner's room): all given up, 2 s after their last
                # message.  The rooms taken over from the owners live
                # on here.
                st = wait_bus(n1, lambda s: s["rooms_lost"] == 0 and
                              s["rooms_reclaimed"] == 3 and
                              s["rooms_owned"] == 3,
                              "3 lost rooms given up, 3 taken over")
                spare = st["rooms_spare"]
                check(spare >= 1, "a spare room: %r" % st)
            o = Node(bus, "o%d" % k, one)
            owners.append(o)
            settle()
            a = hello(o)
            room = join(a)["room"]
            check(room >> 16 == a.id >> 24, "o%d made room 0x%x" %
                  (k, room))
            a.send(m_leave())
            settle()
            b = b or hello(n1)
            check(join(b, room)["room"] == room, "joined o%d's room" % k)
            wait_type(b, SNAPSHOT)
            if k == 3:
                break
            o.kill()
            m = wait_type(b, ERROR, 3)
            check(m["code"] == ROOM_LOST, "room_lost, got %d" % m["code"])
        # The fourth room's proxy is a spare room, and plays.
        st = n1.stats()["bus"]
        check(st["rooms_spare"] == spare - 1 and st["proxies"] == 1,
              "a spare room taken: %d spare before, %r" % (spare, st))
        b.send(m_chat(b"on a spare room"))
        m = wait_type(b, CHAT_LINE)
        check(m["text"] == b"on a spare room", "chat on a spare room")
        print("rooms given up %d, spare %d" %
              (st["rooms_reclaimed"], st["rooms_spare"]))
        n1.final()
        owners[3].final()
    finally:
        stop_nodes(n1, *owners)


def t_refused_rejoin(bus):
    """A join refused by the owner (room_full) allows a join at once
    (PROTOCOL.md): the gateway must have put its player back in no room
    before the error went out, or that join is order.  The window is
    the gateway's thread between the two, so busy loops (one a CPU)
    preempt it now and then, as a loaded machine or a sanitizer does."""
    one = "--room-size=1"
    n1, n2 = Node(bus, "n1", one), Node(bus, "n2", one)
    hogs = []
    try:
        settle()
        a = hello(n1)
        room = join(a)["room"]
        settle()
        b = hello(n2)
        hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"])
                for _ in range(min(os.cpu_count() or 2, 8))]
        refused = 0
        end = time.monotonic() + 5
        b.send(b.join_msg(room))
        while time.monotonic() < end:
            m = wait_type(b, ERROR)
            check(m["code"] == CODE["room_full"],
                  "join %d of a full room: error %s" %
                  (refused + 1, ac.ERRORS.get(m["code"], m["code"])))
            refused += 1
            b.send(b.join_msg(room))
        m = wait_type(b, ERROR)
        check(m["code"] == CODE["room_full"], "the last join: %r" % m)
        print("%d joins refused, each joined again at once" % refused)
        check(refused >= 10, "only %d refusals" % refused)
        for h in hogs:
            h.kill()
            h.wait()
        hogs = []
        n2.final()
        n1.final()
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        stop_nodes(n1, n2)


def t_remote_close(bus):
    """Closes of players of a gateway whose room another node runs: an
    error that closes is the last message even with the room's chat
    lines forwarded to it at that moment (a member that stopped reading,
    so that its close waits for its queue); a close, with or without a
    leave, removes the player once, as the owner's and the gateway's
    members see it."""
    opts = ("--sndbuf=4096", "--stall-timeout=20s")
    n1, n2 = Node(bus, "n1", *opts), Node(bus, "n2", *opts)
    try:
        settle()
        a = hello(n1)
        room = join(a)["room"]
        settle()
        obs = hello(n2)
        join(obs, room)
        for rnd in range(3):
            v = Client(n2, rcvbuf=4096)
            v.hello()
            join(v, room)
            text = b"f" * 200
            for _ in range(6):
                a.send(*[m_chat(text) for _ in range(48)])
                n = 0
                while n < 48:
                    n += wait_type(a, CHAT_LINE)["type"] == CHAT_LINE
            v.send(bytes([0x7f]))  # bad_type: closes
            time.sleep(0.1)
            a.send(m_chat(b"after %d" % rnd))
            while wait_type(obs, CHAT_LINE)["text"] != b"after %d" % rnd:
                pass
            time.sleep(0.1)
            got, how = ac.read_to_end(v, 5)
            check(how == "fin", "round %d: ended by %s" % (rnd, how))
            errs = [i for i, m in enumerate(got) if m["type"] == ERROR]
            check(len(errs) == 1 and got[errs[0]]["code"] ==
                  CODE["bad_type"], "round %d: errors %r" %
                  (rnd, [got[i] for i in errs]))
            after = got[errs[0] + 1:]
            check(not after, "round %d: %d message(s) after the error "
                  "that closed it: %s" % (rnd, len(after), ", ".join(
                      "0x%02x" % m["type"] for m in after)))
            v.close()
        # A close at once, then a leave and a half-close.
        for how in ("close", "leave"):
            b = hello(n2)
            join(b, room)
            wait_type(b, SNAPSHOT)
            if how == "close":
                b.s.close()
            else:
                b.send(m_leave())
                b.s.shutdown(socket.SHUT_WR)
            for o in (a, obs):
                ac.left_once(o, b.id, "%s on the %s" %
                             (how, "owner" if o is a else "gateway"))
            b.close()
        n2.final()
        n1.final()
    finally:
        stop_nodes(n1, n2)


SCENARIOS = {"cross_node": t_cross_node, "kill_owner": t_kill_owner,
             "stop_owner": t_stop_owner, "stop_gateway": t_stop_gateway,
             "bus_restart": t_bus_restart, "stale": t_stale,
             "index_reuse": t_index_reuse, "stall_index": t_stall_index,
             "reclaim": t_reclaim, "refused_rejoin": t_refused_rejoin,
             "remote_close": t_remote_close}


def main():
    if not os.access(NATS, os.X_OK):
        print("SKIP: nats-server is not installed")
        return 77
    probe = subprocess.run([ac.ARENA, "--nats=nats://127.0.0.1:1",
                            "--node=probe", "--quiet"],
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=30)
    if b"built without NATS" in probe.stderr:
        print("SKIP: ao-arena was built without NATS")
        return 77
    only = os.environ.get("ARENA_CLUSTER_ONLY")
    for name, fn in SCENARIOS.items():
        if only and name != only:
            continue
        bus = Bus()
        try:
            fn(bus)
            print("ok", name)
        except Failed as e:
            print("FAIL %s: %s" % (name, e), file=sys.stderr)
            return 1
        finally:
            bus.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
