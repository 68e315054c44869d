#include "harness.h"

const herd_test herd_tests_cli[] = {
    HERD_TEST_END,
};
