/* gossip.h — what the decentralized (gossip.c) and push-sum (pushsum.c)
 * algorithms share (internal to src/algo): topologies, and the average model
 * with its consensus distance, computed either by a collective (the
 * synchronous algorithms, at the same step on every worker) or by reading
 * every worker's published model one-sidedly (the asynchronous ones).
 */
#ifndef HERD_ALGO_GOSSIP_H
#define HERD_ALGO_GOSSIP_H

#include <stddef.h>
#include <stdint.h>

#include "herd/herd_algo.h"

typedef enum herd__topo { HERD_TOPO_RING, HERD_TOPO_EXP, HERD_TOPO_RANDOM } herd__topo;

/* The options of the decentralized and push-sum algorithms (seeds 003/004):
 * herd__gossip_opt_table has --topology, herd__osgp_opt_table --max-delay too. */
typedef struct herd__gossip_opts {
    const char *topology; /* ring, exp or random; NULL: the algorithm's default */
    size_t max_delay;     /* osgp: steps a worker goes on without hearing from an in-neighbour */
} herd__gossip_opts;
extern const herd_opt herd__gossip_opt_table[];
extern const herd_opt herd__osgp_opt_table[];

/* --topology, or dflt when none was given. */
herd__topo herd__gossip_topology(const herd_worker *w, herd__topo dflt);
const char *herd__gossip_topology_name(herd__topo t);

/* Resume: HERD_EINVAL, w->err saying so, when the checkpoint's topology
 * `saved` is not this run's `mine`. */
herd_status herd__gossip_same_topology(herd_worker *w, uint64_t saved, herd__topo mine);

/* ceil(log2 n): the number of distinct power-of-two offsets below n. */
size_t herd__gossip_log2ceil(size_t n);

/* Collective (every worker at the same point): avg = mean over workers of z
 * (nparams floats), *dist = mean over workers of ||z_i - avg||. */
herd_status herd__gossip_mean_allreduce(herd_worker *w, const float *z, float *avg, double *dist);

/* One-sided: every rank's window holds its model (nparams floats at offset
 * 0); avg = their mean, read under shared locks one rank at a time, lost
 * workers left out. When dist is not NULL, a second pass gives the mean
 * ||z_j - avg||; models move between the passes, so on a running system it
 * is an estimate. tmp: nparams floats of scratch. Holds no lock on return. */
herd_status herd__gossip_mean_windows(herd_worker *w, herd_win *win, float *avg, float *tmp, double *dist);

#endif
