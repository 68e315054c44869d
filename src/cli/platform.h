/* platform.h — the cluster `herd sim` simulates (platform.c, internal to
 * src/cli): one of the named platforms, possibly overridden by herd sim's
 * flags, or a user's SimGrid platform file, read before SimGrid reads it;
 * and the platform and host files smpirun is given. Functions that fail
 * print why and return -1. */
#ifndef HERD_CLI_PLATFORM_H
#define HERD_CLI_PLATFORM_H

#include "cli/flags.h"

#include <stddef.h>
#include <stdio.h>

enum { HERD__SIM_MAX_WORKERS = 4096 };

/* What a host's traffic to itself costs (the loopback of every platform
 * herd writes): a copy in its memory, not a trip over its network link. */
#define HERD__SIM_LOOPBACK_BW 20e9   /* bytes/s */
#define HERD__SIM_LOOPBACK_LAT 1e-7  /* seconds */

/* The hosts of a user's platform file, in the file's order: how many it
 * makes, and the names of the first HERD__SIM_MAX_WORKERS (owned: free
 * each). */
typedef struct herd__platform_hosts {
    size_t n, nnames;
    char *names[HERD__SIM_MAX_WORKERS];
} herd__platform_hosts;

/* The cluster to write: one of the table, possibly overridden. */
typedef struct herd__cluster {
    const char *name;
    const char *file;    /* a user's platform file (nothing generated), or NULL */
    herd__platform_hosts file_hosts;
    double bw, lat, speed;
    double real_speed;                  /* --measured-compute: this machine's flop/s */
    double slow[HERD__SIM_MAX_WORKERS]; /* per host: speed divisor (0: 1) */
} herd__cluster;

/* What herd sim's flags say of the cluster (its options own the strings). */
typedef struct herd__cluster_flags {
    const char *platform, *link, *host_speed, *real_speed;
    const herd__str_list *slow;
} herd__cluster_flags;

/* The named platforms, one a line: prefix, the name, what it is. */
void herd__platforms_print(FILE *out, const char *prefix);

/* Fills c from the flags; *workers 0 becomes the named platform's size. */
int herd__cluster_resolve(const herd__cluster_flags *o, herd__cluster *c, size_t *workers);

/* Writes the host file of n workers, and the platform unless c is a user's
 * file. */
int herd__cluster_write(const herd__cluster *c, size_t n, const char *xml_path, const char *hosts_path);

/* "HERD_SIM_PSTATES=H:P,..." into buf (cap bytes): the pstate P of each
 * host H of n that --slow slows (herd-sim sets it, sim.h); nothing after
 * the '=' for a user's file or no slow host. */
int herd__cluster_pstates(const herd__cluster *c, size_t n, char *buf, size_t cap);

/* Frees what c holds (not c). */
void herd__cluster_free(herd__cluster *c);

#endif
