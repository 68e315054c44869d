#include "harness.h"

const herd_test herd_tests_nn[] = {
    HERD_TEST_END,
};
