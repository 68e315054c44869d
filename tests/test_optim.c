#include "harness.h"

const herd_test herd_tests_optim[] = {
    HERD_TEST_END,
};
