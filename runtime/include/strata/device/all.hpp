#pragma once
/// \file
/// Everything of the device layer: device, stream, event, buffer, tensor, specs and the manager.

#include "strata/device/buffer.hpp"
#include "strata/device/device.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/device/error.hpp"
#include "strata/device/event.hpp"
#include "strata/device/kind.hpp"
#include "strata/device/sim_profile.hpp"
#include "strata/device/spec.hpp"
#include "strata/device/stream.hpp"
#include "strata/device/tensor.hpp"
#include "strata/device/work.hpp"
