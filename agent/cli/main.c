/* elastic-agent's command line: parse flags into an agent configuration and
 * hand over to agent.c (`run`), run one training worker (`worker`, started
 * by the agent itself), act as a small client of a running agent (`status`,
 * `drain`), inspect checkpoints (`ckpt`), or do one-shot chores (`keygen`,
 * `config`, `version`).
 *
 * Precedence is the usual one: built-in defaults < the job file (--config) <
 * --set section.key=value (in order) < dedicated flags (--log-level, …).  A
 * bad flag or value is a usage error (exit 2) with a message that names it
 * and a hint; a bad job file is a configuration error (exit 1) with the
 * loader's "file:line: key: problem" message; runtime failures exit 1.
 * This is the only file that may call exit().
 */
#include "agent_int.h"
#include "cli.h"

#include "ea_ckpt.h"
#include "ea_log.h"
#include "ea_worker.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXIT_USAGE 2
/* `status` waits this long for an answer: the agent answers from its loop
 * in well under a millisecond unless it is stuck, which is worth saying. */
#define STATUS_TIMEOUT_MS 3000

static const char *prog = "elastic-agent";

/* The help texts are laid out as they print.  `--help` prints them all;
 * `COMMAND --help` (or `help COMMAND`) prints that command's. */
// clang-format off
static void usage_commands(FILE *f) {
  fprintf(f,
"Usage:\n"
"  %1$s [run] [FLAGS] [-- PROGRAM ARG...]   run the agent on this node\n"
"  %1$s status [--data-dir D | --socket PATH] [--json]\n"
"                                             members, generation, workers of a running agent\n"
"  %1$s drain NAME [--data-dir D | --socket PATH]\n"
"                                             re-form the job without member NAME, which\n"
"                                             then stops its workers, leaves and exits 0\n"
"  %1$s worker --ipc-fd N [--config F]  one training worker (the agent starts these)\n"
"  %1$s ckpt ls DIR | show DIR [STEP] | verify DIR [STEP] [--size]\n"
"                                             list, show or verify checkpoints\n"
"  %1$s keygen [FILE]              make a cluster key (64 hex chars; FILE is mode 0600)\n"
"  %1$s config [--config F] [--set K=V]...   print the effective configuration\n"
"  %1$s preflight [--config F] [--join SEEDS] [--key-file K] [--json] [-- PROGRAM...]\n"
"                                             check this node before a run: PASS/WARN/FAIL\n"
"  %1$s version                    print the version\n"
"  %1$s help [COMMAND]             this help, or one command's\n",
          prog);
}

static void usage_run(FILE *f) {
  fprintf(f,
"Flags of `run` (any flag without a command means `run`):\n"
"  --bind ADDR         UDP gossip + TCP push-pull address (default %2$s);\n"
"                      ip:port, [ip6]:port or :port; port 0 picks a free one; an\n"
"                      address given without a port takes port 7000\n"
"  --control-bind ADDR TCP address of the control channel (generations) (default: the\n"
"                      --bind address with the next port, 7001; port 0 when --bind's is 0);\n"
"                      the port is required\n"
"  --advertise ADDR    address other agents should use for us, ip:port, port required\n"
"                      (default: the bind address, or the first non-loopback interface\n"
"                      when bound to 0.0.0.0)\n"
"  --join SEEDS        host:port[,host:port...] of agents already running; a host may\n"
"                      be a DNS name with many addresses (default port 7000). Retried\n"
"                      with backoff until one answers. Omit on the first node.\n"
"                      Until it has joined, this agent starts no job of its own.\n"
"  --bootstrap         with --join: start a job alone (a new cluster) when no seed\n"
"                      answers, instead of waiting to join\n"
"  --name NAME         member name shown in status and logs (default: the hostname)\n"
"  --role ROLE         worker (default) or observer (never becomes controller)\n"
"  --tags K=V,...      free-form tags gossiped with this member, each KEY=VALUE with a\n"
"                      non-empty KEY (default none); a bare word is refused\n"
"  --data-dir DIR      node id, generation, peers, job.yaml, admin socket (default %3$s)\n"
"  --config FILE       YAML job file; see `%1$s config` for every key and default\n"
"  --set SECTION.KEY=VALUE\n"
"                      override one job-file key; repeatable; applied after --config\n"
"  --key-file FILE     cluster key: seal and authenticate all gossip (strongly advised)\n"
"  --log-level LEVEL   debug | info | warn | error (default info; logging.level)\n"
"  --log-format FMT    text | json (default text; logging.format); json lines carry\n"
"                      node, job, event and, where they apply, generation, world, step,\n"
"                      loss and steps_per_s as fields\n"
"  --resume-from CKPT  on a cold start (no live state anywhere), load this checkpoint of\n"
"                      checkpoint.dir: a step number, step-S.gen-G, a path to a step\n"
"                      directory, or latest; a checkpoint that does not verify is an\n"
"                      error, not a fallback. Give it to every agent. Default: the\n"
"                      newest complete one (checkpoint.resume_from_last)\n"
"  --smoke N           a trial run, then a PASS/FAIL report (exit 0 only if all pass):\n"
"                      the built-in trainer trains N steps, commits one checkpoint (into\n"
"                      checkpoint.dir/smoke), restores it into a fresh generation of the\n"
"                      job, verifies it and loads it into a fresh trainer, comparing the\n"
"                      params digests; a program runs N seconds\n"
"                      (or to its end). Give it to every agent (docs/operations.md)\n"
"  -h, --help          this help\n",
          prog, EA__DEFAULT_BIND, EA__DEFAULT_DATA_DIR);
}

static void usage_client(FILE *f) {
  fprintf(f,
"Flags of `status` and `drain`:\n"
"  --data-dir DIR      the running agent's data dir (default %1$s)\n"
"  --socket PATH       its admin socket instead (default DIR/admin.sock)\n"
"  --json              (status) print the raw JSON document\n"
"  -h, --help          this help\n",
          EA__DEFAULT_DATA_DIR);
}

static void usage_worker(FILE *f) {
  fprintf(f,
"Flags of `worker`:\n"
"  --ipc-fd N          the agent's end of the IPC socketpair (the agent passes 3)\n"
"  --config FILE       the job file (the agent passes DATA-DIR/job.yaml, its effective\n"
"                      configuration with every --set applied)\n"
"  -h, --help          this help\n");
}

static void usage_config(FILE *f) {
  fprintf(f,
"Flags of `config`:\n"
"  --config FILE       the job file to load (default: none, the built-in defaults)\n"
"  --set SECTION.KEY=VALUE\n"
"                      override one key; repeatable; applied after --config\n"
"  -h, --help          this help\n"
"Prints the effective configuration as a commented job file; a bad file exits 1\n"
"with every problem it has, one `FILE:LINE: key: problem` line each.\n");
}

static void usage_keygen(FILE *f) {
  fprintf(f,
"Usage: %1$s keygen [FILE]\n"
"  Make a cluster key (64 hex characters): to stdout, or to FILE, created mode 0600\n"
"  and never overwritten. Copy it to every node and pass --key-file FILE.\n",
          prog);
}

static void usage_tail(FILE *f) {
  fprintf(f,
"Examples:\n"
"  %1$s keygen /etc/elastic-agent/cluster.key        # once; copy to every node\n"
"  %1$s run --key-file /etc/elastic-agent/cluster.key                       # first node\n"
"  %1$s run --key-file /etc/elastic-agent/cluster.key --join node1:7000     # the others\n"
"  %1$s status\n"
"  %1$s drain node7                                # scale in: node7 leaves the job\n"
"  %1$s run --bind 127.0.0.1:0 --name n2 --data-dir /tmp/n2 --join 127.0.0.1:17001 \\\n"
"      --config examples/job.yaml --set train.steps=500 --log-level debug\n"
"\n"
"Each agent starts compute.workers_per_node workers and trains the job with whichever\n"
"nodes are alive: when one dies, drains or joins, the controller forms a new\n"
"generation and the surviving workers continue from the step they hold.\n"
"SIGTERM or SIGINT drains the node (the group re-forms without it, bounded by\n"
"runtime.rendezvous_timeout_seconds), stops its workers, leaves the cluster (shown\n"
"as `left`, not `dead`) and exits 0; a second signal skips the drain.\n"
"Exit status 2 means a bad flag or value.\n",
          prog);
}

static void usage(FILE *f) {
  usage_commands(f);
  fputc('\n', f);
  usage_run(f);
  fputc('\n', f);
  usage_client(f);
  fputc('\n', f);
  usage_worker(f);
  fputc('\n', f);
  usage_config(f);
  fputc('\n', f);
  usage_tail(f);
}

/* `elastic-agent` alone: it used to start an agent on 0.0.0.0:7000, which
 * nobody typing the bare name means. */
static void usage_short(FILE *f) {
  fprintf(f,
"Usage: %1$s COMMAND [FLAGS]   (run, status, drain, worker, ckpt, keygen, config, preflight,\n"
"       version)\n"
"       %1$s [run] --join SEEDS [FLAGS]   run the agent; any flag alone means run\n"
"Try '%1$s --help' for everything, or '%1$s COMMAND --help' for one command.\n",
          prog);
}
// clang-format on

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", prog);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry '%s --help' for the list of commands and flags.\n", prog);
  return EXIT_USAGE;
}

/* Copy a flag value into a fixed buffer, refusing to truncate. */
static int set_str(char *dst, size_t cap, const char *flag, const char *v) {
  if (strlen(v) >= cap) return usage_error("%s: value too long (limit %zu bytes)", flag, cap - 1);
  memcpy(dst, v, strlen(v) + 1);
  return 0;
}

/* getopt_long with our own messages: opterr = 0 and this decodes what
 * went wrong. */
static int bad_option(char **argv, int optopt_val, const struct option *longopts) {
  const char *arg = argv[optind - 1];
  if (optopt_val) {
    for (const struct option *o = longopts; o->name; o++)
      if (o->val == optopt_val && o->has_arg == required_argument)
        return usage_error("option '--%s' needs a value", o->name);
    return usage_error("unknown option '-%c'", optopt_val);
  }
  if (arg && strncmp(arg, "--", 2) == 0) {
    char name[64];
    snprintf(name, sizeof name, "%s", arg + 2);
    name[strcspn(name, "=")] = 0;
    for (const struct option *o = longopts; o->name; o++)
      if (strcmp(o->name, name) == 0 && o->has_arg == required_argument)
        return usage_error("option '--%s' needs a value", o->name);
  }
  return usage_error("unknown option '%s'", arg ? arg : "?");
}

/* Seeds are checked for shape here so a typo is a usage error at start,
 * not a join failure retried forever. */
static int check_seeds(const char *s) {
  char copy[4096];
  snprintf(copy, sizeof copy, "%s", s);
  char *save = NULL;
  int n = 0;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ') tok++;
    if (!*tok) continue;
    n++;
    ea_addr a;
    if (ea_addr_parse(tok, 7000, &a) == 0 && !(tok[0] == ':')) continue;
    /* A host name: letters, digits, '-', '.', then an optional :port. */
    const char *colon = strrchr(tok, ':');
    size_t hl = colon ? (size_t)(colon - tok) : strlen(tok);
    bool ok = hl > 0 && tok[0] != '[';
    for (size_t i = 0; ok && i < hl; i++)
      ok = (tok[i] >= 'a' && tok[i] <= 'z') || (tok[i] >= 'A' && tok[i] <= 'Z') ||
           (tok[i] >= '0' && tok[i] <= '9') || tok[i] == '-' || tok[i] == '.' || tok[i] == '_';
    if (ok && colon) {
      char *end;
      long p = strtol(colon + 1, &end, 10);
      ok = colon[1] && !*end && p > 0 && p <= 65535;
    }
    if (!ok) return usage_error("--join: cannot parse seed '%s' (want host:port)", tok);
  }
  if (n == 0) return usage_error("--join: no seed given");
  return 0;
}

/* "ip:port", "[ip6]:port", ":port" have one; "ip", "[ip6]", "::1" do not. */
static bool has_port(const char *s) {
  const char *colon = strrchr(s, ':');
  if (!colon || !colon[1]) return false;
  if (s[0] == '[') return colon > s && colon[-1] == ']';
  return strchr(s, ':') == colon; /* a bare IPv6 address has several */
}

/* --tags K=V,...: each item a KEY=VALUE with a non-empty KEY.  A bare word
 * is refused rather than guessed (a key with no value? a value of which
 * key?); "k=" is a key with an empty value. */
static int check_tags(const char *s) {
  const char *p = s;
  while (*p) {
    size_t n = strcspn(p, ",");
    const char *eq = memchr(p, '=', n);
    if (!eq || eq == p)
      return usage_error(
          "--tags: '%.*s' is not KEY=VALUE (want k=v[,k=v...], e.g. "
          "--tags rack=r1,gpu=h100)",
          (int)n, p);
    p += n + (p[n] == ',');
  }
  return 0;
}

/* ---- run --------------------------------------------------------------------- */

enum {
  OPT_BIND = 1000,
  OPT_ADVERTISE,
  OPT_JOIN,
  OPT_NAME,
  OPT_ROLE,
  OPT_TAGS,
  OPT_DATA_DIR,
  OPT_CONFIG,
  OPT_SET,
  OPT_KEY_FILE,
  OPT_LOG_LEVEL,
  OPT_LOG_FORMAT,
  OPT_SOCKET,
  OPT_JSON,
  OPT_CONTROL_BIND,
  OPT_IPC_FD,
  OPT_RESUME_FROM,
  OPT_SMOKE,
  OPT_BOOTSTRAP,
};

static const struct option run_opts[] = {
    {"bind", required_argument, 0, OPT_BIND},
    {"advertise", required_argument, 0, OPT_ADVERTISE},
    {"control-bind", required_argument, 0, OPT_CONTROL_BIND},
    {"join", required_argument, 0, OPT_JOIN},
    {"name", required_argument, 0, OPT_NAME},
    {"role", required_argument, 0, OPT_ROLE},
    {"tags", required_argument, 0, OPT_TAGS},
    {"data-dir", required_argument, 0, OPT_DATA_DIR},
    {"config", required_argument, 0, OPT_CONFIG},
    {"set", required_argument, 0, OPT_SET},
    {"key-file", required_argument, 0, OPT_KEY_FILE},
    {"log-level", required_argument, 0, OPT_LOG_LEVEL},
    {"log-format", required_argument, 0, OPT_LOG_FORMAT},
    {"resume-from", required_argument, 0, OPT_RESUME_FROM},
    {"smoke", required_argument, 0, OPT_SMOKE},
    {"bootstrap", no_argument, 0, OPT_BOOTSTRAP},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

/* Load --config, then every --set, then the dedicated logging flags; exit
 * code 0, 1 (bad file) or 2 (bad flag value). */
static int build_config(ea_config *cfg, const char *config_path, char **sets, int nsets,
                        const char *log_level, const char *log_format) {
  static char err[16384]; /* every problem of a job file, a line each */
  ea_config_default(cfg);
  if (config_path && *config_path && ea_config_load(cfg, config_path, err, sizeof err) < 0) {
    for (char *line = err, *nl; line; line = nl ? nl + 1 : NULL) {
      nl = strchr(line, '\n');
      fprintf(stderr, "%s: %.*s\n", prog, nl ? (int)(nl - line) : (int)strlen(line), line);
    }
    return 1;
  }
  for (int i = 0; i < nsets; i++) {
    char *eq = strchr(sets[i], '=');
    if (!eq || eq == sets[i]) return usage_error("--set '%s': want section.key=value", sets[i]);
    *eq = 0;
    int rc = ea_config_set(cfg, sets[i], eq + 1, err, sizeof err);
    *eq = '=';
    if (rc < 0) return usage_error("%s", err);
  }
  /* The loader words its errors for --set; say which flag it really was. */
  const char *strip = "--set: ";
  if (log_level && ea_config_set(cfg, "logging.level", log_level, err, sizeof err) < 0)
    return usage_error("--log-level: %s", err + (strncmp(err, strip, 7) == 0 ? 7 : 0));
  if (log_format && ea_config_set(cfg, "logging.format", log_format, err, sizeof err) < 0)
    return usage_error("--log-format: %s", err + (strncmp(err, strip, 7) == 0 ? 7 : 0));
  if (ea_config_validate(cfg, err, sizeof err) < 0) {
    fprintf(stderr, "%s: %s\n", prog, err);
    return 1;
  }
  return 0;
}

/* logging.file, else logging.dir/NAME.log (the directory created), else
 * stderr.  0, or 1 with the reason printed. */
static int setup_logging(const ea_config *cfg, const char *name) {
  char path[EA_PATH_MAX + 80];
  const char *file = cfg->logging.file;
  if (!file[0] && cfg->logging.dir[0]) {
    snprintf(path, sizeof path, "%s", cfg->logging.dir);
    for (char *p = path + 1;; p++) { /* mkdir -p */
      char c = *p;
      if (c && c != '/') continue;
      *p = 0;
      if (mkdir(path, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "%s: logging.dir: cannot create %s: %s\n", prog, path, strerror(errno));
        return 1;
      }
      *p = c;
      if (!c) break;
    }
    snprintf(path, sizeof path, "%s/%s.log", cfg->logging.dir, name);
    file = path;
  }
  if (ea_log_setup(cfg->logging.level, cfg->logging.format, file) < 0) {
    fprintf(stderr, "%s: cannot set up logging to '%s'\n", prog, file[0] ? file : "stderr");
    return 1;
  }
  return 0;
}

static int cmd_run(int argc, char **argv) {
  static ea__agent_opts o; /* large; static keeps it off the stack */
  static ea__smoke smoke;
  ea__agent_opts_default(&o);
  char **sets = calloc((size_t)argc + 1, sizeof *sets);
  int nsets = 0, rc = 0;
  const char *log_level = NULL, *log_format = NULL;
  if (!sets) return 1;
  optind = 1;
  opterr = 0;
  int c;
  while (rc == 0 && (c = getopt_long(argc, argv, "+h", run_opts, NULL)) != -1) {
    switch (c) {
      case OPT_BIND:
        rc = set_str(o.bind, sizeof o.bind, "--bind", optarg);
        break;
      case OPT_ADVERTISE:
        rc = set_str(o.advertise, sizeof o.advertise, "--advertise", optarg);
        break;
      case OPT_CONTROL_BIND:
        rc = set_str(o.control_bind, sizeof o.control_bind, "--control-bind", optarg);
        break;
      case OPT_JOIN:
        rc = set_str(o.join, sizeof o.join, "--join", optarg);
        break;
      case OPT_NAME:
        rc = set_str(o.name, sizeof o.name, "--name", optarg);
        break;
      case OPT_ROLE:
        rc = set_str(o.role, sizeof o.role, "--role", optarg);
        break;
      case OPT_TAGS:
        rc = set_str(o.tags, sizeof o.tags, "--tags", optarg);
        break;
      case OPT_DATA_DIR:
        rc = set_str(o.data_dir, sizeof o.data_dir, "--data-dir", optarg);
        break;
      case OPT_CONFIG:
        rc = set_str(o.config_path, sizeof o.config_path, "--config", optarg);
        break;
      case OPT_KEY_FILE:
        rc = set_str(o.key_file, sizeof o.key_file, "--key-file", optarg);
        break;
      case OPT_SET:
        sets[nsets++] = optarg;
        break;
      case OPT_RESUME_FROM:
        if (!optarg[0] || strpbrk(optarg, "\r\n"))
          rc = usage_error("--resume-from: expected a step, step-S.gen-G, a path or latest");
        else
          rc = set_str(o.resume_from, sizeof o.resume_from, "--resume-from", optarg);
        break;
      case OPT_SMOKE: {
        char *end;
        unsigned long long n = strtoull(optarg, &end, 10);
        if (!*optarg || *end || optarg[0] == '-' || n < 1 || n > 100000000ull)
          rc = usage_error(
              "--smoke: expected a count of steps (or seconds for a program), got '%s'", optarg);
        else
          smoke.n = n, o.smoke = &smoke;
        break;
      }
      case OPT_BOOTSTRAP:
        o.bootstrap = true;
        break;
      case OPT_LOG_LEVEL:
        log_level = optarg;
        break;
      case OPT_LOG_FORMAT:
        log_format = optarg;
        break;
      case 'h':
        fprintf(stdout, "Usage: %s [run] [FLAGS] [-- PROGRAM ARG...]\n\n", prog);
        usage_run(stdout);
        free(sets);
        return 0;
      default:
        rc = bad_option(argv, optopt, run_opts);
        break;
    }
  }
  /* `run [flags] -- PROGRAM ARG…`: the workers' program, exec'd as is. */
  if (rc == 0 && optind < argc && optind > 1 && strcmp(argv[optind - 1], "--") == 0) {
    o.worker_argc = argc - optind;
    o.worker_argv = argv + optind;
  } else if (rc == 0 && optind < argc) {
    rc = usage_error("unexpected argument '%s' (a program goes after --)", argv[optind]);
  } else if (rc == 0 && optind == argc && optind > 1 && strcmp(argv[optind - 1], "--") == 0) {
    rc = usage_error("-- must be followed by the program to run");
  }
  ea_addr probe;
  if (rc == 0 && ea_addr_parse(o.bind, 7000, &probe) < 0)
    rc = usage_error("--bind: cannot parse '%s' (want ip:port, [ip6]:port or :port)", o.bind);
  /* Port 0 (a free one) is explicit; a left-out port would silently mean
   * it here, and a random port is not what someone naming an address wants. */
  if (rc == 0 && o.control_bind[0] && !has_port(o.control_bind))
    rc = usage_error("--control-bind: '%s' has no port (want ip:port; port 0 picks a free one)",
                     o.control_bind);
  if (rc == 0 && o.advertise[0] && !has_port(o.advertise))
    rc = usage_error("--advertise: '%s' has no port (want the ip:port others reach us at)",
                     o.advertise);
  if (rc == 0 && o.tags[0]) rc = check_tags(o.tags);
  if (rc == 0 && o.control_bind[0] && ea_addr_parse(o.control_bind, 0, &probe) < 0)
    rc = usage_error("--control-bind: cannot parse '%s' (want ip:port, [ip6]:port or :port)",
                     o.control_bind);
  if (rc == 0 && o.advertise[0] && ea_addr_parse(o.advertise, 0, &probe) < 0)
    rc = usage_error("--advertise: cannot parse '%s' (want a numeric ip:port)", o.advertise);
  if (rc == 0 && o.join[0]) rc = check_seeds(o.join);
  if (rc == 0 && o.bootstrap && !o.join[0])
    rc = usage_error(
        "--bootstrap: only with --join (an agent without --join starts a new cluster "
        "anyway)");
  if (rc == 0 && (!o.name[0] || strpbrk(o.name, " \t\r\n")))
    rc = usage_error("--name: must be non-empty without spaces, got '%s'", o.name);
  if (rc == 0 && strcmp(o.role, "worker") != 0 && strcmp(o.role, "observer") != 0)
    rc = usage_error("--role: expected worker or observer, got '%s'", o.role);
  if (rc == 0) rc = build_config(&o.cfg, o.config_path, sets, nsets, log_level, log_format);
  free(sets);
  if (rc != 0) return rc;
  if (o.smoke) {
    char err[1024];
    if (ea__smoke_prepare(o.smoke, &o.cfg, o.data_dir, o.worker_argc, o.worker_argv, err,
                          sizeof err) < 0)
      return usage_error("%s", err);
    if (o.resume_from[0])
      return usage_error("--smoke: a smoke run starts fresh; drop --resume-from");
  }
  if (setup_logging(&o.cfg, o.name)) return 1;
  ea_log_set_node(o.name);
  rc = ea__agent_run(&o);
  return o.smoke ? ea__smoke_report(o.smoke, &o.cfg, rc) : rc;
}

/* `status` and `drain NAME`: one line to the agent's admin socket, one JSON
 * document back. */
static int cmd_client(int argc, char **argv, bool drain) {
  static const struct option opts[] = {
      {"data-dir", required_argument, 0, OPT_DATA_DIR},
      {"socket", required_argument, 0, OPT_SOCKET},
      {"json", no_argument, 0, OPT_JSON},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  const char *cmd = drain ? "drain" : "status";
  char data_dir[EA_PATH_MAX] = EA__DEFAULT_DATA_DIR, sock[EA_PATH_MAX + 32] = "";
  bool json = false;
  int c, rc = 0;
  optind = 1;
  opterr = 0;
  /* drain takes its NAME anywhere among the flags: permute. */
  while (rc == 0 && (c = getopt_long(argc, argv, drain ? "h" : "+h", opts, NULL)) != -1) {
    switch (c) {
      case OPT_DATA_DIR:
        rc = set_str(data_dir, sizeof data_dir, "--data-dir", optarg);
        break;
      case OPT_SOCKET:
        rc = set_str(sock, sizeof sock, "--socket", optarg);
        break;
      case OPT_JSON:
        json = true;
        break;
      case 'h':
        if (drain)
          printf(
              "Usage: %s drain NAME [--data-dir D | --socket PATH]\n"
              "  Re-form the job without member NAME, which then stops its workers, leaves\n"
              "  the cluster and exits 0.\n\n",
              prog);
        else
          printf(
              "Usage: %s status [--data-dir D | --socket PATH] [--json]\n"
              "  Members, controller, generation, workers and counters of a running agent.\n\n",
              prog);
        usage_client(stdout);
        return 0;
      default:
        rc = bad_option(argv, optopt, opts);
        break;
    }
  }
  char line[EA_NAME_MAX + 16] = "status";
  if (rc == 0 && drain) {
    if (optind >= argc)
      rc = usage_error("drain: which member? (drain NAME; see `%s status`)", prog);
    else if (!argv[optind][0] || strlen(argv[optind]) >= EA_NAME_MAX ||
             strpbrk(argv[optind], " \t\r\n"))
      rc = usage_error("drain: '%s' is not a member name", argv[optind]);
    else
      snprintf(line, sizeof line, "drain %s", argv[optind++]);
  }
  if (rc == 0 && optind < argc) rc = usage_error("%s: unexpected argument '%s'", cmd, argv[optind]);
  if (rc) return rc;
  if (!sock[0]) snprintf(sock, sizeof sock, "%s/%s", data_dir, EA__ADMIN_SOCK);
  char *resp = NULL, err[EA_PATH_MAX + 256];
  size_t len = 0;
  if (ea__admin_request(sock, line, STATUS_TIMEOUT_MS, &resp, &len, err, sizeof err) < 0) {
    fprintf(stderr, "%s: %s\n", prog, err);
    if (strstr(err, "no agent is running"))
      fprintf(stderr, "%s: start one with `%s run`, or point --data-dir/--socket at its data dir\n",
              prog, prog);
    return 1;
  }
  ea_json *j = NULL;
  if (ea_json_parse(resp, len, &j, err, sizeof err) < 0) {
    fprintf(stderr, "%s: the agent's answer is not JSON: %s\n", prog, err);
    free(resp);
    return 1;
  }
  const ea_json *e = ea_json_get(j, "error");
  if (e) {
    fprintf(stderr, "%s: the agent says: %s\n", prog, e->text ? e->text : "?");
    rc = 1;
  } else if (json) {
    fputs(resp, stdout);
    if (len == 0 || resp[len - 1] != '\n') putchar('\n');
  } else if (drain) {
    ea__cli_scrub(j);
    const char *name = ea_json_str(j, "draining", "?");
    if (ea_json_num(j, "self", 0))
      printf(
          "draining %s (this agent)%s: the group re-forms without it, then it stops its "
          "workers, leaves the cluster and exits\n",
          name, ea_json_num(j, "already", 0) ? ", already on its way out" : "");
    else
      printf(
          "asked %s to drain: the group re-forms without it, then it stops its workers, "
          "leaves the cluster and exits\n",
          name);
  } else {
    ea__cli_scrub(j);
    ea__cli_print_status(j);
  }
  ea_json_free(j);
  free(resp);
  return rc;
}

/* ---- worker, ckpt -------------------------------------------------------------- */

/* `worker --ipc-fd N [--config F]`: the agent starts this with its end of
 * the socketpair; it trains until STOP or until the agent goes away. */
static int cmd_worker(int argc, char **argv) {
  static const struct option opts[] = {
      {"ipc-fd", required_argument, 0, OPT_IPC_FD},
      {"config", required_argument, 0, OPT_CONFIG},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  const char *path = NULL;
  long fd = -1;
  int c, rc = 0;
  optind = 1;
  opterr = 0;
  while (rc == 0 && (c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
    switch (c) {
      case OPT_IPC_FD: {
        char *end;
        fd = strtol(optarg, &end, 10);
        if (!*optarg || *end || fd < 0 || fd > 65535)
          rc = usage_error("--ipc-fd: expected a file descriptor number, got '%s'", optarg);
        break;
      }
      case OPT_CONFIG:
        path = optarg;
        break;
      case 'h':
        printf(
            "Usage: %s worker --ipc-fd N [--config F]\n"
            "  One training worker; the agent starts these (not for people).\n\n",
            prog);
        usage_worker(stdout);
        return 0;
      default:
        rc = bad_option(argv, optopt, opts);
        break;
    }
  }
  if (rc == 0 && optind < argc) rc = usage_error("worker: unexpected argument '%s'", argv[optind]);
  if (rc == 0 && fd < 0)
    rc = usage_error("worker: --ipc-fd is required (the agent starts workers)");
  if (rc) return rc;
  static ea_config cfg;
  rc = build_config(&cfg, path, NULL, 0, NULL, NULL);
  if (rc) return rc;
  /* "n2/w0": the node the agent runs as, and which of its workers.  With
   * logging.dir they append to their node's file. */
  const char *node = getenv("EA_NODE_NAME"), *lr = getenv("EA_LOCAL_RANK");
  if (setup_logging(&cfg, node && *node ? node : "worker")) return 1;
  char tag[EA_NAME_MAX + 16];
  snprintf(tag, sizeof tag, "%s/w%s", node && *node ? node : "worker", lr && *lr ? lr : "0");
  ea_log_set_node(tag);
  rc = ea_worker_main((int)fd, &cfg);
  return rc == 0 ? 0 : 1;
}

static void ckpt_usage(FILE *f) {
  fprintf(f,
          "Usage:\n"
          "  %1$s ckpt ls DIR                 checkpoints in DIR, newest last\n"
          "  %1$s ckpt show DIR [STEP]        one manifest: tensors, shards, hashes\n"
          "  %1$s ckpt verify DIR [STEP] [--size]\n"
          "                                   re-read and hash every shard (--size: lengths only)\n"
          "Exit status: 0 ok, 1 verification failed or nothing found, 2 usage.\n",
          prog);
}

static int cmd_ckpt(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
    ckpt_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : 0;
  }
  return ea_ckpt_cli(argc, argv);
}

/* ---- keygen, config, version ------------------------------------------------- */

static int cmd_keygen(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage_keygen(stdout);
      return 0;
    }
  if (argc > 2) return usage_error("keygen: unexpected argument '%s' (takes one FILE)", argv[2]);
  if (argc == 2 && argv[1][0] == '-') return usage_error("keygen: unknown option '%s'", argv[1]);
  uint8_t key[EA_KEY_BYTES];
  if (getrandom(key, sizeof key, 0) != (ssize_t)sizeof key) {
    fprintf(stderr, "%s: getrandom: %s\n", prog, strerror(errno));
    return 1;
  }
  char hex[2 * EA_KEY_BYTES + 2];
  for (size_t i = 0; i < EA_KEY_BYTES; i++) sprintf(hex + 2 * i, "%02x", key[i]);
  hex[2 * EA_KEY_BYTES] = '\n';
  hex[2 * EA_KEY_BYTES + 1] = 0;
  memset(key, 0, sizeof key);
  if (argc < 2) {
    fputs(hex, stdout);
    return 0;
  }
  /* O_EXCL: overwriting a cluster key by accident would split the cluster. */
  int fd = open(argv[1], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    fprintf(stderr, "%s: cannot create %s: %s%s\n", prog, argv[1], strerror(errno),
            errno == EEXIST ? " (refusing to overwrite an existing key)" : "");
    return 1;
  }
  ssize_t w = write(fd, hex, strlen(hex));
  int e = errno;
  if (w != (ssize_t)strlen(hex) || fsync(fd) < 0 || close(fd) < 0) {
    fprintf(stderr, "%s: writing %s: %s\n", prog, argv[1], strerror(e));
    unlink(argv[1]);
    return 1;
  }
  memset(hex, 0, sizeof hex);
  fprintf(stderr,
          "wrote a new cluster key to %s (mode 0600); copy it to every node and pass "
          "--key-file %s\n",
          argv[1], argv[1]);
  return 0;
}

static int cmd_config(int argc, char **argv) {
  static const struct option opts[] = {
      {"config", required_argument, 0, OPT_CONFIG},
      {"set", required_argument, 0, OPT_SET},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  const char *path = NULL;
  char **sets = calloc((size_t)argc + 1, sizeof *sets);
  int nsets = 0, rc = 0, c;
  if (!sets) return 1;
  optind = 1;
  opterr = 0;
  while (rc == 0 && (c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
    switch (c) {
      case OPT_CONFIG:
        path = optarg;
        break;
      case OPT_SET:
        sets[nsets++] = optarg;
        break;
      case 'h':
        printf("Usage: %s config [--config F] [--set SECTION.KEY=VALUE]...\n\n", prog);
        usage_config(stdout);
        free(sets);
        return 0;
      default:
        rc = bad_option(argv, optopt, opts);
        break;
    }
  }
  if (rc == 0 && optind < argc) rc = usage_error("config: unexpected argument '%s'", argv[optind]);
  static ea_config cfg;
  if (rc == 0) rc = build_config(&cfg, path, sets, nsets, NULL, NULL);
  free(sets);
  if (rc) return rc;
  size_t cap = 1 << 16;
  for (;;) {
    char *buf = malloc(cap);
    if (!buf) return 1;
    int n = ea_config_dump(&cfg, buf, cap);
    if (n >= 0 && (size_t)n < cap) {
      fputs(buf, stdout);
      free(buf);
      return 0;
    }
    free(buf);
    if (n < 0 && n != -ENOSPC && n != -EMSGSIZE) {
      fprintf(stderr, "%s: cannot print the configuration: %s\n", prog, strerror(-n));
      return 1;
    }
    if (cap >= (1u << 24)) return 1;
    cap *= 4;
  }
}

int main(int argc, char **argv) {
  /* A peer closing a socket must be an error return, not a fatal signal. */
  signal(SIGPIPE, SIG_IGN);
  if (argc < 2) {
    usage_short(stderr);
    return EXIT_USAGE;
  }
  if (argv[1][0] == '-') {
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
      printf("elastic-agent %s\n", EA_VERSION);
      return 0;
    }
    return cmd_run(argc, argv);
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "run") == 0) return cmd_run(argc - 1, argv + 1);
  if (strcmp(cmd, "status") == 0) return cmd_client(argc - 1, argv + 1, false);
  if (strcmp(cmd, "drain") == 0) return cmd_client(argc - 1, argv + 1, true);
  if (strcmp(cmd, "worker") == 0) return cmd_worker(argc - 1, argv + 1);
  if (strcmp(cmd, "ckpt") == 0) return cmd_ckpt(argc - 1, argv + 1);
  if (strcmp(cmd, "keygen") == 0) return cmd_keygen(argc - 1, argv + 1);
  if (strcmp(cmd, "config") == 0) return cmd_config(argc - 1, argv + 1);
  if (strcmp(cmd, "preflight") == 0) return ea__preflight_main(argc - 1, argv + 1);
  if (strcmp(cmd, "version") == 0) {
    if (argc > 2 && (strcmp(argv[2], "-h") == 0 || strcmp(argv[2], "--help") == 0)) {
      printf("Usage: %s version\n  Print the version (also: %s --version).\n", prog, prog);
      return 0;
    }
    if (argc > 2) return usage_error("version: unexpected argument '%s'", argv[2]);
    printf("elastic-agent %s\n", EA_VERSION);
    return 0;
  }
  if (strcmp(cmd, "help") == 0) {
    if (argc > 3) return usage_error("help: unexpected argument '%s'", argv[3]);
    if (argc == 3 && strcmp(argv[2], "help") != 0) {
      /* `help CMD` is `CMD --help` */
      return main(3, (char *[]){argv[0], argv[2], "--help", NULL});
    }
    usage(stdout);
    return 0;
  }
  return usage_error(
      "unknown command '%s' (commands: run, status, drain, worker, ckpt, keygen, config, "
      "preflight, version)",
      cmd);
}
