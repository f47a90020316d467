#define BOOST_TEST_MODULE strata_device
#include <boost/test/unit_test.hpp>
