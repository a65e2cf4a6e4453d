/* gossip — how fast the SWIM + Lifeguard core spreads a join and a death, how
 * often it is wrong under loss, and what it costs, at 100, 1000 and 5000
 * nodes in the deterministic simulator (tests/sim/sim.c) with the default
 * configuration; beside it, the expected detection time of memberlist's LAN
 * defaults and of the SWIM paper's protocol for the same N, computed from
 * their parameters (formulas below).
 *
 *   build/bench/gossip            N = 100, 1000, 5000
 *   build/bench/gossip --quick    N = 100, 1000, shorter loss runs
 *   build/bench/gossip --full     every loss run 10 simulated minutes (slow: see below)
 *   build/bench/gossip --n 1000 --windows 0,600
 *                                 one N only; loss windows {5%, 20%} in simulated
 *                                 seconds (0 skips that window)
 *   build/bench/gossip --crashes 30   crashes per N (default 10, 5 at N = 5000)
 *   build/bench/gossip --loss-only    skip the quiet minute, the join and the
 *                                     crashes (loss runs only)
 *   build/bench/gossip --trace        print each false DEAD as it happens: the
 *                                     view, the member, its own incarnation,
 *                                     how many views suspect it and since when
 *   EA_SEED=…                     replay
 *
 * Per N, one simulated cluster (struct-copy mode: messages are not encoded,
 * but their bytes are counted with the codec's exact sizes; push-pull bytes
 * are counted separately as TCP):
 *   1. bootstrap to a converged view, then 60 s quiet: steady-state traffic;
 *   2. a new node joins through a random member: time until 99% and 100% of
 *      the members hold it ALIVE;
 *   3. several crashes, one at a time: time to the first SUSPECT, the first
 *      DEAD, DEAD in 99% and in 100% of the views;
 *   4. a window at 5% and one at 20% packet loss: live members declared
 *      DEAD (false positives), suspicions, traffic.  Ten simulated minutes
 *      each, except where that would take the simulator more than about a
 *      minute: loss makes members suspect each other, every suspicion and
 *      refutation is gossiped to all N, and the simulator pays for each of
 *      those packets (at 20% loss and 1000 nodes, ~70 packets per node per
 *      second, ~0.6 s of CPU per simulated second).  The window used is
 *      printed; --full runs them all for ten minutes;
 *   and the wall-clock and CPU time of each phase.  A benchmark reports; it
 *   asserts nothing.
 */
#include "sim.h"
#include "ea_membership.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double wall_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- what the observer tracks ------------------------------------------ */

typedef struct {
  ea_sim *sim;
  size_t n;
  long target;   /* node being joined or crashed, -1 none */
  uint8_t *seen; /* per observer: has the event about target happened */
  size_t nseen;
  int want_state; /* ALIVE for a join, DEAD for a crash */
  uint64_t first_suspect, first_dead;
  uint8_t *crashed;    /* per node: crashed on purpose (a DEAD about it is true) */
  uint8_t *false_dead; /* per node: declared DEAD by someone while alive */
  uint64_t false_events;
  /* --trace: per node, how many views hold it SUSPECT now and since when */
  uint32_t *nsusp;
  uint64_t *susp_since;
} watch;

static bool trace; /* --trace */

static void on_change(void *ctx, size_t obs, const ea_member *m, uint8_t old, uint64_t now) {
  (void)old;
  watch *w = ctx;
  long t = ea_sim_index_of(w->sim, &m->id);
  if (t < 0) return;
  if (trace) {
    if (m->state == EA_STATE_SUSPECT && old != EA_STATE_SUSPECT && w->nsusp[t]++ == 0)
      w->susp_since[t] = now;
    if (old == EA_STATE_SUSPECT && m->state != EA_STATE_SUSPECT && w->nsusp[t]) w->nsusp[t]--;
  }
  if (m->state == EA_STATE_DEAD && !w->crashed[t]) {
    w->false_events++;
    w->false_dead[t] = 1;
    if (trace) {
      uint32_t own = 0;
      if (ea_sim_core(w->sim, (size_t)t))
        ea__swim_state_of(ea_sim_core(w->sim, (size_t)t), ea_sim_id(w->sim, (size_t)t), &own);
      ea_swim_stats st;
      ea_swim_stats_get(ea_sim_core(w->sim, obs), &st);
      printf("trace: t=%" PRIu64 " ms: view %zu (health %" PRIu32
             ") holds live %ld DEAD at "
             "incarnation %" PRIu32 " (its own: %" PRIu32 "); %" PRIu32
             " other view(s) suspect it, the first since %" PRIu64 " ms ago\n",
             now, obs, st.health, t, m->incarnation, own, w->nsusp[t],
             w->nsusp[t] || old == EA_STATE_SUSPECT ? now - w->susp_since[t] : 0);
    }
  }
  if (t != w->target || (long)obs == w->target) return;
  if (m->state == EA_STATE_SUSPECT && !w->first_suspect) w->first_suspect = now;
  if (m->state == EA_STATE_DEAD && !w->first_dead) w->first_dead = now;
  if (m->state == w->want_state && !w->seen[obs]) {
    w->seen[obs] = 1;
    w->nseen++;
  }
}

static void watch_target(watch *w, long target, int state) {
  w->target = target;
  w->want_state = state;
  memset(w->seen, 0, w->n);
  w->nseen = 0;
  w->first_suspect = w->first_dead = 0;
}

typedef struct {
  watch *w;
  size_t need;
} need_ctx;

static bool reached(ea_sim *sim, void *ctx) {
  (void)sim;
  const need_ctx *c = ctx;
  return c->w->nseen >= c->need;
}

/* Run until `need` observers saw the event; returns the time, or 0. */
static uint64_t until_seen(ea_sim *sim, watch *w, size_t need, uint64_t deadline) {
  need_ctx c = {w, need};
  return ea_sim_run_until_cond(sim, deadline, 1, reached, &c) ? ea_sim_now(sim) : 0;
}

static size_t up_count(ea_sim *sim) {
  size_t k = 0;
  for (size_t i = 0; i < ea_sim_size(sim); i++) k += ea_sim_is_up(sim, i);
  return k;
}

/* ---- results ------------------------------------------------------------- */

#define MAX_CRASH 64

typedef struct {
  size_t n;
  double boot_wall, boot_cpu;
  double quiet_pkts, quiet_bytes, quiet_pp; /* per node per second */
  double join99, join100;                   /* ms */
  int ncrash;
  double susp[MAX_CRASH], dead1[MAX_CRASH], dead99[MAX_CRASH], dead100[MAX_CRASH];
  struct {
    double loss, window_s;
    uint64_t false_members, false_events, suspicions, refutations;
    double upd; /* updates sent per node per second */
    double pkts, bytes, pp;
    double wall, cpu;
  } lossrun[2];
  double total_wall, total_cpu;
} result;

static bool loss_only; /* --loss-only */

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of k values. */
static double pct(const double *v, int k, double p) {
  double s[MAX_CRASH];
  if (k <= 0) return NAN;
  memcpy(s, v, (size_t)k * sizeof *s);
  qsort(s, (size_t)k, sizeof *s, cmp_d);
  int r = (int)ceil(p * k) - 1;
  if (r < 0) r = 0;
  return s[r];
}

static void traffic(ea_sim *sim, const ea_sim_stats *a, const ea_sim_stats *b, double secs,
                    double *pkts, double *bytes, double *pp) {
  double n = (double)up_count(sim);
  *pkts = (double)(b->packets_sent - a->packets_sent) / n / secs;
  *bytes = (double)(b->bytes_sent - a->bytes_sent) / n / secs;
  *pp = (double)(b->sync_bytes - a->sync_bytes) / n / secs;
}

/* Sums over every core: suspicions raised, refutations, updates sent. */
typedef struct {
  uint64_t suspicions, refutations, updates;
} totals;

static totals totals_get(ea_sim *sim) {
  totals t = {0, 0, 0};
  for (size_t i = 0; i < ea_sim_size(sim); i++) {
    if (!ea_sim_core(sim, i)) continue;
    ea_swim_stats st;
    ea_swim_stats_get(ea_sim_core(sim, i), &st);
    t.suspicions += st.suspicions;
    t.refutations += st.refutations;
    t.updates += st.updates_sent;
  }
  return t;
}

static void run_n(size_t n, uint64_t seed, int ncrash, const uint64_t loss_ms[2], result *r) {
  memset(r, 0, sizeof *r);
  r->n = n;
  double w0 = wall_s(), c0 = cpu_s();
  ea_sim_config cfg;
  ea_sim_config_default(&cfg, n + 1, seed ^ n);
  cfg.codec = false; /* bytes still counted exactly */
  ea_sim *sim = ea_sim_new(&cfg);
  if (!sim) {
    fprintf(stderr, "gossip: out of memory at N=%zu\n", n);
    exit(1);
  }
  size_t joiner = n; /* node n stays out until the join phase */
  ea_sim_crash(sim, joiner);
  ea_sim_bootstrap(sim);
  r->boot_wall = wall_s() - w0;
  r->boot_cpu = cpu_s() - c0;

  watch w = {.sim = sim, .n = n + 1, .target = -1};
  w.seen = calloc(n + 1, 1);
  w.crashed = calloc(n + 1, 1);
  w.false_dead = calloc(n + 1, 1);
  w.nsusp = calloc(n + 1, sizeof *w.nsusp);
  w.susp_since = calloc(n + 1, sizeof *w.susp_since);
  w.crashed[joiner] = 1;
  ea_sim_set_observer(sim, on_change, &w);
  uint64_t rs = seed ^ 0x5eed;

  /* 1. steady state */
  ea_sim_run_for(sim, 5000);
  ea_sim_stats a, b;
  if (loss_only) goto loss;
  ea_sim_stats_get(sim, &a);
  ea_sim_run_for(sim, 60000);
  ea_sim_stats_get(sim, &b);
  traffic(sim, &a, &b, 60.0, &r->quiet_pkts, &r->quiet_bytes, &r->quiet_pp);

  /* 2. a join */
  w.crashed[joiner] = 0;
  watch_target(&w, (long)joiner, EA_STATE_ALIVE);
  uint64_t tj = ea_sim_now(sim);
  ea_sim_restart(sim, joiner, (size_t)(rs % n));
  uint64_t t99 = until_seen(sim, &w, (size_t)ceil(0.99 * n), tj + 600000);
  uint64_t t100 = until_seen(sim, &w, n, tj + 600000);
  r->join99 = t99 ? (double)(t99 - tj) : NAN;
  r->join100 = t100 ? (double)(t100 - tj) : NAN;
  ea_sim_run_for(sim, 5000);

  /* 3. crashes, one at a time, at different phases of the probe interval */
  for (int k = 0; k < ncrash && k < MAX_CRASH; k++) {
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    size_t v = (size_t)((rs >> 33) % n);
    if (w.crashed[v] || !ea_sim_is_up(sim, v)) continue;
    ea_sim_run_for(sim, 1 + (rs >> 20) % 997);
    size_t others = up_count(sim) - 1;
    watch_target(&w, (long)v, EA_STATE_DEAD);
    w.crashed[v] = 1;
    uint64_t tc = ea_sim_now(sim);
    ea_sim_crash(sim, v);
    uint64_t d99 = until_seen(sim, &w, (size_t)ceil(0.99 * others), tc + 60000);
    uint64_t d100 = until_seen(sim, &w, others, tc + 60000);
    int i = r->ncrash++;
    r->susp[i] = w.first_suspect ? (double)(w.first_suspect - tc) : NAN;
    r->dead1[i] = w.first_dead ? (double)(w.first_dead - tc) : NAN;
    r->dead99[i] = d99 ? (double)(d99 - tc) : NAN;
    r->dead100[i] = d100 ? (double)(d100 - tc) : NAN;
    ea_sim_run_for(sim, 2000);
  }
  watch_target(&w, -1, -1);

  /* 4. loss */
loss:
  double losses[2] = {0.05, 0.20};
  for (int li = 0; li < 2; li++) {
    r->lossrun[li].loss = losses[li];
    if (!loss_ms[li]) continue; /* skipped (--windows) */
    memset(w.false_dead, 0, n + 1);
    w.false_events = 0;
    totals t0 = totals_get(sim);
    double lw = wall_s(), lc = cpu_s();
    ea_sim_set_loss(sim, losses[li]);
    ea_sim_stats_get(sim, &a);
    ea_sim_run_for(sim, loss_ms[li]);
    ea_sim_stats_get(sim, &b);
    r->lossrun[li].wall = wall_s() - lw;
    r->lossrun[li].cpu = cpu_s() - lc;
    r->lossrun[li].loss = losses[li];
    traffic(sim, &a, &b, (double)loss_ms[li] / 1000.0, &r->lossrun[li].pkts, &r->lossrun[li].bytes,
            &r->lossrun[li].pp);
    r->lossrun[li].window_s = (double)loss_ms[li] / 1000.0;
    for (size_t i = 0; i <= n; i++) r->lossrun[li].false_members += w.false_dead[i];
    r->lossrun[li].false_events = w.false_events;
    totals t1 = totals_get(sim);
    r->lossrun[li].suspicions = t1.suspicions - t0.suspicions;
    r->lossrun[li].refutations = t1.refutations - t0.refutations;
    r->lossrun[li].upd =
        (double)(t1.updates - t0.updates) / (double)up_count(sim) / ((double)loss_ms[li] / 1000.0);
    ea_sim_set_loss(sim, 0);
    ea_sim_run_for(sim, 20000); /* let refutations settle before the next run */
  }
  ea_sim_set_observer(sim, NULL, NULL);
  ea_sim_free(sim);
  free(w.seen);
  free(w.crashed);
  free(w.false_dead);
  free(w.nsusp);
  free(w.susp_since);
  r->total_wall = wall_s() - w0;
  r->total_cpu = cpu_s() - c0;
}

/* ---- expected detection from the parameters ------------------------------
 *
 * One model for all three, so that the columns differ only by protocol and
 * parameters (d = one-way delay, 5 ms here):
 *
 *   E[crash → DEAD everywhere] = I·e/(e−1)                 first detection
 *                              + T_susp                    suspicion
 *                              + R(N)·(G + d)              spreading DEAD
 *
 *   I·e/(e−1): SWIM paper, §3.1 — each protocol period every live member
 *     probes a random member, so a crashed one is first probed (and found
 *     failed at the end of that period) after 1/(1 − e^(−q_f)) periods in
 *     expectation, q_f ≈ 1 the fraction of live members.
 *   T_susp: Lifeguard/memberlist — min = α·log10(max(N,10))·I, which the
 *     timer reaches once K = α − 2 independent suspicions arrive; with about
 *     one new prober per interval they arrive well within min, so T_susp = min.
 *     The SWIM paper's base protocol has no suspicion: T_susp = 0 (and every
 *     lost ping-req round is a false death).
 *   R(N) = ⌈log_{g+1} N + ln N / g⌉ rounds of push gossip with fanout g
 *     (Pittel); memberlist gossips to g = 3 members every G = 200 ms; the
 *     SWIM paper piggybacks on its pings only, one message per period:
 *     g = 1, G = I.
 *
 *   memberlist DefaultLANConfig: I = 1 s, α = 4 (β = 6), G = 200 ms, g = 3.
 *   SWIM paper: shown with our I (150 ms), to isolate the protocol.       */

static double rounds(double n, double g) {
  return ceil(log(n) / log(g + 1) + log(n) / g);
}

static double expect_ms(double n, double I, double alpha, double G, double g, double d) {
  double tsusp = alpha > 0 ? floor(alpha * log10(n > 10 ? n : 10) * I) : 0;
  return I * M_E / (M_E - 1) + tsusp + rounds(n, g) * (G + d);
}

static void fmt_ms(char *out, size_t cap, double ms) {
  if (isnan(ms))
    snprintf(out, cap, "   n/a");
  else if (ms >= 10000)
    snprintf(out, cap, "%5.1fs", ms / 1000);
  else
    snprintf(out, cap, "%6.0f", ms);
}

int main(int argc, char **argv) {
  bool quick = false, full = false;
  size_t only_n = 0;
  int crashes = 0;
  long win_set[2] = {-1, -1}; /* simulated seconds, -1: the default */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (strcmp(argv[i], "--full") == 0)
      full = true;
    else if (strcmp(argv[i], "--loss-only") == 0)
      loss_only = true;
    else if (strcmp(argv[i], "--trace") == 0)
      trace = true;
    else if (strcmp(argv[i], "--crashes") == 0 && i + 1 < argc)
      crashes = atoi(argv[++i]);
    else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
      only_n = (size_t)strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--windows") == 0 && i + 1 < argc &&
             sscanf(argv[i + 1], "%ld,%ld", &win_set[0], &win_set[1]) == 2 && win_set[0] >= 0 &&
             win_set[1] >= 0)
      i++;
    else {
      fprintf(stderr,
              "usage: %s [--quick | --full] [--n N] [--windows S5,S20] [--crashes K] [--loss-only] "
              "[--trace]\n",
              argv[0]);
      return 2;
    }
  }
  /* 5000 simulated cores are a 2 GB working set touched at random: most of
   * the simulator's time is TLB and cache misses.  Transparent huge pages
   * (glibc's malloc tunable, madvise mode on this kernel) cut it by about a
   * third; re-exec once with them asked for. */
  if (!getenv("GLIBC_TUNABLES")) {
    setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1", 1);
    execv("/proc/self/exe", argv);
    unsetenv("GLIBC_TUNABLES"); /* no /proc: run without */
  }
  uint64_t seed = ea_sim_env_seed();
  size_t ns_full[] = {100, 1000, 5000}, ns_quick[] = {100, 1000};
  size_t *ns = quick ? ns_quick : ns_full;
  int nn = quick ? 2 : 3;
  if (only_n) {
    ns_quick[0] = only_n;
    ns = ns_quick;
    nn = 1;
  }
  /* Loss windows {5%, 20%} in simulated ms, per N (see the header). */
  const uint64_t ten = 600000;
  uint64_t win_full[3][2] = {{ten, ten}, {ten, 60000}, {60000, 10000}};
  uint64_t win_quick[3][2] = {{120000, 120000}, {60000, 20000}, {0, 0}};
  ea_swim_config c;
  ea_swim_config_default(&c);
  printf(
      "gossip: SWIM + Lifeguard in the simulator, default config (probe %u ms, timeout %u ms, "
      "k=%u, suspicion %u×/%u×, retransmit %u, gossip %u ms × %u, push-pull %u s); "
      "delay 1–5 ms; seed %" PRIu64 " (EA_SEED=%" PRIu64 " replays)\n\n",
      c.probe_interval_ms, c.probe_timeout_ms, c.indirect_checks, c.suspicion_mult,
      c.suspicion_max_mult, c.retransmit_mult, c.gossip_interval_ms, c.gossip_nodes,
      c.push_pull_interval_ms / 1000, seed, seed);
  fflush(stdout);

  result res[3];
  for (int i = 0; i < nn; i++) {
    int ncrash = crashes > 0 ? crashes : ns[i] >= 5000 ? 5 : 10;
    int wi = only_n ? (only_n >= 5000 ? 2 : only_n >= 1000 ? 1 : 0) : i;
    uint64_t w[2] = {full ? ten : (quick ? win_quick : win_full)[wi][0],
                     full ? ten : (quick ? win_quick : win_full)[wi][1]};
    for (int k = 0; k < 2; k++)
      if (win_set[k] >= 0) w[k] = (uint64_t)win_set[k] * 1000;
    run_n(ns[i], seed, ncrash, w, &res[i]);
    fprintf(stderr, "  N=%zu done in %.1f s wall, %.1f s cpu\n", ns[i], res[i].total_wall,
            res[i].total_cpu);
  }

  double I = c.probe_interval_ms;
  printf("Dissemination and detection (virtual ms; periods = ms / probe interval)\n");
  printf("%6s | %14s %14s | %15s %15s %15s %15s\n", "N", "join 99%", "join 100%", "suspect p50/p99",
         "1st dead p50/99", "dead 99% p50/99", "dead all p50/99");
  for (int i = 0; i < nn; i++) {
    result *r = &res[i];
    char a[16], b[16], s1[16], s2[16], d1[16], d2[16], e1[16], e2[16], f1[16], f2[16];
    fmt_ms(a, sizeof a, r->join99);
    fmt_ms(b, sizeof b, r->join100);
    fmt_ms(s1, sizeof s1, pct(r->susp, r->ncrash, 0.5));
    fmt_ms(s2, sizeof s2, pct(r->susp, r->ncrash, 0.99));
    fmt_ms(d1, sizeof d1, pct(r->dead1, r->ncrash, 0.5));
    fmt_ms(d2, sizeof d2, pct(r->dead1, r->ncrash, 0.99));
    fmt_ms(e1, sizeof e1, pct(r->dead99, r->ncrash, 0.5));
    fmt_ms(e2, sizeof e2, pct(r->dead99, r->ncrash, 0.99));
    fmt_ms(f1, sizeof f1, pct(r->dead100, r->ncrash, 0.5));
    fmt_ms(f2, sizeof f2, pct(r->dead100, r->ncrash, 0.99));
    printf("%6zu | %s (%4.1f) %s (%4.1f) | %s/%s %s/%s %s/%s %s/%s   (%d crashes)\n", r->n, a,
           r->join99 / I, b, r->join100 / I, s1, s2, d1, d2, e1, e2, f1, f2, r->ncrash);
  }
  printf("\nExpected crash → DEAD everywhere, from the parameters (formulas in bench/gossip.c)\n");
  printf("%6s | %12s %12s | %14s | %16s | %12s\n", "N", "ours exp.", "ours bound", "memberlist LAN",
         "SWIM paper (I=150)", "ours measured");
  for (int i = 0; i < nn; i++) {
    double n = (double)res[i].n;
    ea_sim_bound bd;
    ea_sim_detect_bound(&c, res[i].n, 1e-3, 5, &bd);
    double ml = expect_ms(n, 1000, 4, 200, 3, 5);
    double sw = expect_ms(n, I, 0, I, 1, 5);
    char a[16], b[16], m[16], s[16], o[16];
    fmt_ms(a, sizeof a, bd.expected_ms);
    fmt_ms(b, sizeof b, bd.total_ms);
    fmt_ms(m, sizeof m, ml);
    fmt_ms(s, sizeof s, sw);
    fmt_ms(o, sizeof o, pct(res[i].dead100, res[i].ncrash, 0.5));
    printf("%6zu | %12s %12s | %14s | %16s | %12s\n", res[i].n, a, b, m, s, o);
  }
  printf(
      "  (ours bound: probability ≥ 1 − 1e-3; SWIM paper base protocol has no suspicion, so it\n"
      "   is fast and declares every member whose probe round is lost dead)\n");

  printf("\nFalse DEAD under loss, traffic per node per second, cost of the simulation\n");
  printf("%6s %5s %6s | %8s %8s %10s %10s | %8s %8s %9s %10s | %8s %8s\n", "N", "loss", "sim s",
         "suspect", "refute", "false DEAD", "(views)", "pkts/s", "upd/s", "UDP B/s", "TCP pp B/s",
         "wall s", "cpu s");
  for (int i = 0; i < nn; i++) {
    result *r = &res[i];
    if (!loss_only)
      printf(
          "%6zu %5s %6d | %8s %8s %10s %10s | %8.1f %8s %9.0f %10.0f | %8.1f %8.1f  (bootstrap)\n",
          r->n, "0%", 60, "-", "-", "-", "-", r->quiet_pkts, "-", r->quiet_bytes, r->quiet_pp,
          r->boot_wall, r->boot_cpu);
    for (int li = 0; li < 2; li++) {
      if (r->lossrun[li].window_s == 0) continue;
      char l[8];
      snprintf(l, sizeof l, "%.0f%%", r->lossrun[li].loss * 100);
      printf("%6zu %5s %6.0f | %8" PRIu64 " %8" PRIu64 " %10" PRIu64 " %10" PRIu64
             " | %8.1f %8.0f %9.0f %10.0f | %8.1f %8.1f\n",
             r->n, l, r->lossrun[li].window_s, r->lossrun[li].suspicions,
             r->lossrun[li].refutations, r->lossrun[li].false_members, r->lossrun[li].false_events,
             r->lossrun[li].pkts, r->lossrun[li].upd, r->lossrun[li].bytes, r->lossrun[li].pp,
             r->lossrun[li].wall, r->lossrun[li].cpu);
    }
    printf("%6zu %5s %6s | %8s %8s %10s %10s | %8s %8s %9s %10s | %8.1f %8.1f  (whole N)\n", r->n,
           "", "", "", "", "", "", "", "", "", "", r->total_wall, r->total_cpu);
  }
  printf(
      "  suspect: suspicions raised; refute: refutations; false DEAD: live members declared\n"
      "  dead (views: DEAD transitions about them); pkts/s, upd/s (updates piggybacked) and\n"
      "  UDP B/s: sent, before loss; TCP pp: push-pull.\n");
  return 0;
}
