/* claim.h — an asynchronous worker's batches: the shared batch counter,
 * its leases and the stop word (claim.c; internal to src/run).
 *
 * Each worker owns its herd__claim; the windows in it are collective
 * (created and freed by every worker of the run together). Nothing here
 * is touched by another thread but through the windows.
 */
#ifndef HERD_RUN_CLAIM_H
#define HERD_RUN_CLAIM_H

#include <stddef.h>
#include <stdint.h>

#include "herd/herd_algo.h"
#include "herd/herd_comm.h"

typedef struct herd__claim {
    herd_win *counter_win;  /* the shared batch counter (NULL: a synchronous run) */
    uint64_t counter_buf[2];/* on rank 0: the counter, and the stop word (see herd__announce_stop) */
    herd_win *lease_win;    /* every worker's lease of batches */
    uint64_t lease_buf[3];  /* this worker's lease [lo, hi), and its copy of the stop word */
    uint64_t end;           /* the end of the epoch of this worker's last batch (0: none yet) */
    uint64_t leases, stolen;/* this run: leases taken from the counter, steals from others */
    double stop_read_at;    /* herd__stop_check: when the stop word was last read */
} herd__claim;

/* Collective over the run's workers, before the algorithm's own windows:
 * the counter at `claimed` (--resume: the checkpoint's), no lease, no stop
 * word. */
herd_status herd__claim_open(herd__claim *cl, herd_worker *w, uint64_t claimed);
/* Frees the windows (where they were made). */
void herd__claim_close(herd__claim *cl, herd_worker *w);
/* Claims the next global batch: from this worker's lease, a new lease, or
 * another's; at the hold the counter stays. */
herd_status herd__claim_batch(herd__claim *cl, herd_worker *w, uint64_t *index, uint64_t hold);
/* This worker stops on a non-finite value (code: herd__nf_code, 0: the
 * model at an evaluation, or another's stop word): tells the others. */
void herd__announce_stop(herd__claim *cl, herd_worker *w, int code);
/* herd_worker_stopping (herd_algo.h) for worker w: reads the stop word at
 * most every 10 ms. */
herd_status herd__stop_check(herd__claim *cl, herd_worker *w, herd_err *err);
/* The epoch record's account of how this worker got its batches so far
 * (",\"leases\":..,\"steals\":.."), appended to buf; nothing where the run
 * is synchronous. */
void herd__claim_log_epoch(const herd__claim *cl, char *buf, size_t cap);

#endif
