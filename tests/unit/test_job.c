/* Check suite for the pure pieces of the user-program support: the launch
 * mode and the keys a mode refuses or warns about (agent/job/launch.c), the
 * torchrun environment a worker gets, the MASTER_PORT picker, the job's exit
 * codes and failure lines, the torchelastic error-file parser (agent/job/job.c),
 * the job messages' codec (agent/job/job_wire.c) and the output line splitter
 * (agent/job/output.c).  The processes themselves are tested end to end by
 * tests/e2e/test_torchrun.sh and test_job.sh. */
#include "job.h"
#include "launch.h"
#include "link.h"
#include "output.h"
#include "supervisor.h"

#include "ea_wire.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- launch mode and keys --------------------------------------------------------- */

START_TEST(mode_from_protocol_and_program) {
  ea_config c;
  ea_config_default(&c);
  char err[512];
  ea__mode m;
  char *argv[] = {"python3", "train.py", NULL};
  ck_assert_int_eq(ea__launch_mode(&c, 0, NULL, &m, err, sizeof err), 0);
  ck_assert_int_eq(m, EA__MODE_BUILTIN);
  ck_assert_int_eq(ea__launch_mode(&c, 2, argv, &m, err, sizeof err), 0);
  ck_assert_int_eq(m, EA__MODE_TORCHRUN); /* auto with a program */
  snprintf(c.compute.worker_command, sizeof c.compute.worker_command, "python3 train.py");
  ck_assert_int_eq(ea__launch_mode(&c, 0, NULL, &m, err, sizeof err), 0);
  ck_assert_int_eq(m, EA__MODE_TORCHRUN);
  /* given twice */
  ck_assert_int_eq(ea__launch_mode(&c, 2, argv, &m, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "the program is given twice"));
  snprintf(c.compute.protocol, sizeof c.compute.protocol, "library");
  ck_assert_int_eq(ea__launch_mode(&c, 0, NULL, &m, err, sizeof err), 0);
  ck_assert_int_eq(m, EA__MODE_LIBRARY);
  snprintf(c.compute.protocol, sizeof c.compute.protocol, "builtin");
  ck_assert_int_eq(ea__launch_mode(&c, 0, NULL, &m, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "compute.protocol builtin runs the built-in trainer"));
  c.compute.worker_command[0] = 0;
  snprintf(c.compute.protocol, sizeof c.compute.protocol, "torchrun");
  ck_assert_int_eq(ea__launch_mode(&c, 0, NULL, &m, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "compute.protocol torchrun needs a program"));
  ck_assert_str_eq(ea__mode_name(EA__MODE_TORCHRUN), "torchrun");
  ck_assert_str_eq(ea__mode_name(EA__MODE_LIBRARY), "library");
  ck_assert_str_eq(ea__mode_name(EA__MODE_BUILTIN), "builtin");
}
END_TEST

START_TEST(keys_that_do_nothing) {
  ea_config c;
  ea_config_default(&c);
  char warn[1024], err[512];
  ck_assert_int_eq(
      ea__launch_check_keys(&c, EA__MODE_TORCHRUN, false, warn, sizeof warn, err, sizeof err), 0);
  ck_assert_str_eq(warn, ""); /* defaults: nothing to say */
  ck_assert_int_eq(
      ea__launch_check_keys(&c, EA__MODE_TORCHRUN, true, warn, sizeof warn, err, sizeof err),
      -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "--resume-from names a checkpoint of the built-in trainer"));
  ck_assert_int_eq(
      ea__launch_check_keys(&c, EA__MODE_BUILTIN, true, warn, sizeof warn, err, sizeof err), 0);
  /* a library program's checkpoints go through the agents: --resume-from names one */
  ck_assert_int_eq(
      ea__launch_check_keys(&c, EA__MODE_LIBRARY, true, warn, sizeof warn, err, sizeof err), 0);
  ck_assert_int_eq(ea_config_set(&c, "train.steps", "10", err, sizeof err), 0);
  ck_assert_int_eq(ea_config_set(&c, "checkpoint.save_interval_steps", "5", err, sizeof err), 0);
  ck_assert_int_eq(ea_config_set(&c, "distributed.global_batch", "128", err, sizeof err), 0);
  ck_assert_int_eq(
      ea__launch_check_keys(&c, EA__MODE_TORCHRUN, false, warn, sizeof warn, err, sizeof err), 0);
  ck_assert_msg(strstr(warn, "train.steps do nothing in torchrun mode (the program trains itself)"),
                "%s", warn);
  ck_assert_msg(strstr(warn, "checkpoint.save_interval_steps do nothing in torchrun mode"), "%s",
                warn);
  ck_assert_msg(strstr(warn, "distributed.global_batch do nothing in torchrun mode"), "%s", warn);
  /* the built-in trainer uses all of them */
  ck_assert_int_eq(
      ea__launch_check_keys(&c, EA__MODE_BUILTIN, false, warn, sizeof warn, err, sizeof err), 0);
  ck_assert_str_eq(warn, "");
  ck_assert_int_eq(ea_config_set(&c, "runtime.lost_peer_grace_ms", "100", err, sizeof err), 0);
  ck_assert_int_eq(
      ea__launch_check_keys(&c, EA__MODE_BUILTIN, false, warn, sizeof warn, err, sizeof err), 0);
  ck_assert_msg(strstr(warn, "runtime.lost_peer_grace_ms does nothing in builtin mode"), "%s",
                warn);
}
END_TEST

/* ---- the torchrun environment ------------------------------------------------------ */

static ea__torch_env env_of(uint32_t rank, uint32_t local, uint32_t wpn, uint32_t node,
                            uint32_t nodes) {
  return (ea__torch_env){.rank = rank,
                         .local_rank = local,
                         .world = wpn * nodes,
                         .local_world = wpn,
                         .group_rank = node,
                         .group_world = nodes,
                         .master_addr = "10.0.0.7",
                         .master_port = 41234,
                         .restart_count = 2,
                         .max_restarts = 3,
                         .run_id = "job7",
                         .error_file = "/data/workers/gen-9/rank-5.error.json",
                         .generation = 9,
                         .node_name = "gpu-3",
                         .data_dir = "/data"};
}

START_TEST(env_has_the_torchrun_contract) {
  char *base[] = {"PATH=/usr/bin", "RANK=99", "EA_IPC_FD=3", "MASTER_PORT=1", "HOME=/root", NULL};
  ea__torch_env e = env_of(5, 1, 4, 1, 3);
  char **env = NULL;
  ck_assert_int_eq(ea__launch_env(&e, base, &env), 0);
  const struct {
    const char *k, *v;
  } want[] = {{"RANK", "5"},
              {"LOCAL_RANK", "1"},
              {"WORLD_SIZE", "12"},
              {"LOCAL_WORLD_SIZE", "4"},
              {"GROUP_RANK", "1"},
              {"GROUP_WORLD_SIZE", "3"},
              {"ROLE_NAME", "default"},
              {"ROLE_RANK", "5"},
              {"ROLE_WORLD_SIZE", "12"},
              {"MASTER_ADDR", "10.0.0.7"},
              {"MASTER_PORT", "41234"},
              {"TORCHELASTIC_RESTART_COUNT", "2"},
              {"TORCHELASTIC_MAX_RESTARTS", "3"},
              {"TORCHELASTIC_RUN_ID", "job7"},
              {"TORCHELASTIC_USE_AGENT_STORE", "False"},
              {"TORCHELASTIC_ERROR_FILE", "/data/workers/gen-9/rank-5.error.json"},
              {"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT"},
              {"EA_GENERATION", "9"},
              {"EA_NODE_NAME", "gpu-3"},
              {"EA_DATA_DIR", "/data"},
              {"OMP_NUM_THREADS", "1"},
              {"PYTHONUNBUFFERED", "1"},
              {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
              {"PATH", "/usr/bin"},
              {"HOME", "/root"}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const char *v = ea__env_get(env, want[i].k);
    ck_assert_msg(v != NULL, "%s missing", want[i].k);
    ck_assert_msg(strcmp(v, want[i].v) == 0, "%s=%s, want %s", want[i].k, v, want[i].v);
  }
  /* every name once: ours replace the agent's own, the built-in protocol's are gone */
  size_t n = 0;
  for (; env[n]; n++) {
    ck_assert_msg(strncmp(env[n], "EA_IPC_FD=", 10) != 0, "EA_IPC_FD leaked");
    size_t l = strcspn(env[n], "=");
    for (size_t j = 0; j < n; j++)
      ck_assert_msg(strncmp(env[j], env[n], l + 1) != 0, "%.*s twice", (int)l, env[n]);
  }
  ck_assert_uint_eq(n, sizeof want / sizeof want[0]);
  for (size_t i = 0; ea__torch_env_names[i]; i++)
    ck_assert_msg(ea__env_get(env, ea__torch_env_names[i]), "%s", ea__torch_env_names[i]);
  ea__env_free(env);
}
END_TEST

START_TEST(env_keeps_the_operators_choices) {
  /* OMP_NUM_THREADS only when unset and more than one worker per node;
   * PYTHONUNBUFFERED and TORCH_NCCL_ASYNC_ERROR_HANDLING only when unset
   * (under either of its names: 1.13's NCCL_ASYNC_ERROR_HANDLING counts). */
  char *base[] = {"OMP_NUM_THREADS=8", "PYTHONUNBUFFERED=0", "TORCH_NCCL_ASYNC_ERROR_HANDLING=3",
                  NULL};
  ea__torch_env e = env_of(0, 0, 2, 0, 1);
  char **env = NULL;
  ck_assert_int_eq(ea__launch_env(&e, base, &env), 0);
  ck_assert_str_eq(ea__env_get(env, "OMP_NUM_THREADS"), "8");
  ck_assert_str_eq(ea__env_get(env, "PYTHONUNBUFFERED"), "0");
  ck_assert_str_eq(ea__env_get(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3");
  ea__env_free(env);
  char *old[] = {"NCCL_ASYNC_ERROR_HANDLING=0", NULL};
  ck_assert_int_eq(ea__launch_env(&e, old, &env), 0);
  ck_assert_ptr_null(ea__env_get(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING"));
  ck_assert_str_eq(ea__env_get(env, "NCCL_ASYNC_ERROR_HANDLING"), "0");
  ea__env_free(env);
  char *none[] = {NULL};
  e = env_of(0, 0, 1, 0, 1);
  ck_assert_int_eq(ea__launch_env(&e, none, &env), 0);
  ck_assert_ptr_null(ea__env_get(env, "OMP_NUM_THREADS")); /* one worker per node */
  ea__env_free(env);
}
END_TEST

START_TEST(local_rank_macro_as_torchrun) {
  /* torchrun: string.Template(arg).safe_substitute(local_rank=N). */
  const struct {
    const char *in, *argv, *shell;
  } c[] = {
      {"--local-rank=${local_rank}", "--local-rank=3", "--local-rank=3"},
      {"$local_rank", "3", "3"},
      {"${local_rank}${local_rank}/x$local_rank", "33/x3", "33/x3"},
      {"$local_ranks ${local_rank_x} $LOCAL_RANK ${local_rank",
       "$local_ranks ${local_rank_x} $LOCAL_RANK ${local_rank",
       "$local_ranks ${local_rank_x} $LOCAL_RANK ${local_rank"},
      {"cost $$5 $HOME", "cost $5 $HOME", "cost $$5 $HOME"},
      {"$$local_rank", "$local_rank", "$$local_rank"},
      {"no macro", "no macro", "no macro"},
      {"", "", ""},
      {"$", "$", "$"},
      {"${}", "${}", "${}"},
  };
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    char *a = ea__sup_subst_local_rank(c[i].in, 3, false);
    char *sh = ea__sup_subst_local_rank(c[i].in, 3, true);
    ck_assert_msg(a && strcmp(a, c[i].argv) == 0, "argv %s -> %s, want %s", c[i].in, a, c[i].argv);
    ck_assert_msg(sh && strcmp(sh, c[i].shell) == 0, "shell %s -> %s, want %s", c[i].in, sh,
                  c[i].shell);
    free(a);
    free(sh);
  }
  /* the longest growth: every word a macro, a 10-digit rank */
  char *big = ea__sup_subst_local_rank("$local_rank$local_rank$local_rank", 4000000000u, false);
  ck_assert_str_eq(big, "400000000040000000004000000000");
  free(big);
}
END_TEST

START_TEST(contiguous_ranks_per_node) {
  /* Node g holds ranks g·wpn .. g·wpn+wpn-1, local rank k = rank − g·wpn,
   * as torchrun numbers them. */
  char *none[] = {NULL};
  for (uint32_t node = 0; node < 3; node++)
    for (uint32_t k = 0; k < 4; k++) {
      ea__torch_env e = env_of(node * 4 + k, k, 4, node, 3);
      char **env = NULL;
      ck_assert_int_eq(ea__launch_env(&e, none, &env), 0);
      char want[16];
      snprintf(want, sizeof want, "%u", node * 4 + k);
      ck_assert_str_eq(ea__env_get(env, "RANK"), want);
      snprintf(want, sizeof want, "%u", k);
      ck_assert_str_eq(ea__env_get(env, "LOCAL_RANK"), want);
      snprintf(want, sizeof want, "%u", node);
      ck_assert_str_eq(ea__env_get(env, "GROUP_RANK"), want);
      ea__env_free(env);
    }
}
END_TEST

START_TEST(master_port_is_free_and_fresh) {
  ea_addr lo = {.family = 4};
  lo.ip[0] = 127, lo.ip[3] = 1;
  uint16_t p1 = 0, p2 = 0;
  ck_assert_int_eq(ea__launch_free_port(&lo, 0, &p1), 0);
  ck_assert_uint_gt(p1, 0);
  /* nobody listens on it: we can bind it */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(p1)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  close(fd);
  /* the next generation's differs from the last */
  for (int i = 0; i < 20; i++) {
    ck_assert_int_eq(ea__launch_free_port(&lo, p1, &p2), 0);
    ck_assert_uint_ne(p2, p1);
  }
  char host[64];
  ea__addr_host(&lo, host, sizeof host);
  ck_assert_str_eq(host, "127.0.0.1");
}
END_TEST

/* ---- exit codes and failures ---------------------------------------------------------- */

START_TEST(exit_codes) {
  ck_assert_int_eq(ea__job_exit_code(EA__JOB_SUCCESS), 0);
  ck_assert_int_eq(ea__job_exit_code(EA__JOB_RESTARTS), 3);
  ck_assert_int_eq(ea__job_exit_code(EA__JOB_MIN_NODES), 4);
  ck_assert_int_eq(ea__job_exit_code(EA__JOB_FINAL_CKPT), 5);
  ck_assert_int_eq(ea__job_exit_code(0), 1);
  ck_assert_int_eq(ea__job_exit_code(99), 1);
  /* every failure code differs from success, start (1) and usage (2) */
  for (uint8_t k = EA__JOB_RESTARTS; k <= EA__JOB_FINAL_CKPT; k++) {
    int c = ea__job_exit_code(k);
    ck_assert_int_gt(c, EA__EXIT_USAGE);
    ck_assert_int_lt(c, 126); /* below the shell's own codes */
    for (uint8_t j = EA__JOB_RESTARTS; j < k; j++) ck_assert_int_ne(c, ea__job_exit_code(j));
  }
  ck_assert_uint_eq(ea__job_kind_of_rdzv(EA_RDZV_JOB_RESTARTS), EA__JOB_RESTARTS);
  ck_assert_uint_eq(ea__job_kind_of_rdzv(EA_RDZV_JOB_MIN_NODES), EA__JOB_MIN_NODES);
  ck_assert_uint_eq(ea__job_kind_of_rdzv(EA_RDZV_JOB_OK), 0);
  ck_assert_str_eq(ea__job_kind_str(EA__JOB_SUCCESS), "succeeded");
  ck_assert_str_eq(ea__job_kind_str(EA__JOB_RESTARTS), "restarts exhausted");
}
END_TEST

START_TEST(error_file_parsed) {
  char out[EA__JOB_MSG_MAX];
  /* what torch 1.13's @record writes */
  const char *rec =
      "{\"message\": {\"message\": \"RuntimeError: boom\", \"extraInfo\": {\"py_callstack\": "
      "\"Traceback (most recent call last):\\n  File \\\"t.py\\\", line 9, in main\\n    raise "
      "RuntimeError('boom')\\nRuntimeError: boom\\n\", \"timestamp\": \"1796159001\"}}}";
  ck_assert_int_eq(ea__job_parse_error_file(rec, strlen(rec), out, sizeof out), 0);
  ck_assert_str_eq(out, "RuntimeError: boom");
  /* a message that does not end the traceback gets its last line */
  const char *rec2 =
      "{\"message\": {\"message\": \"ChildFailedError\", \"extraInfo\": {\"py_callstack\": "
      "\"a\\nb\\nValueError: bad shape\\n\"}}}";
  ck_assert_int_eq(ea__job_parse_error_file(rec2, strlen(rec2), out, sizeof out), 0);
  ck_assert_str_eq(out, "ChildFailedError\nValueError: bad shape");
  /* the flat form */
  const char *flat = "{\"message\": \"disk full\"}";
  ck_assert_int_eq(ea__job_parse_error_file(flat, strlen(flat), out, sizeof out), 0);
  ck_assert_str_eq(out, "disk full");
  /* not JSON: its first line, -EINVAL */
  const char *junk = "segfault in foo\nmore";
  ck_assert_int_eq(ea__job_parse_error_file(junk, strlen(junk), out, sizeof out), -EINVAL);
  ck_assert_str_eq(out, "segfault in foo");
  ck_assert_int_eq(ea__job_parse_error_file("", 0, out, sizeof out), -EINVAL);
  ck_assert_str_eq(out, "");
  /* bounded */
  char small[8];
  ck_assert_int_eq(ea__job_parse_error_file(rec, strlen(rec), small, sizeof small), 0);
  ck_assert_str_eq(small, "Runtime");
}
END_TEST

START_TEST(failure_lines) {
  ea__job_failure f = {.rank = 3, .has_code = true, .code = 1, .source = EA__JOB_SRC_ERROR_FILE};
  snprintf(f.node, sizeof f.node, "n2");
  snprintf(f.message, sizeof f.message, "RuntimeError: boom\nValueError: x");
  char line[EA__JOB_MSG_MAX + 256];
  ea__job_failure_str(&f, line, sizeof line);
  ck_assert_str_eq(line, "rank 3 on n2 exited with code 1: RuntimeError: boom | ValueError: x");
  f.has_code = false;
  f.code = 0;
  f.signal = SIGKILL;
  f.source = EA__JOB_SRC_STDERR;
  snprintf(f.message, sizeof f.message, "last words");
  ea__job_failure_str(&f, line, sizeof line);
  ck_assert_str_eq(line,
                   "rank 3 on n2 was killed by signal 9 (Killed): last words (last lines of "
                   "its stderr)");
  f.message[0] = 0;
  f.source = EA__JOB_SRC_NONE;
  ea__job_failure_str(&f, line, sizeof line);
  ck_assert_str_eq(line, "rank 3 on n2 was killed by signal 9 (Killed)");
}
END_TEST

/* ---- the job's messages --------------------------------------------------------------- */

static ea__job_msg job_roundtrip(const ea__job_msg *m) {
  uint8_t buf[EA__JOB_WIRE_MAX];
  size_t len = 0;
  ck_assert_int_eq(ea__job_encode(m, buf, sizeof buf, &len), 0);
  ck_assert(ea__job_wire_is(buf, len));
  ea__job_msg d;
  const char *err = NULL;
  ck_assert_msg(ea__job_decode(buf, len, &d, &err) == 0, "decode: %s", err);
  return d;
}

START_TEST(job_codec_roundtrip) {
  ea__job_msg m;
  memset(&m, 0, sizeof m);
  m.type = EA__JOB_EXIT;
  memset(m.src.b, 7, 16);
  m.f = (ea__job_failure){.gen = 123456789,
                          .rank = 17,
                          .has_code = true,
                          .code = 255,
                          .source = EA__JOB_SRC_ERROR_FILE,
                          .at_ms = 1796159001885ull};
  snprintf(m.f.node, sizeof m.f.node, "node-é");
  memset(m.f.message, 'x', sizeof m.f.message - 1); /* the longest message */
  ea__job_msg d = job_roundtrip(&m);
  ck_assert_int_eq(d.type, EA__JOB_EXIT);
  ck_assert_int_eq(memcmp(d.src.b, m.src.b, 16), 0);
  ck_assert_uint_eq(d.f.gen, m.f.gen);
  ck_assert_uint_eq(d.f.rank, 17);
  ck_assert(d.f.has_code);
  ck_assert_uint_eq(d.f.code, 255);
  ck_assert_uint_eq(d.f.at_ms, m.f.at_ms);
  ck_assert_str_eq(d.f.node, m.f.node);
  ck_assert_str_eq(d.f.message, m.f.message);
  memset(&m, 0, sizeof m);
  m.type = EA__JOB_DONE;
  m.gen = 1ull << 40;
  m.step = 250;
  d = job_roundtrip(&m);
  ck_assert_uint_eq(d.gen, m.gen);
  ck_assert_uint_eq(d.step, 250);
  m.type = EA__JOB_CKPT_AGAIN; /* the same fields */
  d = job_roundtrip(&m);
  ck_assert_int_eq(d.type, EA__JOB_CKPT_AGAIN);
  ck_assert_uint_eq(d.gen, m.gen);
  ck_assert_uint_eq(d.step, 250);
  memset(&m, 0, sizeof m);
  m.type = EA__JOB_END;
  m.kind = EA__JOB_MIN_NODES;
  snprintf(m.reason, sizeof m.reason, "min_nodes not reached: 1 of 2 nodes for 30 s");
  d = job_roundtrip(&m);
  ck_assert_uint_eq(d.kind, EA__JOB_MIN_NODES);
  ck_assert_str_eq(d.reason, m.reason);
  ck_assert(!d.has_failure);
  m.has_failure = true;
  m.f = (ea__job_failure){.rank = 1, .signal = 11};
  memset(m.reason, 'r', sizeof m.reason - 1);
  d = job_roundtrip(&m);
  ck_assert(d.has_failure);
  ck_assert(!d.f.has_code);
  ck_assert_uint_eq(d.f.signal, 11);
  /* JOB_PACE: the most entries a node has (EA_RDZV_MAX_WPN), up to the
   * last rank of the largest world, fits the frame */
  memset(&m, 0, sizeof m);
  m.type = EA__JOB_PACE;
  m.gen = (5ull << 16) | 0xabcd;
  m.world = EA_RDZV_MAX_WORLD;
  m.npace = EA_RDZV_MAX_WPN;
  for (uint32_t i = 0; i < m.npace; i++)
    m.pace[i] = (ea__job_pace){EA_RDZV_MAX_WORLD - EA_RDZV_MAX_WPN + i, 1.0 / (i + 3)};
  d = job_roundtrip(&m);
  ck_assert_uint_eq(d.gen, m.gen);
  ck_assert_uint_eq(d.world, m.world);
  ck_assert_uint_eq(d.npace, m.npace);
  for (uint32_t i = 0; i < m.npace; i++) {
    ck_assert_uint_eq(d.pace[i].rank, m.pace[i].rank);
    ck_assert(d.pace[i].compute_s == m.pace[i].compute_s);
  }
}
END_TEST

START_TEST(job_codec_rejects) {
  ea__job_msg m;
  memset(&m, 0, sizeof m);
  uint8_t buf[EA__JOB_WIRE_MAX];
  size_t len;
  m.type = EA__JOB_DONE; /* generation 0 */
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m.type = EA__JOB_EXIT; /* no code and no signal */
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m.f.has_code = true;
  m.f.signal = 9; /* both */
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m.f.signal = 0;
  ck_assert_int_eq(ea__job_encode(&m, buf, 10, &len), -EMSGSIZE);
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), 0);
  /* every strict prefix fails, naming a field; the message is left zeroed */
  for (size_t n = 0; n < len; n++) {
    ea__job_msg d;
    const char *err = NULL;
    ck_assert_int_eq(ea__job_decode(buf, n, &d, &err), -EA_EWIRE);
    ck_assert_ptr_nonnull(err);
    static const ea__job_msg zero;
    ck_assert_int_eq(memcmp(&d, &zero, sizeof d), 0);
  }
  /* trailing bytes */
  buf[len] = 0xc0;
  ea__job_msg d;
  const char *err = NULL;
  ck_assert_int_eq(ea__job_decode(buf, len + 1, &d, &err), -EA_EWIRE);
  ck_assert_str_eq(err, "trailing bytes");
  /* another codec's frame is not ours (the checkpoint reports use 0x2x) */
  buf[3] = 0x20;
  ck_assert(!ea__job_wire_is(buf, len));
  /* JOB_PACE bounds, refused by the encoder as the decoder would */
  memset(&m, 0, sizeof m);
  m.type = EA__JOB_PACE;
  m.gen = 1 << 16;
  m.world = 4;
  m.npace = 1;
  m.pace[0] = (ea__job_pace){3, 0.5};
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), 0);
  d = (ea__job_msg){0};
  ck_assert_int_eq(ea__job_decode(buf, len, &d, &err), 0);
  ck_assert(ea__job_wire_is(buf, len));
  m.pace[0].rank = 4; /* past the world */
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m.pace[0] = (ea__job_pace){3, -1};
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m.pace[0].compute_s = 1.0 / 0.0;
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m.pace[0].compute_s = 0.5;
  m.npace = 0;
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m.npace = EA_RDZV_MAX_WPN + 1;
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m.npace = 1;
  m.world = 0;
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m.world = 4;
  m.gen = 0;
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), -EINVAL);
  /* a rank past the world on the wire: the decoder names it */
  m.gen = 1 << 16;
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), 0);
  /* ... [gen, world=4, [[rank=3, f64]]]: the rank is the byte before 0xcb */
  uint8_t *cb = memchr(buf, 0xcb, len);
  ck_assert_ptr_nonnull(cb);
  ck_assert_uint_eq(cb[-1], 3);
  cb[-1] = 4;
  ck_assert_int_eq(ea__job_decode(buf, len, &d, &err), -EA_EWIRE);
  ck_assert_str_eq(err, "rank");
}
END_TEST

START_TEST(job_codec_link) {
  /* LINK_PING / LINK_PONG carry gen and nonce, LINK_DOWN gen and the peer's
   * id; gen 0 is refused both ways, a peer of another length is named. */
  ea__job_msg m;
  memset(&m, 0, sizeof m);
  m.type = EA__JOB_LINK_PING;
  memset(m.src.b, 7, 16);
  m.gen = (3ull << 16) | 0x0a0b;
  m.nonce = UINT64_MAX;
  ea__job_msg d = job_roundtrip(&m);
  ck_assert_int_eq(d.type, EA__JOB_LINK_PING);
  ck_assert_uint_eq(d.gen, m.gen);
  ck_assert_uint_eq(d.nonce, UINT64_MAX);
  m.type = EA__JOB_LINK_PONG;
  m.nonce = 0;
  d = job_roundtrip(&m);
  ck_assert_int_eq(d.type, EA__JOB_LINK_PONG);
  ck_assert_uint_eq(d.nonce, 0);
  m.type = EA__JOB_LINK_DOWN;
  memset(m.peer.b, 0x5a, 16);
  d = job_roundtrip(&m);
  ck_assert_int_eq(d.type, EA__JOB_LINK_DOWN);
  ck_assert_uint_eq(d.gen, m.gen);
  ck_assert_int_eq(memcmp(d.peer.b, m.peer.b, 16), 0);
  uint8_t buf[EA__JOB_WIRE_MAX];
  size_t len;
  const char *err = NULL;
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), 0);
  /* ... [gen, bin8 16 <id>]: the bin's length byte is 17 from the end */
  ck_assert_uint_eq(buf[len - 17], 16);
  buf[len - 17] = 15;
  ck_assert_int_eq(ea__job_decode(buf, len - 1, &d, &err), -EA_EWIRE);
  ck_assert_str_eq(err, "peer");
  for (int t = EA__JOB_LINK_PING; t <= EA__JOB_LINK_DOWN; t++) {
    m.type = (uint8_t)t;
    m.gen = 0;
    ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), -EINVAL);
  }
  /* a type past the family's last is refused */
  m.type = EA__JOB_LINK_DOWN;
  m.gen = 1 << 16;
  ck_assert_int_eq(ea__job_encode(&m, buf, sizeof buf, &len), 0);
  ck_assert_uint_eq(buf[3], EA__JOB_LINK_DOWN);
  buf[3] = EA__JOB_LINK_DOWN + 1;
  ck_assert_int_eq(ea__job_decode(buf, len, &d, &err), -EA_EWIRE);
  ck_assert_str_eq(err, "type");
}
END_TEST

/* ---- the link probe (link.c), in virtual time ----------------------------------------------- */

typedef struct {
  int sent, resets, downs;
  ea__job_msg last;     /* the last frame sent, decoded */
  ea_node_id last_to;   /* and to whom */
  ea_node_id down_peer; /* the last down() */
  uint64_t down_gen;
  bool dead3; /* membership says node 3 is dead */
} link_rec;

static void lk_send(void *ctx, const ea_node_id *to, const uint8_t *buf, size_t len) {
  link_rec *r = ctx;
  r->sent++;
  r->last_to = *to;
  ck_assert_int_eq(ea__job_decode(buf, len, &r->last, NULL), 0);
}
static void lk_reset(void *ctx, const ea_node_id *to) {
  (void)to;
  ((link_rec *)ctx)->resets++;
}
static void lk_down(void *ctx, const ea_node_id *peer, uint64_t gen) {
  link_rec *r = ctx;
  r->downs++;
  r->down_peer = *peer;
  r->down_gen = gen;
}
static bool lk_alive(void *ctx, const ea_node_id *id) {
  return !(((link_rec *)ctx)->dead3 && id->b[0] == 3);
}
/* n1, n2, n3 (ids 01…, 02…, 03…) in generation `term` of controller n1. */
static ea_rdzv_plan lk_plan(ea_node_id ids[3], ea_rdzv_node nodes[3], uint32_t term) {
  memset(nodes, 0, 3 * sizeof *nodes);
  for (int i = 0; i < 3; i++) {
    memset(ids[i].b, i + 1, 16);
    nodes[i].id = ids[i];
    snprintf(nodes[i].name, sizeof nodes[i].name, "n%d", i + 1);
  }
  return (ea_rdzv_plan){
      .gen = {.term = term, .ctrl = ids[0]}, .nnodes = 3, .wpn = 1, .world = 3, .nodes = nodes};
}

START_TEST(link_probe_finds_a_silent_member) {
  /* n1 with n2 and n3 in generation 1, stepping every 100 ms: no probe
   * until 2 s without a step (10 x 100 ms is less); then a ping a second
   * to each; n2 answers, n3 does not: one miss at the next round (its
   * connection reset), unreachable at the second, and the controller told
   * every round while it lasts.  A step ends it.  Anyone's ping is
   * answered with its gen and nonce.  A member membership says is dead
   * counts no miss (a node failure). */
  for (int variant = 0; variant < 2; variant++) {
    link_rec r = {.dead3 = variant == 1};
    ea__link_cbs cb = {.send = lk_send, .reset = lk_reset, .down = lk_down, .alive = lk_alive};
    ea_node_id ids[3];
    ea_rdzv_node nodes[3];
    ea_rdzv_plan p = lk_plan(ids, nodes, 1);
    uint64_t g = ea_rdzv_gen_u64(&p.gen);
    ea__link *L = ea__link_new(&ids[0], "n1", EA__LINK_QUIET, &cb, &r);
    ck_assert_ptr_nonnull(L);
    char t[256];
    uint64_t step = 10, now = 0;
    for (now = 0; now <= 1000; now += 100) ea__link_tick(L, now, &p, step++);
    for (; now < 1000 + EA__LINK_QUIET_MIN_MS; now += EA__LINK_TICK_MS)
      ea__link_tick(L, now, &p, step);
    ck_assert(!ea__link_active(L));
    ck_assert_int_eq(r.sent, 0);
    ea__link_tick(L, now, &p, step); /* 2 s without a step: the first round */
    ck_assert(ea__link_active(L));
    ck_assert_int_eq(r.sent, 2);
    ck_assert_int_eq(r.last.type, EA__JOB_LINK_PING);
    ck_assert_uint_eq(r.last.gen, g);
    ea__link_text(L, now, t, sizeof t);
    ck_assert_str_eq(t, "link probe: pinging 2 members for 0.0 s (started: no step for 2.0 s)");
    uint64_t first = now;
    for (int round = 1; round <= 3; round++) {
      /* n2 answers its ping (the one to n2 went first) */
      ea__job_msg pong = {.type = EA__JOB_LINK_PONG,
                          .src = ids[1],
                          .gen = round == 2 ? g + 1 : g, /* matched by nonce alone */
                          .nonce = r.last.nonce - 1};
      ea__link_on_msg(L, now + 5, &pong);
      for (now += EA__LINK_TICK_MS; now < first + round * EA__LINK_ROUND_MS;
           now += EA__LINK_TICK_MS)
        ea__link_tick(L, now, &p, step);
      ck_assert_int_eq(r.sent, 2 * round);
      ea__link_tick(L, now, &p, step);
      ck_assert_int_eq(r.sent, 2 * (round + 1));
      if (variant == 1) {
        ck_assert_int_eq(r.resets, 0);
        ck_assert_int_eq(r.downs, 0);
        continue;
      }
      ck_assert_int_eq(r.resets, round); /* n3's connection, after each miss */
      ck_assert_int_eq(r.downs, round >= 2 ? round - 1 : 0);
    }
    ea_node_id down[4];
    if (variant == 0) {
      ck_assert_int_eq(memcmp(r.down_peer.b, ids[2].b, 16), 0);
      ck_assert_uint_eq(r.down_gen, g);
      ea__link_text(L, now, t, sizeof t);
      ck_assert_str_eq(t, "link probe: n3 unreachable from n1");
      ck_assert_uint_eq(ea__link_down_now(L, down, 4), 1);
      json_t *js = ea__link_status(L, now);
      ck_assert_ptr_nonnull(js);
      json_t *ps = json_object_get(js, "peers");
      ck_assert_uint_eq(json_array_size(ps), 2);
      ck_assert_str_eq(json_string_value(json_object_get(json_array_get(ps, 0), "state")), "ok");
      ck_assert_str_eq(json_string_value(json_object_get(json_array_get(ps, 1), "state")),
                       "unreachable");
      json_decref(js);
    } else {
      ck_assert_uint_eq(ea__link_down_now(L, down, 4), 0);
    }
    /* a step: over */
    ea__link_tick(L, now + 10, &p, ++step);
    ck_assert(!ea__link_active(L));
    ea__link_text(L, now, t, sizeof t);
    ck_assert_str_eq(t, "");
    /* a ping from n3 is answered, gen and nonce echoed */
    ea__job_msg ping = {.type = EA__JOB_LINK_PING, .src = ids[2], .gen = 77, .nonce = 12345};
    ea__link_on_msg(L, now, &ping);
    ck_assert_int_eq(r.last.type, EA__JOB_LINK_PONG);
    ck_assert_uint_eq(r.last.gen, 77);
    ck_assert_uint_eq(r.last.nonce, 12345);
    ck_assert_int_eq(memcmp(r.last_to.b, ids[2].b, 16), 0);
    ck_assert_int_eq(memcmp(r.last.src.b, ids[0].b, 16), 0);
    /* a communicator failure that named no peer: at once, steps or not */
    int before = r.sent;
    ea__link_comm_failed(L, now + 20);
    ea__link_tick(L, now + 20, &p, step);
    ck_assert(ea__link_active(L));
    ck_assert_int_eq(r.sent, before + 2);
    ea__link_tick(L, now + 20 + EA__LINK_FAIL_MS, &p, step); /* the window over, a step since */
    ea__link_tick(L, now + 30 + EA__LINK_FAIL_MS, &p, ++step);
    ck_assert(!ea__link_active(L));
    /* no generation: nothing */
    ea__link_comm_failed(L, now + 40 + EA__LINK_FAIL_MS);
    ea__link_tick(L, now + 40 + EA__LINK_FAIL_MS, NULL, step);
    ck_assert(!ea__link_active(L));
    ea__link_free(L);
  }
}
END_TEST

START_TEST(link_probe_always_on_in_restart_mode) {
  /* Restart mode: the programs report no steps (last_step stays 0), so the
   * probe runs from the generation's first tick, a round a second, and is
   * not `degraded` while every member answers.  n3 goes silent after round
   * 3: degraded ("missed 1 ping") one round later, not yet reported;
   * unreachable and reported at the second round, i.e. within
   * (EA__LINK_MISSES + 1) rounds of the last answer.  n3 answers again:
   * no longer degraded.  No generation: nothing sent. */
  link_rec r = {0};
  ea__link_cbs cb = {.send = lk_send, .reset = lk_reset, .down = lk_down, .alive = lk_alive};
  ea_node_id ids[3];
  ea_rdzv_node nodes[3];
  ea_rdzv_plan p = lk_plan(ids, nodes, 4);
  ea__link *L = ea__link_new(&ids[1], "n2", EA__LINK_ALWAYS, &cb, &r);
  ck_assert_ptr_nonnull(L);
  char t[256];
  uint64_t now = 5000;
  ea__link_tick(L, now, NULL, 0);
  ck_assert(!ea__link_active(L));
  ck_assert_int_eq(r.sent, 0);
  ea__link_tick(L, now, &p, 0); /* the generation's first tick: a round */
  ck_assert(ea__link_active(L));
  ck_assert(!ea__link_degraded(L));
  ck_assert_int_eq(r.sent, 2);
  ea__link_text(L, now, t, sizeof t);
  ck_assert_str_eq(t, "");
  uint64_t n3_silent_from = 3; /* rounds 0..2 answered by both */
  uint64_t first = now;
  for (uint64_t round = 1; round <= 7; round++) {
    /* the round before's pings: n1's went first, then n3's */
    uint64_t n3_nonce = r.last.nonce, n1_nonce = n3_nonce - 1;
    ea__job_msg pong = {.type = EA__JOB_LINK_PONG, .src = ids[0], .nonce = n1_nonce};
    ea__link_on_msg(L, now + 3, &pong);
    if (round <= n3_silent_from || round == 7) {
      pong.src = ids[2];
      pong.nonce = n3_nonce;
      ea__link_on_msg(L, now + 4, &pong);
    }
    if (round == 7) {
      ck_assert(!ea__link_degraded(L)); /* n3 answers again */
      ck_assert_uint_eq(ea__link_down_now(L, NULL, 0), 0);
      break;
    }
    for (now += EA__LINK_TICK_MS; now < first + round * EA__LINK_ROUND_MS;
         now += EA__LINK_TICK_MS) {
      ea__link_tick(L, now, &p, 0);
      ck_assert_int_eq(r.sent, (int)(2 * round));
    }
    ea__link_tick(L, now, &p, 0);
    ck_assert_int_eq(r.sent, (int)(2 * (round + 1)));
    ea__link_text(L, now, t, sizeof t);
    uint64_t missed = round > n3_silent_from ? round - n3_silent_from : 0;
    ck_assert_int_eq(r.resets, (int)missed);
    if (missed == 0) {
      ck_assert(!ea__link_degraded(L));
      ck_assert_str_eq(t, "");
    } else if (missed < EA__LINK_MISSES) {
      ck_assert(ea__link_degraded(L));
      ck_assert_int_eq(r.downs, 0);
      ck_assert_str_eq(t, "link probe: n3 missed 1 ping from n2");
    } else {
      ck_assert(ea__link_degraded(L));
      ck_assert_int_eq(r.downs, (int)(missed - EA__LINK_MISSES + 1));
      ck_assert_int_eq(memcmp(r.down_peer.b, ids[2].b, 16), 0);
      ck_assert_uint_eq(r.down_gen, ea_rdzv_gen_u64(&p.gen));
      ck_assert_str_eq(t, "link probe: n3 unreachable from n2");
    }
  }
  json_t *js = ea__link_status(L, now);
  ck_assert_ptr_nonnull(js);
  ck_assert_str_eq(json_string_value(json_object_get(js, "mode")), "always");
  ck_assert(json_is_false(json_object_get(js, "degraded")));
  json_decref(js);
  /* a re-formation without a generation in between: the next plan's
   * members are pinged at once; no generation: the episode ends */
  int before = r.sent;
  ea__link_tick(L, now + 10, NULL, 0);
  ck_assert(!ea__link_active(L));
  ea__link_tick(L, now + 10 + EA__LINK_ROUND_MS, NULL, 0);
  ck_assert_int_eq(r.sent, before);
  p.gen.term = 5;
  ea__link_tick(L, now + 20 + EA__LINK_ROUND_MS, &p, 0);
  ck_assert(ea__link_active(L));
  ck_assert_int_eq(r.sent, before + 2);
  ea__link_free(L);
}
END_TEST

/* ---- output lines ------------------------------------------------------------------------ */

typedef struct {
  char lines[8][EA__OUT_LINE_MAX + 1];
  bool cut[8];
  int n;
} got_lines;

static void grab(void *ctx, const char *line, size_t len, bool cut) {
  got_lines *g = ctx;
  ck_assert_int_lt(g->n, 8);
  ck_assert_uint_eq(strlen(line), len);
  memcpy(g->lines[g->n], line, len + 1);
  g->cut[g->n++] = cut;
}

START_TEST(lines_split_and_bounded) {
  ea__linebuf lb = {0};
  got_lines g = {0};
  const char *in = "step 1\r\nstep 2\npart";
  ea__linebuf_feed(&lb, in, strlen(in), grab, &g);
  ck_assert_int_eq(g.n, 2);
  ck_assert_str_eq(g.lines[0], "step 1"); /* \r\n as one end of line */
  ck_assert_str_eq(g.lines[1], "step 2");
  ea__linebuf_feed(&lb, "ial\x1b[31m red\n", 13, grab, &g);
  ck_assert_int_eq(g.n, 3);
  ck_assert_str_eq(g.lines[2], "partial?[31m red"); /* one line, escapes defused */
  /* a line longer than the bound comes in pieces, marked */
  char *big = malloc(EA__OUT_LINE_MAX * 2 + 10);
  memset(big, 'a', EA__OUT_LINE_MAX * 2 + 10);
  ea__linebuf_feed(&lb, big, EA__OUT_LINE_MAX * 2 + 10, grab, &g);
  ck_assert_int_eq(g.n, 5);
  ck_assert(g.cut[3] && g.cut[4]);
  ck_assert_uint_eq(strlen(g.lines[3]), EA__OUT_LINE_MAX);
  ea__linebuf_flush(&lb, grab, &g);
  ck_assert_int_eq(g.n, 6);
  ck_assert_uint_eq(strlen(g.lines[5]), 10);
  ck_assert(!g.cut[5]);
  ea__linebuf_flush(&lb, grab, &g); /* nothing left */
  ck_assert_int_eq(g.n, 6);
  free(big);
}
END_TEST

/* Library mode finds python/elastic_agent next to the binary: the build
 * tree's ../python, then `make install`'s ../lib/elastic-agent/python; a
 * binary with neither gets -ENOENT (the agent then warns). */
START_TEST(python_dir_next_to_the_binary) {
  char tmp[] = "/tmp/ea-pydir-XXXXXX", p[512], dir[4096];
  ck_assert_ptr_nonnull(mkdtemp(tmp));
  snprintf(p, sizeof p, "%s/bin", tmp);
  ck_assert_int_eq(mkdir(p, 0700), 0);
  snprintf(p, sizeof p, "%s/bin/elastic-agent", tmp);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  ck_assert_int_eq(ea__launch_python_dir(p, dir, sizeof dir), -ENOENT);
  char pkg[512];
  snprintf(pkg, sizeof pkg,
           "mkdir -p %s/lib/elastic-agent/python/elastic_agent && touch "
           "%s/lib/elastic-agent/python/elastic_agent/__init__.py",
           tmp, tmp);
  ck_assert_int_eq(system(pkg), 0);
  ck_assert_int_eq(ea__launch_python_dir(p, dir, sizeof dir), 0);
  char want[600];
  snprintf(want, sizeof want, "%s/lib/elastic-agent/python", tmp);
  ck_assert_str_eq(dir, want);
  snprintf(pkg, sizeof pkg,
           "mkdir -p %s/python/elastic_agent && touch %s/python/elastic_agent/__init__.py", tmp,
           tmp);
  ck_assert_int_eq(system(pkg), 0);
  ck_assert_int_eq(ea__launch_python_dir(p, dir, sizeof dir), 0); /* the build tree first */
  snprintf(want, sizeof want, "%s/python", tmp);
  ck_assert_str_eq(dir, want);
  ck_assert_int_eq(ea__launch_python_dir(p, dir, 4), -ENAMETOOLONG);
  snprintf(pkg, sizeof pkg, "rm -rf %s", tmp);
  ck_assert_int_eq(system(pkg), 0);
}
END_TEST

/* ---- the final checkpoint's retries (agent/job/job.c) ------------------------------------ */

typedef struct {
  int again;
  uint64_t again_gen, again_step;
  bool ended;
  uint8_t kind;
  int code;
} final_seen;

static void fin_again(void *ctx, uint64_t gen, uint64_t step) {
  final_seen *f = ctx;
  f->again++;
  f->again_gen = gen;
  f->again_step = step;
}
static void fin_end(void *ctx, uint8_t kind, int code) {
  final_seen *f = ctx;
  f->ended = true;
  f->kind = kind;
  f->code = code;
}
static void fin_send(void *ctx, const ea_node_id *to, const uint8_t *buf, size_t len) {
  (void)ctx, (void)to, (void)buf, (void)len;
}
static void fin_alert(void *ctx, int what, const char *text) {
  (void)ctx, (void)what, (void)text;
}

/* One node, the controller of generation `gen`, all of whose workers
 * finished at train.steps; the view says the newest checkpoint is at
 * ckpt_step. */
static void fin_view(ea__job *J, const ea_node_id *self, uint64_t gen64, uint64_t ckpt_step) {
  ea_rdzv_status st;
  memset(&st, 0, sizeof st);
  ea_rdzv_gen64_unpack(gen64, &st.formed);
  st.formed_nodes = 1;
  st.phase = EA_RDZV_RUNNING;
  ea_member me = {.id = *self, .state = EA_STATE_ALIVE, .incarnation = 1};
  ea__job_view v = {.have_controller = true,
                    .controller = true,
                    .controller_id = *self,
                    .st = &st,
                    .members = &me,
                    .nmembers = 1,
                    .ckpt_step = ckpt_step,
                    .ckpt_known = ckpt_step > 0};
  ea__job_update(J, &v);
}

static void fin_run_until(uv_loop_t *loop, final_seen *f, int again, uint64_t limit_ms) {
  uint64_t t0 = uv_now(loop);
  while (!f->ended && f->again < again && uv_now(loop) - t0 < limit_ms) {
    uv_run(loop, UV_RUN_ONCE);
    uv_update_time(loop);
  }
}

/* A final checkpoint that failed is tried again (ckpt_again after 1 s,
 * then 2 s), and a commit then ends the job with success; one that keeps
 * failing ends it with exit status 5 once final_ckpt_timeout_ms has passed,
 * the reason counting the retries. */
START_TEST(final_checkpoint_retried) {
  for (int commit = 1; commit >= 0; commit--) {
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ea_node_id self = {{9}};
    final_seen f = {0};
    ea__job_opts o = {.mode = EA__MODE_BUILTIN,
                      .wpn = 1,
                      .train_steps = 250,
                      .ckpt_on = true,
                      .max_restarts = 3,
                      .churn_cap_ms = 1000,
                      .final_ckpt_timeout_ms = 2500,
                      .self = self,
                      .name = "n1"};
    ea__job_cbs cb = {
        .send = fin_send, .end = fin_end, .alert = fin_alert, .ckpt_again = fin_again};
    ea__job *J;
    ck_assert_int_eq(ea__job_new(&loop, &o, &cb, &f, &J), 0);
    const uint64_t gen = ea_rdzv_gen64_pack(4, 0x0900);
    fin_view(J, &self, gen, 200);
    ea__job_local_done(J, gen, 250);
    fin_view(J, &self, gen, 200); /* done, waiting for the final commit */
    ck_assert(!f.ended);
    uint64_t t0 = uv_now(&loop);
    ea__job_ckpt_failed(J, 250, "shard 0: No space left on device", true);
    fin_view(J, &self, gen, 200);
    ck_assert(!f.ended); /* not failed yet: a retry is armed */
    fin_run_until(&loop, &f, 1, 5000);
    ck_assert_int_eq(f.again, 1);
    ck_assert_uint_eq(f.again_gen, gen);
    ck_assert_uint_eq(f.again_step, 250);
    ck_assert_uint_ge(uv_now(&loop) - t0, 900); /* after about 1 s */
    if (commit) {
      fin_view(J, &self, gen, 250); /* the retry committed */
      fin_run_until(&loop, &f, 2, 3000);
      ck_assert(f.ended);
      ck_assert_int_eq(f.again, 1);
      ck_assert_int_eq(f.kind, EA__JOB_SUCCESS);
      ck_assert_int_eq(f.code, 0);
    } else {
      /* every attempt fails: a second retry 2 s later, then past 2.5 s the job fails */
      ea__job_ckpt_failed(J, 250, "shard 0: No space left on device", true);
      fin_view(J, &self, gen, 200);
      ck_assert(!f.ended);
      fin_run_until(&loop, &f, 2, 5000);
      ck_assert_int_eq(f.again, 2);
      ck_assert_uint_ge(uv_now(&loop) - t0, 2800);
      ea__job_ckpt_failed(J, 250, "shard 0: No space left on device", true);
      fin_view(J, &self, gen, 200);
      fin_run_until(&loop, &f, 3, 3000); /* the end is called from the job's timer */
      ck_assert(f.ended);
      ck_assert_int_eq(f.again, 2);
      ck_assert_int_eq(f.kind, EA__JOB_FINAL_CKPT);
      ck_assert_int_eq(f.code, 5);
      uint8_t kind;
      int code;
      ck_assert(ea__job_ended(J, &kind, &code));
      ck_assert_int_eq(code, 5);
    }
    ea__job_free(J);
    for (int i = 0; i < 10; i++) uv_run(&loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
  }
}
END_TEST

static int restores;
static uint64_t restore_gen, restore_step;
static void fin_restore(void *ctx, uint64_t gen, uint64_t step) {
  (void)ctx;
  restores++;
  restore_gen = gen;
  restore_step = step;
}

/* A smoke run (smoke_restore): the job that would succeed asks for its
 * checkpoint to be restored into a fresh generation (once), and succeeds
 * only when that generation has finished too; without it, it ends at once. */
START_TEST(smoke_restore_before_the_end) {
  for (int smoke = 1; smoke >= 0; smoke--) {
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ea_node_id self = {{9}};
    final_seen f = {0};
    restores = 0;
    ea__job_opts o = {.mode = EA__MODE_BUILTIN,
                      .wpn = 1,
                      .train_steps = 250,
                      .ckpt_on = true,
                      .max_restarts = 3,
                      .churn_cap_ms = 1000,
                      .final_ckpt_timeout_ms = 2500,
                      .smoke_restore = smoke,
                      .self = self,
                      .name = "n1"};
    ea__job_cbs cb = {.send = fin_send, .end = fin_end, .alert = fin_alert, .restore = fin_restore};
    ea__job *J;
    ck_assert_int_eq(ea__job_new(&loop, &o, &cb, &f, &J), 0);
    const uint64_t gen = ea_rdzv_gen64_pack(4, 0x0900), gen2 = ea_rdzv_gen64_pack(5, 0x0900);
    fin_view(J, &self, gen, 200);
    ea__job_local_done(J, gen, 250);
    fin_view(J, &self, gen, 250); /* every rank done, the final checkpoint committed */
    fin_run_until(&loop, &f, 1, 200);
    if (!smoke) {
      ck_assert(f.ended);
      ck_assert_int_eq(restores, 0);
    } else {
      ck_assert(!f.ended);
      ck_assert_int_eq(restores, 1);
      ck_assert_uint_eq(restore_gen, gen);
      ck_assert_uint_eq(restore_step, 250);
      fin_view(J, &self, gen, 250); /* still the first generation: no second ask, no end */
      ck_assert_int_eq(restores, 1);
      ck_assert(!f.ended);
      fin_view(J, &self, gen2, 250); /* the fresh generation runs ... */
      ea__job_local_done(J, gen2, 250);
      fin_view(J, &self, gen2, 250); /* ... and finished */
      fin_run_until(&loop, &f, 1, 200);
      ck_assert(f.ended);
      ck_assert_int_eq(restores, 1);
    }
    ck_assert_int_eq(f.kind, EA__JOB_SUCCESS);
    ck_assert_int_eq(f.code, 0);
    ea__job_free(J);
    for (int i = 0; i < 10; i++) uv_run(&loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
  }
}
END_TEST

static Suite *job_suite(void) {
  Suite *s = suite_create("job");
  TCase *tc = tcase_create("job");
  tcase_set_timeout(tc, 60); /* final_checkpoint_retried waits out real back-offs: ~5 s */
  tcase_add_test(tc, mode_from_protocol_and_program);
  tcase_add_test(tc, keys_that_do_nothing);
  tcase_add_test(tc, env_has_the_torchrun_contract);
  tcase_add_test(tc, env_keeps_the_operators_choices);
  tcase_add_test(tc, contiguous_ranks_per_node);
  tcase_add_test(tc, local_rank_macro_as_torchrun);
  tcase_add_test(tc, master_port_is_free_and_fresh);
  tcase_add_test(tc, exit_codes);
  tcase_add_test(tc, error_file_parsed);
  tcase_add_test(tc, failure_lines);
  tcase_add_test(tc, job_codec_roundtrip);
  tcase_add_test(tc, job_codec_rejects);
  tcase_add_test(tc, job_codec_link);
  tcase_add_test(tc, link_probe_finds_a_silent_member);
  tcase_add_test(tc, link_probe_always_on_in_restart_mode);
  tcase_add_test(tc, lines_split_and_bounded);
  tcase_add_test(tc, python_dir_next_to_the_binary);
  tcase_add_test(tc, final_checkpoint_retried);
  tcase_add_test(tc, smoke_restore_before_the_end);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(job_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
