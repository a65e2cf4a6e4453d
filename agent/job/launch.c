/* launch.c — what kind of program the workers are, and in restart mode
 * (torchrun) the life of a generation's processes: the environment each is
 * started with, the port rank 0's agent picks for the program's store, and
 * the stop before the next generation.
 *
 * Why restart mode looks like this.  A torchrun script cannot re-form its
 * process group in place: it calls init_process_group("env://") once, with
 * RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from its environment, and a
 * failed peer leaves its collectives broken.  So every committed generation
 * starts the program afresh on every member (torchrun's "restart the worker
 * group"), with the rendezvous' plan turned into torchrun's variables, and
 * a PREPARE first stops what runs.  READY goes out only once every local
 * process is gone, so no process of generation g can still talk to its
 * store when generation g+1's rank 0 opens a new one.  What torchrun needs a
 * c10d store and a second rendezvous round for — agreeing on the ranks and
 * on rank 0's address — is already in our COMMIT: rank 0's agent picks a
 * free port while it prepares and sends it as its worker's listen address
 * in READY, and the COMMIT hands it to everyone.  A fresh port every
 * generation: the previous one may sit in TIME_WAIT, and a program that
 * binds it with SO_REUSEADDR off would fail.
 *
 * Stopping: SIGTERM to the worker's process group (the supervisor makes
 * each worker lead one), SIGKILL after a grace.  The grace is short when a
 * peer of the running generation is dead or frozen: its survivors sit in a
 * gloo collective that returns only at the group's timeout (30 minutes by
 * default), and a Python program does not run its SIGTERM handler while
 * blocked in C code, so a long grace would hold the recovery hostage.
 * Otherwise (a join, a drain, a worker that failed on its own) the program
 * gets runtime.stop_grace_seconds to save what it wants.
 */
#include "launch.h"

#include "ea_log.h"
#include "warm.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

/* Generation directories kept in DATA/workers (outputs and error files):
 * enough to look back over a failure streak, bounded so a crash loop cannot
 * fill the disk. */
#define KEEP_GENS 16
/* Attempts at a port different from the previous generation's. */
#define PORT_TRIES 8

const char *ea__mode_name(ea__mode m) {
  switch (m) {
    case EA__MODE_BUILTIN:
      return "builtin";
    case EA__MODE_TORCHRUN:
      return "torchrun";
    case EA__MODE_LIBRARY:
      return "library";
  }
  return "?";
}

int ea__launch_mode(const ea_config *c, int argc, char *const *argv, ea__mode *mode, char *err,
                    size_t errlen) {
  bool shell = c->compute.worker_command[0] != 0, exec = argc > 0 && argv && argv[0];
  const char *p = c->compute.protocol;
  if (shell && exec) {
    snprintf(err, errlen,
             "the program is given twice: compute.worker_command (\"%.60s\") and after -- (%.60s); "
             "give one",
             c->compute.worker_command, argv[0]);
    return -EINVAL;
  }
  bool prog = shell || exec;
  if (strcmp(p, "auto") == 0) {
    *mode = prog ? EA__MODE_TORCHRUN : EA__MODE_BUILTIN;
    return 0;
  }
  if (strcmp(p, "builtin") == 0) {
    if (prog) {
      snprintf(
          err, errlen,
          "compute.protocol builtin runs the built-in trainer, but a program is given (%.60s); "
          "use torchrun or library for it",
          shell ? c->compute.worker_command : argv[0]);
      return -EINVAL;
    }
    *mode = EA__MODE_BUILTIN;
    return 0;
  }
  ea__mode m = strcmp(p, "torchrun") == 0 ? EA__MODE_TORCHRUN : EA__MODE_LIBRARY;
  if (strcmp(p, "torchrun") != 0 && strcmp(p, "library") != 0) {
    snprintf(err, errlen, "compute.protocol: unknown protocol '%s'", p);
    return -EINVAL;
  }
  if (!prog) {
    snprintf(err, errlen,
             "compute.protocol %s needs a program: compute.worker_command, or `run … -- PROGRAM "
             "ARG…`",
             p);
    return -EINVAL;
  }
  *mode = m;
  return 0;
}

int ea__launch_python_dir(const char *exe, char *out, size_t cap) {
  char real[EA_PATH_MAX];
  if (!realpath(exe, real)) return -errno;
  char *slash = strrchr(real, '/');
  if (!slash) return -ENOENT;
  *slash = 0; /* the binary's directory */
  static const char *const rel[] = {"../python", "../lib/elastic-agent/python"};
  for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
    char cand[EA_PATH_MAX + 64], pkg[EA_PATH_MAX + 96];
    snprintf(cand, sizeof cand, "%s/%s", real, rel[i]);
    snprintf(pkg, sizeof pkg, "%s/elastic_agent/__init__.py", cand);
    if (access(pkg, R_OK) != 0) continue;
    char dir[EA_PATH_MAX];
    if (!realpath(cand, dir)) continue;
    if (strlen(dir) >= cap) return -ENAMETOOLONG;
    memcpy(out, dir, strlen(dir) + 1);
    return 0;
  }
  return -ENOENT;
}

int ea__launch_warm(const ea_config *c, ea__mode m, int argc, char *const *argv, char *why,
                    size_t cap) {
  if (strcmp(c->compute.warm_start, "off") == 0) {
    snprintf(why, cap, "compute.warm_start is off");
    return -ENOTSUP;
  }
  if (m == EA__MODE_BUILTIN) {
    snprintf(why, cap, "the built-in trainer is not a Python program");
    return -ENOTSUP;
  }
  char **words = NULL;
  int rc = 0;
  if (argc > 0) {
    words = calloc((size_t)argc + 1, sizeof *words);
    for (int i = 0; words && i < argc; i++)
      if (!(words[i] = ea__sup_subst_local_rank(argv[i], 0, false))) rc = -ENOMEM;
    if (!words) rc = -ENOMEM;
  } else {
    char *cmd = ea__sup_subst_local_rank(c->compute.worker_command, 0, true);
    rc = cmd ? ea__warm_split(cmd, &words, why, cap) : -ENOMEM;
    free(cmd);
  }
  ea__warm_form f;
  if (rc == 0) rc = ea__warm_form_of(words, &f, why, cap);
  if (rc == -ENOMEM) snprintf(why, cap, "out of memory");
  ea__warm_words_free(words);
  return rc;
}

int ea__launch_python_home(char *out, size_t cap) {
  const char *over = getenv("EA_PYTHONPATH");
  if (over && *over) {
    if (strlen(over) >= cap) return -ENAMETOOLONG;
    snprintf(out, cap, "%s", over);
    return 0;
  }
  int rc = ea__launch_python_dir("/proc/self/exe", out, cap);
  if (rc) out[0] = 0;
  return rc;
}

static void append(char *out, size_t cap, const char *s) {
  size_t n = strlen(out);
  if (n < cap) snprintf(out + n, cap - n, "%s%s", n ? "; " : "", s);
}

int ea__launch_check_keys(const ea_config *c, ea__mode m, bool resume_from, char *warn, size_t wcap,
                          char *err, size_t errlen) {
  if (wcap) warn[0] = 0;
  if (resume_from && m == EA__MODE_TORCHRUN) {
    snprintf(err, errlen,
             "--resume-from names a checkpoint of the built-in trainer; a %s program resumes from "
             "its own checkpoints (see docs/torchrun.md)",
             ea__mode_name(m));
    return -EINVAL;
  }
  char keys[1024], line[1200];
  if (m != EA__MODE_BUILTIN) {
    if (ea_config_changed_keys(c, "train", keys, sizeof keys) > 0) {
      snprintf(line, sizeof line, "%s do nothing in %s mode (the program trains itself)", keys,
               ea__mode_name(m));
      append(warn, wcap, line);
    }
    if (ea_config_changed_keys(c, "checkpoint", keys, sizeof keys) > 0 && m == EA__MODE_TORCHRUN) {
      snprintf(line, sizeof line,
               "%s do nothing in torchrun mode (the program saves and loads its own "
               "checkpoints)",
               keys);
      append(warn, wcap, line);
    }
  }
  if (m == EA__MODE_TORCHRUN) {
    ea_config def;
    ea_config_default(&def);
    keys[0] = 0;
    if (c->distributed.global_batch != def.distributed.global_batch)
      append(keys, sizeof keys, "distributed.global_batch");
    if (c->distributed.micro_batch != def.distributed.micro_batch)
      append(keys, sizeof keys, "distributed.micro_batch");
    if (strcmp(c->distributed.backend, def.distributed.backend) != 0)
      append(keys, sizeof keys, "distributed.backend");
    if (c->distributed.communication_timeout_seconds !=
        def.distributed.communication_timeout_seconds)
      append(keys, sizeof keys, "distributed.communication_timeout_seconds");
    if (keys[0]) {
      snprintf(line, sizeof line,
               "%s do nothing in torchrun mode (the program builds its own process group)", keys);
      append(warn, wcap, line);
    }
  } else {
    ea_config def;
    ea_config_default(&def);
    if (c->runtime.lost_peer_grace_ms != def.runtime.lost_peer_grace_ms) {
      snprintf(line, sizeof line,
               "runtime.lost_peer_grace_ms does nothing in %s mode (the workers are not restarted "
               "per generation)",
               ea__mode_name(m));
      append(warn, wcap, line);
    }
  }
  return 0;
}

/* ---- the environment ------------------------------------------------------------ */

const char *const ea__torch_env_names[] = {"RANK",
                                           "LOCAL_RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_WORLD_SIZE",
                                           "GROUP_RANK",
                                           "GROUP_WORLD_SIZE",
                                           "ROLE_NAME",
                                           "ROLE_RANK",
                                           "ROLE_WORLD_SIZE",
                                           "MASTER_ADDR",
                                           "MASTER_PORT",
                                           "TORCHELASTIC_RESTART_COUNT",
                                           "TORCHELASTIC_MAX_RESTARTS",
                                           "TORCHELASTIC_RUN_ID",
                                           "TORCHELASTIC_USE_AGENT_STORE",
                                           "TORCHELASTIC_ERROR_FILE",
                                           "TORCHELASTIC_SIGNALS_TO_HANDLE",
                                           "EA_GENERATION",
                                           "EA_NODE_NAME",
                                           "EA_DATA_DIR",
                                           NULL};

/* Names of the built-in protocol a torchrun program must not see (it has
 * no fd 3). */
static const char *const dropped_names[] = {"EA_IPC_FD", "EA_LOCAL_RANK", "EA_CONFIG",
                                            "EA_COMM_BIND", NULL};

static bool name_is(const char *kv, const char *name) {
  size_t n = strlen(name);
  return strncmp(kv, name, n) == 0 && kv[n] == '=';
}

static bool in_list(const char *kv, const char *const *names) {
  for (size_t i = 0; names[i]; i++)
    if (name_is(kv, names[i])) return true;
  return false;
}

const char *ea__env_get(char *const *env, const char *name) {
  for (size_t i = 0; env && env[i]; i++)
    if (name_is(env[i], name)) return env[i] + strlen(name) + 1;
  return NULL;
}

/* Ours are malloc'd and come after a NULL-free run of borrowed pointers:
 * the array's slot after the terminator records where ours start. */
void ea__env_free(char **env) {
  if (!env) return;
  size_t n = 0;
  while (env[n]) n++;
  size_t first = (size_t)(uintptr_t)env[n + 1];
  for (size_t i = first; i < n; i++) free(env[i]);
  free(env);
}

int ea__launch_env(const ea__torch_env *e, char *const *base, char ***out) {
  *out = NULL;
  size_t nb = 0;
  while (base && base[nb]) nb++;
  size_t cap = nb + 32;
  char **env = calloc(cap + 2, sizeof *env);
  if (!env) return -ENOMEM;
  size_t n = 0;
  bool has_omp = false, has_unbuf = false, has_nccl = false;
  for (size_t i = 0; i < nb; i++) {
    if (in_list(base[i], ea__torch_env_names) || in_list(base[i], dropped_names)) continue;
    if (name_is(base[i], "OMP_NUM_THREADS")) has_omp = true;
    if (name_is(base[i], "PYTHONUNBUFFERED")) has_unbuf = true;
    /* either name: torch 2.x reads the old one too (and warns) */
    if (name_is(base[i], "TORCH_NCCL_ASYNC_ERROR_HANDLING") ||
        name_is(base[i], "NCCL_ASYNC_ERROR_HANDLING"))
      has_nccl = true;
    env[n++] = base[i];
  }
  size_t first = n;
  int rc = 0;
#define PUT(...)                                                     \
  do {                                                               \
    if (rc == 0 && asprintf(&env[n], __VA_ARGS__) < 0) rc = -ENOMEM; \
    if (rc == 0) n++;                                                \
  } while (0)
  PUT("RANK=%u", e->rank);
  PUT("LOCAL_RANK=%u", e->local_rank);
  PUT("WORLD_SIZE=%u", e->world);
  PUT("LOCAL_WORLD_SIZE=%u", e->local_world);
  PUT("GROUP_RANK=%u", e->group_rank);
  PUT("GROUP_WORLD_SIZE=%u", e->group_world);
  /* torchrun's single role is "default"; its rank and size are the job's */
  PUT("ROLE_NAME=default");
  PUT("ROLE_RANK=%u", e->rank);
  PUT("ROLE_WORLD_SIZE=%u", e->world);
  PUT("MASTER_ADDR=%s", e->master_addr ? e->master_addr : "");
  PUT("MASTER_PORT=%u", e->master_port);
  PUT("TORCHELASTIC_RESTART_COUNT=%" PRIu64, e->restart_count);
  PUT("TORCHELASTIC_MAX_RESTARTS=%u", e->max_restarts);
  PUT("TORCHELASTIC_RUN_ID=%s", e->run_id ? e->run_id : "none");
  /* No agent-hosted store: rank 0 creates the TCPStore itself, as under
   * torchrun --rdzv_backend=static. */
  PUT("TORCHELASTIC_USE_AGENT_STORE=False");
  PUT("TORCHELASTIC_ERROR_FILE=%s", e->error_file ? e->error_file : "");
  /* torchrun 2.x's default (--signals-to-handle): the signals its agent
   * forwards to the workers; ours forwards SIGTERM and SIGINT (stop) */
  PUT("TORCHELASTIC_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  PUT("EA_GENERATION=%" PRIu64, e->generation);
  PUT("EA_NODE_NAME=%s", e->node_name ? e->node_name : "");
  PUT("EA_DATA_DIR=%s", e->data_dir ? e->data_dir : "");
  if (!has_omp && e->local_world > 1) PUT("OMP_NUM_THREADS=1");
  if (!has_unbuf) PUT("PYTHONUNBUFFERED=1");
  if (!has_nccl) PUT("TORCH_NCCL_ASYNC_ERROR_HANDLING=1");
#undef PUT
  env[n] = NULL;
  env[n + 1] = (char *)(uintptr_t)first;
  if (rc) {
    ea__env_free(env);
    return rc;
  }
  *out = env;
  return 0;
}

void ea__addr_host(const ea_addr *a, char *out, size_t cap) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (a->family == 6)
    inet_ntop(AF_INET6, a->ip, buf, sizeof buf);
  else
    inet_ntop(AF_INET, a->ip, buf, sizeof buf);
  snprintf(out, cap, "%s", buf);
}

int ea__launch_free_port(const ea_addr *host, uint16_t avoid, uint16_t *port) {
  for (int t = 0; t < PORT_TRIES; t++) {
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof ss);
    if (host->family == 6) {
      struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
      s6->sin6_family = AF_INET6;
      memcpy(&s6->sin6_addr, host->ip, 16);
      len = sizeof *s6;
    } else {
      struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
      s4->sin_family = AF_INET;
      memcpy(&s4->sin_addr, host->ip, 4);
      len = sizeof *s4;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (bind(fd, (struct sockaddr *)&ss, len) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
      int e = errno;
      close(fd);
      return -e;
    }
    close(fd);
    uint16_t p = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                : ((struct sockaddr_in *)&ss)->sin_port);
    if (p != avoid || t == PORT_TRIES - 1) {
      *port = p;
      return 0;
    }
  }
  return -EADDRINUSE;
}

/* ---- restart mode ------------------------------------------------------------------ */

typedef struct {
  bool running;  /* spawned for the running generation and not exited */
  bool stopping; /* we stop it: its exit is not a failure */
  uint32_t rank;
  char error_file[EA_PATH_MAX + 128];
} slot;

struct ea__launch {
  uv_loop_t *loop;
  ea__sup *sup;
  ea__launch_cbs cb;
  void *ctx;
  ea__launch_opts o;
  char *node_name, *data_dir, *run_id;
  slot *s;
  uv_timer_t kick; /* reports READY from a loop turn of its own */
  bool preparing;
  uint64_t prep_gen, prep_term;
  uint32_t prep_base;
  uint16_t last_port;
  char master[96];
  uint64_t gen, term; /* running */
  bool closing;
};

typedef struct {
  uv_work_t w;
  char *root;         /* DATA/workers */
  uint64_t keep_from; /* remove gen-T with T below this */
} prune_job;

static char *dup0(const char *s) {
  return strdup(s ? s : "");
}

int ea__launch_new(uv_loop_t *loop, ea__sup *sup, const ea__launch_opts *o,
                   const ea__launch_cbs *cb, void *ctx, ea__launch **out) {
  *out = NULL;
  if (!o || o->wpn == 0) return -EINVAL;
  ea__launch *L = calloc(1, sizeof *L);
  if (!L) return -ENOMEM;
  L->loop = loop;
  L->sup = sup;
  if (cb) L->cb = *cb;
  L->ctx = ctx;
  L->o = *o;
  L->node_name = dup0(o->node_name);
  L->data_dir = dup0(o->data_dir);
  L->run_id = dup0(o->run_id);
  L->s = calloc(o->wpn, sizeof *L->s);
  if (!L->node_name || !L->data_dir || !L->run_id || !L->s) {
    free(L->node_name);
    free(L->data_dir);
    free(L->run_id);
    free(L->s);
    free(L);
    return -ENOMEM;
  }
  for (uint32_t k = 0; k < o->wpn; k++) L->s[k].rank = UINT32_MAX;
  uv_timer_init(loop, &L->kick);
  L->kick.data = L;
  *out = L;
  return 0;
}

static bool any_running(const ea__launch *L) {
  for (uint32_t k = 0; k < L->o.wpn; k++)
    if (ea__sup_running(L->sup, k)) return true;
  return false;
}

/* Everything is stopped: pick the port (rank 0's node) and say READY. */
static void report_ready(ea__launch *L) {
  if (!L->preparing || any_running(L)) return;
  L->preparing = false;
  ea_addr *listen = calloc(L->o.wpn, sizeof *listen);
  if (!listen) return; /* the formation times out and is retried */
  for (uint32_t k = 0; k < L->o.wpn; k++) {
    listen[k] = L->o.advertise;
    listen[k].port = 0;
  }
  if (L->prep_base == 0) {
    uint16_t port = 0;
    int rc = ea__launch_free_port(&L->o.advertise, L->last_port, &port);
    if (rc) {
      ea_log(EA_LOG_ERROR, "launch", "no free port for MASTER_PORT: %s", strerror(-rc));
      free(listen);
      return;
    }
    L->last_port = port;
    listen[0].port = port;
    char host[64];
    ea__addr_host(&L->o.advertise, host, sizeof host);
    ea_log(EA_LOG_INFO, "launch", "gen=%" PRIu64 ": rank 0 is here: MASTER_ADDR=%s MASTER_PORT=%u",
           L->prep_term, host, port);
  }
  if (L->cb.ready) L->cb.ready(L->ctx, L->prep_gen, listen, L->o.wpn);
  free(listen);
}

static void on_kick(uv_timer_t *t) {
  report_ready(t->data);
}

static void stop_slots(ea__launch *L, uint32_t grace_ms) {
  for (uint32_t k = 0; k < L->o.wpn; k++) {
    L->s[k].running = false;
    if (!ea__sup_running(L->sup, k)) continue;
    L->s[k].stopping = true;
    ea__sup_terminate(L->sup, k, grace_ms);
  }
}

void ea__launch_prepare(ea__launch *L, uint64_t gen, uint64_t term, uint32_t rank_base,
                        bool peer_lost) {
  if (L->closing) return;
  L->preparing = true;
  L->prep_gen = gen;
  L->prep_term = term;
  L->prep_base = rank_base;
  uint32_t grace = peer_lost ? L->o.lost_peer_grace_ms : L->o.stop_grace_ms;
  if (any_running(L))
    ea_log(EA_LOG_INFO, "launch",
           "gen=%" PRIu64 ": stopping this node's workers (SIGTERM, SIGKILL after %u ms%s)", term,
           grace, peer_lost ? ": a peer is lost" : "");
  stop_slots(L, grace);
  /* Never from inside the caller (the rendezvous core): the next turn. */
  uv_timer_start(&L->kick, on_kick, 0, 0);
}

/* mkdir -p DATA/workers/gen-T (the data dir exists and is local: one or two
 * metadata operations, done on the loop like the admin socket's). */
static int gen_dir(ea__launch *L, uint64_t term, char *out, size_t cap) {
  char root[EA_PATH_MAX + 16];
  snprintf(root, sizeof root, "%s/workers", L->data_dir);
  if (mkdir(root, 0700) < 0 && errno != EEXIST) return -errno;
  snprintf(out, cap, "%s/gen-%" PRIu64, root, term);
  if (mkdir(out, 0700) < 0 && errno != EEXIST) return -errno;
  return 0;
}

static void prune_work(uv_work_t *w) {
  prune_job *j = (prune_job *)w;
  /* List gen-* and remove the old ones with their files (two levels). */
  DIR *d = opendir(j->root);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    uint64_t t;
    char tail;
    if (sscanf(e->d_name, "gen-%" SCNu64 "%c", &t, &tail) != 1 || t >= j->keep_from) continue;
    char p[EA_PATH_MAX + 300];
    snprintf(p, sizeof p, "%s/%s", j->root, e->d_name);
    DIR *g = opendir(p);
    if (g) {
      struct dirent *f;
      while ((f = readdir(g))) {
        if (f->d_name[0] == '.') continue;
        char q[EA_PATH_MAX + 600];
        snprintf(q, sizeof q, "%s/%s", p, f->d_name);
        unlink(q);
      }
      closedir(g);
    }
    rmdir(p);
  }
  closedir(d);
}

static void prune_after(uv_work_t *w, int status) {
  (void)status;
  prune_job *j = (prune_job *)w;
  free(j->root);
  free(j);
}

static void prune(ea__launch *L, uint64_t term) {
  if (term <= KEEP_GENS) return;
  prune_job *j = calloc(1, sizeof *j);
  if (!j) return;
  if (asprintf(&j->root, "%s/workers", L->data_dir) < 0) {
    free(j);
    return;
  }
  j->keep_from = term - KEEP_GENS + 1;
  if (uv_queue_work(L->loop, &j->w, prune_work, prune_after) < 0) prune_after(&j->w, 0);
}

int ea__launch_commit(ea__launch *L, const ea_rdzv_plan *p, uint32_t node, uint64_t gen64) {
  if (L->closing) return -ESHUTDOWN;
  L->preparing = false;
  uv_timer_stop(&L->kick);
  L->gen = gen64;
  L->term = p->gen.term;
  char host[64];
  ea__addr_host(&p->ranks[0].listen, host, sizeof host);
  snprintf(L->master, sizeof L->master, "%s:%u", host, p->ranks[0].listen.port);
  char dir[EA_PATH_MAX + 64];
  int rc = gen_dir(L, p->gen.term, dir, sizeof dir);
  if (rc) {
    ea_log(EA_LOG_ERROR, "launch", "cannot create %s/workers/gen-%" PRIu64 ": %s", L->data_dir,
           p->gen.term, strerror(-rc));
    return rc;
  }
  prune(L, p->gen.term);
  int first = 0;
  for (uint32_t k = 0; k < L->o.wpn; k++) {
    slot *s = &L->s[k];
    s->rank = node * p->wpn + k;
    s->stopping = false;
    snprintf(s->error_file, sizeof s->error_file, "%.4150s/rank-%u.error.json", dir, s->rank);
    unlink(s->error_file); /* torch's @record refuses to overwrite one */
    ea__torch_env e = {.rank = s->rank,
                       .local_rank = k,
                       .world = p->world,
                       .local_world = p->wpn,
                       .group_rank = node,
                       .group_world = p->nnodes,
                       .master_addr = host,
                       .master_port = p->ranks[0].listen.port,
                       .restart_count = p->restarts,
                       .max_restarts = L->o.max_restarts,
                       .run_id = L->run_id,
                       .error_file = s->error_file,
                       .generation = p->gen.term,
                       .node_name = L->node_name,
                       .data_dir = L->data_dir};
    ea__sup_spawn sp = {0};
    rc = ea__launch_env(&e, environ, &sp.env);
    if (rc == 0 && L->cb.spawning) rc = L->cb.spawning(L->ctx, k, s->rank, p->gen.term, &sp);
    if (rc == 0) {
      rc = ea__sup_start_ex(L->sup, k, &sp);
      if (L->cb.spawned) L->cb.spawned(L->ctx, k, rc);
    }
    ea__env_free(sp.env);
    s->running = rc == 0;
    if (rc) {
      ea_log(EA_LOG_ERROR, "launch", "gen=%" PRIu64 ": cannot start rank %u: %s", p->gen.term,
             s->rank, strerror(-rc));
      if (!first) first = rc;
    }
  }
  if (first == 0)
    ea_log(EA_LOG_INFO, "launch",
           "gen=%" PRIu64
           ": started ranks %u-%u of %u (MASTER_ADDR=%s MASTER_PORT=%u "
           "TORCHELASTIC_RESTART_COUNT=%" PRIu64 ")",
           p->gen.term, node * p->wpn, node * p->wpn + p->wpn - 1, p->world, host,
           p->ranks[0].listen.port, p->restarts);
  return first;
}

/* What changes from one generation to the next: a spare starts without it. */
static const char *const per_generation[] = {"RANK",
                                             "WORLD_SIZE",
                                             "GROUP_RANK",
                                             "GROUP_WORLD_SIZE",
                                             "ROLE_RANK",
                                             "ROLE_WORLD_SIZE",
                                             "MASTER_ADDR",
                                             "MASTER_PORT",
                                             "TORCHELASTIC_RESTART_COUNT",
                                             "TORCHELASTIC_ERROR_FILE",
                                             "EA_GENERATION",
                                             NULL};

int ea__launch_spares_start(ea__launch *L) {
  int first = 0;
  for (uint32_t k = 0; k < L->o.wpn; k++) {
    ea__torch_env e = {.local_rank = k,
                       .local_world = L->o.wpn,
                       .max_restarts = L->o.max_restarts,
                       .run_id = L->run_id,
                       .node_name = L->node_name,
                       .data_dir = L->data_dir};
    char **env = NULL;
    int rc = ea__launch_env(&e, environ, &env);
    if (rc == 0) {
      size_t n = 0, m = 0;
      while (env[n]) n++;
      char **c = calloc(n + 1, sizeof *c);
      for (size_t i = 0; c && i < n; i++)
        if (!in_list(env[i], per_generation)) c[m++] = env[i];
      rc = c ? ea__sup_spare_env(L->sup, k, c) : -ENOMEM;
      free(c);
      ea__env_free(env);
    }
    if (rc && !first) first = rc;
  }
  ea__sup_spares_start(L->sup);
  return first;
}

void ea__launch_stop_all(ea__launch *L, uint32_t grace_ms) {
  L->preparing = false;
  uv_timer_stop(&L->kick);
  stop_slots(L, grace_ms);
}

bool ea__launch_on_exit(ea__launch *L, uint32_t k, int64_t status, int sig) {
  if (k >= L->o.wpn) return true;
  slot *s = &L->s[k];
  bool mine = s->running && !s->stopping;
  s->running = false;
  s->stopping = false;
  if (mine && L->cb.exited) {
    ea__launch_exit x = {
        .local = k, .rank = s->rank, .gen = L->gen, .status = status, .signal = sig};
    L->cb.exited(L->ctx, &x);
  }
  if (L->preparing) uv_timer_start(&L->kick, on_kick, 0, 0);
  return true;
}

uint32_t ea__launch_rank(const ea__launch *L, uint32_t k) {
  return k < L->o.wpn ? L->s[k].rank : UINT32_MAX;
}

const char *ea__launch_master(const ea__launch *L) {
  return L->master;
}

const char *ea__launch_error_file(const ea__launch *L, uint32_t k) {
  return k < L->o.wpn ? L->s[k].error_file : "";
}

static void kick_closed(uv_handle_t *h) {
  ea__launch *L = h->data;
  free(L->node_name);
  free(L->data_dir);
  free(L->run_id);
  free(L->s);
  free(L);
}

void ea__launch_free(ea__launch *L) {
  if (!L || L->closing) return;
  L->closing = true;
  uv_close((uv_handle_t *)&L->kick, kick_closed);
}
