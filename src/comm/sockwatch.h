/* sockwatch.h — waits for input on this process's sockets (internal to
 * src/comm). The mpi engine's agent (mpi_agent.c) sleeps here between its
 * turns in MPI: a message that reaches the process over TCP (a window
 * request from another host) wakes it at once, with no poll every few
 * microseconds that would take the core from compute. The watcher does not
 * read: the sockets belong to the MPI library, which reads them when the
 * agent next enters MPI. Reentrant; a watcher belongs to one thread. */
#ifndef HERD_COMM_SOCKWATCH_H
#define HERD_COMM_SOCKWATCH_H

#include <stdbool.h>
#include <stddef.h>

struct pollfd;

typedef struct herd__sockwatch {
    struct pollfd *fds; /* the sockets found at the last scan */
    size_t n, cap;
    double next_scan;   /* herd__now() of the next scan */
} herd__sockwatch;

/* Starts with no sockets: the first wait scans. */
void herd__sockwatch_init(herd__sockwatch *s);
/* Waits until a socket of this process, or extra_fd (when >= 0), has
 * input (true) or timeout_us microseconds pass (false). Sockets are looked up again every
 * HERD__SOCKWATCH_RESCAN_S (connections open as peers first talk); one that
 * closes is left out until then. */
bool herd__sockwatch_wait(herd__sockwatch *s, long timeout_us, int extra_fd);
void herd__sockwatch_free(herd__sockwatch *s);

#define HERD__SOCKWATCH_RESCAN_S 0.05

#endif
