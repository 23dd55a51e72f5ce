// Compiled with the usage requirements of the lowest layer (broker/tables)
// by ctest broker.upward_include_does_not_compile, which expects it to
// fail: a layer cannot reach the headers of a layer above it.
#include "broker/tables/lease_table.hpp"
#include "broker/handlers/pubsub_handler.hpp"
