#define BOOST_TEST_MODULE strata_lm
#include <boost/test/unit_test.hpp>
