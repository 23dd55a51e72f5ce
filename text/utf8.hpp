#pragma once
// UTF-8 checks for text that is printed or put into JSON. Pure functions.

#include <cstddef>
#include <string_view>

namespace switchyard::text {

// Length of the valid UTF-8 sequence at the front of `s` (1 to 4) and its
// code point in `cp`, or 0 if the front byte does not start one (a
// continuation byte, an overlong form, a surrogate, past U+10FFFF, or a
// truncated sequence). REQUIRES: `s` is not empty.
std::size_t utf8_sequence(std::string_view s, char32_t& cp);

// Valid UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF), control characters allowed: a JSON string can carry it as is.
bool is_utf8(std::string_view s);

// Valid UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF) without control characters (U+0000..U+001F, U+007F..U+009F,
// newlines and tabs included): safe to print as one line of text.
bool is_printable_utf8(std::string_view s);

}  // namespace switchyard::text
