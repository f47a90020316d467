#define BOOST_TEST_MODULE strata_reliability
#include <boost/test/unit_test.hpp>
