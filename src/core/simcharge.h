/* simcharge.h — arithmetic the sim engine charges outside forward and
 * backward (internal). Under SimGrid (herd-sim, -DHERD_SIM) a rank's real
 * computing costs no simulated time; what a step's FLOPs do not cover is
 * charged here, where it happens: the receive side of an exchange, where an
 * algorithm combines a peer's model or the center into its own (gossip,
 * push-sum, elastic averaging). Reductions inside a collective are not
 * charged: they run inside its transfers' pipeline, as a GPU's collective
 * library runs them. Elsewhere, and with --measured-compute (SimGrid then
 * measures the real arithmetic), these cost nothing. */
#ifndef HERD_CORE_SIMCHARGE_H
#define HERD_CORE_SIMCHARGE_H

#include <stddef.h>

/* FLOPs charged per received float combined into a model: a multiply and an
 * add (x += f (y - x) is three; a weighted sum two; two stands for all). */
#define HERD_SIM_MIX_FLOPS_PER_FLOAT 2.0

/* Executes flops on this rank's simulated host (herd-sim; a no-op elsewhere
 * and under HERD_SIM_COMPUTE=measured). */
void herd__sim_charge_flops(double flops);

/* nfloats received floats were combined into this worker's model. */
static inline void herd__sim_mixed(size_t nfloats)
{
    herd__sim_charge_flops(HERD_SIM_MIX_FLOPS_PER_FLOAT * (double)nfloats);
}

#endif
