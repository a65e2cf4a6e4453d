/* sim.h — a deterministic simulator for the SWIM core.
 *
 * N cores (ea_swim) run in one process in virtual time (milliseconds).  One
 * event queue (a timing wheel, see sim.c) holds packet deliveries, push-pull
 * exchanges and each node's next deadline (ea_swim_next_deadline); the clock
 * jumps from event to event, so ten simulated minutes of a 5000-node
 * cluster take about half a minute (docs/membership.md).  Everything
 * random — delays, loss, the cores' own seeds — derives from one seed, so a
 * run replays exactly: tests print ea_sim_seed() and honour EA_SEED.
 *
 * Faults: global and per-link loss, uniform delay (jitter reorders packets),
 * partitions (each node on a side; packets and push-pulls across sides are
 * dropped), crash (the node stops and drops its inbound), pause (frozen for a
 * duration, inbound dropped like a full socket buffer, then resumed with the
 * time jump), restart (a fresh core with the same id joins again) and
 * graceful leave.
 *
 * Messages either round-trip through the wire codec (ea_wire_encode_msg /
 * ea_wire_decode_msg, the default: every byte the agent would send is
 * exercised) or are copied as structs (fast mode for big benches); both
 * count bytes with the codec's exact sizes.
 *
 * Ownership: the simulator owns every core; pointers it returns are valid
 * until ea_sim_free (a core's until that node restarts).  Callbacks run
 * inside the simulator and must not call back into it.
 */
#ifndef EA_SIM_H
#define EA_SIM_H

#include "ea_membership.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ea_sim ea_sim;

typedef struct {
  size_t n;              /* nodes, created at time 0, not yet joined */
  uint64_t seed;         /* everything random derives from this */
  ea_swim_config swim;   /* every node's SWIM config */
  uint32_t delay_min_ms; /* one-way delay, uniform in [min, max] */
  uint32_t delay_max_ms;
  double loss; /* global packet loss probability */
  bool codec;  /* round-trip every message through ea_wire_* */
} ea_sim_config;

/* n nodes, default SWIM config, 1–5 ms delay (a loaded datacenter network at
 * millisecond resolution, with enough jitter to reorder), no loss, codec on. */
void ea_sim_config_default(ea_sim_config *c, size_t n, uint64_t seed);

/* EA_SEED from the environment if set, else one from the clock.  For tests. */
uint64_t ea_sim_env_seed(void);

ea_sim *ea_sim_new(const ea_sim_config *c); /* NULL on allocation failure */
void ea_sim_free(ea_sim *sim);
uint64_t ea_sim_seed(const ea_sim *sim);
uint64_t ea_sim_now(const ea_sim *sim);
size_t ea_sim_size(const ea_sim *sim);

ea_swim *ea_sim_core(ea_sim *sim, size_t i);
const ea_node_id *ea_sim_id(const ea_sim *sim, size_t i);
const ea_addr *ea_sim_addr(const ea_sim *sim, size_t i);
/* Index of a node id, or -1. */
long ea_sim_index_of(const ea_sim *sim, const ea_node_id *id);
/* Running: not crashed, not paused. */
bool ea_sim_is_up(const ea_sim *sim, size_t i);

/* ---- lifecycle ---- */
void ea_sim_join(ea_sim *sim, size_t i, size_t seed);
/* Every running node learns every running node directly, as after a
 * converged join, without gossip.  Setup for large benches. */
void ea_sim_bootstrap(ea_sim *sim);
void ea_sim_crash(ea_sim *sim, size_t i);
void ea_sim_pause(ea_sim *sim, size_t i, uint64_t ms);
/* A crashed (or running) node comes back as a fresh core with the same id
 * and joins through seed. */
void ea_sim_restart(ea_sim *sim, size_t i, size_t seed);
/* The same, the new core starting at incarnation `inc` before it joins, as
 * the agent's transport does with its boot epoch (ea_swim_set_incarnation). */
void ea_sim_restart_at(ea_sim *sim, size_t i, size_t seed, uint32_t inc);
void ea_sim_leave(ea_sim *sim, size_t i);
void ea_sim_set_meta(ea_sim *sim, size_t i, const ea_meta *meta);
/* ea_swim_probe_soon on node i for node target (gone: ea_swim_peer_gone, a
 * reset its agent saw). */
bool ea_sim_probe_soon(ea_sim *sim, size_t i, size_t target, bool gone);

/* ---- network ---- */
void ea_sim_set_loss(ea_sim *sim, double p);
void ea_sim_set_link_loss(ea_sim *sim, size_t from, size_t to, double p); /* one direction */
void ea_sim_set_delay(ea_sim *sim, uint32_t min_ms, uint32_t max_ms);
/* side[i] for every node; traffic between different sides is dropped. */
void ea_sim_partition(ea_sim *sim, const uint8_t *side);
void ea_sim_heal(ea_sim *sim);

/* ---- time ---- */
void ea_sim_run_until(ea_sim *sim, uint64_t t_ms);
void ea_sim_run_for(ea_sim *sim, uint64_t ms);
/* Run until cond holds (checked every step_ms of virtual time) or deadline.
 * Returns whether it held; ea_sim_now() tells when. */
bool ea_sim_run_until_cond(ea_sim *sim, uint64_t deadline, uint64_t step_ms,
                           bool (*cond)(ea_sim *sim, void *ctx), void *ctx);

/* ---- observation ---- */
/* Called for every membership change in any node's view (node = observer). */
typedef void (*ea_sim_observer)(void *ctx, size_t node, const ea_member *m, uint8_t old_state,
                                uint64_t now_ms);
void ea_sim_set_observer(ea_sim *sim, ea_sim_observer fn, void *ctx);
/* target's state in observer's view, or -1 when observer does not know it. */
int ea_sim_view_state(const ea_sim *sim, size_t observer, size_t target, uint32_t *inc);

typedef struct {
  uint64_t packets_sent, packets_delivered;
  uint64_t dropped_loss, dropped_partition, dropped_down;
  uint64_t bytes_sent;   /* encoded bytes (plaintext, as the codec sizes them) */
  uint64_t oversize;     /* packets larger than the config's max_packet */
  uint64_t codec_errors; /* encode or decode failures (codec mode) */
  uint64_t syncs, syncs_failed, sync_bytes;
  uint64_t events;
} ea_sim_stats;
void ea_sim_stats_get(const ea_sim *sim, ea_sim_stats *out);

/* ---- the detection bound of membership/swim.c, computed ---- */
typedef struct {
  double first_probe_ms; /* ⌈ln(1/ε)⌉·I: some member's probe reaches the corpse */
  double suspect_ms;     /* I: that probe's interval ends, SUSPECT */
  double suspicion_ms;   /* min (K confirmations in time) or max */
  double spread_ms;      /* dissemination rounds of the DEAD update */
  double total_ms;       /* crash → DEAD in every view, with prob. ≥ 1 − ε */
  double lower_ms;       /* no view may say DEAD before crash + this */
  double expected_ms;    /* expectation: I·e/(e−1) + suspicion + spread */
  uint32_t spread_rounds;
} ea_sim_bound;
void ea_sim_detect_bound(const ea_swim_config *cfg, size_t n, double eps, uint32_t delay_max_ms,
                         ea_sim_bound *out);

/* ---- internal helpers implemented in swim.c for the simulator ---- */
void ea__swim_merge_core(ea_swim *dst, uint64_t now_ms, const ea_swim *src);
size_t ea__swim_export_bytes(const ea_swim *s);
int ea__swim_state_of(const ea_swim *s, const ea_node_id *id, uint32_t *inc);
void ea__swim_settle(ea_swim *s);
void ea__swim_set_on_change(ea_swim *s, void (*fn)(void *ctx, const ea_member *m, uint8_t old));

#endif
