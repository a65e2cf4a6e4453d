/* schedule.c — the seeded fault schedule.
 *
 * A schedule is a list of faults, each with its kind, its target slot and
 * its parameters (how long a pause or a partition lasts, how much loss,
 * whether the node comes back fresh or with its old disk), and the fraction
 * of training after which it fires.  Everything comes from one generator
 * seeded with --seed and nothing else, so the same seed and options print
 * the same schedule byte for byte; what differs between two runs of one
 * seed is only timing (how fast this machine trains, when SWIM notices).
 *
 * Faults fire by training progress rather than wall time: a slow machine
 * stretches the run instead of hitting a finished job with its last faults.
 * Kinds are dealt in shuffled rounds so every enabled kind occurs at least
 * once; the checkpoint kinds are always placed (the run decides whether the
 * agents can run them, and reports a skip with its reason if not), so the
 * schedule does not depend on what the agents turn out to support.
 */
#include "chaos.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* One fault every ~11 s of a run: with ~1 s recoveries and 2–7 s faults this
 * leaves the cluster time to train between faults on a loaded 2-core
 * machine; 2 minutes gives the 10+ faults the harness promises. */
#define SECONDS_PER_FAULT 11
/* Faults fire between 5% and 90% of training: the first after the job has
 * settled, the last leaving a tail that shows the cluster trains on. */
#define FRAC_FIRST 0.05
#define FRAC_SPAN 0.85

static const char *const kind_names[EA__F_NKINDS] = {
    "node-crash", "worker-kill", "controller-kill", "pause", "drain",      "sigterm",
    "join",       "isolate",     "split",           "loss",  "ckpt-kill",  "disk-full",
    "oneway",     "foreign",     "preempt",         "spare", "http-flood", "join-flood"};

const char *ea__chaos_kind_name(int kind) {
  return kind >= 0 && kind < EA__F_NKINDS ? kind_names[kind] : "?";
}

int ea__chaos_kind_parse(const char *name) {
  for (int k = 0; k < EA__F_NKINDS; k++)
    if (strcmp(name, kind_names[k]) == 0) return k;
  return -1;
}

bool ea__chaos_kind_needs_netns(int kind) {
  return kind == EA__F_ISOLATE || kind == EA__F_SPLIT || kind == EA__F_LOSS || kind == EA__F_ONEWAY;
}

bool ea__chaos_kind_needs_ckpt(int kind) {
  return kind == EA__F_CKPT_KILL || kind == EA__F_DISK_FULL;
}

static int range(ea_rng *g, int lo, int hi) {
  return lo + (int)ea_rng_below(g, (uint32_t)(hi - lo + 1));
}

static void params(ea_rng *g, const ea__chaos_sched_opts *o, ea__chaos_fault *f) {
  /* Every parameter is drawn for every fault, whatever its kind, so one
   * fault's kind never shifts the numbers of the faults after it. */
  f->slot = 1 + (int)ea_rng_below(g, (uint32_t)o->nagents);
  f->fresh = ea_rng_double(g) < 0.5;
  f->whole_node = ea_rng_double(g) < 0.5;
  f->remove_by_drain = ea_rng_double(g) < 0.5;
  /* Pauses: mostly longer than failure detection (≈1–2.5 s for 5 agents at
   * the default probe settings, docs/operations.md) so the cluster must
   * re-form and take the node back; some shorter, a stall it rides out. */
  bool long_pause = ea_rng_double(g) < 0.7;
  int pause_ms = long_pause ? range(g, 3500, 5500) : range(g, 600, 1500);
  int window_ms = range(g, 3500, 5500); /* partitions, loss, a full disk */
  f->loss_pct = range(g, 5, 25);
  f->nth = range(g, 1, 2);
  uint32_t minority = 0;
  int want = o->nagents / 2;
  for (int picked = 0; picked < want;) {
    int s = 1 + (int)ea_rng_below(g, (uint32_t)o->nagents);
    if (!(minority & (1u << s))) {
      minority |= 1u << s;
      picked++;
    }
  }
  f->minority = minority;
  switch (f->kind) {
    case EA__F_PAUSE:
      f->dur_ms = pause_ms;
      break;
    case EA__F_ISOLATE:
    case EA__F_SPLIT:
    case EA__F_LOSS:
    case EA__F_DISK_FULL:
      f->dur_ms = window_ms;
      break;
    case EA__F_ONEWAY:
      /* 14–22 s: longer than the two failed generations (an op's timeout,
       * then the new generation's connect: 2 × 5 s in the built-in job)
       * it takes to hold an end of the link out.  No draw of its own, so
       * the other faults' numbers stay what they were. */
      f->dur_ms = 4 * window_ms;
      break;
    case EA__F_HTTP_FLOOD:
      f->dur_ms = window_ms; /* 3.5–5.5 s */
      break;
    case EA__F_FOREIGN:
      /* 7–11 s: the stranger starts, fails to join or forms alone and
       * reaches the checkpoint directory (no draw of its own) */
      f->dur_ms = 2 * window_ms;
      break;
    default:
      f->dur_ms = 0;
  }
  if (f->kind == EA__F_CONTROLLER_KILL) f->slot = 0;
  if (f->kind == EA__F_JOIN || f->kind == EA__F_FOREIGN)
    f->slot = o->nagents + 1; /* the newcomer's slot (its namespace and address) */
  if (f->kind == EA__F_LOSS || f->kind == EA__F_SPLIT || f->kind == EA__F_DISK_FULL) f->slot = 0;
}

static void shuffle(ea_rng *g, int *a, int n) {
  for (int i = n - 1; i > 0; i--) {
    int j = (int)ea_rng_below(g, (uint32_t)i + 1);
    int t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

int ea__chaos_schedule(const ea__chaos_sched_opts *o, ea__chaos_fault **out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (o->nagents < 2) return -EINVAL;
  int base[EA__F_NKINDS], nbase = 0, ck[EA__F_NKINDS], nck = 0;
  for (int k = 0; k < EA__F_NKINDS; k++) {
    if (!(o->kinds & (1u << k))) continue;
    if (ea__chaos_kind_needs_ckpt(k))
      ck[nck++] = k;
    else
      base[nbase++] = k;
  }
  if (nbase + nck == 0) return -EINVAL;
  int64_t by_time = o->duration_ms / (SECONDS_PER_FAULT * 1000);
  int nb = (int)(by_time > o->min_faults ? by_time : o->min_faults);
  if (nbase && nb < nbase) nb = nbase;
  if (!nbase) nb = 0;
  /* Checkpoint kinds: once per full round of the others (at least once). */
  int rounds = nbase ? (nb + nbase - 1) / nbase : 1;
  int ckrounds = nbase ? nb / nbase : 1;
  if (ckrounds < 1) ckrounds = 1;
  int total = nb + nck * ckrounds;
  int *kinds = calloc((size_t)total, sizeof *kinds);
  ea__chaos_fault *f = calloc((size_t)total, sizeof *f);
  if (!kinds || !f) {
    free(kinds);
    free(f);
    return -ENOMEM;
  }
  ea_rng g;
  ea_rng_seed(&g, o->seed, 1, EA_RNG_CHAOS_INDEX);
  /* Round by round: the next nbase kinds of the deck (the last round
   * truncated to what is left) plus every checkpoint kind, shuffled
   * together, so each round holds each enabled kind once. */
  int len = 0, dealt = 0;
  for (int rd = 0; rd < rounds; rd++) {
    int deck[2 * EA__F_NKINDS], nd = 0;
    int take = nb - dealt < nbase ? nb - dealt : nbase;
    int tmp[EA__F_NKINDS];
    memcpy(tmp, base, sizeof(int) * (size_t)nbase);
    shuffle(&g, tmp, nbase);
    for (int i = 0; i < take; i++) deck[nd++] = tmp[i];
    dealt += take;
    if (rd < ckrounds)
      for (int c = 0; c < nck; c++) deck[nd++] = ck[c];
    shuffle(&g, deck, nd);
    for (int i = 0; i < nd && len < total; i++) kinds[len++] = deck[i];
  }
  for (int i = 0; i < len; i++) {
    f[i].kind = kinds[i];
    f[i].frac = FRAC_FIRST + FRAC_SPAN * ((double)i + 0.2 + 0.6 * ea_rng_double(&g)) / len;
    params(&g, o, &f[i]);
    f[i].netns = o->netns;
  }
  free(kinds);
  *out = f;
  *n = (size_t)len;
  return 0;
}

/* Where a flood comes from: the seed's coin picks 1 or 25 loopback source
 * addresses; with namespaces it is one namespace, one address (flood.c). */
static const char *flood_from(const ea__chaos_fault *f) {
  if (f->netns) return "from one namespace's address";
  return f->fresh ? "from 25 loopback sources" : "from 1 loopback source";
}

void ea__chaos_fault_str(const ea__chaos_fault *f, char *out, size_t cap) {
  const char *k = ea__chaos_kind_name(f->kind);
  const char *back =
      f->fresh ? "then a fresh node replaces it" : "then it restarts on its data dir";
  switch (f->kind) {
    case EA__F_NODE_CRASH:
      snprintf(out, cap, "%s: SIGKILL agent+workers of slot %d; %s", k, f->slot, back);
      break;
    case EA__F_WORKER_KILL:
      snprintf(out, cap, "%s: SIGKILL one worker process of slot %d (its agent restarts it)", k,
               f->slot);
      break;
    case EA__F_CONTROLLER_KILL:
      snprintf(out, cap, "%s: SIGKILL the controller's agent+workers; %s", k, back);
      break;
    case EA__F_PAUSE:
      snprintf(out, cap, "%s: SIGSTOP %s of slot %d for %.1f s, then SIGCONT", k,
               f->whole_node ? "agent+workers" : "the agent only", f->slot, f->dur_ms / 1000.0);
      break;
    case EA__F_DRAIN:
      snprintf(out, cap, "%s: `elastic-agent drain` slot %d from another node; %s", k, f->slot,
               f->fresh ? "then a fresh node joins" : "then it rejoins on its data dir");
      break;
    case EA__F_SIGTERM:
      snprintf(out, cap, "%s: SIGTERM slot %d (spot reclaim); %s", k, f->slot,
               f->fresh ? "then a fresh node joins" : "then it rejoins on its data dir");
      break;
    case EA__F_JOIN:
      snprintf(out, cap, "%s: a new node joins in slot %d, later leaves by %s", k, f->slot,
               f->remove_by_drain ? "drain" : "SIGTERM");
      break;
    case EA__F_ISOLATE:
      snprintf(out, cap, "%s: cut slot %d off from all others for %.1f s, then heal", k, f->slot,
               f->dur_ms / 1000.0);
      break;
    case EA__F_SPLIT: {
      char side[128] = "";
      size_t off = 0;
      for (int s = 1; s < 32 && off < sizeof side - 4; s++)
        if (f->minority & (1u << s))
          off += (size_t)snprintf(side + off, sizeof side - off, "%s%d", off ? "," : "", s);
      snprintf(out, cap, "%s: slots {%s} | the rest for %.1f s, then heal", k, side,
               f->dur_ms / 1000.0);
      break;
    }
    case EA__F_LOSS:
      snprintf(out, cap, "%s: drop %d%% of packets on every node for %.1f s", k, f->loss_pct,
               f->dur_ms / 1000.0);
      break;
    case EA__F_ONEWAY:
      snprintf(out, cap,
               "%s: drop what slot %d sends to its ring neighbour (on the receiver's input) for "
               "%.1f s, then heal",
               k, f->slot, f->dur_ms / 1000.0);
      break;
    case EA__F_CKPT_KILL:
      snprintf(out, cap, "%s: slot %d restarts armed to die at its shard write #%d; %s", k, f->slot,
               f->nth, back);
      break;
    case EA__F_DISK_FULL:
      snprintf(out, cap, "%s: checkpoint file system full for %.1f s, then freed", k,
               f->dur_ms / 1000.0);
      break;
    case EA__F_PREEMPT:
      snprintf(out, cap,
               "%s: spot notices (fake metadata service) to %s, from slot %d; then fresh nodes", k,
               f->whole_node
                   ? "n - min_nodes + 1 nodes at once (a mass preemption: the checkpoint, "
                     "then they leave)"
                   : "one node (a drain)",
               f->slot);
      break;
    case EA__F_SPARE:
      snprintf(out, cap,
               "%s: a spare waits beyond max_nodes; SIGKILL slot %d, the spare takes its place; "
               "it comes back as the spare; the newcomers leave",
               k, f->slot);
      break;
    case EA__F_HTTP_FLOOD:
      snprintf(out, cap,
               "%s: 1000 %s connections (%s) to slot %d's metrics listener for %.1f s; /healthz "
               "must answer within 1 s",
               k, f->whole_node ? "slow" : "idle", flood_from(f), f->slot, f->dur_ms / 1000.0);
      break;
    case EA__F_JOIN_FLOOD:
      snprintf(out, cap,
               "%s: 200 connections reopened as fast as closed (%s) on slot %d's gossip port "
               "while a new node joins through it; later it leaves by %s",
               k, flood_from(f), f->slot, f->remove_by_drain ? "drain" : "SIGTERM");
      break;
    case EA__F_FOREIGN:
      snprintf(out, cap,
               "%s: an agent with another key, --join at the cluster and its checkpoint.dir%s, "
               "for %.1f s, then SIGKILL",
               k, f->fresh ? ", --bootstrap" : "", f->dur_ms / 1000.0);
      break;
    default:
      snprintf(out, cap, "%s", k);
  }
}
