#pragma once
/// Umbrella header for the epifuse library.
#include "epifuse/errors.hpp"
#include "epifuse/dtype.hpp"
#include "epifuse/graph.hpp"
#include "epifuse/spec.hpp"
#include "epifuse/tensor.hpp"
#include "epifuse/reference.hpp"
#include "epifuse/json.hpp"
#include "epifuse/npy.hpp"
#include "epifuse/compare.hpp"
#include "epifuse/jit.hpp"
