/* Every test suite, listed once. Each X(suite) needs a table
 * `const herd_test herd_tests_<suite>[]` in tests/test_<suite>.c. */
#define HERD_TEST_SUITES(X) \
    X(harness)              \
    X(core)                 \
    X(data)                 \
    X(formats)              \
    X(ref)                  \
    X(kernels)              \
    X(nn)                   \
    X(layers)               \
    X(models)               \
    X(bf16)                 \
    X(optim)                \
    X(train)                \
    X(nonfinite)            \
    X(collectives)         \
    X(comm)                \
    X(ps)                  \
    X(easgd)               \
    X(gossip)              \
    X(ckpt)                \
    X(fuzz)                \
    X(cli)                  \
    X(localsgd)             \
    X(export)               \
    X(outpath)              \
    X(config)               \
    X(threads)              \
    X(args)
