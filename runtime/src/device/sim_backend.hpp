#pragma once
// Private: the sim backend (modelled time on one Asio io_context thread).

#include <memory>
#include <vector>

#include "device/impl.hpp"
#include "strata/device/sim_profile.hpp"

namespace strata::sim_backend {

class sim_clock;

/// The clock shared by the sim devices of one device_manager: an io_context thread and an epoch.
std::shared_ptr<sim_clock> make_clock(double time_scale, bool follow_host_clock);

/// Creates `count` sim devices named "sim:<first_index + i>" with `profile`'s rates.
std::vector<std::shared_ptr<detail::device_impl>> make_devices(const std::shared_ptr<sim_clock>& clock,
                                                                      int count, int first_index,
                                                                      const sim_profile& profile);

}  // namespace strata::sim_backend
