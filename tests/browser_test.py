#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The arena's viewer in a real browser: headless Chromium loads the page
that ao-arena serves while ao-bots play, and the page must receive
snapshots with no tick gap and no JavaScript error.

    browser_test.py ARENA BOTS SCREENSHOT [options]

ARENA and BOTS are the ao-arena and ao-bots programs, SCREENSHOT the PNG
written of the page at the end.  The test starts ao-arena on a free
loopback port (port=N on its first line), ao-bots against it, then
Chromium headless with --remote-debugging-pipe: the DevTools protocol on
file descriptors 3 (commands to Chromium) and 4 (its answers and events),
each message one JSON object ended by a NUL byte.  The client for it is
the small one below (standard library only).  It opens
http://127.0.0.1:PORT/ (the viewer, watching the first room), reads
window.arenaStats until the page has received --snapshots snapshots
(bounded by --timeout), then checks:
  - no tick gap (each snapshot of the room is the previous tick + 1)
    but for the ticks and snapshots the server says it skipped (its
    /metrics: a late timer on a loaded machine skips ticks),
  - no error counted by the page, no exception thrown, nothing logged at
    the error level (console.error, a failed load, a refused socket),
  - the screenshot is not blank: its pixels (the PNG decoded with zlib)
    have more than a handful of distinct colours;
then (unless --no-play) opens /?play, holds the right arrow, then S as
well, and sends a chat line: every input a snapshot confirms must be
where the page predicted it, and the line must come back; then stops all
three: ao-arena and ao-bots must have run to the end and stop with
status 0 (no failed verification, no sanitizer report).  Exit status 0
if all holds, 1 if not, 77 when Chromium is not there or ao-arena was
built without the viewer (the caller says SKIP), 2 for a bad command
line.
Run by tests/test_browser.c from make check.
"""

import argparse
import base64
import ctypes
import fcntl
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib

SKIP = 77
PR_SET_PDEATHSIG = 1
LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent():
    """In a child, before exec: SIGKILL when this script dies, even by
    SIGKILL (a timeout's), so that nothing it started outlives it."""
    LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def log(msg):
    print("browser_test: " + msg, flush=True)


class Cdp:
    """The DevTools protocol over Chromium's pipe: send() writes one
    command, call() waits for its answer; events are kept in order."""

    def __init__(self, wfd, rfd):
        self.wfd = wfd
        self.rfd = rfd
        self.next_id = 1
        self.buf = b""
        self.events = []
        self.answers = {}

    def send(self, method, params=None, session=None):
        msg = {"id": self.next_id, "method": method,
               "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.next_id += 1
        data = json.dumps(msg).encode() + b"\0"
        while data:
            n = os.write(self.wfd, data)
            data = data[n:]
        return msg["id"]

    def pump(self, timeout):
        """Read what Chromium sent within timeout seconds."""
        r, _, _ = select.select([self.rfd], [], [], max(timeout, 0))
        if not r:
            return
        chunk = os.read(self.rfd, 1 << 20)
        if not chunk:
            raise RuntimeError("Chromium closed its DevTools pipe")
        self.buf += chunk
        while b"\0" in self.buf:
            raw, self.buf = self.buf.split(b"\0", 1)
            msg = json.loads(raw)
            if "id" in msg:
                self.answers[msg["id"]] = msg
            else:
                self.events.append(msg)

    def call(self, method, params=None, session=None, timeout=15):
        cid = self.send(method, params, session)
        end = time.monotonic() + timeout
        while cid not in self.answers:
            left = end - time.monotonic()
            if left <= 0:
                raise RuntimeError("no answer to %s within %ss"
                                   % (method, timeout))
            self.pump(left)
        msg = self.answers.pop(cid)
        if "error" in msg:
            raise RuntimeError("%s: %s" % (method, msg["error"]))
        return msg.get("result", {})


def png_colours(data, limit=64):
    """The number of distinct pixel colours of an 8-bit RGB or RGBA PNG
    (counting stops at limit)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos = 8
    idat = []
    width = height = 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, lace = \
                struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or lace:
                raise ValueError("PNG depth %d type %d interlace %d"
                                 % (depth, ctype, lace))
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    if len(raw) != height * (stride + 1):
        raise ValueError("PNG data of %d bytes for %dx%d"
                         % (len(raw), width, height))
    colours = set()
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        # Undo the row's filter (PNG specification, section 9).
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xff
        elif f == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 0xff
        elif f == 3:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((a + prev[i]) >> 1)) & 0xff
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                if pa <= pb and pa <= pc:
                    pr = a
                elif pb <= pc:
                    pr = b
                else:
                    pr = c
                line[i] = (line[i] + pr) & 0xff
        elif f != 0:
            raise ValueError("PNG filter %d" % f)
        if len(colours) < limit:
            for i in range(0, stride, bpp):
                colours.add(bytes(line[i:i + 3]))
        prev = line
    return len(colours), width, height


def start_arena(arena, tmp):
    out = open(os.path.join(tmp, "arena.out"), "w+")
    proc = subprocess.Popen([arena, "--address=127.0.0.1", "--port=0",
                             "--drain-timeout=2s"],
                            stdout=out, stderr=subprocess.STDOUT,
                            preexec_fn=die_with_parent)
    end = time.monotonic() + 10
    while time.monotonic() < end:
        out.seek(0)
        first = out.readline()
        if first.startswith("port=") and first.endswith("\n"):
            return proc, int(first[5:])
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError("ao-arena did not report its port")


def start_chromium(chromium, tmp, width, height):
    # Chromium reads commands on fd 3 and writes on fd 4.
    to_chrome_r, to_chrome_w = os.pipe()
    from_chrome_r, from_chrome_w = os.pipe()
    # Copies at 10 and up, so that dup2() onto 3 and 4 in the child
    # cannot overwrite one with the other.
    cr = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
    cw = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)

    def child():
        die_with_parent()
        os.dup2(cr, 3)
        os.dup2(cw, 4)

    args = [chromium, "--headless", "--remote-debugging-pipe",
            "--user-data-dir=" + os.path.join(tmp, "profile"),
            "--no-first-run", "--no-default-browser-check",
            "--disable-gpu", "--disable-extensions", "--mute-audio",
            "--disable-background-networking", "--disable-sync",
            "--disable-component-update", "--disable-dev-shm-usage",
            "--window-size=%d,%d" % (width, height), "about:blank"]
    # The page is our own, on loopback; and Chromium's sandbox does not
    # start as root, nor in a container without user namespaces (CI).
    args.insert(1, "--no-sandbox")
    err = open(os.path.join(tmp, "chromium.log"), "w")
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                            stdout=err, stderr=subprocess.STDOUT,
                            preexec_fn=child, pass_fds=(3, 4),
                            start_new_session=True)
    for fd in (to_chrome_r, from_chrome_w, cr, cw):
        os.close(fd)
    return proc, Cdp(to_chrome_w, from_chrome_r)


def stop(proc, name, sig=signal.SIGTERM, wait=10, group=False):
    """Stop it (gracefully first); its exit status, None if not run."""
    if proc is None:
        return None
    if proc.poll() is not None:
        return proc.returncode
    try:
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        proc.wait(wait)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        log("%s did not stop within %ss: killed" % (name, wait))
        try:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except ProcessLookupError:
            pass
        proc.wait()
    return proc.returncode


def describe(ev):
    p = ev.get("params", {})
    if ev["method"] == "Runtime.exceptionThrown":
        d = p.get("exceptionDetails", {})
        exc = d.get("exception", {}).get("description", "")
        return "exception: %s %s (%s:%s)" % (d.get("text", ""), exc,
                                            d.get("url", ""),
                                            d.get("lineNumber", ""))
    if ev["method"] == "Runtime.consoleAPICalled":
        return "console.%s: %s" % (p.get("type"), " ".join(
            str(a.get("value", a.get("description", "")))
            for a in p.get("args", [])))
    e = p.get("entry", {})
    return "log %s: %s %s" % (e.get("level"), e.get("text"),
                              e.get("url", ""))


def is_error(ev):
    m = ev.get("method")
    p = ev.get("params", {})
    if m == "Runtime.exceptionThrown":
        return True
    if m == "Runtime.consoleAPICalled":
        return p.get("type") in ("error", "assert")
    if m == "Log.entryAdded":
        return p.get("entry", {}).get("level") == "error"
    return False


KEYS = {"ArrowRight": 39, "KeyS": 83}
SKIPS = ("arena_ticks_skipped_total", "arena_snapshots_skipped_total")


def metrics(port):
    """ao-arena's counters that explain a missing tick: the ticks its
    late timer skipped, the snapshots it skipped for a busy member."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                timeout=10) as r:
        text = r.read().decode()
    out = dict.fromkeys(SKIPS, 0)
    for line in text.splitlines():
        name, _, val = line.partition(" ")
        if name in out:
            out[name] = int(float(val))
    return out


def page_stats(cdp, sess):
    r = cdp.call("Runtime.evaluate",
                 {"expression": "JSON.stringify(window.arenaStats || null)",
                  "returnByValue": True}, session=sess)
    val = r.get("result", {}).get("value")
    return (json.loads(val) if val else None) or {}


def key(cdp, sess, kind, code):
    cdp.call("Input.dispatchKeyEvent",
             {"type": kind, "code": code, "key": code,
              "windowsVirtualKeyCode": KEYS[code]}, session=sess)


def wait_for(cdp, sess, cond, timeout, procs):
    """Poll the page's counters until cond(stats) or timeout seconds."""
    end = time.monotonic() + timeout
    while True:
        stats = page_stats(cdp, sess)
        if cond(stats) or time.monotonic() > end:
            return stats
        if any(p.poll() is not None for p in procs):
            return stats
        cdp.pump(0.2)


def play(cdp, sess, url, procs):
    """The page as a player: keys held move it, every input the server
    applies is where the page predicted it, its chat line comes back."""
    nav = cdp.call("Page.navigate", {"url": url + "?play"}, session=sess)
    if nav.get("errorText"):
        raise RuntimeError("%s?play: %s" % (url, nav["errorText"]))
    t0 = time.monotonic()
    st = wait_for(cdp, sess, lambda s: s.get("room", -1) >= 0 and
                  s.get("snapshots", 0) > 0, 10, procs)
    if st.get("room", -1) < 0:
        log("FAIL: play: not in a room within 10 s")
        return False
    key(cdp, sess, "keyDown", "ArrowRight")
    wait_for(cdp, sess, lambda s: s.get("inputs", 0) >= 10, 5, procs)
    key(cdp, sess, "keyDown", "KeyS")
    wait_for(cdp, sess, lambda s: s.get("inputs", 0) >= 20, 5, procs)
    key(cdp, sess, "keyUp", "KeyS")
    key(cdp, sess, "keyUp", "ArrowRight")
    cdp.call("Runtime.evaluate", {"expression":
             "document.getElementById('chat-text').value = 'hello from "
             "Chromium'; document.getElementById('chat-form')"
             ".requestSubmit()"}, session=sess)
    st = wait_for(cdp, sess, lambda s: s.get("inputs", 0) >= 20 and
                  s.get("confirmed") == s.get("inputs") and
                  s.get("ownChats", 0) >= 1, 10, procs)
    log("play: room %s, %d inputs sent, %d confirmed, %d mispredicted, "
        "%d own chat lines back, %d errors, in %.1f s"
        % (st.get("room"), st.get("inputs", 0), st.get("confirmed", 0),
           st.get("mispredicted", 0), st.get("ownChats", 0),
           st.get("errors", 0), time.monotonic() - t0))
    ok = True
    if st.get("inputs", 0) < 20 or st.get("confirmed") != st.get("inputs"):
        log("FAIL: play: not every input confirmed by a snapshot")
        ok = False
    if st.get("mispredicted", 0):
        log("FAIL: play: mispredicted: %s" % st.get("errorList"))
        ok = False
    if st.get("ownChats", 0) < 1:
        log("FAIL: play: the chat line did not come back")
        ok = False
    if st.get("errors", 0):
        log("FAIL: play: the page counted errors: %s"
            % "; ".join(st.get("errorList", [])))
        ok = False
    return ok


def run(opt, tmp):
    arena = bots = chrome = None
    cdp = None
    ok = True
    try:
        arena, port = start_arena(opt.arena, tmp)
        log("ao-arena on 127.0.0.1:%d" % port)
        bots_out = open(os.path.join(tmp, "bots.out"), "w")
        bots = subprocess.Popen(
            [opt.bots, "--address=127.0.0.1", "--port=%d" % port,
             "--players=%d" % opt.players, "--duration=%ds" %
             (opt.timeout + 60), "--progress=never"],
            stdout=bots_out, stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent)
        log("ao-bots: %d players" % opt.players)

        chrome, cdp = start_chromium(opt.chromium, tmp, 1000, 720)
        t0 = time.monotonic()
        ver = cdp.call("Browser.getVersion", timeout=60)
        log("%s, DevTools over the pipe in %.1f s"
            % (ver.get("product"), time.monotonic() - t0))
        page = None
        for t in cdp.call("Target.getTargets")["targetInfos"]:
            if t["type"] == "page":
                page = t["targetId"]
                break
        if page is None:
            page = cdp.call("Target.createTarget",
                            {"url": "about:blank"})["targetId"]
        sess = cdp.call("Target.attachToTarget",
                        {"targetId": page, "flatten": True})["sessionId"]
        for m in ("Runtime.enable", "Page.enable", "Log.enable"):
            cdp.call(m, session=sess)
        url = "http://127.0.0.1:%d/" % port
        before = metrics(port)
        nav = cdp.call("Page.navigate", {"url": url}, session=sess)
        if nav.get("errorText"):
            raise RuntimeError("%s: %s" % (url, nav["errorText"]))
        log("opened " + url)

        t0 = time.monotonic()
        stats = wait_for(cdp, sess, lambda s: s.get("snapshots", 0) >=
                         opt.snapshots, opt.timeout, (arena, bots))
        took = time.monotonic() - t0
        after = metrics(port)
        skips = {k: after[k] - before[k] for k in SKIPS}
        log("page: %d snapshots in %.1f s, last tick %s, room %s, "
            "%s players, %s snapshots/s, ping %s ms, %d tick gaps, "
            "%d errors, %s acks"
            % (stats.get("snapshots", 0), took, stats.get("lastTick"),
               stats.get("room"), stats.get("players"),
               stats.get("snapshotRate"),
               "%.2f" % stats["pingMs"] if stats.get("pingMs", -1) >= 0
               else "-", stats.get("tickGaps", 0),
               stats.get("errors", 0), stats.get("acks")))
        if stats.get("snapshots", 0) < opt.snapshots:
            log("FAIL: fewer than %d snapshots within %d s"
                % (opt.snapshots, opt.timeout))
            ok = False
        # A tick the server did not send is no loss between it and the
        # page: on a loaded machine its timer may skip a tick (it runs
        # the next one on time instead of two late), or skip a member
        # whose last snapshot is still queued.  Any other gap fails.
        gaps = stats.get("tickGaps", 0)
        explained = sum(skips.values())
        if gaps:
            log("%d tick gaps; meanwhile the server skipped %d ticks and "
                "%d snapshots (all members)" % (gaps,
                skips[SKIPS[0]], skips[SKIPS[1]]))
        if gaps > explained:
            log("FAIL: %d tick gaps that the server did not skip"
                % (gaps - explained))
            ok = False
        if stats.get("errors", 0):
            log("FAIL: the page counted errors: %s"
                % "; ".join(stats.get("errorList", [])))
            ok = False
        if not stats.get("players"):
            log("FAIL: the page saw no player")
            ok = False

        shot = cdp.call("Page.captureScreenshot", {"format": "png"},
                        session=sess)
        png = base64.b64decode(shot["data"])
        with open(opt.screenshot, "wb") as f:
            f.write(png)
        n, w, h = png_colours(png)
        log("screenshot %s: %dx%d, %d bytes, %s%d colours"
            % (opt.screenshot, w, h, len(png),
               "at least " if n >= 64 else "", n))
        if n <= 8:
            log("FAIL: the screenshot is blank (%d colours)" % n)
            ok = False

        if not opt.no_play and not play(cdp, sess, url, (arena, bots)):
            ok = False

        cdp.pump(0.1)
        errs = [e for e in cdp.events if is_error(e)]
        for e in errs[:10]:
            log("FAIL: " + describe(e))
        if errs:
            ok = False
        for name, p in (("ao-arena", arena), ("ao-bots", bots)):
            if p.poll() is not None:
                log("FAIL: %s ended (exit status %d)" % (name, p.returncode))
                ok = False
        try:
            cdp.send("Browser.close")
        except OSError:
            pass
    except (RuntimeError, OSError, ValueError) as e:
        log("FAIL: %s" % e)
        ok = False
    finally:
        stop(chrome, "chromium", wait=10, group=True)
        if cdp:
            os.close(cdp.wfd)
            os.close(cdp.rfd)
        # Both end with status 0 on SIGTERM; not so after a failed
        # verification, or a sanitizer's report.
        for name, rc in (("ao-bots", stop(bots, "ao-bots")),
                         ("ao-arena", stop(arena, "ao-arena"))):
            if rc:
                log("FAIL: %s: exit status %d" % (name, rc))
                ok = False
    if not ok:
        for name in ("arena.out", "bots.out", "chromium.log"):
            path = os.path.join(tmp, name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    tail = f.readlines()[-8:]
                log("%s, last lines:\n%s" % (name, "".join(tail)))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("arena")
    ap.add_argument("bots")
    ap.add_argument("screenshot")
    ap.add_argument("--chromium", default=os.environ.get(
        "AO_CHROMIUM", "/usr/bin/chromium"))
    ap.add_argument("--players", type=int, default=30)
    ap.add_argument("--snapshots", type=int, default=100)
    ap.add_argument("--timeout", type=int, default=20,
                    help="seconds to wait for the snapshots")
    ap.add_argument("--no-play", action="store_true",
                    help="watch only: no player phase")
    opt = ap.parse_args()
    if not (os.access(opt.chromium, os.X_OK) or shutil.which(opt.chromium)):
        log("SKIP: no Chromium at %s (apt-get install chromium)"
            % opt.chromium)
        return SKIP
    for p in (opt.arena, opt.bots):
        if not os.access(p, os.X_OK):
            log("%s is not there (make tools)" % p)
            return 2
    # ao-arena embeds the viewer's files when it is built; one built
    # before the viewer existed cannot serve it.
    with open(opt.arena, "rb") as f:
        if b"window.arenaStats" not in f.read():
            log("SKIP: %s does not embed tools/arena/viewer/" % opt.arena)
            return SKIP
    # A timeout's SIGTERM unwinds through run()'s finally: all stopped.
    signal.signal(signal.SIGTERM, lambda sig, frame: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="ao-browser.") as tmp:
        ok = run(opt, tmp)
    log("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
