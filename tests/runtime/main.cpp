#define BOOST_TEST_MODULE strata_runtime
#include <boost/test/unit_test.hpp>
