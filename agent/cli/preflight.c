/* preflight.c — `elastic-agent preflight`: check, before a long run, what
 * would otherwise fail minutes or hours into it, and say for each check
 * what to do about it.
 *
 * Each check is one row: PASS, WARN (works, but worth knowing) or FAIL
 * (the agent or the job will not work), with a detail and a hint.  The
 * checks use the agent's own code wherever the agent has it, so that a
 * PASS means what the agent will do works: the config loader, the data-dir
 * lock (node_id.c), the checkpoint directory as the agent resolves it
 * (ckpt_glue.c), the state size from the trainer's layout
 * (ea_state_layout), the gossip push-pull frame and seal (ea_wire.h), the
 * control channel (control.c) for the shared-directory probe (probe.h),
 * the launch mode (launch.c) and the Python path a library program gets.
 *
 * Nothing here runs inside an agent: it is a short-lived client process
 * that blocks where it likes.  What it leaves behind: the data and
 * checkpoint directories when it had to create them (as the agent would);
 * its probe files are removed.
 *
 * Two files: this one holds the command, the local checks, the row table
 * and its printers; preflight_net.c the checks that go over the network
 * (the seeds' push-pull, the shared-directory and clock probes), which add
 * their rows through preflight.h.
 */
#include "agent_int.h"
#include "preflight.h"

#include "ea_log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 2
/* The O_DIRECT probe: 4 MiB is a few blocks of any checkpoint's shard
 * (EA_CKPT block sizes start at 1 MiB), enough to time a write, small
 * enough to cost nothing. */
#define DIRECT_BYTES (4u << 20)
#define DIRECT_ALIGN 4096
/* An fsync slower than this makes every commit (several fsyncs) slow. */
#define FSYNC_SLOW_MS 1000.0
/* `import torch` takes seconds cold; a minute is a hung interpreter. */
#define PY_TIMEOUT_MS 60000

static const char *const st_name[] = {"PASS", "WARN", "FAIL"};

typedef struct {
  char name[24];
  int status;
  char detail[1536];
  char hint[768];
} row;

static row rows[64];
static size_t nrows;

void ea__pf_add(const char *name, int status, const char *hint, const char *fmt, ...) {
  if (nrows == sizeof rows / sizeof rows[0]) return;
  row *r = &rows[nrows++];
  snprintf(r->name, sizeof r->name, "%s", name);
  r->status = status;
  snprintf(r->hint, sizeof r->hint, "%s", hint && status != ST_PASS ? hint : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->detail, sizeof r->detail, fmt, ap);
  va_end(ap);
}

double ea__pf_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *human(double b, char *buf, size_t cap) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) b /= 1024, u++;
  snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
  return buf;
}

int ea__pf_wait_fd(int fd, short ev, double deadline) {
  for (;;) {
    int left = (int)(deadline - ea__pf_mono_ms());
    if (left <= 0) return -ETIMEDOUT;
    struct pollfd p = {.fd = fd, .events = ev};
    int rc = poll(&p, 1, left);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return -errno;
    if (rc > 0) return 0;
  }
}

/* mkdir -p with mode for each created component. */
static int mkdir_p(const char *dir, mode_t mode) {
  char p[EA_PATH_MAX];
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return -ENAMETOOLONG;
  for (char *s = p + 1;; s++) {
    char c = *s;
    if (c && c != '/') continue;
    *s = 0;
    if (mkdir(p, mode) < 0 && errno != EEXIST) return -errno;
    *s = c;
    if (!c) break;
  }
  struct stat st;
  if (stat(dir, &st) < 0) return -errno;
  return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* ---- the configuration ------------------------------------------------------------ */

static int load_config(ea_config *cfg, const char *path, char **sets, int nsets) {
  static char err[16384];
  ea_config_default(cfg);
  if (path && *path && ea_config_load(cfg, path, err, sizeof err) < 0) {
    for (char *e = err; *e; e++)
      if (*e == '\n' && e[1]) *e = ';';
    err[strcspn(err, "\n")] = 0;
    ea__pf_add(
        "config", ST_FAIL,
        "fix the lines named (FILE:LINE: key: problem); `elastic-agent config --config FILE` "
        "prints the effective file",
        "%s", err);
    return -1;
  }
  for (int i = 0; i < nsets; i++) {
    char *eq = strchr(sets[i], '=');
    if (!eq || eq == sets[i]) {
      ea__pf_add("config", ST_FAIL, "--set takes section.key=value",
                 "--set '%s': not section.key=value", sets[i]);
      return -1;
    }
    *eq = 0;
    int rc = ea_config_set(cfg, sets[i], eq + 1, err, sizeof err);
    *eq = '=';
    if (rc < 0) {
      ea__pf_add("config", ST_FAIL, "see `elastic-agent config` for every key and its values", "%s",
                 err);
      return -1;
    }
  }
  if (ea_config_validate(cfg, err, sizeof err) < 0) {
    ea__pf_add("config", ST_FAIL, "fix the value named", "%s", err);
    return -1;
  }
  ea__pf_add("config", ST_PASS, NULL, "%s: loaded (job \"%s\")",
             path && *path ? path : "built-in defaults", cfg->experiment.name);
  return 0;
}

/* ---- the data directory ----------------------------------------------------------- */

static void check_data_dir(const char *dir) {
  char err[EA_PATH_MAX + 256];
  int rc = ea__data_dir_prepare(dir, err, sizeof err);
  if (rc < 0) {
    ea__pf_add("data_dir", ST_FAIL, "give --data-dir a directory this user can create and write",
               "%s", err);
    return;
  }
  char path[EA_PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/.preflight-%ld", dir, (long)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, "x", 1) != 1 || fsync(fd) < 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    unlink(path);
    ea__pf_add("data_dir", ST_FAIL,
               "the agent writes its node id, generation and admin socket there",
               "%s is not writable: %s", dir, strerror(e));
    return;
  }
  close(fd);
  unlink(path);
  int lock = -1;
  rc = ea__data_dir_lock(dir, &lock, err, sizeof err);
  if (rc == -EBUSY) {
    ea__pf_add(
        "data_dir", ST_FAIL,
        "each agent needs a data dir of its own: stop the agent that holds it, or give this one "
        "another --data-dir",
        "%s", err);
    return;
  }
  if (rc < 0) {
    ea__pf_add("data_dir", ST_FAIL, "the agent locks DIR/lock at start", "%s", err);
    return;
  }
  close(lock);
  ea__pf_add("data_dir", ST_PASS, NULL, "%s: writable, not locked by another agent", dir);
}

/* ---- the checkpoint directory ----------------------------------------------------- */

/* Write DIRECT_BYTES with O_DIRECT (buffered when the file system refuses
 * it), then fsync; times both. */
static void check_ckpt_io(const char *dir) {
  char path[EA_PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/.preflight-io-%ld", dir, (long)getpid());
  void *buf = NULL;
  if (posix_memalign(&buf, DIRECT_ALIGN, DIRECT_BYTES) != 0) {
    ea__pf_add("ckpt_io", ST_FAIL, NULL, "out of memory");
    return;
  }
  memset(buf, 0x5a, DIRECT_BYTES);
  bool direct = true;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0600);
  int derr = 0;
  if (fd < 0 && errno == EINVAL) {
    derr = errno;
    direct = false;
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  }
  if (fd < 0) {
    int e = errno;
    free(buf);
    ea__pf_add("ckpt_dir", ST_FAIL,
               "checkpoint.dir must be writable by the agent's user on every node",
               "%s is not writable: %s", dir, strerror(e));
    return;
  }
  double t0 = ea__pf_mono_ms();
  ssize_t w = write(fd, buf, DIRECT_BYTES);
  if (w < 0 && direct && errno == EINVAL) {
    /* Some file systems accept the flag and refuse the write. */
    derr = EINVAL;
    direct = false;
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_DIRECT);
    t0 = ea__pf_mono_ms();
    w = write(fd, buf, DIRECT_BYTES);
  }
  int we = errno;
  double t1 = ea__pf_mono_ms();
  int fs = w == (ssize_t)DIRECT_BYTES ? fsync(fd) : -1;
  int fe = errno;
  double t2 = ea__pf_mono_ms();
  close(fd);
  unlink(path);
  free(buf);
  if (w != (ssize_t)DIRECT_BYTES) {
    ea__pf_add("ckpt_io", ST_FAIL, "the checkpoint writer needs to write whole shards there",
               "writing %u MiB in %s failed: %s", DIRECT_BYTES >> 20, dir,
               w < 0 ? strerror(we) : "short write (disk full?)");
    return;
  }
  if (fs < 0) {
    ea__pf_add("ckpt_io", ST_FAIL, "a checkpoint is durable only after fsync",
               "fsync in %s failed: %s", dir, strerror(fe));
    return;
  }
  double mbps = (DIRECT_BYTES / 1048576.0) / ((t1 - t0) / 1e3 > 1e-6 ? (t1 - t0) / 1e3 : 1e-6);
  if (!direct) {
    ea__pf_add(
        "ckpt_io", ST_WARN,
        "the writer falls back to buffered writes here (tmpfs and some network file systems "
        "refuse O_DIRECT): checkpoints work, through the page cache",
        "O_DIRECT refused (%s); buffered write of %u MiB %.1f ms (%.0f MiB/s), fsync %.1f ms",
        strerror(derr), DIRECT_BYTES >> 20, t1 - t0, mbps, t2 - t1);
    return;
  }
  if (t2 - t1 > FSYNC_SLOW_MS) {
    ea__pf_add(
        "ckpt_io", ST_WARN,
        "every commit fsyncs shards, the manifest and the directory: expect slow checkpoints "
        "(checkpoint.timeout_seconds raises storage_timeout)",
        "O_DIRECT write of %u MiB %.1f ms (%.0f MiB/s), fsync %.1f ms: slow", DIRECT_BYTES >> 20,
        t1 - t0, mbps, t2 - t1);
    return;
  }
  ea__pf_add("ckpt_io", ST_PASS, NULL,
             "O_DIRECT write of %u MiB %.1f ms (%.0f MiB/s), fsync %.1f ms", DIRECT_BYTES >> 20,
             t1 - t0, mbps, t2 - t1);
}

static void check_ckpt_space(const ea_config *cfg, const char *dir, ea__mode mode) {
  struct statvfs vs;
  if (statvfs(dir, &vs) < 0) {
    ea__pf_add("ckpt_space", ST_WARN, NULL, "statvfs %s: %s", dir, strerror(errno));
    return;
  }
  double avail = (double)vs.f_bavail * (double)vs.f_frsize;
  char a[32], need_s[32], one[32];
  uint32_t keep = cfg->checkpoint.keep_last;
  if (mode != EA__MODE_BUILTIN) {
    ea__pf_add(
        "ckpt_space", ST_WARN,
        "a user program's state size is known only when it checkpoints; make sure "
        "checkpoint.keep_last + 1 of them fit",
        "%s free in %s; the state size of a user program is unknown (keep_last %u + 1 needed)",
        human(avail, a, sizeof a), dir, keep);
    return;
  }
  ea_model_dims d = {.context = cfg->train.context,
                     .embed_dim = cfg->train.embed_dim,
                     .hidden = cfg->train.hidden,
                     .layers = cfg->train.layers};
  uint64_t total = 0;
  if (ea_state_layout(&d, &total, NULL) < 0) {
    ea__pf_add("ckpt_space", ST_FAIL, "check train.context, embed_dim, hidden, layers",
               "the model's dimensions are out of range");
    return;
  }
  /* keep_last complete ones stay while the next is written. */
  double need = (double)total * (keep + 1);
  if (avail < need) {
    ea__pf_add("ckpt_space", ST_FAIL,
               "free space in checkpoint.dir, lower checkpoint.keep_last, or point checkpoint.dir "
               "elsewhere",
               "%s free in %s, %s needed: %u × %s (keep_last %u + the one being written)",
               human(avail, a, sizeof a), dir, human(need, need_s, sizeof need_s), keep + 1,
               human((double)total, one, sizeof one), keep);
    return;
  }
  ea__pf_add("ckpt_space", ST_PASS, NULL, "%s free, %s needed: %u × %s (keep_last %u + 1)",
             human(avail, a, sizeof a), human(need, need_s, sizeof need_s), keep + 1,
             human((double)total, one, sizeof one), keep);
}

/* ---- ports ---------------------------------------------------------------------------- */

static void check_bind(const char *name, const char *flag, const char *spec, uint16_t dflt,
                       bool udp_too) {
  ea_addr a;
  if (ea_addr_parse(spec, dflt, &a) < 0) {
    ea__pf_add(name, ST_FAIL, flag, "cannot parse '%s' (want ip:port)", spec);
    return;
  }
  struct sockaddr_storage ss;
  socklen_t sl = ea_addr_to_sockaddr(&a, &ss);
  char as[64];
  ea_addr_str(&a, as, sizeof as);
  for (int k = 0; k < (udp_too ? 2 : 1); k++) {
    int type = k == 0 ? SOCK_STREAM : SOCK_DGRAM;
    int s = socket(ss.ss_family, type | SOCK_CLOEXEC, 0);
    if (s < 0) {
      ea__pf_add(name, ST_FAIL, NULL, "socket: %s", strerror(errno));
      return;
    }
    /* libuv sets SO_REUSEADDR on TCP listeners: a port in TIME_WAIT binds. */
    int one = 1;
    if (type == SOCK_STREAM) setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc = bind(s, (struct sockaddr *)&ss, sl);
    int e = errno;
    if (rc == 0 && type == SOCK_STREAM) rc = listen(s, 1), e = errno;
    close(s);
    if (rc < 0) {
      char hint[256];
      snprintf(hint, sizeof hint,
               e == EADDRINUSE
                   ? "something listens there already (an agent running on this node?): "
                     "stop it, or choose another port with %s"
               : e == EADDRNOTAVAIL ? "that address is not on this machine: check %s"
               : e == EACCES        ? "ports below 1024 need privileges: choose another with %s"
                                    : "check %s",
               flag);
      ea__pf_add(name, ST_FAIL, hint, "%s %s: %s", type == SOCK_STREAM ? "tcp" : "udp", as,
                 strerror(e));
      return;
    }
  }
  ea__pf_add(name, ST_PASS, NULL, "%s%s can be bound", udp_too ? "udp+tcp " : "tcp ", as);
}

/* ---- GPUs and NCCL ---------------------------------------------------------------- */

static int count_gpus(void) {
  int n = 0;
  for (int i = 0; i < 64; i++) {
    char p[32];
    snprintf(p, sizeof p, "/dev/nvidia%d", i);
    if (access(p, F_OK) == 0) n++;
  }
  return n;
}

static void check_gpu(const ea_config *cfg, ea__mode mode, bool have_prog) {
  const char *b = cfg->distributed.backend;
  bool ctl = access("/dev/nvidiactl", F_OK) == 0;
  int gpus = ctl ? count_gpus() : 0;
  bool built = ea_comm_nccl_available();
  bool want_nccl = strcmp(b, "nccl") == 0;
  if (strcmp(b, "auto") == 0) /* as the agent picks (agent.c, pick_backend) */
    want_nccl = mode != EA__MODE_LIBRARY && have_prog && ctl && built;
  if (!want_nccl) {
    ea__pf_add("gpu", ST_WARN,
               "the tcp backend runs on CPUs; set distributed.backend: nccl for GPUs",
               "backend %s%s: GPUs not needed, not checked (%d NVIDIA device%s here, NCCL %s)", b,
               strcmp(b, "auto") == 0 ? " (→ tcp)" : "", gpus, gpus == 1 ? "" : "s",
               built ? "built in" : "not built in");
    return;
  }
  if (!built) {
    ea__pf_add("gpu", ST_FAIL,
               "rebuild with CUDA and NCCL found (make CUDA_HOME=/usr/local/cuda), or use "
               "distributed.backend: tcp",
               "distributed.backend nccl, but this binary was built without NCCL");
    return;
  }
  if (!ctl || gpus == 0) {
    ea__pf_add("gpu", ST_FAIL,
               "no GPU is visible here (no /dev/nvidiactl): install the NVIDIA driver, expose the "
               "devices to the container, or use distributed.backend: tcp on CPU nodes",
               "distributed.backend nccl, but no NVIDIA GPU on this node");
    return;
  }
  if ((uint32_t)gpus < cfg->compute.workers_per_node) {
    ea__pf_add("gpu", ST_FAIL, "one worker per GPU: lower compute.workers_per_node",
               "%d GPU%s for compute.workers_per_node %u", gpus, gpus == 1 ? "" : "s",
               cfg->compute.workers_per_node);
    return;
  }
  ea__pf_add("gpu", ST_PASS, NULL, "%d NVIDIA GPU%s, NCCL built in, %u workers per node", gpus,
             gpus == 1 ? "" : "s", cfg->compute.workers_per_node);
}

/* ---- the program ------------------------------------------------------------------- */

/* PATH lookup as execvp does it: the resolved path into out. */
static bool resolve_cmd(const char *cmd, char *out, size_t cap) {
  if (strchr(cmd, '/')) {
    snprintf(out, cap, "%s", cmd);
    struct stat st;
    return stat(cmd, &st) == 0 && S_ISREG(st.st_mode) && access(cmd, X_OK) == 0;
  }
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  char copy[8192];
  snprintf(copy, sizeof copy, "%s", path);
  char *save = NULL;
  for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    snprintf(out, cap, "%s/%s", *d ? d : ".", cmd);
    struct stat st;
    if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) return true;
  }
  return false;
}

/* The program's first word: argv[0], or compute.worker_command's first
 * word that is not a VAR=value assignment or `exec`. */
static void first_word(const ea_config *cfg, int argc, char **argv, char *out, size_t cap) {
  out[0] = 0;
  if (argc > 0) {
    snprintf(out, cap, "%s", argv[0]);
    return;
  }
  const char *p = cfg->compute.worker_command;
  for (;;) {
    while (*p == ' ' || *p == '\t') p++;
    size_t n = strcspn(p, " \t");
    if (n == 0) return;
    bool assign = memchr(p, '=', n) && p[0] != '=';
    if (!assign && !(n == 4 && strncmp(p, "exec", 4) == 0)) {
      snprintf(out, cap, "%.*s", (int)n, p);
      return;
    }
    p += n;
  }
}

/* Run PY -c CODE with extra PYTHONPATH: 0 ok, else the exit status (or -1
 * on timeout) with the last line of its output in last. */
static int run_python(const char *py, const char *code, const char *pypath, char *last,
                      size_t cap) {
  int pfd[2];
  last[0] = 0;
  if (pipe2(pfd, O_CLOEXEC) < 0) return snprintf(last, cap, "pipe: %s", strerror(errno)), 1;
  pid_t pid = fork();
  if (pid < 0) {
    close(pfd[0]), close(pfd[1]);
    return snprintf(last, cap, "fork: %s", strerror(errno)), 1;
  }
  if (pid == 0) {
    dup2(pfd[1], 1);
    dup2(pfd[1], 2);
    if (pypath && *pypath) {
      const char *old = getenv("PYTHONPATH");
      char *pp = NULL;
      if (asprintf(&pp, "%s%s%s", pypath, old && *old ? ":" : "", old && *old ? old : "") >= 0)
        setenv("PYTHONPATH", pp, 1);
    }
    execlp(py, py, "-c", code, (char *)NULL);
    dprintf(1, "cannot run %s: %s\n", py, strerror(errno));
    _exit(127);
  }
  close(pfd[1]);
  char out[8192];
  size_t got = 0;
  double deadline = ea__pf_mono_ms() + PY_TIMEOUT_MS;
  bool timed_out = false;
  for (;;) {
    if (ea__pf_wait_fd(pfd[0], POLLIN, deadline) < 0) {
      timed_out = true;
      break;
    }
    char chunk[1024];
    ssize_t r = read(pfd[0], chunk, sizeof chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    for (ssize_t i = 0; i < r; i++) { /* keep the tail */
      if (got == sizeof out - 1) memmove(out, out + 1, --got);
      out[got++] = chunk[i];
    }
  }
  close(pfd[0]);
  if (timed_out) kill(pid, SIGKILL);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  out[got] = 0;
  while (got > 0 && (out[got - 1] == '\n' || out[got - 1] == '\r')) out[--got] = 0;
  char *nl = strrchr(out, '\n');
  snprintf(last, cap, "%.*s", (int)(cap - 1), nl ? nl + 1 : out);
  if (timed_out) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void check_import(const char *py, const char *module, const char *pypath, const char *hint) {
  char code[256], last[512];
  snprintf(code, sizeof code, "import %s, sys; print(getattr(%s, '__version__', 'ok'))", module,
           module);
  double t0 = ea__pf_mono_ms();
  int rc = run_python(py, code, pypath, last, sizeof last);
  char name[24];
  snprintf(name, sizeof name, "import_%s", module);
  if (rc == 0)
    ea__pf_add(name, ST_PASS, NULL, "%s: import %s works (%s, %.1f s)", py, module, last,
               (ea__pf_mono_ms() - t0) / 1e3);
  else if (rc < 0)
    ea__pf_add(name, ST_FAIL, hint, "%s: import %s did not finish in %d s", py, module,
               PY_TIMEOUT_MS / 1000);
  else
    ea__pf_add(name, ST_FAIL, hint, "%s: import %s failed (exit %d): %s", py, module, rc, last);
}

static void check_program(const ea_config *cfg, int argc, char **argv, ea__mode *mode_out,
                          bool *have_prog) {
  char err[512];
  ea__mode mode;
  *have_prog = cfg->compute.worker_command[0] || argc > 0;
  if (ea__launch_mode(cfg, argc, argv, &mode, err, sizeof err) < 0) {
    ea__pf_add("program", ST_FAIL, "compute.protocol and the program must agree (docs/torchrun.md)",
               "%s", err);
    *mode_out = EA__MODE_BUILTIN;
    return;
  }
  *mode_out = mode;
  if (mode == EA__MODE_BUILTIN) {
    struct stat st;
    if (stat(cfg->train.data, &st) < 0)
      ea__pf_add("program", ST_FAIL,
                 "train.data names the file or directory the built-in trainer reads",
                 "built-in trainer: train.data %s: %s", cfg->train.data, strerror(errno));
    else
      ea__pf_add("program", ST_PASS, NULL, "built-in trainer (this binary), train.data %s",
                 cfg->train.data);
    return;
  }
  char word[EA_PATH_MAX], path[EA_PATH_MAX + 256];
  first_word(cfg, argc, argv, word, sizeof word);
  if (!word[0]) {
    ea__pf_add("program", ST_FAIL, NULL, "compute.worker_command is empty");
    return;
  }
  if (!resolve_cmd(word, path, sizeof path)) {
    ea__pf_add("program", ST_FAIL,
               "the agent starts the program with the PATH it has: give a full path, or install it",
               "%s mode: '%s' %s", ea__mode_name(mode), word,
               strchr(word, '/') ? "is not an executable file" : "is not found in PATH");
    return;
  }
  ea__pf_add("program", ST_PASS, NULL, "%s mode: %s → %s", ea__mode_name(mode), word, path);
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  if (strncmp(base, "python", 6) != 0) {
    ea__pf_add("python", ST_WARN, NULL,
               "%s is not a python interpreter: `import torch` not checked", base);
    return;
  }
  check_import(path, "torch", NULL,
               "install PyTorch for this interpreter (Debian: apt-get install python3-torch; "
               "else pip), or run the program with the interpreter that has it");
  if (mode == EA__MODE_LIBRARY) {
    char dir[EA_PATH_MAX] = "";
    (void)ea__launch_python_home(dir, sizeof dir);
    check_import(path, "elastic_agent", dir,
                 dir[0] ? "the package next to this binary does not import: reinstall (make "
                          "install) or set EA_PYTHONPATH"
                        : "python/elastic_agent is not next to this binary (make install puts "
                          "it in PREFIX/lib/elastic-agent/python), or set EA_PYTHONPATH");
  }
}

/* ---- output ------------------------------------------------------------------------ */

static void print_table(void) {
  size_t counts[3] = {0};
  for (size_t i = 0; i < nrows; i++) counts[rows[i].status]++;
  for (size_t i = 0; i < nrows; i++) {
    const row *r = &rows[i];
    printf("%-4s  %-14s %s\n", st_name[r->status], r->name, r->detail);
    if (r->hint[0]) printf("      %-14s hint: %s\n", "", r->hint);
  }
  printf("\npreflight: %zu passed, %zu warnings, %zu failed\n", counts[ST_PASS], counts[ST_WARN],
         counts[ST_FAIL]);
}

static int print_json(void) {
  json_t *doc = json_object(), *arr = json_array();
  size_t counts[3] = {0};
  for (size_t i = 0; i < nrows; i++) {
    counts[rows[i].status]++;
    json_t *o = json_object();
    json_object_set_new(o, "check", json_string(rows[i].name));
    json_object_set_new(o, "status", json_string(st_name[rows[i].status]));
    /* details can hold names from the network: jansson refuses invalid
     * UTF-8, so fall back to a lossless-enough byte copy */
    json_t *d = json_string(rows[i].detail);
    json_object_set_new(o, "detail", d ? d : json_string("(not UTF-8)"));
    json_object_set_new(o, "hint", rows[i].hint[0] ? json_string(rows[i].hint) : json_null());
    json_array_append_new(arr, o);
  }
  json_object_set_new(doc, "ok", json_boolean(counts[ST_FAIL] == 0));
  json_object_set_new(doc, "passed", json_integer((json_int_t)counts[ST_PASS]));
  json_object_set_new(doc, "warnings", json_integer((json_int_t)counts[ST_WARN]));
  json_object_set_new(doc, "failed", json_integer((json_int_t)counts[ST_FAIL]));
  json_object_set_new(doc, "checks", arr);
  char *s = json_dumps(doc, JSON_INDENT(2));
  json_decref(doc);
  if (!s) return -ENOMEM;
  puts(s);
  free(s);
  return 0;
}

/* ---- the command ------------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "Usage: elastic-agent preflight [--config F] [--set K=V]... [--data-dir D]\n"
          "                               [--bind ADDR] [--control-bind ADDR]\n"
          "                               [--join SEEDS] [--key-file K] [--json]\n"
          "                               [-- PROGRAM ARG...]\n"
          "  Check this node before a run, with the flags `run` would get: the job file, the\n"
          "  data dir (writable, not locked), checkpoint.dir (created, writable, O_DIRECT\n"
          "  write and fsync timed, room for keep_last + 1 checkpoints), the ports, and with\n"
          "  --join: that the seeds answer and accept our key, that every agent sees this\n"
          "  checkpoint.dir, and the clock offset to them; GPUs and NCCL when the backend\n"
          "  needs them; the worker program (PATH lookup; `import torch`, and `import\n"
          "  elastic_agent` in library mode).  One row per check: PASS, WARN or FAIL, with a\n"
          "  hint.\n"
          "  --json              the rows as a JSON document\n"
          "  -h, --help          this help\n"
          "Exit status: 0 nothing failed (warnings allowed), 1 a check failed, 2 usage.\n");
}

int ea__preflight_main(int argc, char **argv) {
  enum { O_CONFIG = 1000, O_SET, O_DATA, O_BIND, O_CBIND, O_JOIN, O_KEY, O_JSON };
  static const struct option opts[] = {
      {"config", required_argument, 0, O_CONFIG},
      {"set", required_argument, 0, O_SET},
      {"data-dir", required_argument, 0, O_DATA},
      {"bind", required_argument, 0, O_BIND},
      {"control-bind", required_argument, 0, O_CBIND},
      {"join", required_argument, 0, O_JOIN},
      {"key-file", required_argument, 0, O_KEY},
      {"json", no_argument, 0, O_JSON},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  const char *config = NULL, *data_dir = EA__DEFAULT_DATA_DIR, *bind = EA__DEFAULT_BIND;
  const char *cbind = NULL, *join = NULL, *key_file = NULL;
  bool json = false;
  char **sets = calloc((size_t)argc + 1, sizeof *sets);
  int nsets = 0, c;
  if (!sets) return 1;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
    switch (c) {
      case O_CONFIG:
        config = optarg;
        break;
      case O_SET:
        sets[nsets++] = optarg;
        break;
      case O_DATA:
        data_dir = optarg;
        break;
      case O_BIND:
        bind = optarg;
        break;
      case O_CBIND:
        cbind = optarg;
        break;
      case O_JOIN:
        join = optarg;
        break;
      case O_KEY:
        key_file = optarg;
        break;
      case O_JSON:
        json = true;
        break;
      case 'h':
        usage(stdout);
        free(sets);
        return 0;
      default:
        fprintf(stderr, "elastic-agent preflight: %s '%s'\n",
                optopt ? "bad or incomplete option" : "unknown option", argv[optind - 1]);
        fprintf(stderr, "Try 'elastic-agent preflight --help'.\n");
        free(sets);
        return EXIT_USAGE;
    }
  }
  int pargc = 0;
  char **pargv = NULL;
  if (optind < argc && optind > 1 && strcmp(argv[optind - 1], "--") == 0) {
    pargc = argc - optind;
    pargv = argv + optind;
  } else if (optind < argc) {
    fprintf(stderr, "elastic-agent preflight: unexpected argument '%s' (a program goes after --)\n",
            argv[optind]);
    free(sets);
    return EXIT_USAGE;
  }
  if (join && !*join) {
    fprintf(stderr, "elastic-agent preflight: --join: no seed given\n");
    free(sets);
    return EXIT_USAGE;
  }
  /* Our own lines only: the agent's helpers log nothing we want here. */
  ea_log_setup("error", "text", "");

  uint8_t key[EA_KEY_BYTES];
  bool have_key = false;
  static ea__agent_opts o;
  ea__agent_opts_default(&o);
  int rc = load_config(&o.cfg, config, sets, nsets);
  free(sets);
  if (rc == 0 && key_file) {
    const char *kerr = "?";
    if (ea_wire_load_key(key_file, key, &kerr) < 0)
      ea__pf_add("key", ST_FAIL,
                 "make one with `elastic-agent keygen FILE` and copy it to every node",
                 "--key-file %s: %s", key_file, kerr);
    else
      have_key = true, ea__pf_add("key", ST_PASS, NULL, "%s: a cluster key", key_file);
  } else if (rc == 0) {
    ea__pf_add(
        "key", ST_WARN,
        "without a cluster key anyone who can reach the gossip port can join: `elastic-agent "
        "keygen FILE`, then --key-file FILE on every node",
        "no --key-file: gossip is not authenticated");
  }
  if (rc == 0) {
    snprintf(o.data_dir, sizeof o.data_dir, "%s", data_dir);
    check_data_dir(data_dir);
    ea__mode mode = EA__MODE_BUILTIN;
    bool have_prog = false;
    check_program(&o.cfg, pargc, pargv, &mode, &have_prog);
    char ckdir[EA_PATH_MAX], err[512];
    bool ck_ok = false;
    if (ea__agent_ckpt_dir_resolve(&o, ckdir, sizeof ckdir, err, sizeof err) < 0) {
      ea__pf_add("ckpt_dir", ST_FAIL, "shorten checkpoint.dir", "%s", err);
    } else if ((rc = mkdir_p(ckdir, 0755)) < 0) {
      ea__pf_add("ckpt_dir", ST_FAIL,
                 "checkpoint.dir must exist or be creatable by the agent's user on every node",
                 "cannot create %s: %s", ckdir, strerror(-rc));
    } else {
      ck_ok = true;
      ea__pf_add(
          "ckpt_dir", ST_PASS, NULL, "%s exists%s", ckdir,
          o.cfg.checkpoint.dir[0] ? "" : " (the default: DATA_DIR/checkpoints, this node's own)");
      check_ckpt_io(ckdir);
      check_ckpt_space(&o.cfg, ckdir, mode);
    }
    rc = 0;
    /* Ports: as the agent derives them (agent.c: control = gossip port + 1). */
    check_bind("gossip_port", "--bind", bind, 7000, true);
    char cb[300];
    if (!cbind) {
      ea_addr g;
      if (ea_addr_parse(bind, 7000, &g) == 0) {
        if (g.port) g.port++;
        ea_addr_str(&g, cb, sizeof cb);
        cbind = cb;
      }
    }
    if (cbind) check_bind("control_port", "--control-bind", cbind, 0, false);
    if (o.cfg.observability.metrics_listen[0])
      check_bind("metrics_port", "observability.metrics_listen", o.cfg.observability.metrics_listen,
                 9400, false);
    check_gpu(&o.cfg, mode, have_prog);
    if (join) {
      static ea__pf_seed seeds[16];
      size_t ns = ea__pf_check_seeds(join, have_key ? key : NULL, seeds, 16);
      if (ck_ok) ea__pf_check_shared(ckdir, have_key ? key : NULL, seeds, ns);
      for (size_t i = 0; i < ns; i++) free(seeds[i].ups);
    }
  }
  memset(key, 0, sizeof key);
  if (json) {
    if (print_json() < 0) return 1;
  } else {
    print_table();
  }
  for (size_t i = 0; i < nrows; i++)
    if (rows[i].status == ST_FAIL) return 1;
  return 0;
}
