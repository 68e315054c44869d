#include "harness.h"

const herd_test herd_tests_train[] = {
    HERD_TEST_END,
};
