/* main.c — `elastic-chaos`: launch N real agents, break them on a seeded
 * schedule, and prove that training recovered with nothing lost.
 *
 * The phases of a run, each in its own file:
 *   setup (setup.c, net.c)    work dir, job file, network namespaces
 *   calibrate (setup.c)       a throwaway cluster measures steps/s so the
 *                             job is sized to last about --duration
 *   reference (replay.c)      the fault-free W=1 run starts on a thread
 *   execute (run.c,           the cluster, the episodes, online invariants
 *            episode.c)
 *   history (history.c,       the logs: lineage, generations, timings
 *            history_parse.c)
 *   checkpoints (ckcheck.c)   verify, compare with the live state, resume
 *   replay (replay.c)         bit-exact replay of the final history
 *   report (report.c)         JSON, summary, JUnit, SVG
 * Exit status: 0 every invariant held; 1 an invariant was violated (or the
 * run was interrupted); 2 bad usage; 3 the run could not be set up.
 */
#include "chaos.h"

#include "ea_train.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <unistd.h>

/* Faults fire between 5% and 90% of the job, so the job must last at least
 * the schedule's expected length / 0.7 (with a margin) or it would finish
 * before the last fault. */
#define SCHEDULE_SHARE 0.7
/* Final loss vs the W=1 reference: relative difference of the mean over the
 * last 200 steps.  Measured on fault-free runs (docs/chaos.md): summation
 * order alone moves it by up to ~1e-3 over tens of thousands of steps. */
#define DEFAULT_LOSS_TOL 0.02

static void usage(FILE *f, const char *prog) {
  fprintf(
      f,
      "usage: %s [options]\n"
      "Launches N elastic-agent processes on this machine, trains the built-in model (or your "
      "job),\n"
      "injects a seeded schedule of faults, and checks that training recovered with nothing lost.\n"
      "\n"
      "  --agents N           agents (default 5)\n"
      "  --duration D         about how long to run: 90s, 2m, 30m (default 2m)\n"
      "  --seed S             schedule seed (default: random, printed); same seed, same schedule\n"
      "  --config FILE        your job file (default: a built-in small model); the built-in\n"
      "                       trainer or a library-mode program (compute.protocol: library)\n"
      "  --netns              one network namespace per agent (root): real partitions and loss\n"
      "  --faults LIST        kinds to schedule, comma-separated (default: all):\n"
      "                       node-crash worker-kill controller-kill pause drain sigterm join\n"
      "                       foreign isolate split loss oneway (--netns) ckpt-kill disk-full "
      "(checkpoints)\n"
      "                       preempt (spot notices to 1 or n - min_nodes + 1 nodes through a\n"
      "                       fake metadata service) spare (a spare beyond max_nodes takes a\n"
      "                       killed member's place; the built-in job runs max_nodes = N + 1)\n"
      "                       http-flood (1000 connections on a metrics listener; /healthz\n"
      "                       probed) join-flood (a node joins through a flooded gossip port)\n"
      "  --min-faults N       at least N faults (default 10)\n"
      "  --steps N            train.steps (default: calibrated to last about --duration)\n"
      "  --recovery-bound D   a fault must be recovered within D (default: from the config)\n"
      "  --loss-tol X         final loss vs the W=1 reference, relative (default %.2g)\n"
      "  --agent PATH         the elastic-agent binary (default: next to this one)\n"
      "  --work DIR           where the agents' data dirs and logs go (default "
      "/tmp/ea-chaos.XXXXXX)\n"
      "  --out DIR            reports: report.json, summary.txt, timeline.svg (default chaos-out)\n"
      "  --json FILE  --svg FILE  --junit FILE   explicit report paths\n"
      "  --keep               keep the work dir even when everything passed\n"
      "  --no-replay          skip the bit-exact replay of the final history\n"
      "  --dry-run            print the schedule and exit\n"
      "  --recheck WORK       (alone) judge the history invariants again on the logs of a kept\n"
      "                       work dir, starting nothing (after a harness fix)\n"
      "Exit status: 0 every invariant held, 1 a violation, 2 usage, 3 setup failed.\n",
      prog, DEFAULT_LOSS_TOL);
}

static void on_signal(int sig) {
  (void)sig;
  ea__chaos_interrupted = 1;
}

static int parse_u64(const char *s, uint64_t *v) {
  char *e;
  errno = 0;
  unsigned long long x = strtoull(s, &e, 10);
  if (errno || e == s || *e || s[0] == '-') return -1;
  *v = x;
  return 0;
}

static void default_agent(char *out, size_t cap, const char *argv0) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = 0;
  } else {
    snprintf(self, sizeof self, "%s", argv0);
  }
  snprintf(out, cap, "%s/elastic-agent", dirname(self));
}

/* `elastic-chaos --recheck WORK`: the invariants the logs prove (history.c,
 * history_parse.c: each step once, ranks agree, one generation and one
 * plan, generations grow), judged again on the work dir a run kept — after
 * a fix to the harness, or to read a failed run again.  No agent starts;
 * the replay, the reference and the per-fault timings need the run itself. */
static int recheck(const char *work) {
  static ea__chaos_run run;
  ea__chaos_run *r = &run;
  char job[CH_PATH_MAX + 16], e[512];
  snprintf(r->o.work, sizeof r->o.work, "%s", work);
  snprintf(job, sizeof job, "%s/job.yaml", work);
  ea_config_default(&r->cfg);
  if (ea_config_load(&r->cfg, job, e, sizeof e) < 0) {
    fprintf(stderr, "elastic-chaos --recheck: %s (is %s a work dir a run kept?)\n", e, work);
    return 3;
  }
  r->nodes = calloc(CH_MAX_NODES, sizeof *r->nodes);
  DIR *d = opendir(work);
  if (!r->nodes || !d) {
    fprintf(stderr, "elastic-chaos --recheck: %s: %s\n", work, strerror(errno));
    free(r->nodes);
    if (d) closedir(d);
    return 3;
  }
  /* The cluster's nodes: n<slot>[suffix] (the calibration's c<slot> and
   * the foreign fault's strangers are no part of the history). */
  for (struct dirent *x; (x = readdir(d)) && r->nnodes < CH_MAX_NODES;) {
    if (x->d_name[0] != 'n' || !isdigit((unsigned char)x->d_name[1]) ||
        strlen(x->d_name) >= CH_NAME_MAX)
      continue;
    ea__chaos_node *n = &r->nodes[r->nnodes];
    /* The name fits (checked above); a work dir too long for a node's
     * path is said, not truncated. */
    const int nm = (int)sizeof n->name - 1;
    snprintf(n->name, sizeof n->name, "%.*s", nm, x->d_name);
    int dl = snprintf(n->dir, sizeof n->dir, "%s/%.*s", work, nm, x->d_name);
    if (dl < 0 || (size_t)dl >= sizeof n->dir) {
      fprintf(stderr, "elastic-chaos --recheck: %s/%s: path too long\n", work, x->d_name);
      continue;
    }
    n->slot = atoi(x->d_name + 1);
    char log[CH_PATH_MAX + 32];
    for (;; n->starts++) {
      snprintf(log, sizeof log, "%s/agent.%d.log", n->dir, n->starts);
      if (access(log, R_OK) != 0) break;
    }
    if (n->starts) r->nnodes++;
  }
  closedir(d);
  qsort(r->nodes, r->nnodes, sizeof *r->nodes, ea__chaos_cmp_name); /* name first */
  int rc = ea__chaos_history_check(r);
  ea__chaos_histview hv;
  ea__chaos_history_view(r, &hv);
  printf("recheck %s: %zu nodes, %" PRIu64
         " step lines (%.1f MB, %.1f s), %zu generations, final "
         "history %" PRIu64 " steps, %" PRIu64 " computed steps discarded\n",
         work, r->nnodes, hv.records, (double)hv.log_bytes / 1e6, hv.parse_seconds, hv.ngens,
         hv.lineage_steps, hv.orphan_steps);
  printf("RESULT: %s\n", rc == 0 && r->nviol == 0 ? "PASS: the history invariants held" : "FAIL");
  bool ok = rc == 0 && r->nviol == 0;
  ea__chaos_run_free(r);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  /* The preempt fault's server, started by the harness in a namespace. */
  if (argc == 4 && strcmp(argv[1], "--notice-serve") == 0)
    return ea__chaos_notice_serve_main(argv[2], atoi(argv[3]));
  /* The flood faults' helpers (flood.c), started by the harness. */
  if (argc >= 2 && strcmp(argv[1], "--flood") == 0) return ea__chaos_flood_main(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "--http-probe") == 0)
    return ea__chaos_http_probe_main(argc, argv);
  if (argc == 3 && strcmp(argv[1], "--recheck") == 0) return recheck(argv[2]);
  /* The workers run OpenBLAS with the kernels the agent picks for them; the
   * reference and the replay must use the same ones (another kernel sums
   * in another order).  The choice is made when the library loads, so set
   * the variable and start again, as the agent does for its workers. */
  const char *core = ea_train_blas_coretype_hint();
  if (core && !getenv("OPENBLAS_CORETYPE")) {
    setenv("OPENBLAS_CORETYPE", core, 1);
    execv("/proc/self/exe", argv);
  }
  ea_train_blas_threads(1);

  static ea__chaos_run run;
  ea__chaos_run *r = &run;
  ea__chaos_opts *o = &r->o;
  r->ref.first_mismatch = -1; /* no replay has run (a library job runs none) */
  o->nagents = 5;
  o->duration_ms = 120000;
  o->min_faults = 10;
  o->loss_tol = DEFAULT_LOSS_TOL;
  o->kinds = (1u << EA__F_NKINDS) - 1;
  snprintf(o->out, sizeof o->out, "chaos-out");
  default_agent(o->agent_bin, sizeof o->agent_bin, argv[0]);
  bool have_seed = false;
  const char *prog = "elastic-chaos";

  enum {
    O_AGENTS = 256,
    O_DURATION,
    O_SEED,
    O_CONFIG,
    O_NETNS,
    O_FAULTS,
    O_MINF,
    O_STEPS,
    O_BOUND,
    O_TOL,
    O_AGENT,
    O_WORK,
    O_OUT,
    O_JSON,
    O_SVG,
    O_JUNIT,
    O_KEEP,
    O_NOREPLAY,
    O_DRY,
    O_HELP,
    O_VERSION
  };
  static const struct option opts[] = {{"agents", required_argument, 0, O_AGENTS},
                                       {"duration", required_argument, 0, O_DURATION},
                                       {"seed", required_argument, 0, O_SEED},
                                       {"config", required_argument, 0, O_CONFIG},
                                       {"netns", no_argument, 0, O_NETNS},
                                       {"faults", required_argument, 0, O_FAULTS},
                                       {"min-faults", required_argument, 0, O_MINF},
                                       {"steps", required_argument, 0, O_STEPS},
                                       {"recovery-bound", required_argument, 0, O_BOUND},
                                       {"loss-tol", required_argument, 0, O_TOL},
                                       {"agent", required_argument, 0, O_AGENT},
                                       {"work", required_argument, 0, O_WORK},
                                       {"out", required_argument, 0, O_OUT},
                                       {"json", required_argument, 0, O_JSON},
                                       {"svg", required_argument, 0, O_SVG},
                                       {"junit", required_argument, 0, O_JUNIT},
                                       {"keep", no_argument, 0, O_KEEP},
                                       {"no-replay", no_argument, 0, O_NOREPLAY},
                                       {"dry-run", no_argument, 0, O_DRY},
                                       {"help", no_argument, 0, O_HELP},
                                       {"version", no_argument, 0, O_VERSION},
                                       {0, 0, 0, 0}};
  int c;
  uint64_t v;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
      case O_AGENTS:
        if (parse_u64(optarg, &v) || v < 2 || v > CH_MAX_SLOTS - 2) {
          fprintf(stderr, "%s: --agents: expected 2..%d, got '%s'\n", prog, CH_MAX_SLOTS - 2,
                  optarg);
          return 2;
        }
        o->nagents = (int)v;
        break;
      case O_DURATION:
        o->duration_ms = ea__chaos_parse_duration(optarg);
        if (o->duration_ms < 5000) {
          fprintf(stderr,
                  "%s: --duration: expected a duration of at least 5s (90s, 2m, 1h), got '%s'\n",
                  prog, optarg);
          return 2;
        }
        break;
      case O_SEED:
        if (parse_u64(optarg, &o->seed)) {
          fprintf(stderr, "%s: --seed: expected an unsigned integer, got '%s'\n", prog, optarg);
          return 2;
        }
        have_seed = true;
        break;
      case O_CONFIG:
        snprintf(o->config, sizeof o->config, "%s", optarg);
        break;
      case O_NETNS:
        o->netns = true;
        break;
      case O_FAULTS: {
        o->kinds = 0;
        char buf[512];
        snprintf(buf, sizeof buf, "%s", optarg);
        for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
          int k = ea__chaos_kind_parse(t);
          if (k < 0) {
            fprintf(stderr, "%s: --faults: unknown kind '%s' (see --help)\n", prog, t);
            return 2;
          }
          o->kinds |= 1u << k;
        }
        break;
      }
      case O_MINF:
        if (parse_u64(optarg, &v) || v < 1 || v > 100000) {
          fprintf(stderr, "%s: --min-faults: expected 1..100000, got '%s'\n", prog, optarg);
          return 2;
        }
        o->min_faults = (int)v;
        break;
      case O_STEPS:
        if (parse_u64(optarg, &o->steps) || o->steps < 10) {
          fprintf(stderr, "%s: --steps: expected an integer ≥ 10, got '%s'\n", prog, optarg);
          return 2;
        }
        break;
      case O_BOUND:
        o->recovery_bound_ms = ea__chaos_parse_duration(optarg);
        if (o->recovery_bound_ms < 100) {
          fprintf(stderr, "%s: --recovery-bound: expected a duration (20s), got '%s'\n", prog,
                  optarg);
          return 2;
        }
        break;
      case O_TOL: {
        char *e;
        o->loss_tol = strtod(optarg, &e);
        if (*e || !(o->loss_tol > 0)) {
          fprintf(stderr, "%s: --loss-tol: expected a positive number, got '%s'\n", prog, optarg);
          return 2;
        }
        break;
      }
      case O_AGENT:
        snprintf(o->agent_bin, sizeof o->agent_bin, "%s", optarg);
        break;
      case O_WORK:
        if (strlen(optarg) >= 60) {
          /* admin.sock paths under it must fit sun_path (108 bytes) */
          fprintf(stderr, "%s: --work: keep it under 60 characters (got %zu)\n", prog,
                  strlen(optarg));
          return 2;
        }
        snprintf(o->work, sizeof o->work, "%s", optarg);
        break;
      case O_OUT:
        snprintf(o->out, sizeof o->out, "%s", optarg);
        break;
      case O_JSON:
        snprintf(o->json, sizeof o->json, "%s", optarg);
        break;
      case O_SVG:
        snprintf(o->svg, sizeof o->svg, "%s", optarg);
        break;
      case O_JUNIT:
        snprintf(o->junit, sizeof o->junit, "%s", optarg);
        break;
      case O_KEEP:
        o->keep = true;
        break;
      case O_NOREPLAY:
        o->no_replay = true;
        break;
      case O_DRY:
        o->dry_run = true;
        break;
      case O_HELP:
      case 'h':
        usage(stdout, prog);
        return 0;
      case O_VERSION:
        printf("elastic-chaos %s\n", EA_VERSION);
        return 0;
      default:
        usage(stderr, prog);
        return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", prog, argv[optind]);
    return 2;
  }
  if (o->netns && geteuid() != 0) {
    fprintf(stderr, "%s: --netns needs root (it creates network namespaces and nftables rules)\n",
            prog);
    return 2;
  }
  if (!have_seed) {
    if (getrandom(&o->seed, sizeof o->seed, 0) != sizeof o->seed)
      o->seed = (uint64_t)getpid() * 2654435761u;
    o->seed %= 1000000000; /* short enough to retype */
  }
  /* Partitions and loss need namespaces; without them they are left out of
   * the schedule (and reported as skipped) rather than faked. */
  uint32_t sched_kinds = o->kinds;
  if (!o->netns)
    for (int k = 0; k < EA__F_NKINDS; k++)
      if (ea__chaos_kind_needs_netns(k)) sched_kinds &= ~(1u << k);
  if (!sched_kinds) {
    fprintf(stderr, "%s: no fault kind left to schedule (partitions and loss need --netns)\n",
            prog);
    return 2;
  }
  ea__chaos_sched_opts so = {.seed = o->seed,
                             .nagents = o->nagents,
                             .duration_ms = o->duration_ms,
                             .kinds = sched_kinds,
                             .min_faults = o->min_faults,
                             .netns = o->netns};
  int rc = ea__chaos_schedule(&so, &r->sched, &r->nsched);
  if (rc < 0) {
    fprintf(stderr, "%s: cannot build the schedule: %s\n", prog, strerror(-rc));
    return 2;
  }
  printf("elastic-chaos seed %" PRIu64 " (replay: --seed %" PRIu64
         "), %d agents, %s, about %.0f s\n",
         o->seed, o->seed, o->nagents, o->netns ? "network namespaces" : "loopback",
         o->duration_ms / 1000.0);
  printf(
      "schedule (%zu faults; each fires once training passed its fraction and the cluster is "
      "whole):\n",
      r->nsched);
  for (size_t i = 0; i < r->nsched; i++) {
    char d[256];
    ea__chaos_fault_str(&r->sched[i], d, sizeof d);
    printf("  #%-3zu at %4.1f%%  %s\n", i + 1, r->sched[i].frac * 100.0, d);
  }
  if (!o->netns)
    printf(
        "not scheduled: isolate, split, loss (need --netns, as root); packet delay is not "
        "available here "
        "(no sch_netem)\n");
  fflush(stdout);
  if (o->dry_run) {
    free(r->sched);
    return 0;
  }
  if (access(o->agent_bin, X_OK) != 0) {
    fprintf(stderr, "%s: agent binary %s: %s (build it with make, or pass --agent)\n", prog,
            o->agent_bin, strerror(errno));
    free(r->sched);
    return 3;
  }
  r->eps = calloc(r->nsched, sizeof *r->eps);
  if (!r->eps) return 3;
  r->neps = r->nsched;
  for (size_t i = 0; i < r->nsched; i++) {
    r->eps[i].f = r->sched[i];
    r->eps[i].steps_lost = -1;
  }
  bool made_work = false;
  if (!o->work[0]) {
    char tmpl[] = "/tmp/ea-chaos.XXXXXX";
    if (!mkdtemp(tmpl)) {
      fprintf(stderr, "%s: mkdtemp: %s\n", prog, strerror(errno));
      return 3;
    }
    snprintf(o->work, sizeof o->work, "%s", tmpl);
    made_work = true;
  }
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  /* As root, a mount namespace of our own: the tmpfs for the checkpoint
   * dir and the named network namespaces (bind mounts under /run/netns)
   * then live only as long as the harness and its agents, even if the
   * harness is killed before it can clean up. */
  if (geteuid() == 0 && unshare(CLONE_NEWNS) == 0)
    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);

  char err[1024];
  rc = ea__chaos_setup(r, err, sizeof err);
  if (rc < 0) {
    fprintf(stderr, "%s: setup: %s\n", prog, err);
    ea__chaos_teardown(r);
    ea__chaos_run_free(r);
    return 3;
  }
  printf("work dir %s; job %s%s\n", o->work, r->job_path,
         r->tmpfs_ckpt ? " (checkpoints on a tmpfs)" : "");
  if (o->steps) {
    r->target_steps = o->steps;
  } else {
    printf("calibrating: %d agents, a few seconds of fault-free training ...\n", o->nagents);
    fflush(stdout);
    double rate;
    rc = ea__chaos_calibrate(r, &rate, err, sizeof err);
    if (rc < 0 || rate <= 0) {
      fprintf(stderr, "%s: %s\n", prog, rc < 0 ? err : "calibration measured no progress");
      ea__chaos_teardown(r);
      ea__chaos_run_free(r);
      return 3;
    }
    r->calib_rate = rate;
    /* Size the job: about --duration of training, and never shorter than
     * the schedule needs (each episode's expected length: the fault, the
     * detection, taking the node back — a crashed node that rejoins on its
     * old identity sits out one rendezvous timeout first). */
    double train_s = (double)o->duration_ms / 1000.0 - 10.0;
    if (train_s < 5) train_s = 5;
    double need_s = 0, rdzv = r->cfg.runtime.rendezvous_timeout_seconds,
           back = r->cfg.distributed.scale_up_delay_ms / 1000.0 + 1.5;
    double interval =
        r->cfg.checkpoint.save_interval_steps ? r->cfg.checkpoint.save_interval_steps / rate : 1;
    for (size_t i = 0; i < r->nsched; i++) {
      const ea__chaos_fault *f = &r->sched[i];
      if (ea__chaos_kind_needs_ckpt(f->kind) && !r->ckpt_available) continue;
      double est = 2.5 + f->dur_ms / 1000.0;
      switch (f->kind) {
        case EA__F_NODE_CRASH:
        case EA__F_CONTROLLER_KILL:
        case EA__F_CKPT_KILL:
          est += f->fresh ? back : rdzv + 1.5;
          if (f->kind == EA__F_CKPT_KILL) est += back + interval * (f->nth + 1);
          break;
        case EA__F_WORKER_KILL:
          est = 1;
          break;
        case EA__F_DISK_FULL:
          est += 2 * interval;
          break;
        case EA__F_SPARE: /* fill, a spare, the loss, back, swap, restored */
          est += 5 * back;
          break;
        case EA__F_ONEWAY: /* the receiver is held out, twice if the link still fails */
          est += back + 2.0 * r->cfg.runtime.flap_cooldown_seconds;
          break;
        default:
          est += back;
      }
      need_s += est;
    }
    need_s /= SCHEDULE_SHARE;
    r->target_steps = (uint64_t)(rate * (need_s > train_s ? need_s : train_s));
    if (r->target_steps < 200) r->target_steps = 200;
    printf(
        "calibrated: %.0f steps/s with %d agents; the schedule needs about %.0f s of training → "
        "train.steps = "
        "%" PRIu64 "\n",
        rate, o->nagents, need_s, r->target_steps);
  }
  char steps[32], e2[256];
  snprintf(steps, sizeof steps, "%" PRIu64, r->target_steps);
  ea_config_set(&r->cfg, "train.steps", steps, e2, sizeof e2);
  /* The W=1 reference and the replay are the built-in trainer's: there is
   * no model of a library program to run (its history is still judged). */
  if (!r->library && ea__chaos_reference_start(r) < 0)
    fprintf(stderr, "%s: cannot start the reference thread\n", prog);
  ea__chaos_execute(r);
  ea__chaos_say(r, "reading the agents' logs ...");
  ea__chaos_history_check(r);
  ea__chaos_spare_check(r);
  ea__chaos_rsrc_check(r);
  ea__chaos_ckpt_final(r);
  ea__chaos_teardown(r);
  if (!ea__chaos_interrupted && !r->library) {
    ea__chaos_say(r, "replaying the final history and comparing with the reference ...");
    ea__chaos_replay_check(r);
  } else {
    ea__chaos_reference_join(r);
  }
  if (!ea__chaos_interrupted && r->injected < o->min_faults)
    ea__chaos_violate(r, EA__I_COVERAGE, "%d faults injected, fewer than --min-faults %d",
                      r->injected, o->min_faults);
  if (!r->t_end) r->t_end = ea__chaos_now_ms();
  ea__chaos_report(r);
  bool ok = ea__chaos_all_ok(r);
  if (ok && !o->keep && made_work) {
    ea__chaos_rmrf(o->work);
  } else {
    printf("agents' logs and data kept in %s\n", o->work);
  }
  printf("RESULT: %s (seed %" PRIu64 ")\n",
         ok                      ? "PASS: every invariant held"
         : ea__chaos_interrupted ? "FAIL: interrupted, so not every invariant could be judged"
                                 : "FAIL",
         o->seed);
  ea__chaos_run_free(r);
  return ok ? 0 : 1;
}
