// The control of broker.upward_include_does_not_compile: the same set-up
// compiles an include of the layer's own headers (built with the tests).
#include "broker/tables/lease_table.hpp"
