#pragma once
// Text for HTML pages (the monitoring ports' status pages). Pure.

#include <string>
#include <string_view>

namespace switchyard::text {

// `s` as HTML element content or attribute value: &, <, >, " and ' escaped.
std::string html_escape(std::string_view s);

}  // namespace switchyard::text
