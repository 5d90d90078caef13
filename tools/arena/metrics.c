// SPDX-License-Identifier: MIT
/*
 * ao-arena's metrics: the server's aorta_* families (ao_server_metrics()),
 * then the game's arena_* ones, from arena_stats().  PROTOCOL.md lists
 * them.
 */
#include <stdio.h>
#include <aorta/io/metrics.h>
#include "room.h"

static void one(struct ao_metrics *m, const char *name, const char *type,
		const char *help, uint64_t v)
{
	ao_metrics_family(m, name, type, help);
	ao_metrics_u64(m, name, NULL, v);
}

static void seconds(struct ao_metrics *m, const char *name, const char *help,
		    uint64_t ns)
{
	ao_metrics_family(m, name, "gauge", help);
	ao_metrics_double(m, name, NULL, (double)ns / 1e9);
}

int arena_metrics(struct arena *a, struct ao_metrics *m)
{
	struct arena_stats st;
	char label[48];
	int i;

	ao_server_metrics(a->srv, m);
	arena_stats(a, &st);
	one(m, "arena_players", "gauge",
	    "Players connected now (hello or not), spectators included.",
	    st.players);
	one(m, "arena_players_peak", "gauge", "The most players at once.",
	    st.players_peak);
	one(m, "arena_players_in_rooms", "gauge", "Members of rooms now.",
	    st.in_rooms);
	one(m, "arena_spectators", "gauge", "Spectators watching a room now.",
	    st.spectators);
	one(m, "arena_rooms", "gauge", "Rooms made.", st.rooms);
	one(m, "arena_ticks_total", "counter", "Room ticks run.", st.ticks);
	one(m, "arena_ticks_skipped_total", "counter",
	    "Late room ticks the timers skipped.", st.ticks_skipped);
	seconds(m, "arena_tick_lateness_p50_seconds",
		"Median lateness of the room ticks.", st.late_p50_ns);
	seconds(m, "arena_tick_lateness_p99_seconds",
		"99th percentile lateness of the room ticks.", st.late_p99_ns);
	seconds(m, "arena_tick_lateness_max_seconds",
		"Largest lateness of a room tick.", st.late_max_ns);
	seconds(m, "arena_tick_work_p99_seconds",
		"99th percentile time a room tick ran.", st.work_p99_ns);
	one(m, "arena_snapshots_sent_total", "counter",
	    "Snapshot sends, one per member or spectator.", st.snaps_sent);
	one(m, "arena_snapshots_skipped_total", "counter",
	    "Snapshots skipped: the previous one still queued.",
	    st.snaps_skipped);
	one(m, "arena_snapshot_buffers_total", "counter",
	    "Buffers built for snapshots.", st.snap_bufs);
	one(m, "arena_snapshots_nobuf_total", "counter",
	    "Snapshots lost to an empty buffer pool.", st.snap_nobuf);
	one(m, "arena_chat_lines_total", "counter", "Chat lines broadcast.",
	    st.chat_lines);
	one(m, "arena_inputs_total", "counter", "Inputs applied.", st.inputs);
	one(m, "arena_joins_total", "counter", "Joins applied.", st.joins);
	one(m, "arena_leaves_total", "counter", "Leaves applied.", st.leaves);
	one(m, "arena_watches_total", "counter", "Spectators' watches applied.",
	    st.watches);
	one(m, "arena_refused_drops_total", "counter",
	    "Messages dropped after a refused join.", st.refused_drops);
	one(m, "arena_acks_total", "counter", "Ack messages taken.", st.acks);
	one(m, "arena_ack_slow_total", "counter",
	    "Members closed as slow readers for their acks.", st.ack_slow);
	ao_metrics_family(m, "arena_closes_total", "counter",
			  "Connections the arena closed, by reason.");
	for (i = 0; i < AC_NR; i++) {
		snprintf(label, sizeof(label), "reason=\"%s\"",
			 arena_close_name((enum arena_close)i));
		ao_metrics_u64(m, "arena_closes_total", label, st.closes[i]);
	}
	return m->err;
}
