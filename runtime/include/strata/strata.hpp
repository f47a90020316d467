#pragma once
/// \file
/// Everything a user of the actor runtime needs, in one include.

#include "strata/actor.hpp"
#include "strata/actor_ref.hpp"
#include "strata/actor_system.hpp"
#include "strata/behavior.hpp"
#include "strata/error.hpp"
#include "strata/group.hpp"
#include "strata/message.hpp"
#include "strata/requester.hpp"
#include "strata/trace.hpp"
#include "strata/type_meta.hpp"
