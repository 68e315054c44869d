/* A program that embeds herd, built against an installed herd with
 * `cc embed.c $(pkg-config --cflags --libs herd)` and nothing else
 * (tests/install/check.sh): two workers train a linear model with
 * allreduce on synthetic data, and the run's figures come back. The one
 * header, herd.h, brings the whole API; the configuration is set by name,
 * as herd train's flags are. */
#include <stdio.h>

#include <herd/herd.h>

int main(void)
{
    static const char *const opts[][2] = {
        {"data", "synthetic:1x12x12:4"}, {"model", "linear"}, {"algo", "allreduce"}, {"engine", "threads"},
        {"workers", "2"}, {"epochs", "2"}, {"train-limit", "2048"}, {"test-limit", "512"},
    }; /* and nothing on stderr: the library is quiet unless asked */
    herd_config *cfg;
    herd_err err = {0};
    if (herd_config_new(&cfg) != HERD_OK)
        return 1;
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (herd_config_set(cfg, opts[i][0], opts[i][1], &err) != HERD_OK) {
            fprintf(stderr, "embed: %s\n", err.msg);
            return 1;
        }
    herd_train_result res;
    herd_status st = herd_train(cfg, &res, &err);
    herd_config_free(cfg);
    if (st != HERD_OK) {
        fprintf(stderr, "embed: %s\n", err.msg);
        return 1;
    }
    printf("%s %s %zu workers test_acc %.4f\n", res.algo, res.engine, res.workers, res.test_acc);
    int rc = res.test_acc > 0.8 ? 0 : 1;
    herd_train_result_free(&res);
    return rc;
}
