/* Waits for input on this process's sockets (sockwatch.h). Linux: the
 * sockets are the entries of /proc/self/fd that link to "socket:[...]". */
#include "comm/sockwatch.h"
#include "core/clock.h"

#include <dirent.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void herd__sockwatch_init(herd__sockwatch *s) { memset(s, 0, sizeof *s); }

void herd__sockwatch_free(herd__sockwatch *s)
{
    free(s->fds);
    memset(s, 0, sizeof *s);
}

static void add_fd(herd__sockwatch *s, int fd)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        struct pollfd *p = realloc(s->fds, cap * sizeof *p);
        if (!p)
            return; /* fewer sockets watched: those wait for the timeout */
        s->fds = p, s->cap = cap;
    }
    s->fds[s->n++] = (struct pollfd){.fd = fd, .events = POLLIN};
}

/* The process's sockets now (its own directory's descriptor left out). */
static void scan(herd__sockwatch *s)
{
    s->n = 0;
    s->next_scan = herd__now() + HERD__SOCKWATCH_RESCAN_S;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[sizeof "/proc/self/fd/" + sizeof e->d_name], link[64];
        if (e->d_name[0] == '.')
            continue;
        int fd = atoi(e->d_name);
        if (fd == dirfd(d))
            continue;
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, link, sizeof link - 1);
        if (len > 7 && !memcmp(link, "socket:", 7))
            add_fd(s, fd);
    }
    closedir(d);
}

bool herd__sockwatch_wait(herd__sockwatch *s, long timeout_us, int extra_fd)
{
    if (herd__now() >= s->next_scan) {
        scan(s);
        if (extra_fd >= 0)
            add_fd(s, extra_fd);
    }
    struct timespec ts = {timeout_us / 1000000, (timeout_us % 1000000) * 1000L};
    int k = ppoll(s->fds, s->n, &ts, NULL);
    if (k <= 0)
        return false;
    bool input = false;
    for (size_t i = 0; i < s->n; i++) {
        if (s->fds[i].revents & (POLLHUP | POLLERR | POLLNVAL))
            s->fds[i].fd = -1; /* closed: ppoll skips it until the next scan */
        else if (s->fds[i].revents & POLLIN)
            input = true;
    }
    return input;
}
