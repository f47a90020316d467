#define BOOST_TEST_MODULE strata_actors
#include <boost/test/unit_test.hpp>
