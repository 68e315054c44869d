/* Tests of the ps algorithms — being written. */
#include "harness.h"

const herd_test herd_tests_ps[] = {
    HERD_TEST_END,
};
