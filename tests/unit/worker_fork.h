/* worker_fork.h — start a real worker process for the tests that play the
 * agent (test_worker, test_ckpt_flow): a seqpacket socketpair, fork, and
 * ea_worker_main in the child as local rank `local_rank`.  The child dies
 * with the test (PR_SET_PDEATHSIG) and closes the parent's other worker
 * sockets so a killed sibling's peer sees end-of-file.  Returns the parent's
 * end of the socketpair and sets *pid. */
#ifndef EA_TEST_WORKER_FORK_H
#define EA_TEST_WORKER_FORK_H

#include "ea_ipc.h"
#include "ea_worker.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <signal.h>
#include <unistd.h>

static inline int ea_test_fork_worker(const ea_config *cfg, int local_rank, const int *close_fds,
                                      int nclose, pid_t *pid) {
  int sv[2];
  ck_assert_int_eq(ea_ipc_socketpair(sv), 0);
  fflush(stdout);
  *pid = fork();
  ck_assert_int_ge(*pid, 0);
  if (*pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (int j = 0; j < nclose; j++)
      if (close_fds[j] >= 0) close(close_fds[j]);
    close(sv[0]);
    char lr[16];
    snprintf(lr, sizeof lr, "%d", local_rank);
    setenv("EA_LOCAL_RANK", lr, 1);
    int rc = ea_worker_main(sv[1], cfg);
    _exit(rc == 0 ? 0 : 3);
  }
  close(sv[1]);
  return sv[0];
}

#endif
