#include "harness.h"

const herd_test herd_tests_kernels[] = {
    HERD_TEST_END,
};
