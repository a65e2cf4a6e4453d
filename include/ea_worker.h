/* ea_worker.h — the built-in worker process: the trainer driven over a
 * communicator that is re-formed in place, controlled by its agent through
 * the messages of ea_ipc.h.
 *
 * The binary runs it as `elastic-agent worker --ipc-fd 3 --config F`; a
 * test can fork and call it directly.  It binds its communicator listener
 * once, says HELLO, and then obeys PREPARE / COMMIT / PAUSE / STOP for the
 * rest of its life: a failed allreduce is reported (FAILED) and the process
 * stays up with its state, waiting for the next generation.  docs/worker.md
 * walks through a generation change.
 *
 * Environment read by the worker (the agent's supervisor sets them):
 *   EA_LOCAL_RANK  this worker's index on its node (HELLO, the CUDA device
 *                  for nccl); default 0.
 *   EA_COMM_BIND   "host:port" the communicator listens on; default
 *                  "127.0.0.1:0".  A multi-node job sets the node's address.
 *   OPENBLAS_NUM_THREADS  when set, left alone; otherwise the worker uses
 *                  ⌊online CPUs / compute.workers_per_node⌋ (at least 1).
 */
#ifndef EA_WORKER_H
#define EA_WORKER_H

#include "ea_config.h"

/* Run the worker on ipc_fd (one end of an ea_ipc_socketpair; borrowed, not
 * closed) until STOP or until the agent's end closes.  Blocks; starts one
 * thread of its own (the IPC reader) and joins it before returning.
 * Ignores SIGPIPE for the process.  Returns 0 after STOP, -ECONNRESET when
 * the agent went away, or a negative errno when it could not start (the
 * data, trainer or listener failed: EXITING says why, and the log too). */
int ea_worker_main(int ipc_fd, const ea_config *cfg);

#endif
