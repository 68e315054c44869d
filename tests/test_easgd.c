/* Tests of the easgd algorithms — being written. */
#include "harness.h"

const herd_test herd_tests_easgd[] = {
    HERD_TEST_END,
};
