#define BOOST_TEST_MODULE strata_pipeline
#include <boost/test/unit_test.hpp>
