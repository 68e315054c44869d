/* A program that embeds herd, built against an installed herd with
 * `cc embed.c $(pkg-config --cflags --libs herd)` and nothing else
 * (tests/install/check.sh): two workers train a linear model with
 * allreduce on synthetic data, and the run's figures come back. The one
 * header, herd.h, brings the whole API. */
#include <stdio.h>

#include <herd/herd.h>

int main(void)
{
    herd_train_config cfg;
    herd_train_config_defaults(&cfg);
    cfg.data = "synthetic:1x12x12:4";
    cfg.model = "linear";
    cfg.algo = "allreduce";
    cfg.engine = "threads";
    cfg.workers = 2;
    cfg.epochs = 2;
    cfg.train_limit = 2048;
    cfg.test_limit = 512; /* and nothing on stderr: the library is quiet unless asked */
    herd_train_result res;
    herd_err err = {0};
    if (herd_train(&cfg, &res, &err) != HERD_OK) {
        fprintf(stderr, "embed: %s\n", err.msg);
        return 1;
    }
    printf("%s %s %zu workers test_acc %.4f\n", res.algo, res.engine, res.workers, res.test_acc);
    return res.test_acc > 0.8 ? 0 : 1;
}
