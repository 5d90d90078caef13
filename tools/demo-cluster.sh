#!/bin/sh
# SPDX-License-Identifier: MIT
# The cluster demo (`make demo-cluster`): a nats-server with JetStream on
# a free loopback port and a scratch store, three ao-arena nodes on it,
# PLAYERS ao-bots spread over the nodes for DURATION; KILL_AT into the
# run one node is killed with SIGKILL: its players reconnect to another
# node, the others' rooms it owned are lost (room_lost) and joined again.
# Every summary is printed; everything started is stopped.
#
#   tools/demo-cluster.sh TOOLS_DIR [DURATION] [PLAYERS] [KILL_AT]
#
# Defaults: 20s, 600 players, 10 (seconds).  Exit status: 0 ok; 1 if a
# program failed or a bot's verification failed (a failover is not a
# failure: ao-bots counts room_lost and reconnects apart); 2 usage.
set -u

if [ $# -lt 1 ] || [ $# -gt 4 ]; then
	echo "Usage: $0 TOOLS_DIR [DURATION] [PLAYERS] [KILL_AT]" >&2
	exit 2
fi
tools=$1
duration=${2:-20s}
players=${3:-600}
kill_at=${4:-10}
arena=$tools/arena/ao-arena
bots=$tools/bots/ao-bots
nats=$(command -v nats-server || echo /usr/sbin/nats-server)
if [ ! -x "$nats" ]; then
	echo "demo-cluster: nats-server is not installed (make deps)" >&2
	exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/demo-cluster.XXXXXX") || exit 1
pids=""
cleanup() {
	for p in $pids; do
		kill -CONT "$p" 2>/dev/null
		kill "$p" 2>/dev/null
	done
	wait 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

free_port() {
	/usr/bin/python3 -c 'import socket; s=socket.socket(); \
s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

nport=$(free_port)
"$nats" -a 127.0.0.1 -p "$nport" -js -sd "$work/js" >"$work/nats.log" 2>&1 &
natspid=$!
pids="$natspid"
i=0
while ! /usr/bin/python3 -c "import socket; \
socket.create_connection(('127.0.0.1',$nport),0.2)" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 100 ]; then
		echo "demo-cluster: nats-server did not start" >&2
		exit 1
	fi
	sleep 0.1
done
echo "demo-cluster: nats-server on 127.0.0.1:$nport (JetStream)"

servers=""
for n in 1 2 3; do
	"$arena" --address=127.0.0.1 --port=0 --workers=1 \
		--nats="nats://127.0.0.1:$nport" --node="n$n" \
		>"$work/n$n.out" 2>"$work/n$n.err" &
	eval "pid$n=$!"
	pids="$pids $!"
	i=0
	while ! grep -q '^port=' "$work/n$n.out" 2>/dev/null; do
		i=$((i + 1))
		if [ $i -gt 100 ]; then
			echo "demo-cluster: node n$n did not start:" >&2
			cat "$work/n$n.err" >&2
			exit 1
		fi
		sleep 0.1
	done
	port=$(sed -n 's/^port=//p' "$work/n$n.out")
	servers="$servers${servers:+,}127.0.0.1:$port"
	echo "demo-cluster: node n$n on 127.0.0.1:$port"
	sleep 0.3
done

echo "demo-cluster: $players bots over $servers for $duration;" \
	"SIGKILL of n2 at ${kill_at}s"
"$bots" --servers="$servers" --players="$players" --duration="$duration" \
	--progress=never >"$work/bots.out" 2>&1 &
botspid=$!
sleep "$kill_at"
# shellcheck disable=SC2154 # set by the eval above
kill -KILL "$pid2"
echo "demo-cluster: n2 killed"
wait "$botspid"
botrc=$?
rc=0
for n in 1 3; do
	eval "kill -TERM \$pid$n"
	eval "wait \$pid$n" || rc=1
done
kill "$natspid"
wait "$natspid" 2>/dev/null
pids=""
echo
echo "== ao-bots"
cat "$work/bots.out"
for n in 1 3; do
	echo
	echo "== node n$n"
	sed '/^port=/d' "$work/n$n.out"
done
if [ "$botrc" -ne 0 ]; then
	echo "demo-cluster: ao-bots failed (status $botrc)" >&2
	exit 1
fi
[ $rc -eq 0 ] || echo "demo-cluster: a node's stop failed" >&2
exit $rc
