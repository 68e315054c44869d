/* optim_ref.h — LARS and LAMB in double precision, written from the papers
 * (You et al. 2017, Algorithm 1 with the learning rate outside the
 * momentum as herd's SGD has it; You et al. 2019, Algorithm 2), for
 * checking src/optim's float steps. Whole-model steps only; slow and plain.
 * Ownership: the reference owns its moment arrays; groups must outlive it. */
#ifndef HERD_TESTS_OPTIM_REF_H
#define HERD_TESTS_OPTIM_REF_H

#include <stddef.h>
#include <stdint.h>

#include "herd/herd_optim.h"

typedef struct optim_ref {
    herd_optim_config cfg;
    const herd_param_group *groups;
    size_t ngroups, n;
    double *v;    /* lars: momentum; lamb: first moment */
    double *s;    /* lamb: second moment */
    uint64_t t;   /* steps taken */
} optim_ref;

/* Fails the test when out of memory. */
void optim_ref_init(optim_ref *r, const herd_optim_config *cfg, const herd_param_group *groups, size_t ngroups,
                    size_t n);
void optim_ref_free(optim_ref *r);
/* One step of cfg.optimizer (lars or lamb) on p[0, n) with gradient g at rate lr. */
void optim_ref_step(optim_ref *r, double *p, const double *g, double lr);

#endif
