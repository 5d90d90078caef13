// SPDX-License-Identifier: MIT
//
// The arena in a web page: a spectator (the default) or a player
// (?play) over WebSocket, with the arena protocol of
// tools/arena/PROTOCOL.md: one arena message per binary WebSocket
// message (the type byte and the fields, little-endian, without the
// 2-byte length of the TCP framing).  Plain JavaScript, no framework, no
// build step.  The WebSocket subprotocol is "aorta-arena.v1".
//
//   /             watch the first room (watch 0xffffffff)
//   /?watch=N     watch room N
//   /?play        join any room; arrow keys or WASD move, Enter chats
//
// The page's counters are on window.arenaStats (the browser test reads
// them): snapshots received, the last tick, tick gaps (a snapshot of the
// watched room whose tick is not the previous one + 1), errors; when
// playing, the inputs the server confirmed and mispredicted (none).
"use strict";

(function () {
	// Message types (PROTOCOL.md).
	const T_HELLO = 0x01, T_JOIN = 0x02, T_INPUT = 0x03, T_CHAT = 0x04;
	const T_PING = 0x05, T_ACK = 0x07, T_WATCH = 0x08;
	const T_WELCOME = 0x81, T_JOINED = 0x82, T_SNAPSHOT = 0x83;
	const T_SCHAT = 0x84, T_PONG = 0x85, T_ERROR = 0x86;
	const ANY_ROOM = 0xffffffff;
	const E_ROOM_FULL = 6, E_NO_ROOM = 7;
	const ERROR_NAMES = ["", "bad_type", "malformed", "order",
		"chat_long", "flood", "room_full", "no_room", "server_full",
		"hello_timeout", "idle"];
	// dx, dy of each direction 0-8: stay, N, NE, E, SE, S, SW, W, NW.
	const DX = [0, 0, 1, 1, 1, 0, -1, -1, -1];
	const DY = [0, -1, -1, 0, 1, 1, 1, 0, -1];
	const ACK_MS = 250;	// a client that acks must every 500 ms
	const PING_MS = 1000;

	const params = new URLSearchParams(location.search);
	const playing = params.has("play");
	let watchRoom = ANY_ROOM;
	if (params.has("watch")) {
		const n = Number(params.get("watch"));
		if (Number.isInteger(n) && n >= 0 && n <= ANY_ROOM)
			watchRoom = n;
	}

	const stats = {
		mode: playing ? "play" : "watch",
		connected: false,
		closed: false,
		snapshots: 0,	// snapshots received
		lastTick: -1,	// tick of the last one
		tickGaps: 0,	// ticks missing between two of one room
		errors: 0,	// socket errors, server errors, bad messages
		errorList: [],	// their texts, the first few
		room: -1,
		players: 0,
		pingMs: -1,
		snapshotRate: 0,	// per second, over the last second
		acks: 0,
		player: 0,	// own id (welcome)
		// Playing: inputs sent, those a snapshot has confirmed, and
		// those where the server's position was not the predicted one
		// (always 0: the rules are exact); chat lines received, own.
		inputs: 0,
		confirmed: 0,
		mispredicted: 0,
		chats: 0,
		ownChats: 0,
	};
	window.arenaStats = stats;

	const $ = (id) => document.getElementById(id);
	const canvas = $("world");
	const ctx = canvas.getContext("2d");

	let world = { tickHz: 20, roomSize: 0, width: 4096, height: 4096,
		speed: 0 };
	let entries = [];	// the last snapshot: {id, x, y, seq}
	let snapTimes = [];	// arrival times of the last second's snapshots
	let lastAck = 0;	// performance.now() of the last ack
	let retryTimer = 0;

	// Client-side prediction (PROTOCOL.md, "The world and its rules"):
	// the server's position of the own player after the input with seq
	// s, then every input sent after s replayed on it.
	let inRoom = false;
	let base = null;	// {x, y} after the input baseSeq (or joined)
	let pending = [];	// inputs sent and not yet in a snapshot
	let seq = 0;
	let me = null;		// the predicted position

	function fail(text) {
		stats.errors++;
		if (stats.errorList.length < 20)
			stats.errorList.push(text);
		status("error: " + text);
	}

	function status(text) {
		$("s-status").textContent = text;
	}

	$("mode").textContent = playing ? "playing" :
		"watching " + (watchRoom === ANY_ROOM ? "the first room" :
			"room " + watchRoom);
	$("switch").textContent = playing ? "watch" : "play";
	$("switch").href = playing ? "?" : "?play";
	$("help").textContent = playing ?
		"Arrow keys or WASD move (the bright dot is you), Enter " +
		"chats." : "Dots are players; ?play to join, ?watch=N " +
		"for room N.";
	// The room's chat lines in both modes; the box to write one when
	// playing.
	$("chat").hidden = false;
	$("chat-form").hidden = !playing;

	const url = (location.protocol === "https:" ? "wss://" : "ws://") +
		location.host + "/";
	// The arena's subprotocol: a server that does not choose it fails
	// the handshake.
	const ws = new WebSocket(url, "aorta-arena.v1");
	ws.binaryType = "arraybuffer";

	function send(type, size, fill) {
		if (ws.readyState !== WebSocket.OPEN)
			return;
		const buf = new ArrayBuffer(size);
		const v = new DataView(buf);
		v.setUint8(0, type);
		if (fill)
			fill(v);
		ws.send(buf);
	}

	function sendHello() {
		const name = new TextEncoder().encode(playing ?
			"web-" + Math.floor(1000 + Math.random() * 9000) :
			"viewer");
		send(T_HELLO, 3 + name.length, (v) => {
			v.setUint8(1, 1);	// version
			v.setUint8(2, name.length);
			new Uint8Array(v.buffer).set(name, 3);
		});
	}

	function sendStart() {
		retryTimer = 0;
		if (playing)
			send(T_JOIN, 5, (v) => v.setUint32(1, ANY_ROOM, true));
		else
			send(T_WATCH, 5,
				(v) => v.setUint32(1, watchRoom, true));
	}

	function sendPing() {
		const stamp = BigInt(Math.round(performance.now() * 1000));
		send(T_PING, 9, (v) => v.setBigUint64(1, stamp, true));
	}

	// The newest tick read, every 250 ms: from the snapshots' arrival
	// (timers of a hidden tab are slowed down, messages are not) and
	// from a timer when they stop.  The same tick again is allowed.
	function sendAck() {
		if (stats.lastTick < 0)
			return;
		lastAck = performance.now();
		send(T_ACK, 5, (v) => v.setUint32(1, stats.lastTick, true));
		stats.acks++;
	}

	function sendInput(dir) {
		seq++;
		send(T_INPUT, 6, (v) => {
			v.setUint32(1, seq, true);
			v.setUint8(5, dir);
		});
		stats.inputs++;
		me = move(me, dir);
		pending.push({ seq: seq, dir: dir, x: me.x, y: me.y });
	}

	function sendChat(text) {
		let bytes = new TextEncoder().encode(text);
		if (bytes.length === 0)
			return;
		bytes = bytes.subarray(0, 200);
		send(T_CHAT, 1 + bytes.length,
			(v) => new Uint8Array(v.buffer).set(bytes, 1));
	}

	function clamp(v, lo, hi) {
		return v < lo ? lo : v > hi ? hi : v;
	}

	function move(p, dir) {
		return {
			x: clamp(p.x + DX[dir] * world.speed, 0,
				world.width - 1),
			y: clamp(p.y + DY[dir] * world.speed, 0,
				world.height - 1),
		};
	}

	// The server applied the own inputs up to seq s and put the player
	// at x, y: check the prediction, drop those inputs, replay the rest.
	function reconcile(x, y, s) {
		const done = pending.filter((i) => i.seq <= s);
		if (done.length) {
			const last = done[done.length - 1];
			stats.confirmed += done.length;
			if (last.seq !== s || last.x !== x || last.y !== y) {
				stats.mispredicted++;
				if (stats.errorList.length < 20)
					stats.errorList.push("input " + s +
						": at " + x + "," + y +
						", predicted " + last.x +
						"," + last.y);
			}
			base = { x: x, y: y };
			pending = pending.filter((i) => i.seq > s);
		} else if (x !== base.x || y !== base.y) {
			// Nothing new applied: still where the last one was.
			stats.mispredicted++;
		}
		let p = base;
		for (const i of pending)
			p = move(p, i.dir);
		me = p;
	}

	ws.onopen = () => {
		stats.connected = true;
		status("connected");
		sendHello();
		sendStart();
		sendPing();
	};

	ws.onerror = () => fail("WebSocket error");

	ws.onclose = (ev) => {
		stats.connected = false;
		stats.closed = true;
		inRoom = false;
		// A close the page did not ask for is an error.
		fail("closed (code " + ev.code + (ev.reason ? ", " + ev.reason :
			"") + ")");
	};

	ws.onmessage = (ev) => {
		if (!(ev.data instanceof ArrayBuffer)) {
			fail("text message");
			return;
		}
		try {
			onMessage(new DataView(ev.data));
		} catch (e) {
			fail("bad message: " + e.message);
		}
	};

	function need(v, len, name) {
		if (v.byteLength < len)
			throw new Error(name + " of " + v.byteLength +
				" bytes");
	}

	function onMessage(v) {
		need(v, 1, "message");
		switch (v.getUint8(0)) {
		case T_WELCOME:
			need(v, 15, "welcome");
			stats.player = v.getUint32(1, true);
			world = {
				tickHz: v.getUint16(5, true),
				roomSize: v.getUint16(7, true),
				width: v.getUint16(9, true),
				height: v.getUint16(11, true),
				speed: v.getUint16(13, true),
			};
			break;
		case T_JOINED:
			// A spectator's joined has x = y = 65535: no position.
			need(v, 19, "joined");
			inRoom = true;
			stats.room = v.getUint32(1, true);
			base = { x: v.getUint16(11, true),
				y: v.getUint16(13, true) };
			me = base;
			status((playing ? "playing in" : "watching") +
				" room " + stats.room);
			break;
		case T_SNAPSHOT:
			onSnapshot(v);
			break;
		case T_SCHAT:
			need(v, 18, "chat");
			onChat(v);
			break;
		case T_PONG:
			need(v, 9, "pong");
			stats.pingMs = (performance.now() * 1000 -
				Number(v.getBigUint64(1, true))) / 1000;
			break;
		case T_ERROR: {
			need(v, 2, "error");
			const code = v.getUint8(1);
			if (code === E_NO_ROOM || code === E_ROOM_FULL) {
				// No room to watch (yet), or it filled: again
				// in a second; the connection stays open.
				status("waiting for a room (" +
					ERROR_NAMES[code] + ")");
				if (!retryTimer)
					retryTimer = setTimeout(sendStart,
						1000);
				break;
			}
			fail("server error " + code + " " +
				(ERROR_NAMES[code] || "unknown"));
			break;
		}
		default:
			fail("unknown message type " + v.getUint8(0));
		}
	}

	function onSnapshot(v) {
		need(v, 11, "snapshot");
		const tick = v.getUint32(1, true);
		const room = v.getUint32(5, true);
		const n = v.getUint16(9, true);
		need(v, 11 + 12 * n, "snapshot");
		if (stats.lastTick >= 0 && room === stats.room) {
			if (tick <= stats.lastTick)
				fail("tick " + tick + " after " +
					stats.lastTick);
			else if (tick !== stats.lastTick + 1)
				stats.tickGaps += tick - stats.lastTick - 1;
		}
		if (room !== stats.room)
			status((playing ? "playing in" : "watching") +
				" room " + room);
		stats.room = room;
		stats.lastTick = tick;
		stats.snapshots++;
		stats.players = n;
		snapTimes.push(performance.now());
		rate();
		if (performance.now() - lastAck >= ACK_MS)
			sendAck();

		const list = new Array(n);
		for (let i = 0, o = 11; i < n; i++, o += 12) {
			list[i] = {
				id: v.getUint32(o, true),
				x: v.getUint16(o + 4, true),
				y: v.getUint16(o + 6, true),
				seq: v.getUint32(o + 8, true),
			};
			if (inRoom && base && list[i].id === stats.player)
				reconcile(list[i].x, list[i].y, list[i].seq);
		}
		entries = list;
	}

	// Snapshots received in the last second.
	function rate() {
		const now = performance.now();
		while (snapTimes.length && snapTimes[0] < now - 1000)
			snapTimes.shift();
		stats.snapshotRate = snapTimes.length;
	}

	function onChat(v) {
		const from = v.getUint32(13, true);
		const text = new TextDecoder().decode(
			new Uint8Array(v.buffer, v.byteOffset + 17,
				v.byteLength - 17));
		stats.chats++;
		if (from === stats.player)
			stats.ownChats++;
		const li = document.createElement("li");
		li.textContent = from + ": " + text;
		const log = $("chat-log");
		log.appendChild(li);
		while (log.childNodes.length > 100)
			log.removeChild(log.firstChild);
		log.scrollTop = log.scrollHeight;
	}

	// Keys held: one input per tick while a direction is held.
	const held = new Set();
	const KEYS = {
		ArrowUp: "n", KeyW: "n", ArrowDown: "s", KeyS: "s",
		ArrowLeft: "w", KeyA: "w", ArrowRight: "e", KeyD: "e",
	};

	function heldDir() {
		const dx = (held.has("e") ? 1 : 0) - (held.has("w") ? 1 : 0);
		const dy = (held.has("s") ? 1 : 0) - (held.has("n") ? 1 : 0);
		for (let d = 0; d < 9; d++)
			if (DX[d] === dx && DY[d] === dy)
				return d;
		return 0;
	}

	if (playing) {
		window.addEventListener("keydown", (e) => {
			if (e.target === $("chat-text") || !(e.code in KEYS))
				return;
			held.add(KEYS[e.code]);
			e.preventDefault();
		});
		window.addEventListener("keyup", (e) => {
			if (e.code in KEYS)
				held.delete(KEYS[e.code]);
		});
		window.addEventListener("blur", () => held.clear());
		$("chat-form").addEventListener("submit", (e) => {
			e.preventDefault();
			sendChat($("chat-text").value);
			$("chat-text").value = "";
			$("chat-text").blur();
		});
		const tickInput = () => {
			const dir = heldDir();
			if (inRoom && dir !== 0)
				sendInput(dir);
			setTimeout(tickInput, 1000 / (world.tickHz || 20));
		};
		setTimeout(tickInput, 50);
	}

	setInterval(sendPing, PING_MS);
	setInterval(() => {
		if (performance.now() - lastAck >= ACK_MS)
			sendAck();
	}, ACK_MS / 2);

	// The canvas: a square that fits the window beside the table.
	function fit() {
		const top = canvas.getBoundingClientRect().top + window.scrollY;
		const side = Math.max(200, Math.min(800,
			window.innerHeight - top - 16,
			window.innerWidth - 32));
		canvas.width = canvas.height = Math.floor(side);
	}
	window.addEventListener("resize", fit);
	fit();

	function draw() {
		const w = canvas.width, h = canvas.height;
		const sx = w / world.width, sy = h / world.height;
		ctx.fillStyle = "#0b0d10";
		ctx.fillRect(0, 0, w, h);
		ctx.strokeStyle = "#1c222b";
		ctx.lineWidth = 1;
		for (let i = 1; i < 8; i++) {
			ctx.beginPath();
			ctx.moveTo(i * w / 8 + 0.5, 0);
			ctx.lineTo(i * w / 8 + 0.5, h);
			ctx.moveTo(0, i * h / 8 + 0.5);
			ctx.lineTo(w, i * h / 8 + 0.5);
			ctx.stroke();
		}
		for (const e of entries) {
			if (playing && e.id === stats.player)
				continue;
			// A hue per player id, so that each keeps its colour.
			ctx.fillStyle = "hsl(" + (e.id * 47 % 360) +
				",70%,60%)";
			ctx.beginPath();
			ctx.arc(e.x * sx, e.y * sy, 4, 0, 2 * Math.PI);
			ctx.fill();
		}
		if (playing && inRoom && me) {
			ctx.fillStyle = "#ffffff";
			ctx.strokeStyle = "#ffd84a";
			ctx.lineWidth = 2;
			ctx.beginPath();
			ctx.arc(me.x * sx, me.y * sy, 6, 0, 2 * Math.PI);
			ctx.fill();
			ctx.stroke();
		}
		rate();
		$("s-room").textContent = stats.room < 0 ? "-" : stats.room;
		$("s-tick").textContent = stats.lastTick < 0 ? "-" :
			stats.lastTick;
		$("s-players").textContent = stats.players;
		$("s-rate").textContent = stats.snapshotRate;
		$("s-ping").textContent = stats.pingMs < 0 ? "-" :
			stats.pingMs.toFixed(1) + " ms";
		$("s-snaps").textContent = stats.snapshots;
		$("s-gaps").textContent = stats.tickGaps;
		$("s-errors").textContent = stats.errors;
		requestAnimationFrame(draw);
	}
	requestAnimationFrame(draw);
})();
