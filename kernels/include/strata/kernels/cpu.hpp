#pragma once

/// \file
/// All CPU kernels of strata::kernels (umbrella header).

#include "strata/kernels/blas.hpp"
#include "strata/kernels/dropout.hpp"
#include "strata/kernels/elementwise.hpp"
#include "strata/kernels/embedding.hpp"
#include "strata/kernels/gemm.hpp"
#include "strata/kernels/isa.hpp"
#include "strata/kernels/linear_cross_entropy.hpp"
#include "strata/kernels/lstm.hpp"
#include "strata/kernels/optimizers.hpp"
#include "strata/kernels/reduce.hpp"
