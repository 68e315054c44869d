#include "harness.h"

const herd_test herd_tests_data[] = {
    HERD_TEST_END,
};
