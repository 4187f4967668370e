// Kubernetes resource quantities ("500m", "2", "1Gi", "1e3"), as much of
// k8s.io/apimachinery's resource.Quantity as the planner needs to add up a
// job's requests (a PodGroup's minResources). Pure, no I/O.
//
// A quantity is held as a whole number of milli-units (int64), like the
// scheduler's view of CPU: anything finer ("100n", "1u") rounds up to the
// next milli-unit, so a sum never understates a request. Values whose
// milli-units do not fit in int64 (above about 9.2e15, e.g. 8 Pi) are refused.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kubetrain::planner {

struct Quantity {
  int64_t milli = 0;

  friend bool operator==(const Quantity&, const Quantity&) = default;
};

// Parses a quantity: an optional sign, digits with an optional fraction, and
// one suffix: binary (Ki Mi Gi Ti Pi Ei), decimal (n u m k M G T P E) or an
// exponent (e3, E-2). InvalidArgument naming `text` otherwise (negative values
// too: requests are never negative).
StatusOr<Quantity> ParseQuantity(std::string_view text);

// The canonical text of q: whole units when q is a whole number of units
// ("4", "2147483648"), else milli-units ("1500m"). ParseQuantity reads it back.
std::string FormatQuantity(Quantity q);

// a + b, InvalidArgument on overflow.
StatusOr<Quantity> AddQuantity(Quantity a, Quantity b);
// a * n (n >= 0), InvalidArgument on overflow.
StatusOr<Quantity> ScaleQuantity(Quantity a, int64_t n);

// Resource name ("cpu", "memory", "nvidia.com/gpu") -> amount.
using ResourceList = std::map<std::string, Quantity>;

}  // namespace kubetrain::planner
