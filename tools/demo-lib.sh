# shellcheck shell=sh disable=SC2154 # me, srv_bin, cli_bin: the demo's
# SPDX-License-Identifier: MIT
# What the two demos share (tools/demo.sh, tools/demo-game.sh source it):
# a server on 127.0.0.1 on a free port, a client against it, both stopped
# whatever happens (an error, ^C, a kill), then the server's final report
# and both exit statuses.
#
# The demo defines usage() (its --help), sources this file and calls
#   demo_args MAX "$@"       its command line: --help, or 1 to MAX
#                            arguments; else usage on stderr and exit 2
# then sets
#   me       its name in messages (demo, demo-game)
#   srv_bin  the server (ao-echo, ao-arena): it takes --address, --port=0
#            and --drain-timeout, and the first line of its stdout is
#            port=N once it listens
#   cli_bin  the client (ao-load, ao-bots)
# and calls, in order:
#   demo_start LINE          both programs there, "<me>: LINE" on
#                            stdout, the server started: sets port
#   demo_run ARG...          the client with ARG... to the end: sets cli_rc
#                            (its stdout shown and kept)
#   demo_summary LABEL...    the client's summary lines that start with
#                            these labels, as printed (runs of spaces cut
#                            to two)
#   demo_stop CLI_STATUSES   stop the server, print its final report;
#                            exit 1 if either program failed (the client's
#                            exit statuses explained by CLI_STATUSES)

srv_pid=
cli_pid=

demo_args() {
	max=$1
	shift
	case "${1:-}" in
	-h | --help)
		usage
		exit 0
		;;
	"")
		usage >&2
		exit 2
		;;
	esac
	[ $# -le "$max" ] || {
		usage >&2
		exit 2
	}
}

# Stop both programs and clean up.
demo_cleanup() {
	if [ -n "$cli_pid" ] && kill -0 "$cli_pid" 2>/dev/null; then
		kill -TERM "$cli_pid" 2>/dev/null
		wait "$cli_pid" 2>/dev/null
	fi
	cli_pid=
	if [ -n "$srv_pid" ] && kill -0 "$srv_pid" 2>/dev/null; then
		kill -TERM "$srv_pid" 2>/dev/null
		# The graceful stop is bounded (--drain-timeout); then force it.
		i=0
		while kill -0 "$srv_pid" 2>/dev/null && [ $i -lt 100 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		kill -KILL "$srv_pid" 2>/dev/null
		wait "$srv_pid" 2>/dev/null
	fi
	srv_pid=
	rm -rf "$tmp"
}

fail() {
	echo "$me: $*" >&2
	exit 1
}

demo_start() {
	srv=${srv_bin##*/}
	cli=${cli_bin##*/}
	for b in "$srv_bin" "$cli_bin"; do
		if [ ! -x "$b" ]; then
			echo "$me: $b is missing (make tools)" >&2
			exit 1
		fi
	done

	tmp=$(mktemp -d "${TMPDIR:-/tmp}/ao-$me.XXXXXX") || exit 1
	trap demo_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	trap 'exit 129' HUP

	echo "$me: $1"
	"$srv_bin" --address=127.0.0.1 --port=0 --drain-timeout=5s \
		>"$tmp/srv.out" &
	srv_pid=$!

	# The first line of its stdout is port=N once it listens.
	port=
	i=0
	while [ $i -lt 200 ]; do
		port=$(sed -n '1s/^port=\([0-9][0-9]*\)$/\1/p' "$tmp/srv.out")
		[ -n "$port" ] && break
		kill -0 "$srv_pid" 2>/dev/null || break
		sleep 0.05
		i=$((i + 1))
	done
	if [ -z "$port" ]; then
		if kill -0 "$srv_pid" 2>/dev/null; then
			fail "$srv did not report its port within 10 s"
		fi
		wait "$srv_pid"
		rc=$?
		srv_pid=
		fail "$srv failed to start (exit status $rc)"
	fi
}

demo_run() {
	# Its stdout goes through tee, kept for demo_summary; progress lines
	# as if it wrote to the terminal itself.
	progress=--progress=never
	[ -t 1 ] && progress=--progress=always
	mkfifo "$tmp/cli.fifo" || fail "cannot make a fifo in $tmp"
	tee "$tmp/cli.out" <"$tmp/cli.fifo" &
	tee_pid=$!
	# In the background, so that a signal to this script acts at once
	# (the shell runs traps during a wait, not during a foreground
	# command).
	"$cli_bin" "$progress" "$@" >"$tmp/cli.fifo" &
	cli_pid=$!
	wait "$cli_pid"
	cli_rc=$?
	cli_pid=
	wait "$tee_pid"
}

demo_summary() {
	for label in "$@"; do
		grep "^  $label " "$tmp/cli.out" | head -n 1
	done | sed 's/^ *//; s/   */  /g'
}

demo_stop() {
	# Stop the server and read its final report.
	if kill -0 "$srv_pid" 2>/dev/null; then
		kill -TERM "$srv_pid"
		wait "$srv_pid"
		srv_rc=$?
	else
		wait "$srv_pid"
		srv_rc=$?
		echo "$me: $srv ended before it was stopped" >&2
		[ "$srv_rc" -ne 0 ] || srv_rc=1
	fi
	srv_pid=
	echo
	sed '1d' "$tmp/srv.out"

	rc=0
	if [ "$cli_rc" -ne 0 ]; then
		echo "$me: $cli failed (exit status $cli_rc: $1)" >&2
		rc=1
	fi
	if [ "$srv_rc" -ne 0 ]; then
		echo "$me: $srv failed (exit status $srv_rc)" >&2
		rc=1
	fi
	[ "$rc" -eq 0 ] || exit "$rc"
}
