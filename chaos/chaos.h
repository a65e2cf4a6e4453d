/* chaos.h — internal to chaos/: the pieces of `elastic-chaos`, the harness
 * that launches real agents, injects a seeded schedule of faults and proves
 * from their status and logs that training recovered with nothing lost.
 *
 *   main.c      command line, phases of a run, exit status
 *   util.c      clock, XML escaping, files, child commands
 *   status.c    one `status` over an agent's admin socket, parsed (jansson)
 *   proc.c      agent processes: spawn (own session, optional netns), signal,
 *               reap, find their workers
 *   net.c       network namespaces, veth + bridge, nftables partitions/loss
 *   schedule.c  the seeded fault schedule
 *   run.c       the cluster, polling and the invariants checked while it runs,
 *               what "formed" means, the run
 *   episode.c   the fault episodes: inject, degraded, heal, restore, settle
 *   setup.c     work dir, job file, network, the calibration cluster
 *   history_parse.c  the agents' logs read into the per-step history
 *               (history_int.h), with the invariants one agent's lines prove
 *   history.c   the history judged: lineage, generations, the invariants
 *               checked after the run, recovery timings
 *   replay.c    the reference runs in-process (W=1, and an exact replay of
 *               the world sizes the cluster went through)
 *   ckcheck.c   checkpoint verification and resume checks
 *   report.c    JSON, human summary, JUnit XML, SVG timeline
 *   preempt.c   the preempt fault: notices through the fake metadata server
 *   spare.c     the spare-churn episode and the spare_world_held invariant
 *   flood.c     the http-flood and join-flood faults (--flood, --http-probe)
 *   resources.c the agents' RSS and fds sampled, flat-resource invariant
 *
 * Everything runs on one thread except the W=1 reference, which trains on a
 * thread of its own at the lowest priority while the cluster runs.
 * Ownership: an ea__chaos_run owns every node, episode and violation; arrays
 * grow with realloc and are freed by ea__chaos_run_free.  Times are wall-clock
 * milliseconds since the epoch (CLOCK_REALTIME), because the agents' log
 * lines carry wall-clock stamps and the two must be compared.
 */
#ifndef EA_CHAOS_H
#define EA_CHAOS_H

#include "ea_config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ea_base.h"
#include <stdio.h>
#include <sys/types.h>

/* Slots are network positions (a namespace and an address each); 5 agents
 * plus two slots for newcomers (a joiner's or a stranger's, and a spare's)
 * is the default, 29 agents is far above what one 2-core machine can run. */
#define CH_MAX_SLOTS 31
/* Node identities over a run: a fresh replacement gets a new name; a 30 m
 * soak replaces roughly one node a minute. */
#define CH_MAX_NODES 512
#define CH_NAME_MAX 24
#define CH_PATH_MAX 512
/* The work dir is kept short: admin socket paths under it must fit
 * sun_path (108 bytes), and every derived path must fit CH_PATH_MAX. */
#define CH_WORK_MAX 200
#define CH_MAX_WPN 8 /* workers per node the harness tracks */

/* ---- util.c --------------------------------------------------------------- */

int64_t ea__chaos_now_ms(void);  /* CLOCK_REALTIME, ms */
int64_t ea__chaos_mono_ms(void); /* CLOCK_MONOTONIC, ms */
/* A path that executes this very binary from a fork of this process
 * (/proc/self/exe: still this binary after a rebuild replaced the file);
 * 0 or -errno. */
int ea__chaos_self_exe(char *out, size_t cap);
void ea__chaos_sleep_ms(int ms);
/* "2026-11-30T01:45:26.978Z" (the first len bytes of s) → epoch ms; -1 if
 * malformed. */
int64_t ea__chaos_parse_ts(const char *s, size_t len);
void ea__chaos_fmt_ts(int64_t ms, char *out, size_t cap); /* HH:MM:SS.mmm */
/* "90", "90s", "2m", "1h30m", "1500ms" → milliseconds; -1 if malformed. */
int64_t ea__chaos_parse_duration(const char *s);

/* Random numbers are base's ea_rng (ea_base.h): a schedule's stream k is
 * ea_rng_seed(seed, k, EA_RNG_CHAOS_INDEX), so it replays from its seed. */

int ea__chaos_mkdirs(const char *path, int mode);
int ea__chaos_rmrf(const char *path);
int ea__chaos_write_file(const char *path, const char *data, size_t len);
/* Whole file into a malloc'd NUL-terminated buffer. */
int ea__chaos_read_file(const char *path, char **out, size_t *len);

/* Runs argv (PATH search), optionally inside network namespace ns (NULL:
 * ours), with stdout+stderr appended to log (NULL: /dev/null), waits at most
 * timeout_ms.  Returns the exit status (0..255), 128+signal, or a negative
 * errno (-ETIMEDOUT after killing it).  out (may be NULL) receives up to cap-1
 * bytes of its stdout. */
int ea__chaos_cmd(const char *ns, char *const argv[], const char *log, int timeout_ms, char *out,
                  size_t cap);

/* Strings are base's ea_sb (ea_base.h); XML text/attribute escaping: */
void ea__chaos_xml_str(ea_sb *s, const char *t);

/* ---- status.c ------------------------------------------------------------- */

typedef struct {
  int pid;
  char state[16];
  uint64_t gen, step; /* step = completed steps (next step to compute) */
  char digest[20];
  uint32_t restarts;
} ea__chaos_wstat;

typedef struct {
  bool ok;
  char err[160];
  int64_t t_ms;
  char name[CH_NAME_MAX];
  char gossip[64];
  char metrics[64];     /* self.metrics: HOST:PORT of the metrics listener, "" none */
  char phase[16];       /* generation.phase */
  char agent_phase[16]; /* generation.agent_phase */
  uint64_t gen;         /* generation.gen (u64 of the running one) */
  uint32_t world;
  uint32_t nnodes;
  char nodes[CH_MAX_SLOTS * 2][CH_NAME_MAX];
  uint64_t last_step;
  bool controller, has_quorum;
  uint64_t accepted, durable, formed; /* u64 forms of "T/ctrl" */
  char ctrl_name[CH_NAME_MAX];
  uint32_t alive, suspect, dead, left;
  uint64_t detection_bound_ms;
  uint32_t nworkers;
  ea__chaos_wstat w[CH_MAX_WPN];
  bool has_ckpt;         /* the document has checkpoint fields */
  bool spare;            /* spares.self.spare: waiting beyond max_nodes */
  char spare_state[16];  /* spares.self.state: ready, starting, unfit, held */
  uint32_t spares_ready; /* spares.ready */
  /* held_out (the controller's alone): whom it keeps out, for how long yet,
   * and the how-manieth hold of that node this is */
  uint32_t nheld;
  char held[4][CH_NAME_MAX];
  int64_t held_left_ms[4];
  uint32_t held_holds[4];
  char reason[160];
} ea__chaos_status;

/* "12/41a0ee66" → (12 << 16) | 0x41a0, the agents' 64-bit generation;
 * 0 for "none" or anything malformed. */
uint64_t ea__chaos_gen_from_str(const char *s);
/* One `status` over the admin socket at sock_path, within timeout_ms. */
int ea__chaos_status_query(const char *sock_path, int timeout_ms, ea__chaos_status *st);
/* Fill st from an already parsed document (exposed for the tests). */
/* The fields the harness watches, from one status document (the JSON the
 * admin socket answers and `elastic-agent status --json` prints).  0, or
 * -EPROTO with st->err saying why (not JSON, or no generation in it). */
int ea__chaos_status_parse(const char *buf, size_t len, ea__chaos_status *st);

/* ---- schedule.c ----------------------------------------------------------- */

typedef enum {
  EA__F_NODE_CRASH = 0,  /* SIGKILL an agent and its workers, then bring it back */
  EA__F_WORKER_KILL,     /* SIGKILL one worker process only */
  EA__F_CONTROLLER_KILL, /* SIGKILL the agent that is controller, and its workers */
  EA__F_PAUSE,           /* SIGSTOP (agent, or agent + workers), later SIGCONT */
  EA__F_DRAIN,           /* `elastic-agent drain NAME` from another node */
  EA__F_SIGTERM,         /* spot reclaim: SIGTERM, the node drains and exits 0 */
  EA__F_JOIN,            /* a brand-new node joins (spare slot), later leaves */
  EA__F_ISOLATE,         /* partition: one node cut off (netns), then healed */
  EA__F_SPLIT,           /* partition: two sides (netns), then healed */
  EA__F_LOSS,            /* random packet loss on every node (netns), then healed */
  EA__F_CKPT_KILL,       /* the agent dies while writing a checkpoint shard */
  EA__F_DISK_FULL,       /* the checkpoint file system is full, then freed */
  EA__F_ONEWAY,          /* one-way loss between ring neighbours (netns), then healed */
  EA__F_FOREIGN,         /* an agent of another cluster (another key) joins, then is killed */
  EA__F_PREEMPT,         /* spot notices to k of n nodes through the fake metadata service */
  EA__F_SPARE,           /* spare churn: a spare in, a member killed, it comes back as the spare */
  EA__F_HTTP_FLOOD,      /* 1000 idle or slow connections to one agent's metrics listener */
  EA__F_JOIN_FLOOD,      /* a connection flood on a seed's gossip port while a node joins via it */
  EA__F_NKINDS
} ea__chaos_kind;

const char *ea__chaos_kind_name(int kind);
int ea__chaos_kind_parse(const char *name); /* -1 if unknown */
bool ea__chaos_kind_needs_netns(int kind);
bool ea__chaos_kind_needs_ckpt(int kind);

typedef struct {
  int kind;
  double frac;          /* fires once training passed this fraction of the steps */
  int slot;             /* target slot (1-based); 0 = decided at run time (controller) */
  bool fresh;           /* restore as a fresh node (new data dir, id, name); foreign: --bootstrap */
  bool whole_node;      /* pause: the workers too */
  bool remove_by_drain; /* join: the newcomer leaves by `drain` (else SIGTERM) */
  int dur_ms;           /* pause / partition / loss length */
  int loss_pct;         /* loss */
  uint32_t minority;    /* split: bit s set = slot s is on the minority side */
  int nth;              /* ckpt-kill: the shard write that dies (1-based) */
  bool netns;           /* the run uses namespaces (floods then come from one namespace) */
} ea__chaos_fault;

typedef struct {
  uint64_t seed;
  int nagents;
  int64_t duration_ms;
  uint32_t kinds; /* bit k: kind k may be scheduled */
  int min_faults;
  bool netns; /* only labels: a flood's sources (the draws do not depend on it) */
} ea__chaos_sched_opts;

/* Builds the schedule: max(min_faults, duration/11 s) faults of the enabled
 * kinds that need no checkpoints, every one of them at least once, plus the
 * checkpoint kinds (decided at run time whether they can run).  *out is
 * malloc'd.  The same options give the same schedule, byte for byte. */
int ea__chaos_schedule(const ea__chaos_sched_opts *o, ea__chaos_fault **out, size_t *n);
/* One line describing fault f (for the printed schedule and the reports). */
void ea__chaos_fault_str(const ea__chaos_fault *f, char *out, size_t cap);

/* ---- the run (run.c) ------------------------------------------------------- */

typedef struct {
  int64_t t_ms;
  char phase[16];
  uint64_t gen;
  uint32_t world;
  uint64_t step;
  bool controller;
} ea__chaos_sample;

typedef struct {
  char name[CH_NAME_MAX];
  int slot;
  int gen_of_slot; /* 0 for the first node of a slot, 1 for its first replacement … */
  char dir[240];   /* WORK/<name> */
  char data[248];  /* WORK/<name>/d */
  char sock[272];  /* WORK/<name>/d/admin.sock */
  char idhex[33];
  pid_t pid;    /* the agent while it runs, else 0 */
  int starts;   /* agent processes started (log file agent.<k>.log) */
  bool stopped; /* SIGSTOPped by us */
  bool stopped_workers;
  bool retired; /* replaced by a fresh node, never started again */
  int64_t start_ms, exit_ms;
  int exit_status;     /* as from waitpid */
  bool expect_exit0;   /* drained / SIGTERMed: must exit 0 */
  bool expect_death;   /* we killed it (or armed it to die) */
  bool finished;       /* exited 0 after logging "job finished" (the job reached its end) */
  char ckpt_fault[64]; /* EA_CKPT_FAULT for the next start ("" = none) */
  char gossip[64];
  char join_via[96];     /* --join this address only ("" = every running node's) */
  ea__chaos_status st;   /* last status answered */
  uint64_t max_gen_seen; /* per agent process: running gen only grows */
  uint64_t max_durable;  /* per data dir, across restarts */
  uint64_t steps_at_partition;
  ea__chaos_sample *samples;
  size_t nsamples, capsamples;
  int64_t down_since; /* not running since (for the timeline) */
} ea__chaos_node;

/* A time interval of a node's life for the timeline. */
typedef struct {
  char node[CH_NAME_MAX];
  int64_t t0, t1;
  int what; /* 0 up, 1 stopped, 2 cut off */
} ea__chaos_span;

/* What one phase of an episode looked like.  "degraded" is the cluster
 * without the victim (or with a newcomer for a join), "restored" the full
 * cluster again. */
typedef struct {
  bool expected; /* this phase must happen for the fault to count as recovered */
  bool observed; /* seen while polling */
  bool timed_out;
  int64_t t_start; /* the event the phase measures from (inject, heal, restore) */
  int64_t t_seen;  /* polling saw it */
  /* From the logs (post-mortem), -1 when not found: */
  int64_t t_detect, t_reform, t_first_step;
  uint64_t gen; /* the generation that recovered (u64) */
  uint32_t world;
  char nodes[256]; /* its members */
  int64_t bound_ms;
} ea__chaos_phase;

typedef enum { EA__EP_PENDING, EA__EP_DONE, EA__EP_SKIPPED, EA__EP_NOT_RUN } ea__chaos_ep_state;

typedef struct {
  ea__chaos_fault f;
  int state;
  char skip_reason[200];
  char victim[CH_NAME_MAX];   /* node name */
  char newcomer[CH_NAME_MAX]; /* node started by the restore or the join */
  bool victim_was_controller;
  char minority[128]; /* split: the minority side's names */
  int64_t t_inject, t_heal, t_restore, t_end;
  uint64_t step_at_inject, gen_at_inject;
  ea__chaos_phase deg, res;
  int64_t steps_lost; /* -1 unknown */
  char note[512];
  /* spare: the windows in which a ready spare had to keep the world at
   * held_world ranks (from a member's loss to the world seen again) */
  int64_t held_from[2], held_to[2];
  int nheld;
  uint32_t held_world;
} ea__chaos_episode;

typedef enum {
  EA__I_TARGET = 0, /* training reaches the target step */
  EA__I_PROGRESS,   /* the committed step only grows */
  EA__I_ONCE,       /* every step completed once in the final history */
  EA__I_DIGEST,     /* ranks of a generation agree on every step's params */
  EA__I_REFERENCE,  /* final params = the reference run's */
  EA__I_ONE_GEN,    /* a member never runs two generations */
  EA__I_GEN_GROWS,  /* generation numbers only grow */
  EA__I_ONE_PLAN,   /* every node that commits a generation got the same plan */
  EA__I_CONTROLLER, /* never two controllers acting with quorum at once */
  EA__I_MINORITY,   /* a minority side never trains */
  EA__I_CKPT,       /* committed checkpoints verify and resume to the live state */
  EA__I_RECOVERY,   /* every fault recovered within its bound */
  EA__I_CLEAN_EXIT, /* drained / SIGTERMed agents exit 0 */
  EA__I_COVERAGE,   /* the schedule ran: at least min_faults injected */
  EA__I_RESOURCES,  /* agents' memory and descriptors stay flat (resources.c) */
  EA__I_FOREIGN,    /* an agent of another cluster is refused (episode.c, run_foreign) */
  EA__I_PREEMPT,    /* after a mass preemption LATEST is at the step reached (preempt.c) */
  EA__I_SPARE,      /* while a ready spare is left, the world size holds (spare.c) */
  EA__I_PROBES,     /* /healthz answers within 1 s through a connection flood (flood.c) */
  EA__I_COUNT
} ea__chaos_inv;

const char *ea__chaos_inv_name(int inv);
const char *ea__chaos_inv_desc(int inv);

typedef struct {
  int inv;
  int64_t t_ms;
  char msg[400];
} ea__chaos_violation;

/* Options of a run (main.c fills them). */
typedef struct {
  uint64_t seed;
  int nagents;
  int64_t duration_ms;
  bool netns;
  bool keep;
  bool dry_run;
  bool verbose;
  uint32_t kinds;
  int min_faults;
  uint64_t steps;            /* 0 = calibrate */
  int64_t recovery_bound_ms; /* 0 = derived from the configuration */
  char config[CH_PATH_MAX];  /* user's job file, "" = the built-in job */
  char agent_bin[CH_PATH_MAX];
  char work[CH_WORK_MAX]; /* "" = mkdtemp under /tmp */
  char out[CH_PATH_MAX];  /* reports */
  char junit[CH_PATH_MAX];
  char json[CH_PATH_MAX];
  char svg[CH_PATH_MAX];
  double loss_tol; /* relative, final loss vs the W=1 reference */
  bool no_replay;
} ea__chaos_opts;

/* Reference and replay results (replay.c). */
typedef struct {
  /* W=1 reference, no faults, for the same global batch */
  bool ref_done;
  int ref_rc;
  char ref_err[256];
  uint64_t ref_steps;
  float *ref_loss;     /* ref_steps entries */
  uint64_t ref_digest; /* params after the last step */
  double ref_seconds;
  /* exact replay of the lineage's world sizes */
  bool replay_done;
  int replay_rc;
  char replay_err[256];
  uint64_t replay_steps;
  uint64_t replay_digest;
  int64_t first_mismatch; /* -1 none */
  char mismatch[300];
  double replay_seconds;
  /* final comparison */
  double final_loss_cluster, final_loss_ref, final_rel_diff;
  double window_rel_diff; /* mean loss of the last window */
  uint64_t window;
  bool digest_equal_ref; /* cluster final digest == W=1 reference digest */
} ea__chaos_refres;

/* Checkpoint observations (ckcheck.c). */
typedef struct {
  char name[64];
  uint64_t step, gen;
  uint32_t world;
  int64_t t_seen;
  bool verified;   /* ea_ckpt_verify full passed */
  bool state_ok;   /* its state parsed and its params digest was computed */
  uint64_t digest; /* params digest of the state */
  bool live_match; /* equals the live history's digest at that step */
  bool live_known; /* the history had that step */
  char err[300];
} ea__chaos_ckpt;

struct ea__chaos_history; /* history_int.h */

/* One agent process's resources (resources.c): the first sample after the
 * warm-up (base), the last, the largest. */
typedef struct {
  char node[CH_NAME_MAX];
  pid_t pid;
  int64_t t_start, t_base, t_last;
  bool have_base;
  uint32_t samples;
  uint64_t rss_base, rss_last, rss_max; /* bytes */
  uint32_t fd_base, fd_last, fd_max;
} ea__chaos_rsrc;

typedef struct ea__chaos_run {
  ea__chaos_opts o;
  ea_config cfg; /* the job every agent runs */
  char job_path[240];
  char ckpt_dir[240];
  char log_path[240]; /* the harness's own log (commands it ran) */
  FILE *log;
  int64_t t0; /* first agent start */
  int64_t t_end;
  /* network */
  int runid;
  int subnet; /* third/fourth octet index of 198.18.0.0/15 */
  char ns_br[32];
  char ns[CH_MAX_SLOTS + 1][32];
  char ip[CH_MAX_SLOTS + 1][20];
  bool net_up;
  uint32_t cut_slots; /* slots currently cut off / with rules */
  /* nodes */
  ea__chaos_node *nodes;
  size_t nnodes;
  int slot_node[CH_MAX_SLOTS + 1]; /* index into nodes of the slot's current node, -1 */
  int nslots;                      /* nagents + 2 (a joiner's slot, a spare's) */
  /* capabilities */
  bool ckpt_available;
  char ckpt_why[200];
  bool tmpfs_ckpt; /* checkpoint dir is a tmpfs we mounted (disk-full) */
  /* schedule and what happened */
  ea__chaos_fault *sched;
  size_t nsched;
  ea__chaos_episode *eps;
  size_t neps;
  int injected;
  /* online invariants */
  ea__chaos_violation *viol;
  size_t nviol, capviol;
  int64_t two_ctrl_since;
  uint64_t max_cluster_step; /* highest step any live worker held */
  char latest_seen[64];
  uint64_t latest_step, latest_gen;
  int64_t partition_since;   /* a partition is on since (0 none) */
  uint32_t minority_mask;    /* slots of the minority side while partitioned */
  int64_t majority_reformed; /* the majority side formed without the minority */
  /* rates and bounds */
  double calib_rate; /* steps/s measured by the calibration cluster */
  uint64_t target_steps;
  int64_t bound_ms;         /* a fault's degraded phase, a heal */
  int64_t bound_restore_ms; /* taking a node back (+ one rendezvous timeout) */
  int64_t bound_extra_ms;   /* added to both while a fault's phases allow for more (oneway) */
  bool library;             /* the job is a library-mode program (compute.protocol: library) */
  uint64_t detection_bound_ms;
  int64_t t_done;        /* training reached the target (polling) */
  uint64_t final_digest; /* the digest every final worker reported */
  bool final_digest_known;
  char final_digest_str[20];
  double final_loss;
  /* timeline extras */
  ea__chaos_span *spans;
  size_t nspans, capspans;
  ea__chaos_sample *prog; /* cluster progress: t, highest step */
  size_t nprog, capprog;
  int64_t ctrl_violation_at; /* last two-controllers violation (one per episode) */
  /* checkpoints */
  ea__chaos_ckpt *ckpts;
  size_t nckpts, capckpts;
  int ckpt_failed_events; /* "ckpt failed" lines in the logs */
  bool resume_checked;
  bool resume_ok;
  char resume_msg[300];
  /* reference */
  ea__chaos_refres ref;
  pthread_t ref_thread;
  bool ref_started;
  /* agents' memory and descriptors */
  ea__chaos_rsrc *rsrc;
  size_t nrsrc, caprsrc;
  /* the fake metadata service of the preempt fault (preempt.c); port 0: none */
  int notice_fd, notice_port;
  volatile bool notice_quit;
  pthread_t notice_thread;
  bool preempt_checked; /* a mass preemption ran (the invariant was judged) */
  bool spare_checked;   /* a spare kept the world after a loss (the invariant was judged) */
  bool probes_checked;  /* an http-flood ran (probes_answered was judged) */
  /* post-mortem */
  struct ea__chaos_history *hist;
  bool aborted;
  char abort_why[300];
} ea__chaos_run;

/* ---- resources.c ------------------------------------------------------------ */

/* Samples every running agent's RSS and descriptors (rate-limited; from
 * the poll loop). */
void ea__chaos_rsrc_tick(ea__chaos_run *r);
/* The resources_flat invariant, after the run: violations for growth. */
void ea__chaos_rsrc_check(ea__chaos_run *r);
bool ea__chaos_rsrc_judged(const ea__chaos_rsrc *x);
size_t ea__chaos_rsrc_njudged(const ea__chaos_run *r);
/* NULL when something was judged, else why not (the invariant's skip). */
const char *ea__chaos_rsrc_skip(const ea__chaos_run *r);
/* report.json's "resources" member; the summary's line. */
void ea__chaos_rsrc_json(const ea__chaos_run *r, ea_sb *s);
void ea__chaos_rsrc_summary(const ea__chaos_run *r, ea_sb *s);

/* Set by SIGINT/SIGTERM: the run stops early, cleans up and reports. */
extern volatile int ea__chaos_interrupted;

void ea__chaos_violate(ea__chaos_run *r, int inv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ea__chaos_logf(ea__chaos_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Progress lines on stdout (and the harness log). */
void ea__chaos_say(ea__chaos_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sets up the work dir, the job file, the network; 0 or -errno (err says)
 * (setup.c). */
int ea__chaos_setup(ea__chaos_run *r, char *err, size_t errlen);
/* Measures the cluster's step rate with a throwaway cluster (steps/s)
 * (setup.c). */
int ea__chaos_calibrate(ea__chaos_run *r, double *rate, char *err, size_t errlen);
/* The whole fault phase: start, episodes, wait for the target, stop. */
int ea__chaos_execute(ea__chaos_run *r);
/* Stops every process we started, removes namespaces and mounts. */
void ea__chaos_teardown(ea__chaos_run *r);
void ea__chaos_run_free(ea__chaos_run *r);

/* ---- run.c, for episode.c and setup.c -------------------------------------- */

/* An agent answers status in microseconds; 400 ms only expires for one
 * that is stopped or wedged. */
#define EA__CHAOS_STATUS_TIMEOUT_MS 400

/* Workers per node (compute.workers_per_node, at least 1). */
uint32_t ea__chaos_wpn(const ea__chaos_run *r);
/* The current node of slot s (1-based), NULL when none. */
ea__chaos_node *ea__chaos_slot_node(ea__chaos_run *r, int s);
/* A time interval of a node's life for the timeline (what: see ea__chaos_span). */
void ea__chaos_add_span(ea__chaos_run *r, const char *node, int64_t t0, int64_t t1, int what);
/* A new identity on slot s (name, directories, a node id derived from the
 * seed); it becomes the slot's current node.  NULL when none can be made. */
ea__chaos_node *ea__chaos_node_new(ea__chaos_run *r, const char *prefix, int s, int gen_of_slot);
bool ea__chaos_node_running(const ea__chaos_node *n);
/* Starts n's agent and waits until it answers status; 0 or -errno. */
int ea__chaos_node_start(ea__chaos_run *r, ea__chaos_node *n);
/* Signal an agent, and its workers too when asked. */
void ea__chaos_node_signal(ea__chaos_run *r, ea__chaos_node *n, int sig, bool workers);
/* Polls until n's agent has exited or ms passed; whether it is gone. */
bool ea__chaos_wait_gone(ea__chaos_run *r, ea__chaos_node *n, int ms);
/* SIGKILLs every running agent with its workers and waits for them. */
void ea__chaos_stop_all(ea__chaos_run *r);
/* The highest last step any running, not stopped agent reported. */
uint64_t ea__chaos_cluster_step(ea__chaos_run *r);

typedef bool (*ea__chaos_cond_fn)(ea__chaos_run *r, void *ctx);
/* Poll (and check the continuous invariants) until cond holds or
 * deadline_ms (monotonic) passes; whether cond held. */
bool ea__chaos_wait_until(ea__chaos_run *r, int64_t deadline_ms, ea__chaos_cond_fn cond, void *ctx);
/* A condition that never holds: wait_until with it just polls for a while. */
bool ea__chaos_never(ea__chaos_run *r, void *ctx);

/* What "formed" means: these nodes run one generation of world n × wpn,
 * with the conditions below; the _out fields say what was seen. */
typedef struct {
  char names[CH_MAX_SLOTS * 2][CH_NAME_MAX];
  int n;
  uint64_t gen_after;      /* the generation must be newer than this ... */
  bool strictly;           /* ... (or at least this, when false) */
  uint64_t step_after;     /* and training past this step */
  const char *worker_node; /* worker-kill: this node's worker ... */
  uint32_t worker_idx;
  uint32_t restarts_before; /* ... was restarted */
  const char *gone;         /* and this node's agent has exited (drain, SIGTERM) */
  /* oneway: the end of the link the controller may hold out.  Its holds
   * double and are never forgiven (ea_rdzv.h), and a link still failing
   * when one ends earns the next, so the restore bound runs from the end of
   * its last hold that began by hold_from (now_ms), not from the heal.
   * EA__CHAOS_ANY_HELD: any node of names (loss and partitions: an end of a
   * link that lost what it sent is held out as a one-way link's is). */
  const char *held_node;
  int64_t hold_from;
  int64_t hold_end;            /* out: the latest end of such a hold seen (now_ms), 0 none */
  char held_seen[CH_NAME_MAX]; /* out: whose hold that was */
  uint64_t gen_out;
  uint32_t world_out;
  uint64_t step_out;
} ea__chaos_want;

#define EA__CHAOS_ANY_HELD "*"

/* ctx is an ea__chaos_want: whether the cluster it describes has formed. */
bool ea__chaos_cond_formed(ea__chaos_run *r, void *ctx);
/* qsort comparator of CH_NAME_MAX names. */
int ea__chaos_cmp_name(const void *a, const void *b);
/* w = the current slots' nodes, less `without`, plus `with` (either NULL). */
void ea__chaos_want_set(ea__chaos_want *w, ea__chaos_run *r, const char *without, const char *with);
/* w's node names, comma-separated. */
void ea__chaos_want_str(const ea__chaos_want *w, char *out, size_t cap);
/* Run one phase: wait for w, with the bound; fill p. */
bool ea__chaos_phase_wait(ea__chaos_run *r, ea__chaos_phase *p, ea__chaos_want *w, int64_t t_start,
                          bool expected, const char *what);
/* A short description of what each expected node is doing, for a hang. */
void ea__chaos_cluster_state(ea__chaos_run *r, const ea__chaos_want *w, char *out, size_t cap);
/* Records the EA__I_RECOVERY violation of a phase of e that did not complete. */
void ea__chaos_hang(ea__chaos_run *r, ea__chaos_episode *e, const char *phase,
                    const ea__chaos_want *w);
/* ctx unused: every current slot's node runs one generation. */
bool ea__chaos_cond_all_running(ea__chaos_run *r, void *ctx);
/* Whether the cluster is whole within 2 s, or else, after restarting any
 * slot's agent that is not running, within the restore bound. */
bool ea__chaos_ensure_whole(ea__chaos_run *r);
/* A fresh identity on slot s (the slot's next name: n6, n6b, ...). */
ea__chaos_node *ea__chaos_slot_new(ea__chaos_run *r, int s);
/* Retires old and makes a fresh node (new disk, new id) on its slot. */
ea__chaos_node *ea__chaos_replace_fresh(ea__chaos_run *r, ea__chaos_node *old);

/* ---- episode.c ------------------------------------------------------------- */

/* One scheduled fault: skip it (saying why) or wait until the cluster is
 * whole, inject, watch the degraded and restored phases, settle. */
void ea__chaos_episode_run(ea__chaos_run *r, ea__chaos_episode *e);
/* The join episode: a fresh node in slot N+1 (joining via `via` only when
 * not NULL) trains at world N + 1, then leaves by drain or SIGTERM. */
void ea__chaos_run_join(ea__chaos_run *r, ea__chaos_episode *e, const char *via);

/* ---- preempt.c ------------------------------------------------------------- */

/* The fake metadata service: GET /going/NAME answers 200 once
 * WORK/notices/going-NAME exists.  0 or -errno (err says). */
int ea__chaos_notice_start(ea__chaos_run *r, char *err, size_t errlen);
void ea__chaos_notice_stop(ea__chaos_run *r);
/* `elastic-chaos --notice-serve WORK PORT`: one server in the foreground
 * (started by the harness inside each slot's namespace). */
int ea__chaos_notice_serve_main(const char *work, int port);
/* The preempt episode: notices to 1 node (a drain) or to n − min_nodes + 1
 * (a mass preemption: the checkpoint, then they leave), then fresh nodes. */
void ea__chaos_run_preempt(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_node *v);

/* ---- spare.c --------------------------------------------------------------- */

/* The spare-churn episode (compute.max_nodes is n or n + 1): a spare in
 * slot n+2 (after a joiner in n+1 when max_nodes is n + 1), member v
 * SIGKILLed and taken back as the spare, then the newcomers leave. */
void ea__chaos_run_spare(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_node *v);
/* The spare_world_held invariant, after history_check. */
void ea__chaos_spare_check(ea__chaos_run *r);

/* ---- flood.c --------------------------------------------------------------- */

/* `elastic-chaos --flood HOST PORT NSRC CONNS SECONDS idle|slow` and
 * `elastic-chaos --http-probe HOST PORT SECONDS` (argv as main's). */
int ea__chaos_flood_main(int argc, char **argv);
int ea__chaos_http_probe_main(int argc, char **argv);
/* The http-flood episode: v's metrics listener flooded, /healthz probed. */
void ea__chaos_run_http_flood(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_node *v);
/* The join-flood episode: v's gossip port flooded while a node joins via v. */
void ea__chaos_run_join_flood(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_node *v);

/* ---- setup.c --------------------------------------------------------------- */

/* Sets key k of the job to v; 0 or -errno (err says). */
int ea__chaos_set_key(ea__chaos_run *r, const char *k, const char *v, char *err, size_t errlen);
/* Writes the job file (r->job_path) from r->cfg; 0 or -errno (err says). */
int ea__chaos_write_job(ea__chaos_run *r, char *err, size_t errlen);

/* ---- proc.c ---------------------------------------------------------------- */

/* Starts node n's agent (argv built by the caller), in its own session, with
 * PR_SET_PDEATHSIG so it cannot outlive the harness, inside namespace ns when
 * not NULL; stdout+stderr to log.  env: extra "K=V" strings (NULL-ended) */
int ea__chaos_spawn(char *const argv[], const char *ns, const char *log, char *const env[],
                    pid_t *pid);
/* The worker processes of agent pid (its children), up to cap. */
int ea__chaos_children(pid_t pid, pid_t *out, int cap);
/* Reaps every exited child (ours and adopted orphans: we are a subreaper);
 * calls back for each. */
typedef void (*ea__chaos_reap_cb)(void *ctx, pid_t pid, int status);
void ea__chaos_reap(ea__chaos_reap_cb cb, void *ctx);
bool ea__chaos_pid_alive(pid_t pid); /* exists and not a zombie */

/* ---- net.c ----------------------------------------------------------------- */

int ea__chaos_net_up(ea__chaos_run *r, char *err, size_t errlen);
void ea__chaos_net_down(ea__chaos_run *r);
/* Replace the input rules of every slot namespace: drop from the slots in
 * drop_from[s] (a bitmask per slot), and loss_pct % of everything (0 = none). */
int ea__chaos_net_rules(ea__chaos_run *r, const uint32_t *drop_from, int loss_pct);
int ea__chaos_net_heal(ea__chaos_run *r);

/* ---- history.c ------------------------------------------------------------- */

/* Parse every agent log of the run and check the history invariants; fills
 * the episodes' log timings.  Returns 0, or -errno when the logs could not
 * be read (which is itself reported). */
int ea__chaos_history_check(ea__chaos_run *r);
/* The lineage (final history) after history_check: world size and params
 * digest of step s (0-based) for s < *nsteps.  NULL when none. */
const uint32_t *ea__chaos_lineage_world(const ea__chaos_run *r, uint64_t *nsteps);
bool ea__chaos_lineage_digest(const ea__chaos_run *r, uint64_t step, uint64_t *digest, float *loss);
/* Params digest after step `step` as generation `gen` logged it. */
bool ea__chaos_gen_digest(const ea__chaos_run *r, uint64_t gen, uint64_t step, uint64_t *digest);
void ea__chaos_history_free(struct ea__chaos_history *h);

/* What the report and the timeline need from the history. */
typedef struct {
  uint64_t gen;
  uint32_t world;
  int64_t t_commit, t_first, t_last; /* -1 when unknown */
  uint64_t start, last;              /* first and last step index trained */
  bool trained;                      /* has step records */
  bool lineage;                      /* part of the final history */
  uint64_t lineage_from, lineage_to; /* its steps in the final history */
  char nodes[256];
} ea__chaos_genview;

typedef struct {
  int64_t t_ms;
  uint64_t step, gen;
  int kind; /* 0 committed, 1 failed / given up, 2 stale */
  char node[CH_NAME_MAX];
} ea__chaos_ckev;

typedef struct {
  size_t ngens;
  const ea__chaos_genview *gens;
  size_t nckev;
  const ea__chaos_ckev *ckev;
  uint64_t records; /* step lines parsed */
  uint64_t lineage_steps;
  uint64_t orphan_steps; /* computed, then discarded with their node */
  uint64_t log_bytes;
  double parse_seconds;
} ea__chaos_histview;

bool ea__chaos_history_view(const ea__chaos_run *r, ea__chaos_histview *v);

/* ---- replay.c -------------------------------------------------------------- */

/* Starts the W=1 reference for r->target_steps on a background thread. */
int ea__chaos_reference_start(ea__chaos_run *r);
void ea__chaos_reference_join(ea__chaos_run *r);
/* The exact replay of the lineage (after history_check), then the
 * reference comparisons; records violations of EA__I_REFERENCE. */
void ea__chaos_replay_check(ea__chaos_run *r);

/* ---- ckcheck.c ------------------------------------------------------------- */

/* Looks at the checkpoint dir: verifies complete checkpoints not seen yet,
 * checks LATEST only moves forward.  Cheap when nothing changed; called
 * from the polling loop and once at the end. */
void ea__chaos_ckpt_scan(ea__chaos_run *r);
/* After the history is known: each verified checkpoint's params digest
 * against the live history, and resume of the newest. */
void ea__chaos_ckpt_final(ea__chaos_run *r);

/* ---- report.c -------------------------------------------------------------- */

int ea__chaos_report(ea__chaos_run *r);
bool ea__chaos_all_ok(const ea__chaos_run *r);

#endif
