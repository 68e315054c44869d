/* Arithmetic charged in simulated time (simcharge.h). */
#include "core/simcharge.h"

#ifdef HERD_SIM

#include <smpi/smpi.h>
#include <stdlib.h>
#include <string.h>

void herd__sim_charge_flops(double flops)
{
    const char *mode = getenv("HERD_SIM_COMPUTE");
    if (flops > 0 && !(mode && !strcmp(mode, "measured")))
        smpi_execute_flops(flops);
}

#else

void herd__sim_charge_flops(double flops) { (void)flops; }

#endif
