#include "harness.h"

const herd_test herd_tests_ref[] = {
    HERD_TEST_END,
};
