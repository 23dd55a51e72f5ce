#pragma once
// The one way this project includes Boost.Asio. Boost 1.74's Asio uses
// std::exchange without including <utility>, which GCC 12's headers no longer
// pull in transitively; include it first.
#include <utility>

#include <boost/asio.hpp>

namespace switchyard {
namespace asio = boost::asio;
}  // namespace switchyard

namespace switchyard {
// Boost 1.74's Asio reports boost::system::error_code (convertible to
// std::error_code); asio-facing code uses this alias.
using asio_error_code = boost::system::error_code;
}  // namespace switchyard
