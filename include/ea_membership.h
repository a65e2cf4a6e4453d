/* ea_membership.h — SWIM + Lifeguard membership core and controller election.
 *
 * The core is pure: it never reads a clock, a socket or a random device.
 * Time comes in as an argument (milliseconds on any monotonic clock), packets
 * go out through the ea_swim_io seam, and randomness comes from a seeded
 * generator the caller seeds.  The agent drives it from libuv
 * (membership/transport_uv.c); the simulator (tests/sim/sim.h) drives many
 * of them in one process in virtual time.
 *
 * Driving contract:
 *   - call ea_swim_tick(s, now) when now >= the deadline it last returned
 *     (calling it early is harmless);
 *   - call ea_swim_recv(s, now, from, msg) for every decoded packet;
 *   - call ea_swim_merge(s, now, ...) with the remote side of a push-pull;
 *   - after either, re-read ea_swim_next_deadline(s): input may move it.
 * The io callbacks are invoked synchronously from inside those calls; they
 * must not call back into the core.
 */
#ifndef EA_MEMBERSHIP_H
#define EA_MEMBERSHIP_H

#include "ea_wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ea_swim ea_swim;

typedef struct {
  uint32_t probe_interval_ms;     /* one member probed per interval */
  uint32_t probe_timeout_ms;      /* direct ack wait before ping-req */
  uint32_t indirect_checks;       /* k members asked to ping-req */
  uint32_t suspicion_mult;        /* min suspicion = mult·log10(max(N,10))·interval */
  uint32_t suspicion_max_mult;    /* max suspicion = max_mult · min */
  uint32_t retransmit_mult;       /* each update sent ≈ mult·log10(N+1) times */
  uint32_t awareness_max;         /* Lifeguard local health multiplier ceiling */
  uint32_t gossip_interval_ms;    /* extra gossip of pending updates */
  uint32_t gossip_nodes;          /* members per gossip round */
  uint32_t push_pull_interval_ms; /* anti-entropy; 0 disables */
  uint32_t dead_reclaim_ms;       /* dead/left members reaped after this */
  /* A member reaped while DEAD (not LEFT) is remembered: every
   * reconnect_interval_ms one of them gets a push-pull, for up to
   * reconnect_timeout_ms after it was reaped (Serf's reconnect_interval /
   * reconnect_timeout), so two sides of a partition longer than
   * dead_reclaim_ms merge again.  0 turns either off. */
  uint32_t reconnect_interval_ms;
  uint32_t reconnect_timeout_ms;
  uint32_t max_packet; /* plaintext budget per packet */
} ea_swim_config;

/* Defaults tuned for a datacenter training cluster (see membership/swim.c for
 * the detection bound as a formula of these). */
void ea_swim_config_default(ea_swim_config *c);

typedef struct {
  ea_node_id id;
  ea_meta meta;
  uint32_t incarnation;
  uint8_t state;     /* ea_member_state */
  uint64_t since_ms; /* time (caller's clock) of the last state change */
} ea_member;

/* The seam.  ctx is passed back unchanged. */
typedef struct {
  void *ctx;
  /* Send msg to addr.  The struct is valid for the duration of the call. */
  void (*send)(void *ctx, const ea_addr *to, const ea_msg *msg);
  /* Start a push-pull (TCP) state exchange with addr.  The transport later
   * calls ea_swim_merge() with what the peer sent, or nothing on failure. */
  void (*sync)(void *ctx, const ea_addr *to, ea_sync_kind kind);
  /* A member changed state (or appeared: old_state = 0xff). Optional. */
  void (*on_change)(void *ctx, const ea_member *m, uint8_t old_state);
} ea_swim_io;

typedef struct {
  uint64_t msgs_in, msgs_out;
  uint64_t pings_sent, acks_recv, ping_reqs_sent, nacks_recv;
  uint64_t suspicions;  /* times we marked a member suspect */
  uint64_t refutations; /* times we bumped our incarnation to refute */
  uint64_t declared_dead;
  uint64_t updates_sent;
  uint64_t syncs_started, syncs_merged;
  uint64_t reconnects;      /* push-pulls started with a reaped dead member */
  uint64_t urgent_probes;   /* probes moved ahead of the round (ea_swim_probe_soon) */
  uint64_t gone_suspicions; /* accusing probes started for ea_swim_peer_gone: DEAD if unanswered */
  uint64_t stale_dropped;   /* updates older than what we know */
  uint64_t stale_meta;      /* refutations without metadata not taken: ours predates its change */
  uint64_t recheck_pokes;   /* stale suspicions told to the suspect again (swim.c: recheck_poke) */
  uint32_t health;          /* current Lifeguard awareness score */
} ea_swim_stats;

/* Create a core for ourselves.  self_meta is copied.  seed feeds the
 * randomized probe order.  Returns NULL on allocation failure. */
ea_swim *ea_swim_new(const ea_swim_config *cfg, const ea_node_id *self, const ea_meta *self_meta,
                     const ea_swim_io *io, uint64_t seed, uint64_t now_ms);
void ea_swim_free(ea_swim *s);

/* Ask seeds for their state (push-pull join).  May be called repeatedly. */
void ea_swim_join(ea_swim *s, uint64_t now_ms, const ea_addr *seeds, size_t n);
/* Probe member `id` next, before its turn in the round (at most
 * URGENT_MAX waiting; one already asked for within a probe interval, or not
 * ALIVE, is not asked again).  For a member whose connection the kernel
 * reported reset: the probe starts at once when none is waiting for its
 * ack, else when that one ends.  It is an ordinary probe — direct, then
 * indirect, then suspicion — so a member that answers is unharmed and one
 * that is gone is declared dead only by the usual protocol, just sooner.
 * Returns true when a probe was scheduled. */
bool ea_swim_probe_soon(ea_swim *s, uint64_t now_ms, const ea_node_id *id);
/* ea_swim_probe_soon for a member whose *process* the kernel reported gone
 * (our connection to it was reset or refused, not merely timed out); also
 * for a member already SUSPECT.  Still the ordinary probe, and nothing
 * happens to a member that answers it (a probe of it already in flight is
 * marked as well, and a fresh one still follows it).  When the probe fails
 * (direct and indirect), the member is marked SUSPECT, told so at once in a
 * message of its own, and probed again at once, ahead of every other
 * probe: that second, accusing probe carries the accusation on every ping
 * and ping-req, and sends its ping-reqs at its start as well as after the
 * probe timeout (counted in gone_suspicions).  No timer is cut short: the
 * member is declared DEAD only when nothing at all answers that probe, at
 * its end, one probe interval (× local health) after the suspicion began,
 * instead of waiting for other members' confirmations — the reset and two
 * failed probes stand in for them.  An ack leaves the member SUSPECT under
 * the ordinary suspicion timer, which a refutation cancels as usual; a
 * newer incarnation heard while a probe runs makes that probe's failure no
 * news.  For a member already SUSPECT the probe asked for is itself the
 * accusing one.  Returns true when a probe was scheduled or the one in
 * flight was marked. */
bool ea_swim_peer_gone(ea_swim *s, uint64_t now_ms, const ea_node_id *id);
/* Graceful leave: broadcast LEFT for our incarnation; afterwards the core
 * only answers pings with acks until freed. */
void ea_swim_leave(ea_swim *s, uint64_t now_ms);
/* Replace our metadata (bumps incarnation, gossips ALIVE). */
void ea_swim_set_meta(ea_swim *s, uint64_t now_ms, const ea_meta *meta);

/* Raise our incarnation to inc (never lowers it) and gossip ALIVE.  The
 * agent calls it once, right after ea_swim_new, with a number above every
 * incarnation of its earlier runs (its boot epoch), so that nothing naming
 * an incarnation of an earlier run of this node applies to this one. */
void ea_swim_set_incarnation(ea_swim *s, uint64_t now_ms, uint32_t inc);

uint64_t ea_swim_tick(ea_swim *s, uint64_t now_ms);
uint64_t ea_swim_next_deadline(const ea_swim *s);
void ea_swim_recv(ea_swim *s, uint64_t now_ms, const ea_addr *from, const ea_msg *msg);

/* Our full state for push-pull: fills a malloc'd array (caller frees). */
int ea_swim_export(const ea_swim *s, ea_update **ups, size_t *n);
/* Merge a peer's full state. */
void ea_swim_merge(ea_swim *s, uint64_t now_ms, const ea_update *ups, size_t n);

/* Read-only view of the member table (ourselves included).  The pointer is
 * valid until the next call into the core. */
size_t ea_swim_members(const ea_swim *s, const ea_member **out);
const ea_member *ea_swim_find(const ea_swim *s, const ea_node_id *id);
const ea_member *ea_swim_self(const ea_swim *s);
size_t ea_swim_alive_count(const ea_swim *s);
void ea_swim_stats_get(const ea_swim *s, ea_swim_stats *out);
/* Current suspicion timeout bounds for the present cluster size (ms). */
void ea_swim_suspicion_bounds(const ea_swim *s, uint64_t *min_ms, uint64_t *max_ms);

const char *ea_member_state_str(uint8_t state);

/* ---- controller election ----------------------------------------------
 * The controller is the alive (or suspect: not yet known dead), eligible
 * member with the lowest id in the local view.  A member is eligible unless
 * its role is "observer".  The quorum rule over generations (issue: the
 * rendezvous) plugs in through `gen`: when gen is not NULL and gen->nmembers
 * > 0, `has_quorum` reports whether a majority of gen's members, minus those
 * that left gracefully, are alive in this view.                             */

typedef struct {
  const ea_node_id *members; /* members of the last formed generation */
  size_t nmembers;
  bool quorum_none; /* distributed.quorum: none */
} ea_election_gen;

typedef struct {
  bool have; /* false: no eligible member alive */
  ea_node_id controller;
  bool has_quorum;
  uint32_t eligible; /* eligible members alive in this view */
  char reason[160];  /* why this one / why none, for `status` */
} ea_election;

void ea_elect(const ea_member *members, size_t n, const ea_election_gen *gen, ea_election *out);

#endif
